"""Checks a training run passes before it is submitted (``train --check``) and before an
executor's first episode, each failure one line naming its cause: the retriever answers, the
GPUs add up (OpenRLHF's own assertions, and its placement rules where Ray would wait forever),
the protocol, reward mode and prompts agree, the data holds the configured keys. Config typos
and a loopback retriever on several nodes are refused earlier, when the config is built.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from pathlib import Path
from typing import Any

from parallelsearch.rl.agent_config import AgentConfig
from parallelsearch.rl.train_config import TrainConfig
from parallelsearch.stores.errors import ParallelSearchError, json_of

#: what ``official`` reward mode looks for in an episode (the official code's assistant marker)
ASSISTANT_MARKER = "<|im_start|>assistant"
_TEMPLATED = ("<|im_start|>", "<|start_header_id|>")


class PreflightError(ParallelSearchError, RuntimeError):
    """A training run would fail (or train on garbage) for the named cause."""


def retriever_name(agent: AgentConfig) -> str:
    if agent.retriever_url:
        return f"retriever {agent.retriever_url}"
    if agent.chroma_host:
        return f"Chroma server {agent.chroma_host}:{agent.chroma_port} (store {', '.join(agent.stores)})"
    return f"store {', '.join(agent.stores)} at {agent.chroma_path}"


def probe_retriever(agent: AgentConfig, query: str = "who wrote hamlet", timeout_s: float = 15.0) -> str:
    """Send one query through the searcher the executor would use; a line saying what answered."""
    name = retriever_name(agent)

    async def once() -> int:
        searcher = agent.make_searcher()
        return len(await asyncio.wait_for(searcher.asearch(query, 1), timeout_s))

    # a thread of its own: the executor may be built inside a running event loop
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        try:
            hits = pool.submit(asyncio.run, once()).result(timeout_s + 5)
        except (TimeoutError, concurrent.futures.TimeoutError):
            raise PreflightError(f"the {name} did not answer a probe query within {timeout_s:g} s") from None
        except Exception as e:  # noqa: BLE001 - any failure is the probe's answer
            raise PreflightError(
                f"the {name} does not answer a probe query: {type(e).__name__}: {e}"[:400]
            ) from e
    if hits == 0:
        raise PreflightError(f"the {name} answered a probe query with no passages (an empty index?)")
    return f"{name} answered a probe query ({hits} passage)"


def gpu_demand(cfg: TrainConfig) -> tuple[int, str]:
    """GPUs the run's actor groups and vLLM engines need at once, and the sum spelled out.

    OpenRLHF's documented placement (train_ppo_ray.py): with ``colocate_all`` (synchronous)
    every model shares the actor's placement group; in async mode colocation covers only the
    DeepSpeed models, so the vLLM engines need GPUs of their own; without it each group has
    its own GPUs.
    """
    group = cfg.nodes * cfg.gpus_per_node
    vllm = cfg.vllm_num_engines * cfg.vllm_tensor_parallel_size
    if cfg.colocate_all and not cfg.async_train:
        return group, f"actor/ref/critic/vLLM colocated on {cfg.nodes} x {cfg.gpus_per_node} = {group}"
    if cfg.colocate_all:
        return group + vllm, (
            f"DeepSpeed models {cfg.nodes} x {cfg.gpus_per_node} = {group} + vLLM "
            f"{cfg.vllm_num_engines} x {cfg.vllm_tensor_parallel_size} = {vllm} (async colocates only DeepSpeed)"
        )
    roles = (
        ["actor"] + (["ref"] if cfg.init_kl_coef > 0 else []) + (["critic"] if cfg.algorithm == "gae" else [])
    )
    parts = " + ".join(f"{r} {group}" for r in roles)
    how = f"{parts} + vLLM {cfg.vllm_num_engines} x {cfg.vllm_tensor_parallel_size} = {vllm}"
    return group * len(roles) + vllm, how


def check_resources(cfg: TrainConfig) -> str:
    """OpenRLHF's train() assertions on the command, then the cluster sum; a line with the sum."""
    from parallelsearch.rl.launch import openrlhf_args
    from parallelsearch.rl.openrlhf_cli import check_command

    try:
        check_command(openrlhf_args(cfg))
    except ValueError as e:
        raise PreflightError(str(e)) from e
    need, how = gpu_demand(cfg)
    have = cfg.nodes * cfg.gpus_per_node
    if need > have:
        fix = (
            "set async_train=false (async mode colocates only the DeepSpeed models), or fewer vllm_num_engines"
            if cfg.colocate_all
            else "set colocate_all=true, or fewer vllm_num_engines"
        )
        raise PreflightError(
            f"GPUs: the run needs {how} -> {need} GPUs at once but nodes x gpus_per_node = "
            f"{cfg.nodes} x {cfg.gpus_per_node} = {have}; Ray would wait for them forever ({fix})"
        )
    if cfg.vllm_tensor_parallel_size > cfg.gpus_per_node:
        raise PreflightError(
            f"vllm_tensor_parallel_size {cfg.vllm_tensor_parallel_size} exceeds gpus_per_node "
            f"{cfg.gpus_per_node}: one engine's GPUs must sit on one node"
        )
    return f"GPUs: {how} <= {have} available (OpenRLHF's train() checks pass)"


