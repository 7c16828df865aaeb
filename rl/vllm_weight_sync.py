"""The vLLM worker extension of the CPU training smoke: OpenRLHF's ``WorkerWrap`` plus a weight update
that works on vLLM's CPU backend.

vLLM loads this class by name inside its engine process (``worker_extension_cls``), so OpenRLHF's
import stands at the top, as in the agent module OpenRLHF loads by path. OpenRLHF's own
``update_weight`` receives each tensor by an NCCL broadcast into CUDA memory and calls the model's
``load_weights``; on CPU there is no broadcast and vLLM repacks its linear weights after loading, so a
second ``load_weights`` cannot find its loaders. Here the weights arrive as one safetensors blob over
vLLM's RPC and go through vLLM's in-place ``reload_weights``, which handles the repacked layers.
"""

from __future__ import annotations

from openrlhf.trainer.ray.vllm_worker_wrap import WorkerWrap


class CpuWeightSync(WorkerWrap):
    """OpenRLHF's worker extension with the CPU counterpart of its weight broadcast."""

    def update_weights_cpu(self, blob: bytes) -> int:
        """Load every tensor of ``blob`` (``safetensors.torch.save`` of the actor's named parameters)
        into the engine's model; returns how many were loaded."""
        from safetensors.torch import load

        weights = load(bytes(blob))
        self.reload_weights(weights_iterator=iter(weights.items()))
        return len(weights)
