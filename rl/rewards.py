"""ParallelSearch rewards: the paper's equations and the official code's exact numbers.

The four modes (``paper``, the library default; ``paper-strict``, the default of new training runs,
which pays decomposition only for splits the record shows were searched; ``dag``; ``official``, the
official ``compute_score_em`` quirks included) and the tool-call protocol's scoring are specified in
docs/training.md, "Reward modes"; the parity tests pin the official numbers.
"""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal, get_args

from parallelsearch.agents.protocol import (
    DEFAULT_MAX_STAGES,
    Limits,
    TurnResult,
    get_protocol,
    split_subqueries,
)
from parallelsearch.agents.protocol.tags import tag_sequence_problem
from parallelsearch.agents.subquery_plan import plan_turn
from parallelsearch.data.metrics import exact_match
from parallelsearch.graphs.record import Episode, TurnRecord, turn_record
from parallelsearch.stores.errors import check_choice

RewardMode = Literal["paper", "paper-strict", "official", "dag"]
#: the reward modes, derived from :data:`RewardMode` (configs type their field with it)
MODES: tuple[str, ...] = get_args(RewardMode)
#: the mode a new training run scores with (the ``paper`` preset's and ``RewardConfig``'s default)
DEFAULT_TRAIN_MODE = "paper-strict"
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

#: the over-search weight (a penalty per sub-query beyond the sub-questions a question needs); any
#: mode takes it, none sets it: 0 unless given (``agent.reward.weights.lambda_o``)
OVER_SEARCH = "lambda_o"
#: the reward's parts, in the order the total sums them; every consumer (the executor's
#: ``extra_logs``, rollout's summary, the smokes) reads them from here, so a new part is added
#: here, in :class:`RewardBreakdown` and where a mode computes it, and reaches every log
REWARD_PARTS: tuple[str, ...] = ("outcome", "decomposition", "search_count", "format", "over_search")

#: the paper's question classes (``question_class``)
QUESTION_CLASSES: tuple[str, ...] = ("parallel", "sequential", "single")
PARALLEL_TYPES = {"comparison", "comparison_query"}
SINGLE_TYPES = {"", "na", "none"}

_SEARCH_RE = re.compile(r"<search>(.*?)</search>", re.DOTALL)
_ANSWER_RE = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_ASSISTANT_RE = re.compile(r"<\|im_start\|>assistant\s*")


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
    over_search: float = 0.0
    needed_subqueries: int = 0  # the sub-questions the question needs (hops, supporting titles, class)
    unneeded_subqueries: int = 0  # sub-queries searched beyond them

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def parts(self) -> dict[str, float]:
        """Each part by its name (:data:`REWARD_PARTS`), in the order the total sums them."""
        return {name: getattr(self, name) for name in REWARD_PARTS}

    def with_parts(self, **parts: float) -> RewardBreakdown:
        """A copy with ``parts`` replaced and the total summed again in :data:`REWARD_PARTS` order."""
        new = replace(self, **parts)
        new.total = sum_parts(new.parts())
        return new


def sum_parts(parts: dict[str, float]) -> float:
    """The parts' sum in :data:`REWARD_PARTS` order (a zero part leaves the float unchanged: the
    official parity is pinned to the float)."""
    total = 0.0
    for i, name in enumerate(REWARD_PARTS):
        total = parts[name] if i == 0 else total + parts[name]
    return total


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
    """The official format check over a whole response: think -> (search -> information -> think)*
    -> answer, nothing outside tags."""
    problem = tag_sequence_problem(content)
    return problem is None, problem or "valid"


def check_reward_weights(mode: str, weights: dict[str, float]) -> dict[str, float]:
    """The mode's weights with ``weights`` applied; a ValueError naming an unknown weight."""
    base = dict(OFFICIAL_WEIGHTS if check_reward_mode(mode) == "official" else PAPER_WEIGHTS)
    for key, value in weights.items():
        name = _PAPER_TO_OFFICIAL.get(key, key) if mode == "official" else key
        if name == OVER_SEARCH:
            base[name] = float(value)
            continue
        if name not in base:
            known = [*sorted(base), OVER_SEARCH] + (sorted(_PAPER_TO_OFFICIAL) if mode == "official" else [])
            close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ValueError(
                f"unknown reward weight {key!r} for mode {mode!r}{hint}; known: "
                f"{', '.join(sorted([*base, OVER_SEARCH]))}"
            )
        base[name] = float(value)
    return base


def check_reward_mode(mode: str) -> str:
    """``mode`` if it is a reward mode; else a ValueError listing them (the one check)."""
    return check_choice(mode, MODES, "reward mode")


def check_reward_protocol(mode: str, protocol: str) -> None:
    """A ValueError when ``mode`` cannot score ``protocol``: the official mode reads the tags text."""
    if mode == "official" and protocol != "tags":
        raise ValueError(
            f"reward mode 'official' scores the tags text as the official code does; protocol {protocol!r} "
            "needs mode 'paper-strict', 'paper' or 'dag'"
        )


