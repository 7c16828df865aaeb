"""Benchmark files -> FlashRAG-format question records (+ their context corpus).

Every supported benchmark format gives one record, ``{"id", "question", "golden_answers",
"metadata"}``, with the paper's split and, where the dataset has one, its decomposition as
``metadata.hops``; docs/architecture.md ("Question records") lists the fields.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from parallelsearch.stores.errors import BadInputError
from parallelsearch.stores.ingestion.jsonfiles import SkipReport, iter_json_records, skip_or_raise
from parallelsearch.stores.ingestion.readers import passage_pairs
from parallelsearch.stores.passages import Passage

DATASETS = ("hotpotqa", "2wikimultihopqa", "musique", "bamboogle", "multihoprag", "nq", "triviaqa", "popqa")

#: (dataset, type) -> split, per ../shared/data/README.md and the paper's Table 3
_PARALLEL = {
    ("hotpotqa", "comparison"),
    ("2wikimultihopqa", "comparison"),
    ("multihoprag", "comparison_query"),
}
_SEQUENTIAL = {
    ("hotpotqa", "bridge"),
    ("2wikimultihopqa", "inference"),
    ("2wikimultihopqa", "compositional"),
    ("multihoprag", "inference_query"),
}
_SINGLE_DATASETS = {"nq", "triviaqa", "popqa", "bamboogle"}


#: the paper's splits of a question, as ``split_of`` names them
Split = Literal["parallel", "sequential", "single", "other"]


def split_of(dataset: str, qtype: str | None) -> Split:
    """Paper split of a question: parallel / sequential / single / other."""
    if (dataset, qtype) in _PARALLEL:
        return "parallel"
    if (dataset, qtype) in _SEQUENTIAL or dataset == "musique":
        return "sequential"
    if dataset in _SINGLE_DATASETS:
        return "single"
    return "other"  # e.g. 2Wiki bridge_comparison, or a multi-hop question whose file carries no type


def guess_dataset(path: str | Path) -> str | None:
    """Dataset name from the path (``.../hotpotqa/...``), or None."""
    low = str(path).lower()
    for name in sorted(DATASETS, key=len, reverse=True):
        if name in low:
            return name
    if "2wiki" in low:
        return "2wikimultihopqa"
    return None


def _norm_q(q: str) -> str:
    return re.sub(r"\s+", " ", q.strip().lower())


def _answers(rec: dict) -> list[str]:
    if isinstance(rec.get("golden_answers"), list):
        ans = rec["golden_answers"]
    elif isinstance(rec.get("answer"), list):
        ans = rec["answer"]
    elif isinstance(rec.get("answer"), str):
        ans = [rec["answer"]] + [a for a in rec.get("answer_aliases") or [] if isinstance(a, str)]
    else:
        raise KeyError("answer")
    ans = [str(a).strip() for a in ans if str(a).strip()]
    if not ans:
        raise ValueError("empty answer list")
    return list(dict.fromkeys(ans))


def _supporting_titles(sf: Any) -> list[str]:
    if isinstance(sf, dict) and isinstance(sf.get("title"), list):
        titles = sf["title"]
    elif isinstance(sf, list):
        titles = [x[0] for x in sf if isinstance(x, list | tuple) and x]
    else:
        return []
    return list(dict.fromkeys(str(t) for t in titles))


_HOP_REF = re.compile(r"(?<![\w#])#([0-9]{1,6})(?!\w)")


def hop(question: str, answer: str, title: str | None, refs: list[int]) -> dict[str, Any]:
    """One hop of ``metadata.hops``: the one shape of a decomposition, whatever the dataset."""
    return {"question": question, "answer": answer, "title": title, "refs": refs}


def _refs(question: str) -> list[int]:
    return list(dict.fromkeys(int(k) for k in _HOP_REF.findall(question)))


def _musique_hops(decomp: list, paragraphs: Any) -> list[dict] | None:
    """MuSiQue's decomposition as hops; the supporting paragraph's title comes from the hop's
    ``support_paragraph`` (FlashRAG copies) or ``paragraph_support_idx`` into ``paragraphs``."""
    by_idx: dict[Any, str] = {}
    if isinstance(paragraphs, list):
        for i, p in enumerate(paragraphs):
            if isinstance(p, dict) and isinstance(p.get("title"), str):
                by_idx[p.get("idx", i)] = p["title"]
    hops = []
    for d in decomp:
        if not isinstance(d, dict):
            return None
        sp = d.get("support_paragraph")
        title = sp.get("title") if isinstance(sp, dict) else by_idx.get(d.get("paragraph_support_idx"))
        q = str(d.get("question", ""))
        hops.append(hop(q, str(d.get("answer", "")), title if isinstance(title, str) else None, _refs(q)))
    return hops or None


def _entity_key(name: str) -> str:
    """``Steno (director)`` and ``steno`` name one entity: case and a parenthetical dropped."""
    return " ".join(re.sub(r"\s*\([^)]*\)", "", name).casefold().split())


def _evidence_hops(evidences: list, titles: list[str]) -> list[dict] | None:
    """2Wiki's triples as hops: a triple whose subject is an earlier triple's object names that
    hop (``#k relation``); its supporting title is the one naming its subject."""
    triples = [e for e in evidences if isinstance(e, list | tuple) and len(e) == 3]
    if len(triples) != len(evidences):
        return None
    by_key = {_entity_key(t): t for t in titles}
    hops: list[dict] = []
    answers: dict[str, int] = {}
    for i, triple in enumerate(triples):
        subj, rel, obj = (str(x) for x in triple)
        key = _entity_key(subj)
        title = by_key.get(key)
        if title is None and len(titles) == len(triples):
            title = titles[i]
        k = answers.get(key)
        hops.append(hop(f"#{k} {rel}" if k else f"{subj} {rel}", obj, title, [k] if k else []))
        answers.setdefault(_entity_key(obj), i + 1)
    return hops


def _read_supporting_facts(rec: dict, meta_in: dict, found: dict[str, Any]) -> None:
    """HotpotQA and 2WikiMultihopQA: ``supporting_facts`` (original or HF layout) name the titles."""
    found["titles"] = _supporting_titles(rec.get("supporting_facts") or meta_in.get("supporting_facts"))


def _read_musique(rec: dict, meta_in: dict, found: dict[str, Any]) -> None:
    """MuSiQue: supporting ``paragraphs`` and the ``question_decomposition`` (FlashRAG keeps its gold
    paragraphs under each hop's ``support_paragraph``), read into hops."""
    if isinstance(rec.get("paragraphs"), list):
        found["titles"] = [p["title"] for p in rec["paragraphs"] if p.get("is_supporting")]
    decomp = rec.get("question_decomposition") or meta_in.get("question_decomposition")
    if not isinstance(decomp, list):
        return
    found["question_decomposition"] = [
        {"question": d.get("question", ""), "answer": d.get("answer", "")} for d in decomp
    ]
    if not found["titles"]:
        found["titles"] = [
            d["support_paragraph"]["title"] for d in decomp if isinstance(d.get("support_paragraph"), dict)
        ]
    found["hops"] = _musique_hops(decomp, rec.get("paragraphs"))


def _read_evidence_list(rec: dict, meta_in: dict, found: dict[str, Any]) -> None:
    """MultiHop-RAG: the ``evidence_list``'s titles."""
    if isinstance(rec.get("evidence_list"), list):
        found["titles"] = [e.get("title", "") for e in rec["evidence_list"] if e.get("title")]


def _read_evidences(rec: dict, meta_in: dict, found: dict[str, Any]) -> None:
    """2WikiMultihopQA: the ``evidences`` triples, read into hops where no decomposition gave them."""
    evid = rec.get("evidences") or meta_in.get("evidences")
    if isinstance(evid, list) and evid:
        found["evidences"] = evid
        if found.get("hops") is None:
            found["hops"] = _evidence_hops(evid, found["titles"])


#: one reader per benchmark record shape, run in this order over every record: each fills what its
#: shape offers (``titles``, ``question_decomposition``, ``evidences``, ``hops``); a new dataset shape
#: is one function and one entry here
SHAPE_READERS: tuple[Callable[[dict, dict, dict[str, Any]], None], ...] = (
    _read_supporting_facts,
    _read_musique,
    _read_evidence_list,
    _read_evidences,
)


def question_record(rec: dict, dataset: str, source: str) -> dict:
    """One FlashRAG question record from any supported benchmark record (:data:`SHAPE_READERS`)."""
    q = rec.get("question")
    if not isinstance(q, str) or not q.strip():
        raise KeyError("question")
    meta_in = rec.get("metadata") if isinstance(rec.get("metadata"), dict) else {}
    qtype = rec.get("type") or meta_in.get("type") or rec.get("question_type") or "na"
    meta: dict[str, Any] = {
        "dataset": dataset,
        "type": qtype,
        "split": split_of(dataset, qtype),
        "source": source,
    }
    found: dict[str, Any] = {}
    for read in SHAPE_READERS:
        read(rec, meta_in, found)
    titles = found["titles"]
    if "question_decomposition" in found:
        meta["question_decomposition"] = found["question_decomposition"]
    if titles:
        meta["supporting_titles"] = list(dict.fromkeys(titles))
    if "evidences" in found:
        meta["evidences"] = found["evidences"]
    if found.get("hops"):
        meta["hops"] = found["hops"]
    if dataset == "hotpotqa" and qtype == "bridge" and len(titles) >= 2:
        meta["bridge_title"] = titles[1]
    if rec.get("level"):
        meta["level"] = rec["level"]
    rid = rec.get("_id") or rec.get("id")
    if rid is None or re.fullmatch(r"(dev|test|train)_\d+|\d+", str(rid)):
        # positional ids collide between files: derive one from the question text (the original
        # stays as ``source_id``: FlashRAG's "test_17" tells make-train-data it is an evaluation question)
        if rid is not None:
            meta["source_id"] = str(rid)
        rid = f"{dataset}-{hashlib.sha1(_norm_q(q).encode()).hexdigest()[:12]}"
    return {"id": str(rid), "question": q.strip(), "golden_answers": _answers(rec), "metadata": meta}


def _records_with_ground_truth(path: Path, skip_bad: bool, report: SkipReport) -> Iterator[tuple[int, dict]]:
    """MultiHop-RAG keeps answers in a sibling ground_truth.json keyed like queries.json."""
    gt_path = path.with_name("ground_truth.json")
    truth: dict[str, dict] = {}
    if path.name == "queries.json" and gt_path.is_file():
        for _, g in iter_json_records(gt_path):
            truth[str(g.get("_key"))] = g
    for line, rec in iter_json_records(path, skip_bad=skip_bad, report=report):
        if truth:
            g = truth.get(str(rec.get("id")))
            if g is None:
                reason = f"query id {rec.get('id')!r} has no entry in {gt_path.name}"
                skip_or_raise(path, line, reason, skip_bad, report)
                continue
            rec = {**rec, "answer": g.get("answer"), "evidence_list": g.get("evidence_list", [])}
        yield line, rec


def _richness(q: dict) -> int:
    m = q["metadata"]
    return (m.get("type") != "na") * 4 + ("supporting_titles" in m) * 2 + (len(q["golden_answers"]) > 1)


def _merged(old: dict, new: dict) -> dict:
    """The copy with the most metadata, with the golden answers of both (aliases differ by file)."""
    keep, other = (new, old) if _richness(new) > _richness(old) else (old, new)
    return {**keep, "golden_answers": list(dict.fromkeys(keep["golden_answers"] + other["golden_answers"]))}


@dataclass
class PreparedDataset:
    name: str
    questions: list[dict] = field(default_factory=list)
    passages: dict[str, Passage] = field(default_factory=dict)
    duplicates: int = 0

    def type_counts(self) -> Counter:
        return Counter(q["metadata"]["type"] for q in self.questions)

    def split_counts(self) -> Counter:
        return Counter(q["metadata"]["split"] for q in self.questions)


def prepare(
    paths: Iterable[str | Path],
    *,
    dataset: str | None = None,
    skip_bad: bool = False,
    report: SkipReport | None = None,
) -> dict[str, PreparedDataset]:
    """Read benchmark files into per-dataset question lists (deduplicated by question text) and corpora."""
    report = report if report is not None else SkipReport()
    out: dict[str, PreparedDataset] = {}
    seen: dict[str, dict[str, int]] = {}
    for path in map(Path, paths):
        name = dataset or guess_dataset(path)
        if name is None:
            raise BadInputError(
                str(path),
                None,
                f"cannot tell the dataset from the path; pass --dataset ({', '.join(DATASETS)})",
            )
        if path.name == "ground_truth.json" and name == "multihoprag":
            continue  # read together with queries.json
        ds = out.setdefault(name, PreparedDataset(name))
        keys = seen.setdefault(name, {})
        for line, rec in _records_with_ground_truth(path, skip_bad, report):
            try:
                q = question_record(rec, name, f"{path}:{line}")
            except (KeyError, ValueError, TypeError) as e:
                reason = f"missing field {e}" if isinstance(e, KeyError) else str(e)
                skip_or_raise(path, line, reason, skip_bad, report)
                continue
            key = _norm_q(q["question"])
            if key in keys:
                ds.duplicates += 1
                ds.questions[keys[key]] = _merged(ds.questions[keys[key]], q)
            else:
                keys[key] = len(ds.questions)
                ds.questions.append(q)
            try:
                pairs = passage_pairs(rec)
            except (ValueError, KeyError, TypeError):
                pairs = []  # question-only files carry no context; that is not an error here
            for title, text in pairs:
                if title.strip() or text.strip():
                    p = Passage.make(title, text)
                    ds.passages.setdefault(p.id, p)
    return out


def write_jsonl(path: Path, records: Iterable[dict[str, Any]]) -> Path:
    """One JSON record per line (UTF-8, folders made as needed)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        for rec in records:
            f.write(json.dumps(rec, ensure_ascii=False) + "\n")
    return path


def write_prepared(ds: PreparedDataset, out_dir: str | Path) -> tuple[Path, Path | None]:
    """Write ``<name>.jsonl`` (questions) and ``<name>_corpus.jsonl`` (passages, when any)."""
    qpath = write_jsonl(Path(out_dir) / f"{ds.name}.jsonl", ds.questions)
    if not ds.passages:
        return qpath, None
    corpus = ({"id": p.id, "contents": p.contents} for p in ds.passages.values())
    return qpath, write_jsonl(Path(out_dir) / f"{ds.name}_corpus.jsonl", corpus)


def load_questions(path: str | Path, *, dataset: str | None = None, skip_bad: bool = False) -> list[dict]:
    """FlashRAG question records from a prepared file or from any raw benchmark file."""
    path = Path(path)
    _, first = next(iter_json_records(path), (None, {}))
    prepared = {"id", "question", "golden_answers", "metadata"} <= first.keys()
    if prepared and "split" in (first["metadata"] or {}):
        return [r for _, r in iter_json_records(path, skip_bad=skip_bad)]
    return [q for ds in prepare([path], dataset=dataset, skip_bad=skip_bad).values() for q in ds.questions]
