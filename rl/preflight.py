"""Checks a training run passes before it is submitted (``train --check``) and before an
executor's first episode, each failure one line naming its cause and the fix: the retriever
answers and serves what the agent expects (its ``/health``: model, dimension, corpus fingerprint,
key), the GPUs add up (OpenRLHF's own assertions, and its placement rules where Ray would wait
forever), the protocol, reward mode, prompt template and chat template agree, no evaluation data
leaked into training, ``max_len`` holds a full episode. Config typos and a loopback retriever on
several nodes are refused earlier, when the config is built. A check that cannot run here says
``not checked:`` and why (:data:`NOT_CHECKED`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
from pathlib import Path
from typing import Any

from parallelsearch.rl.agent_config import AgentConfig
from parallelsearch.rl.preflight_budget import (
    ASSISTANT_MARKER,
    CHARS_PER_TOKEN,
    DEFAULT_PASSAGE_TOKENS,
    EpisodeBudget,
    check_budget,
    check_cap,
    check_chat_template,
    count_tokens,
    local_tokenizer,
    passage_tokens,
    subquery_room,
    widest_observation,
)
from parallelsearch.rl.preflight_data import (
    TEMPLATE_SAMPLE,
    check_contamination,
    check_split_taught,
    check_template_reward,
    iter_records,
    label_dict,
    scan_prompts,
)
from parallelsearch.rl.preflight_prompt import PreflightError
from parallelsearch.rl.preflight_reward import check_weights
from parallelsearch.rl.preflight_run import (
    DataShape,
    check_batches,
    check_critic,
    check_eval_path,
    check_foreign_template,
    check_gold,
    check_graph_reward,
    check_resume,
    check_sampling,
    check_steps,
    data_shape,
    repeat_warnings,
)
from parallelsearch.rl.rewards import check_reward_weights
from parallelsearch.rl.schedule import Schedule, passes_warning, plan, schedule_line
from parallelsearch.rl.train_config import TrainConfig
from parallelsearch.stores.errors import json_of

__all__ = ["ASSISTANT_MARKER", "NOT_CHECKED", "WARNING", "PreflightError", "job_schedule", "preflight"]
_TEMPLATED = ("<|im_start|>", "<|start_header_id|>")
#: how a line of a check that could not run here begins (the CLI prints it as is, not as ``ok:``)
NOT_CHECKED = "not checked: "
#: how a line begins that passes but names a likely mistake and its fix (printed as is)
WARNING = "warning: "


def retriever_name(agent: AgentConfig) -> str:
    if agent.retriever_url:
        return f"retriever {agent.retriever_url}"
    if agent.chroma_host:
        return f"Chroma server {agent.chroma_host}:{agent.chroma_port} (store {', '.join(agent.stores)})"
    return f"store {', '.join(agent.stores)} at {agent.chroma_path}"


def probe_passages(
    agent: AgentConfig, query: str = "who wrote hamlet", k: int = 1, timeout_s: float = 15.0
) -> list[Any]:
    """Send one query through the searcher the executor would use; its passages (at least one)."""
    name = retriever_name(agent)

    async def once() -> list[Any]:
        searcher = agent.make_searcher()
        return list(await asyncio.wait_for(searcher.asearch(query, k), timeout_s))

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
    if not hits:
        raise PreflightError(f"the {name} answered a probe query with no passages (an empty index?)")
    return hits


def probe_retriever(agent: AgentConfig, query: str = "who wrote hamlet", timeout_s: float = 15.0) -> str:
    """:func:`probe_passages` with one passage; a line saying what answered."""
    hits = probe_passages(agent, query, 1, timeout_s)
    return f"{retriever_name(agent)} answered a probe query ({len(hits)} passage)"


def retriever_health(agent: AgentConfig) -> dict[str, Any] | None:
    """The ``/health`` of ``agent.retriever_url`` (None: it has none, as Search-R1's server);
    a transport error propagates (the probe then names it)."""
    import httpx

    from parallelsearch.stores.http.retrieval_client import RetrieverClient

    client = RetrieverClient(
        agent.retriever_url, api_key=agent.retriever_api_key, timeout_s=min(agent.retriever_timeout_s, 15.0)
    )
    try:
        return client.health()
    except httpx.HTTPStatusError as e:
        if e.response.status_code in (404, 405):
            return None
        raise


def expected_identity(agent: AgentConfig) -> dict[str, Any]:
    """What the agent config says its retriever must serve: ``embedding_model`` and ``query_prefix``
    when set explicitly (with ``retriever_url`` they describe the server), ``retriever_fingerprint``."""
    fields = {"embedding_model": "model", "query_prefix": "query_prefix"}
    want = {key: getattr(agent, f) for f, key in fields.items() if f in agent.model_fields_set}
    if agent.retriever_fingerprint:
        want["fingerprint"] = agent.retriever_fingerprint
    return want


def check_retriever_identity(agent: AgentConfig) -> str:
    """The retriever's ``/health`` agrees with :func:`expected_identity`, and it gets a key when it
    requires one; a line naming what it serves (model, dimension, passages, corpus fingerprint)."""
    name = retriever_name(agent)
    try:
        health = retriever_health(agent)
    except Exception as e:  # noqa: BLE001 - the probe that follows names the cause
        return f"{NOT_CHECKED}the {name}'s /health did not answer ({type(e).__name__}); the probe follows"
    want = expected_identity(agent)
    if health is None:
        if want:
            raise PreflightError(
                f"the {name} has no /health (Search-R1's server?), so {', '.join(want)} cannot be checked: "
                "serve it with `parallelsearch serve-retriever`, or unset them in the agent config"
            )
        return f"{NOT_CHECKED}the {name} has no /health (Search-R1's server?): model and corpus unverified"
    if health.get("api_key_required") and agent.retriever_api_key is None:
        raise PreflightError(
            f"the {name} requires an API key and none is set: export PARALLELSEARCH_RETRIEVER_API_KEY "
            "before `train` (command.sh ships it to every actor in Ray's runtime env, never on a command line)"
        )
    for key, value in want.items():
        if health.get(key) != value:
            setting = {"model": "embedding_model", "fingerprint": "retriever_fingerprint"}.get(key, key)
            raise PreflightError(
                f"the {name} serves {key} {health.get(key)!r} but agent.{setting} is {value!r}: point "
                f"agent.retriever_url at a retriever of {value!r}, or set agent.{setting}={health.get(key)!r}"
            )
    prefix = f", query prefix {health['query_prefix']!r}" if health.get("query_prefix") else ""
    return (
        f"{name} serves store {health.get('store')}: model {health.get('model')} (dimension "
        f"{health.get('dimension')}{prefix}), {health.get('passages')} passages, corpus fingerprint "
        f"{health.get('fingerprint')}" + (f"; checked against {', '.join(want)}" if want else "")
    )


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
        ["actor"] + (["ref"] if cfg.init_kl_coef > 0 else []) + (["critic"] if cfg.estimator.critic else [])
    )
    parts = " + ".join(f"{r} {group}" for r in roles)
    how = f"{parts} + vLLM {cfg.vllm_num_engines} x {cfg.vllm_tensor_parallel_size} = {vllm}"
    return group * len(roles) + vllm, how


def check_resources(cfg: TrainConfig) -> str:
    """OpenRLHF's train() assertions on the command, then the cluster sum; a line with the sum."""
    from parallelsearch.rl.openrlhf_cli import check_command
    from parallelsearch.rl.openrlhf_command import openrlhf_args

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
                "prompts are not chat-templated: set apply_chat_template=true, or agent.reward.mode=paper-strict"
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
            "agent.reward.mode=paper-strict for the tool-call text form"
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
    if record is None and Path(cfg.prompt_data).is_dir():
        return (
            f"prompt_data {cfg.prompt_data}: a folder (a dataset saved to disk; its records not checked)",
            None,
        )
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


def first_records(path: str | Path, n: int = TEMPLATE_SAMPLE) -> list[dict[str, Any]]:
    """Up to ``n`` first records of a local jsonl file ([] when it is not a local file)."""
    from parallelsearch.rl.preflight_data import iter_records

    if not Path(path).is_file():
        return []
    out: list[dict[str, Any]] = []
    try:
        for _, rec in iter_records(path):
            out.append(rec)
            if len(out) >= n:
                break
    except ValueError as e:
        raise PreflightError(str(e)) from e
    return out


def _checked(check: Any, *args: Any) -> Any:
    """``check(*args)``, its ValueError as a :class:`PreflightError` (the data and budget checks raise those)."""
    try:
        return check(*args)
    except ValueError as e:
        raise PreflightError(str(e)) from e


def data_checks(cfg: TrainConfig, records: list[dict[str, Any]]) -> list[str]:
    """Every prompt's template against the reward mode (one template, teaching ``##`` when the reward
    pays for splitting), and contamination (local files only; the whole file is read)."""
    if not records:
        return [f"{NOT_CHECKED}prompt_data {cfg.prompt_data} is not a local file: template and contamination"]
    mode = cfg.agent.reward.mode
    every = (rec for _, rec in iter_records(cfg.prompt_data))
    scan = _checked(scan_prompts, every, cfg.input_key, cfg.label_key)
    weights = check_reward_weights(mode, cfg.agent.reward.weights)
    split = weights.get("comp_score", weights.get("lambda_d", 0.0))
    template = _checked(check_template_reward, mode, scan)
    _checked(check_split_taught, scan, mode, split, cfg.agent.graph_config.protocol)
    return [
        template,
        _checked(check_contamination, cfg.prompt_data, cfg.eval_data, cfg.input_key, cfg.label_key),
    ]


def tokenizer_checks(
    cfg: TrainConfig, records: list[dict[str, Any]], passages: list[Any] | None
) -> list[str]:
    """The chat template OpenRLHF applies, and ``max_len`` against a full episode, counted with the
    model's tokenizer when this machine has it (else estimated)."""
    tokenizer, said = local_tokenizer(cfg.model)
    prompts = [str(r.get(cfg.input_key, "")) for r in records] or ["Question: q?\n" * 60]
    lines = []
    foreign = _checked(check_foreign_template, cfg, prompts[0] if records else None, tokenizer)
    if foreign:
        lines.append(foreign)
    if cfg.apply_chat_template and tokenizer is None:
        lines.append(f"{NOT_CHECKED}{said}: its chat template is checked by the executor's first episode")
    elif cfg.apply_chat_template:
        lines.append(_checked(check_chat_template, tokenizer, cfg.model, prompts[0], cfg.agent.reward.mode))
        prompts = [
            tokenizer.apply_chat_template(
                [{"role": "user", "content": p}], tokenize=False, add_generation_prompt=True
            )
            for p in prompts
        ]
    lines += gateway_checks(cfg, tokenizer, said)
    how = (
        f"tokens counted with {said}"
        if tokenizer is not None
        else f"estimated at {CHARS_PER_TOKEN} characters a token"
    )
    gc = cfg.agent.graph_config
    passage = passage_tokens(passages, tokenizer) if passages else DEFAULT_PASSAGE_TOKENS
    # the executor cuts each observation to the cap; the gateway's tool messages are the agent's own
    cap = cfg.agent.max_observation_tokens if cfg.agent.mode == "text" else None
    wide, wide_said = widest_observation(gc, passage, cap)
    first, first_said = first_prompt_tokens(cfg, records, prompts, tokenizer)
    how += first_said
    budget = EpisodeBudget(
        prompt=first,
        turn=cfg.max_new_tokens_per_turn,
        passage=passage,
        max_turns=gc.max_turns,
        top_k=gc.top_k,
        wide=wide,
        wide_said=wide_said,
        cap=cap,
    )
    how += (
        "; passages as long as the probe's (mean)"
        if passages
        else "; passages assumed at " + str(DEFAULT_PASSAGE_TOKENS)
    )
    return lines + budget_lines(cfg, budget, how)


def budget_lines(cfg: TrainConfig, budget: EpisodeBudget, how: str) -> list[str]:
    """The observation cap against one passage, ``max_len`` against a full episode, and the
    sub-queries one search holds whole (a warning under two)."""
    _checked(check_cap, budget.cap, budget.passage, budget.top_k, how)
    lines = [_checked(check_budget, cfg.max_len, budget, how)]
    room, short = subquery_room(cfg.max_len, budget, cfg.agent.graph_config)
    return [*lines, WARNING + room if short else room]


def first_prompt_tokens(
    cfg: TrainConfig, records: list[dict[str, Any]], prompts: list[str], tokenizer: Any
) -> tuple[int, str]:
    """The longest first prompt of an episode, in tokens, and how it was counted. Text mode: the
    training prompts as OpenRLHF hands them over. Gateway mode: the agent's own first model call as
    the gateway renders it (its system prompt and tools), which needs the model's tokenizer."""
    if cfg.agent.mode != "gateway" or not records:
        return max(count_tokens(p, tokenizer) for p in prompts), ""
    if tokenizer is None:
        return max(count_tokens(p, tokenizer) for p in prompts), (
            "; gateway mode: the agent's own first prompt needs the model's tokenizer, the training "
            "prompt stands in"
        )
    from parallelsearch.rl.executor import question_from
    from parallelsearch.rl.gateway.first_prompt import first_prompt_tokens as gateway_first

    questions = [question_from(str(r.get(cfg.input_key, "")), label_dict(r, cfg.label_key)) for r in records]
    counts = gateway_first(cfg.agent, tokenizer, questions)
    return max(counts), "; the prompt is the gateway agent's first model call (its system prompt and tools)"


#: the question of the gateway's scripted check episode
CHECK_QUESTION = "Were Scott Derrickson and Ed Wood of the same nationality?"
#: the job folder's record of the chat template a gateway-mode run was checked with
TEMPLATE_DIGEST_FILE = "chat_template.json"


def gateway_checks(cfg: TrainConfig, tokenizer: Any, said: str) -> list[str]:
    """Gateway mode: the chat template is append-only for tool turns; its digest goes into the
    job folder, so the run names the template its tokens were made with."""
    if cfg.agent.mode != "gateway":
        return []
    if tokenizer is None:
        return [f"{NOT_CHECKED}{said}: its chat template's tool turns (gateway mode)"]
    from parallelsearch.rl.gateway.template_check import check_gateway_template

    try:
        line, digest = check_gateway_template(tokenizer)
    except ValueError as e:
        raise PreflightError(str(e)) from e
    path = Path(cfg.job_dir) / TEMPLATE_DIGEST_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"model": cfg.model, "chat_template_sha256": digest}, indent=2) + "\n")
    from parallelsearch.rl.gateway.conversation import reader_limits
    from parallelsearch.rl.gateway.episode_check import check_gateway_episode

    try:
        episode = check_gateway_episode(cfg.agent, tokenizer, CHECK_QUESTION, reader_limits(cfg.agent))
    except ValueError as e:
        raise PreflightError(str(e)) from e
    return [f"{line}; sha256 {digest[:12]}... written to {path}", *episode]