def score_episode(
    episode: Episode, label: Any, mode: str = "paper", *, text: str | None = None, **weights: float
) -> RewardBreakdown:
    """Score one episode's record. ``label`` holds ``golden_answers`` and ``type`` or ``split``.

    The ``paper``, ``paper-strict`` and ``dag`` modes read the record: the searches that ran
    (sub-queries, stages), the answer, each turn's validity and format; ``paper-strict`` counts a
    split only where the search's observation shows two or more distinct sub-queries searched side
    by side (:func:`searched_split`). ``official`` reproduces the official code, which
    reads the decoded episode ``text`` (prompt included) for parity with its published runs.
    Weight names: ``lambda_d``, ``lambda_s``, ``alpha``, ``lambda_f`` (every mode), and in official
    mode also ``structure_format_score``, ``final_format_score``, ``count_score``, ``comp_score``,
    ``score``.
    """
    w = check_reward_weights(mode, weights)
    lab = parse_label(label)
    check_reward_protocol(mode, episode.protocol)
    if mode == "official":
        if not isinstance(text, str):
            raise ValueError("reward mode 'official' reads the decoded episode: pass its text")
        return over_searched(_official(text, lab, w), lab, w)
    if mode == "dag":
        return over_searched(_dag(lab, w, episode), lab, w)
    return over_searched(_paper(lab, w, episode, strict=mode == "paper-strict"), lab, w)


def needed_subqueries(label: dict[str, Any]) -> int:
    """The sub-questions a question needs: its hops, else its distinct supporting titles (HotpotQA's
    supporting facts), else two for a parallelizable or sequential question and one for a single one."""
    hops, _ = hop_depth(label)
    if hops:
        return hops
    titles = label.get("supporting_titles") or (label.get("metadata") or {}).get("supporting_titles")
    if isinstance(titles, list) and titles:
        return len(set(map(str, titles)))
    return 1 if question_class(label) == "single" else 2


def over_searched(breakdown: RewardBreakdown, label: dict[str, Any], w: dict[str, float]) -> RewardBreakdown:
    """The over-search facts (sub-queries searched beyond the sub-questions needed) and, with a
    weight ``lambda_o``, the term: ``-lambda_o`` per unneeded sub-query (HiPRAG's idea: pay for
    the searches a question needs, not for more). Without the weight the total is untouched."""
    need = needed_subqueries(label)
    extra = max(0, sum(breakdown.subqueries_per_search) - need)
    breakdown.needed_subqueries, breakdown.unneeded_subqueries = need, extra
    weight = w.get(OVER_SEARCH, 0.0)
    return breakdown.with_parts(over_search=-weight * extra) if weight and extra else breakdown


def read_episode(text: str, protocol: str = "tags", prompt: str | None = None) -> Episode:
    """The record of a decoded episode made elsewhere (an official rollout, a saved transcript):
    the protocol reads its turns back; a turn the environment corrected is an invalid action."""
    if not isinstance(text, str):
        raise ValueError(f"text must be a string, got {type(text).__name__}")
    proto = get_protocol(protocol)
    turns: list[TurnRecord] = []
    for i, written in enumerate(proto.read_turns(text, prompt)):
        res = TurnResult(written.text)
        action = proto.parse(res, Limits(max_subqueries=1 << 30))
        action, plan = plan_turn(action, max_stages=DEFAULT_MAX_STAGES)
        if written.corrected and action.kind != "invalid":
            action = replace(action, kind="invalid", reason="the environment corrected this turn")
        problem = proto.format_problem(written.text, action) if action.kind != "invalid" else None
        turns.append(turn_record(res, action, index=i, final=False, ms=0.0, plan=plan, format_error=problem))
    answer = turns[-1]["answer"] if turns and turns[-1]["action"] == "answer" else None
    return Episode(tuple(turns), answer=answer, protocol=proto.name)


def score_trajectory(
    text: str,
    label: Any,
    mode: str = "paper",
    *,
    prompt: str | None = None,
    protocol: str = "tags",
    **weights: float,
) -> RewardBreakdown:
    """Score a decoded episode made elsewhere: :func:`read_episode`, then :func:`score_episode`.
    ``prompt`` (optional) marks where the policy's turns start; without it the end of the prompt
    is found from the chat assistant marker or the ``Question:`` line."""
    check_reward_weights(mode, weights)
    episode = read_episode(text, protocol, prompt)
    return score_episode(episode, label, mode, text=text, **weights)


