"""Corpus readers: every supported file format in, :class:`Passage` records out.

Record shapes are detected per record, so mixed folders work; :data:`SUPPORTED` names them and
docs/architecture.md ("Bad input", record shapes) gives the fields of each.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

from parallelsearch.stores.ingestion.jsonfiles import (
    SkipReport,
    expand_paths,
    iter_json_records,
    skip_or_raise,
)
from parallelsearch.stores.passages import Passage, split_contents
from parallelsearch.stores.text import scrub_text

SUPPORTED = (
    '{"contents"}, {"title","text"}, "context" (HotpotQA/2Wiki, list or HF dict), '
    '"metadata.context" (FlashRAG), "paragraphs" (MuSiQue), "evidence_list" (MultiHop-RAG)'
)


def join_sentences(sentences: Iterable[str]) -> str:
    """Join sentence lists: HotpotQA sentences carry their leading space, 2Wiki's do not."""
    out = ""
    for s in sentences:
        if not isinstance(s, str):
            raise ValueError(f"sentence is {type(s).__name__}, expected a string")
        if out and s and not s[0].isspace() and not out[-1].isspace():
            out += " "
        out += s
    return out.strip()


def _context_pairs(ctx: object) -> list[tuple[str, str]]:
    if isinstance(ctx, list):
        pairs = []
        for item in ctx:
            if not (isinstance(item, list | tuple) and len(item) == 2 and isinstance(item[0], str)):
                raise ValueError("context entry is not [title, [sentences]]")
            sents = item[1] if isinstance(item[1], list) else [item[1]]
            pairs.append((item[0], join_sentences(sents)))
        return pairs
    if isinstance(ctx, dict) and isinstance(ctx.get("title"), list):
        bodies = ctx.get("sentences", ctx.get("content"))
        if not isinstance(bodies, list) or len(bodies) != len(ctx["title"]):
            raise ValueError("context.title and context.sentences differ in length")
        for i, t in enumerate(ctx["title"]):
            if not isinstance(t, str):
                raise ValueError(f"context.title[{i}] is {type(t).__name__}, expected a string")
        return [
            (t, join_sentences(b if isinstance(b, list) else [b]))
            for t, b in zip(ctx["title"], bodies, strict=True)
        ]
    raise ValueError("context has an unknown shape")


def _text(obj: object, key: str, where: str, *, optional: bool = False) -> str:
    """``obj[key]`` as a string; ValueError naming the field and the type found otherwise."""
    if not isinstance(obj, dict):
        raise ValueError(f"{where} is {type(obj).__name__}, expected an object with {key!r}")
    value = obj.get(key)
    if value is None and (optional or key not in obj):
        if optional:
            return ""
        raise ValueError(f"{where} has no {key!r}")
    if not isinstance(value, str):
        raise ValueError(f"{where}.{key} is {type(value).__name__}, expected a string")
    return value


def passage_pairs(rec: dict) -> list[tuple[str, str]]:
    """``(title, text)`` pairs held by one record; ValueError names what is missing."""
    if isinstance(rec.get("contents"), str):
        return [split_contents(rec["contents"])]
    if isinstance(rec.get("title"), str) and isinstance(rec.get("text"), str):
        return [(rec["title"], rec["text"])]
    if "context" in rec:
        return _context_pairs(rec["context"])
    if isinstance(rec.get("paragraphs"), list):
        return [
            (_text(p, "title", f"paragraphs[{i}]"), _text(p, "paragraph_text", f"paragraphs[{i}]"))
            for i, p in enumerate(rec["paragraphs"])
        ]
    meta = rec.get("metadata")
    if isinstance(meta, dict):
        if "context" in meta:
            return _context_pairs(meta["context"])
        decomp = meta.get("question_decomposition")
        if isinstance(decomp, list) and any(isinstance(d, dict) and "support_paragraph" in d for d in decomp):
            pairs = []
            for i, d in enumerate(decomp):
                if isinstance(d, dict) and "support_paragraph" in d:
                    where = f"question_decomposition[{i}].support_paragraph"
                    sp = d["support_paragraph"]
                    pairs.append((_text(sp, "title", where), _text(sp, "paragraph_text", where)))
            return pairs
    if isinstance(rec.get("evidence_list"), list):
        return [
            (
                _text(e, "title", f"evidence_list[{i}]", optional=True),
                _text(e, "fact", f"evidence_list[{i}]"),
            )
            for i, e in enumerate(rec["evidence_list"])
        ]
    raise ValueError(f"record holds no passages; expected one of {SUPPORTED}")


def read_passages(
    paths: Iterable[str | Path], *, skip_bad: bool = False, report: SkipReport | None = None
) -> Iterator[Passage]:
    """Yield passages of every file in order (duplicates included; stores dedupe by id)."""
    for path in expand_paths(paths):
        for line, rec in iter_json_records(path, skip_bad=skip_bad, report=report):
            try:
                pairs = passage_pairs(rec)
            except (ValueError, KeyError, TypeError, AttributeError) as e:
                reason = f"missing field {e}" if isinstance(e, KeyError) else str(e)
                skip_or_raise(path, line, reason, skip_bad, report)
                continue
            for title, text in pairs:
                if not (title or "").strip() and not (text or "").strip():
                    skip_or_raise(path, line, "empty passage (no title, no text)", skip_bad, report)
                    continue
                title, n_title = scrub_text(title or "")
                text, n_text = scrub_text(text or "")
                if report is not None:
                    report.replaced += n_title + n_text
                yield Passage.make(title, text, source=f"{path}:{line}")


def count_passages(paths: Iterable[str | Path], *, skip_bad: bool = False) -> int:
    """How many passages :func:`read_passages` yields (one pass; what ``index --shard`` divides)."""
    return sum(1 for _ in read_passages(paths, skip_bad=skip_bad, report=SkipReport()))
