"""The tool-call protocol's text form, the one training uses: Hermes/Qwen ``<tool_call>`` blocks
written by the policy, ``<tool_response>`` blocks in a ChatML user turn written by the graph.

Real parts throughout: the compiled LangGraph environment (``EnvGraph``) with a plain-function
searcher, the executor with the tiny tokenizer and the tiny random Llama (``rl/tiny_model.py``),
a scripted engine that stops like vLLM (tests/engines.py), and OpenRLHF's own executor loading
path reading an agent config file with ``protocol: tools``.
"""

from __future__ import annotations

import asyncio
import re

import pytest
from conftest import UvicornThread
from engines import (
    SamplingParamsStandIn,
    ScriptedEngine,
    TransformersEngine,
    load_like_openrlhf,
    recording_episodes,
)
from gateway_support import Library, retrieve_app

from parallelsearch.agents.protocol import (
    STOP_STRINGS,
    TOOL_CALL_FEEDBACK,
    TOOL_CALL_NOT_RUN,
    TOOL_STOP_STRINGS,
    TOOL_TEXT_RETRY,
    TOOL_TEXT_TEMPLATE,
    TOOL_TURN_END,
    parse_tool_text,
    protocol_regex,
    tool_text_observation,
)
from parallelsearch.graphs.config import GraphConfig
from parallelsearch.rl import EnvGraph, score_trajectory
from parallelsearch.rl.agent_config import ENV_VAR
from parallelsearch.rl.data import train_record
from parallelsearch.rl.episode import decode_tokens
from parallelsearch.rl.executor import EpisodeExecutor

QUESTION = "Were Scott Derrickson and Ed Wood of the same nationality?"
LABEL = {"golden_answers": ["yes"], "type": "comparison", "question": QUESTION}
RECORD = {
    "id": "tool-text-1",
    "question": QUESTION,
    "golden_answers": ["yes"],
    "metadata": {"type": "comparison", "split": "parallel", "dataset": "hotpotqa"},
}


def call(query: str, name: str = "search") -> str:
    """One call as the Hermes template writes it."""
    return f'<tool_call>\n{{"name": "{name}", "arguments": {{"query": "{query}"}}}}\n</tool_call>'


TWO_CALLS = f"<think> two people </think>\n{call('Scott Derrickson')}\n{call('Ed Wood')}"
ANSWER = "<think> both American </think>\n<answer> yes </answer>"


def run(coro):
    return asyncio.run(coro)


# -- the parser ------------------------------------------------------------------------------


def test_parallel_blocks_are_one_search_with_calls_in_order():
    action = parse_tool_text(TWO_CALLS + TOOL_TURN_END)
    assert action.kind == "search" and action.subqueries == ("Scott Derrickson", "Ed Wood")
    assert [(c.id, c.index, c.error) for c in action.calls] == [("call_0", 0, None), ("call_1", 1, None)]
    assert action.think == "<think> two people </think>"
    # a duplicate is searched once and both calls share its result, as 'a ## a' does
    dup = parse_tool_text(call("Ed  Wood") + call("Ed Wood"))
    assert dup.subqueries == ("Ed Wood",) and [c.index for c in dup.calls] == [0, 0]
    # arguments written as a JSON string, as OpenAI sends them, are read too
    as_string = parse_tool_text(
        '<tool_call>{"name": "search", "arguments": "{\\"query\\": \\"x\\"}"}</tool_call>'
    )
    assert as_string.kind == "search" and as_string.subqueries == ("x",)


def test_an_answer_turn_and_its_end_of_turn():
    action = parse_tool_text(ANSWER)
    assert action.kind == "answer" and action.answer == "yes"
    assert parse_tool_text("<answer> yes </answer>" + TOOL_TURN_END).answer == "yes"
    assert parse_tool_text("<answer>  </answer>").reason == "empty <answer>"


