"""Training data: FlashRAG question files -> OpenRLHF prompt jsonl (``prompt``, ``label``, ``id``,
``data_source``). The prompt is the protocol's template around the question, raw or
chat-templated; the label is a JSON string (OpenRLHF passes ``--data.label_key`` through as is)
holding what the reward and the environment need.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from parallelsearch.agents.protocol import render_prompt
from parallelsearch.data.questions import load_questions

#: recipe -> datasets it mixes (the paper trains on NQ + HotpotQA, merged and shuffled)
RECIPES: dict[str, tuple[str, ...]] = {"paper": ("nq", "hotpotqa")}


@dataclass
class TrainDataReport:
    path: Path
    written: int = 0
    by_dataset: Counter = field(default_factory=Counter)
    by_type: Counter = field(default_factory=Counter)
    by_split: Counter = field(default_factory=Counter)
    duplicates: int = 0
    left_out: dict[str, int] = field(default_factory=dict)  # dataset -> questions outside the recipe

    def lines(self) -> list[str]:
        out = [f"wrote {self.written} prompts to {self.path}"]
        out.append("  by dataset: " + ", ".join(f"{k} {v}" for k, v in sorted(self.by_dataset.items())))
        out.append("  by type:    " + ", ".join(f"{k} {v}" for k, v in sorted(self.by_type.items())))
        out.append("  by split:   " + ", ".join(f"{k} {v}" for k, v in sorted(self.by_split.items())))
        if self.duplicates:
            out.append(f"  skipped {self.duplicates} duplicate question ids")
        for ds, n in sorted(self.left_out.items()):
            out.append(f"  left out {n} {ds} questions (not in the recipe)")
        return out


def prompt_question(question: str) -> str:
    """The question as the official data script writes it: a ``?`` appended when missing."""
    q = question.strip()
    return q if q.endswith("?") else q + "?"


def label_of(q: dict[str, Any]) -> dict[str, Any]:
    """What the reward needs of a FlashRAG question record: gold answers, type, split, id, dataset,
    and, for a question with ``metadata.hops``, each hop's ``#k`` references (the ``dag`` reward's
    depth)."""
    meta = q.get("metadata") or {}
    label = {
        "golden_answers": list(q.get("golden_answers") or []),
        "type": meta.get("type", "na"),
        "split": meta.get("split"),
        "id": q.get("id"),
        "dataset": meta.get("dataset"),
    }
    hops = meta.get("hops")
    if isinstance(hops, list) and hops:
        label["hops"] = [{"refs": list((h or {}).get("refs") or [])} for h in hops]
    return label


def train_record(q: dict[str, Any], *, template: str = "paper", tokenizer: Any = None) -> dict[str, Any]:
    """One OpenRLHF prompt record from one FlashRAG question record."""
    question = prompt_question(q["question"])
    text = render_prompt(question, template)
    if tokenizer is not None:
        text = tokenizer.apply_chat_template(
            [{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True
        )
    label = {**label_of(q), "question": question}
    return {
        "prompt": text,
        "label": json.dumps(label, ensure_ascii=False),
        "id": q.get("id"),
        "data_source": label["dataset"],
    }


def make_train_data(
    paths: Sequence[str | Path],
    out: str | Path,
    *,
    recipe: str | None = None,
    template: str = "paper",
    tokenizer: Any = None,
    limit: int | None = None,
    seed: int = 0,
    skip_bad: bool = False,
) -> TrainDataReport:
    """Write an OpenRLHF prompt jsonl from question files; ``recipe='paper'`` keeps NQ + HotpotQA."""
    if not paths:
        raise ValueError("make-train-data needs at least one question file")
    for p in paths:
        if "holdout" in Path(p).resolve().parts:
            raise ValueError(f"{p} is held out for blind evaluation; it must never become training data")
    if recipe is not None and recipe not in RECIPES:
        raise ValueError(f"unknown recipe {recipe!r}; known: {', '.join(RECIPES)}")
    out = Path(out)
    report = TrainDataReport(out)
    seen: set[str] = set()
    chosen: list[dict[str, Any]] = []
    for path in paths:
        for q in load_questions(path, skip_bad=skip_bad):
            ds = (q.get("metadata") or {}).get("dataset") or "unknown"
            if recipe and ds not in RECIPES[recipe]:
                report.left_out[ds] = report.left_out.get(ds, 0) + 1
                continue
            qid = str(q.get("id"))
            if qid in seen:
                report.duplicates += 1
                continue
            seen.add(qid)
            chosen.append(q)
    if recipe and not chosen:
        raise ValueError(
            f"recipe {recipe!r} needs questions from {', '.join(RECIPES[recipe])}; none were given"
        )
    random.Random(seed).shuffle(chosen)
    if limit is not None:
        chosen = chosen[:limit]
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(out.suffix + ".tmp")
    with tmp.open("w", encoding="utf-8") as f:
        for q in chosen:
            rec = train_record(q, template=template, tokenizer=tokenizer)
            f.write(json.dumps(rec, ensure_ascii=False) + "\n")
            meta = q.get("metadata") or {}
            report.written += 1
            report.by_dataset[meta.get("dataset") or "unknown"] += 1
            report.by_type[str(meta.get("type", "na"))] += 1
            report.by_split[str(meta.get("split"))] += 1
    tmp.replace(out)
    return report
