"""Softmax / log-softmax over a short last dimension (PPO speed on the CPU).

PyTorch's CPU kernels for ``softmax(x, dim=-1)`` are slow when the last dimension is short (the K+1 ≤ 11 choices,
the ≤ 11 attention keys): about 10 ns per element. Moving that dimension to the front and reducing over dim 0 of a
contiguous tensor runs the vectorised kernel, 8–13× faster forward and backward. ``log_softmax_last`` gives
bit-identical values and gradients to ``torch.log_softmax(x, -1)``; ``softmax_last`` agrees with ``torch.softmax``
to 1 ulp (the kernels normalise differently). Pure functions, autograd-safe.
"""

from __future__ import annotations

import torch


def log_softmax_last(x: torch.Tensor) -> torch.Tensor:
    """``torch.log_softmax(x, dim=-1)``, computed along dim 0 of the transposed copy."""
    return torch.log_softmax(x.movedim(-1, 0).contiguous(), dim=0).movedim(0, -1)


def softmax_last(x: torch.Tensor) -> torch.Tensor:
    """``torch.softmax(x, dim=-1)``, computed along dim 0 of the transposed copy."""
    return torch.softmax(x.movedim(-1, 0).contiguous(), dim=0).movedim(0, -1)
