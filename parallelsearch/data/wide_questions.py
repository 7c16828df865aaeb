"""Wide questions: SYNTHETIC N-entity comparisons built from 2WikiMultihopQA's evidence triples.

"Which of these 8 people was born first: A, B, ..., or H?" needs one sub-query per entity, a
search wider than any benchmark asks for. Every fact and paragraph is real 2Wiki data; only the
question is made up, and only when the triples make its answer certain: nothing is guessed
(docs/architecture.md, "Question records").
"""

from __future__ import annotations

import argparse
import calendar
import json
import random
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from parallelsearch.data.questions import _entity_key, hop, write_jsonl
from parallelsearch.stores.errors import BadInputError
from parallelsearch.stores.ingestion.jsonfiles import iter_json_records
from parallelsearch.stores.ingestion.readers import passage_pairs
from parallelsearch.stores.passages import Passage

#: relation -> (plural noun, verb phrase, lookup question) of the questions asked about it
RELATIONS: dict[str, tuple[str, str, str]] = {
    "date of birth": ("people", "was born", "When was {} born?"),
    "date of death": ("people", "died", "When did {} die?"),
    "publication date": ("works", "came out", "When did {} come out?"),
}
DEFAULT_SIZES = (2, 4, 8, 16, 32, 64)
_MONTHS = {name.lower(): i for i, name in enumerate(calendar.month_name) if name}
_MONTHS.update({name.lower(): i for i, name in enumerate(calendar.month_abbr) if name})
_MONTHS["sept"] = 9
_MONTH = r"([A-Za-z]{3,9})\.?"
_YEAR = r"(\d{1,4})(?:\s*(BC|BCE|AD|CE))?"
_PATTERNS = (
    (re.compile(rf"(\d{{1,2}})(?:st|nd|rd|th)?\s+{_MONTH},?\s+{_YEAR}", re.I), ("d", "m", "y", "era")),
    (re.compile(rf"{_MONTH}\s+(\d{{1,2}})(?:st|nd|rd|th)?,?\s+{_YEAR}", re.I), ("m", "d", "y", "era")),
    (re.compile(rf"{_MONTH},?\s+{_YEAR}", re.I), ("m", "y", "era")),
    (re.compile(r"(\d{4})-(\d{2})-(\d{2})"), ("y", "m", "d")),
    (re.compile(rf"{_YEAR}", re.I), ("y", "era")),
)

Day = tuple[int, int, int]


def parse_date(text: str) -> tuple[Day, Day] | None:
    """The interval ``(earliest, latest)`` of days a date names, as ``(year, month, day)``
    tuples (BC years negative): "1948" is the whole year, "May 1897" the whole month. None for
    anything else: approximate dates ("c. 1450", "1890s"), ranges, impossible days, free text."""
    s = " ".join(str(text).split()).strip(" .")
    for pattern, names in _PATTERNS:
        m = pattern.fullmatch(s)
        if not m:
            continue
        got = dict(zip(names, m.groups(), strict=True))
        month = 0
        if "m" in got:
            month = int(got["m"]) if got["m"].isdigit() else _MONTHS.get(got["m"].lower(), -1)
            if not 1 <= month <= 12:
                return None
        year = int(got["y"])
        if (got.get("era") or "").upper() in ("BC", "BCE"):
            year = -year
        if year == 0:
            return None
        last = calendar.monthrange(year, month)[1] if year > 0 and month else 31
        if "d" in got:
            day = int(got["d"])
            if not 1 <= day <= last:
                return None
            return (year, month, day), (year, month, day)
        if month:
            return (year, month, 1), (year, month, last)
        return (year, 1, 1), (year, 12, 31)
    return None


@dataclass(frozen=True)
class Entity:
    """One entity with one dated fact (its triple) and its own paragraph."""

    title: str
    relation: str
    value: str
    earliest: Day
    latest: Day
    text: str
    source: str


