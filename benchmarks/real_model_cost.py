"""What one training step of a real model costs on this machine: the floor under the learning run's time.

The learning run on a real model (``train --smoke --learn --model smollm2-135m``) spends its time in
three places: the actor's forward and backward passes (OpenRLHF's ``Actor`` in fp32, as the smoke's
:class:`~parallelsearch.training.trainer.CpuTrainer` runs it), the engine's rollouts and the held-out
evaluations. This script times the first on sequences of the run's length, for each number of trained
top layers, side by side in one run, and projects the RL run's least time from them: every step needs at
least the reference's and the old policy's forward passes and one forward-and-backward pass over the
step's episodes, and the run trains its control as well. Rollouts and evaluations come on top (their
seconds are in a run's ``learning.json``).
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import parser, print_table, write  # noqa: E402


def _batch(tokenizer, episodes: int, length: int, actions: int, seed: int) -> SimpleNamespace:
    """``episodes`` random sequences of ``length`` tokens whose last ``actions`` are the model's turns."""
    import torch

    g = torch.Generator().manual_seed(seed)
    sequences = torch.randint(100, len(tokenizer) - 100, (episodes, length), generator=g)
    action_mask = torch.zeros(episodes, length - 1, dtype=torch.bool)
    action_mask[:, -actions:] = True
    return SimpleNamespace(
        sequences=sequences, action_mask=action_mask, attention_mask=torch.ones_like(sequences)
    )


def _timed(fn, repeats: int) -> float:
    """The median seconds of ``repeats`` calls of ``fn`` after one untimed warm-up call."""
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def measure(trainer, batch, micro: int, repeats: int) -> dict[str, float]:
    """Seconds per sequence of a forward pass and of a forward-and-backward pass with an optimizer step."""
    import torch

    micro_batches = [
        SimpleNamespace(**{k: getattr(batch, k)[i : i + micro] for k in vars(batch)})
        for i in range(0, len(batch.sequences), micro)
    ]
    trainable = [p for p in trainer.actor.parameters() if p.requires_grad]
    opt = torch.optim.Adam(trainable, lr=0.0)  # lr 0: the timing leaves the weights as they are

    def forward() -> None:
        for mb in micro_batches:
            trainer.log_probs(mb)

    def train() -> None:
        for mb in micro_batches:
            lp = trainer.log_probs(mb, grad=True)
            (-(lp * mb.action_mask).sum() / mb.action_mask.sum()).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    n = len(batch.sequences)
    return {"forward_s": _timed(forward, repeats) / n, "train_s": _timed(train, repeats) / n}


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--length", type=int, default=560, help="tokens per episode (prompt, turns, passages)")
    ap.add_argument("--actions", type=int, default=96, help="the model's own tokens per episode")
    ap.add_argument("--episodes", type=int, default=8, help="episodes timed per pass")
    ap.add_argument("--layers", default="4,8,all", help="trained top layers, each measured")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument(
        "--steps", type=int, default=15, help="RL steps of the run projected (and as many control steps)"
    )
    ap.add_argument("--step-episodes", type=int, default=32, help="episodes per RL step (8 prompts x 4)")
    a = ap.parse_args()

    from transformers import AutoTokenizer

    from parallelsearch.agents.policies.models import resolve_model
    from parallelsearch.training.setup import openrlhf_train_args, smoke_config
    from parallelsearch.training.trainer import CpuTrainer

    folder = resolve_model(a.model)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    args = openrlhf_train_args(
        smoke_config(folder, Path("prompts.jsonl"), "http://127.0.0.1:1/retrieve", real_model=True)
    )
    batch = _batch(tokenizer, a.episodes, a.length, a.actions, seed=0)
    rows, results = [], {}
    for layers in a.layers.split(","):
        top = None if layers == "all" else int(layers)
        trainer = CpuTrainer(folder, args, tokenizer, train_layers=top)
        cost = measure(trainer, batch, args.train.micro_batch_size, a.repeats)
        # per step: reference and old-policy forward passes, then one training pass, over every episode
        step_s = a.step_episodes * (2 * cost["forward_s"] + cost["train_s"])
        run_min = 2 * a.steps * step_s / 60  # the run and its control
        results[layers] = {**cost, "rl_step_s": step_s, "rl_run_min_floor": run_min}
        rows.append(
            [layers, f"{cost['forward_s']:.2f}", f"{cost['train_s']:.2f}", f"{step_s:.0f}", f"{run_min:.0f}"]
        )
        print(f"top {layers} layers trained: {rows[-1][1:]}", flush=True)
        del trainer
    print_table(
        ["layers trained", "fwd s/seq", "fwd+bwd s/seq", "RL step s (floor)", "run+control min (floor)"], rows
    )
    write("real_model_cost", {"settings": vars(a), "model_folder": str(folder), "results": results})


if __name__ == "__main__":
    main()
