"""``parallelsearch ask`` as a person and a program read it: ``--stream`` prints the steps
(turn, sub-queries, passage titles per sub-query, answer), ``--stream --json`` one JSON
object per step; each misuse is one ``error:`` line and exit code 2, no traceback.

Runs the CLI's ``main`` on a real embedded store of the shipped HotpotQA sample's first
records, with the oracle policy and the metadata of the first question.
"""

from __future__ import annotations

import json

import pytest

from parallelsearch.cli import main

Q = "Between Greyia and Calibanus, which genus contains more species?"
META = json.dumps(
    {"supporting_titles": ["Greyia", "Calibanus"], "golden_answers": ["Greyia"], "split": "parallel"}
)


@pytest.fixture
def store(sample_store):
    return sample_store


def ask(*args: str) -> list[str]:
    return ["ask", Q, *args]


def test_stream_prints_turns_subqueries_titles_and_the_answer(store, capsys):
    assert main(ask("--store", store, "--metadata", META, "--stream")) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("[turn 1] search: Greyia | Calibanus  [")
    assert out[1] == "  [search round 1]"
    assert out[2].startswith("    'Greyia': Greyia (0.") and out[3].startswith(
        "    'Calibanus': Calibanus (0."
    )
    assert out[4].startswith("[turn 2] answer -> Greyia")
    assert "answer: Greyia [oracle]" in out
    assert out[-1].startswith("policy calls 2, search rounds 1, sub-queries 2, passages 6, errors 0")
    assert not any(line.startswith("<") for line in out)  # no state key names


def test_stream_json_is_one_event_per_line(store, capsys):
    assert main(ask("--store", store, "--metadata", META, "--stream", "--json")) == 0
    events = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [e["type"] for e in events] == ["turn", "search", "turn", "answer"]
    assert events[0]["turn"] == 1 and events[0]["subqueries"] == ["Greyia", "Calibanus"]
    assert [r["query"] for r in events[1]["results"]] == ["Greyia", "Calibanus"]
    assert [r["titles"][0] for r in events[1]["results"]] == ["Greyia", "Calibanus"]
    assert all(len(r["titles"]) == 3 and r["error"] is None for r in events[1]["results"])
    assert events[2]["action"] == "answer" and events[2]["answer"] == "Greyia"
    last = events[-1]
    assert (last["answer"], last["status"], last["policy_calls"], last["search_rounds"]) == (
        "Greyia",
        "answered",
        2,
        1,
    )


def test_the_finished_run_prints_the_same_steps(store, capsys):
    assert main(ask("--store", store, "--metadata", META)) == 0
    plain = capsys.readouterr().out.splitlines()
    assert main(ask("--store", store, "--metadata", META, "--stream")) == 0
    streamed = capsys.readouterr().out.splitlines()

    def shape(lines):  # milliseconds differ between runs
        return [line.split("  [")[0] for line in lines[:-1]]

    assert shape(plain) == shape(streamed)


@pytest.mark.parametrize(
    "args,expected",
    [
        (
            ["--policy", "oracel"],
            "error: unknown policy 'oracel' (did you mean 'oracle'?); policy spec: oracle | scripted:FILE.json",
        ),
        (["--metadata", "{golden: 1}"], "error: --metadata is not valid JSON: Expecting property name"),
        (["--metadata", '["Greyia"]'], "error: --metadata must be a JSON object, not list"),
    ],
)
def test_misuse_is_one_error_line(args, expected, capsys):
    assert main(ask("--store", "hp-sample", *args)) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith(expected) and captured.err.count("\n") == 1, captured.err
    assert "Traceback" not in captured.err


def test_a_missing_store_lists_the_stores_that_exist(store, capsys):
    assert main(ask("--store", "hp-sampel", "--metadata", META)) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: no store named 'hp-sampel' at ")
    assert (
        err.rstrip().endswith("(did you mean 'hp-sample'?); stores there: hp-sample") and err.count("\n") == 1
    )


def cli_page_commands() -> list[list[str]]:
    """The first bash block of docs/cli.md's "## Command line" section, one argv per command."""
    import shlex

    from conftest import ROOT

    text = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    section = text.split("\n## Command line\n", 1)[1].split("\n## ", 1)[0]
    block = section.split("```bash\n", 1)[1].split("\n```", 1)[0]
    commands = []
    for line in block.replace("\\\n", " ").splitlines():
        argv = shlex.split(line, comments=True)
        if argv:
            assert argv[0] == ".venv/bin/parallelsearch", line
            commands.append([a for a in argv[1:] if a != "&"])
    return commands


def test_the_cli_page_command_line_block_parses_on_the_shipped_sample():
    """Every command of docs/cli.md's first command-line block parses with this CLI, and the
    files it starts from are in a fresh clone (the commands themselves were run by hand)."""
    from conftest import ROOT

    from parallelsearch.cli import build_parser

    commands = cli_page_commands()
    assert [c[0] for c in commands] == [
        "prepare-data",
        "index",
        "stores",
        "search",
        "ask",
        "serve-retriever",
    ]
    parser = build_parser()
    for argv in commands:
        args = parser.parse_args(argv)
        if getattr(args, "metadata", None):
            assert isinstance(json.loads(args.metadata), dict)
    assert (ROOT / commands[0][1]).is_file() and commands[0][1].startswith("parallelsearch/demo_data/")
