"""One PPO actor on this CPU, made of OpenRLHF 0.11.2's own parts: experiences as its samples generator
and experience maker make them, group advantages by its ``compute_advantages_and_returns``,
``PolicyLoss`` steps on its ``Actor`` (fp32), and the weights synced into the vLLM engine after each
step, as its ``broadcast_to_vllm`` does on GPUs.

What stands in for the cluster: the actor's forward pass runs here instead of in Ray actors (the one
method of ``RemoteExperienceMaker`` replaced), the optimizer is torch's Adam with the arguments'
settings instead of DeepSpeed's, at a constant learning rate, and there is no reference model (no KL
term) and no critic (the smoke's estimators need none).
"""

from __future__ import annotations

import random
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass
class StepStats:
    """What one training step did (OpenRLHF's status names where it has them)."""

    policy_loss: float
    grad_norm: float
    ppo_clip_ratio: float
    optimizer_steps: int
    parameters_changed: int
    #: mean over action tokens of advantage x (log-prob after - before the step): > 0 when the step moved
    #: the policy toward the actions its advantages favour (the direction of the step)
    advantage_weighted_change: float


class CpuTrainer:
    """OpenRLHF's actor, loss and advantage code over one model folder, driven from one process."""

    def __init__(
        self, model_dir: Path, args: Any, tokenizer: Any, *, train_layers: int | None = None
    ) -> None:
        from parallelsearch.rl.openrlhf_cpu import import_openrlhf_models

        models = import_openrlhf_models()
        from openrlhf.trainer.ppo_utils.experience_maker import RemoteExperienceMaker
        from openrlhf.trainer.ppo_utils.kl_controller import FixedKLController

        self.args = args
        self.tokenizer = tokenizer
        self.actor = models.Actor(
            str(model_dir),
            attn_implementation="sdpa",
            param_dtype="bf16",
            temperature=args.rollout.temperature,
        )
        self.actor.model.float()  # fp32: the engine runs fp32 too, so their log-probs agree
        if train_layers is not None:
            freeze_below(self.actor.model, train_layers)
        self.optimizer = self.new_optimizer()
        low, high = args.actor.eps_clip_low_high
        self.loss_fn = models.PolicyLoss(
            clip_eps_low=low,
            clip_eps_high=high,
            dual_clip=args.actor.dual_clip,
            token_level_loss=args.actor.loss_agg_mode == "token-mean",
            policy_loss_type=args.actor.policy_loss_type,
            is_correction_level=args.algo.advantage.is_correction_level,
            is_correction_mode=args.algo.advantage.is_correction_mode,
            is_correction_gating=args.algo.advantage.is_correction_gating,
            is_correction_threshold=args.algo.advantage.is_correction_threshold,
        )  # as PPOActor builds it
        maker = RemoteExperienceMaker.__new__(RemoteExperienceMaker)  # no Ray groups: see make_experiences
        maker.strategy = types.SimpleNamespace(args=args)
        maker.args = args
        maker.advantage_estimator = args.algo.advantage.estimator
        maker.tokenizer = tokenizer
        kl = args.algo.kl
        # the KL to the reference in the reward (use_loss off), as the experience maker adds it
        maker.kl_ctl = FixedKLController(0.0 if kl.use_loss else kl.init_coef)
        self.maker = maker
        self.reference: Any = None  # the warm start's actor, frozen (anchor)

    def anchor(self, weights: dict[str, Any]) -> None:
        """The reference policy the KL term pulls toward: ``weights`` (the warm start) in a frozen
        copy of the actor, as OpenRLHF's reference model holds the initial policy. Without a KL
        coefficient there is no reference (OpenRLHF's ``init_kl_coef`` 0 builds none either)."""
        import copy

        if not self.args.algo.kl.init_coef:
            self.reference = None
            return
        ref = copy.deepcopy(self.actor)
        ref.model.load_state_dict(weights)
        ref.eval()
        for p in ref.parameters():
            p.requires_grad_(False)
        self.reference = ref

    def new_optimizer(self) -> Any:
        """Adam with the arguments' settings (OpenRLHF's DeepSpeed Adam, here torch's)."""
        import torch

        adam = self.args.actor.adam
        return torch.optim.Adam(
            [p for p in self.actor.parameters() if p.requires_grad],
            lr=adam.lr,
            betas=tuple(adam.betas),
            eps=adam.eps,
            weight_decay=adam.weight_decay,
        )

    def weights(self) -> dict[str, Any]:
        """A copy of the actor's weights (to start another run from the same point)."""
        return {k: v.detach().clone() for k, v in self.actor.model.state_dict().items()}

    def save(self, folder: Path) -> Path:
        """The actor as a Hugging Face folder (weights, config, tokenizer and its chat template): what
        ``--policy vllm:FOLDER`` or ``hf:FOLDER`` loads, as a GPU run's saved checkpoint is."""
        folder.mkdir(parents=True, exist_ok=True)
        self.actor.model.save_pretrained(folder, safe_serialization=True)
        self.tokenizer.save_pretrained(folder)
        return folder

    def restore(self, weights: dict[str, Any]) -> None:
        """Back to ``weights`` with a fresh optimizer: a new run from the same start."""
        self.actor.model.load_state_dict(weights)
        self.optimizer = self.new_optimizer()

    def samples(self, responses: list[dict[str, Any]]) -> list[Any]:
        """OpenRLHF's ``SamplesGenerator._process_response_into_experience`` on each executor result."""
        from openrlhf.trainer.ppo_utils.samples_generator import SamplesGenerator

        gen = SamplesGenerator.__new__(SamplesGenerator)  # the method reads no state of the generator
        return [gen._process_response_into_experience(r, max_len=self.args.data.max_len) for r in responses]

    def log_probs(self, batch: Any, *, grad: bool = False, action_mask: Any = None) -> Any:
        """The actor's log-probs of ``batch``'s action tokens (OpenRLHF's ``Actor.forward``), or of
        those ``action_mask`` marks instead."""
        import torch

        mask = batch.action_mask if action_mask is None else action_mask
        with torch.set_grad_enabled(grad):
            self.actor.train(grad)
            return self.actor(batch.sequences, mask, attention_mask=batch.attention_mask)

    def make_experiences(self, samples: list[Any]) -> list[Any]:
        """``RemoteExperienceMaker.make_experience_batch`` with its Ray forward pass run here: micro-batches by
        its ``split_rollout_samples``, the actor's log-probs, then its ``compute_advantages_and_returns``.

        ``samples`` are prompt-major (a prompt's samples next to each other), as the generator returns them."""
        import torch
        from openrlhf.models.utils import compute_approx_kl, masked_mean

        kl_args = self.args.algo.kl
        batches = self.maker.split_rollout_samples(samples)
        for b in batches:
            b.action_log_probs = self.log_probs(b)
            b.values = None
            b.base_action_log_probs, b.kl = None, torch.zeros_like(b.action_log_probs)
            if self.reference is not None:
                with torch.no_grad():
                    base = self.reference(b.sequences, b.action_mask, attention_mask=b.attention_mask)
                if not kl_args.use_loss:  # as make_experience_batch: the per-token KL the reward pays
                    b.kl = compute_approx_kl(b.action_log_probs, base, kl_estimator=kl_args.estimator)
                b.base_action_log_probs = base if kl_args.use_loss else None
            b.info["kl"] = masked_mean(b.kl, b.action_mask, dim=-1)
        return self.maker.compute_advantages_and_returns(batches)

    def train(self, experiences: list[Any], seed: int) -> StepStats:
        """PPO epochs over the experiences as ``PPOActor.ppo_train`` runs them: shuffled single samples in
        micro-batches, ``train_batch_size`` samples per optimizer step, the gradient clipped to ``max_norm``."""
        import torch
        from openrlhf.trainer.ppo_utils.experience import (
            make_experience_batch,
            remove_padding_in_sequences,
            split_experience_batch,
        )

        items = remove_padding_in_sequences([i for e in experiences for i in split_experience_batch(e)])
        micro = self.args.train.micro_batch_size
        gas = max(self.args.train.batch_size // micro, 1)
        before = {n: p.detach().clone() for n, p in self.actor.named_parameters()}
        losses, norms, clips, steps = [], [], [], 0
        rng = random.Random(seed)
        for _ in range(self.args.train.max_epochs):
            rng.shuffle(items)
            chunks = [items[i : i + micro] for i in range(0, len(items), micro)]
            for k, chunk in enumerate(chunks):
                batch = make_experience_batch(chunk)
                log_probs = self.log_probs(batch, grad=True)
                loss, clip_ratio, _, _, _ = self.loss_fn(
                    log_probs,
                    batch.action_log_probs,
                    batch.advantages,
                    action_mask=batch.action_mask,
                    rollout_log_probs=batch.rollout_log_probs,
                )
                loss = loss + self.kl_loss(log_probs, batch)
                (loss / gas).backward()
                losses.append(float(loss.detach()))
                clips.append(float(clip_ratio))
                if (k + 1) % gas == 0 or k == len(chunks) - 1:
                    norms.append(
                        float(
                            torch.nn.utils.clip_grad_norm_(self.actor.parameters(), self.args.actor.max_norm)
                        )
                    )
                    self.optimizer.step()
                    self.optimizer.zero_grad()
                    steps += 1
        changed = sum(not torch.equal(before[n], p.detach()) for n, p in self.actor.named_parameters())
        return StepStats(
            advantage_weighted_change=self.direction(items),
            policy_loss=sum(losses) / len(losses),
            grad_norm=max(norms),
            ppo_clip_ratio=sum(clips) / len(clips),
            optimizer_steps=steps,
            parameters_changed=changed,
        )

    def kl_loss(self, log_probs: Any, batch: Any) -> Any:
        """OpenRLHF's KL loss to the reference (``use_kl_loss``), as ``PPOActor`` adds it: the
        estimator's KL per action token, its mean, times ``init_kl_coef``; 0 without it."""
        kl_args = self.args.algo.kl
        if self.reference is None or not kl_args.use_loss or batch.base_action_log_probs is None:
            return 0.0
        from openrlhf.models.utils import compute_approx_kl, masked_mean

        kl = compute_approx_kl(
            log_probs,
            batch.base_action_log_probs,
            log_probs_old=batch.action_log_probs,
            kl_estimator=kl_args.estimator,
            unbiased_gradient=kl_args.unbiased_gradient,
        )
        return masked_mean(kl, batch.action_mask) * kl_args.init_coef

    def direction(self, items: list[Any]) -> float:
        """The advantage-weighted change of the items' action log-probs since their experience was made."""
        from openrlhf.trainer.ppo_utils.experience import make_experience_batch

        total, tokens = 0.0, 0.0
        micro = self.args.train.micro_batch_size
        for i in range(0, len(items), micro):
            batch = make_experience_batch(items[i : i + micro])
            change = (self.log_probs(batch) - batch.action_log_probs) * batch.advantages * batch.action_mask
            total += float(change.sum())
            tokens += float(batch.action_mask.sum())
        return total / max(tokens, 1.0)

    async def sync(self, rollout_actor: Any) -> int:
        """The actor's weights into the engine (:func:`sync_weights`); the tensors loaded."""
        from parallelsearch.rl.openrlhf_cpu import sync_weights

        return await sync_weights(rollout_actor, self.actor.model)


def freeze_below(model: Any, top: int) -> int:
    """Freeze every weight but the top ``top`` decoder layers and the final norm (the embeddings, tied to
    the output layer in small models, stay frozen too); returns the number of trainable parameters."""
    layers = model.model.layers
    if top > len(layers):
        raise ValueError(f"--smoke-train-layers {top}: the model has {len(layers)} layers")
    for p in model.parameters():
        p.requires_grad_(False)
    for part in [*layers[len(layers) - top :], model.model.norm]:
        for p in part.parameters():
            p.requires_grad_(True)
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
