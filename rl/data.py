"""Training data: FlashRAG question files -> OpenRLHF prompt jsonl (``prompt``, ``label``, ``id``,
``datasource``, the key OpenRLHF's PromptDataset groups eval metrics by). The prompt is the
protocol's template around the question, raw or chat-templated; the label is a JSON string
(OpenRLHF passes ``--data.label_key`` through as is) holding what the reward and the environment
need. Evaluation files are refused as training data; ``eval_set`` writes them as OpenRLHF eval
records, which the executor scores by exact match alone.
"""

from __future__ import annotations

import json
import random
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from parallelsearch.agents.protocol import render_prompt
from parallelsearch.data.questions import load_questions

#: recipe -> datasets it mixes (the paper trains on NQ + HotpotQA, merged and shuffled)
RECIPES: dict[str, tuple[str, ...]] = {"paper": ("nq", "hotpotqa")}
#: a label's ``score`` for an evaluation record: the executor's reward is the outcome (EM) alone
SCORE_EM = "em"
#: words of a file name that mark an evaluation split (FlashRAG's test.jsonl / dev.jsonl, HotpotQA's
#: hotpot_dev_distractor_v1.json, benchmark files)
EVAL_SPLIT_WORDS = frozenset({"test", "dev", "val", "valid", "validation", "eval", "benchmark", "holdout"})
#: positional ids of an evaluation split, as FlashRAG writes them (test_17, dev_3)
EVAL_ID_RE = re.compile(r"(?:test|dev|val|validation)_\d+")


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
    depth), and its ``supporting_titles`` (how many sub-questions it needs: the over-search term)."""
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
    titles = meta.get("supporting_titles")
    if isinstance(titles, list) and titles:  # the sub-questions it needs (the over-search term's count)
        label["supporting_titles"] = [str(t) for t in titles]
    return label


def train_record(
    q: dict[str, Any],
    *,
    template: str = "paper",
    tokenizer: Any = None,
    score: str | None = None,
    origin: str | None = None,
) -> dict[str, Any]:
    """One OpenRLHF prompt record from one FlashRAG question record; ``score="em"`` marks an
    evaluation record (the executor's reward is then exact match, so OpenRLHF's pass@1 is EM);
    ``origin`` (``eval_origin`` in the label) says the question came from an evaluation file."""
    question = prompt_question(q["question"])
    text = render_prompt(question, template)
    if tokenizer is not None:
        text = tokenizer.apply_chat_template(
            [{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True
        )
    label = {**label_of(q), "question": question, **({"score": score} if score else {})}
    if origin:
        label["eval_origin"] = origin
    return {
        "prompt": text,
        "label": json.dumps(label, ensure_ascii=False),
        "id": q.get("id"),
        "datasource": label["dataset"] or "default",
    }


def eval_split_word(path: str | Path) -> str | None:
    """The word of ``path``'s file name that marks an evaluation split (``test`` of test.jsonl), or
    None. A ``source`` of prepare-data (``file:line``) is read as its file."""
    name = Path(str(path).rsplit(":", 1)[0] if re.search(r":\d+$", str(path)) else str(path)).name
    words = re.split(r"[^a-z]+", name.lower())
    return next((w for w in words if w in EVAL_SPLIT_WORDS), None)


def eval_origin(q: dict[str, Any], path: str | Path) -> str | None:
    """Why ``q`` comes from an evaluation file (its own or its prepare-data source's name says
    test/dev/..., or its id is an evaluation split's), or None."""
    meta = q.get("metadata") or {}
    source = meta.get("source") or str(path)
    word = eval_split_word(source) or eval_split_word(path)
    qid = next((i for i in (q.get("id"), meta.get("source_id")) if EVAL_ID_RE.fullmatch(str(i))), None)
    if word is None and qid is None:
        return None
    return f"{source}; " + (
        f"its file name says {word!r}" if word else f"its id {qid!r} is an evaluation split's"
    )


def refuse_eval_question(q: dict[str, Any], path: str | Path) -> None:
    """A ValueError when ``q`` comes from an evaluation file, naming the file and the fix."""
    origin = eval_origin(q, path)
    if origin is None:
        return
    raise ValueError(
        f"{path}: question {q.get('id')!r} comes from an evaluation file ({origin}): training on it "
        "contaminates every later evaluation. Use the train split (FlashRAG's train.jsonl), make eval "
        "records with --eval, or pass --allow-eval-questions for a run whose model is never evaluated"
    )


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
    eval_set: bool = False,
    allow_eval_questions: bool = False,
) -> TrainDataReport:
    """Write an OpenRLHF prompt jsonl from question files; ``recipe='paper'`` keeps NQ + HotpotQA.

    Questions from evaluation files are refused (:func:`refuse_eval_question`) unless
    ``allow_eval_questions``; ``eval_set`` writes OpenRLHF eval records instead (scored as EM).
    """
    _check_sources(paths, recipe)
    out = Path(out)
    report = TrainDataReport(out)
    chosen = _choose_questions(
        paths, recipe, report, skip_bad=skip_bad, check=not (eval_set or allow_eval_questions)
    )
    random.Random(seed).shuffle(chosen)
    if limit is not None:
        chosen = chosen[:limit]
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(out.suffix + ".tmp")
    with tmp.open("w", encoding="utf-8") as f:
        for q, origin in chosen:
            rec = train_record(
                q,
                template=template,
                tokenizer=tokenizer,
                score=SCORE_EM if eval_set else None,
                origin=None if eval_set else origin,
            )
            f.write(json.dumps(rec, ensure_ascii=False) + "\n")
            meta = q.get("metadata") or {}
            report.written += 1
            report.by_dataset[meta.get("dataset") or "unknown"] += 1
            report.by_type[str(meta.get("type", "na"))] += 1
            report.by_split[str(meta.get("split"))] += 1
    tmp.replace(out)
    return report


def _check_sources(paths: Sequence[str | Path], recipe: str | None) -> None:
    """Refuse what must never become training data (held-out files) and an unknown recipe."""
    if not paths:
        raise ValueError("make-train-data needs at least one question file")
    for p in paths:
        if "holdout" in Path(p).resolve().parts:
            raise ValueError(f"{p} is held out for blind evaluation; it must never become training data")
    if recipe is not None and recipe not in RECIPES:
        raise ValueError(f"unknown recipe {recipe!r}; known: {', '.join(RECIPES)}")


def _choose_questions(
    paths: Sequence[str | Path], recipe: str | None, report: TrainDataReport, *, skip_bad: bool, check: bool
) -> list[tuple[dict[str, Any], str | None]]:
    """The questions of ``paths`` the recipe keeps, each id once (left-out and duplicate counts go
    to ``report``), each with its :func:`eval_origin`; ``check`` refuses evaluation questions."""
    seen: set[str] = set()
    chosen: list[tuple[dict[str, Any], str | None]] = []
    for path in paths:
        for q in load_questions(path, skip_bad=skip_bad):
            ds = (q.get("metadata") or {}).get("dataset") or "unknown"
            if recipe and ds not in RECIPES[recipe]:
                report.left_out[ds] = report.left_out.get(ds, 0) + 1
                continue
            if check:
                refuse_eval_question(q, path)
            qid = str(q.get("id"))
            if qid in seen:
                report.duplicates += 1
                continue
            seen.add(qid)
            chosen.append((q, eval_origin(q, path)))
    if recipe and not chosen:
        raise ValueError(
            f"recipe {recipe!r} needs questions from {', '.join(RECIPES[recipe])}; none were given"
        )
    return chosen