@dataclass
class EntityReport:
    """Per relation: triples read, and what was dropped and why (nothing is dropped silently)."""

    triples: Counter[str] = field(default_factory=Counter)
    unparsed: dict[str, list[str]] = field(default_factory=dict)
    no_paragraph: Counter[str] = field(default_factory=Counter)
    conflicting: Counter[str] = field(default_factory=Counter)
    kept: Counter[str] = field(default_factory=Counter)

    def as_dict(self) -> dict[str, Any]:
        return {
            rel: {
                "triples": self.triples[rel],
                "kept": self.kept[rel],
                "dropped_unparsed": len(self.unparsed.get(rel, [])),
                "unparsed_examples": self.unparsed.get(rel, [])[:5],
                "dropped_no_paragraph": self.no_paragraph[rel],
                "dropped_conflicting": self.conflicting[rel],
            }
            for rel in RELATIONS
        }


def collect_entities(paths: Iterable[str | Path]) -> tuple[dict[str, list[Entity]], EntityReport]:
    """The entities of every dated triple in 2Wiki files (original or FlashRAG layout), each with
    its own context paragraph, by relation and sorted by title. An entity whose files disagree on
    its value is dropped (counted as conflicting)."""
    report = EntityReport()
    found: dict[str, dict[str, Entity]] = {rel: {} for rel in RELATIONS}
    clashes: dict[str, set[str]] = {rel: set() for rel in RELATIONS}
    for path in map(Path, paths):
        for line, rec in iter_json_records(path):
            meta = rec.get("metadata") if isinstance(rec.get("metadata"), dict) else {}
            evidences = rec.get("evidences") or meta.get("evidences") or []
            if not isinstance(evidences, list):
                raise BadInputError(str(path), line, "evidences is not a list of triples")
            try:
                pairs = passage_pairs(rec)
            except (ValueError, KeyError, TypeError) as e:
                raise BadInputError(str(path), line, f"no context paragraphs: {e}") from e
            exact = {t: x for t, x in pairs}
            by_key: dict[str, list[str]] = {}
            for t, _ in pairs:
                by_key.setdefault(_entity_key(t), []).append(t)
            for triple in evidences:
                if not (isinstance(triple, list | tuple) and len(triple) == 3):
                    continue
                subj, rel, obj = (str(x) for x in triple)
                if rel not in RELATIONS:
                    continue
                report.triples[rel] += 1
                keyed = by_key.get(_entity_key(subj), [])
                title = subj if subj in exact else keyed[0] if len(keyed) == 1 else None
                if title is None or not exact[title].strip():
                    report.no_paragraph[rel] += 1
                    continue
                span = parse_date(obj)
                if span is None:
                    report.unparsed.setdefault(rel, []).append(obj)
                    continue
                old = found[rel].get(title)
                if old is not None and (old.earliest, old.latest) != span:
                    clashes[rel].add(title)
                    continue
                if old is None:
                    found[rel][title] = Entity(
                        title, rel, obj, span[0], span[1], exact[title], f"{path.name}:{line}"
                    )
    out: dict[str, list[Entity]] = {}
    for rel in RELATIONS:
        report.conflicting[rel] = len(clashes[rel])
        out[rel] = sorted((e for t, e in found[rel].items() if t not in clashes[rel]), key=lambda e: e.title)
        report.kept[rel] = len(out[rel])
    return out, report


def _winner(entities: Sequence[Entity], order: str) -> Entity | None:
    """The entity certainly first (last); None when the dates leave it open."""
    if order == "first":
        best = min(entities, key=lambda e: e.earliest)
        if all(best.latest < e.earliest for e in entities if e is not best):
            return best
    else:
        best = max(entities, key=lambda e: e.latest)
        if all(best.earliest > e.latest for e in entities if e is not best):
            return best
    return None


def _names(titles: Sequence[str]) -> str:
    return titles[0] if len(titles) == 1 else ", ".join(titles[:-1]) + ", or " + titles[-1]


def _aliases(title: str) -> list[str]:
    bare = re.sub(r"\s*\([^)]*\)\s*$", "", title).strip()
    return list(dict.fromkeys([title, bare] if bare else [title]))


