"""Write the evaluation outputs: summary.json, breakdown.json, report.md and PNG plots.

The Markdown tables follow the paper's Tables 2 and 3, then efficiency and retrieval. With the
oracle policy the accuracy columns say ``oracle``: such a run measures efficiency and retrieval.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from parallelsearch.eval.runner import RESULTS, read_results
from parallelsearch.eval.summary import METRICS, SPLITS, Metric, by_type, dedup, is_oracle_run, summarize


def _fmt(v: Any, oracle: bool = False, pct: bool = False) -> str:
    if oracle:
        return "oracle"
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{100 * v:.1f}%" if pct else f"{v:.3f}" if abs(v) < 10 else f"{v:.1f}"
    return str(v)


def _table(head: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + [
        "| " + " | ".join(r) + " |" for r in rows
    ]


def table_metrics(table: str) -> list[Metric]:
    """The metrics that are columns of ``table`` (``comparison``, ``types``), in :data:`METRICS` order."""
    return [m for m in METRICS if table in m.tables]


def _cell(metric: Metric, values: dict[str, Any], oracle: bool) -> str:
    return (
        str(values[metric.name])
        if metric.how == "count"
        else _fmt(values[metric.name], oracle and metric.accuracy)
    )


def _metrics_table(
    labels: list[str], table: str, groups: list[tuple[list[str], Any]], oracle: bool
) -> list[str]:
    """One row per non-empty group of ``(label values, metrics)``: the labels, then ``table``'s columns."""
    columns = table_metrics(table)
    rows = [[*names, *(_cell(c, m, oracle) for c in columns)] for names, m in groups if m and m["n"]]
    return _table([*labels, *(str(c.column) for c in columns)], rows)


def notes_line(table: str) -> str:
    """What ``table``'s columns with a note mean, as one line under it."""
    return "; ".join(f"{m.column} = {m.note}" for m in table_metrics(table) if m.note) + "."


def comparison_lines(summary: dict[str, Any], oracle: bool) -> list[str]:
    """The compact table the demo prints: per variant and split, efficiency and retrieval."""
    groups = [([v, s], splits[s]) for v, splits in summary.items() for s in SPLITS]
    return _metrics_table(["graph", "split"], "comparison", groups, oracle)


def type_lines(breakdown: dict[str, Any], oracle: bool) -> list[str]:
    """Per question type (``dataset/type``) and graph: the ``types`` columns of :data:`METRICS`."""
    types = sorted({k for by_key in breakdown.values() for k in by_key})
    groups = [([k, v], by_key.get(k)) for k in types for v, by_key in breakdown.items()]
    return _metrics_table(["type", "graph"], "types", groups, oracle)


def ratio_lines(summary: dict[str, Any]) -> list[str]:
    """The parallel and dag graphs relative to the sequential one, per split."""
    out: list[str] = []
    for graph in ("parallel", "dag"):
        if graph not in summary or "sequential" not in summary:
            continue
        out += ["", f"The {graph} graph relative to the sequential graph (lower is cheaper):", ""]
        rows = []
        for s in SPLITS:
            p, q = summary[graph][s], summary["sequential"][s]
            if p["n"] and q["n"]:
                keys = ("policy_calls", "search_rounds", "latency_p50_ms")
                rows.append([s, *(f"{p[k] / q[k]:.3f}" if p[k] and q[k] else "–" for k in keys)])
        out += _table(["split", "policy calls", "search rounds", "latency p50"], rows)
    return out


@dataclass(frozen=True)
class Figures:
    """What every figure of a report draws from: the successful rows per graph and the summary."""

    ok: dict[str, list[dict[str, Any]]]
    summary: dict[str, Any]
    oracle: bool


def accuracy_vs_calls(ax: Any, f: Figures) -> str:
    """Each graph's EM (gold recall in an oracle run) against its policy calls per question."""
    for v in f.summary:
        m = f.summary[v]["all"]
        y = m["gold_recall"] if f.oracle else m["em"]
        if m["policy_calls"] is not None and y is not None:
            ax.scatter(m["policy_calls"], y, s=60, label=v)
            ax.annotate(v, (m["policy_calls"], y), textcoords="offset points", xytext=(5, 5))
    ax.set_xlabel("policy calls per question")
    ax.set_ylabel("gold-passage recall (oracle run)" if f.oracle else "EM")
    ax.set_title("Accuracy vs. policy calls" if not f.oracle else "Retrieval vs. policy calls (oracle)")
    ax.grid(alpha=0.3)
    return "em_vs_calls.png"


def latency_boxes(ax: Any, f: Figures) -> str:
    """Each graph's latency per question."""
    ax.boxplot([[r["latency_ms"] for r in rows] for rows in f.ok.values()], showfliers=True)
    ax.set_xticks(range(1, len(f.ok) + 1), list(f.ok))
    ax.set_ylabel("latency per question (ms)")
    ax.set_title("Latency distribution")
    ax.grid(alpha=0.3, axis="y")
    return "latency.png"


def calls_histogram(ax: Any, f: Figures) -> str:
    """How many policy calls the questions took, per graph."""
    calls = [[r["policy_calls"] for r in rows if r.get("policy_calls")] for rows in f.ok.values()]
    top = max((max(c) for c in calls if c), default=1)
    ax.hist(calls, bins=[x - 0.5 for x in range(1, top + 2)], label=list(f.ok))
    ax.set_xticks(range(1, top + 1))
    ax.set_xlabel("policy calls per question")
    ax.set_ylabel("questions")
    ax.set_title("Policy calls per question")
    ax.legend()
    return "policy_calls_hist.png"


