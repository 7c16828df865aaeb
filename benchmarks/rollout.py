"""What our environment costs in rollout time, with a real vLLM engine (vLLM tier: make bench-vllm).

Episodes/s of the OpenRLHF executor on a real ``vllm.AsyncLLMEngine`` (the tiny random model,
constrained decoding) over the parallel graph and a real Chroma store, against the SAME engine
replaying the same requests (greedy, prefix caching off: the same tokens) with no environment,
interleaved per level: goal ratio >= 0.8 at 32 concurrent episodes. Figures: docs/vllm.md.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import statistics
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _common import HOTPOT, gather_limited, hotpot_store, parser, write

LEVELS = (1, 8, 32, 128)


def cpu_seconds() -> tuple[float, float]:
    """CPU seconds (user + system) so far of this process (vLLM's front end and, in the env runs,
    the environment) and of its children (vLLM's engine core and worker)."""
    import psutil

    me = psutil.Process()
    children = 0.0
    for child in me.children(recursive=True):
        try:
            t = child.cpu_times()
            children += t.user + t.system
        except psutil.Error:
            continue
    t = me.cpu_times()
    return t.user + t.system, children


class RecordingEngine:
    """vLLM's ``generate(token_ids, sampling_params)`` shape over AsyncLLM, recording each request."""

    def __init__(self, llm, requests: list | None = None):
        self.llm = llm
        self.requests = requests if requests is not None else []

    async def generate(self, token_ids, sampling_params, multi_modal_data=None):
        from vllm.inputs import TokensPrompt

        final = None
        async for out in self.llm.generate(
            TokensPrompt(prompt_token_ids=list(token_ids)), sampling_params, request_id=uuid.uuid4().hex
        ):
            final = out
        self.requests.append((list(token_ids), sampling_params, len(final.outputs[0].token_ids)))
        return final


async def with_env(llm, env_graph, records, tok, sp, concurrency: int) -> tuple[float, list[list], int]:
    """Every record's episode through the executor; (wall seconds, each episode's requests, tokens)."""
    from parallelsearch.rl.executor import EpisodeExecutor

    per_episode: list[list] = [[] for _ in records]
    executor = EpisodeExecutor(env_graph, constrained=True, think_chars=200)

    async def one(i: int) -> None:
        engine = RecordingEngine(llm, per_episode[i])
        prompt, label = records[i]["prompt"], records[i]["label"]
        await executor.execute(prompt, label, sp, 16000, tok, engine)

    wall = (await gather_limited(one, range(len(records)), concurrency))[2]
    return wall, per_episode, sum(n for reqs in per_episode for _, _, n in reqs)


async def replay(llm, per_episode: list[list], concurrency: int) -> tuple[float, int]:
    """The same requests on the same engine, one episode's turns after another, no environment."""
    engine = RecordingEngine(llm)

    async def one(reqs: list) -> None:
        for ids, sp, _ in reqs:
            await engine.generate(ids, sp)

    wall = (await gather_limited(one, per_episode, concurrency))[2]
    return wall, sum(n for _, _, n in engine.requests)


async def decode_cost(llm, tok, records, batch: int, repeats: int = 3) -> dict:
    """Milliseconds per generated token with the protocol's grammar (vLLM structured outputs) and
    without it, at the same token counts, interleaved on the same engine."""
    import vllm

    from parallelsearch.agents.policies.vllm_engine import structured_regex
    from parallelsearch.agents.protocol import protocol_regex

    prompts = [tok(r["prompt"], add_special_tokens=False)["input_ids"] for r in records[:batch]]
    grammar = structured_regex(protocol_regex(max_subqueries=3, think_chars=200))
    engine = RecordingEngine(llm)

    async def ms_per_token(sp) -> tuple[float, int]:
        """ms per generated token of every prompt at once with ``sp``, and the tokens generated."""
        engine.requests.clear()
        t0 = time.perf_counter()
        await asyncio.gather(*(engine.generate(p, sp) for p in prompts))
        n = sum(n for _, _, n in engine.requests)
        return 1000 * (time.perf_counter() - t0) / n, n

    free_ms, constrained_ms = [], []
    for _ in range(repeats):
        sp = vllm.SamplingParams(temperature=1.0, max_tokens=400, structured_outputs=grammar, seed=None)
        ms, n_c = await ms_per_token(sp)
        constrained_ms.append(ms)
        per = max(1, n_c // len(prompts))  # the same token counts, unconstrained
        sp = vllm.SamplingParams(temperature=1.0, max_tokens=per, min_tokens=per, ignore_eos=True)
        free_ms.append((await ms_per_token(sp))[0])
    c, f = statistics.median(constrained_ms), statistics.median(free_ms)
    print(f"batch {batch:>2}: constrained {c:.3f} ms/token, free {f:.3f} ms/token, ratio {c / f:.2f}")
    return {
        "constrained_ms_per_token": round(c, 4),
        "free_ms_per_token": round(f, 4),
        "ratio": round(c / f, 3),
    }


@dataclass
class Rig:
    """What every level runs on: the engine, the environment over its store, the records and how
    they are sampled, and the encoder threads to compare with."""

    llm: Any
    env_graph: Any
    store: Any
    tok: Any
    records: list
    sp: Any
    narrow: Any  # the environment encoder (--encoder-threads)
    wide: int  # torch's default thread count: every core


def build_environment(encoder_threads: int) -> tuple:
    """The tiny random model, a HotpotQA store with its questions as training records and the
    environment graph over it: (model folder, tokenizer, store, env graph, records, narrow, wide)."""
    import torch
    from transformers import AutoTokenizer

    from parallelsearch.data import load_questions
    from parallelsearch.rl.data import train_record
    from parallelsearch.rl.env import EnvGraph
    from parallelsearch.rl.tiny_model import save_tiny
    from parallelsearch.stores import get_embedder

    model_dir = save_tiny(Path(tempfile.mkdtemp()) / "tiny-llama")
    tok = AutoTokenizer.from_pretrained(model_dir)
    store, _ = hotpot_store(60)
    wide = get_embedder().run(torch.get_num_threads)  # torch's default: every core
    narrow = get_embedder(threads=encoder_threads)  # the OpenRLHF agent config's default is 1
    store.embedder = narrow
    env_graph = EnvGraph(store, graph="parallel", top_k=2, max_turns=2, max_subqueries=3, max_new_tokens=400)
    questions = load_questions(HOTPOT)[:60]  # the questions whose paragraphs the store holds
    records = [train_record(q, template="official", tokenizer=tok) for q in questions]
    return model_dir, tok, store, env_graph, records, narrow, wide


def start_engine(model_dir: Path):
    """A real vLLM engine on the tiny model, greedy-reproducible and without prefix caching, so a
    replay generates the same tokens as the run it replays."""
    import vllm

    t0 = time.perf_counter()
    llm = vllm.AsyncLLMEngine.from_engine_args(
        vllm.AsyncEngineArgs(
            model=str(model_dir), dtype="float32", max_model_len=16384, enforce_eager=True, seed=0,
            enable_prefix_caching=False,
        )
    )  # fmt: skip
    print(f"engine started in {time.perf_counter() - t0:.1f} s")
    return llm


async def env_and_replay(rig: Rig, batch: list, level: int, repeats: int) -> dict:
    """``batch`` with the environment, then its requests replayed without it, ``repeats`` times
    alternating, with the CPU each side took: the rates, tokens and CPU ms per episode."""
    n = len(batch)
    env_rates, bare_rates, tok_env, tok_bare = [], [], [], []
    cpu = {"env_main": [], "env_engine": [], "replay_main": [], "replay_engine": []}
    for _ in range(repeats):
        c0 = cpu_seconds()
        secs, per_episode, tokens = await with_env(rig.llm, rig.env_graph, batch, rig.tok, rig.sp, level)
        c1 = cpu_seconds()
        env_rates.append(n / secs)
        tok_env.append(tokens)
        secs_bare, tokens_bare = await replay(rig.llm, per_episode, level)
        c2 = cpu_seconds()
        bare_rates.append(n / secs_bare)
        tok_bare.append(tokens_bare)
        for side, (a, b) in (("env", (c0, c1)), ("replay", (c1, c2))):
            cpu[f"{side}_main"].append(1000 * (b[0] - a[0]) / n)
            cpu[f"{side}_engine"].append(1000 * (b[1] - a[1]) / n)
    return {
        "env_eps": statistics.median(env_rates),
        "bare_eps": statistics.median(bare_rates),
        "tok_env": tok_env,
        "tok_bare": tok_bare,
        "cpu_ms": {k: round(statistics.median(v), 1) for k, v in cpu.items()},
        "per_episode": per_episode,
    }


async def measure_level(rig: Rig, level: int, args: argparse.Namespace) -> dict:
    """One concurrency level's figures, printed and returned, with the wide encoder too at
    ``--compare-threads-at``, so the encoder's thread count is seen to matter or not."""
    n = max(args.min_episodes, 2 * level)
    batch = (rig.records * (n // len(rig.records) + 1))[:n]
    m = await env_and_replay(rig, batch, level, args.repeats)
    env_eps, bare_eps, cpu_ms = m["env_eps"], m["bare_eps"], m["cpu_ms"]
    r = {
        "episodes": n,
        "env_episodes_per_s": round(env_eps, 3),
        "engine_only_episodes_per_s": round(bare_eps, 3),
        "ratio": round(env_eps / bare_eps, 3),
        "tokens_generated_env": m["tok_env"],
        "tokens_generated_replay": m["tok_bare"],
        "turns_per_episode": round(sum(len(r) for r in m["per_episode"]) / n, 2),
        # CPU ms per episode: the main process (vLLM front end [+ environment]) and the engine
        # processes. The environment's own CPU cost is env_main - replay_main.
        "cpu_ms_per_episode": cpu_ms,
        "env_cpu_ms_per_episode": round(cpu_ms["env_main"] - cpu_ms["replay_main"], 1),
    }
    if level == args.compare_threads_at and rig.wide != args.encoder_threads:
        from parallelsearch.stores import get_embedder

        # the same level with the encoder's OpenMP team as wide as the machine (torch's default)
        rig.store.embedder = get_embedder()
        secs, _, _ = await with_env(rig.llm, rig.env_graph, batch, rig.tok, rig.sp, level)
        rig.store.embedder = rig.narrow
        r[f"env_episodes_per_s_encoder_threads_{rig.wide}"] = round(n / secs, 3)
        print(f"concurrency {level:>3}: with env, encoder threads {rig.wide}: {n / secs:7.2f} eps/s")
    print(
        f"concurrency {level:>3}: {n} episodes, with env {env_eps:7.2f} eps/s, engine only {bare_eps:7.2f} eps/s, "
        f"ratio {r['ratio']:.3f}, {r['turns_per_episode']} turns/episode, tokens env/replay {m['tok_env']}/{m['tok_bare']}"
    )
    print(
        f"                 CPU ms/episode: main {cpu_ms['env_main']} (replay {cpu_ms['replay_main']}), "
        f"engine {cpu_ms['env_engine']} (replay {cpu_ms['replay_engine']}); "
        f"environment {r['env_cpu_ms_per_episode']} ms"
    )
    return r


async def run(args: argparse.Namespace) -> dict:
    """The engine warmed up, the grammar's decode cost, then every level with and without the
    environment; the figures as a dict."""
    import vllm

    model_dir, tok, store, env_graph, records, narrow, wide = build_environment(args.encoder_threads)
    llm = start_engine(model_dir)
    sp = vllm.SamplingParams(temperature=0.0, max_tokens=400)
    rig = Rig(llm, env_graph, store, tok, records, sp, narrow, wide)
    # warm up (first requests compile the grammar and allocate)
    await with_env(llm, env_graph, records[:2], tok, sp, 2)
    results: dict = {"levels": {}, "repeats": args.repeats}
    results["constrained_decoding"] = {b: await decode_cost(llm, tok, records, b) for b in (1, 32)}
    for level in args.levels:
        results["levels"][level] = await measure_level(rig, level, args)
    llm.shutdown()
    results["encoder_threads"] = args.encoder_threads
    results["goal"] = "ratio >= 0.8 at 32 concurrent episodes"
    results["met"] = results["levels"].get(32, {}).get("ratio", 0) >= 0.8
    return results


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--levels", type=int, nargs="+", default=list(LEVELS))
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--min-episodes", type=int, default=8)
    p.add_argument("--encoder-threads", type=int, default=1, help="the environment encoder's threads")
    p.add_argument("--compare-threads-at", type=int, default=32, help="this level also with torch's threads")
    args = p.parse_args()
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
    try:
        import vllm  # noqa: F401
    except ImportError:
        sys.exit("benchmarks/rollout.py needs vLLM: run it in the vLLM tier (make bench-vllm)")
    write("rollout", asyncio.run(run(args)))
    gc.collect()  # vLLM's AsyncLLM.__del__ fails at interpreter exit if it is still referenced then


if __name__ == "__main__":
    main()
