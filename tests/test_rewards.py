"""Rewards and metrics against hand-computed cases (paper mode and the official code's numbers)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parallelsearch.agents.protocol import INVALID_FEEDBACK, OFFICIAL_TEMPLATE, render_prompt
from parallelsearch.rl import cover_match, exact_match, f1_score, normalize_answer, score_trajectory
from parallelsearch.rl.rewards import question_class, state_machine

PROMPT = render_prompt("Who is older, Claude Monet or Camille Pissarro?", "paper")
CHAT = (
    "<|im_start|>user\n"
    + OFFICIAL_TEMPLATE.format(question="Who is older?")
    + "<|im_end|>\n<|im_start|>assistant\n"
)
INFO = "\n\n<information>Doc 1(Title: Monet) born 1840</information>\n\n"
PAR = {"golden_answers": ["Camille Pissarro"], "type": "comparison"}
SEQ = {"golden_answers": ["Camille Pissarro"], "type": "bridge"}
SINGLE = {"golden_answers": ["Camille Pissarro"]}

ONE_SPLIT_SEARCH = (
    "<think> two people </think><search> Monet birth ## Pissarro birth </search>"
    + INFO
    + "<think> 1830 < 1840 </think><answer> Camille Pissarro </answer>"
)
TWO_SEARCHES = (
    "<think> a </think><search> Monet birth </search>"
    + INFO
    + "<think> b </think><search> Pissarro birth </search>"
    + INFO
    + "<think> c </think><answer> Camille Pissarro </answer>"
)


def test_metrics_hand_computed():
    assert normalize_answer("The  Eiffel-Tower!") == "eiffeltower"
    assert exact_match("the Beatles", ["Beatles"]) == 1.0
    assert exact_match("Beatles band", ["Beatles"]) == 0.0
    assert exact_match(None, ["x"]) == 0.0
    assert cover_match("it was the Beatles band", ["beatles"]) == 1.0
    assert cover_match("not", ["no"]) == 0.0  # word-bounded
    # f1: pred "new york city" vs gold "new york": p=2/3, r=1 -> 0.8
    assert f1_score("new york city", ["Boston", "new york"]) == pytest.approx(0.8)
    assert f1_score("yes", ["no"]) == 0.0 and f1_score("no", ["no"]) == 1.0


@pytest.mark.parametrize(
    ("label", "cls"),
    [
        (PAR, "parallel"),
        ({"golden_answers": ["x"], "type": "comparison_query"}, "parallel"),
        (SEQ, "sequential"),
        ({"golden_answers": ["x"], "type": "inference"}, "sequential"),
        (SINGLE, "single"),
        ({"golden_answers": ["x"], "type": "na"}, "single"),
        ({"golden_answers": ["x"], "split": "parallel", "type": "whatever"}, "parallel"),
    ],
)
def test_question_class(label, cls):
    assert question_class(label) == cls


def test_paper_parallel_decomposed_correct():
    r = score_trajectory(PROMPT + ONE_SPLIT_SEARCH, PAR)
    # outcome 1 + decomposition alpha*lambda_d = 0.45 + search count 0.35*(1-|1-1|) + format 0
    assert (r.outcome, r.decomposition, r.search_count, r.format) == pytest.approx((1, 0.45, 0.35, 0))
    assert r.total == pytest.approx(1.8)
    assert r.decomposed and r.format_valid and r.searches == 1 and r.subqueries_per_search == [2]
    assert r.answer == "Camille Pissarro"


def test_paper_sequential_two_searches_wrong_answer():
    text = PROMPT + TWO_SEARCHES.replace("<answer> Camille Pissarro", "<answer> Monet")
    r = score_trajectory(text, SEQ)
    # outcome 0, not decomposed on a non-parallel question -> lambda_d, 2 searches -> lambda_s, valid+wrong -> lambda_f
    assert (r.outcome, r.decomposition, r.search_count, r.format) == pytest.approx((0, 0.15, 0.35, 0.1))
    assert r.total == pytest.approx(0.6)


def test_paper_counts_only_the_policy_turns():
    # the prompt's example tags and the information blocks do not count; one search on a single-hop question
    text = (
        PROMPT
        + "<think> x </think><search> Pissarro </search>"
        + INFO
        + "<think> y </think><answer> no idea </answer>"
    )
    r = score_trajectory(text, SINGLE)
    assert r.searches == 1 and r.answer == "no idea"
    assert r.search_count == pytest.approx(0.35)
    # three searches on a parallel question: 0.35 * (1 - 2) = -0.35
    three = (
        PROMPT
        + ("<think> t </think><search> a </search>" + INFO) * 3
        + "<think> t </think><answer> x </answer>"
    )
    assert score_trajectory(three, PAR).search_count == pytest.approx(-0.35)


def test_paper_invalid_action_and_right_answer():
    text = (
        PROMPT + "I just guess." + INVALID_FEEDBACK + "<think> t </think><answer> Camille Pissarro </answer>"
    )
    r = score_trajectory(text, SINGLE)
    assert not r.format_valid and r.correct
    # 1 - lambda_f + lambda_d (not decomposed, not parallel) + search count 0.35*(1-|0-1|)=0
    assert r.total == pytest.approx(1 - 0.1 + 0.15 + 0)


def test_paper_weights_override_and_unknown_weight():
    r = score_trajectory(PROMPT + ONE_SPLIT_SEARCH, PAR, lambda_d=0.2, alpha=2)
    assert r.decomposition == pytest.approx(0.4)
    with pytest.raises(ValueError, match="unknown reward weight 'beta'"):
        score_trajectory(PROMPT, PAR, beta=1)
    with pytest.raises(ValueError, match="unknown reward mode"):
        score_trajectory(PROMPT, PAR, mode="nope")
    with pytest.raises(ValueError, match="golden_answers"):
        score_trajectory(PROMPT, {"type": "comparison"})


def test_official_quirks_hand_computed():
    # official defaults: structure_format 0.1, final_format 0, count 0.35, comp 0.15
    text = CHAT + ONE_SPLIT_SEARCH
    r = score_trajectory(text, PAR, mode="official")
    # <search> appears 3 times (2 in the prompt) -> count reward 0.35; first real search has ## -> 0.45
    assert r.searches == 3 and r.decomposed and r.format_valid
    assert r.total == pytest.approx(1 + 0.45 + 0.35)
    # no assistant marker -> invalid format: 1 - 0.1 + 0.45 + 0.35
    assert score_trajectory(
        CHAT.replace("<|im_start|>assistant", "") + ONE_SPLIT_SEARCH, PAR, mode="official"
    ).total == (pytest.approx(1.7))
    # only the FIRST real search is checked for '##'
    late = (
        CHAT
        + "<think> a </think><search> q </search>"
        + INFO
        + "<think> b </think><search> x ## y </search>"
        + INFO
    )
    late += "<think> c </think><answer> Camille Pissarro </answer>"
    r2 = score_trajectory(late, PAR, mode="official")
    assert not r2.decomposed and r2.decomposition == 0.0
    # 4 <search> on a comparison question: 0.35 - |4-3|*0.35 = 0
    assert r2.search_count == pytest.approx(0.0) and r2.total == pytest.approx(1.0)
    # a single <answer> in the whole text (prompt without its example) is not extracted
    bare = "<|im_start|>assistant\n<think> t </think><answer> Camille Pissarro </answer>"
    r3 = score_trajectory(bare, SINGLE, mode="official")
    assert r3.answer is None and r3.outcome == 0.0
    # sequential question: count 0.35 - |min(4,4)-4|*0.35 with two real searches
    r4 = score_trajectory(CHAT + TWO_SEARCHES, SEQ, mode="official")
    assert r4.search_count == pytest.approx(0.35) and r4.decomposition == pytest.approx(0.15)
    assert r4.total == pytest.approx(1.5)
    # comparison_query is NOT parallel in the official code (type must equal 'comparison')
    r5 = score_trajectory(
        text, {"golden_answers": ["Camille Pissarro"], "type": "comparison_query"}, mode="official"
    )
    assert r5.question_class == "sequential" and r5.decomposition == 0.0


def test_state_machine_cases():
    assert state_machine("<think> a </think><answer> b </answer>") == (True, "valid")
    assert not state_machine("<think> a </think> stray <answer> b </answer>")[0]
    assert not state_machine("<answer> b </answer>")[0]
    assert not state_machine("<think> a </think><search> q </search><answer> b </answer>")[0]
    assert "unbalanced" in state_machine("<think> a <answer> b </answer>")[1]


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300), st.sampled_from(["paper", "official"]), st.sampled_from([PAR, SEQ, SINGLE]))
def test_score_never_raises_and_parts_sum(text, mode, label):
    r = score_trajectory(text, label, mode=mode)
    assert r.total == pytest.approx(r.outcome + r.decomposition + r.search_count + r.format)
