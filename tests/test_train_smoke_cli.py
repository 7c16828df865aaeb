"""``train --smoke`` and the engine-settings flags, in the main tier (no vLLM here): the one-line
error naming the environment the smoke needs, and how ``--engine-arg``/``--kv-cache-gib`` parse."""

from __future__ import annotations

import argparse
import importlib.util

import pytest

from parallelsearch.cli import main
from parallelsearch.cli.train import engine_args_from


@pytest.mark.skipif(
    importlib.util.find_spec("vllm") is not None, reason="vLLM is installed: the smoke can run"
)
def test_smoke_without_vllm_says_which_environment_in_one_line(capsys):
    assert main(["train", "--smoke"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "vLLM tier" in err and "make venv-vllm" in err and "make smoke-train" in err and "vllm" in err


def test_smoke_and_launch_flags_do_not_mix(capsys):
    with pytest.raises(SystemExit):
        main(["train", "--smoke", "--preset", "paper"])
    assert main(["train", "--smoke", "--dry-run"]) == 2
    assert "--dry-run does not apply" in capsys.readouterr().err
    assert (
        main(["train", "--preset", "paper", "--dry-run", "--smoke-prompts", "3", "--kv-cache-gib", "1"]) == 2
    )
    assert "--smoke-prompts, --kv-cache-gib apply only with --smoke" in capsys.readouterr().err
    assert main(["train", "--preset", "paper", "--dry-run", "--learn"]) == 2
    assert "--learn applies only with --smoke" in capsys.readouterr().err
    assert main(["train", "--preset", "paper", "--dry-run", "--smoke-seed", "0"]) == 2  # 0 is given too
    assert "--smoke-seed applies only with --smoke" in capsys.readouterr().err
    assert main(["train", "--smoke", "--smoke-steps", "3"]) == 2
    assert "--smoke-steps applies only with --learn" in capsys.readouterr().err
    assert main(["train", "--smoke", "--smoke-checkpoints", "--smoke-sft-steps", "0"]) == 2
    assert "--smoke-sft-steps, --smoke-checkpoints apply only with --learn" in capsys.readouterr().err
    assert main(["train", "--smoke", "--learn", "--smoke-samples", "0"]) == 2
    assert "--smoke-samples must be >= 1, got 0" in capsys.readouterr().err
    assert main(["train", "--smoke", "--learn", "--set", "algoritm=rloo"]) == 2  # before any build
    assert "did you mean 'algorithm'" in capsys.readouterr().err
    assert main(["train", "--smoke", "--learn", "--smoke-prompts", "3"]) == 2
    assert "--smoke-prompts does not apply with --learn" in capsys.readouterr().err


def test_engine_args_parse_as_yaml_values_over_a_base():
    args = argparse.Namespace(
        engine_arg=["gpu_memory_utilization=0.5", "dtype=float32", "enforce_eager=true"], kv_cache_gib=1.5
    )
    assert engine_args_from(args, {"seed": 0, "dtype": "bfloat16"}) == {
        "seed": 0,
        "dtype": "float32",
        "gpu_memory_utilization": 0.5,
        "enforce_eager": True,
        "kv_cache_memory_bytes": int(1.5 * (1 << 30)),
    }


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--engine-arg", "gpu_memory_utilization"], "expected KEY=VALUE"),
        (["--kv-cache-gib", "0"], "must be > 0"),
    ],
)
def test_bad_engine_settings_are_refused_naming_the_flag(argv, message, tmp_path, capsys):
    data = tmp_path / "q.jsonl"
    data.write_text('{"id": "1", "question": "q?", "golden_answers": ["a"]}\n')
    rc = main(["rollout", "--data", str(data), "--out", str(tmp_path / "o.jsonl"), *argv])
    err = capsys.readouterr().err
    assert rc == 2 and message in err and argv[0] in err


def test_token_view_escapes_control_characters():
    """The printed view of one episode (a random model writes NUL bytes and newlines)."""
    from parallelsearch.training.one_step import SmokeEpisode, format_episode
    from parallelsearch.training.rollouts import PART_TERMS

    terms = dict.fromkeys((*PART_TERMS, "format_valid", "search_rounds", "subqueries", "search_errors"), 0.0)
    ep = SmokeEpisode(
        "q?", 0.1, terms, 10, 4, 6, 1, "ok", False,
        [("action", "<search> a\x00 </search>\n\n"), ("observation", "<information>x</information>")],
    )  # fmt: skip
    lines = format_episode(1, ep)
    assert lines[3] == "  + action      | <search> a\\x00 </search>\\n\\n"
    assert lines[4] == "  - observation | <information>x</information>"
    assert "action 4 in 1 turn(s) (trained), observation 6 (masked)" in lines[2]
    assert lines[2].endswith("action_mask == the engine's turns: yes")
    bad = SmokeEpisode(
        "q?", 0.1, terms, 10, 4, 6, 1, "1 observation token(s) in the action mask, first at 14", False
    )
    assert format_episode(1, bad)[2].endswith(
        "turns: NO (1 observation token(s) in the action mask, first at 14)"
    )
