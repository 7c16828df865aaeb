"""Shared fixtures: real benchmark files from ../shared/data, a real embedded Chroma store,
and loopback HTTP servers. Tests never touch ../shared/data/holdout."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("PARALLELSEARCH_SHARED_DATA", ROOT.parent / "shared" / "data"))
RAW = DATA / "raw"

# openrlhf installs a top-level `tests` package into site-packages; our test modules are
# loaded with --import-mode=importlib and helpers are imported from this folder by path.
sys.path.insert(0, str(Path(__file__).resolve().parent))

needs_data = pytest.mark.skipif(not RAW.is_dir(), reason=f"benchmark data folder {RAW} is missing")
#: the hang guard of a test whose work is a learning run or an engine's episodes: minutes quiet, past
#: the 600 s default beside 8 CPU-burning processes (docs/performance.md, "The test suite on a loaded machine")
long_work = pytest.mark.timeout(30 * 60)


from parallelsearch.stores.http.loopback import LoopbackServer as UvicornThread  # noqa: E402
from parallelsearch.stores.http.loopback import free_port  # noqa: E402

__all__ = ["UvicornThread", "free_port"]


def fill_batch(path: Path, records: int = 512) -> Path:
    """Repeat a jsonl file's lines to ``records`` lines (the paper preset's rollout batch: the
    pre-flight check refuses a prompt file smaller than one)."""
    lines = [x for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]
    path.write_text(
        "".join(lines[i % len(lines)] + "\n" for i in range(max(records, len(lines)))), encoding="utf-8"
    )
    return path


@pytest.fixture(scope="session")
def _model_cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("models")


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path, monkeypatch, _model_cache):
    """Every test gets its own settings home, so no test sees another's stores. Exported
    ONNX encoders are shared by the session (an export costs seconds; it is tested once)."""
    monkeypatch.setenv("PARALLELSEARCH_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PARALLELSEARCH_MODEL_CACHE_DIR", str(_model_cache))
    monkeypatch.delenv("PARALLELSEARCH_CONFIG", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")


@pytest.fixture(scope="session")
def embedder():
    from parallelsearch.stores import get_embedder

    return get_embedder()


@pytest.fixture(scope="session")
def hotpot_comparison_file() -> Path:
    path = RAW / "hotpotqa" / "nakulbh_Meve-framework" / "hotpot_dev_distractor_v1.json"
    if not path.is_file():
        pytest.skip(f"benchmark file {path} is missing")
    return path


@pytest.fixture(scope="session")
def hotpot_questions(hotpot_comparison_file):
    """The first 20 questions of a real HotpotQA dev-distractor file (FlashRAG records)."""
    from parallelsearch.data import load_questions

    return load_questions(hotpot_comparison_file)[:20]


@pytest.fixture(scope="session")
def hotpot_store(tmp_path_factory, embedder, hotpot_comparison_file):
    """A real embedded Chroma store holding the context paragraphs of 20 HotpotQA questions."""
    import json

    from parallelsearch.stores import ChromaStore, ingest

    recs = json.loads(hotpot_comparison_file.read_text())[:20]
    small = tmp_path_factory.mktemp("hp") / "hotpot20.json"
    small.write_text(json.dumps(recs))
    store = ChromaStore("hotpot", path=tmp_path_factory.mktemp("chroma"), embedder=embedder)
    ingest(store, [small], progress=False)
    return store


@pytest.fixture(scope="session")
def _sample_chroma(tmp_path_factory, _model_cache) -> Path:
    """The embedded Chroma folder of a home holding ``hp-sample`` (the shipped HotpotQA sample's
    first 3 records), made once by the real ``index`` command; tests get copies (``sample_store``)."""
    from store_probes import index_sample

    home = tmp_path_factory.mktemp("sample-home") / "home"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PARALLELSEARCH_HOME", str(home))
        mp.setenv("PARALLELSEARCH_MODEL_CACHE_DIR", str(_model_cache))
        mp.delenv("PARALLELSEARCH_CHROMA_PATH", raising=False)
        mp.delenv("PARALLELSEARCH_CONFIG", raising=False)
        index_sample(home.parent, None)
    return home / "chroma"


@pytest.fixture
def sample_store(_sample_chroma) -> str:
    """``hp-sample`` in this test's own home (a copy of the session's, so a test may write to it);
    returns the store's name."""
    import shutil

    from parallelsearch.settings import get_settings

    shutil.copytree(_sample_chroma, get_settings().chroma_path)
    return "hp-sample"


