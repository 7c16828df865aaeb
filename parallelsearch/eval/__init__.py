"""Evaluation: run graph variants over FlashRAG-format questions, score, summarise, report."""

from parallelsearch.eval.report import comparison_lines, write_report
from parallelsearch.eval.runner import EvalRun, evaluate, read_results
from parallelsearch.eval.scoring import score_output
from parallelsearch.eval.simulated_latency import DelayedPolicy
from parallelsearch.eval.summary import METRICS, SPLITS, summarize

__all__ = [
    "METRICS",
    "SPLITS",
    "DelayedPolicy",
    "EvalRun",
    "comparison_lines",
    "evaluate",
    "read_results",
    "score_output",
    "summarize",
    "write_report",
]
