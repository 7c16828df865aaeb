"""The default training reward (``paper-strict``) pays decomposition only for a split the record shows
searched: the loophole episodes the official reward pays 0.45 for earn nothing, driven through the
real environment (the graph, its parser and its invalid-action feedback) with a function searcher."""

from __future__ import annotations

import asyncio

import pytest

from parallelsearch.agents.searchers.adapters import FunctionSearcher
from parallelsearch.graphs.record import Episode
from parallelsearch.rl.agent_config import RewardConfig
from parallelsearch.rl.env import EnvGraph
from parallelsearch.rl.rewards import score_trajectory
from parallelsearch.rl.train_config import paper_preset

PAR = {"golden_answers": ["Pissarro"], "type": "comparison"}
SEQ = {"golden_answers": ["Pissarro"], "type": "bridge"}
QUESTION = "Who is older, Claude Monet or Camille Pissarro?"
ANSWER = "<think> done </think><answer> Monet </answer>"
NINE = " ## ".join(f"part {i}" for i in range(9))
#: the loophole episodes: (graph, the policy's turns)
LOOPHOLES = {
    # unclosed: the environment rejects it; the official regex closes it at the feedback's </search>
    "unclosed search": ("parallel", ["<think> a </think><search> Monet born ## Pissarro born ", ANSWER]),
    "A ##": ("parallel", ["<think> a </think><search> Monet born ## </search>", ANSWER]),
    "A ## A": ("parallel", ["<think> a </think><search> Monet born ## Monet born </search>", ANSWER]),
    "A ## a (case)": ("parallel", ["<think> a </think><search> Monet born ## monet  BORN </search>", ANSWER]),
    "nine sub-queries (rejected)": ("parallel", [f"<think> a </think><search> {NINE} </search>", ANSWER]),
    "#k chain (one at a time)": (
        "parallel",
        ["<think> a </think><search> Monet ## birth of #1 </search>", ANSWER],
    ),
    "A ## B unsplit (sequential graph)": (
        "sequential",
        ["<think> a </think><search> Monet born ## Pissarro born </search>", ANSWER],
    ),
}
SPLIT = ["<think> a </think><search> Monet born ## Pissarro born </search>", ANSWER]


def _search(query: str) -> list[dict[str, str]]:
    return [{"title": "Painters", "text": f"what the corpus says of {query}"}]


def drive(graph: str, turns: list[str], label: dict, mode: str) -> tuple[Episode, str, EnvGraph]:
    """One episode of ``turns`` in the real environment; (record, decoded text with the chat marker, env)."""
    env_graph = EnvGraph(FunctionSearcher(_search), graph=graph, reward_mode=mode, prompt_template="official")

    async def run() -> tuple[Episode, str]:
        env = env_graph.new_episode()
        prompt = await env.reset(QUESTION, label)
        for turn in turns:
            if not env.done:
                await env.step(turn)
        chat = "<|im_start|>user\n" + prompt + "<|im_end|>\n<|im_start|>assistant\n"
        return Episode.from_state(env.last_output), chat + env.transcript[len(prompt) :]

    episode, text = asyncio.run(run())
    return episode, text, env_graph


def test_new_runs_score_with_paper_strict():
    assert RewardConfig().mode == "paper-strict" == paper_preset().agent.reward.mode


@pytest.mark.parametrize("case", sorted(LOOPHOLES))
def test_loophole_episodes_earn_no_decomposition_bonus(case):
    graph, turns = LOOPHOLES[case]
    episode, text, env_graph = drive(graph, turns, PAR, RewardConfig().mode)
    strict = env_graph.score(episode, PAR, text)
    assert strict.mode == "paper-strict"
    assert strict.decomposition == 0.0 and not strict.decomposed, case
    # the official code's numbers (kept for parity) pay the bonus for every one but the #k chain
    official = score_trajectory(text, PAR, "official")
    if "#k" not in case:
        assert official.decomposition == pytest.approx(0.45), case


def test_a_split_that_was_searched_is_paid():
    episode, text, env_graph = drive("parallel", SPLIT, PAR, "paper-strict")
    r = env_graph.score(episode, PAR, text)
    assert r.decomposed and r.decomposition == pytest.approx(0.45) and r.subqueries_per_search == [2]
    # a parallelizable split on a sequential (bridge) question costs the not-split bonus
    assert env_graph.score(episode, SEQ, text).decomposition == 0.0


def test_not_splitting_is_paid_only_after_a_search_ran():
    """Strict: an episode of invalid turns on a non-parallel question earns nothing for not splitting
    (``paper`` pays it lambda_d); one unsplit search that ran earns lambda_d."""
    invalid = ["<think> a </think> no tags here", ANSWER]
    episode, text, env_graph = drive("parallel", invalid, SEQ, "paper-strict")
    assert env_graph.score(episode, SEQ, text).decomposition == 0.0
    paper = drive("parallel", invalid, SEQ, "paper")
    assert paper[2].score(paper[0], SEQ, paper[1]).decomposition == pytest.approx(0.15)
    one = ["<think> a </think><search> Pissarro born </search>", ANSWER]
    episode, text, env_graph = drive("parallel", one, SEQ, "paper-strict")
    assert env_graph.score(episode, SEQ, text).decomposition == pytest.approx(0.15)


def test_a_transcript_read_back_is_scored_from_its_parsed_searches():
    """Without observation records (a saved transcript), the parsed sub-queries stand in."""
    _, text, _ = drive("parallel", SPLIT, PAR, "paper-strict")
    assert score_trajectory(text, PAR, "paper-strict").decomposition == pytest.approx(0.45)
    _, text, _ = drive(*LOOPHOLES["A ## A"], PAR, "paper-strict")
    assert score_trajectory(text, PAR, "paper-strict").decomposition == 0.0
