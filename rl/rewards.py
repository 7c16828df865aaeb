"""ParallelSearch rewards: the paper's equations and the official code's exact numbers.

The three modes (``paper``, the default; ``dag``; ``official``, the official
``compute_score_em`` quirks included) and the tool-call protocol's scoring are specified in
docs/training.md, "Reward modes"; the parity tests pin the official numbers.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from itertools import pairwise
from typing import Any, Literal, get_args

from parallelsearch.agents.protocol import (
    INVALID_FEEDBACK,
    TOOL_CALL_FEEDBACK,
    TOOL_CALL_NOT_RUN,
    TOOL_TEXT_RETRY,
    TOOL_TURN_END,
    Protocol,
    check_protocol,
    parse_tool_text,
    split_subqueries,
)
from parallelsearch.agents.subquery_plan import plan_search, written_pieces
from parallelsearch.data.metrics import exact_match
from parallelsearch.stores.errors import check_choice

RewardMode = Literal["paper", "official", "dag"]
#: the reward modes, derived from :data:`RewardMode` (configs type their field with it)
MODES: tuple[str, ...] = get_args(RewardMode)
PAPER_WEIGHTS: dict[str, float] = {"lambda_d": 0.15, "lambda_s": 0.35, "alpha": 3.0, "lambda_f": 0.1}
#: The official training script's values (train_parallelsearch.sh) under the official names.
OFFICIAL_WEIGHTS: dict[str, float] = {
    "structure_format_score": 0.1,
    "final_format_score": 0.0,
    "count_score": 0.35,
    "comp_score": 0.15,
    "score": 1.0,
    "alpha": 3.0,
}
_PAPER_TO_OFFICIAL = {
    "lambda_d": "comp_score",
    "lambda_s": "count_score",
    "lambda_f": "structure_format_score",
}

PARALLEL_TYPES = {"comparison", "comparison_query"}
SINGLE_TYPES = {"", "na", "none"}

_TAG_RE = re.compile(r"(</?(?:think|search|information|answer)>)")
_SEARCH_RE = re.compile(r"<search>(.*?)</search>", re.DOTALL)
_ANSWER_RE = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_INFO_RE = re.compile(r"<information>.*?</information>", re.DOTALL)
_ASSISTANT_RE = re.compile(r"<\|im_start\|>assistant\s*")
_PROMPT_END_MARKERS = (
    _ASSISTANT_RE,
    re.compile(r"<\|start_header_id\|>assistant<\|end_header_id\|>\s*"),
    re.compile(r"Question:[^\n]*\n"),
)


@dataclass
class RewardBreakdown:
    """The total, each part, and the facts the parts were computed from."""

    total: float
    outcome: float
    decomposition: float
    search_count: float
    format: float
    mode: str
    question_class: str  # parallel | sequential | single
    answer: str | None
    correct: bool
    searches: int
    subqueries_per_search: list[int] = field(default_factory=list)
    stages_per_search: list[int] = field(default_factory=list)
    decomposed: bool = False
    format_valid: bool = False
    format_reason: str = ""
    weights: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def parts(self) -> dict[str, float]:
        return {
            "outcome": self.outcome,
            "decomposition": self.decomposition,
            "search_count": self.search_count,
            "format": self.format,
        }


def parse_label(label: Any) -> dict[str, Any]:
    """A label as a dict: accepts a dict, a JSON string, or a bare list/str of gold answers."""
    if isinstance(label, str):
        try:
            label = json.loads(label)
        except json.JSONDecodeError:
            label = {"golden_answers": [label]}
    if isinstance(label, list | tuple):
        label = {"golden_answers": list(label)}
    if not isinstance(label, dict):
        raise ValueError(f"label must be a dict or JSON object, got {type(label).__name__}")
    gold = label.get("golden_answers", label.get("target", label.get("answer")))
    if gold is None:
        raise ValueError("label has no 'golden_answers' (or 'target'/'answer')")
    return {**label, "golden_answers": [gold] if isinstance(gold, str) else list(gold)}


def question_class(label: dict[str, Any]) -> str:
    """parallel / single / sequential from the label's ``split`` or ``type`` (the paper's split)."""
    split = label.get("split") or (label.get("metadata") or {}).get("split")
    qtype = label.get("type", (label.get("metadata") or {}).get("type"))
    if split in ("parallel", "single", "sequential"):
        return split
    t = "" if qtype is None else str(qtype).strip().lower()
    if t in PARALLEL_TYPES:
        return "parallel"
    if t in SINGLE_TYPES:
        return "single"
    return "sequential"


def official_is_comp(label: dict[str, Any]) -> int:
    """The official data pipeline's flag: 1 comparison, -1 no type ('na'), 0 otherwise."""
    qtype = label.get("type", (label.get("metadata") or {}).get("type"))
    if qtype is None or str(qtype).strip() in ("", "na"):
        return -1
    return 1 if str(qtype).strip() == "comparison" else 0


