"""Per-question scores from one graph output: accuracy (the rewards' metrics), counts,
decomposition, retrieval recall and coverage."""

from __future__ import annotations

import re
from typing import Any

from parallelsearch.data.metrics import answer_in_text, cover_match, exact_match, f1_score, normalize_answer
from parallelsearch.graphs.record import Episode


def hop_recall(hops: object, titles: set[str], *, dependent: bool = False) -> float | None:
    """Share of the question's hops (``metadata.hops``; with ``dependent``, only those naming an
    earlier hop by ``#k``) whose gold paragraph's title is among the retrieved passages; None when
    the question has no such hop."""
    wanted = [
        h["title"]
        for h in (hops if isinstance(hops, list) else [])
        if isinstance(h, dict) and h.get("title") and (h.get("refs") or not dependent)
    ]
    return round(sum(t in titles for t in wanted) / len(wanted), 4) if wanted else None


def score_output(q: dict[str, Any], out: dict[str, Any], variant: str, latency_ms: float) -> dict[str, Any]:
    """One results.jsonl row for question ``q`` answered by graph ``variant``."""
    meta = q.get("metadata") or {}
    golds = list(q.get("golden_answers") or [])
    answer = out.get("answer")
    episode = Episode.from_state(out)
    titles = {p["title"] for o in episode.observations for r in o["results"] for p in r["passages"]}
    retrieved = "\n".join(o["text"] for o in episode.observations)
    supporting = set(meta.get("supporting_titles") or [])
    searched = variant != "direct"
    gold_recall = round(len(supporting & titles) / len(supporting), 4) if supporting and searched else None
    hops = meta.get("hops") if searched else None
    coverage = None
    if searched and golds and not all(normalize_answer(g) in ("yes", "no") for g in golds):
        coverage = float(answer_in_text(retrieved, golds))
    return {
        **_identity(q, variant),
        "answer": answer,
        "status": out.get("status"),
        "em": exact_match(answer, golds),
        "f1": round(f1_score(answer, golds), 4),
        "acc": cover_match(answer, golds),
        "policy_calls": out.get("policy_calls"),
        "valid_turns": sum(t["action"] != "invalid" for t in episode.turns),
        "search_rounds": out.get("search_rounds"),
        "subqueries": out.get("subqueries"),
        "resolver_calls": out.get("resolver_calls", 0),
        "passages": out.get("passages"),
        "decomposed": episode.decomposed,
        "latency_ms": round(latency_ms, 3),
        "tokens_in": out.get("tokens_in"),
        "tokens_out": out.get("tokens_out"),
        "gold_recall": gold_recall,
        "hop_recall": hop_recall(hops, titles),
        "dependent_hop_recall": hop_recall(hops, titles, dependent=True),
        "answer_coverage": coverage,
        "search_errors": out.get("errors", 0),
        "policy": out.get("policy"),
        "labels": out.get("labels"),
        "error": None,
    }


def question_type(q: dict[str, Any]) -> str | None:
    """The question's type: ``metadata.type``, or for MuSiQue (whose files say ``na``) the hop
    type its id starts with (``2hop``, ``3hop1``, ``4hop3``, ...)."""
    given = (q.get("metadata") or {}).get("type")
    if given not in (None, "", "na"):
        return given
    m = re.match(r"([2-4]hop[1-3]?)__", str(q.get("id") or ""))
    return m.group(1) if m else given


def _identity(q: dict[str, Any], variant: str) -> dict[str, Any]:
    meta = q.get("metadata") or {}
    return {
        "variant": variant,
        "id": q.get("id"),
        "question": q.get("question"),
        "dataset": meta.get("dataset"),
        "type": question_type(q),
        "split": meta.get("split"),
        "golden_answers": list(q.get("golden_answers") or []),
    }


def error_row(q: dict[str, Any], variant: str, error: str, latency_ms: float) -> dict[str, Any]:
    """The row of a question whose graph run raised: kept, never silently dropped."""
    return {**_identity(q, variant), "latency_ms": round(latency_ms, 3), "error": error}
