"""A training run's health, step by step, from its episodes' records: per question class the
decomposition rate, search rounds and sub-queries per round; over-search; the share of groups
whose samples all scored the same (no advantage, nothing learned from them); response length,
format validity and truncation. Alarms fire when a signal collapses (docs/training.md, "Health
and alarms", says what to do). The executor writes one record per episode when
``agent.health_log`` names a folder; ``parallelsearch train-health FOLDER`` and the learning
smoke print the steps and their alarms.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from parallelsearch.rl.rewards import QUESTION_CLASSES, parse_label, question_class


def group_key(prompt: Any, label: Any) -> str:
    """The id of a prompt's group of samples (the same prompt and label)."""
    return hashlib.sha1(f"{prompt}\x00{label}".encode(), usedforsecurity=False).hexdigest()[:12]


def episode_health(result: dict[str, Any], time_s: float = 0.0) -> dict[str, Any]:
    """One episode's health record from the executor's sample (its reward, label and ``extra_logs``)."""
    logs = {k: float(v) for k, v in result["extra_logs"].items()}
    return {
        "time": time_s,
        "group": group_key(result["prompt"], result["label"]),
        "class": question_class(parse_label(result["label"])),
        "reward": float(result["reward"]),
        "decomposed": logs["decomposed"],
        "rounds": logs["searches"],
        "subqueries": logs["subqueries"],
        "over_search": logs["over_search"],
        "response_tokens": logs["response_tokens"],
        "format_valid": logs["format_valid"],
        "truncated": logs["truncated"],
    }


@dataclass
class ClassHealth:
    """One question class in one step."""

    episodes: int
    decomposition_rate: float
    rounds: float  # search rounds per episode
    subqueries_per_round: float


@dataclass
class StepHealth:
    """One step's health (see the module docstring)."""

    step: int
    episodes: int
    by_class: dict[str, ClassHealth]
    over_search: float  # unneeded sub-queries per episode
    over_search_share: float  # episodes with any
    equal_groups: float | None  # share of groups of two or more samples whose rewards are all equal
    response_tokens: float
    format_valid: float
    truncated: float
    alarms: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def line(self) -> str:
        """The step as one readable line."""
        classes = "; ".join(
            f"{name} {c.episodes}: decomposed {c.decomposition_rate:.0%}, rounds {c.rounds:.2f}, "
            f"sub-queries/round {c.subqueries_per_round:.2f}"
            for name, c in self.by_class.items()
        )
        equal = "n/a" if self.equal_groups is None else f"{self.equal_groups:.0%}"
        return (
            f"health step {self.step}: {self.episodes} episodes; {classes}; over-search "
            f"{self.over_search:.2f}/episode ({self.over_search_share:.0%} of episodes); all-equal groups "
            f"{equal}; response {self.response_tokens:.0f} tokens, format valid {self.format_valid:.0%}, "
            f"truncated {self.truncated:.0%}"
        )


def _mean(xs: Iterable[float]) -> float:
    xs = list(xs)
    return statistics.fmean(xs) if xs else 0.0


def step_health(records: Sequence[dict[str, Any]], step: int) -> StepHealth:
    """:class:`StepHealth` of one step's episode records (:func:`episode_health`)."""
    by_class = {}
    for name in QUESTION_CLASSES:
        mine = [r for r in records if r["class"] == name]
        if mine:
            rounds = sum(r["rounds"] for r in mine)
            by_class[name] = ClassHealth(
                episodes=len(mine),
                decomposition_rate=_mean(r["decomposed"] for r in mine),
                rounds=rounds / len(mine),
                subqueries_per_round=sum(r["subqueries"] for r in mine) / rounds if rounds else 0.0,
            )
    groups: dict[str, list[float]] = defaultdict(list)
    for r in records:
        groups[r["group"]].append(r["reward"])
    sized = [g for g in groups.values() if len(g) >= 2]
    return StepHealth(
        step=step,
        episodes=len(records),
        by_class=by_class,
        over_search=_mean(r["over_search"] for r in records),
        over_search_share=_mean(float(r["over_search"] > 0) for r in records),
        equal_groups=_mean(float(max(g) - min(g) < 1e-9) for g in sized) if sized else None,
        response_tokens=_mean(r["response_tokens"] for r in records),
        format_valid=_mean(r["format_valid"] for r in records),
        truncated=_mean(r["truncated"] for r in records),
    )


