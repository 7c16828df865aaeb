"""vLLM tier: ``rollout --policy vllm:PATH --tokens`` with the engine flags, on a real vLLM CPU engine.

The engine settings come only from ``--engine-arg``/``--kv-cache-gib`` (no VLLM_CPU_KVCACHE_SPACE),
so the engine starting at all shows they reached ``AsyncEngineArgs``; the records carry vLLM's own
token ids and log-probs, the action mask covering exactly them.
"""

from __future__ import annotations

import json

import pytest
from conftest import UvicornThread, needs_data

from parallelsearch.cli import main

pytestmark = [pytest.mark.vllm, needs_data]
pytest.importorskip("vllm", reason="the vLLM tier runs in .venv-vllm (make test-vllm)")


def test_rollout_cli_vllm_policy_with_engine_flags_records_tokens(
    hotpot_store, hotpot_comparison_file, tiny_model_dir, tmp_path, capsys, monkeypatch
):
    from transformers import AutoTokenizer

    from parallelsearch.rl.episode import decode_tokens
    from parallelsearch.stores import create_retrieval_app

    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)
    with UvicornThread(create_retrieval_app(hotpot_store)) as srv:
        rc = main(
            [
                "rollout", "--data", str(hotpot_comparison_file), "--limit", "2", "--retriever", srv.url,
                "--policy", f"vllm:{tiny_model_dir}", "--constrained", "--max-turns", "1", "--top-k", "1",
                "--engine-arg", "dtype=float32", "--engine-arg", "max_model_len=4096",
                "--engine-arg", "enforce_eager=true", "--kv-cache-gib", "1",
                "--tokens", "--out", str(tmp_path / "ep.jsonl"),
            ]
        )  # fmt: skip
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "EM oracle" not in out and "episodes 2, failures 0" in out
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    rows = [json.loads(x) for x in (tmp_path / "ep.jsonl").read_text().splitlines()]
    for row in rows:
        ids, mask, lps = row["token_ids"], row["action_mask"], row["logprobs"]
        assert len(ids) == len(mask) == len(lps) and row["retokenized_turns"] == 0
        assert decode_tokens(tok, ids) == row["text"]
        assert sum(mask) == sum(t["completion_tokens"] for t in row["turns"])  # vLLM's own ids, all masked in
        assert all((lp is not None and lp <= 0) if m else lp is None for lp, m in zip(lps, mask, strict=True))
