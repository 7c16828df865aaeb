"""Wide questions: one search of k sub-queries, k = 1..64, on SYNTHETIC N-entity questions.

Goals: graph latency of a k = 32 search within 2x of a k = 1 search (the k sub-queries meet in
one batched encode), and recall@3 per entity within 0.02 of k = 1. The oracle searches every
entity (its title, or with ``--subqueries relations`` its fact) in one search on the
``parallel`` graph, observation budget off and on, all k interleaved. Data, method and
figures: docs/performance.md, "Wide questions".
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from _common import OUT, RAW, alternating, graph_input, latency, mean, parser, plot_bars, print_table, write
from tqdm import tqdm

from parallelsearch.agents.policies import OraclePolicy
from parallelsearch.agents.policies.base import TurnRequest, TurnResult
from parallelsearch.data.wide_questions import collect_entities, generate, make_question
from parallelsearch.data.wide_questions import write as write_wide
from parallelsearch.graphs import build_parallel_search_graph
from parallelsearch.stores import ChromaStore, ingest
from parallelsearch.stores.encoding.embedder import get_embedder

TWOWIKI = RAW / "2wikimultihopqa" / "hahahajw_Agentic-RAG" / "2WikiMultihopQA_500_benchmark.json"
KS = (1, 2, 4, 8, 16, 32, 64)
TOP_K = 3


def _tokenizer():
    """MiniLM's word-piece tokenizer (offline, shipped with the encoder), or None."""
    try:
        from transformers import AutoTokenizer

        from parallelsearch.stores.encoding.embedder import DEFAULT_MODEL, resolve_model_path

        return AutoTokenizer.from_pretrained(resolve_model_path(DEFAULT_MODEL))
    except Exception as e:  # noqa: BLE001 - token counts are optional; characters are always given
        print(f"no tokenizer ({type(e).__name__}: {e}): observation length in characters only")
        return None


def _episodes(per_size: int, seed: int) -> tuple[dict[int, list[dict]], Path, dict]:
    """The questions of every k (k = 1: one lookup per entity of the pool) and the corpus file."""
    entities, report = collect_entities([TWOWIKI])
    wide = generate(entities, sizes=[k for k in KS if k > 1], per_size=per_size, seed=seed)
    corpus = write_wide(wide, Path(tempfile.mkdtemp()))[1]
    by_k: dict[int, list[dict]] = defaultdict(list)
    for q in wide.questions:
        by_k[q["metadata"]["n_entities"]].append(q)
    used = {t for q in wide.questions for t in q["metadata"]["supporting_titles"]}
    for rel, pool in entities.items():
        for e in pool:
            if e.title in used:
                by_k[1].append(make_question([e], "first", f"lookup-{rel}-{e.title}", seed))
    return by_k, corpus, {"entities": report.as_dict(), **wide.report}


def _schedule(by_k: dict[int, list[dict]]) -> list[tuple[int, dict]]:
    """All episodes, each k spread evenly over the run (by its fraction done), so every k sees
    the same machine."""
    rows = [(i / len(qs), k, q) for k, qs in by_k.items() for i, q in enumerate(qs)]
    return [(k, q) for _, k, q in sorted(rows, key=lambda r: (r[0], r[1]))]


async def _episode(graph, store: ChromaStore, q: dict) -> dict:
    before = store.coalesced_batches
    t0 = time.perf_counter()
    out = await graph.ainvoke(graph_input(q))
    ms = (time.perf_counter() - t0) * 1000
    obs = [t for t in out["trajectory"] if t["type"] == "observation"]
    rows = [r for t in obs for r in t["results"]]
    title_of = {h["question"]: h["title"] for h in q["metadata"]["hops"]}  # a relation sub-query's entity
    titles = [title_of.get(r["query"], r["query"]) for r in rows]
    hits3 = [t in [p["title"] for p in r["passages"][:3]] for t, r in zip(titles, rows, strict=True)]
    hits = [t in [p["title"] for p in r["passages"]] for t, r in zip(titles, rows, strict=True)]
    return {
        "ms": ms,
        "policy_calls": out["policy_calls"],
        "searches": out["search_rounds"],
        "subqueries": out["subqueries"],
        "encoder_calls": store.coalesced_batches - before,
        "passages_per_subquery": [len(r["passages"]) for r in rows],
        "hits3": dict(zip(titles, hits3, strict=True)),
        "hits": dict(zip(titles, hits, strict=True)),
        "observation": "".join(t["text"] for t in obs),
        "errors": out["errors"],
    }


