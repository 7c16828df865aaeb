"""Why the learning smoke's control falls: the same update rule with no signal, measured on the tiny
model without vLLM (``python benchmarks/control_drift.py``; about a minute on a quiet CPU).

The tiny model is fitted on the teacher's first turn of both plans (``A ## B`` and ``A`` alone), then
trained 20 steps with OpenRLHF's ``PolicyLoss`` (token-mean, clip 0.2, truncated IS), Adam at the
smoke's 1e-3 and gradient clipping at 1, two optimizer steps of 32 samples per step of 16 prompts x 4
samples, on the first turn's reward (0.1 for a valid search, 0.45 more for a decomposed one), with
group-normalised advantages. Three updates: the reward's (signal), rewards shuffled among all the
step's samples (the smoke's old control) and among each prompt's samples (its new control). Each
reports the held-out valid-search and decomposition rates, the mean log-prob of the teacher's turns
(how much of the warm start is left) and the distance the weights moved.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import re
import statistics

import torch

from parallelsearch.data import load_questions
from parallelsearch.demo_data import HOTPOTQA_SAMPLE
from parallelsearch.rl.openrlhf_cpu import import_openrlhf_models
from parallelsearch.rl.tiny_model import build_model, build_tokenizer
from parallelsearch.training.teacher import PLANS, teacher_turns

VALID = re.compile(r"^<think> I need to search </think>\n<search> ([^<>]+?) </search>")
NEW_TOKENS = 24


def reward(text: str) -> float:
    m = VALID.match(text)
    return 0.0 if not m else 0.1 + (0.45 if "##" in m.group(1) else 0.0)


def prompt_of(q: dict) -> str:
    return f"<|im_start|>user\nQuestion: {q['question']}<|im_end|>\n<|im_start|>assistant\n"


def token_logprobs(model, seqs: torch.Tensor, start: int) -> torch.Tensor:
    logits = model(seqs).logits[:, start - 1 : -1].float()
    return torch.log_softmax(logits, -1).gather(-1, seqs[:, start:, None])[..., 0]


def fit(model, tok, questions, steps: int = 150) -> list[tuple[str, str]]:
    pairs = [(prompt_of(q), teacher_turns(q, plan)[0]) for q in questions for plan in PLANS]
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    rng = random.Random(0)
    for _ in range(steps):
        batch = rng.sample(pairs, 16)
        loss = -sum(seq_logprob(model, tok, p, a) for p, a in batch) / len(batch)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return pairs


def seq_logprob(model, tok, prompt: str, action: str) -> torch.Tensor:
    p = tok(prompt, add_special_tokens=False)["input_ids"]
    a = tok(action, add_special_tokens=False)["input_ids"]
    return token_logprobs(model, torch.tensor([p + a]), len(p)).mean()


def sample(model, tok, prompts: list[str], seed: int) -> tuple[list[torch.Tensor], list[str]]:
    torch.manual_seed(seed)
    seqs, texts = [], []
    with torch.no_grad():
        for p in prompts:
            ids = torch.tensor([tok(p, add_special_tokens=False)["input_ids"]])
            out = model.generate(
                ids,
                do_sample=True,
                temperature=1.0,
                top_k=0,
                max_new_tokens=NEW_TOKENS,
                min_new_tokens=NEW_TOKENS,
                pad_token_id=0,
            )
            seqs.append(out[0])
            texts.append(tok.decode(out[0, ids.shape[1] :]))
    return seqs, texts


def advantages(rewards: list[float], group: int) -> torch.Tensor:
    r = torch.tensor(rewards).reshape(-1, group)
    return ((r - r.mean(-1, keepdim=True)) / (r.std(-1, keepdim=True) + 1e-9)).reshape(-1)


def rl_step(model, opt, loss_fn, tok, prompts, seed, mode, rng, ref=None, kl_coef: float = 0.0) -> None:
    seqs, texts = sample(model, tok, prompts, seed)
    rewards = [reward(t) for t in texts]
    if mode == "step":
        rng.shuffle(rewards)
    elif mode == "group":
        for i in range(0, len(rewards), 4):
            chunk = rewards[i : i + 4]
            rng.shuffle(chunk)
            rewards[i : i + 4] = chunk
    adv = advantages(rewards, 4)

    def lps(m: list[int]) -> torch.Tensor:  # every action is NEW_TOKENS long; prompts differ
        return torch.cat([token_logprobs(model, seqs[i][None], len(seqs[i]) - NEW_TOKENS) for i in m])

    with torch.no_grad():
        old = lps(list(range(len(seqs))))
        base = None
        if ref is not None and kl_coef:
            base = torch.cat(
                [token_logprobs(ref, seqs[i][None], len(seqs[i]) - NEW_TOKENS) for i in range(len(seqs))]
            )
    order = list(range(len(seqs)))
    rng.shuffle(order)
    for k in range(0, len(order), 32):
        idx = order[k : k + 32]
        opt.zero_grad()
        for j in range(0, len(idx), 16):
            m = idx[j : j + 16]
            lp = lps(m)
            mask = torch.ones_like(lp)
            loss, *_ = loss_fn(
                lp, old[m], adv[m, None].expand_as(lp), action_mask=mask, rollout_log_probs=old[m]
            )
            if base is not None:  # OpenRLHF's use_kl_loss: k3 to the reference (the warm start)
                from openrlhf.models.utils import compute_approx_kl

                kl = compute_approx_kl(lp, base[m], kl_estimator="k3")
                loss = loss + kl_coef * kl.mean()
            (loss / 2).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()


def measure(model, tok, held, pairs, start_w, seed) -> dict:
    prompts = [prompt_of(q) for q in held for _ in range(6)]
    _, texts = sample(model, tok, prompts, seed)
    valid = [bool(VALID.match(t)) for t in texts]
    with torch.no_grad():
        teacher = statistics.fmean(float(seq_logprob(model, tok, p, a)) for p, a in pairs)
    dist = math.sqrt(sum(float(((p.detach() - start_w[n]) ** 2).sum()) for n, p in model.named_parameters()))
    return {
        "valid": round(statistics.fmean(valid), 3),
        "decomposed": round(
            statistics.fmean("##" in t for t, v in zip(texts, valid, strict=True) if v)
            if any(valid)
            else 0.0,
            3,
        ),
        "reward": round(statistics.fmean(reward(t) for t in texts), 4),
        "teacher_logprob": round(teacher, 4),
        "distance": round(dist, 4),
    }


def run(seed: int, steps: int, lr: float = 1e-3, kl_coef: float = 0.0, modes=("signal", "step")) -> dict:
    models = import_openrlhf_models()
    qs = [q for q in load_questions(HOTPOTQA_SAMPLE) if (q.get("metadata") or {}).get("type") == "comparison"]
    train, held = qs[: len(qs) - 12], qs[len(qs) - 12 :]
    tok = build_tokenizer()
    base = build_model(tok, seed=seed).float().train()
    pairs = fit(base, tok, train)
    start_w = {n: p.detach().clone() for n, p in base.named_parameters()}
    out = {"lr": lr, "kl_coef": kl_coef, "before": measure(base, tok, held, pairs, start_w, 10**6 + seed)}
    ref = None
    if kl_coef:
        import copy

        ref = copy.deepcopy(base).eval()
    for mode in modes:
        base.load_state_dict({**base.state_dict(), **start_w})
        opt = torch.optim.Adam(base.parameters(), lr=lr)
        loss_fn = models.PolicyLoss(
            0.2,
            0.2,
            is_correction_level="token",
            is_correction_mode="clip",
            is_correction_threshold=[0.0, 2.0],
        )
        rng = random.Random(seed)
        order = random.Random(seed)
        for step in range(steps):
            prompts = [prompt_of(q) for q in order.sample(train, 16) for _ in range(4)]
            rl_step(base, opt, loss_fn, tok, prompts, seed * 1000 + step, mode, rng, ref, kl_coef)
        out[mode] = measure(base, tok, held, pairs, start_w, 10**6 + seed)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--kl-coef", type=float, default=0.0, help="k3 KL loss to the warm start (use_kl_loss)")
    ap.add_argument("--modes", default="signal,step,group")
    a = ap.parse_args()
    torch.set_num_threads(1)
    for seed in range(a.seeds):
        out = run(seed, a.steps, a.lr, a.kl_coef, tuple(a.modes.split(",")))
        print(json.dumps({"seed": seed, **out}), flush=True)


if __name__ == "__main__":
    main()
