"""The reward from what the agent did, for any agent: the episode read from the conversation the
agent held through the gateway (its tool calls, the tool messages it sent back, its final reply)
scores the project's agent as its graph's record does, on 500 scripted episodes of every kind of
turn; LangChain's own ``create_agent`` is scored on its behaviour; a factory that returns no
agent is named in one line."""

from __future__ import annotations

import asyncio
import json
import random

import pytest
from engines import SamplingParamsStandIn
from gateway_support import END, LABEL, QUESTION, KeyedEngine, Library, call, run, tools_tokenizer

from parallelsearch.agents.protocol import Limits
from parallelsearch.graphs.config import GraphConfig
from parallelsearch.graphs.record import Episode
from parallelsearch.rl.gateway import gateway_chat_model
from parallelsearch.rl.gateway.conversation import conversation_episode
from parallelsearch.rl.gateway.executor import GatewayExecutor
from parallelsearch.rl.gateway.factory import check_agent, default_agent
from parallelsearch.rl.rewards import score_episode

EPISODES = 500
TWO_CALLS = f"{call('Scott Derrickson')}\n{call('Ed Wood')}{END}"


@pytest.fixture(scope="module")
def tok():
    return tools_tokenizer()


def _turn(rng: random.Random, golden: str) -> str:
    """One scripted turn of a kind the chat agent's model writes (valid or not)."""
    kind = rng.choice(
        ["one", "two", "three", "dup", "many", "ref", "think", "right", "wrong", "broken", "empty"]
    )
    pool = ["Scott Derrickson", "Ed Wood", "Doctor Strange", "Plan 9", "Hollywood"]
    if kind in ("one", "two", "three"):
        return "\n".join(call(q) for q in rng.sample(pool, ["one", "two", "three"].index(kind) + 1)) + END
    return {
        "dup": f"{call('Ed Wood')}\n{call('Ed Wood')}{END}",
        "many": "\n".join(call(f"query {i}") for i in range(9)) + END,  # more than max_subqueries
        "ref": f"{call('Doctor Strange director')}\n{call('#1 nationality')}{END}",
        "think": f"Let me look both up.\n{call('Scott Derrickson')}\n{call('Ed Wood')}{END}",
        "right": golden + END,
        "wrong": "Canada" + END,
        "broken": '<tool_call>":"</tool_call>' + END,
        "empty": END,
    }[kind]


def scripts(n: int, seed: int = 0) -> dict[str, tuple[list[str], dict]]:
    rng = random.Random(seed)
    out = {}
    for i in range(n):
        golden = rng.choice(["yes", "Paris"])
        label = {"golden_answers": [golden], "type": rng.choice(["comparison", "bridge"])}
        question = f"Question {i}: were A{i} and B{i} of the same nationality?"
        out[question] = (
            [_turn(rng, golden) for _ in range(rng.randint(1, 4))],
            {**label, "question": question},
        )
    return out


def test_the_conversation_scores_the_projects_agent_as_its_record_does(tok):
    """500 episodes of the README chat agent through the gateway: the episode read from the
    conversation and the graph's record give the same reward, part for part, in both paper modes."""
    plan = scripts(EPISODES)
    eng = KeyedEngine(tok, {q: turns for q, (turns, _) in plan.items()})
    agents = {m: GatewayExecutor(default_agent("parallel", GraphConfig(top_k=1, max_turns=m))(
        gateway_chat_model(), Library())) for m in (1, 2, 3)}  # fmt: skip
    rng = random.Random(1)

    async def one(question: str) -> tuple[Episode, Episode]:
        gateway = agents[rng.choice([1, 2, 3])]
        session = gateway.session(SamplingParamsStandIn(), 8192, tok, eng)
        state = await gateway.run_agent(session, question)
        return Episode.from_state(state), conversation_episode(session.held, session.answered, Limits())

    async def every() -> list[tuple[Episode, Episode]]:
        qs, done = list(plan), []
        for start in range(0, len(qs), 25):
            done += await asyncio.gather(*(one(q) for q in qs[start : start + 25]))
        return done

    pairs = run(every())
    kinds = set()
    for (question, (_, label)), (record, held) in zip(plan.items(), pairs, strict=True):
        for mode in ("paper-strict", "paper"):
            want, got = score_episode(record, label, mode), score_episode(held, label, mode)
            assert got.parts() == want.parts() and got.total == want.total, (question, mode)
        assert (held.answer, held.subqueries_per_search) == (record.answer, record.subqueries_per_search)
        kinds.add((record.answered, record.decomposed, record.format_check()[0]))
    assert len(kinds) >= 4  # answered or not, split or not, valid or not: the kinds were all met


def create_agent_factory(model, searcher):
    """What a user writes with LangChain's own agent: one ``search`` tool over the run's searcher."""
    from langchain.agents import create_agent
    from langchain_core.tools import tool

    @tool
    def search(query: str) -> str:
        """Search the corpus for passages about ``query``."""
        return "\n".join(p["text"] for p in searcher(query))

    return create_agent(model, tools=[search])


def test_a_create_agent_factory_is_scored_as_the_projects_agent_on_a_perfect_episode(tok):
    """A perfect scripted episode (two parallel calls, then the right answer) through LangChain's
    ``create_agent`` scores what the project's agent scores on the same turns."""
    scores = {}
    for name, agent in {
        "create_agent": create_agent_factory(gateway_chat_model(), Library()),
        "project": default_agent("parallel", GraphConfig(top_k=1, max_turns=2))(
            gateway_chat_model(), Library()
        ),
    }.items():
        eng = KeyedEngine(tok, {QUESTION: [TWO_CALLS, "yes" + END]})
        sample = run(
            GatewayExecutor(agent).execute("", json.dumps(LABEL), SamplingParamsStandIn(), 4096, tok, eng)
        )
        logs = {k: v.item() for k, v in sample["extra_logs"].items()}
        scores[name] = (
            sample["reward"],
            logs["answered"],
            logs["searches"],
            logs["subqueries"],
            logs["decomposed"],
        )
        assert logs["gateway_forks"] == 0 and logs["gateway_token_mismatches"] == 0
    assert scores["create_agent"] == scores["project"] and scores["project"][0] > 1.0


@pytest.mark.parametrize(
    ("returned", "named"),
    [
        (None, "returned None"),
        ("model", "returned a chat model"),
        ("bound", "returned a chat model"),
        (42, "returned int"),
    ],
)
def test_a_factory_that_returns_no_agent_is_named_in_one_line(returned, named):
    model = gateway_chat_model()
    value = {"model": model, "bound": model.bind_tools([{"type": "function", "function": {
        "name": "search", "parameters": {"type": "object", "properties": {}}}}])}.get(returned, returned)  # fmt: skip
    with pytest.raises(ValueError, match=rf"^agent.factory .mine:build. {named}") as e:
        check_agent(value, "mine:build")
    assert "\n" not in str(e.value)
