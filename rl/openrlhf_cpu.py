"""Import OpenRLHF 0.11.2's real rollout and loss modules on a CPU machine (``train --smoke``, vLLM tier),
and sync a trained model's weights into the rollout actor's engine.

``openrlhf.models`` imports ``flash_attn`` at module level, which has no CPU build: while it
imports, STAND-IN modules that raise if called (only packing and ring attention call them)
take flash_attn's names, and are removed afterwards. Everything else is OpenRLHF's code, except
the weight update's transport (:mod:`parallelsearch.rl.vllm_weight_sync`: no NCCL on a CPU).
"""

from __future__ import annotations

import importlib.machinery
import os
import sys
import types
from pathlib import Path
from typing import Any

#: the engine's worker extension: OpenRLHF's ``WorkerWrap`` with the CPU weight update
WORKER_EXTENSION = "parallelsearch.rl.vllm_weight_sync.CpuWeightSync"
_STUBS = ("flash_attn", "flash_attn.bert_padding", "flash_attn.utils", "flash_attn.utils.distributed")


def _stand_in(name: str) -> types.ModuleType:
    mod = types.ModuleType(name)
    mod.__spec__ = importlib.machinery.ModuleSpec(name, loader=None)

    def unavailable(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(f"{name} is a CPU stand-in: flash-attn cannot run here")

    for attr in ("pad_input", "unpad_input", "index_first_axis", "rearrange", "all_gather"):
        setattr(mod, attr, unavailable)
    return mod


def import_openrlhf_models() -> types.ModuleType:
    """``openrlhf.models`` with flash_attn stood in only while it imports."""
    import peft  # noqa: F401 - these probe find_spec("flash_attn") themselves: import them first
    import transformers  # noqa: F401

    added = [n for n in _STUBS if n not in sys.modules]
    for name in added:
        sys.modules[name] = _stand_in(name)
    try:
        import openrlhf.models as models
    finally:
        for name in added:
            sys.modules.pop(name, None)
    return models


def preprocess_data() -> Any:
    """OpenRLHF's ``preprocess_data`` (how its prompt dataset templates a record), loaded from its file:
    ``openrlhf.datasets``' package imports Hugging Face ``datasets``, which its prompt code never uses."""
    import importlib.util

    spec = importlib.util.find_spec("openrlhf")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("openrlhf is not installed")
    path = Path(next(iter(spec.submodule_search_locations))) / "datasets" / "prompts_dataset.py"
    module_spec = importlib.util.spec_from_file_location("openrlhf_prompts_dataset", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module.preprocess_data


async def rollout_actor_in_process(model: str, **engine_args: Any) -> Any:
    """OpenRLHF's ``RolloutRayActor`` constructed without Ray (its own ``__init__``, awaited), for
    one CPU engine of ``model`` that runs this project's agent: the arguments ``create_vllm_engines``
    passes for one engine are set here once (its worker extension with :func:`sync_weights`' update,
    and ``logprobs_mode="processed_logprobs"``, as it passes when log-probs are compared with the
    actor's: taken after temperature, as the actor divides by it); ``engine_args`` (vLLM's) go on top."""
    from parallelsearch.rl.launch import agent_module_path

    kwargs: dict[str, Any] = {
        "distributed_executor_backend": "uni",
        "worker_extension_cls": WORKER_EXTENSION,
        "num_gpus": 0,
        "full_determinism": False,
        "agent_func_path": str(agent_module_path()),
        "logprobs_mode": "processed_logprobs",
        **engine_args,
        "model": model,
    }
    import_openrlhf_models()
    from openrlhf.trainer.ray.vllm_engine import RolloutRayActor

    cls = RolloutRayActor.__ray_metadata__.modified_class  # the plain class; its __init__ is async
    actor = cls.__new__(cls)
    placeholder = "RAY_ADDRESS" not in os.environ  # else _configure_vllm_env asks Ray's GCS
    if placeholder:
        os.environ["RAY_ADDRESS"] = "in-process-without-ray"
    try:
        await cls.__init__(actor, **kwargs)
    finally:
        if placeholder:
            os.environ.pop("RAY_ADDRESS", None)
    return actor


def samples_generator_params(**overrides: Any) -> Any:
    """The vLLM ``SamplingParams`` OpenRLHF's ``SamplesGenerator._dispatch_prompts_to_vllm``
    builds (``logprobs=1``: its off-policy correction on; special tokens kept), ``overrides`` on top."""
    import vllm

    kw: dict[str, Any] = {
        "temperature": 1.0,
        "top_p": 1.0,
        "top_k": -1,
        "max_tokens": None,
        "min_tokens": 1,
        "skip_special_tokens": False,
        "logprobs": 1,
    }
    return vllm.SamplingParams(**{**kw, **overrides})


async def sync_weights(actor: Any, model: Any) -> int:
    """``model``'s weights into the rollout ``actor``'s engine; returns the tensors loaded.

    What ``PPOActor.broadcast_to_vllm`` does on GPUs, in its order: the prefix cache reset (cached
    KV blocks belong to the old weights), then every named parameter sent to the engine's workers,
    here as one safetensors blob through vLLM's ``collective_rpc`` instead of an NCCL broadcast."""
    from safetensors.torch import save

    blob = save({name: p.detach().contiguous() for name, p in model.named_parameters()})
    await actor.reset_prefix_cache()
    loaded = await actor.llm.collective_rpc("update_weights_cpu", args=(blob,))
    return int(loaded[0])
