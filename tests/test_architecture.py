"""The layers of docs/architecture.md, checked on the real import statements of every module.

stores <- {agents, data} <- graphs <- rl <- app (everything else under ``parallelsearch``).
A module may import its own layer and the layers below it, never one above: the test walks
every ``import``/``from ... import`` (top level and inside functions) and every string that
names a project module (lazy tables, ``importlib.import_module``), so a lazy import is a
dependency too.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

#: what each layer may import besides itself
ALLOWED = {
    "stores": set(),
    "agents": {"stores"},
    "data": {"stores"},
    "graphs": {"stores", "agents"},
    "rl": {"stores", "agents", "data", "graphs"},
    "app": {"stores", "agents", "data", "graphs", "rl"},
}
#: installed name of each source folder (pyproject.toml's package-dir)
FOLDERS = {"stores": "stores", "agents": "agents", "graphs": "graphs", "rl": "rl", "parallelsearch": ""}


def layer_of(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "parallelsearch" or len(parts) == 1:
        return None  # third party, or the lazy root namespace itself
    return parts[1] if parts[1] in ALLOWED else "app"


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    if parts[0] != "parallelsearch":
        parts = ["parallelsearch", *parts]
    return ".".join(parts)


def project_modules() -> dict[str, Path]:
    out = {}
    for folder in FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            out[module_name(path)] = path
    return out


def imports_of(source: str, module: str, is_package: bool, known: set[str]) -> list[tuple[int, str]]:
    """(line, imported module) for every import statement and every string naming a project module."""
    found: list[tuple[int, str]] = []
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            found.append((node.lineno, base))
            # "from parallelsearch import stores" names a subpackage
            found += [(node.lineno, f"{base}.{a.name}") for a in node.names if f"{base}.{a.name}" in known]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in known:
            found.append((node.lineno, node.value))
    return found


def violations(modules: dict[str, Path], known: set[str] | None = None) -> list[str]:
    known = set(modules) if known is None else known
    bad = []
    for name, path in modules.items():
        src_layer = layer_of(name) or "app"  # the root package is the public (app) surface
        for line, target in imports_of(path.read_text(), name, path.name == "__init__.py", known):
            dst_layer = layer_of(target)
            if dst_layer is None or dst_layer == src_layer or dst_layer in ALLOWED[src_layer]:
                continue
            bad.append(
                f"{path.relative_to(ROOT)}:{line}: {src_layer} module {name} imports {dst_layer} {target}"
            )
    return bad


def test_no_lower_layer_imports_a_higher_one():
    modules = project_modules()
    assert len(modules) > 60 and {layer_of(m) for m in modules} - {None} == set(ALLOWED)
    assert violations(modules) == []


def test_the_check_catches_upward_imports(tmp_path, monkeypatch):
    """The checker itself flags each kind of upward dependency (so the test above can fail)."""
    known = {"parallelsearch.graphs.factory", "parallelsearch.rl.env", "parallelsearch.server"}
    src = (
        "from parallelsearch.graphs.factory import make_searcher\n"
        "def f():\n    import parallelsearch.rl.env\n"
        "LAZY = {'x': 'parallelsearch.server'}\n"
        "from ..rl import env\n"
    )
    found = {t for _, t in imports_of(src, "parallelsearch.stores.x", False, known)}
    assert found == {
        "parallelsearch.graphs.factory",
        "parallelsearch.rl.env",
        "parallelsearch.server",
        "parallelsearch.rl",
    }
    fake = tmp_path / "stores" / "bad.py"
    fake.parent.mkdir()
    fake.write_text(src)
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    report = violations({"parallelsearch.stores.bad": fake}, known | {"parallelsearch.rl"})
    assert len(report) == 5 and all("stores module parallelsearch.stores.bad imports" in r for r in report)


def test_the_aliases_deprecated_in_0_2_are_gone():
    """The names that moved in 0.2 resolve only in their new homes (README, "Removed")."""
    import importlib

    import parallelsearch.rl.launch as launch
    import parallelsearch.stores as stores
    from parallelsearch.data import load_questions
    from parallelsearch.rl.train_config import TrainConfig, load_train_config

    for module, name in [(stores, "load_questions"), (stores, "prepare"), (launch, "load_train_config")]:
        assert not hasattr(module, name), f"{module.__name__}.{name}"
    assert not hasattr(TrainConfig, "openrlhf_args") and "working_dir" not in TrainConfig.model_fields
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("parallelsearch.rl.metrics")
    assert callable(load_questions) and callable(load_train_config)


def test_importing_the_protocol_imports_no_server_or_store_stack():
    code = (
        "import sys, parallelsearch.agents.protocol\n"
        "heavy = [m for m in ('fastapi', 'chromadb', 'torch', 'langgraph', 'uvicorn') if m in sys.modules]\n"
        "print(','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == ""


def test_ruff_sees_parallelsearch_as_first_party():
    text = (ROOT / "pyproject.toml").read_text()
    assert 'known-first-party = ["parallelsearch"]' in text
    doc = (ROOT / "docs" / "architecture.md").read_text()
    for heading in ("## Layers", "## Folders", "## A request", "## A training episode", "## Configuration"):
        assert heading in doc


def test_no_stores_submodule_is_named_like_a_public_name():
    # importing a submodule sets it as an attribute of the package, hiding a lazy name it shares
    import pkgutil

    import parallelsearch.stores as stores

    submodules = {m.name for m in pkgutil.iter_modules(stores.__path__)}
    assert {"ingestion", "http", "chroma_store"} <= submodules
    assert not submodules & set(stores.__all__)
