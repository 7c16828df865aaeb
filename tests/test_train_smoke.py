"""``parallelsearch train --smoke`` end to end in the vLLM tier: OpenRLHF's rollout actor on a real vLLM
CPU engine, the tiny model built by the package, a real /retrieve server over the demo store, one
PolicyLoss step. Asserts on what the command prints: per episode the reward terms and the token view
(trained action spans vs masked observation spans), then a finite loss."""

from __future__ import annotations

import math
import re

import pytest

from parallelsearch.cli import main

pytestmark = pytest.mark.vllm
pytest.importorskip("vllm", reason="the vLLM tier runs in .venv-vllm (make test-vllm)")
pytest.importorskip("openrlhf", reason="OpenRLHF is installed with --no-deps in the vLLM tier")


def test_train_smoke_prints_masks_rewards_and_a_finite_loss(tmp_path, capsys):
    rc = main(["train", "--smoke", "--smoke-dir", str(tmp_path / "smoke"), "--kv-cache-gib", "1"])
    out = capsys.readouterr().out
    assert rc == 0, out
    episodes = re.findall(r"^episode \d+: ", out, flags=re.M)
    assert len(episodes) == 4  # 2 prompts x 2 samples
    assert out.count("action_mask == generated spans: yes") == 4 and "spans: NO" not in out
    rewards = re.findall(
        r"reward (-?\d+\.\d+) = outcome (\S+) \+ decomposition (\S+) \+ search_count (\S+)", out
    )
    assert len(rewards) == 4
    actions = re.findall(r"^  \+ action +\| (.*)$", out, flags=re.M)
    observations = re.findall(r"^  - observation \| (.*)$", out, flags=re.M)
    assert actions and all("<information>" not in a for a in actions)
    # constrained decoding makes the random model search: real passages come back, masked
    assert any("<information>Doc 1(Title: " in o for o in observations), observations
    trained = re.findall(r"action (\d+) in (\d+) turn\(s\) \(trained\), observation (\d+) \(masked\)", out)
    assert len(trained) == 4 and all(int(a) > 0 for a, _, _ in trained)
    assert sum(int(o) for _, _, o in trained) > 0
    loss = re.search(r"PolicyLoss step: loss (\S+), grad norm (\S+), (\d+) parameter tensors changed", out)
    assert loss and math.isfinite(float(loss.group(1))) and int(loss.group(3)) > 0
    assert (tmp_path / "smoke" / "tiny-llama" / "config.json").is_file()
    assert (tmp_path / "smoke" / "agent.json").is_file()