@pytest.mark.parametrize(
    "text, reason",
    [
        ('<tool_call>{"name": "search", "arguments": {"query": </tool_call>', "not valid JSON"),
        (call("x", name="lookup"), "unknown tool 'lookup'"),
        ('<tool_call>{"name": "search", "arguments": {"q": "x"}}</tool_call>', "bad arguments"),
        (call("   "), "empty query"),
        (call("a") + '\n<tool_call>\n{"name": "search", "arguments": {"query": "b"}', "never closed"),
        (call("a") + "</tool_call>", "never closed"),
        (call("a") + "\n<answer> yes </answer>", "an <answer> beside tool calls"),
        (call("a") + "\n<tool_response>\nDoc 1 made up\n</tool_response>", "<tool_response> tag"),
        ("<information>Doc 1 made up</information><answer> yes </answer>", "<information> tag"),
        ("I think the answer is yes.", "no <tool_call> and no <answer>"),
        ('<tool_call>["search", "x"]</tool_call>', "unknown tool None"),
    ],
)
def test_bad_turns_are_invalid_with_the_reason(text, reason):
    action = parse_tool_text(text)
    assert action.kind == "invalid" and reason in action.reason, action.reason


def test_one_bad_call_is_told_apart_from_the_good_ones_in_call_order():
    text = call("a") + '<tool_call>{"name": "search", "arguments": {"query": </tool_call>' + call("b")
    action = parse_tool_text(text)
    assert action.kind == "invalid"
    assert [c.id for c in action.calls] == ["call_0", "call_1", "call_2"]
    assert [c.error is None for c in action.calls] == [True, False, True]


def test_limits_are_those_of_the_tags():
    three = call("a") + call("b") + call("c")
    assert "at most 2" in parse_tool_text(three, max_subqueries=2).reason
    assert "one query per turn" in parse_tool_text(call("a") + call("b"), split=False).reason
    assert parse_tool_text(call("a"), split=False).kind == "search"


@pytest.mark.parametrize("junk", [None, 7, b"<tool_call>", ["<answer> x </answer>"], "", "<tool_call>" * 5])
def test_the_parser_never_raises(junk):
    action = parse_tool_text(junk)
    assert action.kind == "invalid" and action.reason


# -- the grammar of constrained decoding ----------------------------------------------------------


def test_protocol_regex_of_the_text_form_matches_valid_turns_and_rejects_junk():
    grammar = protocol_regex(protocol="tool_text", max_subqueries=2)
    final = protocol_regex(protocol="tool_text", final=True)
    one = protocol_regex(protocol="tool_text", split=False)
    assert re.fullmatch(grammar, TWO_CALLS) and re.fullmatch(grammar, ANSWER)
    assert re.fullmatch(final, ANSWER) and not re.fullmatch(final, TWO_CALLS)
    assert re.fullmatch(one, f"<think> x </think>\n{call('a')}") and not re.fullmatch(one, TWO_CALLS)
    for junk in (
        "<think> x </think>\n<search> a ## b </search>",  # the tags
        f"<think> x </think>\n{call('a')}\n{call('b')}\n{call('c')}",  # over max_subqueries
        f"<think> x </think>\n{call('a', name='lookup')}",
        f"<think> x </think>\n{call(' a')}",  # a query starting with a space
        f"<think> x </think>\n{call('a')[:-12]}",  # unclosed
        TWO_CALLS + "\ntrailing words",
        "yes",
    ):
        assert not re.fullmatch(grammar, junk), junk
    # what the grammar lets through, the parser reads as the same action
    assert parse_tool_text(TWO_CALLS).subqueries == ("Scott Derrickson", "Ed Wood")
    with pytest.raises(ValueError, match="unknown protocol 'hermes'"):
        protocol_regex(protocol="hermes")


# -- the environment: the compiled graph with protocol tools --------------------------------------


