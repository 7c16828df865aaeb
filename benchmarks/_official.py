"""The official retrieval server as a benchmark column: ParallelSearch/Search-R1's
``search_r1/search/retrieval_server.py``, run unmodified from a user's checkout (never vendored
or downloaded) over a FAISS flat index of the same embeddings as our store, on CPU when there
is no CUDA. Used by ``retrieve_server.py --official PATH``.

``python benchmarks/_official.py SCRIPT ARGS...`` is the child :class:`OfficialServer` starts
(:func:`run_official_on_cpu`: bound to 127.0.0.1, and on CPU without CUDA).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

import httpx
from _server import ServerProcess

from parallelsearch.stores.http.loopback import free_port


class OfficialServer(ServerProcess):
    """The official retrieval_server.py of a ParallelSearch/Search-R1 checkout, same embeddings."""

    def __init__(
        self, checkout: Path, home: Path, model_path: str, files: tuple[Path, Path] | None = None
    ) -> None:
        """``files``: the FAISS flat index and corpus jsonl to serve (default: made from the Chroma
        store ``hotpot500`` under ``home``)."""
        self.script = checkout / "search_r1" / "search" / "retrieval_server.py"
        if not self.script.is_file():
            sys.exit(f"--official: {self.script} does not exist")
        for module, pip in (("faiss", "faiss-cpu"), ("datasets", "datasets")):
            try:
                __import__(module)
            except ImportError:
                sys.exit(f"--official needs {module} (pip install {pip}): the official server imports it")
        self.home, self.model_path, self.given = home, model_path, files
        self._work: tempfile.TemporaryDirectory | None = None
        # the official script has no /health: ready once /retrieve answers
        body = {"queries": ["x"], "topk": 1, "return_scores": True}
        probe = lambda: httpx.post(self.url + "/retrieve", json=body, timeout=5)  # noqa: E731
        super().__init__(
            [],
            env=dict(os.environ),
            port=free_port(),
            probe=probe,
            start_timeout_s=600,
            name="official server",
        )

    def _files(self) -> tuple[Path, Path]:
        """Its corpus and FAISS flat index, from the store's own embeddings (written once; the
        server is started again every round)."""
        if self.given is not None:
            return self.given
        if self._work is None:
            import faiss
            import numpy as np

            from parallelsearch.stores import ChromaStore

            store = ChromaStore("hotpot500", path=self.home / "chroma", create=False)
            got = store.collection.get(include=["embeddings", "documents", "metadatas"])
            self._work = tempfile.TemporaryDirectory(prefix="official-retriever-")
            work = Path(self._work.name)
            with (work / "corpus.jsonl").open("w") as f:
                for i, d, m in zip(got["ids"], got["documents"], got["metadatas"], strict=True):
                    f.write(json.dumps({"id": i, "contents": f'"{(m or {}).get("title", "")}"\n{d}'}) + "\n")
            index = faiss.IndexFlatIP(store.embedder.dimension)
            index.add(np.asarray(got["embeddings"], dtype=np.float32))
            faiss.write_index(index, str(work / "flat.index"))
        work = Path(self._work.name)
        return work / "flat.index", work / "corpus.jsonl"

    def start(self) -> OfficialServer:
        index, corpus = self._files()
        cmd = [sys.executable, str(Path(__file__).resolve()), str(self.script)]
        cmd += ["--index_path", str(index)]
        cmd += ["--corpus_path", str(corpus), "--topk", "3", "--retriever_name", "minilm"]
        self.cmd = cmd + ["--retriever_model", self.model_path, "--port", str(self.port)]  # it mean-pools
        super().start()
        return self


def top_k_agreement(url_a: str, url_b: str, queries: list[str]) -> float:
    """Share of top-3 ids two servers have in common over ``queries`` (same embeddings: the
    difference is HNSW against exact search)."""

    def ids(url: str) -> list[set[str]]:
        r = httpx.post(
            url + "/retrieve", json={"queries": queries, "topk": 3, "return_scores": True}, timeout=120
        )
        r.raise_for_status()
        return [{d["document"]["id"] for d in docs} for docs in r.json()["result"]]

    a, b = ids(url_a), ids(url_b)
    return sum(len(x & y) for x, y in zip(a, b, strict=True)) / (3 * len(queries))


def run_official_on_cpu(script: str, argv: list[str]) -> None:
    """Child: the checkout's ``retrieval_server.py``, unmodified, bound to 127.0.0.1 (the script
    binds 0.0.0.0); on a machine without CUDA its unconditional ``.cuda()``, ``empty_cache()`` and
    ``.half()`` (fp16) become no-ops (fp32)."""
    import runpy

    import torch
    import uvicorn

    serve = uvicorn.run
    uvicorn.run = lambda app, **kw: serve(app, **{**kw, "host": "127.0.0.1"})  # type: ignore[assignment]
    if not torch.cuda.is_available():
        torch.Tensor.cuda = lambda self, *a, **k: self  # type: ignore[method-assign]
        torch.nn.Module.cuda = lambda self, *a, **k: self  # type: ignore[method-assign]
        torch.nn.Module.half = lambda self: self  # type: ignore[method-assign]
        torch.cuda.empty_cache = lambda: None
    sys.argv = [script, *argv]
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    run_official_on_cpu(sys.argv[1], sys.argv[2:])
