"""Every benchmark script imports and has an entry point.

Benchmarks are not run in CI (they take minutes and their figures are not assertions),
so this is what stops a refactor from breaking them unnoticed: one once imported a
helper that had been moved.
"""

from __future__ import annotations

import subprocess
import sys

from conftest import ROOT

SCRIPTS = sorted(p.stem for p in (ROOT / "benchmarks").glob("*.py") if not p.stem.startswith("_"))


def test_there_are_benchmark_scripts():
    assert {"ingest", "retrieve", "fanout", "overhead", "env", "calls", "serve"} <= set(SCRIPTS)


def test_every_benchmark_script_imports_and_has_an_entry_point():
    code = (
        "import importlib, sys\n"
        f"sys.path.insert(0, {str(ROOT / 'benchmarks')!r})\n"
        f"for name in {SCRIPTS!r}:\n"
        "    mod = importlib.import_module(name)\n"
        "    assert callable(getattr(mod, 'main', None) or getattr(mod, 'run', None)), name\n"
        "print('ok', len(sys.modules))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.startswith("ok")
