"""Which encoder engine runs: the backend names and the one rule that picks among them.

``torch`` and ``onnx`` compute the same fp32 embeddings (recall@3 identical), so a store built by
either may be used by either; only ``onnx-int8`` is another embedding family. The fastest fp32
engine depends on the device (docs/performance.md, "Encoder backends"), so ``auto`` means the
store's family run by the fastest engine there: ONNX on CPU, torch on a GPU.
"""

from __future__ import annotations

from typing import Literal, get_args

from parallelsearch.stores.errors import UnavailableError, check_choice

#: an engine that computes embeddings (the name a store records)
Engine = Literal["torch", "onnx", "onnx-int8"]
#: what a configuration may ask for: an engine, or ``auto`` (:func:`choose_backend`)
EncoderBackend = Literal["auto", Engine]
BACKENDS: tuple[str, ...] = get_args(Engine)


def embedding_family(backend: str) -> str:
    """Backends whose embeddings are interchangeable: torch and ONNX fp32 agree to ~1e-7."""
    return "int8" if backend == "onnx-int8" else "fp32"


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


def choose_backend(setting: str, recorded: str | None = None, device: str | None = None) -> Engine:
    """The engine for ``setting`` over a store that records ``recorded`` (None: a new store) on
    ``device``: ``auto`` keeps an int8 store int8, else fp32 by torch on a GPU and by ONNX on CPU.
    ONNX runs on CPU only, so an ONNX engine with a GPU device is an error."""
    if recorded is not None and recorded not in BACKENDS:
        raise ValueError(
            f"it records encoder backend {recorded!r}, which this version does not know ({', '.join(BACKENDS)})"
        )
    check_choice(setting, ("auto", *BACKENDS), "encoder backend")
    if setting != "auto":
        engine = setting
    elif recorded is not None and embedding_family(recorded) == "int8":
        engine = recorded
    else:
        engine = "torch" if on_gpu(device) else "onnx"
    if engine != "torch" and device and on_gpu(device):
        fix = (
            "use --encoder-backend torch (the same embeddings as onnx) or --device cpu"
            if embedding_family(engine) == "fp32"
            else "use --device cpu (int8 embeddings have no GPU engine here), or re-index the store with torch"
        )
        raise ValueError(
            f"encoder backend {engine!r} runs on CPU only, but device {device!r} was asked for; {fix}"
        )
    return engine  # type: ignore[return-value]  # a str checked against BACKENDS above
