"""What the one worker, broker and learner loops ask of an agent's parts, as ``typing.Protocol`` classes that the
type checker holds each agent's parts to (mypy, strict on this module; each part module states its conformance
with a ``_: type[Actor] = VtraceActor`` line that mypy checks).

An agent (``zrl.agents.Agent``) names three parts, each a class its loop builds once per process:

- ``Actor(worker_id, cfg, wiring, offset, ring)``: in each worker, picks actions and turns steps into messages;
- ``BrokerPart(cfg, wiring, rings)``: in the broker, stores its workers' messages and makes batches of them;
- ``LearnerPart(cfg, wiring, rings, device)``: in the learner, gathers a batch's frames and trains on them.

The loops own the sockets, the rings, the weights, the pacing, the counts and the checkpoints' files; a part owns
what is specific to its agent. Imports nothing of zrl at run time but the registry's types, so that the registry
stays light.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Generic, NamedTuple, Protocol, TypeVar

if TYPE_CHECKING:
    import numpy as np
    import torch

    from zrl.agents import Outgoing, Trained


class WorkerView(Protocol):
    """What an actor reads of the worker loop, and the two things it may ask of it."""

    @property
    def seq(self) -> int: ...  # the number of the worker's next message

    @property
    def policy_version(self) -> int: ...  # the weights version the worker acts with

    @property
    def learner_step(self) -> int: ...  # the learner step those weights were published at

    @property
    def env_steps(self) -> int: ...  # env steps this worker took (all its envs), over its restarts

    @property
    def env_frames(self) -> int: ...

    @property
    def weight_updates(self) -> int: ...  # new weights taken since the worker started

    @property
    def live_workers(self) -> int: ...  # workers sharing the learner's appetite now

    def advance(self, action: np.ndarray, episodes: bool = True) -> tuple[Any, int]:
        """Step the envs with ``action`` ``[M]``: the step (rewards, done flags, frames) and its frames' ring slot."""
        ...

    def heartbeat(self) -> None:
        """Send the worker's stats if they are due (in a long loop of the actor's own, such as a replay)."""
        ...


class Experience(Protocol):
    """What the loops read of a worker's message (an agent's ``BrokerPart.message_type``): who sent it, its number
    in the sender's sequence, and the env frames the sender had played; and how the run's ingest renumbers a remote
    worker's into its slot of the rings."""

    @property
    def worker_id(self) -> int: ...

    @property
    def seq(self) -> int: ...

    @property
    def env_frames(self) -> int: ...

    def renumbered(self, seq: int, offset: int, low: int, high: int) -> Experience:
        """This message numbered ``seq``, its frames moved by ``offset``; a ValueError unless they lie in
        ``[low, high)``, the frames the remote worker has sent."""
        ...


class Actor(Protocol):
    """An agent's part in each worker. The loop resets the envs and calls ``begin``, then per step ``act``, steps
    the envs, and ``record``; it sends what ``record`` returns. After a message (or after every step, with
    ``paces_every_step``) it takes new weights and, while ``due_version`` is newer than the weights it acts with,
    waits for them: at most ``workers.max_weights_wait_s``, or for as long as it takes with ``lockstep``."""

    @property
    def model(self) -> torch.nn.Module: ...  # the network it acts with; the loop loads the learner's weights into it

    @property
    def paces_every_step(self) -> bool: ...

    @property
    def lockstep(self) -> bool: ...

    def begin(self, worker: WorkerView, slot: int) -> None:
        """The envs were reset and their first frames written into ring slot ``slot``."""
        ...

    def act(self, obs: torch.Tensor) -> np.ndarray:
        """Actions ``[M]`` int for the stacked observations ``obs`` ``[M, S, *frame_shape]``."""
        ...

    def record(self, worker: WorkerView, action: np.ndarray, step: Any, slot: int) -> Outgoing | None:
        """Keep what the step ``step`` brought (its frames are in ring slot ``slot``); a message for the broker when
        one is complete."""
        ...

    def weights_taken(self, versions: int) -> None:
        """The loop took weights ``versions`` newer than the ones before."""
        ...

    def due_version(self, worker: WorkerView) -> int:
        """The weights version the worker must act with before it goes on: how far ahead of the learner it may
        run. At most ``worker.policy_version``: go on."""
        ...


