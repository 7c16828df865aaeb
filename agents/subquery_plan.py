"""Dependencies inside one search: the ``#k`` plan of its sub-queries (``seat of #1`` runs in the
stage after ``#1``; the rules: docs/architecture.md, "Dependent sub-queries"). Nothing here raises
on policy text: a bad plan is a :class:`Plan` with ``error`` set, which becomes corrective feedback.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from parallelsearch.agents.protocol import DEFAULT_MAX_STAGES, SUBQUERY_SEPARATOR, Action

#: a ``#k`` token; longer digit runs are matched too, so ``#123456789`` is out of range, not text
REFERENCE_RE = re.compile(r"(?<![\w#])#([0-9]+)(?!\w)")

_MAX_DIGITS = 6  # past this a number is shown shortened in the reason and is out of range


@dataclass(frozen=True)
class Reference:
    """One ``#k`` of a sub-query: ``k`` as written, ``target`` the index of the sub-query it names."""

    k: int
    target: int


@dataclass(frozen=True)
class Plan:
    """The stages of one search (0-based indices into ``subqueries``, in order); ``references[i]``
    are sub-query i's ``#k``; ``error`` is why the plan is invalid (then ``stages`` is empty)."""

    subqueries: tuple[str, ...]
    references: tuple[tuple[Reference, ...], ...] = ()
    stages: tuple[tuple[int, ...], ...] = ()
    error: str | None = None

    @property
    def valid(self) -> bool:
        return self.error is None

    @property
    def dependent(self) -> bool:
        """True when some sub-query names another (more than one stage)."""
        return len(self.stages) > 1

    def parents(self, index: int) -> tuple[int, ...]:
        """The sub-queries ``index`` refers to, by index, each once, in order."""
        return tuple(sorted({r.target for r in self.references[index]}))


def find_references(subquery: str) -> tuple[int, ...]:
    """The ``k`` of every ``#k`` token in ``subquery``, in order of first appearance, each once.
    A number too long to be a position is returned as -1 (never a valid position)."""
    out: dict[int, None] = {}
    for m in REFERENCE_RE.finditer(subquery):
        digits = m.group(1)
        out.setdefault(int(digits) if len(digits) <= _MAX_DIGITS else -1, None)
    return tuple(out)


def plan_search(
    subqueries: Sequence[str],
    written: Sequence[str] | None = None,
    *,
    max_stages: int = DEFAULT_MAX_STAGES,
) -> Plan:
    """The plan of one search's sub-queries (as the parser returns them). ``#k`` counts ``written``,
    the sub-queries as the policy wrote them (duplicates included), where it matches."""
    subs = tuple(str(s) for s in subqueries)
    order = _written_order(subs, written)
    n = len(order)
    if len(subs) < 2 or not any("#" in s for s in subs):
        return Plan(subs, tuple(() for _ in subs), (tuple(range(len(subs))),) if subs else ())
    # the position a sub-query is written at first is where its references are checked
    first_at = {}
    for pos, idx in enumerate(order, start=1):
        first_at.setdefault(idx, pos)
    references: list[tuple[Reference, ...]] = []
    for idx, sub in enumerate(subs):
        pos = first_at.get(idx, idx + 1)
        refs: list[Reference] = []
        for k in find_references(sub):
            if k < 1 or k > n:
                why = f"there are {n} sub-queries, numbered from #1" if k >= 0 else "it is not a position"
                shown = f"#{k}" if k >= 0 else "#<a very long number>"
                return Plan(subs, error=f"sub-query {pos} ({_clip(sub)}) refers to {shown}, but {why}")
            if k == pos:
                return Plan(subs, error=f"sub-query {pos} ({_clip(sub)}) refers to itself (#{k})")
            if k > pos:
                return Plan(
                    subs,
                    error=f"sub-query {pos} ({_clip(sub)}) refers to #{k}, a later sub-query; "
                    "#k may only name an earlier one",
                )
            refs.append(Reference(k, order[k - 1]))
        references.append(tuple(refs))
    stage_of: list[int] = []
    for idx in range(len(subs)):
        # targets come earlier in index order too: de-duplication keeps first occurrences
        stage_of.append(1 + max((stage_of[r.target] for r in references[idx]), default=0))
    depth = max(stage_of)
    if depth > max_stages:
        return Plan(
            subs,
            error=f"the references make {depth} stages in one search; at most {max_stages} are allowed "
            "(search the rest in a later turn)",
        )
    stages = tuple(tuple(i for i, s in enumerate(stage_of) if s == d) for d in range(1, depth + 1))
    return Plan(subs, tuple(references), stages)


def plan_action(action: Action, *, max_stages: int = DEFAULT_MAX_STAGES) -> Plan:
    """The plan of a parsed search (tags or tool calls); ``#k`` counts the ``##`` pieces as
    written, or the tool calls of the message in order."""
    if action.kind != "search":
        return Plan(tuple(action.subqueries), error=action.reason or f"a {action.kind} action is no search")
    subs = tuple(action.subqueries)
    if action.calls:
        written = [subs[c.index] for c in action.calls if c.index is not None and c.index < len(subs)]
    else:
        written = written_pieces(action.raw_query or "")
    return plan_search(subs, written, max_stages=max_stages)


def plan_turn(action: Action, *, max_stages: int, final: bool = False) -> tuple[Action, Plan | None]:
    """A search turn's ``#k`` plan, or None for a turn without one (no ``#``, one stage, the
    final turn): a bad plan makes the turn invalid, with the plan's reason."""
    if action.kind != "search" or final or not any("#" in q for q in action.subqueries):
        return action, None
    plan = plan_action(action, max_stages=max_stages)
    if not plan.valid:
        return replace(action, kind="invalid", reason=f"invalid #k reference: {plan.error}"), None
    return action, plan if plan.dependent else None


def written_pieces(body: str) -> list[str]:
    """The non-empty ``##`` pieces of a search body, whitespace-normalised, duplicates kept."""
    pieces = (" ".join(p.split()) for p in body.split(SUBQUERY_SEPARATOR))
    return [p for p in pieces if p]


def substitute(subquery: str, values: Mapping[int, str]) -> str:
    """``subquery`` with every ``#k`` token whose ``k`` is in ``values`` replaced by that text
    (whitespace-normalised; an empty value removes the token). Other tokens stay as written."""

    def repl(m: re.Match[str]) -> str:
        digits = m.group(1)
        k = int(digits) if len(digits) <= _MAX_DIGITS else -1
        if k not in values:
            return m.group(0)
        return " ".join(str(values[k]).split())

    return " ".join(REFERENCE_RE.sub(repl, subquery).split())


def _written_order(subs: tuple[str, ...], written: Sequence[str] | None) -> list[int]:
    """Sub-query index of each written position; the identity when ``written`` does not fit."""
    index = {s: i for i, s in enumerate(subs)}
    order = [index.get(" ".join(str(w).split()), -1) for w in written or ()]
    return order if set(order) == set(range(len(subs))) else list(range(len(subs)))


def _clip(text: str, n: int = 60) -> str:
    return repr(text if len(text) <= n else text[: n - 3] + "...")