def is_correction_line(cfg: TrainConfig) -> str:
    """Whether the engine/trainer log-prob mismatch is corrected (a line, never a failure)."""
    if cfg.is_correction == "off":
        return (
            f"{NOT_CHECKED}log-prob mismatch correction is off (is_correction=off): the engine's and the "
            "trainer's log-probs differ and nothing corrects it; set is_correction=tis"
        )
    low, high = cfg.is_clip
    how = "clips" if cfg.is_correction == "tis" else "drops tokens outside"
    return (
        f"log-prob mismatch correction on: {cfg.is_correction} {how} the token ratio pi_train/pi_engine "
        f"to [{low:g}, {high:g}]; OpenRLHF logs the mismatch as vllm_kl each step"
    )


def config_checks(cfg: TrainConfig) -> list[str]:
    """The run's shape from its settings alone: batches, sampling, graph and reward, the reward's
    weights against its mode's own, the eval file's path, resume and critic."""
    lines = [_checked(check, cfg) for check in (check_batches, check_sampling, check_graph_reward)]
    weights, warnings = _checked(check_weights, cfg.agent.reward.mode, cfg.agent.reward.weights)
    lines += [weights, *(WARNING + w for w in warnings)]
    return lines + [
        line for check in (check_eval_path, check_resume, check_critic) if (line := _checked(check, cfg))
    ]


