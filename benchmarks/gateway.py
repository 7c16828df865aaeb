"""Gateway overhead: the chat agent trained through the session gateway against today's
executor over the ``tool_text`` environment, on the same stand-in engine, in one run.

Each episode is two turns (two parallel ``search`` calls, then the answer) against a searcher
that answers at once, with the tiny tokenizer and the Hermes tools template. The engine
replays the turns' ids after ``--engine-ms`` (0: the pure overhead of each path; a few hundred
ms: the share of an episode's wall time a real engine's turn leaves to it). The modes take
turns episode by episode, so drift in the machine's load hits both alike. Figures: per-episode
wall (median), per-turn overhead of the gateway (median of paired differences / turns) and the
ratio gateway / executor.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

from _common import parser, write

from parallelsearch.graphs.config import GraphConfig
from parallelsearch.rl.data import train_record
from parallelsearch.rl.env import EnvGraph
from parallelsearch.rl.executor import EpisodeExecutor
from parallelsearch.rl.gateway import gateway_chat_model
from parallelsearch.rl.gateway.executor import GatewayExecutor
from parallelsearch.rl.gateway.factory import default_agent

END = "<|im_end|>"
CALLS = "\n".join(
    f'<tool_call>\n{{"name": "search", "arguments": {{"query": "{q}"}}}}\n</tool_call>'
    for q in ("Scott Derrickson", "Ed Wood")
)
TURNS = {"gateway": [CALLS + END, "yes" + END], "text": [CALLS + END, "<answer> yes </answer>"]}


@dataclass
class Out:
    token_ids: list[int]
    finish_reason: str = "stop"
    logprobs: list[dict[int, float]] | None = None
    text: str = ""


@dataclass
class Reply:
    outputs: list[Out] = field(default_factory=list)


class ReplayEngine:
    """A stand-in with vLLM's ``generate(token_ids, params)``: the n-th call of an episode returns
    the n-th turn's ids (tokenised once), after ``delay_s``; the turn ends at EOS as vLLM's does."""

    def __init__(self, tokenizer: Any, turns: list[str], delay_s: float):
        self.turns = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in turns]
        self.delay_s = delay_s
        self.n = 0

    async def generate(self, token_ids: list[int], params: Any) -> Reply:
        ids = self.turns[min(self.n, len(self.turns) - 1)]
        self.n += 1
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        return Reply([Out(list(ids), logprobs=[{t: -0.5} for t in ids])])


@dataclass
class Params:
    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int | None = None
    logprobs: int | None = 1
    stop: list[str] = field(default_factory=list)
    include_stop_str_in_output: bool = False


def searcher(query: str) -> list[dict]:
    return [{"title": query, "text": f"{query} is an American."}]


def executors(cfg: GraphConfig) -> dict[str, Any]:
    return {
        "text": EpisodeExecutor(EnvGraph(searcher, config=cfg.updated(protocol="tools"))),
        "gateway": GatewayExecutor(default_agent("parallel", cfg)(gateway_chat_model(), searcher)),
    }


async def one(executor: Any, mode: str, tok: Any, prompt: dict, delay_s: float) -> float:
    eng = ReplayEngine(tok, TURNS[mode], delay_s)
    t0 = time.perf_counter()
    sample = await executor.execute(prompt["prompt"], prompt["label"], Params(), 8192, tok, eng)
    ms = (time.perf_counter() - t0) * 1000
    assert len(sample["action_ranges"]) == 2 and sample["reward"] > 1, sample["extra_logs"]
    return ms


def measure(tok: Any, episodes: int, engine_ms: float) -> dict:
    exe = executors(GraphConfig(top_k=1, max_turns=2))
    rec = {
        "id": "b",
        "question": "Were Scott Derrickson and Ed Wood of the same nationality?",
        "golden_answers": ["yes"],
    }
    prompt = train_record({**rec, "metadata": {"type": "comparison"}}, template="tool_text", tokenizer=tok)
    times: dict[str, list[float]] = {"text": [], "gateway": []}

    async def go() -> None:
        for mode in ("text", "gateway"):  # warm-up: imports, compiled graphs, first-call caches
            await one(exe[mode], mode, tok, prompt, 0)
        for i in range(episodes):
            order = ("text", "gateway") if i % 2 else ("gateway", "text")
            for mode in order:
                times[mode].append(await one(exe[mode], mode, tok, prompt, engine_ms / 1000))

    asyncio.run(go())
    diffs = [g - t for g, t in zip(times["gateway"], times["text"], strict=True)]
    med = {m: statistics.median(v) for m, v in times.items()}
    return {
        "engine_ms_per_turn": engine_ms,
        "episodes_per_mode": episodes,
        "turns_per_episode": 2,
        "episode_ms_median": {m: round(v, 2) for m, v in med.items()},
        "gateway_overhead_ms_per_turn_median": round(statistics.median(diffs) / 2, 2),
        "ratio_gateway_over_text": round(med["gateway"] / med["text"], 3),
    }


def main() -> dict:
    ap = parser(__doc__)
    ap.add_argument("--episodes", type=int, default=100, help="episodes per mode and engine latency")
    ap.add_argument(
        "--engine-ms", type=float, nargs="+", default=[0.0, 200.0], help="engine latency per turn"
    )
    args = ap.parse_args()
    from parallelsearch.rl.tiny_model import TOOLS_CHAT_TEMPLATE, build_tokenizer

    tok = build_tokenizer()
    tok.chat_template = TOOLS_CHAT_TEMPLATE
    rows = []
    for ms in args.engine_ms:
        row = measure(tok, args.episodes, ms)
        print(
            f"engine {ms:6.1f} ms/turn: episode median text {row['episode_ms_median']['text']:8.2f} ms, "
            f"gateway {row['episode_ms_median']['gateway']:8.2f} ms; gateway overhead "
            f"{row['gateway_overhead_ms_per_turn_median']:6.2f} ms/turn; ratio {row['ratio_gateway_over_text']}"
        )
        rows.append(row)
    return write("gateway", {"runs": rows})


if __name__ == "__main__":
    main()
