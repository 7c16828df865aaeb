"""The learning smoke's short form in the vLLM tier (the full run is ``make smoke-learn``): the run's own
driver with two steps, on the real vLLM CPU engine. Checked on what it writes (``learning.json``): the
weight sync (after each sync that precedes an evaluation the engine's log-probs of the sampled action
tokens equal the actor's; a mask shifted by one fails; the warm-started actor before its sync fails), every action mask against
the engine's own turns, and the direction of each training step (toward the actions its advantages
favour); the control's steps run with shuffled rewards."""

from __future__ import annotations

import json

import pytest
from conftest import long_work

pytestmark = [pytest.mark.vllm, long_work]  # a short learning run in a module fixture
pytest.importorskip("vllm", reason="the vLLM tier runs in .venv-vllm (make test-vllm)")
pytest.importorskip("openrlhf", reason="OpenRLHF is installed with --no-deps in the vLLM tier")

from parallelsearch.training.checks import SYNC_TOLERANCE  # noqa: E402
from parallelsearch.training.learning_loop import LearnSettings  # noqa: E402

#: 50 SFT steps: after 20 the tiny model writes no valid turn and every group scores alike
SETTINGS = LearnSettings(
    steps=2, heldout=4, heldout_samples=2, questions=24, sft_steps=50, save_checkpoints=True
)
#: 4 prompts x 4 samples per step, one optimizer step: what CI can afford
#: the ``paper`` reward (the optimizer's direction is what this short run checks, and the strict
#: default pays a short warm start's turns less often)
OVERRIDES = ["rollout_batch_size=4", "train_batch_size=16", "agent.reward.mode=paper"]


@pytest.fixture(scope="module")
def short_run(tmp_path_factory):
    from parallelsearch.training import learning_loop
    from parallelsearch.training.learning_run import run_learning_smoke

    work = tmp_path_factory.mktemp("learn")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(learning_loop, "CHECK_CHUNK", 3)  # each check's 8 episodes in batches of 3, 3 and 2
        record = run_learning_smoke(
            SETTINGS, overrides=OVERRIDES, workdir=work, engine_args={"kv_cache_memory_bytes": 1 << 30}
        )
    return record, work


def test_learning_json_holds_the_run(short_run):
    record, work = short_run
    saved = json.loads((work / "learning.json").read_text())
    assert saved == json.loads(json.dumps(record))
    for key in (
        "steps", "heldout_before", "heldout_after", "heldout_stderr", "control_before", "control_after", "logprob_gap",
    ):  # fmt: skip
        assert key in saved, key
    assert len(saved["steps"]) == len(saved["control_steps"]) == SETTINGS.steps
    from parallelsearch.training.rollouts import PART_TERMS

    assert set(PART_TERMS) <= set(saved["steps"][0])
    # each step's health (rl/health.py) and its distance from the start; the warm start's episodes' log-prob
    health = saved["steps"][0]["health"]
    assert health["episodes"] == 16 and health["by_class"] and health["equal_groups"] is not None
    assert saved["steps"][1]["weight_distance"] > saved["steps"][0]["weight_distance"] > 0
    assert set(saved["anchor_logprob"]) == {"before", "after", "control_before", "control_after"}
    assert saved["anchor_logprob"]["control_before"] == saved["anchor_logprob"]["before"]
    # the paper preset's agent config (its reward mode set above); the control starts where the run started
    assert saved["config"]["reward_mode"] == "paper" and saved["config"]["apply_chat_template"] is True
    # what the model was trained on, as the trainer's tokens decode: the chat-templated prompt and a reply
    trained = saved["first_trained_episode"]
    assert "<|im_start|>user" in trained and "<|im_start|>assistant" in trained, trained[:300]
    assert saved["config"]["constrained"] is False and saved["config"]["prompts_per_step"] == 4
    assert saved["control_before"] == saved["heldout_before"]
    assert (work / "learning.svg").read_text().startswith("<svg")


def test_the_sync_check_holds_after_every_sync_and_can_fail(short_run):
    record, _ = short_run
    assert set(record["sync_checks"]) == {"before", "after", "control_before", "control_after"}
    for name, check in record["sync_checks"].items():
        assert check["gap"] <= SYNC_TOLERANCE < check["shifted_gap"], (name, check)
    assert record["logprob_gap_unsynced"] > SYNC_TOLERANCE  # the fitted actor before its sync


def test_every_action_mask_matches_the_engines_turns(short_run):
    record, _ = short_run
    # the teacher's 16 episodes, 8 unsynced, 4 evaluations of 8 and 2 x 2 steps of 4 prompts x 4 samples
    assert record["mask_check"]["episodes"] == 16 + 8 + 4 * 8 + 4 * 16
    assert record["mask_check"]["failures"] == []


def test_training_steps_move_toward_what_the_advantages_favour(short_run):
    record, _ = short_run
    moved = 0
    for row in record["steps"] + record["control_steps"]:
        assert row["parameters_changed"] > 0 and row["optimizer_steps"] >= 1
        if row["health"]["equal_groups"] < 1:  # a step whose groups all scored alike has no advantage
            assert row["advantage_weighted_change"] > 0, row
            moved += 1
    assert moved, "no step of the short run had a group with advantages"


def test_the_saved_checkpoints_load_as_hugging_face_folders(short_run):
    """``save_checkpoints``: the warm start and the trained actor, each a folder transformers loads with
    its tokenizer and chat template; the run's steps moved the weights between them."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    record, work = short_run
    assert record["checkpoints"] == {
        "warm_start": str(work / "checkpoints" / "warm_start"),
        "after": str(work / "checkpoints" / "after"),
    }
    models = {
        name: AutoModelForCausalLM.from_pretrained(path) for name, path in record["checkpoints"].items()
    }
    tokenizer = AutoTokenizer.from_pretrained(record["checkpoints"]["after"])
    assert tokenizer.chat_template and "<|im_start|>" in tokenizer.apply_chat_template(
        [{"role": "user", "content": "q"}], tokenize=False
    )
    start, after = (dict(m.named_parameters()) for m in models.values())
    moved = [n for n in start if not torch.equal(start[n], after[n])]
    assert moved, "the run's steps left every weight where the warm start had it"
