"""The CPU smoke's parts that need no engine, in the main tier: the action-mask check against the
engine's recorded turns (and that a mask off by one fails it), the sync check's shifted mask, the smoke's
config (the paper preset's reward and chat templating by default, ``--set`` on top, the keys it owns
refused), OpenRLHF's chat templating of the prompts, the teacher's turns, the held-out split, the goals
of ``learning.json`` and its plot."""

from __future__ import annotations

import json

import pytest

from parallelsearch.rl.rewards import REWARD_PARTS
from parallelsearch.training.checks import EngineTurn, check_action_mask, logprob_gap, shifted

pytest.importorskip("openrlhf", reason="the smoke's config is checked with OpenRLHF's own parser")


@pytest.fixture(scope="module")
def tok():
    from parallelsearch.rl.tiny_model import build_tokenizer

    return build_tokenizer()


def _episode(tok):
    """A prompt, two engine turns and one observation between them, as ids; the engine's turns."""
    enc = lambda text: tok(text, add_special_tokens=False)["input_ids"]  # noqa: E731
    prompt = enc(
        "<|im_start|>user\nQuestion: Were Scott Derrickson and Ed Wood American?<|im_end|>\n<|im_start|>assistant\n"
    )
    turn1 = enc("<think> two people </think>\n<search> Scott Derrickson ## Ed Wood </search>\n\n")
    obs = enc(
        '<information>Doc 1(Title: "Ed Wood") Edward Davis Wood Jr. was an American filmmaker.</information>\n\n'
    )
    turn2 = enc("<think> both are American </think>\n<answer> yes </answer>")
    seq = prompt + turn1 + obs + turn2
    turns = [
        EngineTurn(
            prompt, turn1, "<think> two people </think>\n<search> Scott Derrickson ## Ed Wood </search>"
        ),
        EngineTurn(prompt + turn1 + obs, turn2, "<think> both are American </think>\n<answer> yes </answer>"),
    ]
    ranges = [(len(prompt), len(prompt) + len(turn1)), (len(seq) - len(turn2), len(seq))]
    return seq, turns, ranges, len(obs)


def _openrlhf_mask(seq, ranges):
    """OpenRLHF's action mask of ``ranges`` (SamplesGenerator: 1 on the ranges, then the first entry dropped)."""
    mask = [0] * len(seq)
    for a, b in ranges:
        mask[a:b] = [1] * (min(b, len(seq)) - a)  # cut at the sequence's end, as its tensor slice is
    return mask[1:]


def test_the_mask_check_passes_the_engines_turns_and_finds_the_observation(tok):
    seq, turns, ranges, n_obs = _episode(tok)
    check = check_action_mask(seq, _openrlhf_mask(seq, ranges), turns, tok)
    assert check.ok, check.reason
    assert check.spans == ranges and check.observation_tokens == n_obs
    # the stop token's tail (">\n\n" decodes past the engine's cut text) still reads as the turn
    assert tok.decode(turns[0].ids).endswith("</search>\n\n") and not turns[0].text.endswith("\n")


def test_a_turn_cut_inside_a_character_reads_as_the_engines_text(tok):
    """At a length cut vLLM's text holds back an unfinished UTF-8 character; decoded whole it is U+FFFD."""
    enc = lambda text: tok(text, add_special_tokens=False)["input_ids"]  # noqa: E731
    prompt, ids = enc("<think>"), enc(" Серге́й")
    cut = next(k for k in range(1, len(ids)) if tok.decode(ids[:k]).endswith("\ufffd"))
    decoded = tok.decode(ids[:cut], clean_up_tokenization_spaces=False)
    held_back = decoded.rstrip("\ufffd")
    turn = EngineTurn(prompt, ids[:cut], held_back)
    seq = prompt + ids[:cut]
    assert check_action_mask(seq, _openrlhf_mask(seq, [(len(prompt), len(seq))]), [turn], tok).ok
    other = EngineTurn(prompt, ids[:cut], held_back + "x")
    assert not check_action_mask(seq, _openrlhf_mask(seq, [(len(prompt), len(seq))]), [other], tok).ok


