"""Evaluation: run graph variants over FlashRAG-format questions, score, summarise, report.

Internal: the building blocks behind the public API in ``parallelsearch`` (docs/api.md); names here may change without notice.
"""

from parallelsearch.eval.report import comparison_lines, write_report
from parallelsearch.eval.runner import EvalRun, evaluate, read_results
from parallelsearch.eval.scoring import score_output
from parallelsearch.eval.simulated_latency import DelayedPolicy
from parallelsearch.eval.summary import METRIC_NAMES, METRICS, SPLITS, summarize

__all__ = [
    "METRICS",
    "METRIC_NAMES",
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
