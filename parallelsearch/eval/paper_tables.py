"""The paper's tables from suite results: accuracy per dataset and on average (the main table's
layout), cost per split (Table 3's layout), every cell with its standard error.

Means carry ``sd / sqrt(n)``; latency percentiles a seeded bootstrap's; tokens per correct answer
(TPC: prompt and generated tokens of every question over the questions answered right) the ratio
estimator's delta-method s.e.; an average over datasets weighs each dataset alike, as the paper's
average does, with ``sqrt(sum se^2) / k``.
"""

from __future__ import annotations

import json
import math
import random
import statistics
import sys
from pathlib import Path
from typing import Any

from parallelsearch.eval.summary import is_oracle_run, percentile

#: cell name -> the results row field it averages
MEANS = {"em": "em", "f1": "f1", "searches": "subqueries", "calls": "policy_calls", "turns": "valid_turns"}
CELLS = ("n", "em", "f1", "searches", "calls", "turns", "p50_ms", "p95_ms", "tpc")
ACCURACY_CELLS = ("em", "f1", "tpc")
BOOTSTRAP = 200


def _mean_se(xs: list[float]) -> tuple[float | None, float | None]:
    if not xs:
        return None, None
    se = statistics.stdev(xs) / math.sqrt(len(xs)) if len(xs) > 1 else None
    return statistics.fmean(xs), se


def _percentile_se(xs: list[float], q: float) -> tuple[float | None, float | None]:
    """The ``q`` percentile and the s.d. of its seeded bootstrap (resamples of the same size)."""
    if not xs:
        return None, None
    rng = random.Random(0)
    boot = [percentile(rng.choices(xs, k=len(xs)), q) or 0.0 for _ in range(BOOTSTRAP)]
    return percentile(xs, q), statistics.stdev(boot) if len(xs) > 1 else None


def _tpc(rows: list[dict[str, Any]]) -> tuple[float | None, float | None]:
    """Tokens per correct answer, sum(tokens) / sum(em), with the ratio's delta-method s.e.;
    None without token counts or without a right answer."""
    pairs = [
        ((r.get("tokens_in") or 0) + (r.get("tokens_out") or 0), float(r.get("em") or 0))
        for r in rows
        if r.get("tokens_in") is not None or r.get("tokens_out") is not None
    ]
    right = sum(c for _, c in pairs)
    if not pairs or not right:
        return None, None
    ratio = sum(t for t, _ in pairs) / right
    n = len(pairs)
    if n < 2:
        return ratio, None
    resid = sum((t - ratio * c) ** 2 for t, c in pairs) / (n - 1)
    return ratio, math.sqrt(resid / n) / (right / n)


