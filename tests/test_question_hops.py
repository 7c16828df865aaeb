"""The question readers keep each question's decomposition as ``metadata.hops`` (real files)."""

from __future__ import annotations

from collections import Counter

from conftest import RAW, needs_data

from parallelsearch.data import prepare

pytestmark = needs_data

MUSIQUE = RAW / "musique/AdelWang_MIGRES/musique.json"
MUSIQUE_FLASHRAG = RAW / "musique/ninehills_deepsearch-rl/musique_dev_200.jsonl"
WIKI = RAW / "2wikimultihopqa/hahahajw_Agentic-RAG/2WikiMultihopQA_500_benchmark.json"
HOTPOT = RAW / "hotpotqa/hahahajw_Agentic-RAG/HotpotQA_500_benchmark.json"


def _questions(path):
    return next(iter(prepare([path]).values())).questions


def test_musique_hops_keep_references_answers_and_supporting_titles():
    qs = _questions(MUSIQUE)
    first = qs[0]["metadata"]
    assert first["hops"] == [
        {
            "question": "Van Hook Township >> located in the administrative territorial entity",
            "answer": "Mountrail County",
            "title": "Van Hook Township, Mountrail County, North Dakota",
            "refs": [],
        },
        {
            "question": "#1 >> capital",
            "answer": "Stanley",
            "title": "Mountrail County Courthouse",
            "refs": [1],
        },
    ]
    # the existing field is unchanged: question and answer only
    assert first["question_decomposition"] == [
        {"question": h["question"], "answer": h["answer"]} for h in first["hops"]
    ]
    shapes = Counter(len(q["metadata"]["hops"]) for q in qs)
    assert shapes == {2: 145, 3: 32, 4: 23}  # 3hop1 + 3hop2; 4hop1 + 4hop2 + 4hop3
    assert all(h["title"] for q in qs for h in q["metadata"]["hops"])
    # every reference names an earlier hop
    assert all(0 < k <= i for q in qs for i, h in enumerate(q["metadata"]["hops"]) for k in h["refs"])
    # a branching question: two independent hops, then one naming both
    assert any([h["refs"] for h in q["metadata"]["hops"]] == [[], [], [1, 2]] for q in qs)


def test_musique_flashrag_copy_takes_titles_from_support_paragraphs():
    qs = _questions(MUSIQUE_FLASHRAG)
    hops = qs[0]["metadata"]["hops"]
    assert [h["title"] for h in hops] == ["Green (Steve Hillage album)", "Miquette Giraudy"]
    assert hops[1] == {
        "question": "#1 >> spouse",
        "answer": "Miquette Giraudy",
        "title": "Miquette Giraudy",
        "refs": [1],
    }


def test_2wiki_evidence_triples_become_chains():
    qs = _questions(WIKI)
    comp = qs[0]["metadata"]
    assert comp["type"] == "compositional"
    assert comp["hops"] == [
        {"question": "Les films du losange founded by", "answer": "Éric Rohmer", "title": "Les films du losange", "refs": []},
        {"question": "#1 employer", "answer": "Cahiers du cinéma", "title": "Éric Rohmer", "refs": [1]},
    ]  # fmt: skip
    bc = next(q["metadata"] for q in qs if q["metadata"]["type"] == "bridge_comparison")
    # two chains: film -> director -> nationality; "Steno (director)" is the entity "Steno"
    assert [h["refs"] for h in bc["hops"]] == [[], [], [1], [2]]
    assert (
        bc["hops"][2]["title"] == "Steno (director)"
        and bc["hops"][2]["question"] == "#1 country of citizenship"
    )
    by_type = Counter(q["metadata"]["type"] for q in qs if any(h["refs"] for h in q["metadata"]["hops"]))
    assert (
        by_type["compositional"] >= 200 and by_type["inference"] >= 45 and by_type["bridge_comparison"] >= 100
    )
    assert by_type["comparison"] == 0
    assert all(h["title"] for q in qs for h in q["metadata"]["hops"])


def test_hotpot_bridge_questions_name_the_bridge_title():
    qs = _questions(HOTPOT)
    bridges = [q["metadata"] for q in qs if q["metadata"]["type"] == "bridge"]
    assert bridges and all(m["bridge_title"] == m["supporting_titles"][1] for m in bridges)
    assert not any("bridge_title" in q["metadata"] for q in qs if q["metadata"]["type"] == "comparison")
    assert not any("hops" in q["metadata"] for q in qs)
