"""Rollout records: token ids, action masks and log-probs (``--tokens``), the oracle label, and the
SFT export in OpenRLHF's multi-turn format, checked with OpenRLHF 0.11.2's own ``SFTDataset`` code.

Real graph runs over a real Chroma store; the policies are the oracle, and the tiny random
model through Hugging Face transformers (token ids and log-probs of its own).
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import types
from pathlib import Path

import pytest
from conftest import needs_data

from parallelsearch.cli import main
from parallelsearch.graphs.config import GraphConfig
from parallelsearch.rl import EnvGraph
from parallelsearch.rl.episode import decode_tokens
from parallelsearch.rl.rollout import SFT_CHAT_TEMPLATE, rollout, sft_record

pytestmark = needs_data


def _spans(mask: list[int]) -> list[tuple[int, int]]:
    out, start = [], None
    for i, m in enumerate([*mask, 0]):
        if m and start is None:
            start = i
        elif not m and start is not None:
            out.append((start, i))
            start = None
    return out


def _openrlhf_sft_dataset() -> types.ModuleType:
    """openrlhf/datasets/sft_dataset.py itself: the package's __init__ imports HF ``datasets``, which
    OpenRLHF's --no-deps install leaves out (the module uses only torch and openrlhf.utils)."""
    openrlhf = pytest.importorskip("openrlhf", reason="OpenRLHF is installed with --no-deps in both tiers")
    path = Path(openrlhf.__file__).parent / "datasets" / "sft_dataset.py"
    spec = importlib.util.spec_from_file_location("openrlhf_sft_dataset", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _rows(path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def test_tokens_of_a_model_policy_mask_exactly_its_generated_ids(
    hotpot_store, hotpot_questions, tiny_lm, tmp_path
):
    """The tiny model's own ids are the action tokens; prompt and observations are masked."""
    from parallelsearch.agents.policies.hf import HFPolicy

    model, tok = tiny_lm
    env_graph = EnvGraph(hotpot_store, config=GraphConfig(max_turns=1, max_new_tokens=24, top_k=1))
    summary = asyncio.run(
        rollout(
            hotpot_questions[:2], env_graph, HFPolicy(model, tok), tmp_path / "ep.jsonl", tokenizer=tok,
            progress=False,
        )
    )  # fmt: skip
    assert summary.failures == 0 and not summary.oracle
    for row in _rows(tmp_path / "ep.jsonl"):
        ids, mask, lps = row["token_ids"], row["action_mask"], row["logprobs"]
        assert len(ids) == len(mask) == len(lps)
        assert decode_tokens(tok, ids) == row["text"]  # the tokens are the episode the reward scored
        spans = _spans(mask)
        assert len(spans) == len(row["turns"]) and row["retokenized_turns"] == 0
        for (a, b), turn in zip(spans, row["turns"], strict=True):
            assert decode_tokens(tok, ids[a:b]) == turn["text"]
            assert all(lp is not None and lp <= 0 for lp in lps[a:b])
        assert mask[: len(tok(row["prompt"], add_special_tokens=False)["input_ids"])] == [0] * len(
            tok(row["prompt"], add_special_tokens=False)["input_ids"]
        )
        assert all(lp is None for lp, m in zip(lps, mask, strict=True) if not m)


def test_rollout_cli_tokens_oracle_label_and_sft_refusal(
    hotpot_store, hotpot_comparison_file, tiny_model_dir, tmp_path, capsys
):
    from parallelsearch.stores import create_retrieval_app
    from parallelsearch.stores.http.loopback import LoopbackServer

    with LoopbackServer(create_retrieval_app(hotpot_store)) as srv:
        base = ["rollout", "--data", str(hotpot_comparison_file), "--policy", "oracle", "--limit", "4"]
        base += ["--retriever", srv.url]
        # --sft-out with the oracle: refused before any episode runs, naming the flag that allows it
        assert main([*base, "--out", str(tmp_path / "a.jsonl"), "--sft-out", str(tmp_path / "a.sft")]) == 2
        err = capsys.readouterr().err
        assert "--allow-oracle" in err and not (tmp_path / "a.jsonl").exists()
        # --tokens with a text policy and no tokenizer: a clear error
        assert main([*base, "--out", str(tmp_path / "b.jsonl"), "--tokens"]) == 2
        assert "--tokenizer" in capsys.readouterr().err
        rc = main(
            [*base, "--out", str(tmp_path / "c.jsonl"), "--tokens", "--tokenizer", str(tiny_model_dir),
             "--sft-out", str(tmp_path / "c.sft"), "--allow-oracle"]
        )  # fmt: skip
    assert rc == 0
    out = capsys.readouterr().out
    assert "EM oracle" in out and "EM 1.0" not in out
    assert "--data.multiturn" in out and "--data.input_key messages" in out
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    rows = _rows(tmp_path / "c.jsonl")
    assert len(rows) == 4 and all(r["labels"] == ["oracle"] for r in rows)
    for row in rows:
        spans = _spans(row["action_mask"])
        assert row["logprobs"] is None and row["retokenized_turns"] == len(row["turns"]) == len(spans)
        assert decode_tokens(tok, row["token_ids"]) == row["text"]
        for (a, b), turn in zip(spans, row["turns"], strict=True):
            assert decode_tokens(tok, row["token_ids"][a:b]) == turn["text"]
            assert "<information>" not in turn["text"]
    sft = _rows(tmp_path / "c.sft")
    assert len(sft) == 4 and not any("oracle:" in m["content"] for s in sft for m in s["messages"])


def test_sft_export_masks_observations_in_openrlhf_multiturn_dataset(
    hotpot_store, hotpot_questions, tiny_model_dir, tmp_path
):
    """OpenRLHF 0.11.2's SFTDataset (process_data + get_loss_mask, unchanged) with the flags we print:
    the loss covers the policy's turns and never an observation or the prompt."""
    sft_dataset = _openrlhf_sft_dataset()
    from transformers import AutoTokenizer

    from parallelsearch.agents.policies import OraclePolicy

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    asyncio.run(
        rollout(
            hotpot_questions[:3], EnvGraph(hotpot_store, top_k=1), OraclePolicy(), tmp_path / "ep.jsonl",
            sft_out=tmp_path / "sft.jsonl", allow_oracle=True, progress=False,
        )
    )  # fmt: skip
    rows = {r["id"]: r for r in _rows(tmp_path / "ep.jsonl")}
    examples = _rows(tmp_path / "sft.jsonl")
    assert examples
    # what train_sft's flags set: --data.input_key messages --data.multiturn --data.apply_chat_template
    # --data.tokenizer_chat_template SFT_CHAT_TEMPLATE
    data_args = types.SimpleNamespace(
        input_key="messages",
        output_key=None,
        apply_chat_template=True,
        tokenizer_chat_template=SFT_CHAT_TEMPLATE,
    )
    ds = sft_dataset.SFTDataset.__new__(sft_dataset.SFTDataset)  # __init__ maps a HF datasets.Dataset
    ds.tokenizer, ds.max_length, ds.pretrain_mode, ds.multiturn, ds.input_template = (
        tok,
        100000,
        False,
        True,
        None,
    )
    ds.strategy = types.SimpleNamespace(args=types.SimpleNamespace(data=data_args))
    ds.input_key, ds.output_key = "messages", None
    tok.chat_template = SFT_CHAT_TEMPLATE
    ds.apply_chat_template = tok.apply_chat_template
    processed = [ds.process_data(json.loads(json.dumps(ex))) for ex in examples]
    ds.prompts = [p["prompt"] for p in processed]
    ds.responses = [p["response"] for p in processed]
    ds.prompt_ids_lens = [p["prompt_ids_len"] for p in processed]
    ds.response_ranges = [p["response_ranges"] for p in processed]
    for i, ex in enumerate(examples):
        rec = rows[ex["id"]]
        assert sft_record(rec) == ex
        text = "".join(m["content"] for m in ex["messages"])
        assert ds.prompts[i] + ds.responses[i] == text  # the template adds nothing: the episode's text
        assert ex["messages"][0]["content"] == rec["prompt"]
        input_ids, _, loss_mask = ds[i]
        ids = input_ids[0].tolist()
        # loss_mask[t] = 1 trains the prediction of token t + 1: the trained targets are these tokens
        targets = "".join(
            decode_tokens(tok, [ids[t + 1]])
            for t, m in enumerate(loss_mask[0].tolist())
            if m and t + 1 < len(ids)
        )
        assistant = "".join(m["content"] for m in ex["messages"] if m["role"] == "assistant")
        assert "<information>" not in targets and "Doc 1(Title:" not in targets
        assert "Question:" not in targets  # nor the prompt
        assert "<answer>" in targets and "<search>" in targets
        # exactly the turns' text; only whitespace differs: a token that ends a turn can carry the
        # observation's leading newlines (">\n\n" is one token), as in the RL executor's action spans
        assert "".join(targets.split()) == "".join(assistant.split())