def test_a_stop_string_ending_inside_a_token_reads_as_the_engines_text(tok):
    """vLLM cuts the text at a stop string, not at its token: a turn whose last token is ``>.`` ends its
    text at ``</search>``, and the check reads the ``.`` as that token's rest; a character the text
    lacks before the last token still fails."""
    enc = lambda text: tok(text, add_special_tokens=False)["input_ids"]  # noqa: E731
    prompt, ids = enc("<think>"), enc("<search> Ed Wood </search>.")
    assert tok.decode(ids[-1:]) == ">."  # the stop string's last character and a period, one token
    seq = prompt + ids
    mask = _openrlhf_mask(seq, [(len(prompt), len(seq))])
    assert check_action_mask(seq, mask, [EngineTurn(prompt, ids, "<search> Ed Wood </search>")], tok).ok
    short = EngineTurn(prompt, ids, "<search> Ed Wood </sear")  # the rest is more than the last token
    reason = check_action_mask(seq, mask, [short], tok).reason
    assert "do not decode to the engine's text" in reason, reason


@pytest.mark.parametrize("shift", [1, -1])
def test_a_mask_off_by_one_fails_the_check(tok, shift):
    seq, turns, ranges, _ = _episode(tok)
    moved = [(a + shift, b + shift) for a, b in ranges]
    check = check_action_mask(seq, _openrlhf_mask(seq, moved), turns, tok)
    assert not check.ok
    assert "observation token" in check.reason or "differs" in check.reason


def test_the_check_reads_the_engines_record_not_the_ranges(tok):
    """Ids or text that are not what the engine returned fail, whatever the mask says."""
    seq, turns, ranges, _ = _episode(tok)
    mask = _openrlhf_mask(seq, ranges)
    other = [EngineTurn(turns[0].prompt_ids, turns[0].ids, "<think> something else </think>"), turns[1]]
    reason = check_action_mask(seq, mask, other, tok).reason
    assert "do not decode to the engine's text" in reason and "engine '<think> something" in reason, reason
    swapped = list(seq)
    swapped[ranges[1][0]] = (swapped[ranges[1][0]] + 1) % len(tok)
    assert "not the ids the engine returned" in check_action_mask(swapped, mask, turns, tok).reason
    assert not check_action_mask(seq, mask, [], tok).ok
    assert "expected one fewer" in check_action_mask(seq, [0, *mask], turns, tok).reason


def test_the_sync_gap_and_its_shifted_mask():
    torch = pytest.importorskip("torch")
    # the actor scores every position; the engine reports log-probs of its own tokens only (0 elsewhere)
    actor = torch.tensor([[-0.5, -1.0, -2.0, -3.0, -4.0]])
    engine = torch.tensor([[0.0, -1.01, -2.01, -3.01, 0.0]])
    mask = torch.tensor([[0, 1, 1, 1, 0]])
    assert logprob_gap(actor, engine, mask) == pytest.approx(0.01, abs=1e-6)
    assert shifted(mask).tolist() == [[0, 0, 1, 1, 1]]
    assert logprob_gap(actor, engine, shifted(mask)) > 0.5
    with pytest.raises(ValueError, match="no action tokens"):
        logprob_gap(actor, engine, torch.zeros_like(mask))


def test_the_smoke_config_is_the_paper_preset_sized_for_a_cpu(tmp_path):
    from parallelsearch.training.setup import SMOKE_TRAIN, openrlhf_train_args, smoke_config

    cfg = smoke_config(tmp_path / "m", tmp_path / "p.jsonl", "http://127.0.0.1:1/retrieve")
    assert cfg.agent.reward.mode == "paper-strict" and cfg.apply_chat_template and not cfg.agent.constrained
    assert cfg.agent.graph_config.prompt_template == "official" and cfg.algorithm == "group_norm"
    args = openrlhf_train_args(cfg)  # OpenRLHF's own parser and checks accept it
    assert args.algo.advantage.estimator == "group_norm" and args.rollout.n_samples_per_prompt == 4
    # the anchor's coefficient reaches OpenRLHF's parsed flags as the smoke sets it
    kl = args.algo.kl
    assert kl.use_loss and kl.estimator == "k3" and kl.init_coef == SMOKE_TRAIN["init_kl_coef"] > 0
    mine = smoke_config(
        tmp_path / "m",
        tmp_path / "p.jsonl",
        "http://127.0.0.1:1/retrieve",
        ["agent.reward.mode=paper", "agent.constrained=true", "apply_chat_template=false", "actor_lr=1e-4"],
    )
    assert mine.agent.reward.mode == "paper" and mine.agent.constrained and not mine.apply_chat_template
    assert openrlhf_train_args(mine).actor.adam.lr == 1e-4
    with pytest.raises(ValueError, match="--set model: the smoke trains the model it builds"):
        smoke_config(tmp_path / "m", tmp_path / "p.jsonl", "http://x/retrieve", ["model=Qwen/Qwen2.5-7B"])
    with pytest.raises(ValueError, match="algorithm=gae: GAE needs a critic"):
        smoke_config(tmp_path / "m", tmp_path / "p.jsonl", "http://x/retrieve", ["algorithm=gae"])


