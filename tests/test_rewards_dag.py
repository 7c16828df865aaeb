"""The ``dag`` reward option against hand-computed cases: outcome EM, decomposition credit for a
plan whose stages match the question's hop depth, search count over stages, format as a gate."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parallelsearch.agents.protocol import render_prompt
from parallelsearch.rl import score_trajectory
from parallelsearch.rl.rewards import MODES, hop_depth

PROMPT = render_prompt("Which city is the seat of the county where Van Hook Township is?", "dag")
INFO = "\n\n<information>Doc 1(Title: Mountrail County) its seat is Stanley</information>\n\n"
CHAIN = {"golden_answers": ["Stanley"], "type": "compositional", "hops": [{"refs": []}, {"refs": [1]}]}
PAIR = {"golden_answers": ["Stanley"], "type": "comparison", "hops": [{"refs": []}, {"refs": []}]}
BRIDGE_COMPARISON = {"golden_answers": ["Stanley"], "type": "bridge_comparison",
                     "hops": [{"refs": []}, {"refs": []}, {"refs": [1]}, {"refs": [2]}]}  # fmt: skip


def episode(*searches: str, answer: str = "Stanley") -> str:
    turns = "".join(f"<think> s </think><search> {s} </search>{INFO}" for s in searches)
    return PROMPT + turns + f"<think> a </think><answer> {answer} </answer>"


def parts(text: str, label: dict) -> tuple[float, float, float, float, float]:
    r = score_trajectory(text, label, "dag", prompt=PROMPT)
    return tuple(round(x, 4) for x in (r.total, r.outcome, r.decomposition, r.search_count, r.format))


def test_hop_depth_counts_dependency_levels():
    assert hop_depth(CHAIN) == (2, 2) and hop_depth(PAIR) == (2, 1) and hop_depth(BRIDGE_COMPARISON) == (4, 2)
    assert hop_depth({"metadata": {"hops": [{"refs": []}, {"refs": [1]}, {"refs": [2]}]}}) == (3, 3)
    assert hop_depth({"hops": [[], [5], [1]]}) == (3, 2)  # a reference to a later hop is ignored
    assert hop_depth({"golden_answers": ["x"]}) == (0, 0) and "dag" in MODES


def test_a_chain_planned_in_one_search_gets_the_decomposition_credit():
    # 1 + alpha * lambda_d (0.45) + lambda_s * (1 - |2 stages - depth 2|) (0.35)
    one = episode("county of Van Hook Township ## seat of #1")
    assert parts(one, CHAIN) == (1.8, 1.0, 0.45, 0.35, 0.0)
    # hop by hop: the same stages (search count), no plan of two stages (no credit)
    assert parts(episode("county of Van Hook Township", "seat of Mountrail County"), CHAIN) == (
        1.35,
        1,
        0,
        0.35,
        0,
    )
    # both hops in one stage without #k: one stage for a depth of two
    assert parts(episode("county of Van Hook Township ## seat of the county"), CHAIN) == (1.0, 1, 0, 0, 0)
    # a wrong answer in a valid format keeps lambda_f, as in the paper mode
    assert parts(episode("county of Van Hook Township ## seat of #1", answer="Paris"), CHAIN) == (
        0.9,
        0,
        0.45,
        0.35,
        0.1,
    )
    # independent hops: one stage of two sub-queries is the plan; two chains compared: two stages
    assert parts(episode("a ## b"), PAIR) == (1.8, 1, 0.45, 0.35, 0)
    assert parts(episode("a ## b ## #1 birth ## #2 birth"), BRIDGE_COMPARISON) == (1.8, 1, 0.45, 0.35, 0)
    assert parts(episode("a ## b", "c birth ## d birth"), BRIDGE_COMPARISON) == (1.35, 1, 0, 0.35, 0)


def test_an_invalid_plan_or_format_is_a_gate_to_zero():
    for bad in ("a ## seat of #2", "a ## seat of #3", "#2 x ## b"):  # itself, out of range, later
        r = score_trajectory(episode(bad), CHAIN, "dag", prompt=PROMPT)
        assert (
            r.total == 0.0 and r.correct and not r.format_valid and "invalid #k reference" in r.format_reason
        )
    stray = episode("county of Van Hook Township ## seat of #1").replace("<answer>", "stray <answer>")
    assert parts(stray, CHAIN) == (0.0, 1.0, 0.0, 0.0, -1.0)


@pytest.mark.parametrize(
    "label",
    [{"golden_answers": ["Stanley"], "type": t} for t in ("comparison", "bridge", "na")],
)
@pytest.mark.parametrize("searches", [("a ## b",), ("a", "b"), ("a",)])
def test_without_hops_or_k_a_valid_episode_scores_as_in_the_paper_mode(label, searches):
    text = episode(*searches)
    assert parts(text, label) == tuple(
        round(x, 4)
        for x in (lambda r: (r.total, r.outcome, r.decomposition, r.search_count, r.format))(
            score_trajectory(text, label, "paper", prompt=PROMPT)
        )
    )


def test_the_tool_call_form_scores_its_plan_from_the_record_like_the_tags():
    """The dag reward reads the plans the engine made, so a #k between tool calls counts as the
    same #k between ## pieces."""
    import asyncio

    from parallelsearch.agents.protocol import TOOL_TURN_END
    from parallelsearch.rl import EnvGraph

    def call(q: str) -> str:
        return f'<tool_call>\n{{"name": "search", "arguments": {{"query": "{q}"}}}}\n</tool_call>\n'

    def search(query: str) -> list[dict]:
        return [{"title": "Mountrail County", "text": f"{query}: its seat is Stanley"}]

    async def drive(protocol: str, turns: list[str]) -> tuple[float, ...]:
        g = EnvGraph(search, reward_mode="dag", protocol=protocol, top_k=1)
        env = g.new_episode()
        await env.reset("Which city is the seat of the county where Van Hook Township is?", CHAIN)
        for turn in turns:
            step = await env.step(turn)
        r = g.score(step.episode, CHAIN)
        return (r.total, r.decomposition, r.search_count, r.format, tuple(r.stages_per_search))

    tags = [
        "<think> s </think><search> county of Van Hook Township ## seat of #1 </search>",
        "<think> a </think><answer> Stanley </answer>",
    ]
    tools = [
        "<think> s </think>\n" + call("county of Van Hook Township") + call("seat of #1") + TOOL_TURN_END,
        "<think> a </think>\n<answer> Stanley </answer>",
    ]
    a, b = asyncio.run(drive("tags", tags)), asyncio.run(drive("tools", tools))
    assert a == b and a[0] == pytest.approx(1.8) and a[-1] == (2,)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300), st.sampled_from([CHAIN, PAIR, BRIDGE_COMPARISON, {"golden_answers": ["x"]}]))
def test_dag_mode_never_raises_and_parts_sum(text, label):
    r = score_trajectory(text, label, "dag")
    assert r.total == pytest.approx(r.outcome + r.decomposition + r.search_count + r.format)


def test_training_labels_carry_each_hops_references():
    from parallelsearch.rl.data import label_of

    hops = [
        {"question": "county of X", "answer": "Y", "title": "X", "refs": []},
        {"question": "seat of #1", "refs": [1]},
    ]
    q = {"id": "2hop__1", "golden_answers": ["Z"], "metadata": {"type": "na", "hops": hops}}
    assert label_of(q)["hops"] == [{"refs": []}, {"refs": [1]}]
    assert "hops" not in label_of({"golden_answers": ["Z"], "metadata": {"type": "comparison"}})
    assert hop_depth(label_of(q)) == (2, 2)
