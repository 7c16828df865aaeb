"""Every notebook in examples/ runs top to bottom offline on CPU (nbclient); an error fails the test."""

from __future__ import annotations

import pytest
from conftest import ROOT

NOTEBOOKS = sorted((ROOT / "examples").glob("*.ipynb"))


def test_there_are_five_notebooks():
    assert [p.stem for p in NOTEBOOKS] == [
        "01_quickstart", "02_langgraph_components", "03_evaluation", "04_training", "05_serving",
    ]  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_executes(path, tmp_path, monkeypatch):
    import nbformat
    from nbclient import NotebookClient

    monkeypatch.setenv("PARALLELSEARCH_HOME", str(tmp_path / "home"))
    book = nbformat.read(path, as_version=4)
    NotebookClient(
        book, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    ).execute()
    outputs = [o for c in book.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    assert outputs, "a notebook that prints nothing shows nothing"
