"""A prompt that changes between calls, and ``train --check``'s scripted gateway episode: a
``@dynamic_prompt`` counting searches loses no episode and trains token for token on the prompt
each call was sent; the check runs the configured agent through a search and an answer, and names
a hang, a fork, a conversation the reward cannot read, or a factory that returns no agent."""

from __future__ import annotations

import json

import pytest
from engines import SamplingParamsStandIn
from gateway_support import END, LABEL, KeyedEngine, Library, call, run, tools_tokenizer, user_module
from test_gateway_check import _model
from test_training_mistakes import check_lines, write_data

from parallelsearch.cli import main
from parallelsearch.rl.episode import decode_tokens
from parallelsearch.rl.gateway import gateway_chat_model
from parallelsearch.rl.gateway.executor import GatewayExecutor
from parallelsearch.rl.tiny_model import TOOLS_CHAT_TEMPLATE

AGENTS = '''
import asyncio

from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware, dynamic_prompt
from langchain_core.messages import SystemMessage
from langchain_core.tools import tool

from parallelsearch import create_parallel_search_agent


@dynamic_prompt
def searches_so_far(request):
    n = sum(len(getattr(m, "tool_calls", None) or ()) for m in request.state["messages"])
    return f"You have made {n} search calls so far."


class Marker(AgentMiddleware):
    def before_model(self, state, runtime):
        return None

    def wrap_model_call(self, request, handler):
        before = request.system_message.content if request.system_message else ""
        return handler(request.override(system_message=SystemMessage(content=before + "\\nMarker line.")))


class Stalls(AgentMiddleware):
    async def awrap_tool_call(self, request, handler):
        await asyncio.Event().wait()


def counting(model, searcher):
    return create_parallel_search_agent(model, searcher, middleware=[searches_so_far], top_k=1, max_turns=3)


def marked(model, searcher):
    return create_parallel_search_agent(model, searcher, middleware=[Marker()], top_k=1, max_turns=3)


def stalling(model, searcher):
    return create_parallel_search_agent(model, searcher, middleware=[Stalls()], top_k=1, max_turns=3)


def langchain_agent(model, searcher):
    @tool
    def search(query: str) -> str:
        """Search the corpus."""
        return "passages"

    return create_agent(model, tools=[search])


def lookup_agent(model, searcher):
    @tool
    def lookup(text: str) -> str:
        """Look a text up."""
        return "passages"

    return create_agent(model, tools=[lookup])


def nothing(model, searcher):
    return None


def bound(model, searcher):
    return model.bind_tools([])
'''


@pytest.fixture()
def agents_module(tmp_path, monkeypatch):
    yield from user_module(tmp_path, monkeypatch, "my_agents", AGENTS)


def test_a_dynamic_prompt_counting_searches_loses_no_episode_and_is_token_exact(agents_module):
    """Each search changes the system prompt: every call after it is sent its own render; the
    sample trains on the calls since the last change, each span after exactly the ids the engine
    was sent for it; the episode keeps its reward (0 lost)."""
    from parallelsearch.rl.gateway.factory import load_factory

    counting = load_factory(f"{agents_module}:counting")
    tok = tools_tokenizer()
    turns = [
        f"{call('Scott Derrickson')}\n{call('Ed Wood')}{END}",
        f"{call('Ed Wood nationality')}{END}",
        "yes" + END,
    ]
    questions = [f"Were person {i} and person {i + 1} of the same nationality?" for i in range(20)]
    eng = KeyedEngine(tok, {q: turns for q in questions})
    gateway = GatewayExecutor(counting(gateway_chat_model(), Library()))
    lost = 0
    for q in questions:
        before = len(eng.requests)
        sample = run(
            gateway.execute(
                "", json.dumps({**LABEL, "question": q}), SamplingParamsStandIn(logprobs=1), 8192, tok, eng
            )
        )
        logs = {k: v.item() for k, v in sample["extra_logs"].items()}
        lost += int(logs["gateway_failed_closed"] or sample["reward"] <= 0)
        assert (logs["gateway_prompt_drifts"], logs["gateway_forks"], logs["gateway_untrained_turns"]) == (
            2,
            2,
            2,
        )
        ids, ranges = sample["observation_tokens"], sample["action_ranges"]
        sent, out = eng.requests[before:], eng.outputs[before:]
        assert ids == sent[-1] + out[-1] and ranges == [
            (len(sent[-1]), len(ids))
        ]  # the last call's own prompt
        assert "You have made 3 search calls so far." in decode_tokens(tok, ids[: ranges[0][0]])
        assert logs["gateway_token_mismatches"] == 0 and logs["answered"] == 1 and logs["searches"] == 2
    assert lost == 0


def _check(tmp_path, tiny_model_dir, *sets: str) -> int:
    model = _model(tmp_path, tiny_model_dir, "tools", TOOLS_CHAT_TEMPLATE)
    data = write_data(tmp_path / "train.jsonl")
    sets = (f"prompt_data={data}", f"model={model}", f"job_dir={tmp_path / 'job'}", "agent.mode=gateway",
            "agent.reward.mode=paper", *sets)  # fmt: skip
    return main(
        ["train", "--preset", "paper", "--check", "--skip-probe", *(x for s in sets for x in ("--set", s))]
    )


FACTORY = "agent.factory=my_agents:"


@pytest.mark.timeout(300)  # the old code hung on the sync hooks (in training; the check ran one turn)
@pytest.mark.parametrize(
    ("sets", "rc", "said"),
    [
        ((), 0, "the README chat agent ran a scripted search, then an answer, in 2 model calls; the reward reads 1 search and the answer from its record; 0 token mismatches"),
        ((FACTORY + "marked",), 0, "ran a scripted search, then an answer, in 2 model calls"),
        ((FACTORY + "langchain_agent",), 0, "the reward reads 1 search and the answer from its conversation; 0 token mismatches"),
        ((FACTORY + "counting",), 0, "warning: agent.factory 'my_agents:counting''s system prompt changes between model calls (1 of 2 calls"),
        ((FACTORY + "nothing",), 1, "check failed: agent.factory 'my_agents:nothing' returned None (does the function end without `return`?)"),
        ((FACTORY + "bound",), 1, "check failed: agent.factory 'my_agents:bound' returned a chat model (ChatOpenAI, bound to tools), not an agent"),
        ((FACTORY + "lookup_agent",), 1, "the reward cannot read what the agent did: its model is offered no 'search' tool (tools: ['lookup'])"),
        ((FACTORY + "stalling", "agent.gateway_timeout_s=1"), 1, "the scripted episode got stuck: no model call for 1 s after model call 1, which replied with 1 tool call(s)"),
    ],
    ids=["default", "sync_hooks", "create_agent", "dynamic_prompt", "none", "bound_model", "unreadable_tools", "stuck"],
)  # fmt: skip
def test_the_check_runs_a_full_scripted_episode_or_refuses_in_one_line(
    tmp_path, capsys, tiny_model_dir, agents_module, sets, rc, said
):
    """A factory that works runs a scripted search and answer; one that cannot be trained is refused
    in the check's last line, naming the factory."""
    assert _check(tmp_path, tiny_model_dir, *sets) == rc
    if rc:
        line = check_lines(capsys)[-1]
        assert said in line, line
    else:
        assert said in capsys.readouterr().out