def test_prompts_are_chat_templated_by_openrlhf_as_the_preset_says(tok, tmp_path):
    from parallelsearch.training.setup import prompt_records, smoke_config

    q = {
        "id": "1",
        "question": "Were A and B both born in 1900",
        "golden_answers": ["yes"],
        "metadata": {"type": "comparison"},
    }
    cfg = smoke_config(tmp_path / "m", tmp_path / "p.jsonl", "http://127.0.0.1:1/retrieve")
    (rec,) = prompt_records([q], cfg, tok)
    assert rec["prompt"].startswith("<|im_start|>user\n") and rec["prompt"].endswith(
        "<|im_start|>assistant\n"
    )
    assert "Question: Were A and B both born in 1900?" in rec["prompt"] and rec["type"] == "parallel"
    assert json.loads(rec["label"])["golden_answers"] == ["yes"]
    raw = smoke_config(
        tmp_path / "m", tmp_path / "p.jsonl", "http://x/retrieve", ["apply_chat_template=false"]
    )
    assert not prompt_records([q], raw, tok)[0]["prompt"].startswith("<|im_start|>")


def test_the_teacher_writes_both_plans():
    from parallelsearch.training.teacher import teacher_turns

    q = {
        "question": "Were A and B both?",
        "golden_answers": ["yes"],
        "metadata": {"supporting_titles": ["A", "B", "A"]},
    }
    parallel = teacher_turns(q, "parallel")
    single = teacher_turns(q, "single")
    assert parallel[0].endswith("<search> A ## B </search>") and single[0].endswith("<search> A </search>")
    # the same thinking before either plan: the plan is decided where the search is written
    assert parallel[0].split("<search>")[0] == single[0].split("<search>")[0]
    assert parallel[1] == single[1] and parallel[1].endswith("<answer> yes </answer>")
    with pytest.raises(ValueError, match="plan 'dag'"):
        teacher_turns(q, "dag")


def test_the_heldout_split_never_trains_on_a_heldout_question():
    from parallelsearch.data import load_questions
    from parallelsearch.demo_data import HOTPOTQA_SAMPLE
    from parallelsearch.training.learning_loop import LearnSettings, split_questions

    qs = load_questions(HOTPOTQA_SAMPLE)
    train, held = split_questions(qs, 24)  # the default pool: the parallelizable (comparison) questions
    assert len(held) == 24 and len(train) == 70
    assert {q["metadata"]["type"] for q in train + held} == {"comparison"}
    assert not {q["id"] for q in train} & {q["id"] for q in held}
    train, held = split_questions(qs, 48, "all")  # both classes, held out alike
    assert len(held) == 48 and len(train) == 150 and not {q["id"] for q in train} & {q["id"] for q in held}
    types = [q["metadata"]["type"] for q in held]
    assert types.count("comparison") == types.count("bridge") == 24
    with pytest.raises(
        ValueError, match="--smoke-heldout 30: the pool 'parallel' of these 200 questions holds 24"
    ):
        split_questions(qs, 30)
    with pytest.raises(ValueError, match=r"--smoke-steps must be >= 0 \(0: the warm start alone\), got -1"):
        LearnSettings(steps=-1).check()
    with pytest.raises(ValueError, match="--smoke-heldout must be >= 1, got 0"):
        LearnSettings(heldout=0).check()
    with pytest.raises(ValueError, match=r"--smoke-sft-steps must be >= 0 \(0: no warm start\), got -2"):
        LearnSettings(sft_steps=-2).check()
    assert LearnSettings(steps=0, sft_steps=0).check().steps == 0
    with pytest.raises(ValueError, match="pool 'bridge'"):
        LearnSettings(pool="bridge").check()
    with pytest.raises(ValueError, match="eval_temperature must be >= 0, got -1"):
        LearnSettings(eval_temperature=-1).check()


