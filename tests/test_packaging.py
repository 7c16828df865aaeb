"""The distribution installs only under `parallelsearch.*`, never generic top-level names."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from conftest import ROOT


@pytest.mark.slow
def test_wheel_holds_only_the_parallelsearch_namespace(tmp_path):
    # build from a clean copy: a stale build/ folder in the checkout would mask a missing package
    import shutil

    src = tmp_path / "src"
    shutil.copytree(
        ROOT,
        src,
        ignore=shutil.ignore_patterns(".venv*", "build", "dist", "*.egg-info", ".git", ".parallelsearch"),
    )
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(tmp_path),
            str(src),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    wheel = next(Path(tmp_path).glob("parallelsearch-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names}
    assert tops == {"parallelsearch", next(t for t in tops if t.endswith(".dist-info"))}
    for sub in ("stores", "agents", "graphs", "rl"):
        assert f"parallelsearch/{sub}/__init__.py" in names
    # every module of the source tree is in the wheel (a package missing from pyproject's list is not)
    from test_architecture import project_modules

    for module, path in project_modules().items():
        wanted = module.replace(".", "/") + ("/__init__.py" if path.name == "__init__.py" else ".py")
        assert wanted in names, f"{path.relative_to(ROOT)} is not packaged as {wanted}"
    assert "parallelsearch/serving/web/ask.html" in names  # the page `parallelsearch serve` shows at /ui
    assert not tops & {"agents", "graphs", "rl", "stores", "tests"}


def test_import_names_resolve_to_this_checkout():
    import parallelsearch.stores

    assert (
        Path(parallelsearch.stores.__file__).resolve().is_relative_to(ROOT)
        or "site-packages" in parallelsearch.stores.__file__
    )


def test_our_tests_are_not_shadowed_by_site_packages_tests():
    # openrlhf ships a top-level `tests` package; ours is loaded by path (importlib mode)
    import conftest

    assert Path(conftest.__file__).resolve().parent == Path(__file__).resolve().parent
