"""Model names that resolve offline: the packaged SmolLM2 GGUF converted once into a Hugging Face folder,
reused while intact, rebuilt when damaged; a missing package is one line naming the install."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from parallelsearch.agents.policies import models
from parallelsearch.agents.policies.models import (
    MANIFEST,
    PACKAGED_MODELS,
    PackagedModel,
    check_folder,
    resolve_model,
    with_tool_rendering,
)
from parallelsearch.stores.errors import UnavailableError

SMOLLM2 = PACKAGED_MODELS["smollm2-135m"]


def _installed(model: PackagedModel) -> bool:
    try:
        return model.gguf().is_file()
    except UnavailableError:
        return False


needs_smollm2 = pytest.mark.skipif(
    not _installed(SMOLLM2),
    reason=f"the model wheel is not installed here ({SMOLLM2.install}; make venv does)",
)


@pytest.fixture(scope="module")
def smollm2(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The packaged model converted once into a fresh home (about 20-45 s)."""
    home = tmp_path_factory.mktemp("home")
    said: list[str] = []
    folder = Path(resolve_model("smollm2-135m", home=home, echo=said.append))
    assert said and "converting" in said[0]
    return folder


def test_names_that_are_not_packaged_pass_through(tmp_path: Path) -> None:
    assert resolve_model("Qwen/Qwen2.5-7B-Instruct", home=tmp_path) == "Qwen/Qwen2.5-7B-Instruct"
    assert resolve_model(str(tmp_path), home=tmp_path) == str(tmp_path)
    assert not (tmp_path / "models").exists()


def test_a_missing_gguf_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="nowhere.gguf"):
        resolve_model(str(tmp_path / "nowhere.gguf"), home=tmp_path)


def test_a_missing_package_names_its_install_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    absent = PackagedModel(
        "absent-1m", "no-such-dist", "no_such_pkg_xyz", "m.gguf", "pip install no-such-dist"
    )
    monkeypatch.setitem(PACKAGED_MODELS, "absent-1m", absent)
    with pytest.raises(UnavailableError, match=r"'no-such-dist'.*pip install no-such-dist"):
        resolve_model("absent-1m", home=tmp_path)


def test_the_cli_says_a_missing_package_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    from parallelsearch.cli import main

    absent = PackagedModel(
        "absent-1m", "no-such-dist", "no_such_pkg_xyz", "m.gguf", "pip install no-such-dist"
    )
    monkeypatch.setitem(PACKAGED_MODELS, "absent-1m", absent)
    monkeypatch.setenv("PARALLELSEARCH_HOME", str(tmp_path))
    code = main(["train", "--preset", "paper", "--model", "absent-1m", "--dry-run"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "pip install no-such-dist" in err[0]


def _fake_convert(source: Path, folder: Path) -> None:
    """A stand-in for the conversion (seconds of transformers work): one file and its manifest."""
    if folder.exists():
        import shutil

        shutil.rmtree(folder)
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    digest = models._sha256(folder / "config.json")
    manifest = {"source_sha256": models._sha256(source), "files": {"config.json": digest}}
    (folder / MANIFEST).write_text(json.dumps(manifest))


def test_one_process_converts_at_a_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two resolutions at once convert once: the second waits on the lock, then finds the folder whole."""
    calls: list[Path] = []

    def fake_convert(source: Path, folder: Path) -> None:
        calls.append(folder)
        _fake_convert(source, folder)

    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF stand-in")
    monkeypatch.setattr(models, "_convert", fake_convert)
    out: list[str] = []
    threads = [
        threading.Thread(target=lambda: out.append(resolve_model(str(gguf), home=tmp_path))) for _ in range(2)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(calls) == 1 and len(set(out)) == 1 and Path(out[0]).name.startswith("gguf-m-")


def test_tool_rendering_is_added_only_where_missing() -> None:
    chatml = "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    extended = with_tool_rendering(chatml)
    assert extended != chatml and extended.endswith(chatml + "{%- endif %}")
    knows_tools = "{% if tools %}<|im_start|>...{% endif %}"
    assert with_tool_rendering(knows_tools) == knows_tools
    assert with_tool_rendering(None) is None


@needs_smollm2
def test_the_packaged_model_converts_into_a_folder_transformers_loads(smollm2: Path) -> None:
    from transformers import AutoConfig, AutoTokenizer

    manifest = json.loads((smollm2 / MANIFEST).read_text())
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= set(manifest["files"])
    config = AutoConfig.from_pretrained(smollm2)
    assert config.model_type == "llama" and config.head_dim == 64  # vLLM's CPU kernels need >= 32
    assert getattr(config, "quantization_config", None) is None
    tok = AutoTokenizer.from_pretrained(smollm2)
    plain = tok.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True
    )
    assert plain.startswith("<|im_start|>system\nYou are a helpful AI assistant named SmolLM")
    from parallelsearch.agents.protocol.templates import SEARCH_TOOL

    tools = tok.apply_chat_template(
        [{"role": "user", "content": "hi"}], tools=[SEARCH_TOOL], tokenize=False, add_generation_prompt=True
    )
    assert "<tools>" in tools and '"search"' in tools and tools.endswith("<|im_start|>assistant\n")


@needs_smollm2
def test_an_intact_folder_is_reused(smollm2: Path) -> None:
    said: list[str] = []
    stamp = (smollm2 / "model.safetensors").stat().st_mtime_ns
    assert resolve_model("smollm2-135m", home=smollm2.parent.parent, echo=said.append) == str(smollm2)
    assert said == [] and (smollm2 / "model.safetensors").stat().st_mtime_ns == stamp


def test_a_damaged_folder_is_rebuilt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file whose checksum no longer matches the manifest sends the folder back through the conversion."""
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF stand-in")
    monkeypatch.setattr(models, "_convert", _fake_convert)
    folder = Path(resolve_model(str(gguf), home=tmp_path))
    config = folder / "config.json"
    config.write_text('{"num_hidden_layers": 3}')
    assert check_folder(folder) == "config.json is missing or damaged"
    said: list[str] = []
    assert resolve_model(str(gguf), home=tmp_path, echo=said.append) == str(folder)
    assert said and "config.json is missing or damaged" in said[0]
    assert check_folder(folder) is None and config.read_text() == "{}"


@needs_smollm2
def test_the_extended_template_passes_the_gateways_check(smollm2: Path) -> None:
    """Gateway training renders the served agent's tool turns with the model's template: the added tool
    rendering must be append-only (a generated call round-trips, history is not re-rendered)."""
    from transformers import AutoTokenizer

    from parallelsearch.rl.gateway.template_check import check_gateway_template

    line, digest = check_gateway_template(AutoTokenizer.from_pretrained(smollm2))
    assert line.startswith("chat template append-only") and len(digest) == 64
