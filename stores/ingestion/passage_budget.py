"""The passage token budget a store was split with, recorded in the store and held to.

A passage over the budget is stored as pieces whose ids carry the budget (``passage_limit.py``),
so a rerun with the same budget adds nothing. With another budget every long passage is cut in
other places under other ids, and the store kept both splits: 80 entries became 247, and search
returned the same text twice. So the first run records its budget in the store
(``PassageStore.record_budget``; Chroma keeps it in the collection's metadata) and a run asking
for another is refused before anything is added, naming both values and the fix.
"""

from __future__ import annotations

from parallelsearch.stores.errors import ParallelSearchError
from parallelsearch.stores.passage_store import PassageStore


class PassageBudgetError(ParallelSearchError, ValueError):
    """A run asks for another passage token budget than the store was split with."""


def _said(budget: int) -> str:
    return "no budget (passages stored whole)" if budget == 0 else f"--max-passage-tokens {budget}"


def budget_line(store: PassageStore) -> str:
    """What ``store`` records of its passage budget, as a line to print."""
    have = store.recorded_budget()
    if have is None:
        return f"passage budget: store {store.name} records none (none of its runs recorded one yet)"
    return f"passage budget: store {store.name} was split with {_said(have)}; a run asking for another is refused"


def check_budget(store: PassageStore, max_tokens: int | None) -> str:
    """What a run with ``max_tokens`` (None: no budget) would do to ``store``'s passages, as a line
    to print; :class:`PassageBudgetError` when the store was split with another budget."""
    asked = max_tokens or 0
    have = store.recorded_budget()
    if have is None:
        if store.count():
            return (
                f"passage budget: store {store.name} records none (indexed before budgets were recorded); "
                f"this run records {_said(asked)} (stores --check {store.name} names passages an earlier "
                "budget stored twice)"
            )
        return f"passage budget: store {store.name} records none yet; this run records {_said(asked)}"
    if have != asked:
        same = f"--max-passage-tokens {have}" if have else "no budget (max_passage_tokens=None)"
        new = f" --max-passage-tokens {asked}" if asked else ""
        raise PassageBudgetError(
            f"store {store.name} was split with {_said(have)}, this run asks for {_said(asked)}: every "
            f"longer passage would be cut again under new ids and stored twice. Rerun with {same}, or index "
            f"the files into a new store (parallelsearch index --store {store.name}-new{new} FILES)"
        )
    return f"passage budget: store {store.name} was split with {_said(have)}, as this run asks: nothing is split again"


def settle_budget(store: PassageStore, max_tokens: int | None) -> str:
    """:func:`check_budget`, then the budget recorded where the store records none yet."""
    said = check_budget(store, max_tokens)
    if store.recorded_budget() is None:
        store.record_budget(max_tokens or 0)
    return said