TINY_LM_QUESTION = "Were Scott Derrickson and Ed Wood of the same nationality?"


@pytest.fixture(scope="session")
def tiny_lm():
    """A randomly initialised Llama-style model and a Qwen2-style tokenizer trained here (rl/tiny_model.py)."""
    from parallelsearch.rl.tiny_model import build_model, build_tokenizer

    tok = build_tokenizer()
    return build_model(tok), tok


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """The tiny random Llama and its tokenizer saved as one model folder (what vLLM loads)."""
    from parallelsearch.rl.tiny_model import save_tiny

    return save_tiny(tmp_path_factory.mktemp("tiny-llama"))


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as mp:
        yield mp


@pytest.fixture(scope="module")
def module_loop():
    """One event loop for a whole module: vLLM's async engine binds to the loop of its first request.
    ``module_loop.run_until_complete(coro)`` runs a coroutine on it."""
    import asyncio

    loop = asyncio.new_event_loop()
    yield loop
    pending = asyncio.all_tasks(loop)  # e.g. an engine's output handler: end it inside the loop
    for task in pending:
        task.cancel()
    loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
    loop.run_until_complete(loop.shutdown_asyncgens())
    loop.close()


def pytest_collection_modifyitems(items):
    """Modules holding a ``slow`` test first, each kept whole (its module fixtures are made once):
    parallel workers (``make test-main`` runs pytest-xdist, one module per worker at a time) start
    the long ones early instead of one of them running alone at the end. Stable otherwise."""
    slow = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow)


def _serving_report() -> tuple[list, list]:
    serving = sys.modules.get("serving")
    return (list(serving.TIMINGS), [str(p) for p in serving.ARTIFACT_FILES]) if serving else ([], [])


def pytest_sessionfinish(session):
    """A parallel worker hands its serving-tier timings to the main process, which prints them."""
    if hasattr(session.config, "workeroutput"):
        session.config.workeroutput["serving"] = _serving_report()


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    timings, files = getattr(node, "workeroutput", {}).get("serving", ([], []))
    _WORKER_SERVING[0].extend(map(tuple, timings))
    _WORKER_SERVING[1].extend(files)


#: what parallel workers reported of the serving tier (timings, artefact paths)
_WORKER_SERVING: tuple[list, list] = ([], [])


def pytest_terminal_summary(terminalreporter):
    """The serving tier's timings and artefacts (tests/serving.py), when it ran."""
    timings, files = _serving_report()
    timings, files = timings + _WORKER_SERVING[0], files + _WORKER_SERVING[1]
    if not (timings or files):
        return
    terminalreporter.section("serving tier")
    for what, seconds in timings:
        terminalreporter.write_line(f"{seconds:7.1f} s  {what}")
    for path in files:
        terminalreporter.write_line(f"artefact: {path}")


@pytest.fixture()
def nothing_binds(monkeypatch):
    """Fail the test if a command got as far as serving (the checks must come first)."""
    import uvicorn

    from parallelsearch.stores.http import retrieval_server

    def bound(*a, **kw):
        raise AssertionError("the command went on to serve")

    monkeypatch.setattr(retrieval_server, "run_server", bound)
    monkeypatch.setattr(uvicorn, "run", bound)


def wait_for(predicate, what: str, timeout_s: float = 60.0) -> None:
    """Poll until ``predicate()`` holds (bounded), so no test depends on how fast the machine is."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen within {timeout_s:g} s")
        time.sleep(0.02)