def make_question(entities: Sequence[Entity], order: str, qid: str, seed: int) -> dict | None:
    """One question record over ``entities`` (in the given order), or None when its answer is
    not certain. One entity is a lookup of its value."""
    rel = entities[0].relation
    noun, verb, lookup = RELATIONS[rel]
    titles = [e.title for e in entities]
    if len(entities) == 1:
        question, answers = lookup.format(titles[0]), [entities[0].value]
    else:
        winner = _winner(entities, order)
        if winner is None:
            return None
        question = f"Which of these {len(entities)} {noun} {verb} {order}: {_names(titles)}?"
        answers = _aliases(winner.title)
    meta = {
        "dataset": "wide_questions",
        "type": f"wide_{rel.replace(' ', '_')}",
        "split": "parallel",
        "synthetic": True,
        "generator": "parallelsearch.data.wide_questions",
        "seed": seed,
        "relation": rel,
        "order": order if len(entities) > 1 else "lookup",
        "n_entities": len(entities),
        # the oracle searches the supporting titles of a parallel question in one search
        "supporting_titles": titles,
        "evidences": [[e.title, rel, e.value] for e in entities],
        "hops": [hop(f"{e.title} {rel}", e.value, e.title, []) for e in entities],
        "sources": [e.source for e in entities],
    }
    return {"id": qid, "question": question, "golden_answers": answers, "metadata": meta}


@dataclass
class WideSet:
    """Generated questions, their corpus (the entities' paragraphs) and what was skipped."""

    questions: list[dict]
    passages: dict[str, Passage]
    report: dict[str, Any]


def generate(
    entities: dict[str, list[Entity]],
    *,
    sizes: Sequence[int] = DEFAULT_SIZES,
    per_size: int = 4,
    seed: int = 0,
    relations: Sequence[str] | None = None,
    attempts: int = 50,
) -> WideSet:
    """``per_size`` questions per size and relation (first and last alternating), the same for
    the same inputs and ``seed``. A size larger than a relation's entities is skipped for it; a
    sample whose answer stays open is redrawn up to ``attempts`` times, then skipped; both are
    counted in the report."""
    rng = random.Random(seed)
    questions: list[dict] = []
    passages: dict[str, Passage] = {}
    skipped: dict[str, int] = {"too_few_entities": 0, "answer_not_certain": 0}
    for rel in relations or list(RELATIONS):
        if rel not in RELATIONS:
            raise ValueError(f"relation {rel!r}: wide questions are made for {', '.join(RELATIONS)}")
        pool = entities.get(rel, [])
        for e in pool:
            p = Passage.make(e.title, e.text)
            passages.setdefault(p.id, p)
        for n in sizes:
            if n < 1:
                raise ValueError(f"size {n}: a wide question has at least one entity")
            for i in range(per_size):
                if n > len(pool):
                    skipped["too_few_entities"] += 1
                    continue
                order = ("first", "last")[i % 2]
                qid = f"wide-{rel.replace(' ', '_')}-n{n}-{order if n > 1 else 'lookup'}-s{seed}-{i}"
                for _ in range(attempts):
                    q = make_question(rng.sample(pool, n), order, qid, seed)
                    if q is not None:
                        questions.append(q)
                        break
                else:
                    skipped["answer_not_certain"] += 1
    return WideSet(questions, passages, {"skipped_questions": skipped})


def write(wide: WideSet, out_dir: str | Path, name: str = "wide_questions") -> tuple[Path, Path]:
    """``<name>.jsonl`` (questions) and ``<name>_corpus.jsonl`` (the paragraphs, for ``index``)."""
    out = Path(out_dir)
    qpath = write_jsonl(out / f"{name}.jsonl", wide.questions)
    corpus = ({"id": p.id, "contents": p.contents} for p in wide.passages.values())
    return qpath, write_jsonl(out / f"{name}_corpus.jsonl", corpus)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m parallelsearch.data.wide_questions",
        description="Write SYNTHETIC N-entity questions (and their corpus) from 2WikiMultihopQA evidence triples.",
    )
    ap.add_argument("files", nargs="+", help="2WikiMultihopQA files with evidences (never the holdout)")
    ap.add_argument("--out", required=True, help="folder for the questions and their corpus (.jsonl)")
    ap.add_argument("--sizes", type=int, nargs="+", default=list(DEFAULT_SIZES), help="entities per question")
    ap.add_argument("--per-size", type=int, default=4, help="questions per size and relation (default 4)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    entities, report = collect_entities(args.files)
    wide = generate(entities, sizes=args.sizes, per_size=args.per_size, seed=args.seed)
    qpath, cpath = write(wide, args.out)
    print(json.dumps({"entities": report.as_dict(), **wide.report}, indent=2))
    print(f"wrote {len(wide.questions)} questions to {qpath} and {len(wide.passages)} paragraphs to {cpath}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
