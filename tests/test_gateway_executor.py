"""Gateway mode end to end: OpenRLHF's executor loading path (``AgentExecutor()`` reading the
agent config file) with ``mode: gateway`` and a user's own factory; the sample's fields; the
configuration's checks; and parity with the ``tool_text`` environment on scripted episodes.
"""

from __future__ import annotations

import json
import os
import sys
import typing

import pytest
from conftest import UvicornThread
from engines import SamplingParamsStandIn, load_like_openrlhf
from gateway_support import (
    END,
    LABEL,
    QUESTION,
    KeyedEngine,
    Library,
    call,
    engine,
    retrieve_app,
    run,
    tools_tokenizer,
    user_module,
)

from parallelsearch.graphs.config import GraphConfig
from parallelsearch.rl.agent_config import ENV_VAR, AgentConfig
from parallelsearch.rl.data import train_record
from parallelsearch.rl.episode import decode_tokens
from parallelsearch.rl.gateway import gateway_chat_model
from parallelsearch.rl.gateway.executor import GatewayExecutor
from parallelsearch.rl.gateway.factory import default_agent
from parallelsearch.rl.rewards import REWARD_PARTS

RECORD = {
    "id": "gateway-1",
    "question": QUESTION,
    "golden_answers": ["yes"],
    "metadata": {"type": "comparison", "split": "parallel", "dataset": "hotpotqa"},
}
TWO_CALLS = f"{call('Scott Derrickson')}\n{call('Ed Wood')}{END}"


@pytest.fixture(scope="module")
def tok():
    return tools_tokenizer()


USER_MODULE = """
from langchain.agents.middleware import AgentMiddleware
from langchain_core.messages import SystemMessage

from parallelsearch import create_parallel_search_agent

LINE = "House rule: cite the page title you used."


class HouseRule(AgentMiddleware):
    def wrap_model_call(self, request, handler):
        before = request.system_message.content if request.system_message else ""
        return handler(request.override(system_message=SystemMessage(content=before + "\\n" + LINE)))


def build(model, searcher):
    return create_parallel_search_agent(model, searcher, middleware=[HouseRule()], top_k=1, max_turns=2)
"""


@pytest.fixture()
def user_factory(tmp_path, monkeypatch):
    """A user's module in the working directory, named as ``agent.factory`` names it."""
    for name in user_module(tmp_path, monkeypatch, "house_agents", USER_MODULE):
        yield f"{name}:build"


def test_a_user_factory_with_its_own_middleware_trains_through_the_gateway(
    tmp_path, monkeypatch, tok, user_factory
):
    """The executor OpenRLHF loads builds the user's agent with the gateway's model; its
    middleware's system-prompt line is in the sample's tokens; the sample trains on exactly the
    engine's spans and its reward is the record's."""
    with UvicornThread(retrieve_app()) as srv:
        path = tmp_path / "agent.yaml"
        health = tmp_path / "health"
        path.write_text(
            f"retriever_url: {srv.url}/retrieve\nmode: gateway\nfactory: {user_factory}\nhealth_log: {health}\n"
        )
        monkeypatch.setenv(ENV_VAR, str(path))
        executor = load_like_openrlhf()
        eng = engine(tok, [TWO_CALLS, "yes" + END])
        rec = train_record(RECORD, template="tool_text", tokenizer=tok)
        sample = run(
            executor.execute(rec["prompt"], rec["label"], SamplingParamsStandIn(logprobs=1), 4096, tok, eng)
        )
    # the health record every executor writes, from this sample (agent.health_log)
    from parallelsearch.rl.health import episode_health

    (written,) = [json.loads(line) for f in health.glob("*.jsonl") for line in f.read_text().splitlines()]
    assert {**written, "time": 0.0} == episode_health(sample)
    ids, ranges = sample["observation_tokens"], sample["action_ranges"]
    assert "House rule: cite the page title you used." in decode_tokens(tok, ids[: ranges[0][0]])
    assert [ids[a:b] for a, b in ranges] == eng.outputs and ids[: ranges[0][0]] == eng.requests[0]
    assert sample["rollout_log_probs"][ranges[0][0] : ranges[0][1]] == [-0.5] * len(eng.outputs[0])
    logs = {k: v.item() for k, v in sample["extra_logs"].items()}
    assert logs["subqueries"] == 2 and logs["answered"] == 1 and logs["reward_outcome"] == 1.0
    assert (
        logs["gateway_forks"] == 0
        and logs["gateway_retokenized"] == 0
        and logs["gateway_token_mismatches"] == 0
    )
    assert sample["reward"] == pytest.approx(
        logs["reward_outcome"]
        + logs["reward_decomposition"]
        + logs["reward_search_count"]
        + logs["reward_format"]
    )


