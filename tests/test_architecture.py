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

sys.path.insert(0, str(ROOT / "docs"))
import import_graph  # noqa: E402  (docs/import_graph.py: the page's import graph, generated)
from import_graph import imports_of, project_modules  # noqa: E402

#: what each layer may import besides itself
ALLOWED = {
    "stores": set(),
    "agents": {"stores"},
    "data": {"stores"},
    "graphs": {"stores", "agents"},
    "rl": {"stores", "agents", "data", "graphs"},
    "app": {"stores", "agents", "data", "graphs", "rl"},
}


def layer_of(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "parallelsearch" or len(parts) == 1:
        return None  # third party, or the lazy root namespace itself
    return parts[1] if parts[1] in ALLOWED else "app"


def violations(modules: dict[str, Path], known: set[str] | None = None) -> list[str]:
    known = set(modules) if known is None else known
    bad = []
    for name, path in modules.items():
        src_layer = layer_of(name) or "app"  # the root package is the public (app) surface
        for line, target in imports_of(path.read_text(), name, path.name == "__init__.py", known):
            dst_layer = layer_of(target)
            if dst_layer is None or dst_layer == src_layer or dst_layer in ALLOWED[src_layer]:
                continue
            bad.append(f"{path.name}:{line}: {src_layer} module {name} imports {dst_layer} {target}")
    return bad


def test_no_lower_layer_imports_a_higher_one():
    modules = project_modules()
    assert len(modules) > 60 and {layer_of(m) for m in modules} - {None} == set(ALLOWED)
    assert violations(modules) == []


def test_the_check_catches_upward_imports(tmp_path):
    """The checker itself flags each kind of upward dependency (so the test above can fail)."""
    known = {"parallelsearch.graphs.factory", "parallelsearch.rl.env", "parallelsearch.serving.server"}
    src = (
        "from parallelsearch.graphs.factory import make_searcher\n"
        "def f():\n    import parallelsearch.rl.env\n"
        "LAZY = {'x': 'parallelsearch.serving.server'}\n"
        "from ..rl import env\n"
    )
    found = {t for _, t in imports_of(src, "parallelsearch.stores.x", False, known)}
    assert found == {
        "parallelsearch.graphs.factory",
        "parallelsearch.rl.env",
        "parallelsearch.serving.server",
        "parallelsearch.rl",
    }
    fake = tmp_path / "stores" / "bad.py"
    fake.parent.mkdir()
    fake.write_text(src)
    report = violations({"parallelsearch.stores.bad": fake}, known | {"parallelsearch.rl"})
    assert len(report) == 5 and all("stores module parallelsearch.stores.bad imports" in r for r in report)


def test_the_aliases_deprecated_in_0_2_are_gone():
    """The names that moved in 0.2 resolve only in their new homes (CHANGELOG.md, "0.3")."""
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


def test_the_installed_package_has_no_import_circle():
    graph = import_graph.module_graph(project_modules())
    assert len(graph) > 100 and import_graph.import_circles(graph) == []


def test_the_circle_finder_finds_circles_and_skips_type_checking_imports(tmp_path):
    """A real two-module circle is reported; the same edge under ``if TYPE_CHECKING:`` is none."""
    (tmp_path / "rl").mkdir()
    (tmp_path / "rl" / "a.py").write_text("def f():\n    from parallelsearch.rl.b import g\n")
    (tmp_path / "rl" / "b.py").write_text("from parallelsearch.rl.a import f\n")
    graph = import_graph.module_graph(project_modules(tmp_path))
    assert import_graph.import_circles(graph) == [["parallelsearch.rl.a", "parallelsearch.rl.b"]]
    (tmp_path / "rl" / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from parallelsearch.rl.a import f\n"
    )
    assert import_graph.import_circles(import_graph.module_graph(project_modules(tmp_path))) == []


def test_the_architecture_page_shows_the_import_graph_of_the_code():
    page = (ROOT / "docs" / "architecture.md").read_text()
    assert import_graph.page_block(page) == import_graph.block(), "run python docs/import_graph.py --write"


def test_the_app_package_top_level_stays_small():
    """The app package groups its modules by job (cli/, serving/, training/, eval/, data/)."""
    top = sorted(p.name for p in (ROOT / "parallelsearch").glob("*.py"))
    assert len(top) <= 12, top
    assert {"serving", "cli", "training", "eval", "data"} <= {
        p.name for p in (ROOT / "parallelsearch").iterdir()
    }


def test_no_function_is_over_60_lines():
    """Functions stay small enough to read at once (tests excepted): the package and the benchmarks."""
    long = []
    for path in [
        *project_modules().values(),
        *sorted((ROOT / "benchmarks").glob("*.py")),
        ROOT / "docs/import_graph.py",
    ]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = node.end_lineno - node.lineno + 1
                if lines > 60:
                    long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({lines} lines)")
    assert long == []


def test_the_import_graph_block_names_mutual_pairs_and_no_module_count(tmp_path):
    """A new module in a package that adds no arrow leaves the page's block as it was; package pairs
    that import each other are printed."""
    for pkg in ("stores", "rl"):
        (tmp_path / pkg).mkdir()
        (tmp_path / pkg / "__init__.py").write_text("")
    (tmp_path / "parallelsearch").mkdir()
    (tmp_path / "parallelsearch" / "__init__.py").write_text("")
    (tmp_path / "stores" / "a.py").write_text("import parallelsearch.rl.b\n")
    (tmp_path / "rl" / "b.py").write_text("def f():\n    import parallelsearch.stores.a\n")
    before = import_graph.block(tmp_path)
    assert "rl <-> stores" in before and "modules" not in before
    (tmp_path / "rl" / "c.py").write_text("import parallelsearch.stores.a\n")
    assert import_graph.block(tmp_path) == before