def cell(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """One group of result rows (failed questions left out) as ``{metric: value, metric_se: s.e.}``."""
    ok = [r for r in rows if not r.get("error")]
    out: dict[str, Any] = {"n": len(ok), "failed": len(rows) - len(ok)}
    for name, field in MEANS.items():
        out[name], out[f"{name}_se"] = _mean_se([float(r[field]) for r in ok if r.get(field) is not None])
    lat = [float(r["latency_ms"]) for r in ok if r.get("latency_ms") is not None]
    out["p50_ms"], out["p50_ms_se"] = _percentile_se(lat, 0.5)
    out["p95_ms"], out["p95_ms_se"] = _percentile_se(lat, 0.95)
    out["tpc"], out["tpc_se"] = _tpc(ok)
    return out


def average(cells: list[dict[str, Any]]) -> dict[str, Any]:
    """The datasets' average, each dataset weighing alike; a metric missing from one is averaged over the rest."""
    out: dict[str, Any] = {"n": sum(c["n"] for c in cells), "failed": sum(c["failed"] for c in cells)}
    for name in CELLS[1:]:
        have = [c for c in cells if c.get(name) is not None]
        out[name] = statistics.fmean(c[name] for c in have) if have else None
        ses = [c.get(f"{name}_se") for c in have]
        known = have and all(s is not None for s in ses)
        out[f"{name}_se"] = math.sqrt(sum(s * s for s in ses)) / len(have) if known else None
    return out


def build_tables(results: dict[str, dict[str, list[dict[str, Any]]]]) -> dict[str, Any]:
    """policy -> dataset -> rows into the tables' JSON: per graph, each dataset's cell and the
    average; per graph and split (parallel, sequential) the cell of the datasets' rows pooled."""
    tables: dict[str, Any] = {"datasets": [], "policies": {}, "splits": {}, "oracle": []}
    for policy, by_dataset in results.items():
        rows = [r for rs in by_dataset.values() for r in rs]
        if is_oracle_run(rows):
            tables["oracle"].append(policy)
        graphs = list(dict.fromkeys(r["variant"] for r in rows))
        per: dict[str, Any] = {}
        splits: dict[str, Any] = {}
        for g in graphs:
            cells = {ds: cell([r for r in rs if r["variant"] == g]) for ds, rs in by_dataset.items()}
            per[g] = {**cells, "average": average(list(cells.values()))}
            mine = [r for r in rows if r["variant"] == g]
            splits[g] = {
                s: cell([r for r in mine if r.get("split") == s]) for s in ("parallel", "sequential")
            }
        tables["policies"][policy], tables["splits"][policy] = per, splits
        tables["datasets"] = list(dict.fromkeys([*tables["datasets"], *by_dataset]))
    return tables


def _fmt(c: dict[str, Any], name: str, oracle: bool) -> str:
    if oracle and name in ACCURACY_CELLS:
        return "oracle"
    v, se = c.get(name), c.get(f"{name}_se")
    if v is None:
        return "–"
    scale = 100 if name in ("em", "f1") else 1
    digits = 0 if name in ("p50_ms", "p95_ms", "tpc") else 1 if scale == 100 else 2
    text = f"{scale * v:.{digits}f}"
    return text if se is None else f"{text} ± {scale * se:.{digits}f}"


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def table1_lines(tables: dict[str, Any]) -> list[str]:
    """EM (%) per dataset and on average, one row per policy and graph (the main table's layout)."""
    head = ["policy", "graph", *tables["datasets"], "average"]
    md = [_row(head), "|" + "---|" * len(head)]
    for policy, per in tables["policies"].items():
        oracle = policy in tables["oracle"]
        for g, cells in per.items():
            md.append(
                _row(
                    [
                        f"`{policy}`",
                        g,
                        *(_fmt(cells.get(d, {}), "em", oracle) for d in [*tables["datasets"], "average"]),
                    ]
                )
            )
    return md


def detail_lines(tables: dict[str, Any], groups: str) -> list[str]:
    """Every metric per dataset and average (``groups="policies"``) or per split (``"splits"``)."""
    names = ["EM %", "F1 %", "searches", "LLM calls", "valid turns", "p50 ms", "p95 ms", "TPC"]
    head = ["policy", "graph", "dataset" if groups == "policies" else "split", "n", *names]
    md = [_row(head), "|" + "---|" * len(head)]
    for policy, per in tables[groups].items():
        oracle = policy in tables["oracle"]
        for g, cells in per.items():
            for key, c in cells.items():
                if c["n"]:
                    md.append(
                        _row([f"`{policy}`", g, key, str(c["n"]), *(_fmt(c, m, oracle) for m in CELLS[1:])])
                    )
    return md


def markdown(tables: dict[str, Any], skipped: list[str]) -> str:
    md = ["# The paper's tables", "", "Cells: value ± standard error.", "", "## EM per dataset (%)", ""]
    md += table1_lines(tables)
    md += ["", "## Parallelizable and sequential questions (Table 3 layout)", ""] + detail_lines(
        tables, "splits"
    )
    md += ["", "## Every metric per dataset", ""] + detail_lines(tables, "policies")
    md += ["", _LEGEND]
    if tables["oracle"]:
        md += ["", "The oracle answers with the gold answer: its EM, F1 and TPC say `oracle`."]
    if skipped:
        md += ["", "## Not run", ""] + [f"- {s}" for s in skipped]
    return "\n".join(md) + "\n"


_LEGEND = (
    "searches = sub-queries sent to the retriever; LLM calls = policy generations, invalid and final-answer "
    "turns included (the paper's turns); valid turns = those the protocol read as a search or an answer; "
    "latency = wall time of one graph run; TPC = prompt + generated tokens over the questions answered right."
)


def write_tables(out: Path, tables: dict[str, Any], skipped: list[str], *, plot: bool = True) -> list[Path]:
    """``paper_tables.json``, ``paper_tables.md`` and (with matplotlib) ``em_vs_calls.png`` in ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    files = [out / "paper_tables.json", out / "paper_tables.md"]
    files[0].write_text(json.dumps({**tables, "skipped": skipped}, indent=2))
    files[1].write_text(markdown(tables, skipped))
    if plot and _plot(tables, out / "em_vs_calls.png"):
        files.append(out / "em_vs_calls.png")
    return files


def _plot(tables: dict[str, Any], path: Path) -> bool:
    """EM against LLM calls, one point per policy and graph (the datasets' average), with s.e. bars."""
    try:
        import matplotlib
    except ImportError:
        print("matplotlib is not installed (pip install 'parallelsearch[plots]'): no plot", file=sys.stderr)
        return False
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4.5))
    for policy, per in tables["policies"].items():
        for g, cells in per.items():
            a = cells["average"]
            if a["calls"] is None or a["em"] is None:
                continue
            ax.errorbar(a["calls"], a["em"], xerr=a["calls_se"], yerr=a["em_se"], fmt="o", capsize=3)
            ax.annotate(
                f"{g} ({policy})",
                (a["calls"], a["em"]),
                textcoords="offset points",
                xytext=(4, 4),
                fontsize=7,
            )
    ax.set_xlabel("LLM calls per question (average over datasets)")
    ax.set_ylabel("EM (average over datasets)")
    ax.set_title("EM against LLM calls")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True