def test_held_out_episodes_sample_at_the_evaluation_temperature(monkeypatch):
    """A real model is evaluated greedily, as the paper evaluates, one episode a question; training
    episodes keep the rollouts' temperature."""
    import asyncio
    from types import SimpleNamespace

    from parallelsearch.training import learning_loop
    from parallelsearch.training.learning_loop import REAL_MODEL_LEARN, LearningRun, LearnSettings

    asked = []

    async def sampled(actor, records, seeds, *, temperature, **kwargs):
        asked.append(temperature)
        return []

    monkeypatch.setattr(learning_loop, "rollouts", sampled)
    args = SimpleNamespace(
        data=SimpleNamespace(max_len=512), rollout=SimpleNamespace(temperature=1.0, top_p=1.0)
    )
    trainer = SimpleNamespace(args=args, tokenizer=None, samples=lambda results: [])
    settings = LearnSettings(**REAL_MODEL_LEARN)
    run = LearningRun(None, trainer, [], [], settings)
    asyncio.run(run.rollout([], [], temperature=settings.eval_temperature))
    asyncio.run(run.rollout([], []))
    assert asked == [0.0, 1.0] and settings.heldout_samples == 1


def _evaluation(mean, stderr):
    from parallelsearch.training.rollouts import Evaluation

    return Evaluation(mean=mean, stderr=stderr, episodes=96, terms={"reward": mean})


def test_learning_json_goals_and_plot(tmp_path):
    from parallelsearch.training.learning_loop import LearnSettings, LearnState, SyncCheck
    from parallelsearch.training.plot import learning_svg
    from parallelsearch.training.report import learning_record, summary_lines

    state = LearnState(
        steps=[{"step": 1, "reward": 0.3}, {"step": 2, "reward": 0.5}],
        control_steps=[{"step": 1, "reward": 0.3}, {"step": 2, "reward": 0.28}],
        evaluations={
            "before": _evaluation(0.30, 0.04),
            "after": _evaluation(0.60, 0.03),
            "control_before": _evaluation(0.30, 0.04),
            "control_after": _evaluation(0.32, 0.04),
        },
        sync_checks={"before": SyncCheck(3e-7, 0.4, 96), "after": SyncCheck(5e-7, 0.5, 96)},
        unsynced=SyncCheck(1.2, 1.3, 8),
        mask_checked=10,
    )
    record = learning_record(state, LearnSettings(), {"reward_mode": "official"})
    assert record["heldout_rise"] == pytest.approx(0.30) and record["heldout_stderr"] == pytest.approx(0.05)
    assert record["control_rise"] == pytest.approx(0.02) and record["logprob_gap"] == 5e-7
    assert all(record["goals"].values()), record["goals"]
    state.evaluations["control_after"] = _evaluation(0.40, 0.04)  # rises by 1.8 s.e.: not a control
    state.mask_failures.append("turn 1: tokens 3..9 are not the ids the engine returned")
    state.unsynced = SyncCheck(0.01, 0.3, 8)  # a check that cannot tell a missing sync
    failed = learning_record(state, LearnSettings(), {})["goals"]
    assert [k for k, ok in failed.items() if not ok] == [
        "every action mask matches the engine's turns",
        "an actor the engine was not synced with fails the sync check (> 0.05)",
        "control moves < 1 s.e. either way",
    ]
    assert any(
        line.startswith("goal NOT met: control moves")
        for line in summary_lines(learning_record(state, LearnSettings(), {}))
    )
    state.evaluations["control_after"] = _evaluation(0.20, 0.04)  # falls by 1.8 s.e.: not flat either
    assert not learning_record(state, LearnSettings(), {})["goals"]["control moves < 1 s.e. either way"]
    svg = learning_svg(record)
    assert svg.startswith("<svg") and svg.count("<polyline") == 8 and "held-out, control" in svg


