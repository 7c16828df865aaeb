"""The torch engine: the sentence-transformers model, loaded once per process, its CPU linear
layers stored transposed: MKL's sgemm with a transposed right operand and few rows (a query
batch) is several times slower than with the weight stored transposed and contiguous
(docs/performance.md, "Figures behind the code's choices"); the product is the same up to rounding.
"""

from __future__ import annotations

import os
import threading
from functools import lru_cache
from typing import Any, NamedTuple

import torch
from torch import nn

from parallelsearch.stores.encoding.backend import check_device


class LoadedModel(NamedTuple):
    model: Any
    # the Rust tokenizer has mutable state: two threads tokenising at once fail with "Already borrowed"
    tokenizer_lock: threading.Lock


@lru_cache(maxsize=4)
def load_model(path: str, device: str | None) -> LoadedModel:
    """One loaded model per (path, device) per process: embedders share its weights."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from sentence_transformers import SentenceTransformer

    try:  # the per-load "Loading weights" bar is noise on every CLI call
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    except ImportError:  # pragma: no cover
        pass

    check_device(device)
    model = SentenceTransformer(path, device=device)
    model.eval()
    if model.device.type == "cpu":
        transpose_linear_layers(model)
    return LoadedModel(model, threading.Lock())


class TransposedLinear(nn.Module):
    """``y = x @ weight_t + bias`` with ``weight_t`` = the original weight, transposed, contiguous."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.weight_t = nn.Parameter(linear.weight.detach().t().contiguous(), requires_grad=False)
        bias = linear.bias
        self.bias = nn.Parameter(bias.detach().clone(), requires_grad=False) if bias is not None else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, self.in_features)
        y = torch.addmm(self.bias, flat, self.weight_t) if self.bias is not None else flat @ self.weight_t
        return y.reshape(*x.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"
        )


def transpose_linear_layers(module: nn.Module) -> int:
    """Replace every ``nn.Linear`` under ``module`` (in place) by a :class:`TransposedLinear`;
    returns how many. Only for inference: the copies do not train."""
    replaced = 0
    for name, child in list(module.named_children()):
        if type(child) is nn.Linear:
            setattr(module, name, TransposedLinear(child))
            replaced += 1
        else:
            replaced += transpose_linear_layers(child)
    return replaced