class RelationOracle:
    """A stand-in planner (no LLM here) that asks each entity's fact as its sub-query ("Vernon
    Sewell date of birth", the question's ``metadata.hops``), all in one search, then answers
    with the gold answer: a harder retrieval than the titles the plain oracle searches."""

    name = "oracle:relations"

    async def agenerate(self, request: TurnRequest) -> TurnResult:
        meta = request.metadata or {}
        if request.final or request.turn_index > 0:
            text = f"<answer> {(meta.get('golden_answers') or [''])[0]} </answer>"
        else:
            text = "<search> " + " ## ".join(h["question"] for h in meta["hops"]) + " </search>"
        return TurnResult(text=text, finish_reason="stop", labels=("oracle",))


class CachedSearcher:
    """A stand-in searcher answering from results computed beforehand by the real store, so a
    graph run with it costs the graph alone (its k ``Send``s, join and observation)."""

    name = "cached"

    def __init__(self, store: ChromaStore, queries: list[str], k: int) -> None:
        self.results = dict(zip(queries, store.search_batch(queries, k), strict=True))

    async def asearch(self, query: str, k: int = TOP_K) -> list:
        return self.results[query][:k]


def _components(store: ChromaStore, by_k: dict[int, list[dict]], reps: int) -> dict[str, dict[str, float]]:
    """Median ms per k of the parts of a search, interleaved over k and repeated: the encoder
    call alone (k titles in one batch), ``search_batch`` (encoder + Chroma), and a graph episode
    whose searcher is the cached stand-in (the graph's own cost)."""
    widest = max(by_k[max(KS)], key=lambda q: q["metadata"]["n_entities"])["metadata"]["supporting_titles"]
    queries = sorted({t for qs in by_k.values() for q in qs for t in q["metadata"]["supporting_titles"]})
    cached = build_parallel_search_graph(
        OraclePolicy(), CachedSearcher(store, queries, TOP_K), top_k=TOP_K, max_subqueries=max(KS)
    )

    async def graph_ms(q: dict) -> float:
        t0 = time.perf_counter()
        await cached.ainvoke(graph_input(q))
        return (time.perf_counter() - t0) * 1000

    with asyncio.Runner() as runner:

        def parts_ms(k: int, r: int) -> tuple[float, float, float]:
            t0 = time.perf_counter()
            store.embedder.encode_queries(widest[:k])
            t1 = time.perf_counter()
            store.search_batch(widest[:k], TOP_K)
            t2 = time.perf_counter()
            return (t1 - t0) * 1000, (t2 - t1) * 1000, runner.run(graph_ms(by_k[k][r % len(by_k[k])]))

        times = alternating(KS, range(reps), parts_ms)
    return {
        part: {str(k): round(statistics.median(ms[j] for ms in samples), 1) for k, samples in times.items()}
        for j, part in enumerate(("encode", "search_batch", "graph_cached"))
    }


def _wide_store(corpus: Path, encoder_backend: str, encoder_threads: int) -> ChromaStore:
    """A fresh store of the entity paragraphs, encoded by the backend under test."""
    embedder = get_embedder(backend=encoder_backend, threads=encoder_threads)
    store = ChromaStore("wide-questions", path=Path(tempfile.mkdtemp()) / "db", embedder=embedder)
    ingest(store, [corpus], progress=False)
    return store


