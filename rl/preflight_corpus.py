"""The corpus check of ``train --check``: the training questions' gold answers are found in what
the retriever returns for them. Questions of one corpus searched in another (NQ against a
HotpotQA-only index) train a policy whose searches never find the answer; a sample of questions
is searched with the run's top-k and the share whose passages hold a gold answer must reach a floor.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from typing import Any

from parallelsearch.data.metrics import answer_in_text
from parallelsearch.rl.agent_config import AgentConfig
from parallelsearch.rl.preflight_data import label_dict, question_key
from parallelsearch.rl.preflight_run import gold_answers

#: questions searched by the corpus check (spread evenly through the training file)
CORPUS_SAMPLE = 200
#: the least share of sampled questions whose top-k passages hold a gold answer. The question
#: alone, one search, is a lower bound of what the policy finds (it decomposes and searches
#: again): a corpus of the questions' own source passes well above it, another corpus falls near 0
CORPUS_FLOOR = 0.2
#: searches in flight at once (the retriever is shared with nothing yet, but a laptop's may be small)
CORPUS_CONCURRENCY = 8


def sample_queries(
    records: list[dict[str, Any]], input_key: str, label_key: str
) -> list[tuple[str, list[str]]]:
    """(question, gold answers) of each record that has both."""
    out = []
    for rec in records:
        question = label_dict(rec, label_key).get("question") or question_key(rec, input_key, label_key)
        gold = gold_answers(rec, label_key)
        if isinstance(question, str) and question.strip() and gold:
            out.append((question, gold))
    return out


async def _found(searcher: Any, queries: list[tuple[str, list[str]]], k: int) -> list[bool]:
    gate = asyncio.Semaphore(CORPUS_CONCURRENCY)

    async def one(question: str, gold: list[str]) -> bool:
        async with gate:
            hits = await searcher.asearch(question, k)
        return any(answer_in_text(f"{p.title} {p.text}", gold) for p in hits)

    return list(await asyncio.gather(*(one(q, g) for q, g in queries)))


def corpus_coverage(agent: AgentConfig, queries: list[tuple[str, list[str]]], k: int) -> list[bool]:
    """For each (question, gold) whether the retriever's top ``k`` for the question holds a gold answer."""

    async def run() -> list[bool]:
        return await _found(agent.make_searcher(), queries, k)

    # a thread of its own: ``train --check`` may be called inside a running event loop
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, run()).result()


def check_corpus(
    agent: AgentConfig,
    records: list[dict[str, Any]],
    input_key: str,
    label_key: str,
    *,
    floor: float = CORPUS_FLOOR,
    where: str = "the retriever",
) -> str:
    """The share of ``records`` whose question's top-k passages hold a gold answer reaches ``floor``."""
    queries = sample_queries(records, input_key, label_key)
    if not queries:
        return "not checked: corpus coverage (no record with a question and golden answers)"
    k = agent.graph_config.top_k
    found = corpus_coverage(agent, queries, k)
    share = sum(found) / len(found)
    said = f"{sum(found)} of {len(found)} sampled questions ({share:.0%}) have a gold answer in {where}'s top {k}"
    if share < floor:
        raise ValueError(
            f"corpus: only {said}, below the floor {floor:.0%}: the questions are not about this corpus (NQ "
            "against a HotpotQA-only index?), so searches rarely find the answer; index the questions' corpus "
            "(wiki-18 for NQ + HotpotQA), or train on its questions (corpus_check_floor sets the floor)"
        )
    return f"corpus: {said} (floor {floor:.0%})"
