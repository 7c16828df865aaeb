"""Corpus readers on the real benchmark files, and bad-input handling."""

from __future__ import annotations

import json

import pytest
from conftest import RAW, needs_data

from parallelsearch.stores import BadInputError, SkipReport, passage_id, read_passages, split_contents

pytestmark = needs_data

FORMATS = {
    "search-r1 corpus": ("wiki_corpus/PeterGriffinJin_Search-R1/corpus.jsonl", 10),
    "flashrag corpus": ("wiki_corpus/RUC-NLPIR_FlashRAG/sample_data.jsonl", 1000),
    "hotpot original (json array)": ("hotpotqa/hahahajw_Agentic-RAG/HotpotQA_500_benchmark.json", None),
    "hotpot original (json lines)": ("hotpotqa/AdelWang_MIGRES/hotpot.json", None),
    "hotpot hf rows": ("hotpotqa/megagonlabs_RPT/dev.jsonl", None),
    "hotpot flashrag": ("hotpotqa/ninehills_deepsearch-rl/hotpotqa_dev_200.jsonl", None),
    "2wiki original": ("2wikimultihopqa/hahahajw_Agentic-RAG/2WikiMultihopQA_500_benchmark.json", None),
    "2wiki flashrag": ("2wikimultihopqa/ninehills_deepsearch-rl/2wikimultihopqa_dev_200.jsonl", None),
    "musique original": ("musique/AdelWang_MIGRES/musique.json", None),
    "musique flashrag": ("musique/ninehills_deepsearch-rl/musique_dev_200.jsonl", None),
    "multihop-rag ground truth": ("multihoprag/zc277584121_search-datasets/ground_truth.json", None),
}


@pytest.mark.parametrize("name", list(FORMATS))
def test_every_format_yields_passages(name):
    rel, expected = FORMATS[name]
    passages = list(read_passages([RAW / rel]))
    assert passages, name
    if expected is not None:
        assert len(passages) == expected
    for p in passages[:50]:
        assert p.id == passage_id(p.title, p.text)
        assert p.text and "\x00" not in p.text
        assert p.source and p.source.startswith(str(RAW / rel))


def test_search_r1_title_is_first_line_without_quotes():
    first = next(read_passages([RAW / "wiki_corpus/PeterGriffinJin_Search-R1/corpus.jsonl"]))
    assert first.title == "Evan Morris"
    assert first.text.startswith("Evan Morris Evan L. Morris")
    assert split_contents('"A "quoted" title"\nbody') == ('A "quoted" title', "body")


def test_hotpot_sentences_join_with_single_spaces_2wiki_without_leading_space():
    hp = next(read_passages([RAW / "hotpotqa/hahahajw_Agentic-RAG/HotpotQA_500_benchmark.json"]))
    assert hp.title == "Moscow State University" and "  " not in hp.text
    wiki = next(
        read_passages([RAW / "2wikimultihopqa/hahahajw_Agentic-RAG/2WikiMultihopQA_500_benchmark.json"])
    )
    assert "engineer, software developer and entrepreneur. De Margheriti" in wiki.text


def test_same_paragraph_from_two_files_has_one_id():
    a = {p.id for p in read_passages([RAW / "hotpotqa/megagonlabs_RPT/dev.jsonl"])}
    b = {p.id for p in read_passages([RAW / "hotpotqa/ninehills_deepsearch-rl/hotpotqa_dev_200.jsonl"])}
    assert a & b, "overlapping HotpotQA samples must share passage ids"


def _write(tmp_path, name, data: bytes):
    p = tmp_path / name
    p.write_bytes(data)
    return p


def test_invalid_json_line_names_file_and_line(tmp_path):
    p = _write(tmp_path, "c.jsonl", b'{"id": "1", "contents": "\\"T\\"\\nx"}\n{not json}\n')
    with pytest.raises(BadInputError) as ei:
        list(read_passages([p]))
    assert ei.value.line == 2 and str(p) in str(ei.value) and "not valid JSON" in str(ei.value)


def test_missing_fields_names_file_and_line(tmp_path):
    p = _write(tmp_path, "c.jsonl", b'{"id": "1", "contents": "\\"T\\"\\nx"}\n\n{"id": "2", "body": "x"}\n')
    with pytest.raises(BadInputError) as ei:
        list(read_passages([p]))
    assert ei.value.line == 3 and "holds no passages" in str(ei.value)


def test_non_utf8_names_file_and_line(tmp_path):
    p = _write(
        tmp_path, "c.jsonl", b'{"id": "1", "contents": "\\"T\\"\\nx"}\n{"id": "2", "contents": "\xff\xfe"}\n'
    )
    with pytest.raises(BadInputError) as ei:
        list(read_passages([p]))
    assert ei.value.line == 2 and "UTF-8" in str(ei.value)


def test_skip_bad_reports_every_skip(tmp_path):
    good = [json.dumps({"id": str(i), "contents": f'"T{i}"\ntext {i}'}).encode() for i in range(3)]
    data = b"\n".join([good[0], b"{oops", good[1], b'{"x": 1}', b"\xff", good[2]]) + b"\n"
    p = _write(tmp_path, "c.jsonl", data)
    report = SkipReport()
    got = list(read_passages([p], skip_bad=True, report=report))
    assert [x.title for x in got] == ["T0", "T1", "T2"]
    assert report.count == 3
    assert [line for _, line, _ in report.entries] == [2, 4, 5]
    assert "skipped 3" in report.summary()


def test_bad_record_in_json_array_names_line(tmp_path):
    p = _write(tmp_path, "a.json", b'[\n  {"title": "A", "text": "a"},\n  {"title": "B"}\n]\n')
    with pytest.raises(BadInputError) as ei:
        list(read_passages([p]))
    assert ei.value.line == 3


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(BadInputError, match="no such file"):
        list(read_passages([tmp_path / "nope.jsonl"]))