def state_machine(content: str) -> tuple[bool, str]:
    """The official format check: think -> (search -> information -> think)* -> answer, nothing outside tags."""
    for tag in ("think", "search", "information", "answer"):
        opened, closed = content.count(f"<{tag}>"), content.count(f"</{tag}>")
        if opened != closed:
            return False, f"unbalanced <{tag}>: {opened} opening vs {closed} closing"
    transitions = {
        ("<think>", "start"): "in_think",
        ("<think>", "information"): "in_think",
        ("</think>", "in_think"): "after_think",
        ("<search>", "after_think"): "in_search",
        ("</search>", "in_search"): "after_search",
        ("<information>", "after_search"): "in_information",
        ("</information>", "in_information"): "information",
        ("<answer>", "after_think"): "in_answer",
        ("</answer>", "in_answer"): "end",
    }
    state = "start"
    for part in _TAG_RE.split(content):
        if not part.strip():
            continue
        if _TAG_RE.fullmatch(part):
            nxt = transitions.get((part, state))
            if nxt is None:
                return False, f"unexpected {part} in state {state}"
            state = nxt
        elif state not in ("in_think", "in_search", "in_information", "in_answer"):
            return False, f"text outside tags in state {state}: {part.strip()[:40]!r}"
    if state != "end":
        return False, f"incomplete: ended in state {state}"
    return True, "valid"


def response_start(
    text: str, prompt: str | None = None, markers: Sequence[re.Pattern[str]] = _PROMPT_END_MARKERS
) -> int:
    """Where the policy's first turn begins: after ``prompt``, else after the first of ``markers``
    found (a chat assistant marker, or the question line)."""
    if prompt and text.startswith(prompt):
        return len(prompt)
    for marker in markers:
        m = marker.search(text)
        if m:
            return m.end()
    return 0


def check_reward_weights(mode: str, weights: dict[str, float]) -> dict[str, float]:
    """The mode's weights with ``weights`` applied; a ValueError naming an unknown weight."""
    base = dict(OFFICIAL_WEIGHTS if check_reward_mode(mode) == "official" else PAPER_WEIGHTS)
    for key, value in weights.items():
        name = _PAPER_TO_OFFICIAL.get(key, key) if mode == "official" else key
        if name not in base:
            known = sorted(base) + (sorted(_PAPER_TO_OFFICIAL) if mode == "official" else [])
            close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ValueError(
                f"unknown reward weight {key!r} for mode {mode!r}{hint}; known: {', '.join(sorted(base))}"
            )
        base[name] = float(value)
    return base


def check_reward_mode(mode: str) -> str:
    """``mode`` if it is a reward mode; else a ValueError listing them (the one check)."""
    return check_choice(mode, MODES, "reward mode")


def score_trajectory(
    text: str,
    label: Any,
    mode: str = "paper",
    *,
    prompt: str | None = None,
    protocol: Protocol = "tags",
    **weights: float,
) -> RewardBreakdown:
    """Score one decoded episode. ``label`` holds ``golden_answers`` and ``type`` or ``split``.

    ``prompt`` (optional) marks where the policy's turns start in paper mode; without it
    the end of the prompt is found from the chat assistant marker or the ``Question:`` line.
    ``protocol``: ``tags`` (the default) or ``tools``, the tool-call protocol's text form
    (paper mode only: the official code never saw it, so there are no official numbers to match).
    Weight names: ``lambda_d``, ``lambda_s``, ``alpha``, ``lambda_f`` (both modes), and in
    official mode also ``structure_format_score``, ``final_format_score``, ``count_score``,
    ``comp_score``, ``score``.
    """
    w = check_reward_weights(mode, weights)
    check_protocol(protocol, " for the reward")
    if not isinstance(text, str):
        raise ValueError(f"text must be a string, got {type(text).__name__}")
    lab = parse_label(label)
    check_reward_protocol(mode, protocol)
    if mode == "official":
        return _official(text, lab, w)
    if mode == "dag":
        return _dag(lab, w, text, prompt)
    return _paper(lab, w, *(_tool_facts if protocol == "tools" else _tag_facts)(text, prompt))


