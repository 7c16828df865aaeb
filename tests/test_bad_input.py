"""Bad input to ``index`` (text inputs): a ``file:line: reason`` and exit
code 2, never a traceback; ``--skip-bad`` skips and counts every kind in every layout;
directories are expanded or refused by name; a failed run leaves no empty store behind;
lone surrogates are replaced and counted instead of crashing.

The CLI runs in this process (``parallelsearch.cli.main``), so a traceback is an exception
that fails the test, and the exit code is the return value.
"""

from __future__ import annotations

import json

import pytest

from parallelsearch.cli import main
from parallelsearch.stores.errors import BadInputError
from parallelsearch.stores.ingestion.jsonfiles import SkipReport
from parallelsearch.stores.ingestion.readers import read_passages

GOOD = {"title": "Ada Lovelace", "text": "Ada Lovelace wrote the first published algorithm."}

#: wrong field types in benchmark shapes
WRONG_TYPES = {
    "evidence_str": ({"evidence_list": ["a fact"]}, "evidence_list[0] is str"),
    "evidence_int": ({"evidence_list": [5]}, "evidence_list[0] is int"),
    "paragraph_title_int": (
        {"paragraphs": [{"title": 5, "paragraph_text": "x"}]},
        "paragraphs[0].title is int",
    ),
    "evidence_fact_int": ({"evidence_list": [{"title": "t", "fact": 7}]}, "evidence_list[0].fact is int"),
    "support_title_int": (
        {
            "metadata": {
                "question_decomposition": [{"support_paragraph": {"title": 3, "paragraph_text": "x"}}]
            }
        },
        "support_paragraph.title is int",
    ),
}


def _lines(path, *records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def _index(tmp_path, capsys, *args):
    code = main(["index", "--store", "bad-input", "--no-progress", *map(str, args)])
    out = capsys.readouterr()
    return code, out.out, out.err


def _store_names(capsys) -> list[str]:
    assert main(["stores", "--json"]) == 0
    return [r["name"] for r in json.loads(capsys.readouterr().out)]


@pytest.mark.parametrize("kind", sorted(WRONG_TYPES))
def test_wrong_field_types_are_file_line_errors(tmp_path, kind):
    record, reason = WRONG_TYPES[kind]
    path = _lines(tmp_path / f"{kind}.jsonl", GOOD, record)
    with pytest.raises(BadInputError) as ei:
        list(read_passages([path]))
    assert ei.value.line == 2 and reason in ei.value.reason, str(ei.value)
    report = SkipReport()
    got = list(read_passages([path], skip_bad=True, report=report))
    assert [p.title for p in got] == ["Ada Lovelace"]
    assert report.count == 1 and report.entries[0][1] == 2


def test_index_wrong_types_exit_2_and_skip_bad_counts_each(tmp_path, capsys):
    path = _lines(tmp_path / "mixed.jsonl", *(rec for rec, _ in WRONG_TYPES.values()), GOOD)
    code, _, err = _index(tmp_path, capsys, path)
    assert code == 2 and f"{path}:1: evidence_list[0] is str" in err, err
    assert "bad-input" not in _store_names(capsys), "a failed first index must not leave an empty store"
    code, out, err = _index(tmp_path, capsys, path, "--skip-bad")
    assert code == 0, err
    assert "added 1," in out and "skipped 5" in out
    assert "skipped 5 bad record(s)" in err
    for line in range(1, 6):
        assert f"{path}:{line}:" in err


def test_broken_first_line_of_jsonl_is_one_bad_line(tmp_path, capsys):
    path = tmp_path / "first.jsonl"
    path.write_text('{"title": "Broken", "text": \n' + json.dumps(GOOD) + "\n", encoding="utf-8")
    with pytest.raises(BadInputError) as ei:
        list(read_passages([path]))
    assert ei.value.line == 1 and "read as JSON lines" in ei.value.reason
    code, out, err = _index(tmp_path, capsys, path, "--skip-bad")
    assert code == 0, err
    assert "added 1," in out and "skipped 1," in out
    assert "line 1 is bad" in err and "read the file as JSON lines" in err
    assert f"{path}:1: not valid JSON" in err


def test_pretty_printed_document_is_still_one_record(tmp_path):
    path = tmp_path / "pretty.json"
    path.write_text(json.dumps(GOOD, indent=2), encoding="utf-8")
    assert [p.title for p in read_passages([path])] == ["Ada Lovelace"]


def test_non_object_in_json_array(tmp_path):
    path = tmp_path / "array.json"
    path.write_text("[\n" + json.dumps(GOOD) + ",\n7,\n" + json.dumps(dict(GOOD, title="B")) + "\n]\n")
    with pytest.raises(BadInputError) as ei:
        list(read_passages([path]))
    assert ei.value.line == 3 and "array element is int" in ei.value.reason
    report = SkipReport()
    assert [p.title for p in read_passages([path], skip_bad=True, report=report)] == ["Ada Lovelace", "B"]
    assert report.entries == [(str(path), 3, "array element is int, expected a JSON object")]


def test_directory_is_expanded_or_refused_and_typo_leaves_no_store(tmp_path, capsys):
    folder = tmp_path / "corpus"
    (folder / "sub").mkdir(parents=True)
    _lines(folder / "a.jsonl", GOOD)
    _lines(folder / "sub" / "b.json", dict(GOOD, title="Charles Babbage"))
    (folder / "notes.txt").write_text("not data")
    titles = sorted(p.title for p in read_passages([folder]))
    assert titles == ["Ada Lovelace", "Charles Babbage"]

    empty = tmp_path / "empty"
    empty.mkdir()
    code, _, err = _index(tmp_path, capsys, empty)
    assert code == 2 and f"{empty}: is a directory holding no .json or .jsonl files" in err, err

    code = main(["index", "--store", "typo", "--no-progress", str(tmp_path / "nope.jsonl")])
    err = capsys.readouterr().err
    assert code == 2 and "nope.jsonl: no such file or directory" in err
    assert "typo" not in _store_names(capsys)


def test_lone_surrogates_in_records_are_replaced_and_counted(tmp_path, capsys):
    path = tmp_path / "surrogates.jsonl"
    # what json.dumps writes for a Python string holding a lone surrogate
    path.write_text('{"title": "Bad \\ud800 title", "text": "text with \\udcff inside"}\n', encoding="utf-8")
    code, out, err = _index(tmp_path, capsys, path)
    assert code == 0, err
    assert "added 1," in out and "replaced 2 invalid character(s)" in err
    code = main(["search", "text with \udcff inside", "--store", "bad-input", "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    hit = json.loads(captured.out)[0]
    assert (
        hit["title"] == "Bad \ufffd title" and "replaced 1 invalid character(s) in the query" in captured.err
    )
    gold = json.dumps({"golden_answers": ["Bad"], "supporting_titles": ["Bad title"]})
    code = main(["ask", "Who wrote \udcff inside?", "--store", "bad-input", "--json", "--metadata", gold])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "Who wrote \ufffd inside?" in json.loads(captured.out)["transcript"]
    assert "replaced 1 invalid character(s) in the question" in captured.err
