"""``eval --suite paper``: the tables' layout and standard errors, resume after a kill, the datasets
without passages, on the first records of the real benchmark files with the oracle (a stand-in for a
model: it decomposes with the annotations and answers with the gold) and a scripted policy."""

from __future__ import annotations

import itertools
import json
import math
import shutil
from pathlib import Path

import pytest
from conftest import RAW, needs_data

from parallelsearch.cli import main
from parallelsearch.eval.paper_tables import average, build_tables, cell
from parallelsearch.eval.suite import PAPER_SUITE

pytestmark = needs_data


def _data_dir(tmp: Path, names: tuple[str, ...], records: int = 3) -> Path:
    """A data folder in the suite's layout holding the first ``records`` records of each real file."""
    from parallelsearch.stores.ingestion.jsonfiles import iter_json_records

    root = tmp / "data"
    for ds in PAPER_SUITE:
        if ds.name in names:
            recs = [rec for _, rec in itertools.islice(iter_json_records(RAW / ds.path), records)]
            dest = root / ds.path
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_text("".join(json.dumps(r) + "\n" for r in recs), encoding="utf-8")
    return root


def _suite(data: Path, out: Path, *more: str) -> int:
    return main(["eval", "--suite", "paper", "--data-dir", str(data), "--out", str(out), "--no-plots", *more])


def _scripted(tmp: Path) -> str:
    """A policy file that searches once with two sub-queries, then answers 'yes'."""
    path = tmp / "yes.json"
    turns = ["<think> t </think><search> a ## b </search>", "<think> t </think><answer> yes </answer>"]
    path.write_text(json.dumps(turns))
    return f"scripted:{path}"


@pytest.fixture(scope="module")
def suite_run(tmp_path_factory, monkeypatch_module):
    """One suite run of two policies on two records of HotpotQA, 2Wiki and MuSiQue, NQ asked for too."""
    tmp = tmp_path_factory.mktemp("suite")
    monkeypatch_module.setenv("PARALLELSEARCH_HOME", str(tmp / "home"))
    data = _data_dir(tmp, ("hotpotqa", "2wikimultihopqa", "musique", "nq"))
    spec = _scripted(tmp)
    picked = ("--datasets", "hotpotqa,2wikimultihopqa,musique,nq", "--limit", "2")
    code = _suite(data, tmp / "out", *picked, "--policy", "oracle", "--policy", spec)
    return tmp, data, spec, code


def test_a_missing_file_is_named_before_anything_is_indexed(tmp_path, capsys):
    data = _data_dir(tmp_path, ("hotpotqa",), records=1)
    assert _suite(data, tmp_path / "out", "--datasets", "hotpotqa,musique") == 2
    err = capsys.readouterr().err
    assert "musique:" in err and "is missing (--data-dir names the folder" in err
    assert not (tmp_path / "out" / "oracle").exists()


def test_the_tables_have_the_papers_layout(suite_run, capsys):
    tmp, _, spec, code = suite_run
    assert code == 0
    md = (tmp / "out" / "paper_tables.md").read_text()
    tables = json.loads((tmp / "out" / "paper_tables.json").read_text())
    assert tables["datasets"] == ["hotpotqa", "2wikimultihopqa", "musique"]
    assert "| policy | graph | hotpotqa | 2wikimultihopqa | musique | average |" in md
    for graph in ("direct", "rag", "sequential", "parallel"):
        assert f"| `{spec}` | {graph} |" in md and f"| `oracle` | {graph} |" in md
        assert set(tables["splits"][spec][graph]) == {"parallel", "sequential"}
    mine = tables["policies"][spec]["parallel"]
    assert [mine[d]["n"] for d in tables["datasets"]] == [2, 2, 2] and mine["average"]["n"] == 6
    assert mine["average"]["searches"] == 2.0 and mine["average"]["calls"] == 2.0
    assert tables["oracle"] == ["oracle"] and "| `oracle` | parallel | oracle |" in md
    assert "## Not run" in md and "nq (2 questions) needs a Wikipedia corpus" in md


def test_a_kill_mid_run_resumes_without_counting_twice(suite_run, capsys):
    tmp, data, spec, _ = suite_run
    out = tmp / "resumed"
    shutil.copytree(tmp / "out", out)
    results = out / "oracle" / "hotpotqa" / "results.jsonl"
    lines = results.read_text().splitlines()
    results.write_text("\n".join(lines[:3]) + "\n" + lines[3][:40])  # killed while writing row 4
    capsys.readouterr()
    picked = ("--datasets", "hotpotqa,2wikimultihopqa,musique,nq", "--limit", "2")
    assert _suite(data, out, *picked, "--policy", "oracle", "--policy", spec) == 0
    said = capsys.readouterr().out
    assert "resumed: 3 (graph, question) pairs were already done" in said
    assert "ran 5 (graph, question) pairs" in said and "resumed: 8 (graph, question) pairs" in said
    rows = [
        json.loads(x)
        for x in results.read_text().splitlines()
        if x.strip().startswith("{") and x.endswith("}")
    ]
    assert len({(r["variant"], r["id"]) for r in rows}) == 8 == len(rows)
    before = json.loads((tmp / "out" / "paper_tables.json").read_text())["policies"]["oracle"]
    after = json.loads((out / "paper_tables.json").read_text())["policies"]["oracle"]
    assert [after[g]["average"]["n"] for g in after] == [before[g]["average"]["n"] for g in before] == [6] * 4


