"""Aggregate results rows into the summary: variant -> split -> metric (the paper's Tables 2, 3 and 6)."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

SPLITS = ("all", "parallel", "sequential", "single")


@dataclass(frozen=True)
class Metric:
    """One summary metric: how it is computed from a group's rows (``how``: ``mean`` of the rows'
    ``source`` field, a ``p50``/``p95`` of it, ``count`` of the rows, or ``parallel`` for the mean over
    the group's parallelizable questions), and how the report shows it: its column header, the tables
    it is a column of (``comparison``: per graph and split; ``types``: per question type) and the
    note under them. ``accuracy``: shown as ``oracle`` in an oracle run, absent without scoring.
    ``per_row``: the metric's value of one result row, when it is computed from the row's fields
    rather than read from ``source`` (None: the row does not count)."""

    name: str
    how: str = "mean"
    source: str | None = None
    column: str | None = None
    tables: tuple[str, ...] = ()
    note: str = ""
    accuracy: bool = False
    per_row: Callable[[dict[str, Any]], float | None] | None = None

    def of(self, row: dict[str, Any]) -> Any:
        return self.per_row(row) if self.per_row is not None else row.get(self.field)

    @property
    def field(self) -> str:
        return self.source or self.name


#: every metric of the summary, in the order of its keys and of the report's columns: the summary,
#: the report's columns, its tables and their notes are built from this one declaration
METRICS: tuple[Metric, ...] = (
    Metric("n", "count", column="n", tables=("comparison", "types")),
    Metric("em", accuracy=True, column="EM", tables=("comparison", "types")),
    Metric("f1", accuracy=True),
    Metric("acc", accuracy=True),
    Metric("policy_calls", column="calls", tables=("comparison", "types")),
    Metric("search_rounds", column="rounds", tables=("comparison", "types"),
           note="search stages (a search with #k takes one per dependency level)"),
    Metric("subqueries", column="sub-q", tables=("comparison", "types")),
    Metric("resolver_calls", column="resolver", tables=("types",), note="#k resolver calls"),
    Metric("decomposition_ratio", "parallel", "decomposed", column="DR", tables=("comparison",),
           note="decomposition ratio (share of parallelizable questions searched with two or more "
           "sub-queries in one search)"),
    Metric("latency_p50_ms", "p50", "latency_ms", column="p50 ms", tables=("comparison", "types")),
    Metric("latency_p95_ms", "p95", "latency_ms", column="p95 ms", tables=("comparison",)),
    Metric("gold_recall", column="recall", tables=("comparison", "types"),
           note="share of gold supporting passages retrieved"),
    Metric("hop_recall", column="hop recall", tables=("types",),
           note="share of the question's hops (metadata.hops) whose gold paragraph was retrieved"),
    Metric("dependent_hop_recall", column="dep. hop recall", tables=("types",),
           note="the same over the hops that name an earlier one by #k"),
    Metric("answer_coverage", column="coverage", tables=("comparison", "types"),
           note="gold answer found in retrieved text (yes/no answers excluded)"),
)  # fmt: skip
METRIC_NAMES: tuple[str, ...] = tuple(m.name for m in METRICS)
ACCURACY: tuple[str, ...] = tuple(m.name for m in METRICS if m.accuracy)
_PERCENTILES = {"p50": 0.5, "p95": 0.95}


def is_oracle_run(rows: Iterable[dict[str, Any]]) -> bool:
    """True when the rows were answered by the oracle (their policy labels say so)."""
    return any("oracle" in (r.get("labels") or []) for r in rows)


def _mean(xs: Iterable[float | None]) -> float | None:
    vals = [float(x) for x in xs if x is not None]
    return round(statistics.fmean(vals), 4) if vals else None


def percentile(xs: list[float], q: float, digits: int | None = None) -> float | None:
    """The ``q`` quantile of ``xs`` (0 <= q <= 1), interpolated linearly as numpy does, rounded to
    ``digits`` when given: the one percentile of the summaries and the benchmarks. No samples
    (every request failed) give None (JSON null), never a made-up 0 or a NaN."""
    if not xs:
        return None
    s = sorted(xs)
    pos = (len(s) - 1) * q
    lo, hi = int(pos), min(int(pos) + 1, len(s) - 1)
    value = s[lo] + (s[hi] - s[lo]) * (pos - lo)
    return value if digits is None else round(value, digits)


def _value(metric: Metric, ok: list[dict[str, Any]], split: str) -> Any:
    """``metric`` over the successful rows ``ok`` of one group (of split ``split``)."""
    if metric.how == "count":
        return len(ok)
    if metric.how in _PERCENTILES:
        values = [v for r in ok if (v := metric.of(r)) is not None]
        return percentile(values, _PERCENTILES[metric.how], 3)
    if metric.how == "parallel":
        par = [r for r in ok if r.get("split") == "parallel"]
        return _mean(float(r[metric.field]) for r in par) if split in ("all", "parallel") and par else None
    return _mean(metric.of(r) for r in ok)


def metrics(rows: list[dict[str, Any]], *, split: str, accuracy: bool = True) -> dict[str, Any]:
    """The metric dict of one group of rows (every one of :data:`METRICS`); one that does not apply
    (no rows, an accuracy metric of an unscored run) is None."""
    ok = [r for r in rows if not r.get("error")]
    out: dict[str, Any] = dict.fromkeys(METRIC_NAMES)
    out["n"] = len(ok)
    if ok:
        out.update({m.name: _value(m, ok, split) for m in METRICS if accuracy or not m.accuracy})
    return out


def dedup(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (variant, question id), a successful row before a failed one (resume never counts twice)."""
    seen: set[tuple[str, str]] = set()
    out = []
    for r in sorted(rows, key=lambda r: bool(r.get("error"))):
        key = (r.get("variant"), str(r.get("id")))
        if key in seen:
            continue
        seen.add(key)
        out.append(r)
    return out


def summarize(
    rows: Iterable[dict[str, Any]], *, accuracy: bool = True
) -> dict[str, dict[str, dict[str, Any]]]:
    """variant -> split (all, parallel, sequential, single) -> metric -> value."""
    rows = dedup(rows)
    summary: dict[str, dict[str, dict[str, Any]]] = {}
    for v in dict.fromkeys(r["variant"] for r in rows):
        vr = [r for r in rows if r["variant"] == v]
        summary[v] = {
            s: metrics(
                vr if s == "all" else [r for r in vr if r.get("split") == s], split=s, accuracy=accuracy
            )
            for s in SPLITS
        }
    return summary


def by_type(rows: Iterable[dict[str, Any]], *, accuracy: bool = True) -> dict[str, dict[str, dict[str, Any]]]:
    """variant -> 'dataset/type' -> metrics, plus mean tokens when the policy reports them."""
    groups: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for r in dedup(rows):
        groups.setdefault(r["variant"], {}).setdefault(f"{r.get('dataset')}/{r.get('type')}", []).append(r)
    result: dict[str, dict[str, dict[str, Any]]] = {}
    for variant, by_key in groups.items():
        result[variant] = {}
        for key, grp in by_key.items():
            split = "parallel" if grp[0].get("split") == "parallel" else "other"
            ok = [r for r in grp if not r.get("error")]
            tokens = {t: _mean(r.get(t) for r in ok) for t in ("tokens_in", "tokens_out")}
            result[variant][key] = {**metrics(grp, split=split, accuracy=accuracy), **tokens}
    return result
