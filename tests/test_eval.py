"""Evaluation: metrics against hand-computed cases, resume, report files, end-to-end runs on real questions."""

from __future__ import annotations

import asyncio
import json
import sys

import pytest
from conftest import needs_data

from parallelsearch.agents.policies import OraclePolicy, ScriptedPolicy
from parallelsearch.cli import main
from parallelsearch.eval import METRIC_NAMES, SPLITS, evaluate, score_output, summarize, write_report


def row(variant, split, em, calls, latency, decomposed=False, recall=None, cover=None, qid=None, error=None):
    return {
        "variant": variant, "id": qid or f"{variant}-{split}-{calls}-{latency}", "split": split, "em": em, "f1": em,
        "acc": em, "policy_calls": calls, "search_rounds": calls - 1, "subqueries": 2, "decomposed": decomposed,
        "latency_ms": latency, "gold_recall": recall, "answer_coverage": cover, "error": error,
    }  # fmt: skip


def test_summary_hand_computed():
    rows = [
        row("parallel", "parallel", 1.0, 2, 10.0, decomposed=True, recall=1.0, cover=1.0),
        row("parallel", "parallel", 0.0, 3, 20.0, decomposed=False, recall=0.5, cover=0.0),
        row("parallel", "sequential", 1.0, 3, 30.0, recall=1.0),
        row("parallel", "sequential", 0.0, 4, 40.0, error="boom"),
    ]
    s = summarize(rows)
    assert set(s) == {"parallel"} and set(s["parallel"]) == set(SPLITS)
    assert all(set(m) == set(METRIC_NAMES) for m in s["parallel"].values())
    par, seq, all_ = s["parallel"]["parallel"], s["parallel"]["sequential"], s["parallel"]["all"]
    assert (
        par["n"] == 2
        and par["em"] == 0.5
        and par["decomposition_ratio"] == 0.5
        and par["gold_recall"] == 0.75
    )
    assert par["latency_p50_ms"] == 15.0 and par["latency_p95_ms"] == pytest.approx(19.5)
    assert (
        seq["n"] == 1 and seq["decomposition_ratio"] is None and seq["answer_coverage"] is None
    )  # failed row left out
    assert (
        all_["n"] == 3 and all_["em"] == pytest.approx(2 / 3, abs=1e-4) and all_["decomposition_ratio"] == 0.5
    )
    assert all_["latency_p50_ms"] == 20.0 and all_["policy_calls"] == pytest.approx(8 / 3, abs=1e-4)
    assert s["parallel"]["single"] == {k: (0 if k == "n" else None) for k in METRIC_NAMES}
    assert summarize(rows, accuracy=False)["parallel"]["all"]["em"] is None


def test_score_output_hand_computed():
    q = {"id": "q1", "question": "Who is older?", "golden_answers": ["Ed Wood"],
         "metadata": {"dataset": "hotpotqa", "type": "comparison", "split": "parallel", "supporting_titles": ["Ed Wood", "Scott Derrickson"]}}  # fmt: skip
    out = {
        "answer": "ed wood",
        "policy_calls": 2,
        "search_rounds": 1,
        "subqueries": 2,
        "trajectory": [
            {"type": "turn", "action": "search", "subqueries": ["Ed Wood", "Scott Derrickson"]},
            {"type": "observation", "text": "Doc 1(Title: Ed Wood) Edward Davis Wood Jr. was a filmmaker",
             "results": [{"passages": [{"title": "Ed Wood"}, {"title": "Other"}]}]},
            {"type": "turn", "action": "answer", "subqueries": []},
        ],
    }  # fmt: skip
    r = score_output(q, out, "parallel", 12.5)
    assert (r["em"], r["acc"], r["f1"]) == (1.0, 1.0, 1.0)
    assert r["decomposed"] and r["gold_recall"] == 0.5 and r["answer_coverage"] == 1.0
    yes_no = score_output({**q, "golden_answers": ["yes"]}, out, "parallel", 1.0)
    assert yes_no["answer_coverage"] is None and yes_no["em"] == 0.0
    direct = score_output(q, {**out, "trajectory": []}, "direct", 1.0)
    assert direct["gold_recall"] is None and direct["answer_coverage"] is None
    assert r["hop_recall"] is None and r["dependent_hop_recall"] is None  # no metadata.hops
    hops = [
        {"title": "Ed Wood", "refs": []},
        {"title": "Scott Derrickson", "refs": [1]},
        {"title": "Other", "refs": [2]},
    ]
    chained = score_output({**q, "metadata": {**q["metadata"], "hops": hops}}, out, "parallel", 1.0)
    assert (chained["hop_recall"], chained["dependent_hop_recall"]) == (0.6667, 0.5)