def test_under_constrained_decoding_the_sync_goals_are_not_claimed():
    """The engine samples from the grammar-masked distribution: no sync check runs, none is claimed met."""
    from parallelsearch.training.learning_loop import LearnSettings, LearnState
    from parallelsearch.training.report import learning_record, summary_lines

    state = LearnState(
        steps=[{"step": 1, "reward": 0.3}],
        evaluations={"before": _evaluation(0.30, 0.04), "after": _evaluation(0.60, 0.03)},
        mask_checked=4,
    )
    record = learning_record(state, LearnSettings(control=False, sync_check=False), {})
    assert record["logprob_gap"] is None and record["logprob_gap_shifted_mask"] is None
    assert not [goal for goal in record["goals"] if "sync" in goal] and all(record["goals"].values())
    assert "weight sync: not checked (constrained decoding)" in summary_lines(record)


def test_the_gateway_smoke_scores_the_record_and_its_teacher_writes_tool_calls(tmp_path):
    """``--set agent.mode=gateway``: the record's reward and room for a turn of two calls, unless
    ``--set`` says otherwise; the teacher's turns are what the chat agent's model writes."""
    from parallelsearch.rl.gateway.messages import read_reply
    from parallelsearch.training.setup import smoke_config
    from parallelsearch.training.teacher import teacher_turns

    cfg = smoke_config(
        tmp_path / "m", tmp_path / "p.jsonl", "http://127.0.0.1:1/retrieve", ["agent.mode=gateway"]
    )
    assert (
        cfg.agent.mode == "gateway"
        and cfg.agent.reward.mode == "paper-strict"
        and cfg.max_new_tokens_per_turn == 160
    )
    mine = smoke_config(
        tmp_path / "m",
        tmp_path / "p.jsonl",
        "http://x/retrieve",
        ["agent.mode=gateway", "max_new_tokens_per_turn=90"],
    )
    assert mine.max_new_tokens_per_turn == 90
    q = {
        "question": "Were A and B both?",
        "golden_answers": ["yes"],
        "metadata": {"supporting_titles": ["A", 'B "b"']},
    }
    search, answer = teacher_turns(q, "parallel", form="tools")
    calls = read_reply(search, "<|im_end|>", 0)["tool_calls"]
    assert [json.loads(c["function"]["arguments"]) for c in calls] == [{"query": "A"}, {"query": 'B "b"'}]
    assert (
        answer == "yes<|im_end|>"
        and len(read_reply(teacher_turns(q, "single", "tools")[0], "<|im_end|>", 0)["tool_calls"]) == 1
    )


def test_learning_json_names_the_mode_and_the_token_evidence():
    from parallelsearch.training.checks import EngineTurn, token_mismatches
    from parallelsearch.training.learning_loop import LearnSettings, LearnState
    from parallelsearch.training.report import learning_record

    turns = [EngineTurn([1, 2], [3, 4], ""), EngineTurn([1, 2, 3, 4, 9], [5], "")]
    assert token_mismatches([1, 2, 3, 4, 9, 5], turns) == 0
    assert token_mismatches([1, 2, 3, 7, 9, 5], turns) == 2  # one token, seen by both turns
    evals = {"before": _evaluation(0.3, 0.04), "after": _evaluation(0.5, 0.04)}
    state = LearnState(evaluations=evals, mask_checked=12, token_mismatches=0, gateway={"gateway_forks": 1.0})
    record = learning_record(state, LearnSettings(), {"mode": "gateway"})
    assert (record["mode"], record["episodes"], record["token_mismatches"]) == ("gateway", 12, 0)
    assert (record["forks"], record["retokenized"]) == (1, 0)
    assert learning_record(state, LearnSettings(), {})["mode"] == "text"


def test_a_failed_closed_sample_is_checked_for_carrying_no_loss_not_for_the_forks_ids(tok):
    """A forked episode's later turns come from another render: its ids differ from the engine's
    calls by design, so it counts no token mismatch, and fails its check only if it carries more
    loss than the one token kept for OpenRLHF's means."""
    from parallelsearch.rl.episode import decode_tokens
    from parallelsearch.training.checks import EngineTurn, check_sample

    first = EngineTurn([1, 2], [3, 4], decode_tokens(tok, [3, 4]))
    turns = [first, EngineTurn([7, 7, 7], [5], "")]  # turn 2 generated from a fork's render
    seq = [1, 2, 3, 4, 9]
    assert check_sample(seq, [0, 0, 0, 1], turns, tok, failed_closed=True) == (None, 0)
    reason, _ = check_sample(seq, [0, 1, 1, 0], turns, tok, failed_closed=True)
    assert reason == "a failed-closed episode has 2 tokens in its action mask (at most 1)"
    reason, bad = check_sample(seq, [0, 1, 1, 0], turns, tok)  # the same sample, not failed closed
    assert "does not start with" in reason and bad == 4


