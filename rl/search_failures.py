"""The executor's guard against training on failed searches.

A failed search becomes a ``Search failed for ...`` observation (the graph never raises),
which is right when serving and wrong when training: the policy would learn from an outage.
The guard counts each episode's searches and failures and stops the run with the cause,
on any failure in the first episodes (a dead retriever), or later above a share (an outage).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from parallelsearch.stores.errors import ParallelSearchError

#: the share of failed searches a run tolerates (the executor's guard after its first episodes,
#: and ``rollout`` / ``eval``'s exit code)
DEFAULT_MAX_SHARE = 0.01


class SearchFailuresError(ParallelSearchError, RuntimeError):
    """Too many searches failed; the run stops instead of training on the error observations."""


def failed_share_error(failed: int, searches: int, max_share: float, setting: str, source: str) -> str | None:
    """Why a finished run (``rollout``, ``eval``) must not pass for a good one: more than
    ``max_share`` of its searches failed, so its scores count error observations; None otherwise."""
    if failed == 0 or failed <= max_share * searches:
        return None
    return (
        f"{failed} of {searches} searches failed ({failed / max(searches, 1):.1%} > {setting} {max_share:g}) "
        f"against {source}: the scores above count 'Search failed' observations; fix the retriever and run again"
    )


def first_search_error(state: dict[str, Any]) -> str | None:
    """The first failed search's query and error in an episode's final graph state."""
    for entry in state.get("trajectory") or ():
        if entry.get("type") != "observation":
            continue
        for row in entry.get("results") or ():
            if row.get("error"):
                return f"{row.get('query')!r}: {row['error']}"
    return None


@dataclass
class SearchFailureGuard:
    """Per-actor counts; :meth:`record` raises :class:`SearchFailuresError` past the limits."""

    first_episodes: int = 32
    max_share: float = DEFAULT_MAX_SHARE
    source: str = "the retriever"
    episodes: int = 0
    searches: int = 0
    failed: int = 0
    first_error: str | None = None
    stopped: str | None = None

    def record(self, state: dict[str, Any]) -> None:
        """Count one finished episode's searches (``subqueries``) and failures (``errors``)."""
        if self.stopped:
            raise SearchFailuresError(self.stopped)
        self.episodes += 1
        errors = int(state.get("errors") or 0)
        self.searches += int(state.get("subqueries") or 0)
        self.failed += errors
        if errors and self.first_error is None:
            self.first_error = first_search_error(state) or f"{errors} failed search(es)"
        if not self.failed:
            return
        if self.episodes <= self.first_episodes:
            why = (
                f"{self.failed} of {self.searches} searches failed in the first {self.episodes} episode(s) "
                f"(agent.search_failures.first_episodes={self.first_episodes})"
            )
        elif self.failed > self.max_share * max(self.searches, 1):
            why = (
                f"{self.failed} of {self.searches} searches failed ({self.failed / max(self.searches, 1):.1%} > "
                f"agent.search_failures.max_share={self.max_share:g})"
            )
        else:
            return
        self.stopped = f"stopping the run: {why} against {self.source}; first: {self.first_error}"
        raise SearchFailuresError(self.stopped)
