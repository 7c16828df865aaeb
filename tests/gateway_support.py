"""What the gateway tests share: the tiny tokenizer with the Hermes tools template, a searcher
that is a plain function, scripted turns in both forms (the chat agent's and the ``tool_text``
environment's), and engine stand-ins keyed by the episode's question."""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from engines import SamplingParamsStandIn, ScriptedEngine

from parallelsearch.rl.gateway import ChatTemplate, GatewaySession, SessionLimits

QUESTION = "Were Scott Derrickson and Ed Wood of the same nationality?"
LABEL = {"golden_answers": ["yes"], "type": "comparison", "question": QUESTION}
END = "<|im_end|>"


def user_module(tmp_path: Path, monkeypatch: Any, name: str, source: str) -> Iterator[str]:
    """A user's module ``name`` in the working directory, importable as ``agent.factory`` names it
    (the test runner's own folder off ``sys.path``), and forgotten after the test."""
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", os.getcwd())])
    yield name
    sys.modules.pop(name, None)


def tools_tokenizer() -> Any:
    from parallelsearch.rl.tiny_model import TOOLS_CHAT_TEMPLATE, build_tokenizer

    tok = build_tokenizer()
    tok.chat_template = TOOLS_CHAT_TEMPLATE
    return tok


class Library:
    """A searcher that is a plain function (one of the accepted kinds) and remembers its queries."""

    def __init__(self) -> None:
        self.queries: list[str] = []

    def __call__(self, query: str) -> list[dict]:
        self.queries.append(query)
        return [{"title": f"{query} page", "text": f"{query} is an American."}]


def retrieve_app():
    """A /retrieve server in the Search-R1 format (what the agent config's retriever_url names)."""
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    async def retrieve(request):
        body = await request.json()
        docs = [
            [{"document": {"id": q, "contents": f'"{q}"\n{q} is an American.'}, "score": 1.0}]
            for q in body["queries"]
        ]
        return JSONResponse({"result": docs})

    return Starlette(routes=[Route("/retrieve", retrieve, methods=["POST"])])


def call(query: str) -> str:
    """One call as the Hermes template writes it (the canonical form)."""
    return f'<tool_call>\n{{"name": "search", "arguments": {{"query": "{query}"}}}}\n</tool_call>'


_QUESTION_RE = re.compile(r"(?:<\|im_start\|>user\n|Question: )(.*?)(?:<\|im_end\|>|\n)", re.DOTALL)


def question_key(tok: Any) -> Any:
    """A ScriptedEngine key: the episode's question (its first user turn, or its ``Question:`` line)."""

    def key(ids: list[int]) -> str:
        text = tok.decode(ids, skip_special_tokens=False)
        found = [m.group(1) for m in _QUESTION_RE.finditer(text)]
        return next((q for q in found if "<tool_response>" not in q), text[:200])

    return key


def engine(tok: Any, turns: list[Any]) -> ScriptedEngine:
    return ScriptedEngine(tok, turns, key=question_key(tok))


def session(
    tok: Any, eng: Any, *, max_length: int = 8192, policy: str = "override", cap: int = 400
) -> GatewaySession:
    limits = SessionLimits(
        SamplingParamsStandIn(logprobs=1), turn_cap=cap, max_length=max_length, want_logprobs=True,
        client_sampling=policy,  # type: ignore[arg-type]
    )  # fmt: skip
    return GatewaySession(ChatTemplate(tok), eng, limits)


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def tool_messages(reply: dict[str, Any], texts: list[str]) -> list[dict[str, Any]]:
    """The assistant reply as a client sends it back, and one tool message per call."""
    msg = reply["choices"][0]["message"]
    calls = msg.get("tool_calls") or []
    back = {"role": "assistant", "content": msg.get("content"), "tool_calls": calls}
    return [
        back,
        *(
            {"role": "tool", "tool_call_id": c["id"], "content": t}
            for c, t in zip(calls, texts, strict=False)
        ),
    ]


def compact(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"))


class KeyedEngine(ScriptedEngine):
    """A scripted engine with one script per question: the script of the question the prompt
    holds (so many episodes, in any order, share one engine)."""

    def __init__(self, tok: Any, scripts: dict[str, list[Any]]):
        self.scripts = scripts
        super().__init__(tok, ["unused"], key=self.question_of)

    def question_of(self, ids: list[int]) -> str:
        text = self.tokenizer.decode(ids, skip_special_tokens=False)
        return next(q for q in self.scripts if q in text)

    async def generate(self, token_ids: list[int], sampling_params: Any, multi_modal_data: Any = None) -> Any:
        self.turns = self.scripts[self.question_of(list(token_ids))]
        return await super().generate(token_ids, sampling_params, multi_modal_data)
