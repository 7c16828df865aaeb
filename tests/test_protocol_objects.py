"""A protocol is one object: a toy protocol defined here alone (one class, one registry entry)
runs whole episodes in the serving graph and in the training environment, with the same
searches, counts, record and rewards the built-in protocols get."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence

import pytest

from parallelsearch.agents.policies import ScriptedPolicy
from parallelsearch.agents.protocol import (
    PROTOCOLS,
    Action,
    Limits,
    Observation,
    ObservationStyle,
    SearchProtocol,
    SubqueryResult,
    TurnResult,
    register_protocol,
)
from parallelsearch.graphs import build_parallel_search_graph
from parallelsearch.graphs.record import Episode
from parallelsearch.rl import EnvGraph, score_episode


class Lines(SearchProtocol):
    """One line per turn: ``SEARCH: a | b`` or ``ANSWER: x``; results as ``query -> titles`` lines."""

    name = "lines"
    default_template = "Question: {question}\nReply with one line, SEARCH: a | b or ANSWER: x.\n"
    stop = ("\n",)

    def parse(self, result: TurnResult, limits: Limits) -> Action:
        text = result.text.strip() if isinstance(result.text, str) else ""
        head, _, rest = text.partition(":")
        if head == "ANSWER" and rest.strip():
            return Action("answer", answer=rest.strip())
        if head == "SEARCH":
            subs = tuple(dict.fromkeys(q.strip() for q in rest.split("|") if q.strip()))
            if 0 < len(subs) <= limits.max_subqueries and (limits.split or len(subs) == 1):
                return Action("search", subqueries=subs, raw_query=rest)
        return Action("invalid", reason="neither SEARCH: nor ANSWER:")

    def feedback(self, result: TurnResult, action: Action) -> Observation:
        return Observation(text=f"INVALID: {action.reason}\n")

    def render(
        self,
        results: Sequence[SubqueryResult],
        calls: Sequence[tuple[str, int | None]],
        style: ObservationStyle,
        before: str,
    ) -> Observation:
        lines = [f"{r.query} -> {', '.join(p.title for p in r.passages) or r.error}" for r in results]
        return Observation(text="RESULTS: " + " / ".join(lines) + "\n")

    def search_grammar(self, n: int, max_stages: int, query_chars: int) -> str:
        return rf"SEARCH: [a-z]+( \| [a-z]+){{0,{n - 1}}}"


class TitleSearcher:
    """A searcher whose one passage per query is titled like the query (the protocol is tested)."""

    def __init__(self) -> None:
        self.queries: list[str] = []

    async def asearch(self, query: str, k: int) -> list[dict]:
        self.queries.append(query)
        return [{"title": query.title(), "text": f"about {query}"}]


@pytest.fixture
def lines_protocol():
    register_protocol(Lines)
    yield Lines
    PROTOCOLS.pop("lines")


TURNS = ["SEARCH: monet | pissarro\n", "banter\n", "ANSWER: Camille Pissarro\n"]
LABEL = {"golden_answers": ["Camille Pissarro"], "type": "comparison"}


def test_a_toy_protocol_runs_an_episode_in_the_serving_graph(lines_protocol):
    searcher = TitleSearcher()
    graph = build_parallel_search_graph(ScriptedPolicy(TURNS), searcher, protocol="lines")
    out = asyncio.run(graph.ainvoke({"question": "Who is older?"}))
    assert out["protocol"] == "lines" and out["answer"] == "Camille Pissarro"
    assert sorted(searcher.queries) == ["monet", "pissarro"]  # one round of two sub-queries, in parallel
    assert out["transcript"] == (
        "Question: Who is older?\nReply with one line, SEARCH: a | b or ANSWER: x.\n"
        "SEARCH: monet | pissarro\nRESULTS: monet -> Monet / pissarro -> Pissarro\n"
        "banter\nINVALID: neither SEARCH: nor ANSWER:\n"
        "ANSWER: Camille Pissarro\n"
    )
    assert (out["policy_calls"], out["search_rounds"], out["subqueries"]) == (3, 1, 2)
    episode = Episode.from_state(out)
    assert [t["action"] for t in episode.turns] == ["search", "invalid", "answer"]
    assert episode.turns[1]["feedback"] == "INVALID: neither SEARCH: nor ANSWER:\n"
    assert episode.observations[0]["results"][1]["passages"][0]["title"] == "Pissarro"
    reward = score_episode(episode, LABEL)
    assert reward.correct and reward.decomposed and reward.searches == 1 and not reward.format_valid


def test_a_toy_protocol_runs_in_the_training_environment_and_gives_its_grammar(lines_protocol):
    g = EnvGraph(TitleSearcher(), protocol="lines", reward_mode="paper")

    async def episode() -> tuple:
        env = g.new_episode()
        prompt = await env.reset("Who is older?", LABEL)
        request = env.turn
        step = await env.step("SEARCH: monet | pissarro\n")
        end = await env.step("ANSWER: Camille Pissarro\n")
        return prompt, request, step, end

    prompt, request, step, end = asyncio.run(episode())
    assert prompt.startswith("Question: Who is older?") and request.protocol == "lines"
    assert request.stop == ("\n",)  # the pending turn carries the protocol's stop strings to the trainer
    assert step.observation == "RESULTS: monet -> Monet / pissarro -> Pissarro\n"
    reward = g.score(end.episode, LABEL)
    # right answer, one search split in two on a parallelizable question, valid: 1 + 0.45 + 0.35
    assert reward.format_valid and reward.total == pytest.approx(1.8)
    grammar = Lines().grammar(max_subqueries=2, think_chars=10)
    assert re.fullmatch(grammar, "<think>x</think>\nSEARCH: monet | pissarro")
    assert not re.fullmatch(grammar, "<think>x</think>\nSEARCH: a | b | c")


def test_an_unregistered_or_misdeclared_protocol_is_refused_by_name():
    with pytest.raises(ValueError, match="unknown protocol 'lines'"):
        build_parallel_search_graph(ScriptedPolicy(TURNS), TitleSearcher(), protocol="lines")
    with pytest.raises(TypeError, match="SearchProtocol subclass"):
        register_protocol(dict)  # type: ignore[arg-type]
    # a protocol object works without the registry
    out = asyncio.run(
        build_parallel_search_graph(ScriptedPolicy(TURNS), TitleSearcher(), protocol=Lines()).ainvoke(
            {"question": "Who is older?"}
        )
    )
    assert out["answer"] == "Camille Pissarro" and out["protocol"] == "lines"


def test_the_protocol_package_exports_what_its_users_import():
    """Every name ``parallelsearch.agents.protocol`` exports is imported from it somewhere outside the
    package (source, tests, benchmarks, examples, or the public API's lazy table): the package is a
    door to what is used, not a second list of its modules' names."""
    import ast

    from conftest import ROOT

    import parallelsearch
    import parallelsearch.agents.protocol as protocol

    imported = {n for n, mod in parallelsearch._LAZY.items() if mod == protocol.__name__}
    for path in ROOT.rglob("*.py"):
        rel = path.relative_to(ROOT).parts
        if rel[0].startswith(".") or rel[:2] == ("agents", "protocol"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module == protocol.__name__:
                imported |= {alias.name for alias in node.names}
    assert set(protocol.__all__) <= imported, sorted(set(protocol.__all__) - imported)
