"""Linear layers with pre-transposed weights, for short-batch CPU inference.

``nn.Linear`` computes ``x @ W.T``. On CPU, MKL's sgemm with a transposed right operand and few
rows (a query batch: 5-40 tokens) is several times slower than the same product with the weight
stored transposed and contiguous (docs/performance.md, "Figures behind the code's choices").
Query encoding is exactly that shape, and it is most of a search's latency, so stores swap their
encoder's linear layers for :class:`TransposedLinear` when it runs on CPU. The result is the
same product (differences are float rounding, ~1e-7 after normalisation); the weights are stored
once, transposed.
"""

from __future__ import annotations

import torch
from torch import nn


class TransposedLinear(nn.Module):
    """``y = x @ weight_t + bias`` with ``weight_t`` = the original weight, transposed, contiguous."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        self.in_features = linear.in_features
        self.out_features = linear.out_features
        self.weight_t = nn.Parameter(linear.weight.detach().t().contiguous(), requires_grad=False)
        self.bias = (
            nn.Parameter(linear.bias.detach().clone(), requires_grad=False)
            if linear.bias is not None
            else None
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, self.in_features)
        y = torch.addmm(self.bias, flat, self.weight_t) if self.bias is not None else flat @ self.weight_t
        return y.reshape(*x.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"
        )


def transpose_linear_layers(module: nn.Module) -> int:
    """Replace every ``nn.Linear`` under ``module`` (in place) by a :class:`TransposedLinear`.

    Returns how many layers were replaced. Only for inference: the copies do not train.
    """
    replaced = 0
    for name, child in list(module.named_children()):
        if type(child) is nn.Linear:
            setattr(module, name, TransposedLinear(child))
            replaced += 1
        else:
            replaced += transpose_linear_layers(child)
    return replaced