def check_reward_protocol(mode: str, protocol: str) -> None:
    """A ValueError when ``mode`` cannot score ``protocol``: official and dag read the tags only."""
    if protocol == "tools" and mode in ("official", "dag"):
        raise ValueError(
            f"reward mode {mode!r} scores the tags (official: as the official code does; dag: their #k "
            "plans); protocol 'tools' (the tool-call text form) needs mode 'paper'"
        )


def _tag_episode(text: str, prompt: str | None) -> tuple[list[str], str | None, bool, str]:
    """A tags episode's policy turns: each search's text, the last answer and the format."""
    body = text[response_start(text, prompt) :]  # the policy's own turns, without the env's feedback
    had_feedback = INVALID_FEEDBACK.strip() in body
    body = body.replace(INVALID_FEEDBACK, "").replace(INVALID_FEEDBACK.strip(), "")
    own = _INFO_RE.sub("<information></information>", body)
    answers = _ANSWER_RE.findall(own)
    valid, reason = state_machine(body)
    if had_feedback:
        valid, reason = False, "the episode had an invalid action"
    searches = [m.group(1) for m in _SEARCH_RE.finditer(own)]
    return searches, answers[-1].strip() if answers else None, valid, reason


def _tag_facts(text: str, prompt: str | None) -> tuple[list[int], str | None, bool, str]:
    """What paper mode needs of a tags episode: sub-queries per search, the answer, the format."""
    searches, answer, valid, reason = _tag_episode(text, prompt)
    return [len(split_subqueries(s)[0]) for s in searches], answer, valid, reason


#: the environment's reply to a text-form turn (``tool_text_observation``): a ChatML user turn,
#: then the next assistant header; it starts with the end-of-turn when it closed a cut turn
_TOOL_REPLY_RE = re.compile(
    r"(?:<\|im_end\|>)?\n<\|im_start\|>user\n.*?<\|im_end\|>\n<\|im_start\|>assistant\n", re.DOTALL
)
#: a text-form episode's prompt end: the ``Question:`` line and the assistant header right after it (in
#: a raw prompt's episode the first ``<|im_start|>assistant`` is the environment's, after a search)
_TOOL_PROMPT_END_RE = re.compile(r"Question:[^\n]*\n(?:<\|im_end\|>\n<\|im_start\|>assistant\n)?")
#: how each corrective reply of the environment begins (one of them in a reply = a corrected turn)
_TOOL_CORRECTIONS = (
    "\n<|im_start|>user\n" + TOOL_TEXT_RETRY.split("{reason}")[0],
    "<tool_response>\n" + TOOL_CALL_FEEDBACK.split("{reason}")[0],
    "<tool_response>\n" + TOOL_CALL_NOT_RUN.split("{reason}")[0],
)
_TOOL_BLOCKS_RE = re.compile(r"<tool_call>.*?</tool_call>", re.DOTALL)
_REASONING_TAG_RE = re.compile(r"</?(?:search|information|answer|tool_call|tool_response)>")


def _tool_turn(turn: str, last: bool) -> tuple[int | None, str | None]:
    """One text-form turn: the sub-queries it searched (None for a turn without calls) and why
    it breaks the format (None when it is well-formed).

    A turn's calls are one round; its sub-queries are the distinct readable queries, and each
    unreadable call (bad JSON, another tool, no query) on its own.
    """
    action = parse_tool_text(turn, max_subqueries=1 << 30)  # the graph's own limits show as corrections
    size: int | None = None
    if "<tool_call>" in turn:
        readable = {c.index for c in action.calls if c.index is not None}
        unreadable = sum(1 for c in action.calls if c.error)
        size = len(readable) + unreadable if action.calls else turn.count("<tool_call>")
    if action.kind == "invalid":
        return size, action.reason or "invalid turn"
    if action.kind != ("answer" if last else "search"):
        return size, "the last turn does not answer" if last else "an answer before the last turn"
    acts = list(_TOOL_BLOCKS_RE.finditer(turn)) or list(_ANSWER_RE.finditer(turn))
    what = "calls" if action.kind == "search" else "answer"
    if action.kind == "answer" and len(acts) > 1:
        return size, "more than one <answer>"
    between = "".join(turn[x.end() : y.start()] for x, y in pairwise(acts))
    after = turn[acts[-1].end() :].strip()
    if between.strip() or after not in ("", TOOL_TURN_END):
        return size, f"text after the {what}: {(between.strip() or after)[:40]!r}"
    reasoning = turn[: acts[0].start()]
    tag = _REASONING_TAG_RE.search(reasoning)
    if tag:
        return size, f"{tag.group(0)} in the reasoning before the {what}"
    if reasoning.count("<think>") != reasoning.count("</think>"):
        return size, "unbalanced <think> in the reasoning"
    return size, None