@pytest.mark.parametrize(
    "turn",
    [
        '<tool_call>":"</tool_call>',  # a block that is JSON but not an object
        '<tool_call>\n{"name": "search", "arguments": {"query": "J\\u Wa"}}\n</tool_call>',  # not JSON
        'x <tool_call></tool_call>"}}<tool_call>\n{"name": "search", "arguments": {"query": "a"}}\n</tool_call>',
        '<tool_call>\n{"name": "search", "arguments": ""}\n</tool_call>',  # empty arguments: no arguments
    ],
)
def test_a_broken_tool_call_is_answered_as_a_served_vllm_answers_it_and_does_not_fork(tok, turn):
    """A block vLLM's Hermes parser cannot read comes back as the turn's content (as it does), so the
    agent's next request repeats exactly what the model wrote: no fork, the sample keeps its loss,
    and the agent tells the model its call was not read."""
    agent = default_agent("parallel", GraphConfig(top_k=1, max_turns=2))(gateway_chat_model(), Library())
    gateway = GatewayExecutor(agent)
    eng = engine(tok, [turn + END, "yes" + END])
    sample = run(gateway.execute("", json.dumps(LABEL), SamplingParamsStandIn(), 4096, tok, eng))
    logs = {k: v.item() for k, v in sample["extra_logs"].items()}
    assert (logs["gateway_forks"], logs["gateway_failed_closed"], logs["gateway_token_mismatches"]) == (
        0,
        0,
        0,
    )
    assert len(sample["action_ranges"]) == 2 and logs["answered"] == 1


def test_a_reply_with_unread_tool_call_markup_is_not_an_answer():
    from parallelsearch.agents.protocol.tools import UNREAD_CALL_REASON, parse_tool_calls

    action = parse_tool_calls([], 'x <tool_call>":"</tool_call>')
    assert (action.kind, action.reason) == ("invalid", UNREAD_CALL_REASON)
    assert parse_tool_calls([], "Beijing").kind == "answer"


def test_a_forked_episode_trains_on_the_render_it_was_answered_from(tok):
    """A middleware that rewrites the history the model was shown (here: the question of the
    earlier turn) forks the session: the agent is answered from the rewritten render, and the
    sample restarts there: its tokens are that call's, its earlier turn context without loss."""
    from langchain.agents.middleware import AgentMiddleware
    from langchain_core.messages import HumanMessage

    class Rewriter(AgentMiddleware):
        async def awrap_model_call(self, request, handler):
            if len(request.messages) > 1:  # after the first turn: the question reworded
                request = request.override(messages=[HumanMessage(content="reworded"), *request.messages[1:]])
            return await handler(request)

    from parallelsearch import create_parallel_search_agent

    agent = create_parallel_search_agent(
        gateway_chat_model(), Library(), middleware=[Rewriter()], top_k=1, max_turns=2
    )
    eng = engine(tok, [TWO_CALLS, "yes" + END])
    sample = run(
        GatewayExecutor(agent).execute(
            "", json.dumps(LABEL), SamplingParamsStandIn(logprobs=1), 4096, tok, eng
        )
    )
    logs = {k: v.item() for k, v in sample["extra_logs"].items()}
    assert logs["gateway_forks"] == 1 and logs["gateway_failed_closed"] == 0
    assert logs["gateway_untrained_turns"] == 1 and logs["gateway_token_mismatches"] == 0
    # the engine's calls from the fork on (the reworded question restarts the scripted engine's turns)
    ids, ranges = sample["observation_tokens"], sample["action_ranges"]
    assert len(ranges) == len(eng.outputs) - 1 and ids == eng.requests[-1] + eng.outputs[-1]
    for (start, end), sent, out in zip(ranges, eng.requests[1:], eng.outputs[1:], strict=True):
        assert (ids[:start], ids[start:end]) == (sent, out)
    assert "reworded" in decode_tokens(tok, ids[: ranges[0][0]]) and sample["reward"] > 0