def test_two_calls_in_one_turn_are_one_round_and_the_reward_counts_them():
    library = Library()
    g = EnvGraph(library, config=GraphConfig(protocol="tools", top_k=1, max_turns=3))
    assert g.protocol == "tool_text"  # training's tools protocol is its text form
    env = g.new_episode()
    prompt = run(env.reset(QUESTION, LABEL))
    assert prompt == TOOL_TEXT_TEMPLATE.replace("{question}", QUESTION)
    assert env.turn.stop == TOOL_STOP_STRINGS  # what the executor passes to the engine
    turn = f"<think> two people </think>\n{call('Ed Wood')}\n{call('Scott Derrickson')}{TOOL_TURN_END}"
    step = run(env.step(turn))
    assert sorted(library.queries) == ["Ed Wood", "Scott Derrickson"]  # both searched, at the same time
    # ONE observation: a ChatML user turn with one <tool_response> per call, in call order
    assert step.observation == tool_text_observation(
        [
            "Doc 1(Title: Ed Wood page) Ed Wood is an American.",
            "Doc 1(Title: Scott Derrickson page) Scott Derrickson is an American.",
        ]
    )
    assert step.observation.count("<tool_response>") == 2
    assert step.observation.index("Ed Wood page") < step.observation.index("Scott Derrickson page")
    assert not step.done and env.turn.stop == TOOL_STOP_STRINGS
    end = run(env.step(ANSWER))
    assert end.done and end.output["status"] == "answered" and end.output["answer"] == "yes"
    assert (end.output["search_rounds"], end.output["subqueries"], end.output["policy_calls"]) == (1, 2, 2)
    r = g.score(end.episode, LABEL)
    assert r.searches == 1 and r.subqueries_per_search == [2] and r.decomposed
    assert r.format_valid, r.format_reason
    # right answer, valid format, decomposed parallelizable question, one round: 1 + 3 * 0.15 + 0.35
    assert r.total == pytest.approx(1.8)
    # the record's reward is what score_trajectory reads back from the transcript
    again = score_trajectory(
        prompt + turn + step.observation + ANSWER, LABEL, prompt=prompt, protocol="tool_text"
    )
    assert again.to_dict() == r.to_dict()


def test_the_tags_environment_keeps_its_stop_strings():
    env = EnvGraph(Library()).new_episode()
    run(env.reset(QUESTION, LABEL))
    assert env.turn.stop == STOP_STRINGS
    env.close()


def test_invalid_turns_are_corrected_and_cost_the_format():
    library = Library()
    g = EnvGraph(library, config=GraphConfig(protocol="tools", top_k=1, max_turns=4))
    env = g.new_episode()
    run(env.reset(QUESTION, LABEL))
    # no call and no answer: one retry note in the environment's user turn
    nothing = run(env.step("I would rather not say." + TOOL_TURN_END))
    note = TOOL_TEXT_RETRY.format(reason="no <tool_call> and no <answer>")
    assert nothing.observation == tool_text_observation([], True, note)
    # one unreadable call beside a good one: every call gets its note, in call order; nothing searched
    broken = call("Ed Wood") + '\n<tool_call>\n{"name": "search", "arguments": {"query": \n</tool_call>'
    told = run(env.step(broken + TOOL_TURN_END))
    assert library.queries == []
    bodies = re.findall(r"<tool_response>\n(.*?)\n</tool_response>", told.observation, re.DOTALL)
    assert len(bodies) == 2
    assert bodies[0].startswith(TOOL_CALL_NOT_RUN.split("{reason}")[0])
    assert bodies[1].startswith(TOOL_CALL_FEEDBACK.split("{reason}")[0]) and "not valid JSON" in bodies[1]
    # a turn cut before its end-of-turn (the token cap): the environment closes it
    cut = run(env.step(call("Ed Wood")))
    assert cut.observation.startswith(TOOL_TURN_END + "\n<|im_start|>user\n<tool_response>")
    end = run(env.step(ANSWER))
    assert end.done and end.output["search_rounds"] == 1 and end.output["policy_calls"] == 4
    r = g.score(end.episode, LABEL)
    assert r.correct and not r.format_valid
    assert r.format_reason.startswith(
        "the episode had an invalid action (turn 1: no <tool_call> and no <answer>"
    )
    # the searches that ran: the invalid turns searched nothing
    assert r.format == pytest.approx(-0.1) and r.searches == 1 and r.subqueries_per_search == [1]


