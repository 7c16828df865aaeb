"""Server processes set GOMP_SPINCOUNT before torch loads, and never override the user's setting."""

from __future__ import annotations

import os
import subprocess
import sys

CHECK = (
    "import os, sys\n"
    "from parallelsearch.stores.encoding.encoder_threads import let_idle_threads_sleep\n"
    "{before}"
    "said = let_idle_threads_sleep()\n"
    "print(os.environ.get('GOMP_SPINCOUNT'), '|', said)\n"
)


def _python(code: str, **env: str) -> subprocess.CompletedProcess:
    """``code`` in a fresh interpreter whose environment sets neither variable (plus ``env``)."""
    clean = {k: v for k, v in os.environ.items() if k not in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")}
    return subprocess.run(
        [sys.executable, "-c", code], env={**clean, **env}, capture_output=True, text=True, timeout=120
    )


def _run(before: str = "", **env: str) -> str:
    proc = _python(CHECK.format(before=before), **env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout.strip()


def test_a_fresh_process_gets_the_server_spin_count():
    out = _run()
    assert out.startswith("1000 |") and "idle OpenMP threads sleep" in out


def test_the_users_setting_is_kept():
    assert _run(GOMP_SPINCOUNT="50000").startswith("50000 | GOMP_SPINCOUNT=50000 kept")
    assert "OMP_WAIT_POLICY=PASSIVE kept" in _run(OMP_WAIT_POLICY="PASSIVE")


def test_after_torch_loaded_it_says_it_is_too_late_instead_of_pretending():
    out = _run(before="import torch\n")
    assert out.startswith("None |") and "OpenMP was already loaded" in out


def _spin_seen_by(replace: str, argv: list[str]) -> str:
    """Run the CLI with ``argv`` in a fresh process, where ``replace`` swaps the part that
    would load torch for ``probe`` (no model is loaded); what the probe saw of GOMP_SPINCOUNT."""
    code = (
        "import os, sys, types\n"
        "def probe(*a, **k):\n"
        "    print('spin:', os.environ.get('GOMP_SPINCOUNT'))\n"
        "    raise SystemExit(0)\n"
        f"{replace}"
        "from parallelsearch.cli import main\n"
        f"main({argv!r})\n"
    )
    proc = _python(code)
    assert "spin:" in proc.stdout, proc.stdout + proc.stderr[-2000:]
    return proc.stdout.split("spin:")[1].split()[0]


def test_serve_retriever_sets_it_before_the_store_loads_torch():
    """The CLI path: the spin count is in the environment by the time the store is opened."""
    replace = "import parallelsearch.graphs.factory as f\nf.make_store = probe\n"
    assert _spin_seen_by(replace, ["serve-retriever", "--store", "wiki"]) == "1000"


def test_serve_sets_it_before_the_app_loads_torch():
    """The LangServe CLI path, with the app factory replaced by a probe module."""
    replace = (
        "server = types.ModuleType('parallelsearch.serving.server')\n"
        "server.create_app = probe\n"
        "sys.modules['parallelsearch.serving.server'] = server\n"
    )
    assert _spin_seen_by(replace, ["serve"]) == "1000"
