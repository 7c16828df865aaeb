"""A short run of benchmarks/soak.py's load mix against both servers as real processes.

The 10-minute soak is a benchmark (docs/performance.md); this is its smoke test in CI:
``parallelsearch serve-retriever`` and ``parallelsearch serve`` (oracle policy, searching
through the ``/retrieve`` server) on 127.0.0.1, 20 s of the full mix (good requests, bad
inputs, clients leaving mid-stream). No request may end other than as its kind allows
(no 5xx, no reset), no admission slot may leak, and neither server may log an unhandled
error. Latency and memory are reported by the benchmark, never asserted here.
"""

from __future__ import annotations

import sys

import pytest
from conftest import ROOT, needs_data
from serving import copy_store

pytestmark = [needs_data, pytest.mark.serving, pytest.mark.slow]


def test_twenty_seconds_of_the_soak_mix_has_no_unexpected_error(hotpot_store, hotpot_questions, tmp_path):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import soak

    store_dir = copy_store(hotpot_store, tmp_path / "chroma")
    r = soak.run(
        duration_s=20,
        concurrency=6,
        store_dir=store_dir,
        store_name=hotpot_store.name,
        questions=hotpot_questions,
        write_results=False,
    )
    assert r["requests"] > 0 and r["by_kind"].get("invoke", 0) > 0
    assert r["unexpected_errors"] == 0, r["unexpected_by_kind"]
    assert sum(r["expected_4xx"].values()) > 0  # bad inputs were sent and refused with a 4xx
    assert r["admission_at_end"]["in_flight"] == 0 and r["admission_at_end"]["waiting"] == 0
    assert r["server_log_errors"] == {"serve-retriever": 0, "serve": 0}
