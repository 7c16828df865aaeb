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
