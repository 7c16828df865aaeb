"""The pre-flight checks of a run's data (``train --check``): which prompt template the prompts
were made with and whether the reward mode can score it, and whether evaluation questions leaked
into the training file. Each raises a ValueError naming the file, the cause and the fix.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from parallelsearch.agents.protocol import TEMPLATES, TOOL_TEMPLATES, render_prompt
from parallelsearch.rl.data import EVAL_ID_RE, SCORE_EM
from parallelsearch.stores.errors import json_of

#: prompts the checks that need a tokenizer read (spread through the file); the template check reads all
TEMPLATE_SAMPLE = 16
_SEARCH_OPEN = "<search>"
_ANSWER_RE = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


def iter_records(path: str | Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, record) of every non-empty line of a local jsonl file; errors name the line."""
    p = Path(path)
    with p.open(encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if line.strip():
                yield n, json_of(line, f"{p}: line {n}")


def label_dict(record: dict[str, Any], label_key: str) -> dict[str, Any]:
    """The record's label as a dict (make-train-data writes a JSON string); {} when it is not one."""
    label = record.get(label_key)
    if isinstance(label, str):
        try:
            label = json.loads(label)
        except json.JSONDecodeError:
            return {}
    return label if isinstance(label, dict) else {}


def template_of(rec: dict[str, Any], input_key: str, label_key: str) -> str | None:
    """The name of the template a prompt was rendered with around its label's question (raw or
    chat-templated), or None when no known template fits it."""
    question = label_dict(rec, label_key).get("question")
    prompt = rec.get(input_key)
    if not isinstance(question, str) or not isinstance(prompt, str):
        return None
    return next(
        (
            name
            for name in (*TEMPLATES, *TOOL_TEMPLATES)
            if render_prompt(question, name).rstrip("\n") in prompt
        ),
        None,
    )


def detect_template(records: Iterable[dict[str, Any]], input_key: str, label_key: str) -> str | None:
    """The name of the template every prompt of ``records`` was rendered with, or None when no known
    template fits them all."""
    found = {template_of(rec, input_key, label_key) for rec in records}
    return found.pop() if len(found) == 1 else None


def official_offsets(text: str) -> tuple[int, int]:
    """What the official reward counts over the whole episode, prompt included: ``<search>`` tags
    and ``<answer>...</answer>`` matches (its search-count target and answer index assume the
    official prompt's numbers)."""
    return text.count(_SEARCH_OPEN), len(_ANSWER_RE.findall(text))


@dataclass
class PromptScan:
    """What one pass over the prompts tells: each one's template, whether it teaches ``##``, and the
    official reward's counts of its own ``<search>``/``<answer>`` examples."""

    records: int = 0
    templates: Counter = field(default_factory=Counter)
    first: dict[str | None, int] = field(default_factory=dict)  # template -> its first record
    no_split: int = 0
    first_no_split: int | None = None
    odd_offsets: tuple[int, tuple[int, int]] | None = None  # (record, its counts) unlike the official's


def scan_prompts(records: Iterable[dict[str, Any]], input_key: str, label_key: str) -> PromptScan:
    """Every record's template, ``##`` and official counts (records numbered from 1)."""
    scan, want = PromptScan(), official_offsets(render_prompt("q", "official"))
    for n, rec in enumerate(records, 1):
        scan.records = n
        name = template_of(rec, input_key, label_key)
        scan.templates[name] += 1
        scan.first.setdefault(name, n)
        prompt = str(rec.get(input_key, ""))
        if "##" not in prompt:
            scan.no_split += 1
            scan.first_no_split = scan.first_no_split or n
        have = official_offsets(prompt)
        if have != want and scan.odd_offsets is None:
            scan.odd_offsets = (n, have)
    return scan


def _said(name: str | None) -> str:
    return f"template {name}" if name else "an unknown template"


def one_template(scan: PromptScan) -> str | None:
    """The template all prompts share; a ValueError naming the records where they switch."""
    if len(scan.templates) <= 1:
        return next(iter(scan.templates), None)
    parts = [f"{_said(k)} ({v}, first: record {scan.first[k]})" for k, v in scan.templates.most_common()]
    raise ValueError(
        f"the prompts switch template: {'; '.join(parts)}; a policy trained on a mix learns two protocols "
        "and the reward scores one; make the whole file with one `make-train-data --template`"
    )


def check_template_reward(
    mode: str,
    records: Iterable[dict[str, Any]] | PromptScan,
    input_key: str = "prompt",
    label_key: str = "label",
) -> str:
    """Every prompt is in one template (detected), which ``mode`` can score: the official reward counts
    the prompt's own ``<search>`` and ``<answer>`` examples, so any prompt but the official template's
    shifts its targets (Search-R1's prompt makes two searches score more than one)."""
    scan = records if isinstance(records, PromptScan) else scan_prompts(records, input_key, label_key)
    template = one_template(scan)
    said = _said(template)
    if mode == "official" and scan.odd_offsets:
        n, have = scan.odd_offsets
        want = official_offsets(render_prompt("q", "official"))
        raise ValueError(
            f"reward mode official counts the prompt's own <search> and <answer> tags, but the "
            f"prompts ({said}) hold {have[0]} <search> and {have[1]} <answer> (first: record {n}) where the "
            f"official template holds {want[0]} and {want[1]}: its search-count target would move (a second "
            "search would score more than one); make the data with `make-train-data --template "
            "official`, or set agent.reward.mode=paper-strict"
        )
    if mode == "dag" and template not in ("dag", None):
        raise ValueError(
            f"reward mode dag rewards #k plans but the prompts ({said}) never teach #k: make the data with "
            "`make-train-data --template dag`, or set agent.reward.mode=paper-strict"
        )
    return f"prompts in {said} (all {scan.records}), scored by reward mode {mode}"


def check_split_taught(scan: PromptScan, mode: str, split_weight: float, protocol: str) -> str | None:
    """Under a reward that pays for splitting (``split_weight`` > 0) the tags prompts must teach ``##``:
    Search-R1's template never tells the policy it may split, so the decomposition term is never earned."""
    if protocol == "tools" or split_weight <= 0 or not scan.no_split:
        return None
    raise ValueError(
        f"reward mode {mode} pays for '##' decompositions (weight {split_weight:g}) but {scan.no_split} of "
        f"{scan.records} prompts never mention '##' (first: record {scan.first_no_split}, "
        f"{_said(scan.templates and max(scan.templates, key=scan.templates.__getitem__))}): the policy is never "
        "told it may split; make the data with `make-train-data --template official` (or paper), or set "
        "agent.reward.weights.lambda_d=0"
    )


def question_key(rec: dict[str, Any], input_key: str, label_key: str) -> str:
    """A record's question, normalised (the label's, else the prompt's last ``Question:`` line)."""
    question = label_dict(rec, label_key).get("question")
    if not isinstance(question, str):
        found = re.findall(r"Question:\s*(.+)", str(rec.get(input_key, "")))
        question = found[-1] if found else str(rec.get(input_key, ""))
    return " ".join(re.sub(r"[^\w\s]", " ", question.lower()).split())


def _eval_marks(path: str, records: Iterator[tuple[int, dict[str, Any]]], label_key: str) -> str:
    """A ValueError at the first training record that is an evaluation record or has an eval id;
    returns what the data says of its questions: none from evaluation files, or how many
    ``make-train-data --allow-eval-questions`` took from them (its label's ``eval_origin``)."""
    allowed, first = 0, ""
    for n, rec in records:
        label = label_dict(rec, label_key)
        if label.get("eval_origin"):
            allowed += 1
            first = first or f"line {n}: {label['eval_origin']}"
        ids = [rec.get("id"), label.get("id")]
        bad = next((str(i) for i in ids if i is not None and EVAL_ID_RE.fullmatch(str(i))), None)
        if label.get("score") == SCORE_EM:
            bad = "an eval record (make-train-data --eval)"
        if bad is not None:
            raise ValueError(
                f"prompt_data {path}: line {n} is evaluation data ({bad if ' ' in bad else 'id ' + repr(bad)}): "
                "training on it contaminates every later evaluation; make the training file from train "
                "splits (`make-train-data` refuses evaluation files)"
            )
    if not allowed:
        return "no evaluation ids or eval records"
    return (
        f"{allowed} record(s) from evaluation files, written with make-train-data --allow-eval-questions "
        f"(first: {first}): never evaluate this run's model on those files"
    )


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def check_contamination(prompt_data: str, eval_data: str | None, input_key: str, label_key: str) -> str:
    """Evaluation data kept out of training: no eval record or evaluation id in ``prompt_data``,
    and ``eval_data`` neither the same file nor sharing a question with it (local files only)."""
    train = Path(prompt_data)
    marks = _eval_marks(prompt_data, iter_records(train), label_key)
    if not eval_data or not Path(eval_data).is_file():
        return f"prompt_data {prompt_data}: {marks}"
    held = Path(eval_data)
    if held.resolve() == train.resolve() or _digest(held) == _digest(train):
        raise ValueError(
            f"eval_data {eval_data} is the same data as prompt_data {prompt_data}: the run would be evaluated "
            "on its training questions; make eval_data with `make-train-data --eval` from dev/test files"
        )
    seen = {question_key(r, input_key, label_key) for _, r in iter_records(train)}
    shared = [(n, r) for n, r in iter_records(held) if question_key(r, input_key, label_key) in seen]
    if shared:
        n, rec = shared[0]
        raise ValueError(
            f"eval_data {eval_data}: {len(shared)} question(s) are also in prompt_data {prompt_data} "
            f"(first: line {n}, {question_key(rec, input_key, label_key)[:80]!r}); keep evaluation "
            "questions out of the training file"
        )
    return f"prompt_data {prompt_data}: {marks}; eval_data shares no question with it"