def test_a_stuck_episode_fails_closed_and_the_sample_keeps_a_finite_mean(tok):
    """An agent that waits without a bound (here a tool that never returns) meets the episode's
    deadline: one log line names the step, the sample fails closed, and its one action token keeps
    OpenRLHF's per-sample KL mean finite."""
    import asyncio

    from langchain.agents.middleware import AgentMiddleware

    class Stalls(AgentMiddleware):
        async def awrap_tool_call(self, request, handler):
            await asyncio.Event().wait()  # never set

    from parallelsearch import create_parallel_search_agent

    agent = create_parallel_search_agent(
        gateway_chat_model(), Library(), middleware=[Stalls()], top_k=1, max_turns=2
    )
    eng = engine(tok, [TWO_CALLS, "yes" + END])
    gateway = GatewayExecutor(agent, timeout_s=0.5)
    sample = run(gateway.execute("", json.dumps(LABEL), SamplingParamsStandIn(logprobs=1), 4096, tok, eng))
    logs = {k: v.item() for k, v in sample["extra_logs"].items()}
    assert logs["gateway_stuck"] == 1 and logs["gateway_failed_closed"] == 1
    assert "after model call 1, which replied with 2 tool call(s)" in gateway.last_session.stuck_reason
    end = len(sample["observation_tokens"])
    assert sample["action_ranges"] == [(end - 1, end)] and sample["reward"] == 0.0
    # OpenRLHF's own sample -> experience and its per-sample KL mean (experience_maker's masked_mean
    # over dim -1): one action token keeps it finite where an empty mask gave 0/0 = NaN
    import torch
    from engines import openrlhf_function
    from openrlhf.trainer.ppo_utils.experience import Experience

    masked_mean = openrlhf_function("models/utils.py", "masked_mean", Optional=typing.Optional)
    to_experience = openrlhf_function(
        "trainer/ppo_utils/samples_generator.py",
        "_process_response_into_experience",
        inside="SamplesGenerator",
        Experience=Experience,
    )
    exp = to_experience(None, sample, max_len=4096)
    kl = torch.full(exp.action_mask.shape, 0.25)
    assert int(exp.action_mask.sum()) == 1
    assert torch.isfinite(masked_mean(kl, exp.action_mask, dim=-1)).all()


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"mode": "gateway", "reward": {"mode": "official"}}, "set agent.reward.mode=paper"),
        ({"factory": "house_agents:build"}, "used in gateway mode only"),
        ({"mode": "gateway", "factory": "house_agents.build"}, "must be MODULE:FUNCTION"),
        ({"mode": "gateway", "constrained": True}, "samples the agent's turns freely"),
        ({"mode": "chat"}, "mode"),
    ],
)
def test_gateway_settings_are_checked_when_the_config_is_read(fields, message):
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match=message):
        AgentConfig(retriever_url="http://127.0.0.1:1/retrieve", **fields)


def test_train_set_selects_gateway_mode_and_the_factory():
    from parallelsearch.rl.train_config import load_train_config

    cfg = load_train_config(
        preset="paper",
        overrides=[
            "agent.mode=gateway",
            "agent.reward.mode=paper",
            "agent.factory=my_agents:build",
            "agent.gateway_sampling=refuse",
        ],
    )
    assert (cfg.agent.mode, cfg.agent.factory, cfg.agent.gateway_sampling) == (
        "gateway",
        "my_agents:build",
        "refuse",
    )
    assert AgentConfig(retriever_url="http://x/retrieve").mode == "text"


