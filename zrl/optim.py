"""The learners' optimisers: which one a config asks for, its learning-rate decay, loading its state from a
checkpoint, and TFRMSprop, which PyTorch does not ship in the form the reference agents used."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import torch

from zrl.config.sizing import lr_left

if TYPE_CHECKING:
    from zrl.config import LearnerConfig


class TFRMSprop(torch.optim.Optimizer):
    """RMSprop as TensorFlow 1's ``RMSPropOptimizer``, which IMPALA's reference implementation trained with.

    Two differences from ``torch.optim.RMSprop``: the mean square starts at 1, not 0, and epsilon sits inside
    the square root::

        ms  <- alpha * ms + (1 - alpha) * g^2          (ms_0 = 1)
        mom <- momentum * mom + lr * g / sqrt(ms + eps)
        p   <- p - mom

    With ms starting at 0, PyTorch's first step divides by sqrt((1 - alpha) g^2) = 0.1 |g|, a step of about
    10 x lr in every coordinate whatever the gradient's size; starting at 1 the first steps are about lr x g.
    """

    def __init__(self, params, lr: float, alpha: float = 0.99, eps: float = 0.01, momentum: float = 0.0) -> None:
        if not (lr > 0 and 0 <= alpha < 1 and eps > 0 and momentum >= 0):
            raise ValueError(
                f"TFRMSprop: needs lr > 0, 0 <= alpha < 1, eps > 0, momentum >= 0; got {lr}, {alpha}, {eps}, {momentum}"
            )
        super().__init__(params, {"lr": lr, "alpha": alpha, "eps": eps, "momentum": momentum})

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            lr, alpha, eps, momentum = group["lr"], group["alpha"], group["eps"], group["momentum"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                g = p.grad
                state = self.state[p]
                if not state:
                    state["step"] = torch.zeros((), dtype=torch.float32)
                    state["square_avg"] = torch.ones_like(p, memory_format=torch.preserve_format)
                state["step"] += 1
                ms = state["square_avg"]
                ms.mul_(alpha).addcmul_(g, g, value=1 - alpha)
                denom = ms.add(eps).sqrt_()
                if momentum > 0:
                    if "momentum_buffer" not in state:  # momentum may be set after the first step
                        state["momentum_buffer"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    buf = state["momentum_buffer"]
                    buf.mul_(momentum).addcdiv_(g, denom, value=lr)
                    p.sub_(buf)
                else:
                    p.addcdiv_(g, denom, value=-lr)
        return loss


def make_optimizer(model: torch.nn.Module, cfg: LearnerConfig, total_steps: int):
    """The optimiser and its learning-rate schedule (``lr_factor``; total_steps: the polynomial decay's)."""
    if cfg.optimizer == "adam":
        # fused: one kernel for all parameters instead of a loop of small ops, a faster Ape-X update (perf/README.md,
        # "Rainbow-IQN Ape-X on Pong"). The same Adam, to rounding.
        opt: torch.optim.Optimizer = torch.optim.Adam(
            model.parameters(), lr=cfg.learning_rate, eps=cfg.adam_eps, fused=True
        )
    elif cfg.optimizer == "rmsprop_tf":
        opt = TFRMSprop(
            model.parameters(),
            lr=cfg.learning_rate,
            alpha=cfg.rmsprop_alpha,
            eps=cfg.rmsprop_eps,
            momentum=cfg.rmsprop_momentum,
        )
    else:
        opt = torch.optim.RMSprop(
            model.parameters(),
            lr=cfg.learning_rate,
            alpha=cfg.rmsprop_alpha,
            eps=cfg.rmsprop_eps,
            momentum=cfg.rmsprop_momentum,
        )
    return opt, torch.optim.lr_scheduler.LambdaLR(opt, lr_factor(cfg, total_steps))


def lr_factor(cfg: LearnerConfig, total_steps: int) -> Callable[[int], float]:
    """The learning rate's factor at a learner step under learner.lr_schedule (``lr_left``): polynomial, a decay to
    lr_end over total_steps; multistep, lr_gamma at each milestone. One LambdaLR for both, so that a checkpoint's
    scheduler state fits either."""
    left = lr_left(cfg, total_steps)
    if cfg.lr_schedule == "multistep":
        return left
    start, end = cfg.learning_rate, cfg.lr_end
    return lambda step: ((start - end) * left(step) + end) / start


def load_optimizer_state(optimizer: torch.optim.Optimizer, state: dict, keep_configured: bool) -> None:
    """Load a checkpoint's optimiser state. ``keep_configured`` (a new run started from another's checkpoint
    with --init-optimizer) takes only its moments and keeps this config's hyperparameters: learning rate, eps,
    alpha, momentum. A resume takes everything."""
    configured = [{k: v for k, v in g.items() if k != "params"} for g in optimizer.param_groups]
    optimizer.load_state_dict(state)
    if keep_configured:
        for group, mine in zip(optimizer.param_groups, configured):
            group.update(mine)