def _tool_facts(text: str, prompt: str | None) -> tuple[list[int], str | None, bool, str]:
    """What paper mode needs of a text-form episode (docs/training.md, "Reward modes")."""
    body = text[response_start(text, prompt, (_TOOL_PROMPT_END_RE,)) :]
    turns = _TOOL_REPLY_RE.split(body)
    corrected = any(head in m.group(0) for m in _TOOL_REPLY_RE.finditer(body) for head in _TOOL_CORRECTIONS)
    sizes: list[int] = []
    problems: list[str] = []
    for i, turn in enumerate(turns):
        size, problem = _tool_turn(turn, last=i == len(turns) - 1)
        if size is not None:
            sizes.append(size)
        if problem is not None:
            problems.append(f"turn {i + 1}: {problem}")
    answers = _ANSWER_RE.findall("".join(turns))
    answer = answers[-1].strip() if answers else None
    if corrected:
        return sizes, answer, False, "the episode had an invalid action"
    if problems:
        return sizes, answer, False, problems[0]
    return sizes, answer, True, "valid"


def _breakdown(parts: tuple[float, float, float, float], **facts: Any) -> RewardBreakdown:
    """The breakdown of ``parts`` (outcome, decomposition, search count, format) and the named
    ``facts``: the total is the parts' sum in that order, which the parity tests pin to the float."""
    outcome, decomposition, search_count, fmt = parts
    total = outcome + decomposition + search_count + fmt
    return RewardBreakdown(
        total=total,
        outcome=outcome,
        decomposition=decomposition,
        search_count=search_count,
        format=fmt,
        **facts,
    )


def _paper(
    lab: dict[str, Any],
    w: dict[str, float],
    sizes: list[int],
    answer: str | None,
    valid: bool,
    reason: str,
) -> RewardBreakdown:
    qclass = question_class(lab)
    decomposed = any(n >= 2 for n in sizes)
    correct = bool(exact_match(answer, lab["golden_answers"]))

    outcome = 1.0 if correct else 0.0
    if qclass == "parallel":
        decomposition = w["alpha"] * w["lambda_d"] if decomposed else 0.0
    else:
        decomposition = w["lambda_d"] if not decomposed else 0.0
    n = len(sizes)
    if qclass == "sequential":
        search_count = w["lambda_s"] * (1 - max(0, 2 - n))
    else:
        search_count = w["lambda_s"] * (1 - abs(n - 1))
    if valid and not correct:
        fmt = w["lambda_f"]
    elif correct and not valid:
        fmt = -w["lambda_f"]
    else:
        fmt = 0.0
    parts = (outcome, decomposition, search_count, fmt)
    return _breakdown(
        parts,
        mode="paper",
        question_class=qclass,
        answer=answer,
        correct=correct,
        searches=n,
        subqueries_per_search=sizes,
        decomposed=decomposed,
        format_valid=valid,
        format_reason=reason,
        weights=w,
    )


def unshaped(breakdown: RewardBreakdown) -> RewardBreakdown:
    """The reward of an episode cut before its answer (the context ran out, or its last turn hit
    its token cap): the positive shaped terms (decomposition, search count, format) are dropped,
    negative ones kept, so an episode that never answers cannot earn more than one that answers
    wrongly (docs/training.md, "Episodes cut before their answer")."""
    parts = (
        breakdown.outcome,
        min(breakdown.decomposition, 0.0),
        min(breakdown.search_count, 0.0),
        min(breakdown.format, 0.0),
    )
    return replace(
        breakdown,
        total=sum(parts),
        decomposition=parts[1],
        search_count=parts[2],
        format=parts[3],
    )