def shape_checks(cfg: TrainConfig, schedule: Schedule) -> tuple[list[str], DataShape | None]:
    """The data's gold answers, the run's steps and evaluation; the training file's shape (None:
    not a local file), whose sample the corpus check searches."""
    lines, shape = [], None
    if Path(cfg.prompt_data).is_file():
        try:
            shape = data_shape(
                cfg.prompt_data, cfg.label_key, keep=cfg.corpus_check_questions, input_key=cfg.input_key
            )
        except ValueError as e:
            raise PreflightError(str(e)) from e
        lines.append(_checked(check_gold, shape, "prompt_data"))
        lines += [WARNING + w for w in repeat_warnings(shape)]
    if schedule.prompts is not None:
        lines.append(_checked(check_steps, cfg, schedule))
    if cfg.eval_data and Path(cfg.eval_data).is_file():
        lines.append(_checked(check_gold, data_shape(cfg.eval_data, cfg.label_key), "eval_data"))
    return lines, shape


def corpus_line(cfg: TrainConfig, shape: DataShape | None) -> str:
    """The corpus check on the training file's sample (run with the probe)."""
    from parallelsearch.rl.preflight_corpus import check_corpus

    if not cfg.corpus_check_questions:
        return f"{NOT_CHECKED}corpus coverage (corpus_check_questions=0)"
    if shape is None or not shape.sample:
        return f"{NOT_CHECKED}corpus coverage (prompt_data {cfg.prompt_data} is not a local file)"
    return _checked(
        lambda: check_corpus(
            cfg.agent,
            shape.sample,
            cfg.input_key,
            cfg.label_key,
            floor=cfg.corpus_check_floor,
            where=retriever_name(cfg.agent),
        )
    )


