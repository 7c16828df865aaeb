"""The floor that benchmarks/dag_resolvers.py reports for passage-based resolvers: a dependent
hop counts only when every parent's gold answer occurs in the parent's top passages."""

from __future__ import annotations

import sys

from conftest import ROOT

from parallelsearch.stores import Passage

sys.path.insert(0, str(ROOT / "benchmarks"))
from dag_resolvers import passage_bound  # noqa: E402


def _p(title: str, text: str) -> Passage:
    return Passage(id=title, title=title, text=text, score=0.5)


def _question(qid: str, answer: str) -> dict:
    hops = [
        {
            "question": "county of Van Hook Township",
            "answer": answer,
            "title": "Van Hook Township",
            "refs": [],
        },
        {"question": "#1 >> capital", "answer": "Stanley", "title": "Mountrail County", "refs": [1]},
    ]
    return {"id": f"2hop_{qid}", "metadata": {"hops": hops}}


def test_a_hop_counts_only_where_the_parents_answer_is_in_its_top_passages():
    questions = [_question("a", "Mountrail County"), _question("b", "Mountrail County")]
    results = {
        # a: the answer is in the parent's second passage; the gold chain found the hop's paragraph
        (0, 0): [_p("Van Hook Lake", "a lake"), _p("Van Hook Township", "in mountrail county, North Dakota")],
        (0, 1): [_p("Mountrail County", "seat Stanley")],
        # b: the answer is in no passage of the parent, though the hop's paragraph was found
        (1, 0): [_p("Sanish", "a ghost town")],
        (1, 1): [_p("Mountrail County", "seat Stanley")],
    }
    top1 = passage_bound("musique", questions, results, 1)
    top3 = passage_bound("musique", questions, results, 3)
    assert top1["answer_in_parents"]["all"] == 0.0 and top1["hop_recall"]["all"] == 0.0
    assert top3["answer_in_parents"]["all"] == 0.5 and top3["hop_recall"]["2hop"] == 0.5


def test_a_hop_whose_paragraph_was_missed_does_not_count_even_with_the_answer_present():
    questions = [_question("a", "Mountrail County")]
    results = {
        (0, 0): [_p("Van Hook Township", "Mountrail County, North Dakota")],
        (0, 1): [_p("Stanley, North Dakota", "a city")],
    }
    bound = passage_bound("musique", questions, results, 3)
    assert bound["answer_in_parents"]["all"] == 1.0 and bound["hop_recall"]["all"] == 0.0