def hop_depth(label: dict[str, Any]) -> tuple[int, int]:
    """(H, D) of a label's ``hops`` (or ``metadata.hops``): the hop count and the dependency
    levels, from each hop's 1-based ``refs`` (a hop may be a dict with ``refs`` or the list of
    them); (0, 0) without hops. A reference that is not to an earlier hop is ignored."""
    hops = label.get("hops", (label.get("metadata") or {}).get("hops"))
    if not isinstance(hops, list):
        return 0, 0
    levels: list[int] = []
    for i, hop in enumerate(hops):
        refs = hop.get("refs") if isinstance(hop, dict) else hop
        earlier = [levels[r - 1] for r in (refs or []) if isinstance(r, int) and 1 <= r <= i]
        levels.append(1 + max(earlier, default=0))
    return len(levels), max(levels, default=0)


def _dag(lab: dict[str, Any], w: dict[str, float], text: str, prompt: str | None) -> RewardBreakdown:
    """The ``dag`` reward option (docs/training.md, "Reward modes")."""
    searches, answer, valid, reason = _tag_episode(text, prompt)
    plans = [plan_search(split_subqueries(s)[0], written_pieces(s)) for s in searches]
    bad = next((p for p in plans if not p.valid), None)
    if valid and bad is not None:
        valid, reason = False, f"invalid #k plan: {bad.error}"
    sizes = [len(p.subqueries) for p in plans]
    stages = [max(len(p.stages), 1) for p in plans]
    base = _paper(lab, w, sizes, answer, valid, reason)
    hops, depth = hop_depth(lab)
    n = sum(stages)
    if hops >= 2:
        decomposed = any(p.valid and len(p.subqueries) >= 2 and len(p.stages) == depth for p in plans)
        decomposition = w["alpha"] * w["lambda_d"] if decomposed else 0.0
        search_count = w["lambda_s"] * (1 - abs(n - depth))
    else:
        decomposition = base.decomposition
        search_count = _paper(lab, w, [1] * n, answer, valid, reason).search_count
    if valid:
        fmt = w["lambda_f"] if not base.correct else 0.0
    else:  # the gate: nothing for the process, and the format part takes the outcome back
        decomposition = search_count = 0.0
        fmt = -base.outcome
    return replace(
        base,
        total=base.outcome + decomposition + search_count + fmt,
        decomposition=decomposition,
        search_count=search_count,
        format=fmt,
        mode="dag",
        stages_per_search=stages,
    )


def _official(text: str, lab: dict[str, Any], w: dict[str, float]) -> RewardBreakdown:
    is_comp = official_is_comp(lab)
    m = _ASSISTANT_RE.search(text)
    if m:
        valid, reason = state_machine(text[m.end() :])
    else:
        valid, reason = False, "missing <|im_start|>assistant marker"
    answers = list(_ANSWER_RE.finditer(text))
    answer = answers[-1].group(1).strip() if len(answers) > 1 else None
    found = list(_SEARCH_RE.finditer(text))
    first = found[2].group(1).strip() if len(found) > 2 else None
    detect = first.count("##") if first else 0
    decomposition = 0.0
    if detect > 0 and is_comp > 0:
        decomposition = w["comp_score"] * w["alpha"]
    elif detect == 0 and is_comp <= 0:
        decomposition = w["comp_score"]
    count = text.count("<search>")
    if is_comp != 0:
        search_count = w["count_score"] - abs(count - 3) * w["count_score"]
    else:
        search_count = w["count_score"] - abs(min(count, 4) - 4) * w["count_score"]
    correct = answer is not None and bool(exact_match(answer, lab["golden_answers"]))
    outcome = w["score"] if correct else 0.0
    if answer is None:
        fmt = w["structure_format_score"] if valid else 0.0
    elif correct:
        fmt = 0.0 if valid else -w["structure_format_score"]
    else:
        fmt = w["structure_format_score"] if valid else w["final_format_score"]
    qclass = {1: "parallel", -1: "single", 0: "sequential"}[is_comp]
    sizes = [len(split_subqueries(x.group(1))[0]) for x in found[2:]]
    parts = (outcome, decomposition, search_count, fmt)
    return _breakdown(
        parts,
        mode="official",
        question_class=qclass,
        answer=answer,
        correct=correct,
        searches=count,
        subqueries_per_search=sizes,
        decomposed=detect > 0,
        format_valid=valid,
        format_reason=reason,
        weights=w,
    )