def test_a_factory_that_cannot_be_imported_is_named(tmp_path, monkeypatch):
    from parallelsearch.rl.gateway.factory import load_factory

    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="cannot import 'no_such_module'"):
        load_factory("no_such_module:build")
    (tmp_path / "half.py").write_text("x = 1\n")
    with pytest.raises(ValueError, match="has no function 'build'"):
        load_factory("half:build")
    sys.modules.pop("half", None)


# -- parity with the tool_text environment -----------------------------------------------------

#: (the chat agent's turns, the text environment's turns, golden answer): the same actions in both forms
SCRIPTS = [
    ([TWO_CALLS, "yes" + END], [TWO_CALLS, "<answer> yes </answer>"], "yes"),
    ([call("Ed Wood") + END, "no" + END], [call("Ed Wood") + END, "<answer> no </answer>"], "yes"),
    (
        ['<tool_call>\n{"name": "search", "arguments": {"q": "x"}}\n</tool_call>' + END, "yes" + END],
        [
            '<tool_call>\n{"name": "search", "arguments": {"q": "x"}}\n</tool_call>' + END,
            "<answer> yes </answer>",
        ],
        "yes",
    ),
    (
        [call("a") + END, call("b") + END, "maybe" + END],
        [call("a") + END, call("b") + END, "<answer> maybe </answer>"],
        "maybe",
    ),
    (
        [f"{call('a')}\n{call('a')}{END}", "yes" + END],
        [f"{call('a')}\n{call('a')}{END}", "<answer> yes </answer>"],
        "no",
    ),
    (
        ['<tool_call>\n{"name": "lookup", "arguments": {"query": "x"}}\n</tool_call>' + END, "x" + END],
        [
            '<tool_call>\n{"name": "lookup", "arguments": {"query": "x"}}\n</tool_call>' + END,
            "<answer> x </answer>",
        ],
        "x",
    ),
]
COMPARED = [f"reward_{part}" for part in REWARD_PARTS] + (
    "format_valid decomposed answered searches subqueries policy_calls search_rounds search_errors "
    "invalid unanswered class_parallel class_sequential decomposed_parallel searches_parallel"
).split()


def test_the_default_agent_is_prompted_as_served_whatever_the_runs_text_template(tok):
    """The paper preset's ``official`` template teaches ``<search>`` tags: the chat agent trained
    in gateway mode must get the tools instructions it is served with, not those."""
    from parallelsearch.agents.protocol.templates import TOOLS_TEMPLATE

    cfg = GraphConfig(top_k=1, max_turns=1, prompt_template="official")
    gateway = GatewayExecutor(default_agent("parallel", cfg)(gateway_chat_model(), Library()))
    eng = KeyedEngine(tok, {QUESTION: ["yes<|im_end|>"]})
    prompt = train_record({"id": "0", "question": QUESTION, "golden_answers": ["yes"]}, tokenizer=tok)
    run(gateway.execute(prompt["prompt"], prompt["label"], SamplingParamsStandIn(), 8192, tok, eng))
    first = decode_tokens(tok, gateway.last_session.calls[0][0])
    assert TOOLS_TEMPLATE.split(" Question:")[0] in first and "<search>" not in first


def parity(tok, n: int, mode: str = "paper") -> tuple[list[dict], list[dict]]:
    """``n`` scripted episodes through the gateway and through the tool_text environment, both
    scored with reward ``mode``."""
    from parallelsearch.rl.env import EnvGraph
    from parallelsearch.rl.executor import EpisodeExecutor

    cfg = GraphConfig(top_k=1, max_turns=2)
    agent = default_agent("parallel", cfg)(gateway_chat_model(), Library())
    gateway = GatewayExecutor(agent, reward_mode=mode)
    text = EpisodeExecutor(EnvGraph(Library(), reward_mode=mode, config=cfg.updated(protocol="tools")))
    chat_turns, text_turns, records = {}, {}, []
    for i in range(n):
        chat, written, gold = SCRIPTS[i % len(SCRIPTS)]
        question = f"Question {i}: were A{i} and B{i} both American?"
        chat_turns[question], text_turns[question] = chat, written
        qtype = "comparison" if i % 2 else "bridge"
        records.append(
            {"id": str(i), "question": question, "golden_answers": [gold], "metadata": {"type": qtype}}
        )
    chat_engine, text_engine = KeyedEngine(tok, chat_turns), KeyedEngine(tok, text_turns)
    out: tuple[list[dict], list[dict]] = ([], [])
    for rec in records:
        prompt = train_record(rec, template="tool_text", tokenizer=tok)
        for side, executor, eng in ((0, gateway, chat_engine), (1, text, text_engine)):
            sample = run(
                executor.execute(prompt["prompt"], prompt["label"], SamplingParamsStandIn(), 8192, tok, eng)
            )
            logs = {k: sample["extra_logs"][k].item() for k in COMPARED}
            out[side].append(
                {
                    "reward": round(sample["reward"], 9),
                    **logs,
                    "forks": sample["extra_logs"].get("gateway_forks", 0),
                }
            )
    return out


