"""Aggregate results rows into the summary: variant -> split -> metric (the paper's Tables 2, 3 and 6)."""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from typing import Any

SPLITS = ("all", "parallel", "sequential", "single")
ACCURACY = ("em", "f1", "acc")
_COST = ("policy_calls", "search_rounds", "subqueries", "resolver_calls")
_RETRIEVAL = ("gold_recall", "hop_recall", "dependent_hop_recall", "answer_coverage")
METRICS = ("n", *ACCURACY, *_COST, "decomposition_ratio", "latency_p50_ms", "latency_p95_ms", *_RETRIEVAL)


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


def metrics(rows: list[dict[str, Any]], *, split: str, accuracy: bool = True) -> dict[str, Any]:
    """The metric dict of one group of rows; a metric that does not apply is None."""
    ok = [r for r in rows if not r.get("error")]
    out: dict[str, Any] = dict.fromkeys(METRICS)
    out["n"] = len(ok)
    if not ok:
        return out
    means = (*ACCURACY, *_COST, *_RETRIEVAL) if accuracy else (*_COST, *_RETRIEVAL)
    for m in means:
        out[m] = _mean(r.get(m) for r in ok)
    par = [r for r in ok if r.get("split") == "parallel"]
    if split in ("all", "parallel") and par:
        out["decomposition_ratio"] = _mean(float(r["decomposed"]) for r in par)
    lat = [r["latency_ms"] for r in ok if r.get("latency_ms") is not None]
    out["latency_p50_ms"], out["latency_p95_ms"] = percentile(lat, 0.5, 3), percentile(lat, 0.95, 3)
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
