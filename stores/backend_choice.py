"""Which encoder engine ``encoder_backend: auto`` runs, and how many encoder threads it gets.

Why a rule and not a recorded name: ``torch`` and ``onnx`` compute the same fp32 embeddings
(max difference ~1e-7, recall@3 identical), so a store built by either may be queried and
extended by either; only ``onnx-int8`` is a different embedding family. Which fp32 engine is
fastest depends on where it runs: on CPU, ONNX Runtime is faster at every batch size
(docs/performance.md, "Encoder backends"); on a GPU, torch runs there and ONNX Runtime (CPU
provider) would not. So ``auto`` means:
the store's embedding family (a new store: fp32), run by the fastest engine for the device.

ONNX Runtime runs one intra-op thread per call here (``encoder_threads``, default 1), so one
encoder thread would use one core. With ONNX, unset ``encoder_workers`` therefore means as
many encoder threads as it takes to fill the cores: ``cores / encoder_threads``.
"""

from __future__ import annotations

from parallelsearch.stores.encoder_thread import usable_cores
from parallelsearch.stores.errors import UnavailableError
from parallelsearch.stores.onnx_encoder import BACKENDS, embedding_family

#: the fp32 engine ``auto`` runs on CPU (docs/performance.md, "Encoder backends")
CPU_BACKEND = "onnx"
#: the fp32 engine on a GPU: sentence-transformers on the device
GPU_BACKEND = "torch"


def on_gpu(device: str | None) -> bool:
    """Whether the encoder runs on an accelerator: the named device, or, with none named,
    where sentence-transformers would put it (CUDA when torch sees one)."""
    if device:
        return device.split(":", 1)[0].strip().lower() not in ("cpu", "")
    import torch

    return bool(torch.cuda.is_available())


def check_device(device: str | None) -> None:
    """Refuse a CUDA device torch cannot use here, before a model loads: otherwise torch fails
    deep inside the first tensor move (an AssertionError for a CPU build of torch)."""
    if not device or device.split(":", 1)[0].strip().lower() != "cuda":
        return
    import torch

    if not torch.cuda.is_available():
        raise UnavailableError(
            f"device {device!r}: torch sees no CUDA device here (a CPU build of torch, or no driver); "
            "run the encoder with --device cpu"
        )
    index = device.split(":", 1)[1].strip() if ":" in device else "0"
    count = torch.cuda.device_count()
    if not index.isdigit() or int(index) >= count:
        raise UnavailableError(
            f"device {device!r}: torch sees {count} CUDA device(s), cuda:0..cuda:{count - 1}"
        )


def auto_backend(recorded: str | None, device: str | None = None) -> str:
    """The engine for a store that records ``recorded`` (None: a new store) on ``device``."""
    if recorded is not None and recorded not in BACKENDS:
        raise ValueError(
            f"it records encoder backend {recorded!r}, which this version does not know ({', '.join(BACKENDS)})"
        )
    if recorded is not None and embedding_family(recorded) == "int8":
        return recorded
    return GPU_BACKEND if on_gpu(device) else CPU_BACKEND


def onnx_encoder_workers(threads: int | None, cores: int | None = None) -> int:
    """Encoder threads that fill the cores when each ONNX call runs on ``threads`` (unset: 1)."""
    cores = cores or usable_cores()
    return max(1, cores // (threads or 1))