def test_official_reward_with_the_text_form_is_refused():
    with pytest.raises(ValueError, match="official.*needs mode 'paper-strict'"):
        EnvGraph(Library(), reward_mode="official", protocol="tools")
    with pytest.raises(ValueError, match="protocol 'tool_text'.*mode 'paper-strict'"):
        score_trajectory("Question: q\n" + ANSWER, LABEL, "official", protocol="tool_text")
    with pytest.raises(ValueError, match="unknown protocol 'hermes'"):
        score_trajectory("Question: q\n" + ANSWER, LABEL, protocol="hermes")


# -- the reward of the text form -----------------------------------------------------------------


def _episode(protocol: str, turns: list[str], label: dict, **options) -> tuple[str, str, object]:
    """Drive an EnvGraph through ``turns``; returns (prompt, transcript, reward of the record)."""
    g = EnvGraph(Library(), config=GraphConfig(protocol=protocol, top_k=1, **options))
    env = g.new_episode()
    prompt = run(env.reset(QUESTION, label))
    result = None
    for t in turns:
        result = run(env.step(t))
        if result.done:
            break
    return prompt, env.transcript, g.score(result.episode, label, env.transcript)


@pytest.mark.parametrize("qtype", ["comparison", "bridge", "na"])
def test_the_text_form_scores_like_the_tags_turn_for_turn(qtype):
    """DESIGN: counts, rewards and limits of the tool calls are those of the tags."""
    label = {**LABEL, "type": qtype}
    cases = [
        (["<think> t </think>\n<search> Scott Derrickson ## Ed Wood </search>", ANSWER], [TWO_CALLS, ANSWER]),
        (
            [
                "<think> t </think>\n<search> Ed Wood </search>",
                "<think> t </think>\n<search> Scott </search>",
                ANSWER,
            ],
            [f"<think> t </think>\n{call('Ed Wood')}", f"<think> t </think>\n{call('Scott')}", ANSWER],
        ),
        (["<think> t </think>\n<answer> no </answer>"], ["<think> t </think>\n<answer> no </answer>"]),
    ]
    for tags, tools in cases:
        *_, a = _episode("tags", tags, label)
        *_, b = _episode("tools", [t + TOOL_TURN_END for t in tools[:-1]] + tools[-1:], label)
        assert b.parts() == a.parts() and b.total == a.total
        assert (b.searches, b.subqueries_per_search, b.format_valid) == (
            a.searches,
            a.subqueries_per_search,
            True,
        )


@pytest.mark.parametrize(
    "turns, reason",
    [
        ([TWO_CALLS + "\nand more words" + TOOL_TURN_END, ANSWER], "text after the calls"),
        ([TWO_CALLS + TOOL_TURN_END, ANSWER + " trailing"], "text after the answer"),
        ([TWO_CALLS + "\n" + TOOL_TURN_END, ANSWER + "\n\n"], None),  # whitespace is no fault
        ([f"<search> x </search>{call('a')}{TOOL_TURN_END}", ANSWER], "<search> in the reasoning"),
        ([f"<think> x {call('a')}{TOOL_TURN_END}", ANSWER], "unbalanced <think>"),
    ],
)
def test_format_faults_of_a_text_form_turn(turns, reason):
    prompt, transcript, r = _episode("tools", turns, LABEL, max_turns=3)
    assert r.format_valid is (reason is None)
    if reason:
        assert reason in r.format_reason and r.format == pytest.approx(-0.1)