def test_datasets_without_passages_run_against_a_given_store(suite_run, capsys, monkeypatch):
    tmp, data, _, _ = suite_run
    monkeypatch.setenv("PARALLELSEARCH_HOME", str(tmp / "home"))  # the suite run's stores
    capsys.readouterr()
    code = _suite(data, tmp / "nq", "--datasets", "nq", "--limit", "2", "--store", "paper-hotpotqa-first2")
    assert code == 0 and "not run" not in capsys.readouterr().out
    tables = json.loads((tmp / "nq" / "paper_tables.json").read_text())
    assert tables["datasets"] == ["nq"] and tables["policies"]["oracle"]["rag"]["nq"]["n"] == 2


def test_a_policy_answers_every_dataset_on_one_event_loop(suite_run, monkeypatch):
    """An in-process vLLM engine binds to the event loop of its first request and dies with it: a
    policy loaded once must run every dataset on one loop (each policy its own)."""
    import asyncio

    from parallelsearch.agents.policies.scripted import ScriptedPolicy

    tmp, data, spec, _ = suite_run
    monkeypatch.setenv("PARALLELSEARCH_HOME", str(tmp / "home"))  # the suite run's stores
    loops: list[asyncio.AbstractEventLoop] = []  # the loops themselves: kept alive, their ids differ
    agenerate = ScriptedPolicy.agenerate

    async def recorded(self, request):
        loops.append(asyncio.get_running_loop())
        return await agenerate(self, request)

    monkeypatch.setattr(ScriptedPolicy, "agenerate", recorded)
    picked = ("--datasets", "hotpotqa,2wikimultihopqa,musique", "--limit", "2", "--graphs", "parallel")
    assert _suite(data, tmp / "one-loop", *picked, "--policy", spec) == 0
    assert len(loops) >= 3 * 2 * 2 and len({id(x) for x in loops}) == 1  # 3 datasets x 2 questions


def test_without_a_store_the_suite_says_what_corpus_a_dataset_needs(suite_run, capsys):
    tmp, data, _, _ = suite_run
    capsys.readouterr()
    assert _suite(data, tmp / "bare", "--datasets", "nq", "--limit", "1") == 0
    said = capsys.readouterr().out
    assert "not run: nq (1 questions) needs a Wikipedia corpus" in said and "docs/scaling.md" in said
    assert "--store NAME or --retriever URL" in said
    assert _suite(data, tmp / "bare2", "--datasets", "nq", "--corpus", "configured") == 2
    assert "--corpus configured needs --store NAME or --retriever URL" in capsys.readouterr().err


def test_one_eval_takes_one_policy(tmp_path, capsys):
    code = main(
        ["eval", "--dataset", "x.jsonl", "--out", str(tmp_path), "--policy", "oracle", "--policy", "oracle"]
    )
    assert code == 2 and "several policies need --suite paper" in capsys.readouterr().err


def test_cells_and_averages_hand_computed():
    rows = [
        {"em": 1.0, "f1": 1.0, "subqueries": 2, "policy_calls": 2, "valid_turns": 2, "latency_ms": 10.0,
         "tokens_in": 100, "tokens_out": 20, "split": "parallel"},
        {"em": 0.0, "f1": 0.5, "subqueries": 1, "policy_calls": 4, "valid_turns": 3, "latency_ms": 30.0,
         "tokens_in": 200, "tokens_out": 40, "split": "sequential"},
        {"error": "boom", "latency_ms": 5.0},
    ]  # fmt: skip
    c = cell(rows)
    assert (c["n"], c["failed"], c["em"], c["calls"], c["p50_ms"]) == (2, 1, 0.5, 3.0, 20.0)
    assert c["em_se"] == pytest.approx(math.sqrt(0.5) / math.sqrt(2))
    assert c["tpc"] == pytest.approx(360.0)  # 360 tokens, one right answer
    # the ratio's delta method: residuals 120 - 360 = -240 and 240; sqrt(115200 / 2) / 0.5
    assert c["tpc_se"] == pytest.approx(math.sqrt(115200 / 2) / 0.5)
    a = average([c, {**c, "em": 1.0, "em_se": 0.0}])
    assert a["em"] == 0.75 and a["em_se"] == pytest.approx(c["em_se"] / 2) and a["n"] == 4
    assert cell([{**rows[0], "em": 0.0}])["tpc"] is None  # no right answer: no TPC
    tables = build_tables({"p": {"d": [{**r, "variant": "parallel"} for r in rows]}})
    assert tables["splits"]["p"]["parallel"]["parallel"]["n"] == 1
