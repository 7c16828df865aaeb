"""A server subprocess on 127.0.0.1, ready once a path answers 200: the one way the benchmarks
and the serving tests (tests/serving.py) start ``serve``, ``serve-retriever``, ``chroma run``,
``langgraph dev``, vLLM or the official retrieval server.

The child runs in its own process group, so stopping it takes its children too, and writes to a
log file, never to a pipe nobody reads (a full pipe blocks the child).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from parallelsearch.stores.http.loopback import free_port

BIN = Path(sys.executable).parent
#: what a ``parallelsearch`` child must not inherit: the user's API keys, config file and Chroma
NOT_INHERITED = {
    f"PARALLELSEARCH_{n}"
    for n in ("SERVER_API_KEY", "RETRIEVER_API_KEY", "CHROMA_HOST", "CHROMA_PATH", "CONFIG")
}
#: how a ``parallelsearch`` child is started (the console script may not sit beside this Python)
CLI = [sys.executable, "-m", "parallelsearch.cli"]
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "LANGSMITH_TRACING": "false"}


def cli_env(home: Path, **extra: str) -> dict[str, str]:
    """This process's environment, offline and without :data:`NOT_INHERITED`, for a
    ``parallelsearch`` child whose ``PARALLELSEARCH_HOME`` is ``home`` (created; run the child
    there, so no ``parallelsearch.yaml`` of the caller's folder is read)."""
    home.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in NOT_INHERITED}
    return {**env, **OFFLINE, "PARALLELSEARCH_HOME": str(home), **extra}


class ServerProcess:
    """``cmd`` started in its own process group, ready once ``GET ready_path`` (or ``probe``) answers 200."""

    def __init__(
        self,
        cmd: list[str],
        *,
        env: dict[str, str],
        port: int,
        log: Path | None = None,
        cwd: Path | None = None,
        ready_path: str = "/health",
        probe: Callable[[], httpx.Response] | None = None,
        start_timeout_s: float = 180.0,
        name: str | None = None,
    ):
        self.cmd, self.env, self.cwd, self.port = cmd, env, cwd, port
        self._own_log = log is None  # a temporary log, removed by stop()
        self.log = log or Path(tempfile.mkstemp(prefix="server-", suffix=".log")[1])
        self.ready_path, self.probe, self.start_timeout_s = ready_path, probe, start_timeout_s
        self.name = name or " ".join(Path(c).name for c in cmd[:2])
        self.proc: subprocess.Popen | None = None
        self.ready_s: float | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> ServerProcess:
        t0 = time.perf_counter()
        with open(self.log, "ab") as out:  # its own process group: kill() takes its children too
            io = {"stdin": subprocess.DEVNULL, "stdout": out, "stderr": subprocess.STDOUT}
            self.proc = subprocess.Popen(self.cmd, env=self.env, cwd=self.cwd, start_new_session=True, **io)
        probe = self.probe or (lambda: httpx.get(self.url + self.ready_path, timeout=2))
        deadline = time.monotonic() + self.start_timeout_s
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}:\n{self.tail()}")
            try:
                if probe().status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"{self.name} not ready within {self.start_timeout_s:g} s:\n{self.tail()}")
            time.sleep(0.2)
        self.ready_s = time.perf_counter() - t0
        return self

    def tail(self, n: int = 4000) -> str:
        try:
            return self.log.read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def kill(self, sig: int = signal.SIGKILL, timeout_s: float = 30.0) -> int | None:
        """Signal the whole process group and wait for the leader (bounded; SIGKILL after that)."""
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, sig)
        try:
            return self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            return self.proc.wait(timeout=10)

    def stop(self) -> None:
        """SIGTERM, so the server shuts down as a user's Ctrl-C would."""
        self.kill(signal.SIGTERM)
        if self._own_log:
            self.log.unlink(missing_ok=True)

    def group_alive(self) -> bool:
        """Whether any process of the group is still there."""
        if self.proc is None:
            return False
        try:
            os.killpg(self.proc.pid, 0)
        except ProcessLookupError:
            return False
        return True

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class ChromaServer(ServerProcess):
    """A real `chroma run` process on 127.0.0.1 over ``path`` (a new temporary folder by default)."""

    def __init__(self, path: Path | None = None) -> None:
        self.dir = path or Path(tempfile.mkdtemp())
        port = free_port()
        chroma = str(BIN / "chroma")
        cmd = [chroma, "run", "--path", str(self.dir), "--host", "127.0.0.1", "--port", str(port)]
        super().__init__(
            cmd, env=dict(os.environ), port=port, ready_path="/api/v2/heartbeat", start_timeout_s=60
        )

    def copy_store(self, store):
        """The same passages and embeddings in a store on this server (no re-encoding)."""
        from parallelsearch.stores import ChromaStore

        remote = ChromaStore(store.name, host="127.0.0.1", port=self.port, embedder=store.embedder)
        got = store.collection.get(include=["embeddings", "documents", "metadatas"])
        for i in range(0, len(got["ids"]), 256):
            remote.collection.upsert(
                ids=got["ids"][i : i + 256],
                embeddings=[list(e) for e in got["embeddings"][i : i + 256]],
                documents=got["documents"][i : i + 256],
                metadatas=got["metadatas"][i : i + 256],
            )
        return remote


def cli_server(*args: str, env: dict[str, str], **kw) -> ServerProcess:
    """``parallelsearch ARGS --port P`` on a free port P, run in its home (``kw``: :class:`ServerProcess`'s)."""
    port = free_port()
    kw.setdefault("cwd", Path(env["PARALLELSEARCH_HOME"]))
    kw.setdefault("name", f"parallelsearch {args[0]}")
    return ServerProcess([*CLI, *args, "--port", str(port)], env=env, port=port, **kw)