def test_an_episode_cut_before_its_answer_has_no_valid_format():
    env = EnvGraph(Library(), config=GraphConfig(protocol="tools", top_k=1)).new_episode()
    prompt = run(env.reset(QUESTION, LABEL))
    step = run(env.step(TWO_CALLS + TOOL_TURN_END))
    cut = prompt + TWO_CALLS + TOOL_TURN_END + step.observation + "<think> both Amer"
    r = score_trajectory(cut, LABEL, prompt=prompt, protocol="tool_text")
    assert not r.format_valid and r.format_reason == (
        "the episode had an invalid action (turn 2: no <tool_call> and no <answer>)"
    )
    assert r.answer is None and r.searches == 1 and r.subqueries_per_search == [2]
    # cut right after a search turn (max_length reached before the observation)
    r = score_trajectory(prompt + TWO_CALLS + TOOL_TURN_END, LABEL, prompt=prompt, protocol="tool_text")
    assert not r.format_valid and r.format_reason == "incomplete: the episode ended without an answer"
    env.close()


def test_the_prompt_end_is_found_without_the_prompt_raw_or_chat_templated(tiny_lm):
    _, tok = tiny_lm
    raw, transcript, r = _episode("tools", [TWO_CALLS + TOOL_TURN_END, ANSWER], LABEL)
    rest = transcript[len(raw) :]
    assert score_trajectory(transcript, LABEL, protocol="tool_text").to_dict() == r.to_dict()
    chat = tok.apply_chat_template(
        [{"role": "user", "content": raw}], tokenize=False, add_generation_prompt=True
    )
    assert chat.endswith("<|im_start|>assistant\n")
    assert score_trajectory(chat + rest, LABEL, protocol="tool_text").to_dict() == r.to_dict()


# -- the executor: token-exact episodes under the tools protocol ------------------------------------


def check_tokens(result: dict, prompt_ids: list[int], outputs: list[list[int]], tok, env) -> None:
    """``action_ranges`` are exactly the engine's generated ids, in order; everything between
    them is the environment's (``<tool_response>`` never inside a range); the ids decode to the
    prompt plus the environment's transcript; the reward is the text form's score of that text."""
    toks, ranges = result["observation_tokens"], result["action_ranges"]
    assert toks[: len(prompt_ids)] == prompt_ids and ranges[0][0] == len(prompt_ids)
    assert [toks[a:b] for a, b in ranges] == outputs
    assert all(b <= c for (_, b), (c, _) in zip(ranges, ranges[1:], strict=False))
    assert "<tool_response>" not in "".join(decode_tokens(tok, toks[a:b]) for a, b in ranges)
    between = [toks[b:c] for (_, b), (c, _) in zip(ranges, ranges[1:], strict=False)]
    assert all("<|im_start|>user\n" in decode_tokens(tok, ids) for ids in between)
    text = decode_tokens(tok, toks)
    prompt_text = decode_tokens(tok, prompt_ids)
    assert text == prompt_text + env.transcript[len(env.prompt) :]
    expected = score_trajectory(text, result["label"], prompt=prompt_text, protocol="tool_text")
    assert result["reward"] == pytest.approx(expected.total) and result["scores"] == expected.outcome
    lps = result["rollout_log_probs"]
    if lps is not None:
        inside = {i for a, b in ranges for i in range(a, b)}
        assert len(lps) == len(toks) and all(lps[i] == 0.0 for i in range(len(toks)) if i not in inside)


@pytest.fixture()
def episodes():
    """Every SearchEnv the executor opens (to compare its transcript with the tokens)."""
    with recording_episodes() as opened:
        yield opened