@pytest.mark.parametrize("mode", ["paper", "paper-strict"])
def test_parity_scripted_episodes_through_the_gateway_equal_the_tool_text_environment(tok, mode):
    n = int(os.environ.get("GATEWAY_PARITY_EPISODES", "12"))
    chat, text = parity(tok, n, mode)
    assert len(chat) == len(text) == n
    for i, (a, b) in enumerate(zip(chat, text, strict=True)):
        forks = a.pop("forks")
        b.pop("forks")
        assert forks == 0, f"episode {i} forked"
        assert a == b, f"episode {i} ({SCRIPTS[i % len(SCRIPTS)][1][0][:40]}...) differs"


def test_training_passes_each_turn_s_tokens_to_the_graph_in_both_modes(tok):
    """``tokens_in``/``tokens_out`` are counted in training as when serving: the text
    environment gets each turn's ids and context, the chat agent the gateway's usage."""
    from parallelsearch.rl.env import EnvGraph
    from parallelsearch.rl.episode import TokenLedger, run_episode
    from parallelsearch.rl.executor import EpisodeExecutor

    cfg = GraphConfig(top_k=1, max_turns=2)
    prompt = train_record(RECORD, template="tool_text", tokenizer=tok)["prompt"]
    text_engine = engine(tok, [TWO_CALLS, "<answer> yes </answer>"])
    executor = EpisodeExecutor(EnvGraph(Library(), config=cfg.updated(protocol="tools")))
    ledgers: list[TokenLedger] = []

    def ledger_for(_):
        ledgers.append(TokenLedger(tok, prompt, 4096, turn_cap=400))
        return ledgers[-1]

    turns = executor._engine_turns(SamplingParamsStandIn(), text_engine, 400, False)
    text_run = run(run_episode(executor.env_graph, QUESTION, LABEL, turns, ledger_for=ledger_for))
    ranges = ledgers[0].ranges
    assert text_run.state["tokens_out"] == sum(b - a for a, b in ranges)
    assert text_run.state["tokens_in"] == sum(a for a, _ in ranges)

    gateway = GatewayExecutor(default_agent("parallel", cfg)(gateway_chat_model(), Library()))
    chat_engine = engine(tok, [TWO_CALLS, "yes" + END])
    session = gateway.session(SamplingParamsStandIn(), 4096, tok, chat_engine)
    state = run(gateway.run_agent(session, QUESTION))
    assert state["tokens_out"] == sum(len(o) for o in chat_engine.outputs)
    assert state["tokens_in"] == sum(a for a, _ in session.ledger.ranges)


def test_a_template_that_cannot_render_tool_turns_stops_the_first_episode():
    """The tiny tokenizer's plain ChatML template drops tool calls: the executor refuses it at
    its first episode, naming the problem, before any token is trained."""
    from parallelsearch.rl.tiny_model import build_tokenizer

    tok = build_tokenizer()
    agent = default_agent("parallel", GraphConfig(top_k=1, max_turns=2))(gateway_chat_model(), Library())
    eng = engine(tok, [TWO_CALLS, "yes" + END])
    with pytest.raises(ValueError, match="not append-only for tool turns.*not read back as the call"):
        run(GatewayExecutor(agent).execute("", json.dumps(LABEL), SamplingParamsStandIn(), 4096, tok, eng))
    assert eng.requests == []
