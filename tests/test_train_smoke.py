"""``parallelsearch train --smoke`` end to end in the vLLM tier: OpenRLHF's rollout actor on a real vLLM
CPU engine, the tiny model built by the package, a real /retrieve server over the demo store, the paper
preset's agent config by default. Asserts on what the command prints: per episode the reward terms and
the token view with the action-mask check against the engine's turns, then the training step, the
weight sync and its check; and that ``--set`` reaches the agent config."""

from __future__ import annotations

import math
import re

import pytest
import yaml
from conftest import long_work

from parallelsearch.cli import main

pytestmark = [pytest.mark.vllm, long_work]  # the one-step smoke
pytest.importorskip("vllm", reason="the vLLM tier runs in .venv-vllm (make test-vllm)")
pytest.importorskip("openrlhf", reason="OpenRLHF is installed with --no-deps in the vLLM tier")


def test_train_smoke_prints_checked_masks_a_step_and_a_synced_engine(tmp_path, capsys):
    work = tmp_path / "smoke"
    rc = main(
        ["train", "--smoke", "--smoke-dir", str(work), "--smoke-samples", "2", "--kv-cache-gib", "1",
         "--set", "agent.graph_config.top_k=2"]
    )  # fmt: skip
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "reward paper-strict, chat template on, constrained decoding off, group_norm advantages" in out
    assert re.search(r"warm start: 4 teacher episodes .*; weights synced into the engine", out, flags=re.S)
    assert len(re.findall(r"^episode \d+: ", out, flags=re.M)) == 4  # 2 prompts x 2 samples
    assert out.count("action_mask == the engine's turns: yes") == 4 and "turns: NO" not in out
    assert len(re.findall(r"reward (-?\d+\.\d+) = outcome (\S+) \+ decomposition (\S+)", out)) == 4
    actions = re.findall(r"^  \+ action +\| (.*)$", out, flags=re.M)
    observations = re.findall(r"^  - observation \| (.*)$", out, flags=re.M)
    assert actions and observations and all("<information>" not in a for a in actions)
    assert any('<information>Doc 1(Title: "' in o for o in observations)  # the warm-started model searches
    assert re.search(r"prompt \d+ \(masked\), action [1-9]\d* in \d turn\(s\) \(trained\)", out)
    step = re.search(r"PolicyLoss (\S+), grad norm (\S+), (\d+) parameter tensors changed", out)
    assert step and math.isfinite(float(step.group(1))) and "; weights synced" in out
    sync = re.search(r"\|engine - actor\| log-prob (\S+) \(shifted mask (\S+)\)", out)
    assert sync and float(sync.group(1)) <= 0.05 < float(sync.group(2))
    # the user's --set reached the agent config every rollout actor read
    agent = yaml.safe_load((work / "agent.yaml").read_text())
    assert agent["graph_config"]["top_k"] == 2 and agent["reward"]["mode"] == "paper-strict"
    assert (work / "tiny-llama" / "config.json").is_file() and (work / "prompts.jsonl").is_file()
