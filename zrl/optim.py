"""Optimisers that PyTorch does not ship in the form the reference agents used."""

from __future__ import annotations

import torch


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
