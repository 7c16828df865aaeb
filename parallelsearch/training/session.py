"""One CPU smoke session: the model (the tiny one built here, or a real one named by ``model``), the retriever, the config, the prompts and OpenRLHF's rollout
actor on a vLLM CPU engine, set up in order and torn down in reverse (both smoke forms start here)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class Smoke:
    """What a running session holds."""

    work: Path
    model_dir: Path
    tokenizer: Any
    cfg: Any  # the TrainConfig
    args: Any  # OpenRLHF's parsed arguments for it
    records: list[dict[str, Any]]  # one prompt record per question, in order
    actor: Any  # OpenRLHF's RolloutRayActor, built in-process
    seconds: dict[str, float] = field(default_factory=dict)

    @property
    def sync_checkable(self) -> bool:
        """Whether the engine's log-probs can be compared with the actor's: not under constrained
        decoding, whose engine samples from the grammar-masked distribution the actor does not compute."""
        return not self.cfg.agent.constrained


@contextlib.asynccontextmanager
async def smoke_session(
    questions: Sequence[dict[str, Any]],
    *,
    store_questions: int,
    overrides: Sequence[str] = (),
    engine_args: dict[str, Any] | None = None,
    retriever_url: str | None = None,
    workdir: str | Path | None = None,
    model_kwargs: dict[str, Any] | None = None,
    model: str | None = None,
    echo: Callable[[str], None] = print,
) -> AsyncIterator[Smoke]:
    """Build the tiny model into the work folder (or resolve ``model``, a real one: a packaged name such as
    ``smollm2-135m``, a GGUF file or a Hugging Face folder), serve the demo store of the sample's first
    ``store_questions`` questions (unless ``retriever_url``), resolve the config (``overrides`` = ``--set``),
    write the prompts of ``questions`` and the agent config, and start the rollout actor."""
    from parallelsearch.rl.openrlhf_cpu import rollout_actor_in_process
    from parallelsearch.training import setup
    from parallelsearch.training.rollouts import record_engine_turns

    setup.check_overrides(overrides)
    setup.check_smoke_deps()
    seconds: dict[str, float] = {}
    with contextlib.ExitStack() as stack:
        work = stack.enter_context(setup.work_folder(workdir))
        t0 = time.perf_counter()
        url = stack.enter_context(setup.retriever(retriever_url, store_questions, echo))
        seconds["retriever"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        model_dir, cfg, tokenizer = _model_and_config(model, work, url, overrides, model_kwargs, echo)
        seconds["model"] = time.perf_counter() - t0
        args = setup.openrlhf_train_args(cfg)
        records = setup.prompt_records(questions, cfg, tokenizer)
        setup.write_prompts(records, Path(cfg.prompt_data))
        stack.enter_context(setup.agent_config_file(cfg, work / "agent.yaml"))
        engine = {**setup.SMOKE_ENGINE_ARGS, **(engine_args or {})}
        echo(_setup_line(model or "tiny Llama", model_dir, cfg, args, engine))
        t0 = time.perf_counter()
        actor = await rollout_actor_in_process(str(model_dir), **engine)
        seconds["engine_start"] = time.perf_counter() - t0
        try:
            record_engine_turns(actor)
            smoke = Smoke(work, model_dir, tokenizer, cfg, args, records, actor, seconds)
            if not smoke.sync_checkable:
                echo(NO_SYNC_CHECKS)
            yield smoke
        finally:
            actor.llm.shutdown()
            actor.llm = None  # released now, not by the interpreter's exit


#: why a constrained smoke does not compare the trainer's log-probabilities with the engine's
NO_SYNC_CHECKS = "sync checks: not run (constrained decoding samples from the grammar-masked distribution)"


def _model_and_config(
    model: str | None,
    work: Path,
    url: str,
    overrides: Sequence[str],
    model_kwargs: dict[str, Any] | None,
    echo: Callable[[str], None],
) -> tuple[Path, Any, Any]:
    """The smoke's model folder (a real model resolved, else the tiny one built there), its resolved
    config and its tokenizer."""
    from transformers import AutoTokenizer

    from parallelsearch.agents.policies.models import resolve_model
    from parallelsearch.rl.tiny_model import save_tiny
    from parallelsearch.training import setup

    model_dir = Path(resolve_model(model, echo=echo)) if model else work / "tiny-llama"
    cfg = setup.smoke_config(model_dir, work / "prompts.jsonl", url, overrides, real_model=bool(model))
    if not model:
        # gateway mode: a tokenizer and template for the tools format, as a chat model has
        save_tiny(model_dir, tools=cfg.agent.mode == "gateway", **(model_kwargs or {}))
    return model_dir, cfg, AutoTokenizer.from_pretrained(model_dir)


def _setup_line(name: str, model_dir: Path, cfg: Any, args: Any, engine: dict[str, Any]) -> str:
    """The one line that says what the smoke runs."""
    import json

    return (
        f"smoke: {name} ({model_dir}), reward {cfg.agent.reward.mode}, chat template "
        f"{'on' if cfg.apply_chat_template else 'off'}, constrained decoding "
        f"{'on' if cfg.agent.constrained else 'off'}, {args.algo.advantage.estimator} advantages, "
        f"engine {json.dumps(engine)}"
    )