def _run_episodes(
    graphs: dict, store: ChromaStore, by_k: dict[int, list[dict]]
) -> dict[str, dict[int, list[dict]]]:
    """Every episode on every graph, after one untimed episode per graph and k, the graphs
    alternating and the ks spread over the run so all see the same machine: variant -> k -> episodes."""
    schedule = _schedule(by_k)
    with asyncio.Runner() as runner:
        for k in KS:  # warm-up: one untimed episode per graph and k (first-call costs)
            for g in graphs.values():
                runner.run(_episode(g, store, by_k[k][0]))
        episodes = alternating(
            graphs,
            tqdm(range(len(schedule)), desc="episodes", unit="q"),
            lambda v, i: runner.run(_episode(graphs[v], store, schedule[i][1])),
        )
    got: dict[str, dict[int, list[dict]]] = {v: defaultdict(list) for v in graphs}
    for v, eps in episodes.items():
        for (k, _), e in zip(schedule, eps, strict=True):
            got[v][k].append(e)
    return got


def _variant_figures(eps: list[dict], base_recall: dict[str, bool], tok) -> dict:
    """One graph's figures over one k's episodes; recall is also given on the entities k = 1 looked
    up, so a change of recall with k is not a change of entities."""
    ms = [e["ms"] for e in eps]
    obs = [e["observation"] for e in eps]
    hits3 = [h for e in eps for h in e["hits3"].values()]
    hits = [h for e in eps for h in e["hits"].values()]
    paired = [(h, base_recall[t]) for e in eps for t, h in e["hits3"].items() if t in base_recall]
    return {
        **latency(ms, 1),
        "policy_calls": mean(e["policy_calls"] for e in eps),
        "decomposition_ratio": mean(e["subqueries"] / max(1, e["searches"]) for e in eps),
        "encoder_calls_per_search": mean(e["encoder_calls"] / max(1, e["searches"]) for e in eps),
        "passages_per_subquery": mean(n for e in eps for n in e["passages_per_subquery"]),
        "recall_at_3": mean(hits3),
        "recall_at_top_k": mean(hits),
        "same_entities_recall_at_3_k1": mean(b for _, b in paired),
        "observation_chars": mean(len(o) for o in obs),
        "observation_tokens": mean(len(tok(o)["input_ids"]) for o in obs) if tok else None,
        "errors": sum(e["errors"] for e in eps),
    }


def _by_k_table(got: dict[str, dict[int, list[dict]]], by_k: dict[int, list[dict]], tok) -> dict[str, dict]:
    """Each k's figures per graph and its latency as a ratio to k = 1's, the goal's measure."""
    base_recall = {t: h for e in got["off"][1] for t, h in e["hits3"].items()}
    table: dict[str, dict] = {}
    for k in KS:
        row: dict = {"questions": len(by_k[k])}
        for variant, eps in ((v, got[v][k]) for v in got):
            row[variant] = _variant_figures(eps, base_recall, tok)
        row["latency_ratio_to_k1"] = {
            v: round(row[v]["p50_ms"] / table["1"][v]["p50_ms"], 3) if k > 1 else 1.0 for v in got
        }
        table[str(k)] = row
    return table


def _print_figures(table: dict[str, dict], components: dict[str, dict[str, float]], results: dict) -> None:
    """The per-k table, then the parts' medians with their ratios to k = 1 (docs/performance.md)."""
    budget, subqueries = results["passage_budget"], results["subqueries"]
    encoder_backend, encoder_threads = results["encoder_backend"], results["encoder_threads"]
    print(f"\nwide questions, oracle, parallel graph, top_k {TOP_K}; budget {budget} passages per search; "
          f"encoder {encoder_backend} ({encoder_threads} thread(s)); sub-queries: {subqueries}")  # fmt: skip
    header = "k n sq/search enc/search p50_ms x_k=1 r@3 r@3_k=1 chars tokens | budget:top_k r@top_k p50_ms x_k=1 chars tokens"
    rows = []
    for k, row in table.items():
        o, b, x = row["off"], row["budget"], row["latency_ratio_to_k1"]
        rows.append([
            k, str(row["questions"]), f"{o['decomposition_ratio']:.1f}", f"{o['encoder_calls_per_search']:.2f}",
            f"{o['p50_ms']:.1f}", f"{x['off']:.2f}", f"{o['recall_at_3']:.3f}",
            f"{o['same_entities_recall_at_3_k1'] or 0:.3f}", f"{o['observation_chars']:.0f}",
            f"{o['observation_tokens'] or 0:.0f}", "|", f"{b['passages_per_subquery']:.2f}",
            f"{b['recall_at_top_k']:.3f}", f"{b['p50_ms']:.1f}", f"{x['budget']:.2f}",
            f"{b['observation_chars']:.0f}", f"{b['observation_tokens'] or 0:.0f}",
        ])  # fmt: skip
    print_table(header.split(), rows)
    print("\nmedian ms per part (k titles): " + " | ".join(f"{p}" for p in components))
    for k in KS:
        parts = [components[p][str(k)] for p in components]
        ratios = [components[p][str(k)] / max(components[p]["1"], 1e-9) for p in components]
        print(f"{k:>3d} " + " | ".join(f"{v:8.1f} ({x:5.2f}x)" for v, x in zip(parts, ratios, strict=True)))


