"""The paper suite: the benchmarks of the paper's tables, each with its corpus, run by the eval runner.

HotpotQA, 2Wiki and MuSiQue come with their context paragraphs: each dataset's paragraphs are
indexed once into a store of their own and searched by its questions. NQ, TriviaQA, PopQA and
Bamboogle come without passages: they run against a configured store or ``/retrieve`` server
(wiki-18, docs/scaling.md), and are skipped with what they need when none is given.
"""

from __future__ import annotations

import itertools
import json
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from parallelsearch.data import load_questions
from parallelsearch.stores.ingestion.jsonfiles import iter_json_records

#: the graphs of the tables: no search, one search of the question, Search-R1's prompt, ParallelSearch's
SUITE_GRAPHS = ("direct", "rag", "sequential", "parallel")
#: each context store is searched exhaustively (``ef_search`` above its passage count, as the demo store):
#: an approximate search can rank differently from one build to the next, and a table must reproduce
SUITE_EF_SEARCH = 32768
#: what the datasets without passages need, where docs/scaling.md says how to serve it
WIKI_CORPUS_NOTE = (
    "needs a Wikipedia corpus (the paper's wiki-18: 21M passages, docs/scaling.md and docs/reproduce.md); "
    "give --store NAME or --retriever URL to run it"
)


@dataclass(frozen=True)
class SuiteDataset:
    """One benchmark of the suite: its name, its file under the data folder, whether its records
    carry the passages that make its corpus."""

    name: str
    path: str
    has_passages: bool


PAPER_SUITE = (
    SuiteDataset("hotpotqa", "hotpotqa/hahahajw_Agentic-RAG/HotpotQA_500_benchmark.json", True),
    SuiteDataset(
        "2wikimultihopqa", "2wikimultihopqa/hahahajw_Agentic-RAG/2WikiMultihopQA_500_benchmark.json", True
    ),
    SuiteDataset("musique", "musique/AdelWang_MIGRES/musique.json", True),
    SuiteDataset("nq", "nq/GaurisankarJ_reason_over_search/test.jsonl", False),
    SuiteDataset("triviaqa", "triviaqa/GaurisankarJ_reason_over_search/test.jsonl", False),
    SuiteDataset("popqa", "popqa/GaurisankarJ_reason_over_search/test.jsonl", False),
    SuiteDataset("bamboogle", "bamboogle/GaurisankarJ_reason_over_search/test.jsonl", False),
)
SUITE_NAMES = tuple(d.name for d in PAPER_SUITE)


def pick_datasets(names: str | None) -> list[SuiteDataset]:
    """The suite's datasets named in a comma list (all when None), in the suite's order."""
    if not names:
        return list(PAPER_SUITE)
    wanted = [n.strip() for n in names.split(",") if n.strip()]
    unknown = [n for n in wanted if n not in SUITE_NAMES]
    if unknown or not wanted:
        raise ValueError(
            f"--datasets: unknown {', '.join(unknown) or '(none given)'}; choose from {', '.join(SUITE_NAMES)}"
        )
    return [d for d in PAPER_SUITE if d.name in wanted]


def slug(text: str) -> str:
    """A folder name for a policy spec or a dataset (path separators and odd characters replaced)."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_")[:80] or "_"


def dataset_file(ds: SuiteDataset, data_dir: Path, limit: int | None, cache: Path) -> Path:
    """The dataset's file, or with ``limit`` a cached copy of its first ``limit`` records, so the
    questions and the corpus of a short run come from the same records."""
    path = data_dir / ds.path
    if not path.is_file():
        raise FileNotFoundError(
            f"{ds.name}: {path} is missing (--data-dir names the folder holding {ds.path})"
        )
    if not limit:
        return path
    out = cache / f"{ds.name}_first{limit}.jsonl"
    if not out.is_file():
        records = [rec for _, rec in itertools.islice(iter_json_records(path), limit)]
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_suffix(".tmp")
        tmp.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
        tmp.replace(out)
    return out


def context_store(
    ds: SuiteDataset, source: Path, limit: int | None, retrieval: Any, progress: bool = True
) -> Any:
    """The store of the dataset's context paragraphs (``paper-NAME``, ``paper-NAME-firstN`` for a
    short run) where ``retrieval`` (a RetrievalConfig) keeps stores, indexed at its first use;
    indexing is idempotent, so a rerun encodes nothing."""
    from parallelsearch.graphs.factory import writing_store
    from parallelsearch.stores.ingestion.pipeline import ingest

    name = f"paper-{ds.name}" + (f"-first{limit}" if limit else "")
    hnsw = {"ef_search": SUITE_EF_SEARCH}
    with writing_store(retrieval, name, on_wait=_to_stderr, hnsw=hnsw) as store:
        rep = ingest(store, [source], progress=progress)
    if rep.added:
        print(f"{ds.name}: indexed {rep.added} passages into {store.name} in {rep.seconds:.1f} s", flush=True)
    return store


@dataclass
class SuitePlan:
    """What a suite run does per dataset: its questions and searcher, or why it is skipped."""

    dataset: SuiteDataset
    questions: list[dict[str, Any]]
    searcher: Any = None
    skipped: str | None = None


def plan_suite(
    datasets: list[SuiteDataset],
    data_dir: Path,
    cache: Path,
    *,
    limit: int | None,
    retrieval: Any,
    configured: Callable[[], Any] | None,
    use_configured_for_all: bool = False,
) -> list[SuitePlan]:
    """Each dataset's questions and searcher: its context store (kept as ``retrieval`` says), or the ``configured`` searcher
    (a store or ``/retrieve`` URL the user gave; None when none was given)."""
    from parallelsearch.agents.searchers import StoreSearcher

    plans = []
    sources = [
        dataset_file(ds, data_dir, limit, cache) for ds in datasets
    ]  # every file there before indexing
    for ds, source in zip(datasets, sources, strict=True):
        questions = load_questions(source, dataset=ds.name)[: limit or None]
        if ds.has_passages and not use_configured_for_all:
            plans.append(SuitePlan(ds, questions, StoreSearcher(context_store(ds, source, limit, retrieval))))
        elif configured is not None:
            plans.append(SuitePlan(ds, questions, configured()))
        else:
            plans.append(
                SuitePlan(ds, questions, skipped=f"{ds.name} ({len(questions)} questions) {WIKI_CORPUS_NOTE}")
            )
    return plans


def _to_stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)
