"""The session gateway: the README chat agent (``create_parallel_search_agent`` with LangChain's
real ``ChatOpenAI``) talks to a per-episode ``/v1/chat/completions`` session in-process; the
session speaks token ids to an engine stand-in that stops like vLLM (tests/engines.py), with the
tiny tokenizer and the Hermes tools template (rl/tiny_model.py).

Token exactness: every id the engine generated is in the sample as generated, at the span the
sample trains on, whatever shape the turn had; the text between turns is what the template
writes after a turn (``tool_text_observation``'s text).
"""

from __future__ import annotations

import pytest
from gateway_support import (
    END,
    QUESTION,
    Library,
    call,
    engine,
    run,
    session,
    tool_messages,
    tools_tokenizer,
)

from parallelsearch import create_parallel_search_agent
from parallelsearch.agents.protocol import SEARCH_TOOL, tool_text_observation
from parallelsearch.rl.episode import decode_tokens
from parallelsearch.rl.gateway import GatewayError, current_session, gateway_chat_model


@pytest.fixture(scope="module")
def tok():
    return tools_tokenizer()


def _agent(library: Library, **options):
    return create_parallel_search_agent(gateway_chat_model(), library, top_k=1, max_turns=3, **options)


async def _episode(agent, sess, question: str = QUESTION) -> dict:
    token = current_session.set(sess)
    try:
        return await agent.ainvoke({"messages": [("user", question)]})
    finally:
        current_session.reset(token)


def check_exact(sess, eng, tok) -> None:
    """Every engine call's ids in the ledger untouched, its output at the trained span, nothing
    re-tokenised, the engine's log-probs at those spans."""
    ledger = sess.ledger
    assert sess.token_mismatches() == 0 and ledger.retokenized == 0
    assert len(ledger.ranges) == len(eng.outputs) == len(eng.requests)
    for (start, end), sent, out in zip(ledger.ranges, eng.requests, eng.outputs, strict=True):
        assert ledger.ids[:start] == sent and ledger.ids[start:end] == out
        assert ledger.logprobs[start:end] == [-0.5] * len(out)
    assert all(lp is None for lp in ledger.logprobs[: ledger.ranges[0][0]])


ARGS = ("Scott Derrickson", "Ed Wood")
CANONICAL = f"{call(ARGS[0])}\n{call(ARGS[1])}{END}"


def _split_ids(tok) -> list[int]:
    """The canonical turn's text, tokenised in two pieces cut inside a word: ids the tokenizer
    itself never writes for that text (what a sampled model may produce)."""
    cut = CANONICAL.index("Derrickson") + 4
    ids = tok(CANONICAL[:cut], add_special_tokens=False)["input_ids"]
    ids += tok(CANONICAL[cut:], add_special_tokens=False)["input_ids"]
    assert ids != tok(CANONICAL, add_special_tokens=False)["input_ids"]
    return ids


