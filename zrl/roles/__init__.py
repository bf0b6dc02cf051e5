"""The process roles: worker, broker, learner; each a run(...) the launcher starts (a fork of its fork server, zrl/launch/wiring.py)."""
