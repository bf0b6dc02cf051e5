"""zrl: distributed RL on ZeroMQ and shared memory."""

__version__ = "0.1.0"
