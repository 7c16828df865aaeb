"""Structured output on OpenAI models, as ``create_agent`` has it: the real ``ChatOpenAI`` against a
local OpenAI-compatible TEST SERVER (tests/servers.py: no LLM runs here) that answers a request a
strict provider refuses with its 400 (a strict tool or response format whose schema is not closed,
an unanswered call, a history not starting with the user), both agents on the same script."""

from __future__ import annotations

import pytest
from conftest import UvicornThread
from pydantic import BaseModel

from parallelsearch import create_parallel_search_agent

pytest.importorskip("langchain_openai", reason="langchain-openai is in the dev extra")


class Film(BaseModel):
    """A film and the year it came out."""

    title: str
    year: int


def wiki(query: str) -> list[dict]:
    """Search the encyclopedia."""
    return [{"title": query, "text": f"the wiki on {query}"}]


SCRIPT = [[{"name": "wiki", "arguments": '{"query": "Inception"}'}], '{"title": "Inception", "year": 2010}']


def run_on_openai(make_agent) -> tuple[dict, list[dict]]:
    """``make_agent(model)``'s answer to one question over ``ChatOpenAI("gpt-4o-mini")`` on the strict
    stand-in server, and the requests it sent."""
    from langchain_openai import ChatOpenAI
    from servers import make_openai_chat_test_server

    app = make_openai_chat_test_server(SCRIPT, strict=True)
    with UvicornThread(app) as srv:
        model = ChatOpenAI(
            model="gpt-4o-mini", base_url=srv.url + "/v1", api_key="sk-test", timeout=20, max_retries=0
        )
        out = make_agent(model).invoke({"messages": [("user", "Which film, and when?")]})
    return out, app.state.requests


@pytest.mark.parametrize("strategy", ["auto", "provider"])
def test_structured_output_on_an_openai_model_as_create_agent(strategy):
    from langchain.agents import create_agent
    from langchain.agents.structured_output import ProviderStrategy

    fmt = Film if strategy == "auto" else ProviderStrategy(Film)
    ours, our_requests = run_on_openai(lambda m: create_parallel_search_agent(m, [wiki], response_format=fmt))
    theirs, their_requests = run_on_openai(lambda m: create_agent(m, [wiki], response_format=fmt))
    assert ours["structured_response"] == theirs["structured_response"] == Film(title="Inception", year=2010)
    assert len(our_requests) == len(their_requests) == 2
    for mine, ref in zip(our_requests, their_requests, strict=True):
        assert mine["response_format"] == ref["response_format"]  # the same json_schema, strict
        assert [t["function"]["strict"] for t in mine["tools"]] == [True]
    searched = [m for m in ours["messages"] if m.type == "tool"]
    assert len(searched) == 1 and "the wiki on Inception" in searched[0].content


def test_the_stand_in_refuses_what_a_strict_provider_refuses():
    from servers import strict_provider_problems

    loose = {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}
    tool = {"type": "function", "function": {"name": "search", "strict": True, "parameters": loose}}
    body = {"messages": [{"role": "user", "content": "q"}], "tools": [tool]}
    assert strict_provider_problems(body) == ["tool search: additionalProperties must be false"]
    body = {"messages": [{"role": "assistant", "content": "hi"}, {"role": "user", "content": "q"}]}
    assert strict_provider_problems(body) == ["the first non-system message is assistant, not user"]
