"""What ``ask`` shows of a run: its steps as events (a turn, a search round, the answer), as lines
or JSON lines (``--stream --json``), read from the trajectory entries each node writes, so a
streamed run and the finished run's trajectory print the same lines."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from parallelsearch.graphs.record import TrajectoryRecord

#: the counts the closing ``answer`` event carries
ANSWER_FIELDS = tuple(
    "answer status labels policy_calls search_rounds subqueries resolver_calls passages errors total_ms".split()
)


def step_event(step: TrajectoryRecord) -> dict[str, Any]:
    """One trajectory entry as an event: ``turn`` (numbered from 1), ``review`` or ``search`` (a round, from 1)."""
    if step["type"] == "turn":
        return {
            "type": "turn",
            "turn": step["index"] + 1,
            "role": step.get("role", "planner"),
            "final": step["final"],
            "action": step["action"],
            "subqueries": list(step["subqueries"]),
            "answer": step["answer"],
            "reason": step["reason"],
            "ms": step["ms"],
        }
    if step["type"] == "review":
        return {
            "type": "review",
            "turn": step["turn"] + 1,
            "kept": step["kept"],
            "rejected": step["rejected"],
        }
    return {
        "type": "search",
        "round": step["round"] + 1,
        "results": [
            {
                "query": r["query"],
                "titles": [p["title"] for p in r["passages"]],
                "scores": [p["score"] for p in r["passages"]],
                "error": r["error"],
                "ms": r.get("ms"),
            }
            for r in step["results"]
        ],
    }


def answer_event(out: dict[str, Any]) -> dict[str, Any]:
    return {"type": "answer", **{k: out.get(k) for k in ANSWER_FIELDS}}


def event_lines(event: dict[str, Any]) -> list[str]:
    """An event as the lines a person reads."""
    if event["type"] == "turn":
        head = f"[turn {event['turn']}{' (final)' if event['final'] else ''}] {event['action']}"
        if event["subqueries"]:
            head += ": " + " | ".join(event["subqueries"])
        if event.get("answer"):
            head += f" -> {event['answer']}"
        if event.get("reason"):
            head += f" ({event['reason']})"
        return [f"{head}  [{event['ms'] or 0:.1f} ms]"]
    if event["type"] == "review":
        return [
            f"  [review of turn {event['turn']}] {event['kept']} call(s) run, "
            f"{event['rejected']} answered by the reviewer"
        ]
    if event["type"] == "search":
        lines = [f"  [search round {event['round']}]"]
        for r in event["results"]:
            if r["error"]:
                found = f"ERROR {r['error']}"
            else:
                found = ", ".join(
                    f"{t} ({s:.2f})" if s is not None else t
                    for t, s in zip(r["titles"], r["scores"], strict=True)
                )
            lines.append(f"    {r['query']!r}: {found or '(no passages)'}  [{r['ms'] or 0:.1f} ms]")
        return lines
    labels = f" [{', '.join(event['labels'])}]" if event.get("labels") else ""
    return [
        "",
        f"answer: {event['answer']}{labels}",
        f"policy calls {event['policy_calls']}, search rounds {event['search_rounds']}, "
        f"sub-queries {event['subqueries']}, "
        + (f"resolver calls {event['resolver_calls']}, " if event.get("resolver_calls") else "")
        + f"passages {event['passages']}, errors {event['errors']}, "
        f"total {event['total_ms'] or 0:.0f} ms",
    ]


def run_events(out: dict[str, Any]) -> list[dict[str, Any]]:
    """A finished run's events, in order."""
    return [step_event(s) for s in out.get("trajectory") or []] + [answer_event(out)]


async def stream_events(graph: Any, inp: dict[str, Any], **kwargs: Any) -> AsyncIterator[dict[str, Any]]:
    """The events of one run as its nodes finish, the ``answer`` event last."""
    final: dict[str, Any] = {}
    async for mode, chunk in graph.astream(inp, stream_mode=["updates", "values"], **kwargs):
        if mode == "values":
            final = chunk
            continue
        for update in chunk.values():
            if not isinstance(update, dict):
                continue
            steps = update.get("trajectory")
            steps = getattr(steps, "value", steps)  # an episode reset writes Overwrite([...])
            for step in steps or []:
                yield step_event(step)
    yield answer_event(final)