class BrokerPart(Protocol):
    """An agent's part in the broker. The loop decodes its workers' messages of ``message_type`` (and, with a
    ``reply_type``, the learner's replies), hands them over, and asks for a batch whenever the learner has a
    credit; it counts, reports and checkpoints what the part says."""

    @property
    def message_type(self) -> type: ...  # what its workers send

    @property
    def inbox_per_turn(self) -> int: ...  # messages taken per turn of the loop

    @property
    def reply_type(self) -> type | None: ...  # what its learner sends back (a ReplyingBroker), or None

    @property
    def wants_weights(self) -> bool: ...  # it needs the current policy: it is a WeightsTaker

    def units(self, msg: Any) -> int:
        """The units (unrolls' env rows, transitions) a worker's message carries."""
        ...

    def insert(self, msg: Any) -> str | None:
        """Store a worker's message, or say why it cannot be from this run's workers."""
        ...

    def next_batch(self, batch_id: int, env_frames: int, env_steps: int) -> tuple[bytes, Any] | None:
        """A batch's encoded message and what to give back should it not be sent; None while none can be made."""
        ...

    def put_back(self, taken: Any) -> None:
        """A batch ``next_batch`` made could not be sent: take back what it took."""
        ...

    def index(self) -> bytes | None:
        """The replay index for the learner's checkpoint, encoded; None where the replay is saved whole."""
        ...

    def snapshot(self) -> dict[str, np.ndarray]:
        """Every replay's content, as arrays (run.checkpoint_replay)."""
        ...

    def restore(self, state: dict[str, np.ndarray]) -> int:
        """Hold what ``snapshot`` saved; the units held."""
        ...

    def oldest_frames(self) -> np.ndarray:
        """``[W]`` int64: each ring's oldest frame that a unit held reads."""
        ...

    def stats(self) -> dict[str, Any]:
        """Its BrokerStats fields (replay sizes, drops, times) and ``figures``, the agent's broker figures."""
        ...


class WeightsTaker(Protocol):
    """A broker part that wants the current policy (``wants_weights``: elite replay's feature passes)."""

    def load_weights(self, version: int, flat: np.ndarray) -> None:
        """The learner's weights ``flat`` ``[P]`` float32 of ``version``."""
        ...


class ReplyingBroker(BrokerPart, Protocol):
    """A broker part whose learner sends replies (``reply_type``; Ape-X's new priorities)."""

    def reply(self, msg: Any) -> str | None:
        """Apply the learner's reply, or say why it cannot be from this run's learner."""
        ...


G = TypeVar("G")  # what a learner part's gather hands its step


class Gathered(NamedTuple, Generic[G]):
    """A batch as a learner part gathered it: ``batch``, what its step trains on (None when every unit was torn),
    and ``torn``, the units whose frames were overwritten before they were read."""

    batch: G | None
    torn: int


class LearnerPart(Protocol[G]):
    """An agent's part in the learner. The loop decodes the broker's messages of ``batch_types``, refuses those
    that ``misfit``, lets the part ``take`` those that are not batches, and for a batch calls ``gather`` then
    ``step``; it publishes the weights of ``model``, and writes ``state()`` into checkpoints."""

    @property
    def batch_types(self) -> tuple[type, ...]: ...  # what the broker sends on the batches socket

    @property
    def asks_replay_index(self) -> bool: ...  # the loop asks the broker for its replay index, for checkpoints

    @property
    def replies(self) -> bool: ...  # a step may reply to the broker (Trained.reply)

    @property
    def model(self) -> torch.nn.Module: ...  # the network the workers act with: the loop publishes its weights

    @property
    def optimizer(self) -> torch.optim.Optimizer: ...

    @property
    def scheduler(self) -> Any: ...  # a torch learning-rate scheduler

    def load(self, state: dict[str, Any], resume: bool, optimizer: bool) -> None:
        """Take a checkpoint's entries (its optimiser state with ``optimizer``; its schedule with ``resume``)."""
        ...

    def state(self) -> dict[str, Any]:
        """This agent's entries of a checkpoint."""
        ...

    def misfit(self, message: Any) -> str | None:
        """Why a well-formed message cannot be from this run's broker, or None."""
        ...

    def take(self, message: Any) -> bool:
        """Keep a message that is not a batch (True), or leave a batch to the loop (False)."""
        ...

    def gather(self, batch: Any) -> Gathered[G]:
        """The batch's frames out of the rings, and what the step needs of it."""
        ...

    def step(self, gathered: G, learner_step: int, policy_version: int) -> Trained:
        """One update on a gathered batch (``learner_step``: the step it takes, from 1)."""
        ...


def message_types() -> tuple[type, ...]:
    """Every message type of the wire: the core's and every registered agent's (their modules imported)."""
    import importlib

    from zrl import agents, protocol

    for name in agents.REGISTRY:
        importlib.import_module(agents.get(name).messages)
    return protocol.message_types()