#: every figure of the report, one function each: it draws on the axes it is given and returns its
#: file name (a new figure is one function and one entry here)
FIGURES: tuple[tuple[Callable[[Any, Figures], str], tuple[float, float]], ...] = (
    (accuracy_vs_calls, (5, 4)),
    (latency_boxes, (6, 4)),
    (calls_histogram, (6, 4)),
)


def plots(rows: list[dict[str, Any]], summary: dict[str, Any], out_dir: Path, oracle: bool) -> list[str]:
    """Every figure of :data:`FIGURES`, as its file name; none without matplotlib (the ``plots`` extra),
    which is said once."""
    try:
        import matplotlib
    except ImportError:
        print("matplotlib is not installed (pip install 'parallelsearch[plots]'): no plots", file=sys.stderr)
        return []

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = {v: [r for r in rows if r["variant"] == v and not r.get("error")] for v in summary}
    given = Figures(ok, summary, oracle)
    files = []
    for draw, size in FIGURES:
        fig, ax = plt.subplots(figsize=size)
        name = draw(ax, given)
        fig.tight_layout()
        fig.savefig(out_dir / name, dpi=110)
        plt.close(fig)
        files.append(name)
    return files


def write_report(out_dir: str | Path, *, plots_enabled: bool = True) -> dict[str, Any]:
    """Read results.jsonl in ``out_dir`` and write summary.json, breakdown.json, report.md and plots."""
    out = Path(out_dir)
    rows, bad = read_results(out / RESULTS)
    if not rows:
        raise ValueError(f"{out / RESULTS} holds no results")
    run = json.loads((out / "run.json").read_text()) if (out / "run.json").is_file() else {}
    oracle = is_oracle_run(rows)
    rows = dedup(rows)
    summary = summarize(rows, accuracy=not oracle)
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    breakdown = by_type(rows, accuracy=not oracle)
    (out / "breakdown.json").write_text(json.dumps(breakdown, indent=2))
    md = _header_lines(run, summary, oracle) + _paper_table_lines(summary, oracle)
    md += ["", "## Efficiency and retrieval", ""] + comparison_lines(summary, oracle) + ratio_lines(summary)
    md += ["", notes_line("comparison")]
    md += ["", "## By question type", ""] + type_lines(breakdown, oracle) + ["", notes_line("types")]
    md += _failure_lines(rows, bad)
    drawn = plots(rows, summary, out, oracle) if plots_enabled else []
    if drawn:
        md += ["", "## Plots", ""] + [f"![{f}]({f})" for f in drawn]
    (out / "report.md").write_text("\n".join(md) + "\n")
    return summary


def _header_lines(run: dict[str, Any], summary: dict[str, Any], oracle: bool) -> list[str]:
    """The report's title and what the run was (policy, dataset, simulated delays, latency method),
    so its numbers are read for what they measure."""
    md = [
        "# ParallelSearch evaluation",
        "",
        f"Policy: `{run.get('policy', '?')}`; dataset: `{run.get('dataset', '?')}`; graphs: {', '.join(summary)}.",
    ]
    if oracle:
        md += [
            "",
            "**Oracle run.** The oracle decomposes with the dataset's annotations and answers with the gold "
            "answer: accuracy columns say `oracle`. This run measures efficiency (policy calls, search rounds, "
            "latency) and retrieval (gold-passage recall, answer coverage) only.",
        ]
    delays = (
        ("turn_delay_s", "Each policy turn costs a simulated {:.0f} ms of generation time."),
        ("resolver_delay_s", "Each #k resolver call costs a simulated {:.0f} ms."),
    )
    for key, text in delays:
        if run.get(key):
            md += ["", text.format(1000 * run[key])]
    if run.get("latency"):
        md += ["", f"How latency was measured: {run['latency']}."]
    return md


def _paper_table_lines(summary: dict[str, Any], oracle: bool) -> list[str]:
    """EM by split and the parallelizable questions, laid out as the paper's Tables 2 and 3 for comparison."""
    table2, table3 = [], []
    for v, splits in summary.items():
        cells = (splits[s] for s in SPLITS)
        table2.append([v] + [f"{_fmt(m['em'], oracle)} (n={m['n']})" if m["n"] else "–" for m in cells])
        p = splits["parallel"]
        seconds = None if p["latency_p50_ms"] is None else p["latency_p50_ms"] / 1000
        dr = _fmt(p["decomposition_ratio"], pct=True)
        table3.append([v, _fmt(p["em"], oracle), dr, _fmt(seconds), _fmt(p["policy_calls"])])
    md = ["", "## EM by split (paper Table 2 layout)", ""] + _table(["graph", *SPLITS], table2)
    md += ["", "## Parallelizable questions (paper Table 3 layout)", ""]
    return md + _table(["graph", "EM", "DR", "inference s (p50)", "turns"], table3)


def _failure_lines(rows: list[dict[str, Any]], bad: list[int]) -> list[str]:
    """Questions that raised, unreadable lines and failed searches, which the scores above include."""
    md: list[str] = []
    failures = [r for r in rows if r.get("error")]
    if failures or bad:
        md += [
            "",
            f"Failures: {len(failures)} question(s) raised errors (see `error` in results.jsonl); {len(bad)} unreadable line(s).",
        ]
    failed_searches = sum(int(r.get("search_errors") or 0) for r in rows)
    if failed_searches:
        hit = sum(1 for r in rows if r.get("search_errors"))
        md += [
            "",
            f"**Failed searches: {failed_searches}** in {hit} of {len(rows)} question(s): their observations "
            "say `Search failed ...` (see `search_errors` in results.jsonl); the scores above include them.",
        ]
    return md
