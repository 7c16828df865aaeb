"""OpenRLHF's rollout actor over a real vLLM engine on the tiny model, as the vLLM-tier tests
build it (the way ``train_ppo_ray`` does, minus Ray) and drive it (``generate_responses`` with
the sampling parameters OpenRLHF sends)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

#: vLLM's engine settings in these tests (fp32 on CPU, no CUDA graphs, reproducible sampling)
ENGINE_ARGS: dict[str, Any] = {
    "dtype": "float32",
    "max_model_len": 16384,
    "enforce_eager": True,
    "seed": 0,
    "enable_prefix_caching": True,
}


@pytest.fixture(scope="module", name="tokenizer")
def tokenizer_fixture(tiny_model_dir: Path) -> Any:
    """The tiny model's tokenizer (the ``tokenizer`` fixture of the modules that import this)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


@contextlib.contextmanager
def rollout_actor(
    model_dir: Path, agent_yaml: Path, monkeypatch: Any, loop: asyncio.AbstractEventLoop
) -> Iterator[Any]:
    """The actor running this project's executor from the agent config ``agent_yaml`` (named by
    its environment variable, as every Ray actor reads it); its engine shut down on exit."""
    from parallelsearch.rl.agent_config import ENV_VAR
    from parallelsearch.rl.openrlhf_cpu import rollout_actor_in_process

    monkeypatch.setenv(ENV_VAR, str(agent_yaml))
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")
    actor = loop.run_until_complete(rollout_actor_in_process(str(model_dir), **ENGINE_ARGS))
    try:
        yield actor
    finally:
        actor.llm.shutdown()
        actor.llm = None  # released now, not by the interpreter's exit


def responses(
    actor: Any, loop: asyncio.AbstractEventLoop, record: dict, tokenizer: Any, *, samples: int, max_len: int
) -> list[dict]:
    """``samples`` episodes of one training record through ``actor.generate_responses``."""
    from parallelsearch.rl.openrlhf_cpu import samples_generator_params

    return loop.run_until_complete(
        actor.generate_responses(
            prompt=record["prompt"],
            label=record["label"],
            sampling_params=samples_generator_params(),
            max_length=max_len,
            hf_tokenizer=tokenizer,
            num_samples=samples,
        )
    )