def test_scripted_episode_is_token_exact_and_ends_turns_at_the_end_of_turn(tiny_lm, episodes):
    _, tok = tiny_lm
    rec = train_record(RECORD, template="tool_text", tokenizer=tok)
    assert "<tool_call>" in rec["prompt"] and rec["prompt"].endswith("<|im_start|>assistant\n")
    engine = ScriptedEngine(
        tok,
        [
            TWO_CALLS + TOOL_TURN_END + "\n<|im_start|>user\nwhat the model would go on writing",
            ANSWER + "\n\nand on",
        ],
    )
    g = EnvGraph(Library(), config=GraphConfig(protocol="tools", top_k=1, max_turns=3))
    result = run(
        EpisodeExecutor(g).execute(
            rec["prompt"], rec["label"], SamplingParamsStandIn(logprobs=1), 4096, tok, engine
        )
    )
    # each turn asked for the text form's stop strings, kept in the output
    assert all(p.stop == list(TOOL_STOP_STRINGS) and p.include_stop_str_in_output for p in engine.params)
    # the first turn ended at the EOS token (<|im_end|>), which is in the trained ids
    assert engine.outputs[0][-1] == tok.eos_token_id and len(result["action_ranges"]) == 2
    assert decode_tokens(tok, engine.outputs[0]) == TWO_CALLS + TOOL_TURN_END
    prompt_ids = tok(rec["prompt"], add_special_tokens=False)["input_ids"]
    check_tokens(result, prompt_ids, engine.outputs, tok, episodes[0])
    logs = result["extra_logs"]
    assert logs["search_rounds"].item() == 1 and logs["subqueries"].item() == 2
    assert logs["format_valid"].item() == 1 and result["reward"] == pytest.approx(1.8)
    assert all(lp == -0.5 for a, b in result["action_ranges"] for lp in result["rollout_log_probs"][a:b])


def test_the_tiny_random_model_under_the_text_form(tiny_lm, episodes):
    """Free generation of a random model: garbage turns, each corrected by the environment; the
    token bookkeeping holds all the same."""
    model, tok = tiny_lm
    rec = train_record(RECORD, template="tool_text", tokenizer=tok)
    engine = TransformersEngine(model, tok)
    g = EnvGraph(Library(), config=GraphConfig(protocol="tools", max_turns=2, max_new_tokens=12))
    greedy = SamplingParamsStandIn(logprobs=1, temperature=0)
    result = run(EpisodeExecutor(g).execute(rec["prompt"], rec["label"], greedy, 4096, tok, engine))
    prompt_ids = tok(rec["prompt"], add_special_tokens=False)["input_ids"]
    check_tokens(result, prompt_ids, engine.outputs, tok, episodes[0])
    assert len(result["action_ranges"]) == 3  # 2 invalid turns + the final turn
    assert result["extra_logs"]["format_valid"].item() == 0
    assert decode_tokens(tok, result["observation_tokens"]).count(TOOL_TEXT_RETRY.split("{reason}")[0]) == 2


def test_protocol_tools_in_the_agent_config_reaches_openrlhf_s_executor(
    tmp_path, monkeypatch, tiny_lm, episodes
):
    """``graph_config: {protocol: tools}`` in the file every Ray actor reads selects the text form:
    the executor OpenRLHF loads builds its environment with it and scores with it."""
    _, tok = tiny_lm
    with UvicornThread(retrieve_app()) as srv:
        path = tmp_path / "agent.yaml"
        path.write_text(
            f"retriever_url: {srv.url}/retrieve\ngraph_config:\n  protocol: tools\n  top_k: 1\n  max_turns: 2\n"
        )
        monkeypatch.setenv(ENV_VAR, str(path))
        executor = load_like_openrlhf()
        assert executor.env_graph.protocol == "tool_text"
        rec = train_record(RECORD, template="tool_text", tokenizer=tok)
        engine = ScriptedEngine(tok, [TWO_CALLS + TOOL_TURN_END, ANSWER])
        result = run(
            executor.execute(rec["prompt"], rec["label"], SamplingParamsStandIn(), 4096, tok, engine)
        )
    prompt_ids = tok(rec["prompt"], add_special_tokens=False)["input_ids"]
    check_tokens(result, prompt_ids, engine.outputs, tok, episodes[0])
    text = decode_tokens(tok, result["observation_tokens"][len(prompt_ids) :])
    # titles rendered as the official code does (the agent config's default), one response per call
    assert '<tool_response>\nDoc 1(Title: "Scott Derrickson")' in text and text.count("<tool_response>") == 2
    assert result["reward"] == pytest.approx(1.8)
