"""The pre-flight checks of a run's shape (``train --check``): batch arithmetic DeepSpeed and the
rollout loop assume, sampling a group baseline can learn from, the data holding gold answers and
enough prompts for a step, evaluation that will run, a resume that finds a checkpoint, a critic
of the actor's family, and a graph the reward mode can pay. OpenRLHF asserts some of these only
after Ray has placed the GPUs, others never. Each raises a ValueError naming the setting and the fix.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from parallelsearch.rl.preflight_data import iter_records, label_dict, question_key
from parallelsearch.rl.schedule import Schedule
from parallelsearch.rl.train_config import TrainConfig

#: file suffixes that make a data name a local path (anything else may be a hub dataset name)
LOCAL_SUFFIXES = (".jsonl", ".json", ".parquet", ".csv")
#: chat-template markers -> the template family they belong to
TEMPLATE_MARKERS: dict[str, str] = {
    "<|im_start|>": "ChatML (Qwen)",
    "<|start_header_id|>": "Llama-3",
    "<start_of_turn>": "Gemma",
    "[INST]": "Llama-2/Mistral",
    "<|user|>": "Phi-3/Zephyr",
}
#: model families by name, for when a model's config is not on this machine
_FAMILY_NAMES = (
    ("qwen", "qwen2"),
    ("llama-3", "llama"),
    ("llama3", "llama"),
    ("llama", "llama"),
    ("mistral", "mistral"),
    ("gemma", "gemma"),
    ("phi", "phi3"),
    ("deepseek", "deepseek"),
)
#: the chat-template family each model family's instruct tokenizer writes
_FAMILY_TEMPLATE = {"qwen2": "ChatML (Qwen)", "gemma": "Gemma", "mistral": "Llama-2/Mistral"}


def check_batches(cfg: TrainConfig) -> str:
    """``train_batch_size`` splits into micro batches on every GPU (DeepSpeed asserts it after Ray
    placed the GPUs), and one rollout batch's samples split into whole train batches."""
    world = cfg.nodes * cfg.gpus_per_node
    unit = cfg.micro_train_batch_size * world
    if cfg.train_batch_size % unit:
        fit = max(unit, cfg.train_batch_size // unit * unit)
        raise ValueError(
            f"train_batch_size {cfg.train_batch_size} is not a multiple of micro_train_batch_size x GPUs = "
            f"{cfg.micro_train_batch_size} x {world} = {unit} (DeepSpeed fails after Ray placed the GPUs): "
            f"set train_batch_size={fit}, or another micro_train_batch_size"
        )
    samples = cfg.rollout_batch_size * cfg.n_samples_per_prompt
    if samples % cfg.train_batch_size:
        raise ValueError(
            f"rollout_batch_size x n_samples_per_prompt = {cfg.rollout_batch_size} x {cfg.n_samples_per_prompt} "
            f"= {samples} is not a multiple of train_batch_size {cfg.train_batch_size}: the last train batch "
            f"of every step is short; set train_batch_size to a divisor of {samples}"
        )
    return (
        f"batches: train_batch_size {cfg.train_batch_size} = {cfg.train_batch_size // unit} x micro "
        f"{cfg.micro_train_batch_size} x {world} GPUs; a rollout batch is {samples // cfg.train_batch_size} "
        "train batch(es)"
    )


def check_sampling(cfg: TrainConfig) -> str:
    """A group baseline needs different samples of one prompt: at temperature 0 every group is
    identical and every advantage 0."""
    grouped = cfg.estimator.group or cfg.n_samples_per_prompt > 1
    if grouped and cfg.temperature == 0:
        raise ValueError(
            f"temperature 0 with algorithm {cfg.algorithm} and n_samples_per_prompt {cfg.n_samples_per_prompt}: "
            "greedy decoding makes every sample of a prompt identical, so every group's rewards are equal "
            "and every advantage is 0 (nothing is learned); set temperature=1.0"
        )
    return f"sampling: temperature {cfg.temperature:g}, {cfg.n_samples_per_prompt} sample(s) per prompt"


def check_graph_reward(cfg: TrainConfig) -> str:
    """The ``official`` reward pays ``##`` decompositions the sequential graph refuses to run."""
    graph, mode = cfg.agent.graph, cfg.agent.reward.mode
    if mode == "official" and graph == "sequential":
        raise ValueError(
            "agent.graph sequential with agent.reward.mode official: the official reward pays for '##' "
            "decompositions that the sequential graph refuses (every such search is an invalid action); set "
            "agent.graph=parallel, or agent.reward.mode=paper-strict"
        )
    return f"graph {graph}: reward mode {mode} pays what it runs"


def looks_local(path: str) -> bool:
    """Whether a data name is meant as a file here (a path, or a data file's suffix), not a hub name."""
    return path.startswith(("/", "./", "../", "~")) or path.endswith(LOCAL_SUFFIXES)


@dataclass
class DataShape:
    """What one pass over a local jsonl file tells: its records, those without gold answers, those
    repeating an earlier question, and those whose id an earlier record with another question holds."""

    path: str
    records: int = 0
    missing_gold: int = 0
    first_missing: int | None = None
    sample: list[dict[str, Any]] = field(default_factory=list)
    repeats: int = 0
    first_repeat: tuple[int, int] | None = None  # (line, the earlier line it repeats)
    id_clashes: int = 0
    first_clash: tuple[str, int, int] | None = None  # (id, earlier line, line)


def gold_answers(record: dict[str, Any], label_key: str) -> list[str]:
    """The record's gold answers (non-empty strings), from its label's ``golden_answers``/``target``/``answer``."""
    label = label_dict(record, label_key)
    if not label and isinstance(record.get(label_key), str):
        raw = record[label_key]
        try:
            json.loads(raw)
        except json.JSONDecodeError:
            return [raw] if raw.strip() else []
    gold = label.get("golden_answers", label.get("target", label.get("answer")))
    gold = [gold] if isinstance(gold, str) else gold
    return [g for g in gold or [] if isinstance(g, str) and g.strip()]


def data_shape(path: str, label_key: str, keep: int = 0, input_key: str = "prompt") -> DataShape:
    """One pass over ``path``: records, those without gold answers, repeats and id clashes, and
    ``keep`` records spread evenly through the file (the corpus check's sample)."""
    shape = DataShape(path)
    rows: list[dict[str, Any]] = []
    questions: dict[str, int] = {}  # normalised question -> its first line
    ids: dict[str, tuple[str, int]] = {}  # id -> (its question, its first line)
    for n, rec in iter_records(path):
        shape.records += 1
        if keep:
            rows.append(rec)
        if not gold_answers(rec, label_key):
            shape.missing_gold += 1
            shape.first_missing = shape.first_missing or n
        _count_repeats(shape, rec, n, questions, ids, input_key, label_key)
    if keep and rows:
        step = max(1, len(rows) // keep)
        shape.sample = rows[::step][:keep]
    return shape


def _count_repeats(
    shape: DataShape,
    rec: dict[str, Any],
    n: int,
    questions: dict[str, int],
    ids: dict[str, tuple[str, int]],
    input_key: str,
    label_key: str,
) -> None:
    """Count ``rec`` (line ``n``) in ``shape`` when it repeats an earlier question, or holds an
    earlier record's id with another question."""
    question = question_key(rec, input_key, label_key)
    first = questions.setdefault(question, n)
    if first != n:
        shape.repeats += 1
        shape.first_repeat = shape.first_repeat or (n, first)
    rid = rec.get("id", label_dict(rec, label_key).get("id"))
    if rid is None:
        return
    held, line = ids.setdefault(str(rid), (question, n))
    if held != question:
        shape.id_clashes += 1
        shape.first_clash = shape.first_clash or (str(rid), line, n)


def repeat_warnings(shape: DataShape) -> list[str]:
    """A line each when the file repeats questions or reuses ids for other questions."""
    out = []
    if shape.first_repeat:
        n, first = shape.first_repeat
        out.append(
            f"prompt_data {shape.path}: {shape.repeats} of {shape.records} records repeat an earlier question "
            f"(first: line {n} repeats line {first}): every pass trains on those questions again, weighting "
            "them over the rest; keep each question once (make-train-data does)"
        )
    if shape.first_clash:
        rid, first, n = shape.first_clash
        out.append(
            f"prompt_data {shape.path}: {shape.id_clashes} records reuse the id of an earlier record with another "
            f"question (first: id {rid!r}, lines {first} and {n}; datasets merged with their own positional ids?): "
            "per-id logs and deduplication mix them up; give each dataset's ids a prefix (make-train-data "
            "derives ids from the question)"
        )
    return out


def check_gold(shape: DataShape, key: str) -> str:
    """Every record of ``key`` (prompt_data or eval_data) carries gold answers: without them every
    outcome reward (or eval pass@1) is 0."""
    if shape.missing_gold:
        raise ValueError(
            f"{key} {shape.path}: {shape.missing_gold} of {shape.records} records have no golden answers "
            f"(first: line {shape.first_missing}), so their outcome reward is always 0; make the file with "
            "`parallelsearch make-train-data` from questions with golden_answers"
        )
    return f"{key} {shape.path}: {shape.records} records, each with golden answers"


def check_eval_path(cfg: TrainConfig) -> str | None:
    """``eval_data`` names a file here that exists (a hub name is passed as is)."""
    if not cfg.eval_data or Path(cfg.eval_data).is_file():
        return None
    if looks_local(cfg.eval_data):
        raise ValueError(
            f"eval_data {cfg.eval_data} does not exist: OpenRLHF would fail at its first evaluation; make it "
            "with `parallelsearch make-train-data --eval`, or unset eval_data"
        )
    return f"eval_data {cfg.eval_data}: not a local file (a hub dataset; not checked)"


def check_steps(cfg: TrainConfig, schedule: Schedule) -> str:
    """The prompt file fills a rollout batch, and evaluation runs at least once (``schedule``: the
    run's, on a file that was counted)."""
    prompts, steps = schedule.prompts, schedule.steps
    assert prompts is not None and steps is not None
    if prompts < cfg.rollout_batch_size:
        raise ValueError(
            f"prompt_data {cfg.prompt_data} holds {prompts} prompts, fewer than one rollout batch "
            f"(rollout_batch_size {cfg.rollout_batch_size}): every step would be one short batch; set "
            f"rollout_batch_size <= {prompts}, or use more data"
        )
    if cfg.eval_data and cfg.eval_steps != -1 and cfg.eval_steps > steps:
        raise ValueError(
            f"eval_steps {cfg.eval_steps} > the run's {steps} steps ({schedule.episodes} pass(es) x "
            f"{prompts} prompts / rollout_batch_size {cfg.rollout_batch_size}): evaluation never runs; set "
            f"eval_steps <= {steps}"
        )
    every = f"; evaluation every {cfg.eval_steps} steps" if cfg.eval_data else ""
    return f"steps: {steps} ({schedule.episodes} pass(es) of {prompts} prompts){every}"


def ckpt_folder(cfg: TrainConfig) -> Path:
    """Where OpenRLHF looks for the checkpoint to resume (a relative path is the job folder's)."""
    path = Path(cfg.ckpt_path or Path(cfg.save_path) / "ckpt")
    return path if path.is_absolute() else Path(cfg.job_dir) / path


def check_resume(cfg: TrainConfig) -> str | None:
    """``resume=true`` finds the actor's checkpoint (OpenRLHF silently starts from step 0 without it)."""
    if not cfg.resume:
        return None
    folder = ckpt_folder(cfg)
    if (folder / "_actor").is_dir() and any((folder / "_actor").iterdir()):
        return f"resume: checkpoint {folder / '_actor'} found"
    if folder.is_absolute() and not folder.exists() and cfg.nodes > 1:
        return f"resume: {folder} is not on this machine (not checked; it must be on shared storage)"
    raise ValueError(
        f"resume=true but ckpt_path {folder} holds no checkpoint (no {folder / '_actor'}): OpenRLHF would "
        "silently start from step 0; set ckpt_path to the run's checkpoint folder, or resume=false"
    )


def model_family(model: str) -> tuple[str | None, int | None]:
    """(family, vocabulary size) of a model: its ``config.json`` when this machine has it (a folder
    or the Hugging Face cache), else the family its name says (vocabulary unknown)."""
    try:
        from transformers import AutoConfig

        conf = AutoConfig.from_pretrained(model, local_files_only=True)
        return str(conf.model_type), getattr(conf, "vocab_size", None)
    except Exception:  # noqa: BLE001 - not on this machine: read the name
        name = model.lower()
        return next((fam for key, fam in _FAMILY_NAMES if key in name), None), None


def check_critic(cfg: TrainConfig) -> str | None:
    """A GAE critic of another family than the actor reads the actor's token ids with another vocabulary."""
    if not cfg.estimator.critic or not cfg.critic_model or cfg.critic_model == cfg.model:
        return None
    (actor, av), (critic, cv) = model_family(cfg.model), model_family(cfg.critic_model)
    if actor is None or critic is None:
        return f"critic {cfg.critic_model}: family unknown here (not checked against the actor)"
    if actor != critic or (av and cv and av != cv):
        raise ValueError(
            f"critic_model {cfg.critic_model} ({critic}{f', vocabulary {cv}' if cv else ''}) is not of the "
            f"actor's family ({cfg.model}: {actor}{f', vocabulary {av}' if av else ''}): the critic would read "
            "the actor's token ids as other tokens; unset critic_model (the actor's weights) or name a model "
            "of the actor's family"
        )
    return f"critic {cfg.critic_model}: the actor's family ({actor})"


def template_family(text: str) -> str | None:
    """The chat-template family whose marker ``text`` holds (None: not chat-templated)."""
    return next((fam for marker, fam in TEMPLATE_MARKERS.items() if marker in text), None)


def model_template(model: str, tokenizer: Any) -> str | None:
    """The template family the model's tokenizer writes (rendered when it is here, else by name)."""
    if tokenizer is not None and getattr(tokenizer, "chat_template", None):
        rendered = tokenizer.apply_chat_template(
            [{"role": "user", "content": "q"}], tokenize=False, add_generation_prompt=True
        )
        return template_family(rendered)
    family, _ = model_family(model)
    if family == "llama":
        return "Llama-3" if re.search(r"llama-?3", model.lower()) else None
    return _FAMILY_TEMPLATE.get(family or "")


def check_foreign_template(cfg: TrainConfig, prompt: str | None, tokenizer: Any) -> str | None:
    """Prompts already chat-templated (``apply_chat_template=false``) are in the actor's own template:
    another model's markers are plain text to it, and it answers after them at random."""
    if cfg.apply_chat_template or not isinstance(prompt, str):
        return None
    have = template_family(prompt)
    if have is None:
        return None
    want = model_template(cfg.model, tokenizer)
    if want is None:
        return f"prompts chat-templated as {have}: the template of {cfg.model} is unknown here (not checked)"
    if want != have:
        raise ValueError(
            f"prompt_data {cfg.prompt_data}: the prompts are chat-templated as {have}, but {cfg.model} writes "
            f"{want}, and apply_chat_template=false keeps them as they are: make the data without --tokenizer "
            "and set apply_chat_template=true, or with the actor's tokenizer"
        )
    return f"prompts chat-templated as {have}, the template of {cfg.model}"
