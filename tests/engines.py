"""Engine stand-ins with vLLM's ``generate(token_ids, sampling_params)`` shape, for CPU tests and debugging.

OpenRLHF hands the agent executor a vLLM engine whose ``generate`` returns a
``RequestOutput``. These classes return objects of the same shape (``outputs[0]``
with ``token_ids``, ``text``, ``finish_reason``, ``logprobs`` as a list of
``{token_id: Logprob}``) so the executor runs unchanged where vLLM cannot:

- :class:`TransformersEngine`: a real Hugging Face causal LM generating in-process;
- :class:`ScriptedEngine`: replays given turn texts (an honest stand-in for a model).

Also what the executor tests share: vLLM's ``SamplingParams`` shape, loading the agent module
as OpenRLHF does, and recording the environments the executor opens.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Logprob:
    logprob: float
    rank: int | None = None
    decoded_token: str | None = None


@dataclass
class CompletionOutput:
    index: int
    text: str
    token_ids: list[int]
    finish_reason: str | None
    logprobs: list[dict[int, Logprob]] | None = None
    stop_reason: str | None = None


@dataclass
class RequestOutput:
    request_id: str
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput] = field(default_factory=list)
    finished: bool = True


def _stops(params: Any) -> list[str]:
    stop = getattr(params, "stop", None) or []
    return [stop] if isinstance(stop, str) else list(stop)


class ScriptedEngine:
    """Replays turn texts: the i-th call for a prompt returns ``turns[i]`` (last one repeated).

    It stops the way vLLM does: the scripted turn is tokenised whole (it may go on past
    the stop string), generation ends at the FIRST TOKEN whose text completes a stop
    string, and that whole token is returned in ``token_ids`` while ``text`` is cut right
    after the stop string (``include_stop_str_in_output``). The tokenizer's EOS token
    (``<|im_end|>`` for ChatML models, the tool-call text form's end of turn) ends
    generation too and is kept in ``token_ids``, not in ``text``, as vLLM's scheduler does. With a tokenizer whose merges
    cross the stop string (``>\\n\\n``), ``text`` and ``token_ids`` then disagree, exactly
    as with vLLM. ``max_tokens`` cuts at a token count (finish "length"). Turns are matched
    to episodes by the prompt's leading tokens, so one engine serves concurrent episodes.
    Logprobs are a fixed -0.5 per token when requested. A turn given as token ids is returned
    as those ids (a split the tokenizer would not make); ``key`` (token ids -> a hashable) matches
    turns to episodes instead of the leading tokens (a chat agent's prompts share a long prefix).
    """

    def __init__(
        self,
        tokenizer: Any,
        turns: Sequence[str | list[int]],
        prefix_tokens: int = 64,
        key: Callable[[list[int]], Any] | None = None,
    ):
        if not turns:
            raise ValueError("ScriptedEngine needs at least one turn")
        self.tokenizer = tokenizer
        self.turns = list(turns)
        self.prefix_tokens = prefix_tokens
        self.key = key
        self.calls: dict[tuple[int, ...], int] = {}
        self.requests: list[list[int]] = []
        self.outputs: list[list[int]] = []  # generated token ids, in call order
        self.texts: list[str] = []  # the engine's (cut) text, in call order
        self.params: list[Any] = []  # the sampling params of each call (stop strings, caps, grammar)

    def _stop_like_vllm(
        self, ids: list[int], stops: list[str], cap: int | None
    ) -> tuple[list[int], str, str, str | None]:
        decode = self.tokenizer.decode
        eos = getattr(self.tokenizer, "eos_token_id", None)
        for k in range(1, len(ids) + 1):
            if cap is not None and k > cap:
                break
            text = decode(ids[:k], skip_special_tokens=True, clean_up_tokenization_spaces=False)
            if eos is not None and ids[k - 1] == eos:
                return ids[:k], text, "stop", None
            hit = min(((text.find(s), s) for s in stops if s in text), default=None)
            if hit is not None:
                at, stop = hit
                return ids[:k], text[: at + len(stop)], "stop", stop
        kept = ids[:cap] if cap is not None else ids
        text = decode(kept, skip_special_tokens=True, clean_up_tokenization_spaces=False)
        return kept, text, "length" if cap is not None and len(ids) > cap else "stop", None

    async def generate(
        self, token_ids: list[int], sampling_params: Any, multi_modal_data: Any = None
    ) -> RequestOutput:
        self.requests.append(list(token_ids))
        self.params.append(sampling_params)
        key = self.key(list(token_ids)) if self.key else tuple(token_ids[: self.prefix_tokens])
        i = self.calls.get(key, 0)
        self.calls[key] = i + 1
        turn = self.turns[min(i, len(self.turns) - 1)]
        full = (
            list(turn)
            if isinstance(turn, list)
            else self.tokenizer(turn, add_special_tokens=False)["input_ids"]
        )
        cap = getattr(sampling_params, "max_tokens", None)
        ids, text, finish, stop = self._stop_like_vllm(full, _stops(sampling_params), cap)
        lps = None
        if getattr(sampling_params, "logprobs", None) is not None:
            lps = [{t: Logprob(-0.5)} for t in ids]
        out = CompletionOutput(0, text, list(ids), finish, lps, stop)
        self.outputs.append(list(ids))
        self.texts.append(text)
        return RequestOutput(f"scripted-{len(self.requests)}", list(token_ids), [out])


class TransformersEngine:
    """A Hugging Face causal LM behind vLLM's ``generate`` shape: :class:`HFPolicy` on token ids.

    Honours ``max_tokens``, ``stop`` (generation ends at a stop string, which is kept, as
    with ``include_stop_str_in_output``), ``temperature``/``top_p`` and ``logprobs``.
    """

    def __init__(self, model: Any, tokenizer: Any):
        from parallelsearch.agents.policies.hf import HFPolicy

        self.policy = HFPolicy(model, tokenizer)
        self.requests = 0
        self.outputs: list[list[int]] = []  # generated token ids, in call order

    async def generate(
        self, token_ids: list[int], sampling_params: Any, multi_modal_data: Any = None
    ) -> RequestOutput:
        from parallelsearch.agents.policies.base import TurnRequest

        stops = tuple(_stops(sampling_params))
        request = TurnRequest(
            transcript="",
            token_ids=list(token_ids),
            stop=stops,
            max_tokens=getattr(sampling_params, "max_tokens", None) or 16,
            temperature=float(getattr(sampling_params, "temperature", 0.0) or 0.0),
            top_p=float(getattr(sampling_params, "top_p", 1.0) or 1.0),
            logprobs=getattr(sampling_params, "logprobs", None) is not None,
        )
        res = await self.policy.agenerate(request)
        ids = list(res.token_ids or [])
        lps = (
            None
            if res.logprobs is None
            else [{t: Logprob(lp)} for t, lp in zip(ids, res.logprobs, strict=False)]
        )
        stop = next((s for s in stops if res.text.endswith(s)), None)
        self.requests += 1
        self.outputs.append(ids)
        out = CompletionOutput(0, res.text, ids, res.finish_reason, lps, stop)
        return RequestOutput(f"hf-{self.requests}", list(token_ids), [out])


class FailingPolicy:
    """A policy stand-in whose every turn raises, as a crashed model server makes it do."""

    name = "broken"

    async def agenerate(self, request):
        raise RuntimeError("model server exploded")


class GatedPolicy:
    """A scripted policy held at every turn until the test opens ``gate`` (so the test, not the
    scheduler, decides which run is inside the graph: admission and thread tests)."""

    name = "gated"

    def __init__(self, script: Sequence[str]) -> None:
        from parallelsearch.agents.policies import ScriptedPolicy

        self.inner = ScriptedPolicy(script)
        self.gate = threading.Event()

    async def agenerate(self, request):
        await asyncio.to_thread(self.gate.wait, 60)
        return await self.inner.agenerate(request)


@dataclass
class SamplingParamsStandIn:
    """Stand-in with vLLM SamplingParams' field names (vLLM cannot be installed in the main tier)."""

    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int | None = None
    logprobs: int | None = None
    stop: list[str] = field(default_factory=list)
    include_stop_str_in_output: bool = False


def load_like_openrlhf() -> Any:
    """What ``openrlhf.trainer.ray.vllm_engine._load_agent_executor`` does with
    ``--train.agent_func_path`` (that module imports Ray): load the file, build ``AgentExecutor()``."""
    import importlib.util

    from openrlhf.utils.agent import AgentExecutorBase

    from parallelsearch.rl.launch import agent_module_path

    spec = importlib.util.spec_from_file_location("agent_module", str(agent_module_path()))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert issubclass(module.AgentExecutor, AgentExecutorBase)
    return module.AgentExecutor()


@contextlib.contextmanager
def recording_episodes() -> Iterator[list[Any]]:
    """Every environment ``EnvGraph.new_episode`` opens meanwhile, in order (to compare an
    episode's transcript with its tokens); the method is restored on exit."""
    from parallelsearch.rl.env import EnvGraph

    opened: list[Any] = []
    real = EnvGraph.new_episode

    def recording(self):
        env = real(self)
        opened.append(env)
        return env

    EnvGraph.new_episode = recording
    try:
        yield opened
    finally:
        EnvGraph.new_episode = real


def openrlhf_function(relpath: str, name: str, *, inside: str | None = None, **names: Any) -> Any:
    """A top-level function of the installed OpenRLHF (or with ``inside`` a method of that class,
    as a plain function of ``self``), compiled from its own source file with ``names`` as globals.

    Modules such as ``openrlhf.trainer.ppo_trainer`` import Ray and DeepSpeed at the top, which
    the main tier lacks; the function itself (e.g. ``compute_eval_metrics``) needs only torch,
    so it is taken from the file as it is, not copied.
    """
    import ast
    import importlib.util
    from pathlib import Path

    import torch

    spec = importlib.util.find_spec("openrlhf")
    path = Path(next(iter(spec.submodule_search_locations))) / relpath
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    body = tree.body
    if inside is not None:
        body = next(n for n in body if isinstance(n, ast.ClassDef) and n.name == inside).body
    node = next(n for n in body if isinstance(n, ast.FunctionDef | ast.ClassDef) and n.name == name)
    namespace: dict[str, Any] = {"torch": torch, "__name__": f"openrlhf_source_{name}", **names}
    exec(compile(ast.Module(body=[node], type_ignores=[]), str(path), "exec"), namespace)  # noqa: S102
    return namespace[name]


def openrlhf_prompt_dataset(records: list[dict[str, Any]], tokenizer: Any, **data_args: Any) -> Any:
    """OpenRLHF 0.11.2's ``PromptDataset`` over ``records``, loaded from its file (the package's
    ``openrlhf.datasets`` imports Hugging Face ``datasets``, absent in the main tier)."""
    import importlib.util
    import types
    from pathlib import Path

    spec = importlib.util.find_spec("openrlhf")
    path = Path(next(iter(spec.submodule_search_locations))) / "datasets" / "prompts_dataset.py"
    module_spec = importlib.util.spec_from_file_location("openrlhf_prompts_dataset", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    data = types.SimpleNamespace(input_key="prompt", label_key="label", apply_chat_template=False)
    for k, v in data_args.items():
        setattr(data, k, v)
    strategy = types.SimpleNamespace(args=types.SimpleNamespace(data=data), is_rank_0=lambda: False)
    return module.PromptDataset(records, tokenizer, strategy)