def _plot(table: dict[str, dict], budget: int) -> None:
    """Latency ratio and recall per k against the 2x goal, one bar group per k."""
    plot_bars(
        OUT / "wide_questions.png",
        f"Wide questions: one search of k sub-queries (budget {budget})",
        {
            f"k={k}": {
                "p50 latency / k=1": row["latency_ratio_to_k1"]["off"],
                "recall@3": row["off"]["recall_at_3"],
                f"recall, budget {budget}": row["budget"]["recall_at_top_k"],
            }
            for k, row in table.items()
        },
        "ratio / recall",
        hline=(2.0, "latency goal (2x)"),
    )


def run(
    per_size: int,
    seed: int,
    budget: int,
    reps: int,
    encoder_backend: str = "onnx",
    encoder_threads: int = 1,
    subqueries: str = "titles",
) -> dict:
    """Both graphs over every k's questions, then the parts of a search alone; figures printed,
    written and plotted."""
    by_k, corpus, data_report = _episodes(per_size, seed)
    store = _wide_store(corpus, encoder_backend, encoder_threads)
    print(f"{store.count()} entity paragraphs in the store; questions per k: "
          + ", ".join(f"{k}: {len(by_k[k])}" for k in KS))  # fmt: skip
    policy = RelationOracle() if subqueries == "relations" else OraclePolicy()
    graphs = {
        "off": build_parallel_search_graph(policy, store, top_k=TOP_K, max_subqueries=max(KS)),
        "budget": build_parallel_search_graph(
            policy, store, top_k=TOP_K, max_subqueries=max(KS), passage_budget=budget
        ),
    }
    tok = _tokenizer()
    got = _run_episodes(graphs, store, by_k)
    print(f"components: {reps} interleaved repetitions per k")
    components = _components(store, by_k, reps)
    table = _by_k_table(got, by_k, tok)
    results = {"top_k": TOP_K, "passage_budget": budget, "encoder_backend": encoder_backend, "encoder_threads": encoder_threads, "subqueries": subqueries, "seed": seed, "per_size": per_size,
               "data": data_report, "by_k": table, "components_median_ms": components}  # fmt: skip
    _print_figures(table, components, results)
    write("wide_questions", results)
    _plot(table, budget)
    return results


if __name__ == "__main__":
    ap = parser(__doc__)
    ap.add_argument("--per-size", type=int, default=2, help="questions per k and relation")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--budget", type=int, default=16, help="passages per search with the budget on")
    ap.add_argument("--reps", type=int, default=10, help="repetitions of the component timings")
    ap.add_argument(
        "--encoder-backend", default="onnx", help="onnx (what 'auto' runs on CPU), torch or onnx-int8"
    )
    ap.add_argument("--encoder-threads", type=int, default=1, help="threads of an ONNX encoder call")
    help_ = "each entity's sub-query: its title (the plain oracle) or its fact ('<title> date of birth')"
    ap.add_argument("--subqueries", choices=("titles", "relations"), default="titles", help=help_)
    run(**vars(ap.parse_args()))
