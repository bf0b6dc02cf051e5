"""Actor-critic losses for IMPALA-style V-trace learning.

All inputs are time-major (T the unroll length, B the batch): ``[T, B]``
per-step tensors and ``[T, B, A]`` logits over ``A`` discrete actions, float32
(the learner casts its autocast outputs back), except ``actions``, ``[T, B]``
of an integer dtype.  Every ``*_loss`` returns a float32 scalar.

Reduction convention: every loss is a *sum* over time and batch, never a mean;
nothing is divided by T or B (the convention of the IMPALA reference
implementation, Espeholt et al. 2018).  The learning rate therefore scales with
T * B; divide by it at the call site if a mean is wanted.

Optional ``mask`` arguments are ``[T, B]`` 0/1 tensors (bool or float): a step
with mask 0 contributes nothing to the sum and receives no gradient.

Beyond IMPALA, ``vtrace_loss`` can add
  * CLEAR behaviour cloning (Rolnick et al. 2019, "Experience Replay for
    Continual Learning"): a policy term KL(mu || pi) and a value term
    (V - V_mu)^2 that pull the learner towards the replayed behaviour;
  * the LASER trust-region mask (Schmitt et al. 2020, "Off-Policy Actor-Critic
    with Shared Experience Replay"): steps where KL(pi || mu) exceeds a
    threshold are dropped from the V-trace targets and from every loss term
    except the entropy bonus.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F

from zrl.algos import vtrace

__all__ = [
    "VTraceLoss",
    "action_log_probs",
    "policy_gradient_loss",
    "normalized_advantages",
    "baseline_loss",
    "entropy_loss",
    "kl_divergence",
    "laser_mask",
    "policy_cloning_loss",
    "value_cloning_loss",
    "POLICY_CLONING_DIRECTIONS",
    "VALUE_CLONING_FORMS",
    "vtrace_loss",
]

POLICY_CLONING_DIRECTIONS = ("mu_pi", "pi_mu")
"""``"mu_pi"``: KL(mu || pi), the CLEAR paper; ``"pi_mu"``: KL(pi || mu), the reference platform."""

VALUE_CLONING_FORMS = ("squared", "l2_norm")
"""``"squared"``: sum (V - V_mu)^2, the CLEAR paper; ``"l2_norm"``: its square root, the reference platform."""


def _check_logits(name: str, logits: torch.Tensor) -> None:
    if logits.dim() != 3:
        raise ValueError(f"{name} must have rank 3 [T, B, A], got rank {logits.dim()} with shape {tuple(logits.shape)}")


def _check_tb(name: str, tensor: torch.Tensor, expected: tuple, against: str) -> None:
    if tensor.dim() != 2:
        raise ValueError(f"{name} must have rank 2 [T, B], got rank {tensor.dim()} with shape {tuple(tensor.shape)}")
    if tuple(tensor.shape) != tuple(expected):
        raise ValueError(f"{name} has shape {tuple(tensor.shape)} but {against} implies [T, B] = {tuple(expected)}")


def _mask_as(mask: torch.Tensor | None, like: torch.Tensor, against: str) -> torch.Tensor | None:
    """A [T, B] bool or 0/1 mask as a detached float tensor of ``like``'s dtype and device."""
    if mask is None:
        return None
    if not isinstance(mask, torch.Tensor):
        raise TypeError(f"mask must be a torch.Tensor or None, got {type(mask).__name__}")
    _check_tb("mask", mask, tuple(like.shape[:2]), against)
    return mask.detach().to(dtype=like.dtype, device=like.device)


def action_log_probs(logits: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
    """log pi(a_t|x_t) for the taken actions: [T, B, A] logits, [T, B] actions -> [T, B]."""
    _check_logits("logits", logits)
    _check_tb("actions", actions, tuple(logits.shape[:2]), "logits")
    if actions.dtype not in (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8):
        raise ValueError(f"actions must be an integer tensor, got dtype {actions.dtype}")
    log_probs = F.log_softmax(logits, dim=-1)
    return log_probs.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)


