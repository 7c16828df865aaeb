"""ONNX Runtime sentence encoders: the offline MiniLM exported locally, fp32 or dynamic int8.

On CPU the query encoder is most of a search's cost; ONNX Runtime runs the same graph in fewer,
fused kernels, and per-channel dynamic int8 runs its GEMMs on the CPU's int8 units
(docs/performance.md, "Figures behind the code's choices"). The local model is exported with
``torch.onnx.export`` (transformer plus mean pooling) and, for ``onnx-int8``, quantised; both
files are cached under ``cache_dir``, written to a temporary name and moved into place with
``os.replace``, so concurrent processes never read a half-written file and need no lock. The
cache holds one folder per model path and, in it, the exports of the model's current files only.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import uuid
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from parallelsearch.stores.errors import UnavailableError

_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
SOURCE_FILE = "source.txt"  # the resolved model path a cache folder was made from


class OnnxUnavailableError(UnavailableError):
    """The model cannot run on ONNX here (the message says why); torch computes its embeddings.
    One instance per model is raised again for every later try (``reported``: already logged)."""

    reported = False


def pipeline_problem(st_model: Any) -> str | None:
    """Why the export (transformer plus mean pooling) would not reproduce ``st_model``'s embeddings,
    or None: another pooling or a Dense layer would export without error but embed differently."""
    names = [type(m).__name__ for m in st_model]
    if names[:2] != ["Transformer", "Pooling"] or any(n != "Normalize" for n in names[2:]):
        return f"its modules are {' + '.join(names)}, not Transformer + Pooling (+ Normalize)"
    pool = st_model[1]
    mode = getattr(pool, "pooling_mode", None)  # sentence-transformers >= 6; earlier: one flag per mode
    if mode is None:
        flags = [
            k[len("pooling_mode_") :]
            for k, v in vars(pool).items()
            if k.startswith("pooling_mode_") and v is True
        ]
        mode = flags[0] if len(flags) == 1 else tuple(flags)
    if mode not in ("mean", "mean_tokens", ("mean",)):
        return f"its pooling is {mode!r}, not mean"
    return None


def _atomic_write(target: Path, write: Any) -> Path:
    """``write(tmp_path)`` then move the result to ``target`` in one step."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        write(tmp)
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return target


def _fingerprint(root: Path) -> str:
    """A digest that changes when the model's files do (names, sizes, mtimes)."""
    h = hashlib.sha256()
    if root.is_dir():
        for f in sorted(root.rglob("*")):
            if f.is_file():
                st = f.stat()
                h.update(f"{f.relative_to(root)}:{st.st_size}:{int(st.st_mtime)}".encode())
    return h.hexdigest()[:12]


def _model_folder(cache_dir: Path, model_path: str) -> Path:
    """The model's one cache folder (named by its resolved path); a model in a local folder is
    named in it, so its exports can go when that folder does (a hub name is never judged)."""
    source = str(Path(model_path).resolve())
    digest = hashlib.sha256(source.encode()).hexdigest()[:12]
    folder = Path(cache_dir) / f"{Path(model_path).name or 'model'}-{digest}"
    if Path(model_path).is_dir() and not (folder / SOURCE_FILE).is_file():
        _atomic_write(folder / SOURCE_FILE, lambda tmp: tmp.write_text(source, encoding="utf-8"))
    return folder


def prune_cache(cache_dir: Path, folder: Path, keep: tuple[Path, ...]) -> None:
    """Remove ``folder``'s older exports and the folders of models that no longer exist.

    Every fresh install or temporary model would otherwise leave one more export (tens of MB) in a
    cache that nothing else empties. Only folders that name their source are judged; a process
    that still runs an unlinked file keeps reading it.
    """
    for old in folder.glob("model-*.onnx"):
        if old not in keep:
            old.unlink(missing_ok=True)
    for other in Path(cache_dir).iterdir():
        source = other / SOURCE_FILE
        try:
            gone = other != folder and source.is_file() and not Path(source.read_text("utf-8")).exists()
        except OSError:
            continue
        if gone:
            shutil.rmtree(other, ignore_errors=True)


