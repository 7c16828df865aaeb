"""The executor's side of OpenRLHF 0.11.2's agent contract, through its public interface
(``EpisodeExecutor(...).execute``) with the engine stand-ins of tests/engines.py and OpenRLHF's
own classes where they read the output: ``truncated`` as OpenRLHF means it and a separate
overflow count, the reward of an episode cut before its answer, log-prob misses, room for a
turn after the prompt, eval records scored by EM, and the per-step health signals.
"""

from __future__ import annotations

import asyncio

import pytest
from conftest import needs_data
from engines import SamplingParamsStandIn, ScriptedEngine

from parallelsearch.rl import EnvGraph
from parallelsearch.rl.data import train_record
from parallelsearch.rl.executor import EpisodeExecutor

pytestmark = needs_data

COMPARISON = {
    "id": "c1",
    "question": "Were Scott Derrickson and Ed Wood of the same nationality",
    "golden_answers": ["yes"],
    "metadata": {"type": "comparison"},
}


def run(env_graph, turns, tok, *, max_length=4096, params=None, record=None, **knobs):
    rec = record or train_record(COMPARISON)
    engine = ScriptedEngine(tok, turns)
    executor = EpisodeExecutor(env_graph, **knobs)
    result = asyncio.run(
        executor.execute(
            rec["prompt"], rec["label"], params or SamplingParamsStandIn(), max_length, tok, engine
        )
    )
    return result, engine


def prompt_len(tok, record=None) -> int:
    rec = record or train_record(COMPARISON)
    return len(tok(rec["prompt"], add_special_tokens=False)["input_ids"])


def test_truncated_means_the_last_turn_stopped_on_length(hotpot_store, tiny_lm):
    """OpenRLHF's ``truncated`` is ``finish_reason == "length"`` of the last turn (its own
    MultiTurnAgentExecutor sets it so; ``rollout/truncated_rate`` averages it). The executor's used
    to mean "the context is full", so a final turn cut at its token cap was not flagged."""
    _, tok = tiny_lm
    g = EnvGraph(hotpot_store, max_turns=1, max_new_tokens=16)
    turns = ["<think> a </think><search> Scott Derrickson ## Ed Wood </search>", "<think> " + "hmm " * 80]
    result, engine = run(g, turns, tok)
    assert engine.outputs and len(engine.outputs[-1]) == 16  # the final turn hit its cap
    assert result["truncated"] is True
    logs = result["extra_logs"]
    assert logs["truncated"].item() == 1.0 and logs["overflowed"].item() == 0.0
    # a context overflow is its own count: the observation cut inside <information>, the last
    # turn itself stopped on its stop string (not truncated, as OpenRLHF means it)
    room = prompt_len(tok) + len(tok(turns[0], add_special_tokens=False)["input_ids"]) + 12
    cut, _ = run(EnvGraph(hotpot_store, max_turns=1, max_new_tokens=64), turns[:1], tok, max_length=room)
    assert cut["truncated"] is False and cut["extra_logs"]["overflowed"].item() == 1.0
    assert len(cut["observation_tokens"]) == room


def test_an_episode_cut_before_its_answer_earns_no_shaped_terms(hotpot_store, tiny_lm):
    """Context overflow used to pay: the observation cut, no answer, and 0.80 for a comparison
    question (decomposition 0.45 + search count 0.35) against 0.10 for a wrong answer."""
    _, tok = tiny_lm
    g = EnvGraph(hotpot_store, max_turns=2, max_new_tokens=64)
    turns = ["<think> a </think><search> Scott Derrickson ## Ed Wood </search>"]
    room = prompt_len(tok) + len(tok(turns[0], add_special_tokens=False)["input_ids"]) + 12
    cut, _ = run(g, turns, tok, max_length=room)
    shaped, _ = run(g, turns, tok, max_length=room, cut_episodes="shaped")
    assert cut["extra_logs"]["overflowed"].item() == 1.0
    assert shaped["reward"] == pytest.approx(0.8) and cut["reward"] == 0.0
    assert cut["extra_logs"]["reward_decomposition"].item() == 0.0
    # an answered episode is scored as always
    done, _ = run(g, [*turns, "<think> b </think><answer> yes </answer>"], tok)
    assert done["reward"] == pytest.approx(1.8)