def test_the_gateway_smoke_model_has_a_tools_format_tokenizer():
    """In gateway mode the tiny model's tokenizer knows the tools format as a chat model's does:
    the call markers are single tokens and a call costs about what a tag search does."""
    from parallelsearch.rl.tiny_model import TOOL_TOKENS, TOOLS_CHAT_TEMPLATE, build_tokenizer

    plain, tools = build_tokenizer(), build_tokenizer(tools=True)
    call = '<tool_call>\n{"name": "search", "arguments": {"query": "Ed Wood"}}\n</tool_call>'
    assert tools.chat_template == TOOLS_CHAT_TEMPLATE
    assert all(len(tools(t, add_special_tokens=False)["input_ids"]) == 1 for t in TOOL_TOKENS)
    n_tools = len(tools(call, add_special_tokens=False)["input_ids"])
    assert n_tools * 2 < len(plain(call, add_special_tokens=False)["input_ids"])
    assert tools.decode(tools(call, add_special_tokens=False)["input_ids"], skip_special_tokens=True) == call
    # the text environment's tokenizer is unchanged by the option
    assert len(plain) == len(build_tokenizer()) and plain.get_vocab() == build_tokenizer().get_vocab()


def test_the_control_shuffles_rewards_within_the_step_or_each_prompts_group():
    """The control gives each group's own rewards to random episodes of the group (the run's advantages,
    no signal); ``step`` mixes all the step's rewards, so nearly every group gets advantages."""
    import random
    from types import SimpleNamespace

    import torch

    from parallelsearch.training.learning_loop import LearnSettings, shuffle_rewards

    assert LearnSettings().control_shuffle == "step"
    with pytest.raises(ValueError, match="control_shuffle 'prompt': group or step"):
        LearnSettings(control_shuffle="prompt").check()
    rewards = [0.2, 0.2, 0.2, 0.2, 0.0, 1.0, 1.8, 1.8]  # an all-equal group, then a mixed one
    samples = [SimpleNamespace(rewards=torch.tensor([r])) for r in rewards]
    shuffle_rewards(samples, random.Random(3), 4)
    got = [float(s.rewards) for s in samples]
    assert got[:4] == pytest.approx([0.2] * 4) and sorted(got[4:]) == pytest.approx([0.0, 1.0, 1.8, 1.8])
    mixed = [SimpleNamespace(rewards=torch.tensor([r])) for r in rewards]
    shuffle_rewards(mixed, random.Random(3))
    assert sorted(float(s.rewards) for s in mixed) == pytest.approx(sorted(rewards))
    assert [float(s.rewards) for s in mixed[:4]] != pytest.approx([0.2] * 4)


def _eval_episode(reward, *, paid, decomposed, valid=1.0, cut=False, answered=True):
    from parallelsearch.training.rollouts import TERMS

    logs = {
        **dict.fromkeys(TERMS, 0.0),
        **{f"reward_{part}": 0.0 for part in REWARD_PARTS},
        "reward_decomposition": 0.45 if paid else 0.0,
        "format_valid": valid,
        "decomposed": float(decomposed),
        "search_rounds": 1.0,
        "truncated": float(cut),
        "overflowed": 0.0,
        "answered": float(answered),
    }
    return {"reward": reward, "extra_logs": logs}


