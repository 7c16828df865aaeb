"""``rollout`` with an unreachable policy server prints the first error of every kind with its
count, names the URL it used and says connection refused, and exits non-zero because no question
succeeded. (``eval`` and ``demo`` refuse such a server before they start: tests/test_policy_check.py.)

The policy server is a real closed port on 127.0.0.1 (bound, then released: nothing listens).
"""

from __future__ import annotations

import pytest
from conftest import free_port, needs_data

from parallelsearch.cli import main

pytestmark = needs_data


@pytest.fixture()
def dead_policy() -> tuple[str, str]:
    url = f"http://127.0.0.1:{free_port()}/v1"
    return f"openai:stand-in@{url}", f"{url}/completions"


def _check_errors(text: str, url: str, count: int, unit: str) -> None:
    assert f"{count} {unit}" in text and "UnavailableError" in text, text
    assert url in text and "connection refused" in text, text


def test_rollout_prints_error_kinds_and_exits_non_zero(
    hotpot_store, hotpot_comparison_file, tmp_path, capsys, monkeypatch, dead_policy
):
    monkeypatch.setenv("PARALLELSEARCH_CHROMA_PATH", hotpot_store.location)
    spec, url = dead_policy
    rc = main(["rollout", "--data", str(hotpot_comparison_file), "--store", "hotpot", "--policy", spec,
               "--limit", "2", "--out", str(tmp_path / "episodes.jsonl")])  # fmt: skip
    captured = capsys.readouterr()
    assert rc != 0
    _check_errors(captured.out, url, 2, "episode(s) failed with")
