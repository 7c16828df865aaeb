"""prepare-data on the real benchmark files: formats, splits, dedup, CLI."""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import RAW, needs_data

from parallelsearch.data import load_questions, prepare, split_of

pytestmark = needs_data


def test_hotpot_types_and_splits():
    ds = prepare([RAW / "hotpotqa/nakulbh_Meve-framework/hotpot_dev_distractor_v1.json"])["hotpotqa"]
    assert len(ds.questions) == 100
    q = ds.questions[0]
    assert q["question"] == "Were Scott Derrickson and Ed Wood of the same nationality?"
    assert q["golden_answers"] == ["yes"]
    assert q["metadata"]["type"] == "comparison" and q["metadata"]["split"] == "parallel"
    assert q["metadata"]["supporting_titles"] == ["Scott Derrickson", "Ed Wood"]
    assert set(ds.split_counts()) <= {"parallel", "sequential"}
    assert len(ds.passages) > 900


def test_2wiki_musique_multihoprag_metadata():
    wiki = prepare([RAW / "2wikimultihopqa/hahahajw_Agentic-RAG/2WikiMultihopQA_500_benchmark.json"])[
        "2wikimultihopqa"
    ]
    types = wiki.type_counts()
    assert set(types) == {"comparison", "bridge_comparison", "compositional", "inference"}
    comp = next(q for q in wiki.questions if q["metadata"]["type"] == "compositional")
    assert comp["metadata"]["split"] == "sequential" and comp["metadata"]["evidences"]
    bc = next(q for q in wiki.questions if q["metadata"]["type"] == "bridge_comparison")
    assert bc["metadata"]["split"] == "other"
    mus = prepare([RAW / "musique/AdelWang_MIGRES/musique.json"])["musique"]
    m = mus.questions[0]
    assert m["metadata"]["split"] == "sequential" and len(m["metadata"]["question_decomposition"]) >= 2
    assert m["metadata"]["supporting_titles"]
    mh = prepare([RAW / "multihoprag/zc277584121_search-datasets/queries.json"])["multihoprag"]
    assert len(mh.questions) == 500 and mh.split_counts()["parallel"] == 154
    assert mh.questions[0]["golden_answers"] == ["no"]


def test_dedup_across_overlapping_files_keeps_the_richer_record():
    files = [
        RAW / "hotpotqa/qa_only_chenyiqun_Agentic-RAG/hotpotqa_test_questions_and_answers.json",
        RAW / "hotpotqa/nakulbh_Meve-framework/hotpot_dev_distractor_v1.json",
        RAW / "hotpotqa/ninehills_deepsearch-rl/hotpotqa_dev_200.jsonl",
    ]
    ds = prepare(files)["hotpotqa"]
    assert len(ds.questions) == 7405
    assert ds.duplicates == 300
    q = next(q for q in ds.questions if q["question"].startswith("Were Scott Derrickson and Ed Wood"))
    assert q["metadata"]["type"] == "comparison"  # the typed copy won over the question-only copy


def test_split_table():
    assert split_of("hotpotqa", "comparison") == "parallel"
    assert split_of("hotpotqa", "bridge") == "sequential"
    assert split_of("2wikimultihopqa", "inference") == "sequential"
    assert split_of("2wikimultihopqa", "bridge_comparison") == "other"
    assert split_of("multihoprag", "comparison_query") == "parallel"
    assert split_of("nq", "na") == "single"
    assert split_of("bamboogle", "na") == "single"


def test_cli_writes_flashrag_files_and_reports_counts(tmp_path):
    out = tmp_path / "prep"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "parallelsearch.cli",
            "prepare-data",
            str(RAW / "hotpotqa/ninehills_deepsearch-rl/hotpotqa_dev_200.jsonl"),
            str(RAW / "bamboogle/GaurisankarJ_reason_over_search/test.jsonl"),
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    assert "hotpotqa: 200 questions" in r.stdout and "bamboogle: 125 questions" in r.stdout
    assert "types: bridge=" in r.stdout
    rows = [json.loads(line) for line in (out / "hotpotqa.jsonl").read_text().splitlines()]
    assert set(rows[0]) == {"id", "question", "golden_answers", "metadata"}
    corpus = [json.loads(line) for line in (out / "hotpotqa_corpus.jsonl").read_text().splitlines()]
    assert set(corpus[0]) == {"id", "contents"} and corpus[0]["contents"].startswith('"')
    assert load_questions(out / "hotpotqa.jsonl") == rows
    assert not (out / "bamboogle_corpus.jsonl").exists()


def test_unknown_dataset_is_a_clear_error(tmp_path):
    p = tmp_path / "mystery.jsonl"
    p.write_text(json.dumps({"question": "q?", "answer": "a"}) + "\n")
    r = subprocess.run(
        [sys.executable, "-m", "parallelsearch.cli", "prepare-data", str(p), "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2 and "pass --dataset" in r.stderr