def job_schedule(cfg: TrainConfig) -> Schedule:
    """The run's schedule on its data (:func:`~parallelsearch.rl.schedule.plan`); a missing file, or
    one that cannot be counted without ``num_episodes``, is a :class:`PreflightError`."""
    check_data(cfg)
    return _checked(plan, cfg)


def schedule_lines(cfg: TrainConfig, schedule: Schedule) -> list[str]:
    """The run-length line, and a warning when it passes over the prompts too often."""
    warning = passes_warning(cfg, schedule)
    return [schedule_line(cfg, schedule), *([WARNING + warning] if warning else [])]


def factory_lines(cfg: TrainConfig) -> list[str]:
    """Gateway mode with ``agent.factory``: its module ships and it returns an agent."""
    if cfg.agent.mode != "gateway" or not cfg.agent.factory:
        return []
    from parallelsearch.rl.preflight_factory import check_factory

    return [_checked(check_factory, cfg.agent)]


def preflight(cfg: TrainConfig, *, probe: bool = True, schedule: Schedule | None = None) -> list[str]:
    """Every check, in order; returns one line per check passed (or ``not checked: ...``, or
    ``warning: ...``), raises on the first failure. ``schedule``: the job's (else computed here)."""
    lines = [check_resources(cfg), *config_checks(cfg), *factory_lines(cfg)]
    data_line, record = check_data(cfg)
    schedule = schedule or job_schedule(cfg)
    lines.append(data_line)
    lines.append(check_protocol(cfg, record))
    lines.append(check_reward_prompts(cfg, record))
    records = first_records(cfg.prompt_data)
    lines.extend(data_checks(cfg, records))
    shape_lines, shape = shape_checks(cfg, schedule)
    lines += [*shape_lines, *schedule_lines(cfg, schedule), is_correction_line(cfg)]
    passages = None
    if probe:
        if cfg.agent.retriever_url:
            lines.append(check_retriever_identity(cfg.agent))
        passages = probe_passages(cfg.agent, k=cfg.agent.graph_config.top_k)
        lines.append(f"{retriever_name(cfg.agent)} answered a probe query ({len(passages)} passages)")
        lines.append(corpus_line(cfg, shape))
    else:
        lines.append(
            f"{NOT_CHECKED}{retriever_name(cfg.agent)} (--skip-probe): the executor probes it at start, "
            "and the corpus coverage is not checked"
        )
    lines.extend(tokenizer_checks(cfg, records, passages))
    return lines


def executor_startup(agent: AgentConfig) -> list[str]:
    """What each executor checks when it starts (the cheap half of :func:`preflight`): the
    retriever's identity and key against its ``/health``, then one probe query."""
    lines = [check_retriever_identity(agent)] if agent.retriever_url else []
    return [*lines, probe_retriever(agent)]
