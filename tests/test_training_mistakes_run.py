"""Fourteen more mistakes that passed ``train --check`` silently, each now stopped with one line
naming the setting and the fix: batch arithmetic, greedy sampling under a group baseline, data
without gold answers, a missing eval file, prompts in another model's chat template, the
sequential graph under the official reward, evaluation that never runs, the context budget of a
decomposed search, a resume without a checkpoint, a critic of another family, and questions of
another corpus. Real parts: OpenRLHF's parser, real files, a real Chroma store.
"""

from __future__ import annotations

import json

import pytest
from conftest import RAW, needs_data
from test_training_mistakes import QUESTIONS, train_check, write_data

from parallelsearch.cli import main
from parallelsearch.rl.data import train_record

LLAMA3 = "<|start_header_id|>user<|end_header_id|>\n\n{}<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
CHATML = "<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n"


def refused(capsys, code: int, *needles: str) -> str:
    """The check failed with exactly one line, holding each of ``needles``."""
    captured = capsys.readouterr()
    lines = (captured.out + captured.err).strip().splitlines()
    assert code != 0 and len(lines) == 1 and lines[0].startswith("check failed: "), lines
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


@pytest.fixture
def data(tmp_path):
    return write_data(tmp_path / "train.jsonl")


def skip_probe_check(*settings: str) -> int:
    return main(
        [
            "train",
            "--preset",
            "paper",
            "--check",
            "--skip-probe",
            *(x for kv in settings for x in ("--set", kv)),
        ]
    )


@pytest.mark.parametrize(
    "settings,needles",
    [
        (["train_batch_size=250"], ["train_batch_size 250 is not a multiple of micro_train_batch_size x GPUs = 8 x 8 = 64", "set train_batch_size=192"]),
        (["rollout_batch_size=320"], ["rollout_batch_size x n_samples_per_prompt = 320 x 1 = 320 is not a multiple of train_batch_size 256", "set train_batch_size to a divisor of 320"]),
        (["algorithm=grpo", "n_samples_per_prompt=8", "temperature=0"], ["temperature 0 with algorithm group_norm", "every advantage is 0", "set temperature=1.0"]),
        (["agent.graph=sequential", "agent.reward.mode=official"], ["agent.graph sequential with agent.reward.mode official", "set agent.graph=parallel"]),
        (["agent.graph_config.top_k=5", "agent.max_observation_tokens=null"], ["max_len 6196 < the ", "max_subqueries 8 x 5 passage(s) x 160", "set max_len >= "]),
        (["critic_model=meta-llama/Llama-3.1-8B-Instruct"], ["critic_model meta-llama/Llama-3.1-8B-Instruct (llama)", "actor's family (Qwen/Qwen2.5-7B-Instruct: qwen2)", "unset critic_model"]),
        (["eval_data=data/missing_eval.jsonl"], ["eval_data data/missing_eval.jsonl does not exist", "unset eval_data"]),
    ],
)  # fmt: skip
def test_a_setting_the_run_cannot_use_is_refused(settings, needles, data, capsys):
    code = skip_probe_check(f"prompt_data={data}", *settings)
    refused(capsys, code, *needles)


def test_the_paper_preset_passes_and_says_so(data, capsys):
    assert skip_probe_check(f"prompt_data={data}") == 0
    out = capsys.readouterr().out
    assert (
        "ok: batches: train_batch_size 256 = 4 x micro 8 x 8 GPUs; a rollout batch is 2 train batch(es)"
        in out
    )
    assert f"ok: prompt_data {data}: 512 records, each with golden answers" in out
    assert "ok: steps: 1005 (1005 pass(es) of 512 prompts)" in out
    assert (
        "ok: log-prob mismatch correction on: tis clips the token ratio pi_train/pi_engine to [0, 2]" in out
    )


def test_a_prompt_file_smaller_than_a_rollout_batch_is_refused(tmp_path, capsys):
    small = write_data(tmp_path / "train.jsonl", fill=100)
    refused(
        capsys,
        skip_probe_check(f"prompt_data={small}"),
        "holds 100 prompts, fewer than one rollout batch",
        "set rollout_batch_size <= 100",
    )


def test_records_without_golden_answers_are_refused(tmp_path, capsys):
    bare = [{**q, "golden_answers": []} for q in QUESTIONS]
    train = write_data(tmp_path / "train.jsonl", questions=bare)
    refused(
        capsys,
        skip_probe_check(f"prompt_data={train}"),
        "prompt_data",
        "512 of 512 records have no golden answers (first: line 1)",
    )
    good = write_data(tmp_path / "good.jsonl")
    held = write_data(
        tmp_path / "eval.jsonl", questions=[{"id": "e", "question": "q", "golden_answers": []}], score="em"
    )
    code = skip_probe_check(f"prompt_data={good}", f"eval_data={held}", "eval_steps=5")
    refused(capsys, code, f"eval_data {held}: 1 of 1 records have no golden answers")