def policy_gradient_loss(
    logits: torch.Tensor,
    actions: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """sum_{t,b} -m_t log pi(a_t|x_t) * advantage_t; advantages are detached, m_t = 1 without a mask.

    [T, B, A] logits, [T, B] integer actions, [T, B] advantages, optional [T, B] mask -> scalar.
    """
    _check_logits("logits", logits)
    _check_tb("advantages", advantages, tuple(logits.shape[:2]), "logits")
    log_pi = action_log_probs(logits, actions)
    terms = log_pi * advantages.detach()
    m = _mask_as(mask, terms, "logits")
    if m is not None:
        terms = terms * m
    return -terms.sum()


def normalized_advantages(advantages: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """(A - mean A) / (std A + 1e-8) over the batch's steps (those the mask keeps), detached: PPO's advantage
    normalisation, which makes the policy gradient's scale the same in every game and every phase of training, so
    that the entropy and value weights mean the same everywhere.  A step the mask drops gets a finite value that its
    zero mask then ignores; fewer than two kept steps give zeros.  [T, B] advantages, optional [T, B] mask ->
    [T, B] of the advantages' dtype."""
    if advantages.dim() != 2:
        raise ValueError(f"advantages must have rank 2 [T, B], got shape {tuple(advantages.shape)}")
    a = advantages.detach()
    m = _mask_as(mask, a, "advantages")
    if m is None:
        m = torch.ones_like(a)
    kept = m.sum()
    if kept < 2:
        return torch.zeros_like(a)
    mean = (a * m).sum() / kept
    var = (((a - mean) ** 2) * m).sum() / (kept - 1)
    return (a - mean) / (var.sqrt() + 1e-8)


def baseline_loss(vs: torch.Tensor, values: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """0.5 * sum_{t,b} m_t (vs - values)^2, m_t = 1 without a mask: [T, B], [T, B], optional [T, B] -> scalar.

    ``vs`` is normally a detached V-trace target; it is not detached here so
    the function stays a plain squared error.
    """
    if values.dim() != 2:
        raise ValueError(f"values must have rank 2 [T, B], got rank {values.dim()} with shape {tuple(values.shape)}")
    _check_tb("vs", vs, tuple(values.shape), "values")
    terms = (vs - values) ** 2
    m = _mask_as(mask, values, "values")
    if m is not None:
        terms = terms * m
    return 0.5 * terms.sum()


def entropy_loss(logits: torch.Tensor) -> torch.Tensor:
    """sum_{t,b} sum_a pi log pi, i.e. minus the summed entropy: [T, B, A] logits -> scalar.

    Minimising this loss raises the policy entropy.
    """
    _check_logits("logits", logits)
    log_probs = F.log_softmax(logits, dim=-1)
    return (log_probs.exp() * log_probs).sum()


def kl_divergence(p_logits: torch.Tensor, q_logits: torch.Tensor) -> torch.Tensor:
    """KL(p || q) = sum_a p(a) (log p(a) - log q(a)) per step, p = softmax(p_logits), q = softmax(q_logits).

    [T, B, A], [T, B, A] -> [T, B].  Gradient flows into both arguments; detach
    the one that is a constant at the call site.
    """
    _check_logits("p_logits", p_logits)
    _check_logits("q_logits", q_logits)
    if tuple(q_logits.shape) != tuple(p_logits.shape):
        raise ValueError(f"q_logits has shape {tuple(q_logits.shape)} but p_logits has shape {tuple(p_logits.shape)}")
    log_p = F.log_softmax(p_logits, dim=-1)
    log_q = F.log_softmax(q_logits, dim=-1)
    return (log_p.exp() * (log_p - log_q)).sum(dim=-1)


def laser_mask(learner_logits: torch.Tensor, behaviour_logits: torch.Tensor, threshold: float) -> torch.Tensor:
    """LASER trust-region mask: 1 where KL(pi || mu) <= threshold, 0 where it is larger.

    pi = softmax(learner_logits) (the current policy), mu = softmax(behaviour_logits).
    [T, B, A], [T, B, A] -> [T, B] float mask of the logits' dtype, detached.
    """
    if not threshold >= 0:
        raise ValueError(f"threshold must be a non-negative number, got {threshold!r}")
    with torch.no_grad():
        kl = kl_divergence(learner_logits.detach(), behaviour_logits.detach())
        return (kl <= threshold).to(kl.dtype)


def policy_cloning_loss(
    learner_logits: torch.Tensor,
    behaviour_logits: torch.Tensor,
    direction: str = "mu_pi",
    mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """CLEAR policy cloning: sum_{t,b} m_t KL(mu || pi) (``"mu_pi"``) or m_t KL(pi || mu) (``"pi_mu"``).

    [T, B, A], [T, B, A], optional [T, B] mask -> scalar.  mu (``behaviour_logits``)
    is a constant; the gradient flows into ``learner_logits`` only.  m_t = 1
    without a mask.
    """
    if direction not in POLICY_CLONING_DIRECTIONS:
        raise ValueError(
            f"direction must be one of {POLICY_CLONING_DIRECTIONS} "
            f"('mu_pi' = KL(mu || pi), 'pi_mu' = KL(pi || mu)), got {direction!r}"
        )
    _check_logits("learner_logits", learner_logits)
    _check_logits("behaviour_logits", behaviour_logits)
    behaviour_logits = behaviour_logits.detach()
    if direction == "mu_pi":
        kl = kl_divergence(behaviour_logits, learner_logits)
    else:
        kl = kl_divergence(learner_logits, behaviour_logits)
    m = _mask_as(mask, kl, "learner_logits")
    if m is not None:
        kl = kl * m
    return kl.sum()


def value_cloning_loss(
    values: torch.Tensor,
    behaviour_values: torch.Tensor,
    form: str = "squared",
    mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """CLEAR value cloning of the learner's V(x_t) towards the replayed V_mu(x_t): [T, B] ``values``, [T, B]
    ``behaviour_values``, optional [T, B] mask -> scalar.

    ``"squared"``: sum_{t,b} m_t (V - V_mu)^2 (the CLEAR paper; no 0.5 factor).
    ``"l2_norm"``: sqrt(sum_{t,b} m_t (V - V_mu)^2), the L2 distance between the
    masked tensors (the reference platform); its gradient is 0, not nan, where
    the distance is 0.  ``behaviour_values`` get no gradient; m_t is 0/1, 1
    without a mask.
    """
    if form not in VALUE_CLONING_FORMS:
        raise ValueError(f"form must be one of {VALUE_CLONING_FORMS}, got {form!r}")
    if values.dim() != 2:
        raise ValueError(f"values must have rank 2 [T, B], got rank {values.dim()} with shape {tuple(values.shape)}")
    _check_tb("behaviour_values", behaviour_values, tuple(values.shape), "values")
    diff = values - behaviour_values.detach()
    m = _mask_as(mask, values, "values")
    if m is not None:
        diff = diff * m
    if form == "squared":
        return (diff**2).sum()
    # vector_norm's backward is defined as 0 at the origin, where sqrt(sum(diff^2)) would give nan.
    return torch.linalg.vector_norm(diff, ord=2)


class VTraceLoss(NamedTuple):
    """Total loss and its parts (all scalars).

    ``total = pg_cost * pg + baseline_cost * baseline + entropy_cost * entropy
    + clear_policy_weight * policy_cloning + clear_value_weight * value_cloning``;
    a cloning term whose weight is 0 is returned as a zero and left out of ``total``.
    ``mean_rho`` is the mean unclipped importance weight and ``masked_fraction``
    the fraction of the T * B steps the LASER mask dropped (0 when LASER is off);
    both are detached diagnostics.
    """

    total: torch.Tensor
    pg: torch.Tensor
    baseline: torch.Tensor
    entropy: torch.Tensor
    mean_rho: torch.Tensor
    policy_cloning: torch.Tensor
    value_cloning: torch.Tensor
    masked_fraction: torch.Tensor


def vtrace_loss(
    learner_logits: torch.Tensor,
    behaviour_logits: torch.Tensor,
    actions: torch.Tensor,
    values: torch.Tensor,
    bootstrap_value: torch.Tensor,
    rewards: torch.Tensor,
    discounts: torch.Tensor,
    baseline_cost: float = 0.5,
    entropy_cost: float = 0.01,
    clip_rho_threshold: float | None = 1.0,
    clip_pg_rho_threshold: float | None = 1.0,
    *,
    behaviour_values: torch.Tensor | None = None,
    clip_c_threshold: float | None = 1.0,
    laser_kl_threshold: float | None = None,
    clear_policy_weight: float = 0.0,
    clear_value_weight: float = 0.0,
    clear_policy_kl: str = "mu_pi",
    clear_value_loss: str = "squared",
    pg_cost: float = 1.0,
    normalize_advantages: bool = False,
) -> VTraceLoss:
    """IMPALA actor-critic loss with V-trace off-policy correction.

    Args:
        learner_logits: [T, B, A] float32 logits of the current (target) policy pi, with grad.
        behaviour_logits: [T, B, A] float32 logits of the actors' policy mu.
        actions: [T, B] integer actions taken by the actors.
        values: [T, B] float32 learner value estimates V(x_t), with grad.
        bootstrap_value: [B] float32 learner value estimate of the state after the unroll.
        rewards: [T, B] float32 rewards.
        discounts: [T, B] float32 per-step discounts, already gamma * (1 - done).
        baseline_cost: weight of the baseline (value) loss.
        entropy_cost: weight of the entropy loss.
        clip_rho_threshold: V-trace rho_bar for the targets (None: no clipping).
        clip_pg_rho_threshold: rho_bar for the pg advantages (None: no clipping).
        behaviour_values: [T, B] float32 the actors' value estimates V_mu(x_t), stored
            with the unroll; needed only when ``clear_value_weight > 0``.
        clip_c_threshold: V-trace c_bar for the trace coefficients (None: no clipping).
        laser_kl_threshold: LASER: drop steps with KL(pi || mu) above this from
            the V-trace targets, the pg, baseline and both cloning terms (not
            the entropy term).  None or 0 turns LASER off.
        clear_policy_weight: weight of the CLEAR policy-cloning term.
        clear_value_weight: weight of the CLEAR value-cloning term.
        clear_policy_kl: policy-cloning direction, one of ``POLICY_CLONING_DIRECTIONS``.
        clear_value_loss: value-cloning form, one of ``VALUE_CLONING_FORMS``.
        pg_cost: weight of the policy-gradient loss (``pg`` is returned unweighted).
        normalize_advantages: train the policy on ``normalized_advantages`` of
            V-trace's (over the steps the LASER mask keeps), not on the raw ones.

    Returns:
        VTraceLoss(total, pg, baseline, entropy, mean_rho, policy_cloning,
        value_cloning, masked_fraction), float32 scalars.  Every term is summed
        over T and B (no division by batch size).
    """
    _check_logits("learner_logits", learner_logits)
    _check_logits("behaviour_logits", behaviour_logits)
    if tuple(behaviour_logits.shape) != tuple(learner_logits.shape):
        raise ValueError(
            f"behaviour_logits has shape {tuple(behaviour_logits.shape)} but "
            f"learner_logits has shape {tuple(learner_logits.shape)}"
        )
    tb = tuple(learner_logits.shape[:2])
    _check_tb("actions", actions, tb, "learner_logits")
    _check_tb("values", values, tb, "learner_logits")
    _check_tb("rewards", rewards, tb, "learner_logits")
    _check_tb("discounts", discounts, tb, "learner_logits")
    if bootstrap_value.dim() != 1 or bootstrap_value.shape[0] != tb[1]:
        raise ValueError(f"bootstrap_value must have shape [B] = ({tb[1]},), got {tuple(bootstrap_value.shape)}")
    if behaviour_values is not None:
        _check_tb("behaviour_values", behaviour_values, tb, "learner_logits")
    if clear_policy_kl not in POLICY_CLONING_DIRECTIONS:
        raise ValueError(f"clear_policy_kl must be one of {POLICY_CLONING_DIRECTIONS}, got {clear_policy_kl!r}")
    if clear_value_loss not in VALUE_CLONING_FORMS:
        raise ValueError(f"clear_value_loss must be one of {VALUE_CLONING_FORMS}, got {clear_value_loss!r}")
    weights = (("clear_policy_weight", clear_policy_weight), ("clear_value_weight", clear_value_weight))
    for name, weight in (*weights, ("pg_cost", pg_cost)):
        if not weight >= 0:
            raise ValueError(f"{name} must be non-negative, got {weight!r}")
    if clear_value_weight > 0 and behaviour_values is None:
        raise ValueError(
            "clear_value_weight > 0 needs behaviour_values: CLEAR value cloning regresses "
            "the learner's values towards the actors' V_mu(x_t)"
        )
    if laser_kl_threshold is not None and not laser_kl_threshold >= 0:
        raise ValueError(f"laser_kl_threshold must be non-negative or None, got {laser_kl_threshold!r}")

    with torch.no_grad():
        log_rhos = action_log_probs(learner_logits, actions) - action_log_probs(behaviour_logits, actions)
        mean_rho = torch.exp(log_rhos).mean()

    if laser_kl_threshold:
        mask = laser_mask(learner_logits, behaviour_logits, laser_kl_threshold)
        masked_fraction = (1.0 - mask.mean()).to(values.dtype)
    else:
        mask = None
        masked_fraction = values.new_zeros(())

    vt = vtrace.from_importance_weights(
        log_rhos=log_rhos,
        discounts=discounts,
        rewards=rewards,
        values=values,
        bootstrap_value=bootstrap_value,
        clip_rho_threshold=clip_rho_threshold,
        clip_pg_rho_threshold=clip_pg_rho_threshold,
        clip_c_threshold=clip_c_threshold,
        mask=mask,
    )

    advantages = normalized_advantages(vt.pg_advantages, mask) if normalize_advantages else vt.pg_advantages
    pg = policy_gradient_loss(learner_logits, actions, advantages, mask=mask)
    baseline = baseline_loss(vt.vs, values, mask=mask)
    entropy = entropy_loss(learner_logits)
    total = pg_cost * pg + baseline_cost * baseline + entropy_cost * entropy
    # A term whose weight is 0 stays out of total, so it cannot change it (not even a nan through 0 * nan).
    policy_cloning = values.new_zeros(())
    if clear_policy_weight > 0:
        policy_cloning = policy_cloning_loss(learner_logits, behaviour_logits, clear_policy_kl, mask=mask)
        total = total + clear_policy_weight * policy_cloning
    value_cloning = values.new_zeros(())
    if clear_value_weight > 0:
        assert behaviour_values is not None  # refused on entry otherwise
        value_cloning = value_cloning_loss(values, behaviour_values, clear_value_loss, mask=mask)
        total = total + clear_value_weight * value_cloning
    return VTraceLoss(
        total=total,
        pg=pg,
        baseline=baseline,
        entropy=entropy,
        mean_rho=mean_rho,
        policy_cloning=policy_cloning,
        value_cloning=value_cloning,
        masked_fraction=masked_fraction,
    )
