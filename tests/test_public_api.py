"""The public API is ``parallelsearch.__all__``: at most 60 names, one door per concept, each
importable and documented in docs/api.md; the notebooks import from it alone, and every
subpackage says it is internal."""

from __future__ import annotations

import importlib
import json
import re

from conftest import ROOT

import parallelsearch

SUBPACKAGES = ("agents", "graphs", "rl", "stores", "data", "eval")


def test_the_public_names_are_few_importable_and_documented():
    names = parallelsearch.__all__
    assert len(names) <= 60, len(names)
    api = (ROOT / "docs" / "api.md").read_text()
    documented = set(re.findall(r"^\| `([\w]+)`(?:, `([\w]+)`)?", api, re.M))
    listed = {n for pair in documented for n in pair if n}
    assert listed == set(names), listed ^ set(names)
    for name in names:
        assert getattr(parallelsearch, name) is not None
    # one door per concept: the builders, the policy and searcher coercions are not public
    for internal in ("build_graph", "build_parallel_search_graph", "as_policy", "as_searcher", "make_parts"):
        assert internal not in names


def test_the_notebooks_use_the_public_api_only():
    for nb in sorted((ROOT / "examples").glob("*.ipynb")):
        cells = json.loads(nb.read_text())["cells"]
        code = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
        modules = set(re.findall(r"(?:from|import) (parallelsearch[.\w]*)", code))
        assert modules <= {"parallelsearch"}, (nb.name, modules)


def test_every_subpackage_says_it_is_internal():
    for sub in SUBPACKAGES:
        doc = importlib.import_module(f"parallelsearch.{sub}").__doc__ or ""
        assert "internal" in doc.lower() and "docs/api.md" in doc, sub