def first_record(path: str | Path) -> dict[str, Any] | None:
    """The first JSON line of a local jsonl file, or None when ``path`` is not a local file."""
    p = Path(path)
    if not p.is_file():
        return None
    with p.open(encoding="utf-8") as f:
        for line in f:
            if line.strip():
                try:
                    return json_of(line, f"{p}: the first line")
                except ValueError as e:
                    raise PreflightError(str(e)) from e
    raise PreflightError(f"{p} is empty")


def check_reward_prompts(cfg: TrainConfig, record: dict[str, Any] | None) -> str:
    """The reward mode, OpenRLHF's chat templating and the data's prompts agree (else the fix)."""
    mode = cfg.agent.reward.mode
    prompt = record.get(cfg.input_key) if record else None
    templated = isinstance(prompt, str) and any(m in prompt for m in _TEMPLATED)
    if cfg.apply_chat_template and templated:
        raise PreflightError(
            f"{cfg.prompt_data}: prompts are already chat-templated and apply_chat_template=true would "
            "template them twice: set apply_chat_template=false, or make the data without --tokenizer"
        )
    if mode == "official" and not cfg.apply_chat_template:
        if prompt is None:
            raise PreflightError(
                "reward mode official needs chat-templated prompts (it scores what follows "
                f"'{ASSISTANT_MARKER}'), and {cfg.prompt_data} cannot be read to confirm it: set "
                "apply_chat_template=true (OpenRLHF templates the raw prompts with the actor's tokenizer)"
            )
        if ASSISTANT_MARKER not in str(prompt):
            raise PreflightError(
                f"reward mode official needs '{ASSISTANT_MARKER}' in every episode but {cfg.prompt_data}'s "
                "prompts are not chat-templated: set apply_chat_template=true, or agent.reward.mode=paper"
            )
    how = "OpenRLHF chat-templates the prompts" if cfg.apply_chat_template else "prompts used as written"
    return f"reward mode {mode}: {how}"


def check_protocol(cfg: TrainConfig, record: dict[str, Any] | None) -> str:
    """The policy's protocol (``agent.graph_config.protocol``), the reward mode and the data's
    prompts agree: the tool-call text form is scored in paper mode only, and its prompts must
    teach ``<tool_call>`` blocks (a tags prompt would train a policy on a protocol the
    environment does not read, and the other way round)."""
    tools = cfg.agent.graph_config.protocol == "tools"
    mode = cfg.agent.reward.mode
    if tools and mode in ("official", "dag"):
        raise PreflightError(
            f"agent.graph_config.protocol tools with agent.reward.mode {mode}: that mode scores the tags "
            "(official: as the official code does; dag: the #k plan of <search> tags); set "
            "agent.reward.mode=paper for the tool-call text form"
        )
    prompt = record.get(cfg.input_key) if record else None
    if isinstance(prompt, str):
        if tools and "<tool_call>" not in prompt:
            raise PreflightError(
                f"{cfg.prompt_data}: agent.graph_config.protocol is tools but the prompts never show a "
                "<tool_call> block: make the data with `parallelsearch make-train-data --template tool_text`"
            )
        if not tools and "<tool_call>" in prompt and "<search>" not in prompt:
            raise PreflightError(
                f"{cfg.prompt_data}: the prompts teach <tool_call> blocks but agent.graph_config.protocol is "
                f"{cfg.agent.graph_config.protocol}, which reads <search> tags: set agent.graph_config.protocol=tools"
            )
    return f"protocol {'tools (tool-call text form)' if tools else 'tags'}: reward mode {mode}"


def check_data(cfg: TrainConfig) -> tuple[str, dict[str, Any] | None]:
    """The prompt file exists locally and holds the input and label keys (a hub dataset is not checked)."""
    record = first_record(cfg.prompt_data)
    if record is None:
        if Path(cfg.prompt_data).suffix in (".jsonl", ".json", ".parquet") or Path(cfg.prompt_data).exists():
            raise PreflightError(
                f"prompt_data {cfg.prompt_data} does not exist: make it with "
                "`parallelsearch make-train-data --recipe paper ...` (docs/training.md)"
            )
        return f"prompt_data {cfg.prompt_data}: not a local file (a hub dataset; not checked)", None
    missing = [k for k in (cfg.input_key, cfg.label_key) if k not in record]
    if missing:
        raise PreflightError(
            f"prompt_data {cfg.prompt_data}: the first record lacks {', '.join(missing)} "
            f"(keys: {', '.join(record)}); set input_key/label_key"
        )
    return f"prompt_data {cfg.prompt_data}: keys {cfg.input_key}, {cfg.label_key} present", record


def preflight(cfg: TrainConfig, *, probe: bool = True) -> list[str]:
    """Every check, in order; returns one line per check passed, raises on the first failure."""
    lines = [check_resources(cfg)]
    data_line, record = check_data(cfg)
    lines.append(data_line)
    lines.append(check_protocol(cfg, record))
    lines.append(check_reward_prompts(cfg, record))
    if probe:
        lines.append(probe_retriever(cfg.agent))
    return lines
