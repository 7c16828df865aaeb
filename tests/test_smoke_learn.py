"""The learning smoke's short form in the vLLM tier (the full run is ``make smoke-learn``): the tiny model
warm-started on the teacher's episodes, the weights synced into the real vLLM CPU engine and checked
(the engine's log-probs of the sampled action tokens equal the actor's; a mask shifted by one fails; an
actor that changed without a sync fails), and two training steps of OpenRLHF's code whose direction is
toward the actions their advantages favour. Every episode's action mask is checked against the engine's
own turns."""

from __future__ import annotations

import asyncio
import json

import pytest

pytestmark = pytest.mark.vllm
pytest.importorskip("vllm", reason="the vLLM tier runs in .venv-vllm (make test-vllm)")
pytest.importorskip("openrlhf", reason="OpenRLHF is installed with --no-deps in the vLLM tier")

from parallelsearch.smoke_checks import SYNC_TOLERANCE  # noqa: E402
from parallelsearch.smoke_learn import LearningRun, LearnSettings, split_questions  # noqa: E402

SETTINGS = LearnSettings(steps=2, heldout=4, heldout_samples=2, questions=24, sft_steps=20, control=False)


async def _short_run(tmp_path):
    import torch

    from parallelsearch.data import load_questions
    from parallelsearch.demo_data import HOTPOTQA_SAMPLE
    from parallelsearch.smoke_session import smoke_session
    from parallelsearch.smoke_trainer import CpuTrainer
    from parallelsearch.train_smoke_learn import warm_start

    train_q, held_q = split_questions(load_questions(HOTPOTQA_SAMPLE)[: SETTINGS.questions], SETTINGS.heldout)
    out: dict = {}
    async with smoke_session(
        train_q + held_q,
        store_questions=SETTINGS.questions,
        workdir=tmp_path,
        engine_args={"kv_cache_memory_bytes": 1 << 30},
    ) as smoke:
        trainer = CpuTrainer(smoke.model_dir, smoke.args, smoke.tokenizer)
        recs = smoke.records
        run = LearningRun(smoke.actor, trainer, recs[: len(train_q)], recs[len(train_q) :], SETTINGS)
        out["sft"] = await warm_start(run, train_q, smoke)
        await run.evaluate("before")
        out["steps"] = await run.train(control=False)
        await run.evaluate("after")
        # the actor moves on without a sync: the engine's log-probs are the old weights', and the check says so
        with torch.no_grad():
            for p in trainer.actor.parameters():
                p.add_(0.05 * torch.randn_like(p))
        await run.evaluate("unsynced")
        await trainer.sync(smoke.actor)
        await run.evaluate("synced again")
        out["state"] = run.state
    return out


@pytest.fixture(scope="module")
def short_run(tmp_path_factory):
    return asyncio.run(_short_run(tmp_path_factory.mktemp("learn")))


def test_the_sync_check_passes_after_each_sync_and_fails_without_one(short_run):
    checks = short_run["state"].sync_checks
    for name in ("before", "after", "synced again"):
        assert checks[name].gap <= SYNC_TOLERANCE < checks[name].shifted_gap, (name, checks[name])
        assert checks[name].ok(SYNC_TOLERANCE)
    assert checks["unsynced"].gap > SYNC_TOLERANCE and not checks["unsynced"].ok(SYNC_TOLERANCE)


def test_every_action_mask_matches_the_engines_turns(short_run):
    state = short_run["state"]
    # the teacher's episodes, 4 evaluations of 8 episodes and 2 steps of 8 prompts x 4 samples
    assert state.mask_checked >= 36 + 4 * 8 + 2 * 32 and state.mask_failures == []


def test_training_steps_move_toward_what_the_advantages_favour(short_run):
    sft = short_run["sft"]
    assert sft[-1] < sft[0]  # the warm start fits the teacher's turns
    for row in short_run["steps"]:
        assert row["parameters_changed"] > 0 and row["optimizer_steps"] >= 1
        assert row["advantage_weighted_change"] > 0, row


def test_learning_json_from_a_short_run(tmp_path):
    """The CLI's --learn writes learning.json with the issue's fields and the plot (tiny settings)."""
    from parallelsearch.train_smoke_learn import run_learning_smoke

    settings = LearnSettings(steps=1, heldout=2, heldout_samples=1, questions=16, sft_steps=5)
    record = run_learning_smoke(settings, workdir=tmp_path, engine_args={"kv_cache_memory_bytes": 1 << 30})
    saved = json.loads((tmp_path / "learning.json").read_text())
    assert saved == json.loads(json.dumps(record))
    for key in (
        "steps",
        "heldout_before",
        "heldout_after",
        "heldout_stderr",
        "control_before",
        "control_after",
        "logprob_gap",
    ):
        assert key in saved, key
    assert set(saved["steps"][0]) >= {
        "reward_outcome",
        "reward_decomposition",
        "reward_search_count",
        "reward_format",
    }
    assert saved["config"]["reward_mode"] == "official" and saved["config"]["apply_chat_template"] is True
    assert (tmp_path / "learning.svg").read_text().startswith("<svg")