class MissingLogprobEngine(ScriptedEngine):
    """Returns log-prob entries that lack the sampled token (each keyed by another id), as a
    misconfigured engine (or a logprobs mode OpenRLHF does not expect) can."""

    async def generate(self, token_ids, sampling_params, multi_modal_data=None):
        out = await super().generate(token_ids, sampling_params, multi_modal_data)
        first = out.outputs[0]
        first.logprobs = [
            {t + 1: lp}
            for t, entry in zip(first.token_ids, first.logprobs, strict=True)
            for lp in entry.values()
        ]
        return out


def test_a_missing_log_prob_raises_instead_of_borrowing_another_tokens(hotpot_store, tiny_lm):
    """The executor used to take the entry's first value (another token's log-prob) where
    OpenRLHF's own executor raises: a silent bias in the importance ratio."""
    _, tok = tiny_lm
    g = EnvGraph(hotpot_store, max_turns=1, max_new_tokens=32)
    rec = train_record(COMPARISON)
    engine = MissingLogprobEngine(tok, ["<think> a </think><answer> yes </answer>"])
    with pytest.raises(ValueError, match=r"lack the sampled token \d+"):
        asyncio.run(
            EpisodeExecutor(g).execute(
                rec["prompt"], rec["label"], SamplingParamsStandIn(logprobs=1), 4096, tok, engine
            )
        )


def test_a_long_prompt_is_cut_to_leave_room_for_a_whole_turn(hotpot_store, tiny_lm):
    """A prompt over max_length was cut to max_length - 1 tokens, leaving the first turn one token;
    OpenRLHF's executors keep ``max_length - max_tokens``. The cut counts as an overflow."""
    _, tok = tiny_lm
    g = EnvGraph(hotpot_store, max_turns=1, max_new_tokens=24)
    max_length = prompt_len(tok) - 10
    result, engine = run(g, ["<think> a </think><answer> yes </answer>"], tok, max_length=max_length)
    (start, end), *_ = result["action_ranges"]
    assert start == max_length - 24 and end - start == len(engine.outputs[0]) > 1
    assert result["extra_logs"]["overflowed"].item() == 1.0
    # a turn cap at least the whole context cannot be honoured: the prompt keeps all but one token
    tiny, _ = run(g, ["<answer> yes </answer>"], tok, max_length=24)
    assert tiny["action_ranges"][0][0] == 23


def test_eval_records_are_scored_by_exact_match_so_openrlhf_pass1_is_em(hotpot_store, tiny_lm):
    """OpenRLHF's eval_<datasource>_pass1 is the mean reward of eval samples: with the shaped
    reward it ran up to 1.8. Records made with ``make-train-data --eval`` are scored by EM alone."""
    from types import SimpleNamespace

    import torch
    from engines import openrlhf_function, openrlhf_prompt_dataset

    _, tok = tiny_lm
    g = EnvGraph(hotpot_store, max_turns=2, max_new_tokens=64)
    search = "<think> a </think><search> Scott Derrickson ## Ed Wood </search>"
    records = [
        train_record(COMPARISON, score="em"),
        train_record({**COMPARISON, "id": "c2", "question": "Q2"}, score="em"),
    ]
    right, _ = run(g, [search, "<think> b </think><answer> yes </answer>"], tok, record=records[0])
    wrong, _ = run(g, [search, "<think> b </think><answer> no </answer>"], tok, record=records[1])
    assert (right["reward"], right["scores"]) == (1.0, 1.0) and (wrong["reward"], wrong["scores"]) == (
        0.0,
        0.0,
    )
    assert right["extra_logs"]["reward_decomposition"].item() == pytest.approx(0.45)  # still logged
    trained, _ = run(g, [search, "<think> b </think><answer> yes </answer>"], tok)  # a training record
    assert trained["reward"] == pytest.approx(1.8)
    dataset = openrlhf_prompt_dataset(records, tokenizer=None)
    batches = [dataset.collate_fn([dataset[i]]) for i in range(len(dataset))]
    samples = [
        SimpleNamespace(prompts=[r["prompt"]], rewards=r["reward"], response_length=None, truncated=torch.tensor(r["truncated"]))
        for r in (right, wrong)
    ]  # fmt: skip
    logs = openrlhf_function("trainer/ppo_trainer.py", "compute_eval_metrics")(batches, samples, 1)
    assert logs["eval_default_pass1"] == 0.5 and logs["eval_default_truncated_rate"] == 0.0  # EM: 1 of 2


