"""Wire protocol: every message that crosses a zrl socket, and the weights frame. Layer 0: imports only numpy,
msgspec and the standard library (and nothing of zrl outside this package). No pickle.

- ``framework``: how a message type is declared (``Message``, ``Array``, ``Length``, ``Stat``), checked, encoded
  and decoded (``decode``: strict, raising only ``ProtocolError``);
- ``messages``: the core's messages between the roles (episodes, flow control, replay index, errors, evaluation);
- ``stats``: the roles' reports, whose ``Stat`` fields are the columns of metrics.csv;
- ``remote``: a remote worker's session with the run's ingest;
- ``weights``: the learner's parameters as one binary frame.

An agent's own messages (its workers' experience, its broker's batches) are declared in its package
(``zrl/agents/<name>/messages.py``) with the same framework; ``decode`` knows every type declared in the process.
"""

from zrl.protocol.framework import (
    FORMAT_VERSION,
    MAX_MESSAGE_BYTES,
    TRACEBACK_CHARS,
    Array,
    Count,
    Length,
    Message,
    ProtocolError,
    Stat,
    Text,
    decode,
    message_types,
)
from zrl.protocol.messages import (
    Credit,
    Episode,
    EvalRequest,
    EvalResult,
    IndexRequest,
    ReplayIndex,
    RoleError,
    SaveReplay,
    WeightsRequest,
)
from zrl.protocol.remote import Ack, Join, Leave, Notice, Refused, RemoteData, Welcome
from zrl.protocol.stats import BrokerStats, EvaluatorStats, IngestStats, LearnerStats, WorkerStats
from zrl.protocol.weights import WEIGHTS_HEADER_BYTES, WEIGHTS_MAGIC, decode_weights, encode_weights

__all__ = [
    "FORMAT_VERSION",
    "MAX_MESSAGE_BYTES",
    "TRACEBACK_CHARS",
    "WEIGHTS_HEADER_BYTES",
    "WEIGHTS_MAGIC",
    "Ack",
    "Array",
    "BrokerStats",
    "Count",
    "Credit",
    "Episode",
    "EvalRequest",
    "EvalResult",
    "EvaluatorStats",
    "IndexRequest",
    "IngestStats",
    "Join",
    "LearnerStats",
    "Leave",
    "Length",
    "Message",
    "Notice",
    "ProtocolError",
    "Refused",
    "RemoteData",
    "ReplayIndex",
    "RoleError",
    "SaveReplay",
    "Stat",
    "Text",
    "WeightsRequest",
    "Welcome",
    "WorkerStats",
    "decode",
    "decode_weights",
    "encode_weights",
    "message_types",
]