@needs_data
def test_resume_never_counts_twice(hotpot_store, hotpot_questions, tmp_path):
    qs = hotpot_questions[:6]

    def run(questions):
        return asyncio.run(
            evaluate(
                questions,
                ["parallel", "sequential"],
                OraclePolicy(),
                hotpot_store,
                tmp_path,
                policy_spec="oracle",
                progress=False,
            )
        )

    first = run(qs[:3])
    assert first.ran == 6
    # a run killed mid-write leaves a torn line; a duplicate row must not count twice
    lines = (tmp_path / "results.jsonl").read_text().splitlines()
    with (tmp_path / "results.jsonl").open("a") as f:
        f.write(lines[0] + "\n" + lines[0][: len(lines[0]) // 2])
    second = run(qs)
    assert second.ran == 6 and second.skipped_done == 6 and second.bad_lines
    summary = write_report(tmp_path)
    assert summary["parallel"]["all"]["n"] == 6 and summary["sequential"]["all"]["n"] == 6
    assert summary["parallel"]["all"]["em"] is None  # oracle: accuracy does not apply
    with pytest.raises(ValueError, match="another run"):
        asyncio.run(
            evaluate(
                qs,
                ["parallel"],
                OraclePolicy(),
                hotpot_store,
                tmp_path,
                policy_spec="scripted:x.json",
                progress=False,
            )
        )


class CountingOracle(OraclePolicy):
    """The oracle, counting its turns (to see the untimed warm-up runs)."""

    def __init__(self) -> None:
        self.turns = 0

    async def agenerate(self, request):
        self.turns += 1
        return await super().agenerate(request)


@needs_data
def test_graphs_are_warmed_up_then_interleaved_per_question(
    hotpot_store, hotpot_questions, tmp_path, monkeypatch, capsys
):
    """Every graph runs the first question once untimed; then question i runs in every graph in
    turn, the order alternating, so no graph always goes first (concurrency 1: rows in run order)."""
    qs, variants = hotpot_questions[:4], ["parallel", "sequential", "rag"]
    policy = CountingOracle()
    run = asyncio.run(evaluate(qs, variants, policy, hotpot_store, tmp_path, concurrency=1, progress=False))
    rows = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert run.ran == 12 and [(r["variant"], r["id"]) for r in rows] == [
        (v, str(q["id"])) for i, q in enumerate(qs) for v in (variants if i % 2 == 0 else variants[::-1])
    ]
    first = [r for r in rows if r["id"] == str(qs[0]["id"])]
    assert policy.turns == sum(r["policy_calls"] for r in rows) + sum(r["policy_calls"] for r in first)
    assert "interleaved" in json.loads((tmp_path / "run.json").read_text())["latency"]
    write_report(tmp_path, plots_enabled=False)
    assert "How latency was measured: latency = wall time" in (tmp_path / "report.md").read_text()
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # without the plots extra: the report, no plots
    write_report(tmp_path)
    assert "## Plots" not in (tmp_path / "report.md").read_text() and not list(tmp_path.glob("*.png"))
    assert "matplotlib is not installed" in capsys.readouterr().err


@needs_data
def test_eval_cli_end_to_end_oracle(hotpot_store, hotpot_comparison_file, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PARALLELSEARCH_CHROMA_PATH", hotpot_store.location)
    out = tmp_path / "run"
    rc = main(["eval", "--dataset", str(hotpot_comparison_file), "--store", "hotpot", "--graphs", "parallel,sequential",
               "--policy", "oracle", "--limit", "6", "--split", "parallel", "--out", str(out)])  # fmt: skip
    assert rc == 0
    printed = capsys.readouterr().out
    assert "| parallel | parallel |" in printed and "oracle" in printed
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary) == {"parallel", "sequential"}
    p, s = summary["parallel"]["parallel"], summary["sequential"]["parallel"]
    assert p["n"] == s["n"] == 6 and p["decomposition_ratio"] == 1.0 and s["decomposition_ratio"] == 0.0
    assert p["policy_calls"] < s["policy_calls"] and p["search_rounds"] < s["search_rounds"]
    assert p["gold_recall"] > 0.5
    report = (out / "report.md").read_text()
    assert "**Oracle run.**" in report and "Table 3" in report
    for png in ("em_vs_calls.png", "latency.png", "policy_calls_hist.png"):
        assert (out / png).stat().st_size > 5000 and (out / png).read_bytes()[:4] == b"\x89PNG"
    rows = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    assert len(rows) == 12 and len({(r["variant"], r["id"]) for r in rows}) == 12


@needs_data
def test_eval_scripted_policy_reports_real_accuracy(hotpot_store, hotpot_questions, tmp_path):
    yes_no = [q for q in hotpot_questions if q["golden_answers"][0].lower() in ("yes", "no")][:4]
    qs = yes_no + [q for q in hotpot_questions if q not in yes_no][:2]
    expected = sum(q["golden_answers"][0].lower() == "yes" for q in qs) / len(qs)
    two_turns = ScriptedPolicy(
        ["<think> t </think><search> a ## b </search>", "<think> t </think><answer> yes </answer>"]
    )
    asyncio.run(
        evaluate(
            qs, ["parallel"], two_turns, hotpot_store, tmp_path / "p", policy_spec="scripted", progress=False
        )
    )
    one_turn = ScriptedPolicy(["<think> t </think><answer> yes </answer>"])
    asyncio.run(
        evaluate(
            qs,
            ["rag", "direct"],
            one_turn,
            hotpot_store,
            tmp_path / "b",
            policy_spec="scripted",
            progress=False,
        )
    )
    par, base = write_report(tmp_path / "p"), write_report(tmp_path / "b")
    assert 0 < expected < 1
    for summary, variant in ((par, "parallel"), (base, "rag"), (base, "direct")):
        assert summary[variant]["all"]["em"] == pytest.approx(expected, abs=1e-4)
    assert base["direct"]["all"]["gold_recall"] is None and base["rag"]["all"]["search_rounds"] == 1
    assert par["parallel"]["all"]["search_rounds"] == 1 and par["parallel"]["all"]["subqueries"] == 2
    assert (
        "oracle" not in (tmp_path / "p" / "report.md").read_text().split("## EM by split")[1].split("##")[0]
    )


@needs_data
def test_demo_command_small(capsys, tmp_path):
    rc = main(["demo", "--limit", "6", "--out", str(tmp_path / "demo")])
    assert rc == 0
    out = capsys.readouterr().out
    assert "| parallel | parallel |" in out and "| sequential | sequential |" in out
    assert "policy calls" in out and (tmp_path / "demo" / "report.md").is_file()
    again = main(["demo", "--limit", "6", "--out", str(tmp_path / "demo")])
    assert again == 0 and "12 (graph, question) pairs were already done" in capsys.readouterr().out


def test_a_resolver_delay_without_a_searcher_runs_the_direct_baseline(tmp_path):
    """Only searching graphs resolve #k: with no searcher (``--graphs direct``) the delay has
    nothing to wrap and the run goes on."""
    q = {"id": "d1", "question": "Is water wet?", "golden_answers": ["yes"], "metadata": {}}
    one_turn = ScriptedPolicy(["<think> t </think><answer> yes </answer>"])
    run = asyncio.run(
        evaluate([q], ["direct"], one_turn, None, tmp_path, progress=False, resolver_delay_s=0.05)
    )
    assert write_report(tmp_path)["direct"]["all"]["em"] == 1.0, run