def test_health_signals_per_step_split_by_question_class(hotpot_store, tiny_lm):
    """Each sample's flags, averaged by OpenRLHF's own step aggregation (sample-weighted means of
    ``extra_logs``), give the decomposition rate and searches per question class and the shares
    of truncated, overflowed, invalid and unanswered episodes."""
    _, tok = tiny_lm
    g = EnvGraph(hotpot_store, max_turns=2, max_new_tokens=64)
    bridge = {"id": "b1", "question": "Where was the director of Doctor Strange born", "golden_answers": ["Denver"],
              "metadata": {"type": "bridge"}}  # fmt: skip
    split = "<think> a </think><search> Scott Derrickson ## Ed Wood </search>"
    answer = "<think> b </think><answer> yes </answer>"
    episodes = [
        run(g, [split, answer], tok)[0],  # parallelizable, decomposed, answered
        run(g, ["<think> a </think><search> Scott Derrickson </search>", answer], tok)[0],  # not decomposed
        run(g, ["no tags at all", answer], tok, record=train_record(bridge))[
            0
        ],  # sequential, an invalid turn
        run(
            g,
            ["<think> a </think><search> Doctor Strange director </search>", "<think> " + "x " * 90],
            tok,
            record=train_record(bridge),
        )[0],  # fmt: skip  # sequential, final turn cut at its cap: unanswered
    ]
    keys = ["class_parallel", "decomposed_parallel", "searches_parallel", "class_sequential", "decomposed_sequential",
            "searches_sequential", "truncated", "overflowed", "invalid", "unanswered"]  # fmt: skip
    # OpenRLHF's train loop: one value per sample, weighted by samples (ppo_actor.ppo_train)
    mean = {k: sum(e["extra_logs"][k].item() for e in episodes) / len(episodes) for k in keys}
    assert mean["decomposed_parallel"] / mean["class_parallel"] == 0.5  # 1 of the 2 parallelizable
    assert mean["searches_parallel"] / mean["class_parallel"] == 1.0
    assert mean["decomposed_sequential"] == 0.0 and mean["class_sequential"] == 0.5
    assert mean["searches_sequential"] / mean["class_sequential"] == 0.5  # 0 and 1 searches
    # the cut final turn is invalid too (it neither answers nor may search)
    assert mean["invalid"] == 0.5 and mean["unanswered"] == 0.25
    assert mean["truncated"] == 0.25 and mean["overflowed"] == 0.0


def test_the_first_prompt_is_checked_against_the_official_reward(hotpot_store, tiny_lm):
    """The executor repeats train --check's cheap prompt checks on the prompts OpenRLHF really
    hands it: a Llama-3 chat template (no ChatML marker) or Search-R1's prompt under the official
    reward stop the run at its first episode instead of training on a wrong reward."""
    from parallelsearch.rl.preflight import PreflightError

    _, tok = tiny_lm
    g = EnvGraph(
        hotpot_store, reward_mode="official", prompt_template="official", max_turns=1, max_new_tokens=32
    )
    turn = ["<think> a </think><answer> yes </answer>"]
    llama = "<|start_header_id|>user<|end_header_id|>\n\n{}<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
    raw = train_record(COMPARISON, template="official")
    with pytest.raises(PreflightError, match="lack"):
        run(g, turn, tok, record={**raw, "prompt": llama.format(raw["prompt"])})
    search_r1 = train_record(COMPARISON, template="search_r1", tokenizer=tok)
    with pytest.raises(PreflightError, match="hold 1 <search>"):
        run(g, turn, tok, record=search_r1)
    result, _ = run(g, turn, tok, record=train_record(COMPARISON, template="official", tokenizer=tok))
    # the official score of a right answer without a search: outcome 1, nothing for decomposition or count
    assert result["reward"] == pytest.approx(1.0) and result["extra_logs"]["format_valid"].item() == 1.0