@dataclass(frozen=True)
class AlarmThresholds:
    """When the alarms fire (docs/training.md, "Health and alarms")."""

    #: the parallelizable class's decomposition rate at or below this, after it was at least twice it
    decomposition_floor: float = 0.05
    #: the share of groups whose samples all scored the same above this (GRPO learns nothing from them)
    equal_groups_ceiling: float = 0.8
    #: the mean response length below this share of the first ``baseline_steps`` steps' mean
    length_floor: float = 0.5
    baseline_steps: int = 2
    #: steps in a row a signal must stay past its threshold (one noisy step does not fire)
    patience: int = 2


def _signals(step: StepHealth, history: Sequence[StepHealth], th: AlarmThresholds) -> list[str]:
    """The thresholds ``step`` is past, given the steps before it."""
    out = []
    par = step.by_class.get("parallel")
    earlier = [h.by_class["parallel"].decomposition_rate for h in history if "parallel" in h.by_class]
    if (
        par
        and par.decomposition_rate <= th.decomposition_floor
        and max(earlier, default=0) >= 2 * th.decomposition_floor
    ):
        out.append(
            f"decomposition collapse: parallelizable questions decomposed {par.decomposition_rate:.0%} "
            f"(<= {th.decomposition_floor:.0%}; earlier up to {max(earlier):.0%})"
        )
    if step.equal_groups is not None and step.equal_groups > th.equal_groups_ceiling:
        out.append(
            f"reward variance collapse: {step.equal_groups:.0%} of groups scored all equal "
            f"(> {th.equal_groups_ceiling:.0%}): their advantages are 0"
        )
    base = [h.response_tokens for h in history[: th.baseline_steps]]
    if len(base) == th.baseline_steps and step.response_tokens < th.length_floor * _mean(base):
        out.append(
            f"length collapse: responses {step.response_tokens:.0f} tokens, under {th.length_floor:.0%} of "
            f"the first {th.baseline_steps} steps' {_mean(base):.0f}"
        )
    return out


def with_alarms(steps: Sequence[StepHealth], th: AlarmThresholds | None = None) -> list[StepHealth]:
    """``steps`` with each step's alarms: a signal past its threshold for ``patience`` steps in a row."""
    th = th or AlarmThresholds()
    past = [_signals(s, steps[:i], th) for i, s in enumerate(steps)]
    for i, step in enumerate(steps):
        window = past[max(0, i - th.patience + 1) : i + 1]
        if len(window) < th.patience:
            continue
        kinds = [{x.split(":")[0] for x in w} for w in window]
        step.alarms = [x for x in past[i] if all(x.split(":")[0] in k for k in kinds)]
    return list(steps)


def write_record(folder: str | Path, record: dict[str, Any]) -> None:
    """Append one episode's record to this process's file in ``folder`` (every rollout actor has its own)."""
    path = Path(folder) / f"{socket.gethostname()}-{os.getpid()}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as f:
        f.write(json.dumps(record) + "\n")


def read_steps(folder: str | Path, episodes_per_step: int) -> list[StepHealth]:
    """The steps of a health folder: every actor's records in time order, ``episodes_per_step``
    (rollout_batch_size x n_samples_per_prompt) to a step, a partial last step kept."""
    records = []
    for path in sorted(Path(folder).glob("*.jsonl")):
        with path.open(encoding="utf-8") as f:
            records += [json.loads(line) for line in f if line.strip()]
    records.sort(key=lambda r: r["time"])
    chunks = [records[i : i + episodes_per_step] for i in range(0, len(records), episodes_per_step)]
    return with_alarms([step_health(c, n) for n, c in enumerate(chunks, 1)])
