"""The engine/trainer log-prob mismatch: the preset turns on OpenRLHF 0.11.2's importance-sampling
correction (truncated IS at 2), which makes OpenRLHF ask vLLM for the sampled tokens' log-probs and
weigh each token's loss by pi_train / pi_engine, logging the mismatch as ``vllm_kl`` each step.
The loss is OpenRLHF's own ``PolicyLoss``, built as its actor builds it from the parsed command."""

from __future__ import annotations

import ast
import importlib.util
import math
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from parallelsearch.rl.openrlhf_cli import check_command  # noqa: E402
from parallelsearch.rl.openrlhf_command import openrlhf_args  # noqa: E402
from parallelsearch.rl.train_config import paper_preset  # noqa: E402


def openrlhf_policy_loss() -> Any:
    """OpenRLHF's ``PolicyLoss`` from its source (``openrlhf.models`` imports peft at the top)."""
    import typing

    import torch.distributed as dist
    import torch.nn.functional as F
    from torch import nn

    root = Path(next(iter(importlib.util.find_spec("openrlhf").submodule_search_locations))) / "models"
    ns: dict[str, Any] = {
        "torch": torch,
        "nn": nn,
        "F": F,
        "dist": dist,
        "Optional": typing.Optional,
        "Tuple": tuple,
    }
    for file, names in (("utils.py", {"masked_mean"}), ("loss.py", {"aggregate_loss", "PolicyLoss"})):
        tree = ast.parse((root / file).read_text(encoding="utf-8"))
        nodes = [n for n in tree.body if isinstance(n, ast.FunctionDef | ast.ClassDef) and n.name in names]
        exec(compile(ast.Module(body=nodes, type_ignores=[]), str(root / file), "exec"), ns)  # noqa: S102
    return ns["PolicyLoss"]


def actor_loss(cfg) -> Any:
    """The loss OpenRLHF's actor builds from ``cfg``'s command (ppo_actor.py's arguments)."""
    args = check_command(openrlhf_args(cfg))
    adv = args.algo.advantage
    return args, openrlhf_policy_loss()(
        clip_eps_low=args.actor.eps_clip_low_high[0],
        clip_eps_high=args.actor.eps_clip_low_high[1],
        is_correction_level=adv.is_correction_level,
        is_correction_mode=adv.is_correction_mode,
        is_correction_gating=adv.is_correction_gating,
        is_correction_threshold=adv.is_correction_threshold,
    )


def test_the_preset_corrects_the_mismatch_with_truncated_importance_sampling():
    args, loss_fn = actor_loss(paper_preset())
    adv = args.algo.advantage
    assert (adv.is_correction_level, adv.is_correction_mode, adv.is_correction_gating) == (
        "token",
        "clip",
        "ratio",
    )
    assert adv.is_correction_threshold == [0.0, 2.0]
    # OpenRLHF's rollout asks vLLM for the sampled tokens' log-probs exactly when the level is not off
    # (samples_generator: logprobs=1 if is_correction_level != "off"), and the engine returns them processed
    assert adv.is_correction_level != "off"
    # two tokens the engine sampled with 3x and 1.5x less probability than the trainer gives them
    old = torch.tensor([[-1.0, -1.0]])
    rollout = old - torch.tensor([[math.log(3.0), math.log(1.5)]])
    mask = torch.ones_like(old)
    loss, _, _, vllm_kl, filtered = loss_fn(
        old, old, torch.ones_like(old), action_mask=mask, rollout_log_probs=rollout
    )
    assert loss.item() == pytest.approx(-(2.0 + 1.5) / 2)  # the 3x ratio truncated at 2
    assert vllm_kl.item() == pytest.approx(-(math.log(3.0) + math.log(1.5)) / 2)  # logged per step
    assert filtered.item() == pytest.approx(0.5)
    # off: no flag, OpenRLHF's default level off, the loss ignores the engine's log-probs
    args, off = actor_loss(paper_preset(is_correction="off"))
    assert args.algo.advantage.is_correction_level == "off"
    assert "--algo.advantage.is_correction_threshold" not in openrlhf_args(paper_preset(is_correction="off"))
    loss, _, _, vllm_kl, _ = off(old, old, torch.ones_like(old), action_mask=mask, rollout_log_probs=rollout)
    assert loss.item() == pytest.approx(-1.0) and vllm_kl is None


def test_icepop_drops_tokens_outside_the_band():
    args, loss_fn = actor_loss(paper_preset(is_correction="icepop", is_clip=(0.5, 2.0)))
    assert args.algo.advantage.is_correction_mode == "mask"
    old = torch.tensor([[-1.0, -1.0]])
    rollout = old - torch.tensor([[math.log(3.0), math.log(1.5)]])
    loss, *_ = loss_fn(
        old, old, torch.ones_like(old), action_mask=torch.ones_like(old), rollout_log_probs=rollout
    )
    assert loss.item() == pytest.approx(-(0.0 + 1.5) / 2)


def test_a_clip_band_that_excludes_1_is_refused():
    with pytest.raises(ValueError, match=r"is_clip: must be \(low, high\) with 0 <= low < 1 < high"):
        paper_preset(is_clip=(1.5, 3.0))
