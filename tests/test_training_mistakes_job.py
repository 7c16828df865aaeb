"""The job runs what its check promises, and the mistakes that passed ``train --check`` silently
are stopped or named (docs/training.md, "The pre-flight check"): the run's length computed once on
the file the job ships; reward weights far from their mode's; repeated records and colliding ids;
a file whose template changes after its first prompts; a template that never teaches ``##`` under
a reward that pays for it; an observation cap smaller than a passage; a budget with room for one
sub-query; a reused job folder; a gateway factory's module left behind, or a factory returning no
agent; too many passes over a small file.

Real parts: OpenRLHF's own parser, the written ``command.sh`` run by bash with the real
``parallelsearch`` CLI as its check and a stand-in ``ray`` executable (named as such: Ray cannot
run here) recording what it would submit.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import fill_batch
from test_rl_job import standins
from test_training_mistakes import QUESTIONS, write_data
from test_training_mistakes_run import refused, skip_probe_check

from parallelsearch.cli import main
from parallelsearch.rl.schedule import passes, schedule_line
from parallelsearch.rl.train_config import paper_preset

#: the issue's file: 1,300 prompts, 3 rollout steps a pass at 512 a batch, 335 passes for 1,005 steps
PROMPTS = 1300
PASSES = round(1005 / 3)


def run_command_sh(job: Path, tmp_path: Path) -> tuple[str, list[str]]:
    """``bash command.sh`` from another directory, its check run by the real CLI and ``ray`` a
    stand-in: (what the check printed, the arguments ray was given)."""
    log = tmp_path / "standin.log"
    env = {
        **os.environ,
        "PATH": f"{standins(tmp_path)}:{os.environ['PATH']}",
        "STANDIN_LOG": str(log),
        "PARALLELSEARCH_CLI": str(Path(sys.executable).parent / "parallelsearch"),
    }
    env.pop("PARALLELSEARCH_SKIP_CHECK", None)
    res = subprocess.run(
        ["bash", str(job / "command.sh")], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert res.returncode == 0, res.stdout + res.stderr
    return res.stdout, [x.removeprefix("arg=") for x in log.read_text().splitlines()[2:]]


def checked_passes(out: str) -> int:
    """The passes of the check's ``run length`` line."""
    found = re.search(r"run length: (\d+) prompts, (\d+) rollout steps a pass x (\d+) passes", out)
    assert found, out
    return int(found.group(3))


# -- the run's length: the command runs what the check says -----------------------------------------


@pytest.mark.parametrize("layout", ["copied", "absolute", "another folder"])
def test_command_sh_runs_the_length_its_check_states(layout, tmp_path, monkeypatch, capsys):
    """The job's prompt_data is the folder's copy, ``data/train.jsonl``; it was counted relative to the
    directory ``train`` ran in: missing there (15 passes) or another file (here 300 prompts, 1,005
    passes), while the check counted the real file (335 passes)."""
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    here = tmp_path / "here"
    decoy = write_data(here / "data" / "train.jsonl", fill=300)  # another run's data where train runs
    data = write_data(tmp_path / "made" / "train.jsonl", fill=PROMPTS)
    given = {
        "copied": ["--set", "prompt_data=../made/train.jsonl"],
        "absolute": ["--set", f"prompt_data={data}", "--set", "copy_data=false"],
        "another folder": ["--set", "prompt_data=../made/train.jsonl", "--set", "copy_data=false"],
    }[layout]
    monkeypatch.chdir(here)
    job = tmp_path / "job"
    argv = ["train", "--preset", "paper", "--runner", "print", "--skip-probe", "--set", f"job_dir={job}"]
    assert main([*argv, *given]) == 0
    printed = capsys.readouterr().out
    assert decoy.is_file() and checked_passes(printed) == PASSES
    out, args = run_command_sh(job, tmp_path)
    episodes = int(args[args.index("--train.num_episodes") + 1])
    assert episodes == checked_passes(out) == PASSES, out
    assert f"--train.num_episodes {PASSES}" in printed.replace(" \\\n    ", " ")


def test_the_docs_state_the_schedule_the_code_computes():
    """docs/training.md's run length and warm-up of the official file are this computation's line."""
    cfg = paper_preset()
    line = schedule_line(cfg, passes(cfg, 169_615))
    docs = (Path(__file__).resolve().parents[1] / "docs" / "training.md").read_text(encoding="utf-8")
    assert line in docs.replace("\n", " "), line


@pytest.mark.parametrize("name", ["PeterJinGo/nq_hotpotqa_train", "folder"])
def test_data_that_cannot_be_counted_needs_num_episodes(name, tmp_path, capsys):
    """A hub dataset name was "not checked" and ran the default 15 passes; a folder the same."""
    if name == "folder":
        (tmp_path / "folder").mkdir()
        name = str(tmp_path / "folder")
    refused(
        capsys,
        skip_probe_check(f"prompt_data={name}"),
        f"prompt_data {name} is not a local file this machine can count",
        "total_training_steps 1005 cannot become whole passes",
        "set total_training_steps=null and num_episodes=N",
    )
    refused(
        capsys,
        skip_probe_check(f"prompt_data={name}", "total_training_steps=null"),
        "the default num_episodes 15 passes of a dataset of unknown size: set num_episodes=N",
    )
    given = ["--set", f"prompt_data={name}", "--set", "total_training_steps=null", "--set", "num_episodes=3"]
    assert main(["train", "--preset", "paper", "--check", "--skip-probe", *given]) == 0
    assert "not checked: run length: " in capsys.readouterr().out
    assert main(["train", "--preset", "paper", "--dry-run", "--skip-probe", *given]) == 0
    assert "--train.num_episodes 3" in capsys.readouterr().out.replace(" \\\n    ", " ")


def test_many_passes_over_a_small_file_are_warned(tmp_path, capsys):
    """335 passes over 1,300 prompts printed an ``ok:`` line."""
    data = write_data(tmp_path / "train.jsonl", fill=PROMPTS)
    assert skip_probe_check(f"prompt_data={data}") == 0
    out = capsys.readouterr().out
    assert (
        f"warning: run length: {PASSES} passes over prompt_data (total_training_steps 1005 over 1300" in out
    )
    assert "more than 50" in out and "fewer total_training_steps" in out
    big = write_data(tmp_path / "big.jsonl", fill=512 * 40)  # 40 steps a pass: 25 passes
    assert skip_probe_check(f"prompt_data={big}") == 0
    assert "warning: run length" not in capsys.readouterr().out
