"""Wide questions: dates read as intervals, entities and their own paragraphs from the real 2Wiki
file, the gold answer computed from the triples, deterministic generation, and the oracle
planning one sub-query per entity in one search."""

from __future__ import annotations

import asyncio
import json

import pytest
from conftest import RAW, needs_data

from parallelsearch.data import load_questions
from parallelsearch.data.wide_questions import (
    RELATIONS,
    collect_entities,
    generate,
    main,
    parse_date,
)

TWOWIKI = RAW / "2wikimultihopqa" / "hahahajw_Agentic-RAG" / "2WikiMultihopQA_500_benchmark.json"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("22 January 1865", ((1865, 1, 22), (1865, 1, 22))),
        ("February 20, 1877", ((1877, 2, 20), (1877, 2, 20))),
        ("Sept. 3 1901", ((1901, 9, 3), (1901, 9, 3))),
        ("1st March 1900", ((1900, 3, 1), (1900, 3, 1))),
        ("May 1897", ((1897, 5, 1), (1897, 5, 31))),
        ("February 1900", ((1900, 2, 1), (1900, 2, 28))),  # 1900 is not a leap year
        ("1948", ((1948, 1, 1), (1948, 12, 31))),
        ("1948-07-04", ((1948, 7, 4), (1948, 7, 4))),
        ("44 BC", ((-44, 1, 1), (-44, 12, 31))),
        ("15 March 44 BC", ((-44, 3, 15), (-44, 3, 15))),
    ],
)
def test_dates_are_read_as_intervals(text, expected):
    assert parse_date(text) == expected


@pytest.mark.parametrize(
    "text", ["c. 1450", "1890s", "30 February 1900", "Smarch 3, 1900", "unknown", "", "1948-1950", "0"]
)
def test_what_is_not_a_certain_date_is_refused(text):
    assert parse_date(text) is None


def test_an_unreadable_value_is_dropped_and_counted_and_a_missing_paragraph_too(tmp_path):
    recs = [
        {
            "question": "q",
            "answer": "a",
            "context": [["Ann Lee", ["Ann Lee was a painter."]], ["Bo Ek", ["Bo Ek was a poet."]]],
            "evidences": [
                ["Ann Lee", "date of birth", "c. 1450"],
                ["Bo Ek", "date of birth", "3 May 1901"],
                ["Cy Oz", "date of birth", "1902"],
                ["Bo Ek", "director", "Ann Lee"],
            ],
        }
    ]
    f = tmp_path / "2wiki.json"
    f.write_text(json.dumps(recs))
    entities, report = collect_entities([f])
    assert [e.title for e in entities["date of birth"]] == ["Bo Ek"]
    born = report.as_dict()["date of birth"]
    assert born["triples"] == 3 and born["kept"] == 1
    assert born["dropped_unparsed"] == 1 and born["unparsed_examples"] == ["c. 1450"]
    assert born["dropped_no_paragraph"] == 1


@needs_data
def test_real_entities_carry_their_own_paragraph_and_a_certain_gold_answer():
    entities, report = collect_entities([TWOWIKI])
    assert all(len(entities[rel]) >= 64 for rel in RELATIONS)  # every size up to 64 can be asked
    wide = generate(entities, sizes=(1, 2, 8, 64), per_size=2, seed=3)
    assert len(wide.questions) == 3 * 4 * 2
    corpus_titles = {p.title for p in wide.passages.values()}
    for q in wide.questions:
        meta = q["metadata"]
        assert meta["synthetic"] is True and meta["split"] == "parallel"
        titles = meta["supporting_titles"]
        assert len(titles) == len(set(titles)) == meta["n_entities"]
        assert set(titles) <= corpus_titles
        if meta["order"] == "lookup":
            assert q["golden_answers"] == [meta["evidences"][0][2]]
            continue
        spans = {t: parse_date(v) for t, _, v in meta["evidences"]}
        pick = min if meta["order"] == "first" else max
        winner = pick(spans, key=lambda t: spans[t][0] if pick is min else spans[t][1])
        assert q["golden_answers"][0] == winner
        others = [s for t, s in spans.items() if t != winner]
        if pick is min:
            assert all(spans[winner][1] < s[0] for s in others)
        else:
            assert all(spans[winner][0] > s[1] for s in others)


@needs_data
def test_generation_is_deterministic_with_a_seed():
    entities, _ = collect_entities([TWOWIKI])
    a = generate(entities, sizes=(4, 16), per_size=3, seed=7).questions
    b = generate(entities, sizes=(4, 16), per_size=3, seed=7).questions
    c = generate(entities, sizes=(4, 16), per_size=3, seed=8).questions
    assert a == b
    assert [q["question"] for q in a] != [q["question"] for q in c]


@needs_data
def test_the_cli_writes_files_the_readers_load_and_the_oracle_searches_every_entity_at_once(tmp_path, capsys):
    from parallelsearch.agents.policies import OraclePolicy
    from parallelsearch.agents.policies.base import TurnRequest

    assert main([str(TWOWIKI), "--out", str(tmp_path), "--sizes", "32", "--per-size", "1"]) == 0
    printed = capsys.readouterr().out
    assert '"dropped_unparsed"' in printed and "wrote 3 questions" in printed
    questions = load_questions(tmp_path / "wide_questions.jsonl")
    assert len(questions) == 3
    corpus = [json.loads(line) for line in (tmp_path / "wide_questions_corpus.jsonl").open()]
    assert all(set(row) == {"id", "contents"} for row in corpus)
    q = questions[0]
    meta = {**q["metadata"], "golden_answers": q["golden_answers"]}
    turn = asyncio.run(
        OraclePolicy().agenerate(
            TurnRequest(transcript="", question=q["question"], metadata=meta, max_subqueries=64)
        )
    )
    search = turn.text.split("<search>")[1].split("</search>")[0]
    assert [s.strip() for s in search.split("##")] == meta["supporting_titles"]