def test_evaluation_that_never_runs_is_refused(data, tmp_path, capsys):
    held = write_data(
        tmp_path / "eval.jsonl", questions=[{"id": "e", "question": "q", "golden_answers": ["a"]}], score="em"
    )
    code = skip_probe_check(f"prompt_data={data}", f"eval_data={held}", "total_training_steps=15")
    refused(
        capsys, code, "eval_steps 100 > the run's 15 steps", "evaluation never runs; set eval_steps <= 15"
    )
    assert (
        skip_probe_check(
            f"prompt_data={data}", f"eval_data={held}", "total_training_steps=15", "eval_steps=15"
        )
        == 0
    )
    assert "evaluation every 15 steps" in capsys.readouterr().out


def test_prompts_in_another_models_chat_template_are_refused(tmp_path, capsys):
    records = [train_record(q, template="official") for q in QUESTIONS]
    for name, template in (("llama", LLAMA3), ("chatml", CHATML)):
        path = tmp_path / f"{name}.jsonl"
        path.write_text(
            "".join(json.dumps({**r, "prompt": template.format(r["prompt"])}) + "\n" for r in records) * 200
        )
    argv = ["apply_chat_template=false", "agent.reward.mode=paper"]
    code = skip_probe_check(f"prompt_data={tmp_path / 'llama.jsonl'}", *argv)
    refused(
        capsys,
        code,
        "chat-templated as Llama-3, but Qwen/Qwen2.5-7B-Instruct writes ChatML (Qwen)",
        "apply_chat_template=true",
    )
    assert skip_probe_check(f"prompt_data={tmp_path / 'chatml.jsonl'}", *argv) == 0
    assert (
        "ok: prompts chat-templated as ChatML (Qwen), the template of Qwen/Qwen2.5-7B-Instruct"
        in capsys.readouterr().out
    )


def test_resume_without_a_checkpoint_is_refused(data, tmp_path, capsys):
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    code = skip_probe_check(f"prompt_data={data}", "resume=true", f"ckpt_path={ckpt}")
    refused(capsys, code, f"resume=true but ckpt_path {ckpt} holds no checkpoint", "resume=false")
    (ckpt / "_actor").mkdir()
    (ckpt / "_actor" / "latest").write_text("global_step10")
    assert skip_probe_check(f"prompt_data={data}", "resume=true", f"ckpt_path={ckpt}") == 0
    assert f"ok: resume: checkpoint {ckpt / '_actor'} found" in capsys.readouterr().out


def test_the_log_prob_correction_is_reported_when_off(data, capsys):
    assert skip_probe_check(f"prompt_data={data}", "is_correction=off") == 0
    assert "not checked: log-prob mismatch correction is off (is_correction=off)" in capsys.readouterr().out


@needs_data
def test_questions_of_another_corpus_are_refused(hotpot_store, hotpot_questions, tmp_path, capsys):
    """NQ questions against a HotpotQA-only index: none of their answers is in the top 3 (0 of 17
    measured), where the index's own questions find theirs (9 of 20)."""
    from parallelsearch.data import load_questions

    nq = load_questions(RAW / "nq" / "RUC-NLPIR_FlashRAG" / "test.jsonl")
    store = [
        f"agent.chroma_path={hotpot_store.location}",
        "agent.stores=[hotpot]",
        "agent.retriever_url=null",
    ]
    for name, questions in (("nq", nq), ("hotpot", hotpot_questions)):
        renamed = [{**q, "id": f"{name}{i}"} for i, q in enumerate(questions)]
        write_data(tmp_path / f"{name}.jsonl", questions=renamed, fill=520)  # each question 26 times
    code = train_check(f"prompt_data={tmp_path / 'nq.jsonl'}", *store, "corpus_check_questions=40")
    line = refused(capsys, code, "corpus: only 0 of 40 sampled questions (0%)", "below the floor 20%")
    assert "have a gold answer in store hotpot at " in line and "corpus_check_floor" in line
    assert train_check(f"prompt_data={tmp_path / 'hotpot.jsonl'}", *store, "corpus_check_questions=520") == 0
    assert "234 of 520 sampled questions (45%) have a gold answer in store hotpot" in capsys.readouterr().out