def test_paid_decomposition_must_equal_the_measured_and_validity_must_hold():
    """The reward loophole the goals catch: episodes paid the decomposition bonus without a split
    (the official reward's unclosed search), and a run that trades format validity for it."""
    from parallelsearch.training.learning_loop import LearnSettings, LearnState
    from parallelsearch.training.report import learning_record, summary_lines
    from parallelsearch.training.rollouts import evaluation

    honest = [
        _eval_episode(0.8, paid=True, decomposed=True),
        _eval_episode(0.3, paid=False, decomposed=False),
    ] * 4
    # a decomposed episode cut before its answer is paid nothing: not a mismatch
    honest.append(_eval_episode(-0.35, paid=False, decomposed=True, cut=True, answered=False))
    loophole = [_eval_episode(0.45, paid=True, decomposed=False, valid=0.0)] * 6 + honest[:3]
    classes = lambda rs: ["parallel"] * len(rs)  # noqa: E731
    before, after = evaluation(honest, classes(honest)), evaluation(loophole, classes(loophole))
    assert before.decomposition_mismatches == 0 and after.decomposition_mismatches == 6
    assert before.by_class["parallel"]["paid_decomposition"] == pytest.approx(4 / 9, abs=1e-4)
    assert before.by_class["parallel"]["measured_decomposition"] == pytest.approx(4 / 9, abs=1e-4)
    state = LearnState(steps=[{"step": 1, "reward": 0.3}], evaluations={"before": before, "after": after})
    record = learning_record(state, LearnSettings(control=False, sync_check=False), {})
    failed = [k for k, ok in record["goals"].items() if not ok and not k.startswith("heldout rises")]
    assert failed == [
        "paid decomposition == measured decomposition (held-out, before and after)",
        "format validity does not fall (by more than 1 s.e.)",
    ]
    assert any(
        line.startswith("held-out parallel (9 episodes): decomposed 0.56 -> ") and "(paid 0.44 -> " in line
        for line in summary_lines(record)
    )
    state.evaluations["after"] = evaluation(honest, classes(honest))
    goals = learning_record(state, LearnSettings(control=False, sync_check=False), {})["goals"]
    assert goals["paid decomposition == measured decomposition (held-out, before and after)"]
    assert goals["format validity does not fall (by more than 1 s.e.)"]


def test_a_real_models_run_is_judged_by_exact_match_not_the_shaped_reward():
    """With ``--model`` the rise that counts is held-out exact match (the outcome term alone): a run whose
    shaped reward rose by format and decomposition bonuses while no more answers were right fails."""
    from parallelsearch.training.learning_loop import LearnSettings, LearnState
    from parallelsearch.training.report import learning_record, summary_lines
    from parallelsearch.training.rollouts import evaluation

    def episodes(right: int, wrong: int) -> list[dict]:
        out = []
        for i in range(right + wrong):
            ep = _eval_episode(1.0 if i < right else 0.45, paid=True, decomposed=True)
            ep["extra_logs"]["reward_outcome"] = 1.0 if i < right else 0.0
            out.append(ep)
        return out

    parallel = lambda rs: ["parallel"] * len(rs)  # noqa: E731
    before, bonus_only = episodes(10, 30), episodes(10, 30)
    for ep in bonus_only:
        ep["reward"] += 0.3  # shaped reward up, answers unchanged
    real, tiny = (
        LearnSettings(model="smollm2-135m", control=False, sync_check=False),
        LearnSettings(control=False),
    )
    state = LearnState(evaluations={"before": evaluation(before, parallel(before))})
    state.evaluations["after"] = evaluation(bonus_only, parallel(bonus_only))
    goals = learning_record(state, real, {})["goals"]
    assert goals["held-out exact match rises >= 3 s.e."] is False
    assert learning_record(state, tiny, {})["goals"]["heldout rises >= 3 s.e."] is True
    better = episodes(30, 10)
    state.evaluations["after"] = evaluation(better, parallel(better))
    record = learning_record(state, real, {})
    assert (
        record["heldout_em_rise"] == pytest.approx(0.5)
        and record["goals"]["held-out exact match rises >= 3 s.e."]
    )
    assert "held-out exact match: before 0.250 +- 0.069, after 0.750 +- 0.069" in summary_lines(record)


