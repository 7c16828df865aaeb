"""``demo``, ``serve``, ``ask`` and ``eval`` check the policy's model before they start anything:
a ``chat:`` policy without its provider's key, or a model server nothing listens on, is one
``error:`` line naming the setting (exit 2), printed before the demo indexes, before the server
says where it serves and before any question runs. The unreachable server is a real closed port
on 127.0.0.1; the missing key is a real ``init_chat_model("openai:...")`` with no key set.
"""

from __future__ import annotations

import pytest
from conftest import free_port

from parallelsearch.cli import main
from parallelsearch.demo_data import HOTPOTQA_SAMPLE

CHAT = "chat:openai:gpt-4o-mini"


def _commands(policy: list[str], tmp) -> dict[str, list[str]]:
    return {
        "demo": ["demo", "--limit", "2", "--out", str(tmp / "demo"), *policy],
        "serve": ["serve", "--store", "hotpotqa", "--port", str(free_port()), *policy],
        "ask": ["ask", "Who is older, Monet or Pissarro?", "--store", "hotpotqa", *policy],
        "eval": [
            "eval",
            "--dataset",
            str(HOTPOTQA_SAMPLE),
            "--store",
            "hotpotqa",
            "--out",
            str(tmp / "run"),
            *policy,
        ],
    }


@pytest.fixture(autouse=True)
def _no_server_starts(monkeypatch):
    """A ``serve`` that got past the check would block in uvicorn: fail at once instead."""
    import uvicorn

    monkeypatch.setattr(uvicorn, "run", lambda *a, **k: pytest.fail("serve started its server"))


def _one_error_line(capsys) -> str:
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err, captured.err
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), captured.err
    assert "serving on" not in captured.out and "demo:" not in captured.out, captured.out
    return lines[0]


@pytest.mark.parametrize("command", ["demo", "serve", "ask", "eval"])
def test_a_chat_policy_without_its_key_is_one_line_naming_the_key(command, tmp_path, capsys, monkeypatch):
    for name in ("OPENAI_API_KEY", "PARALLELSEARCH_OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    rc = main(_commands(["--policy", CHAT], tmp_path)[command])
    line = _one_error_line(capsys)
    assert rc == 2
    assert CHAT in line and "OPENAI_API_KEY" in line, line
    assert not (tmp_path / "demo").exists() and not (tmp_path / "run").exists()


@pytest.mark.parametrize("command", ["demo", "serve", "ask", "eval"])
def test_an_unreachable_model_server_is_one_line_naming_its_setting(command, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "stand-in")
    url = f"http://127.0.0.1:{free_port()}/v1"  # bound, then released: nothing listens
    policy = ["--policy", "chat:openai:stand-in", "--policy-base-url", url]
    rc = main(_commands(policy, tmp_path)[command])
    line = _one_error_line(capsys)
    assert rc == 2
    assert url in line and "--policy-base-url" in line and "connection refused" in line, line


def test_a_completions_server_url_in_the_spec_is_probed_with_its_password_masked(tmp_path, capsys):
    url = f"http://alice:PASSW0RD@127.0.0.1:{free_port()}/v1"
    rc = main(_commands(["--policy", f"openai:stand-in@{url}"], tmp_path)["ask"])
    line = _one_error_line(capsys)
    assert rc == 2 and "PASSW0RD" not in line and "alice:***@127.0.0.1" in line, line
    assert "PARALLELSEARCH_POLICY" in line and "connection refused" in line, line