def export_onnx(model_path: str, cache_dir: Path, backend: str) -> Path:
    """The cached ONNX file of the model at ``model_path`` for ``backend`` (made when missing)."""
    if backend not in ("onnx", "onnx-int8"):
        raise ValueError(f"not an ONNX backend: {backend!r}")
    folder = _model_folder(Path(cache_dir), model_path)
    stamp = _fingerprint(Path(model_path))
    fp32 = folder / f"model-{stamp}.onnx"
    int8 = folder / f"model-{stamp}.int8.onnx"
    made = not fp32.is_file() or (backend == "onnx-int8" and not int8.is_file())
    if not fp32.is_file():
        _atomic_write(fp32, lambda tmp: _export(model_path, tmp))
    if backend == "onnx-int8" and not int8.is_file():
        _atomic_write(int8, lambda tmp: _quantize(fp32, tmp))
    if made:
        prune_cache(Path(cache_dir), folder, keep=(fp32, int8))
    return int8 if backend == "onnx-int8" else fp32


def _export(model_path: str, out: Path) -> None:
    """Export a fresh copy (the stores' copy has its linear layers swapped, see embedder.py)."""
    import torch
    from sentence_transformers import SentenceTransformer

    st_model = SentenceTransformer(model_path, device="cpu")
    transformer = st_model[0].auto_model

    class MeanPooled(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.transformer = transformer

        def forward(self, input_ids, attention_mask, token_type_ids):
            hidden = self.transformer(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            ).last_hidden_state
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
            return (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)

    sample = st_model.preprocess(["an example query", "a second, longer example query"])
    axes = {name: {0: "batch", 1: "tokens"} for name in _INPUTS}
    # the tracer's warnings about the attention code's branches are moot: they take the same path
    # for every shape (tests/test_encoder_backends.py compares lengths and batch sizes)
    with torch.inference_mode(False), torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        warnings.filterwarnings("ignore", message="Exporting aten::index operator")
        torch.onnx.export(
            MeanPooled().eval(),
            tuple(sample[name] for name in _INPUTS),
            str(out),
            input_names=list(_INPUTS),
            output_names=["embedding"],
            dynamic_axes={**axes, "embedding": {0: "batch"}},
            opset_version=17,
            dynamo=False,
        )


def _quantize(fp32: Path, out: Path) -> None:
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from onnxruntime.quantization.shape_inference import quant_pre_process

    pre = out.with_name(out.name + ".pre.onnx")
    try:
        # symbolic shape inference fails on the exported attention graph; ONNX's own is enough
        quant_pre_process(str(fp32), str(pre), skip_symbolic_shape=True)
        quantize_dynamic(str(pre), str(out), per_channel=True, weight_type=QuantType.QInt8)
    finally:
        pre.unlink(missing_ok=True)


class OnnxEncoder:
    """Mean-pooled sentence embeddings from an ONNX file, tokenised by the model's own tokenizer."""

    def __init__(self, st_model: Any, onnx_path: Path, threads: int, tokenizer_lock: Any) -> None:
        import onnxruntime as ort

        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
        self.session = ort.InferenceSession(str(onnx_path), opts, providers=["CPUExecutionProvider"])
        self.path = onnx_path
        self._st, self._tokenizer_lock = st_model, tokenizer_lock
        self._names = {i.name for i in self.session.get_inputs()}

    def encode(self, texts: list[str], batch_size: int = 64) -> np.ndarray:
        """Normalised embeddings of ``texts`` (float32, n x dim); batched by length to pad less."""
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        out: list[np.ndarray] = [np.empty(0)] * len(texts)
        for start in range(0, len(texts), batch_size):
            idx = order[start : start + batch_size]
            with self._tokenizer_lock:
                features = self._st.preprocess([texts[i] for i in idx])
            feed = {n: features[n].numpy().astype(np.int64) for n in _INPUTS if n in self._names}
            vecs = self.session.run(None, feed)[0].astype(np.float32)
            vecs /= np.maximum(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-12)
            for j, i in enumerate(idx):
                out[i] = vecs[j]
        return np.stack(out) if texts else np.zeros((0, 0), dtype=np.float32)