def _breakdown(parts: tuple[float, float, float, float], **facts: Any) -> RewardBreakdown:
    """The breakdown of ``parts`` (outcome, decomposition, search count, format) and the named
    ``facts``: the total is the parts' sum in that order, which the parity tests pin to the float."""
    outcome, decomposition, search_count, fmt = parts
    made = RewardBreakdown(
        total=0.0,
        outcome=outcome,
        decomposition=decomposition,
        search_count=search_count,
        format=fmt,
        **facts,
    )
    made.total = sum_parts(made.parts())
    return made


def _search_count(qclass: str, n: int, w: dict[str, float]) -> float:
    """The search-count term for ``n`` searches: at least two on a sequential question, else one."""
    if qclass == "sequential":
        return w["lambda_s"] * (1 - max(0, 2 - n))
    return w["lambda_s"] * (1 - abs(n - 1))


def searched_split(episode: Episode) -> list[int]:
    """Per search that ran, the most distinct sub-queries its observation shows searched side by
    side (in one stage): what ``paper-strict`` calls a split. A sub-query the graph did not split
    off (the sequential graph searches ``A ## B`` as one query), a duplicate, an empty piece or a
    rejected search never counts. Each search of a live episode has one observation, in order; a
    transcript read back (:func:`read_episode`) has none, and its parsed sub-queries stand in."""
    widths: list[int] = []
    observations = list(episode.observations)
    for i, turn in enumerate(episode.searches):
        searched = [r.get("query") for r in observations[i]["results"]] if i < len(observations) else None
        queries = [" ".join(str(q or "").lower().split()) for q in (searched or turn["subqueries"])]
        stages = turn.get("stages") or [list(range(len(queries)))]
        width = 0
        for stage in stages:
            width = max(width, len({queries[i] for i in stage if i < len(queries) and queries[i]}))
        widths.append(width)
    return widths


def _decomposition(qclass: str, w: dict[str, float], episode: Episode, strict: bool) -> tuple[float, bool]:
    """The decomposition term and whether the episode counts as decomposed. Strict: a split is
    one the record shows searched, and the bonus for not splitting a non-parallel question needs
    a search that ran (an episode of invalid turns earns nothing for not splitting)."""
    if not strict:
        decomposed = episode.decomposed
        if qclass == "parallel":
            return (w["alpha"] * w["lambda_d"] if decomposed else 0.0), decomposed
        return (w["lambda_d"] if not decomposed else 0.0), decomposed
    widths = searched_split(episode)
    decomposed = any(n >= 2 for n in widths)
    if qclass == "parallel":
        return (w["alpha"] * w["lambda_d"] if decomposed else 0.0), decomposed
    return (w["lambda_d"] if widths and not decomposed else 0.0), decomposed


def _paper(
    lab: dict[str, Any], w: dict[str, float], episode: Episode, strict: bool = False
) -> RewardBreakdown:
    """The paper's Eqs. 3-7 (docs/training.md, "Reward modes"); ``strict``: ``paper-strict``."""
    qclass = question_class(lab)
    sizes = episode.subqueries_per_search
    valid, reason = episode.format_check()
    correct = bool(exact_match(episode.answer, lab["golden_answers"]))

    outcome = 1.0 if correct else 0.0
    decomposition, decomposed = _decomposition(qclass, w, episode, strict)
    n = len(sizes)
    search_count = _search_count(qclass, n, w)
    if valid and not correct:
        fmt = w["lambda_f"]
    elif correct and not valid:
        fmt = -w["lambda_f"]
    else:
        fmt = 0.0
    parts = (outcome, decomposition, search_count, fmt)
    return _breakdown(
        parts,
        mode="paper-strict" if strict else "paper",
        question_class=qclass,
        answer=episode.answer,
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
    return breakdown.with_parts(
        **{name: min(value, 0.0) for name, value in breakdown.parts().items() if name != "outcome"}
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


def _dag(lab: dict[str, Any], w: dict[str, float], episode: Episode) -> RewardBreakdown:
    """The ``dag`` reward option (docs/training.md, "Reward modes"): the plans are the record's."""
    base = _paper(lab, w, episode)
    stages = episode.stages_per_search
    hops, depth = hop_depth(lab)
    n = sum(stages)
    if hops >= 2:
        decomposed = any(
            len(t["subqueries"]) >= 2 and len(t.get("stages") or [t["subqueries"]]) == depth
            for t in episode.searches
        )
        decomposition = w["alpha"] * w["lambda_d"] if decomposed else 0.0
        search_count = w["lambda_s"] * (1 - abs(n - depth))
    else:
        decomposition = base.decomposition
        search_count = _search_count(base.question_class, n, w)
    if base.format_valid:
        fmt = w["lambda_f"] if not base.correct else 0.0
    else:  # the gate: nothing for the process, and the format part takes the outcome back
        decomposition = search_count = 0.0
        fmt = -base.outcome
    return replace(base, mode="dag", stages_per_search=stages).with_parts(
        decomposition=decomposition, search_count=search_count, format=fmt
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
