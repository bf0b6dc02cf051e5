"""Ape-X's config section, ``[apex]``: exploration, n-step targets, prioritized replay and the IQN or C51 head,
with their rules. A leaf: it imports nothing of zrl but the error type, so that ``zrl.config`` composes it into
the run's config without importing the agent."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from msgspec import Meta

from zrl.errors import choice, fail

SECTION = "apex"
APEX_HEADS = ("iqn", "c51")


@dataclass(frozen=True)
class ApexConfig:
    epsilon: Annotated[
        float,
        Meta(
            ge=0,
            le=1,
            description="Ape-X exploration: worker i of N acts epsilon-greedily with epsilon ** (1 + epsilon_alpha * i / (N - 1)) (unused when noisy: the noise explores).",
        ),
    ] = 0.4
    epsilon_alpha: Annotated[
        float, Meta(ge=0, description="The exponent's spread across workers in the Ape-X epsilon schedule.")
    ] = 7.0
    n_step: Annotated[
        int, Meta(ge=1, description="Steps of return in each transition's target (n-step double Q-learning).")
    ] = 3
    priority_batch: Annotated[
        int,
        Meta(
            ge=1,
            description="Transitions a worker collects before it computes their initial priorities with its network copies and sends them.",
        ),
    ] = 1000
    worker_priorities: Annotated[
        bool,
        Meta(
            description="Workers compute initial priorities (loss ** priority_exponent); false sends them as unknown, which the replay gives its largest priority."
        ),
    ] = True
    priority_exponent: Annotated[
        float, Meta(ge=0, description="omega: a transition's priority is its loss to this power.")
    ] = 0.5
    importance_beta: Annotated[
        float,
        Meta(
            ge=0,
            le=1,
            description="Exponent of the importance weights (N * P) ** -beta at the start; it anneals linearly to 1.",
        ),
    ] = 0.4
    beta_anneal_steps: Annotated[
        int, Meta(ge=0, description="Learner steps over which beta reaches 1; 0 derives them from run.max_env_frames.")
    ] = 0
    learn_start: Annotated[int, Meta(ge=1, description="Transitions the replay holds before the learner starts.")] = (
        80_000
    )
    target_update: Annotated[
        int, Meta(ge=1, description="Learner steps between copies of the online network into the target network.")
    ] = 2000
    head: Annotated[
        str,
        Meta(
            description='iqn (implicit quantiles) or c51 (categorical on atoms, "Rainbow only"; v_min..v_max must cover the discounted returns).'
        ),
    ] = "iqn"
    quantiles: Annotated[int, Meta(ge=1, description="IQN: N, fractions sampled for the online quantiles.")] = 64
    target_quantiles: Annotated[int, Meta(ge=1, description="IQN: N', fractions sampled for the target quantiles.")] = (
        64
    )
    acting_quantiles: Annotated[
        int,
        Meta(
            ge=1,
            description="IQN: K, fractions whose mean quantile is the Q-value for acting and for the double-Q action.",
        ),
    ] = 32
    embedding_dim: Annotated[int, Meta(ge=1, description="IQN: length of the cosine embedding of a fraction.")] = 64
    state_size: Annotated[
        int,
        Meta(
            ge=0,
            description="IQN and C51: width of a linear layer (and ReLU) between torso and heads; each IQN quantile row then costs it, not the torso's width (2,592 atari_small, 3,136 atari). 0: none, as the papers.",
        ),
    ] = 0
    kappa: Annotated[float, Meta(gt=0, description="IQN: threshold of the quantile Huber loss.")] = 1.0
    noisy: Annotated[
        bool,
        Meta(
            description="Dueling heads of factorised noisy linear layers; workers then act greedily on the noisy Q-values (epsilon is not used)."
        ),
    ] = True
    noisy_sigma0: Annotated[
        float,
        Meta(ge=0, description="Initial noise scale of the noisy layers, divided by the square root of their fan-in."),
    ] = 0.1
    atoms: Annotated[int, Meta(description="C51: atoms of the return distribution.")] = 51
    v_min: Annotated[float, Meta(description="C51: smallest atom.")] = -10.0
    v_max: Annotated[float, Meta(description="C51: largest atom.")] = 10.0
    replay_ratio: Annotated[
        float,
        Meta(
            ge=0,
            description="Keep about one learner update per this many worker env steps (summed over workers); 0: workers run free.",
        ),
    ] = 0.0

    def check(self) -> None:
        """The section's own rules, for every run whatever its algo: a known head, and C51's atoms."""
        choice("apex.head", self.head, APEX_HEADS)
        if self.head == "c51" and (self.atoms < 2 or not self.v_min < self.v_max):
            fail(
                "apex.atoms",
                f"C51 needs at least 2 atoms and v_min < v_max, got {self.atoms}, {self.v_min}, {self.v_max}",
            )


def check(cfg) -> None:
    """Ape-X's rules on a whole config (bounds are the fields' own): one prioritized replay that holds what the
    learner starts on and a worker's block, and no deterministic run. (Its section's bounds, head and atoms hold
    for every run: the fields' own, and ApexConfig.check.)"""
    prioritized = [i for i, rep in enumerate(cfg.replay) if rep.type == "prioritized"]
    if len(cfg.replay) != 1 or not prioritized:
        fail(
            "replay", 'algo = "apex_iqn" takes exactly one [[replay]], of type "prioritized" (capacity in transitions)'
        )
    a = cfg.apex
    if cfg.run.deterministic:
        fail(
            "run.deterministic",
            'algo = "apex_iqn" runs are not deterministic (workers and learner run free); set run.deterministic = false',
        )
    if cfg.learner.replay_ratio:
        fail(
            "learner.replay_ratio",
            f"{cfg.learner.replay_ratio:g}: Ape-X is paced by apex.replay_ratio (worker env steps per learner "
            "update); set learner.replay_ratio = 0 (its default, 4, is the V-trace family's reuse)",
        )
    capacity = cfg.replay[prioritized[0]].capacity
    if a.learn_start > capacity:
        fail("apex.learn_start", f"{a.learn_start} transitions is more than the replay holds ({capacity})")
    if a.priority_batch > capacity:
        fail(
            "apex.priority_batch",
            f"a worker's block of {a.priority_batch} transitions does not fit the replay ({capacity})",
        )