def test_the_warm_start_alone_is_judged_on_its_turns_and_its_exact_match_over_zero_shot():
    """``--smoke-steps 0`` with ``--model``: zero-shot and after-SFT evaluations only; the SFT goals read
    the share of held-out turns that are valid actions (an episode of valid turns cut before its answer
    still counts its turns) and the exact-match rise over zero-shot in standard errors; no RL goal is
    claimed or failed, and the plot draws the one held-out point."""
    from parallelsearch.training.learning_loop import LearnSettings, LearnState
    from parallelsearch.training.plot import learning_svg
    from parallelsearch.training.report import learning_record, summary_lines
    from parallelsearch.training.rollouts import evaluation

    def episodes(right: int, wrong: int, turns: int, valid: int) -> list[dict]:
        out = []
        for i in range(right + wrong):
            ep = _eval_episode(1.0 if i < right else 0.0, paid=False, decomposed=False)
            ep["extra_logs"].update(reward_outcome=1.0 if i < right else 0.0, turns=turns, valid_turns=valid)
            out.append(ep)
        return out

    zero_shot, tuned = episodes(1, 39, 1, 0), episodes(14, 26, 2, 2)
    tuned[0]["extra_logs"]["valid_turns"] = 1.0  # 79 of 80 turns valid
    classes = ["parallel"] * 40
    state = LearnState(evaluations={"zero_shot": evaluation(zero_shot, classes)})
    state.evaluations["before"] = evaluation(tuned, classes)
    assert state.evaluations["before"].valid_turn_share == pytest.approx(79 / 80, abs=1e-4)
    settings = LearnSettings(model="smollm2-135m", steps=0, control=False, sync_check=False)
    record = learning_record(state, settings, {})
    assert "heldout_rise" not in record and "heldout_em_rise" not in record
    assert record["warm_start_em_rise"] == pytest.approx(13 / 40)
    assert record["goals"] == {
        "after SFT: format valid on >= 95% of held-out turns": True,
        "after SFT: exact match above zero-shot by >= 3 s.e.": True,
        "every action mask matches the engine's turns": True,
        "0 token mismatches": True,
    }
    lines = summary_lines(record)
    assert "held-out turns in the format: zero_shot 0%, before 99%" in lines
    assert any(line.startswith("held-out parallel (40 episodes): ") for line in lines)
    assert learning_svg(record).count("<circle") == 1
    state.evaluations["before"] = evaluation(episodes(4, 36, 2, 1), classes)  # half the turns, 3 more right
    goals = learning_record(state, settings, {})["goals"]
    assert [k for k, ok in goals.items() if not ok] == [
        "after SFT: format valid on >= 95% of held-out turns",
        "after SFT: exact match above zero-shot by >= 3 s.e.",
    ]


@pytest.mark.vllm  # OpenRLHF's actor needs peft: the vLLM tier's environment has it
def test_the_kl_anchor_is_the_warm_start_and_its_loss_is_openrlhfs(tmp_path, tiny_model_dir):
    """``use_kl_loss`` with ``init_kl_coef``: the reference is the warm start's weights, frozen while
    the actor moves, and the loss is OpenRLHF's k3 KL to it times the coefficient (0 at the start)."""
    from types import SimpleNamespace

    import torch
    from transformers import AutoTokenizer

    from parallelsearch.training.setup import openrlhf_train_args, smoke_config
    from parallelsearch.training.trainer import CpuTrainer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    sets = ["use_kl_loss=true", "kl_estimator=k3", "init_kl_coef=0.5"]
    cfg = smoke_config(tiny_model_dir, tmp_path / "p.jsonl", "http://127.0.0.1:1/retrieve", sets)
    trainer = CpuTrainer(tiny_model_dir, openrlhf_train_args(cfg), tok)
    start = trainer.weights()
    trainer.anchor(start)
    seq = torch.randint(5, 100, (1, 12))
    ones = torch.ones_like(seq)
    mask = torch.ones(1, 11, dtype=torch.bool)
    base = trainer.reference(seq, mask, attention_mask=ones)
    batch = SimpleNamespace(base_action_log_probs=base, action_log_probs=base, action_mask=mask)
    assert float(trainer.kl_loss(trainer.log_probs(batch_of(seq, ones, mask)), batch)) == pytest.approx(0.0)
    with torch.no_grad():
        for p in trainer.actor.parameters():
            p.add_(0.05 * torch.randn_like(p))
    moved = trainer.log_probs(batch_of(seq, ones, mask), grad=True)
    assert torch.equal(trainer.reference(seq, mask, attention_mask=ones), base)  # the anchor did not move
    loss = trainer.kl_loss(moved, batch)
    assert float(loss) > 0 and loss.requires_grad
    off = smoke_config(
        tiny_model_dir, tmp_path / "p.jsonl", "http://127.0.0.1:1/retrieve", ["init_kl_coef=0"]
    )
    plain = CpuTrainer(tiny_model_dir, openrlhf_train_args(off), tok)
    plain.anchor(start)
    assert plain.reference is None and plain.kl_loss(moved, batch) == 0.0


def batch_of(seq, attention, mask):
    from types import SimpleNamespace

    return SimpleNamespace(sequences=seq, attention_mask=attention, action_mask=mask)
