"""Test servers shared by several test modules."""

from __future__ import annotations

from fastapi import FastAPI, Request

SCRIPT = ["<think>two</think><search> Scott Derrickson ## Ed Wood </search>", "<answer> yes </answer>"]


def make_openai_test_server(script: list[str] = SCRIPT) -> FastAPI:
    """A TEST SERVER implementing the OpenAI /v1/completions shape (with vLLM's stop_reason field).

    Stand-in for `vllm serve` in the main tier (the vLLM tier runs the real one). It answers
    from a fixed script keyed by how many <information> blocks the prompt holds, and records
    every request body and Authorization header (``app.state.requests``, ``app.state.auth``).
    """
    app = FastAPI()
    app.state.requests = []
    app.state.auth = []

    @app.post("/v1/completions")
    async def completions(req: Request):
        body = await req.json()
        app.state.requests.append(body)
        app.state.auth.append(req.headers.get("authorization"))
        prompt = body["prompt"]
        turn = prompt.count("\n\n<information>") if isinstance(prompt, str) else 0
        full = script[min(turn, len(script) - 1)]
        stop = next((s for s in body.get("stop", []) if s in full), None)
        text = full[: full.index(stop)] if stop else full  # like OpenAI: stop string not included
        return {
            "choices": [{"text": text, "finish_reason": "stop", "stop_reason": stop}],
            "usage": {"prompt_tokens": len(prompt.split()), "completion_tokens": len(text.split())},
        }

    return app


#: a chat script: a list of queries = one assistant message of parallel ``search`` calls; a string = the answer
CHAT_SCRIPT: list[list[str] | str] = [["Scott Derrickson", "Ed Wood"], "yes"]


def make_openai_chat_test_server(script: list[list[str | dict] | str] = CHAT_SCRIPT) -> FastAPI:
    """A TEST SERVER implementing the OpenAI /v1/chat/completions shape with parallel tool calls.

    Stand-in for a provider's chat API (no LLM runs here): turn i (the number of assistant
    messages in the request) answers ``script[i]``, as ``tool_calls`` (arguments as JSON text,
    as OpenAI sends them; a dict gives a call's raw ``arguments``) or as content. Every request
    body is kept in ``app.state.requests``.
    """
    import json

    app = FastAPI()
    app.state.requests = []

    @app.post("/v1/chat/completions")
    async def chat(req: Request):
        body = await req.json()
        app.state.requests.append(body)
        turn = sum(1 for m in body["messages"] if m.get("role") == "assistant")
        step = script[min(turn, len(script) - 1)]
        if isinstance(step, str):
            message = {"role": "assistant", "content": step}
            finish = "stop"
        else:
            calls = [
                {
                    "id": f"call_{turn}_{j}",
                    "type": "function",
                    "function": {
                        "name": "search",
                        "arguments": q["arguments"] if isinstance(q, dict) else json.dumps({"query": q}),
                    },
                }
                for j, q in enumerate(step)
            ]
            message = {"role": "assistant", "content": None, "tool_calls": calls}
            finish = "tool_calls"
        return {
            "id": f"chatcmpl-{len(app.state.requests)}",
            "object": "chat.completion",
            "created": 0,
            "model": body.get("model", "test-model"),
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
        }

    return app