SHAPES = {
    "canonical": CANONICAL,
    "compact_json": "".join(
        f'<tool_call>{{"name":"search","arguments":{{"query":"{q}"}}}}</tool_call>' for q in ARGS
    )
    + END,
    "arguments_before_name": "\n".join(
        f'<tool_call>\n{{"arguments": {{"query": "{q}"}}, "name": "search"}}\n</tool_call>' for q in ARGS
    )
    + END,
    "no_newline_between_calls": call(ARGS[0]) + call(ARGS[1]) + END,
    "non_canonical_token_split": None,  # ids, made from the tokenizer below
    "reasoning_before_calls": f"<think> two people </think>\n{CANONICAL}",
    "arguments_as_json_text": "\n".join(
        f'<tool_call>\n{{"name": "search", "arguments": "{{\\"query\\": \\"{q}\\"}}"}}\n</tool_call>'
        for q in ARGS
    )
    + END,
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_each_turn_shape_is_token_exact_and_searched_as_written(tok, shape):
    first = SHAPES[shape] if SHAPES[shape] is not None else _split_ids(tok)
    eng, library = engine(tok, [first, "yes" + END]), Library()
    sess = session(tok, eng)
    out = run(_episode(_agent(library), sess))
    check_exact(sess, eng, tok)
    assert library.queries == list(ARGS) and out["answer"] == "yes"
    # between the turns: what the template writes after a closed turn, one response per call
    ledger = sess.ledger
    replies = [m.content for m in out["messages"] if m.type == "tool"]
    between = decode_tokens(tok, ledger.ids[ledger.ranges[0][1] : ledger.ranges[1][0]])
    assert between == tool_text_observation(replies, turn_closed=True)
    assert sess.counters.forks == 0 and sess.counters.retries == 0 and not sess.failed


def test_a_turn_cut_at_its_cap_is_closed_by_the_next_observation(tok):
    """A turn stopped on length has no end-of-turn: the suffix starts with it, as the text
    environment's observation of a cut turn does; the cut reply is the agent's invalid turn."""
    eng, library = engine(tok, ["<think> " + "long " * 60, "yes" + END]), Library()
    sess = session(tok, eng, cap=12)
    out = run(_episode(_agent(library), sess))
    check_exact(sess, eng, tok)
    ledger = sess.ledger
    assert ledger.ids[ledger.ranges[0][1]] == tok.eos_token_id  # the observation closes the turn
    between = decode_tokens(tok, ledger.ids[ledger.ranges[0][1] : ledger.ranges[1][0]])
    assert between.startswith(END + "\n<|im_start|>") and between.endswith("<|im_start|>assistant\n")
    assert out["answer"] == "yes" and out["trajectory"][0]["action"] == "invalid"


def _first_two(tok, sess, body_extra=None):
    """Turn one (two calls) and the request that answers it, as a client would send it."""
    first = {"model": "policy", "messages": [{"role": "user", "content": QUESTION}], "tools": [SEARCH_TOOL]}
    reply = run(sess.complete({**first, **(body_extra or {})}))
    second = {**first, "messages": [*first["messages"], *tool_messages(reply, ["r1", "r2"])]}
    return first, reply, second


def test_a_client_retry_gets_the_cached_reply_without_a_new_generation(tok):
    eng = engine(tok, [CANONICAL, "yes" + END])
    sess = session(tok, eng)
    first, reply, second = _first_two(tok, sess)
    again = run(sess.complete(first))
    assert again == reply and len(eng.outputs) == 1 and sess.counters.retries == 1
    answer = run(sess.complete(second))
    assert run(sess.complete(second)) == answer and sess.counters.retries == 2
    assert (
        answer["choices"][0]["message"]["content"] == "yes"
        and answer["choices"][0]["finish_reason"] == "stop"
    )
    check_exact(sess, eng, tok)
    assert sess.counters.forks == 0 and not sess.failed


def test_equal_histories_in_another_spelling_are_not_forks(tok):
    """Content None and "" are one message; arguments compared as parsed JSON; extra fields
    (a message's ``name``) do not decide tokens."""
    eng = engine(tok, [CANONICAL, "yes" + END])
    sess = session(tok, eng)
    _, _, second = _first_two(tok, sess)
    ai = second["messages"][1]
    ai["content"] = ""
    ai["name"] = "parallel_search"
    for c in ai["tool_calls"]:
        c["function"]["arguments"] = c["function"]["arguments"].replace(": ", ":")
    run(sess.complete(second))
    assert sess.counters.forks == 0 and not sess.failed and len(sess.ledger.ranges) == 2


def _edit_content(m):
    m[0]["content"] = QUESTION + " (edited)"


def _edit_args(m):
    m[1]["tool_calls"][0]["function"]["arguments"] = '{"query": "someone else"}'


def _edit_call_id(m):
    m[1]["tool_calls"][0]["id"] = "call_other"


def _drop_call(m):
    m[1]["tool_calls"] = m[1]["tool_calls"][:1]


def _assistant_text(m):
    m[1]["content"] = "I will search."


def _extra_assistant(m):
    m.append({"role": "assistant", "content": "a turn the engine never wrote"})


def _drop_message(m):
    del m[0]


def _system_first(m):
    m.insert(0, {"role": "system", "content": "a new system prompt"})


EDITS = [
    _edit_content,
    _edit_args,
    _edit_call_id,
    _drop_call,
    _assistant_text,
    _extra_assistant,
    _drop_message,
    _system_first,
]


def check_restarted(sess, eng) -> None:
    """After a fork the sample is the engine's last call exactly: the ids it was sent (the fork's
    own render, the earlier turn in it as context) and the ids it generated, the only span trained."""
    ledger = sess.ledger
    assert sess.counters.forks == 1 and not sess.failed and sess.counters.untrained_turns == 1
    assert ledger.ids == eng.requests[-1] + eng.outputs[-1] and sess.token_mismatches() == 0
    assert ledger.ranges == [(len(eng.requests[-1]), len(ledger.ids))]


@pytest.mark.parametrize("edit", EDITS, ids=[e.__name__.strip("_") for e in EDITS])
def test_every_history_edit_is_a_fork_answered_and_the_sample_restarts_at_its_render(tok, edit):
    eng = engine(tok, [CANONICAL, "yes" + END])
    sess = session(tok, eng)
    _, _, second = _first_two(tok, sess)
    edit(second["messages"])
    reply = run(sess.complete(second))
    assert reply["choices"][0]["message"]["role"] == "assistant" and len(eng.outputs) == 2  # answered
    check_restarted(sess, eng)
    assert sess.counters.drifts == 0  # a rewritten history, not a dynamic system prompt


def test_a_changed_system_prompt_is_a_drift_trained_on_its_own_render(tok):
    """What a ``@dynamic_prompt`` does: the same history under a new system message. The engine
    is sent that render, and the sample trains on it token for token."""
    eng = engine(tok, [CANONICAL, "yes" + END])
    sess = session(tok, eng)
    first = {"model": "policy", "messages": [{"role": "system", "content": "Searches so far: 0"},
                                             {"role": "user", "content": QUESTION}], "tools": [SEARCH_TOOL]}  # fmt: skip
    reply = run(sess.complete(first))
    again = [{"role": "system", "content": "Searches so far: 1"}, *first["messages"][1:]]
    run(sess.complete({**first, "messages": [*again, *tool_messages(reply, ["r1", "r2"])]}))
    check_restarted(sess, eng)
    assert sess.counters.drifts == 1 and "Searches so far: 1" in decode_tokens(tok, eng.requests[-1])


def test_other_tools_than_the_first_request_s_are_a_fork(tok):
    eng = engine(tok, [CANONICAL, "yes" + END])
    sess = session(tok, eng)
    _, _, second = _first_two(tok, sess)
    run(sess.complete({**second, "tools": None}))
    check_restarted(sess, eng)


def test_client_sampling_is_overridden_and_counted(tok):
    eng = engine(tok, [CANONICAL])
    sess = session(tok, eng)
    run(
        sess.complete(
            {
                "messages": [{"role": "user", "content": QUESTION}],
                "temperature": 0.0,
                "seed": 3,
                "max_tokens": 5,
                "stop": ["x"],
            }
        )
    )
    assert sess.counters.overridden == {"temperature": 1, "seed": 1, "max_tokens": 1, "stop": 1}
    # the trainer's params went to the engine: its cap, no client stop, its temperature
    assert eng.params[0].max_tokens == 400 and eng.params[0].stop == [] and eng.params[0].temperature == 1.0


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"temperature": 0.2}, "temperature"),
        ({"logit_bias": {"5": 10}}, "logit_bias"),
        ({"top_p": 0.5}, "top_p"),
    ],
)
def test_client_sampling_is_refused_with_a_400_naming_the_field_when_set_to_refuse(tok, extra, field):
    sess = session(tok, engine(tok, [CANONICAL]), policy="refuse")
    with pytest.raises(GatewayError) as err:
        run(sess.complete({"messages": [{"role": "user", "content": QUESTION}], **extra}))
    assert err.value.status == 400 and err.value.param == field and repr(field) in err.value.message


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"messages": [{"role": "user", "content": "q"}], "stream": True}, "stream"),
        ({"messages": [{"role": "user", "content": "q"}], "n": 2}, "n"),
        ({"messages": []}, "messages"),
        ({"messages": [{"content": "no role"}]}, "messages"),
    ],
)
def test_bad_requests_are_400s_naming_the_field(tok, body, field):
    sess = session(tok, engine(tok, [CANONICAL]))
    with pytest.raises(GatewayError) as err:
        run(sess.complete(body))
    assert err.value.status == 400 and err.value.param == field


def test_an_openai_client_gets_the_400_through_the_in_process_transport(tok):
    """LangChain's ChatOpenAI raises OpenAI's BadRequestError with the gateway's message."""
    import openai

    sess = session(tok, engine(tok, [CANONICAL]), policy="refuse")
    model = gateway_chat_model(temperature=0.3)

    async def ask():
        token = current_session.set(sess)
        try:
            return await model.ainvoke("hi")
        finally:
            current_session.reset(token)

    with pytest.raises(openai.BadRequestError, match="'temperature' is set by the trainer"):
        run(ask())


def test_no_room_left_is_a_length_reply_without_generating(tok):
    eng = engine(tok, [CANONICAL, "yes" + END])
    sess = session(tok, eng, max_length=700)
    _, reply, second = _first_two(tok, sess)
    assert reply["usage"]["prompt_tokens"] == sess.ledger.ranges[0][0]
    second["messages"][-1]["content"] = "long " * 400  # the observation overflows the context
    answer = run(sess.complete(second))
    assert answer["choices"][0]["finish_reason"] == "length" and len(eng.outputs) == 1
    assert sess.ledger.overflowed and len(sess.ledger.ids) == 700
