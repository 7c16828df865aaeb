"""Record-level reading of JSON, JSON-lines and JSON-array files with line numbers.

Benchmark files come as JSON lines, one JSON array, or one JSON object holding the
records; every record is yielded with the 1-based line it starts on so a bad record can
be named precisely. Undecodable bytes and invalid JSON become :class:`BadInputError`
(or, with ``skip_bad``, an entry in a :class:`SkipReport`); nothing is dropped silently.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from parallelsearch.stores.errors import BadInputError


@dataclass
class SkipReport:
    """What was skipped and where, for ``--skip-bad`` runs."""

    entries: list[tuple[str, int | None, str]] = field(default_factory=list)

    def add(self, err: BadInputError) -> None:
        self.entries.append((err.path, err.line, err.reason))

    @property
    def count(self) -> int:
        return len(self.entries)

    def summary(self, limit: int = 10) -> str:
        if not self.entries:
            return "skipped 0 bad records"
        lines = [f"skipped {self.count} bad record(s):"]
        for path, line, reason in self.entries[:limit]:
            lines.append(f"  {path}:{line if line is not None else '-'}: {reason}")
        if self.count > limit:
            lines.append(f"  ... and {self.count - limit} more")
        return "\n".join(lines)


def _fail(err: BadInputError, skip_bad: bool, report: SkipReport | None) -> None:
    if not skip_bad:
        raise err
    if report is not None:
        report.add(err)


def _first_char(raw: bytes) -> str:
    for b in raw[:4096].lstrip(b"\xef\xbb\xbf"):
        c = chr(b)
        if not c.isspace():
            return c
    return ""


def iter_json_records(
    path: str | Path, *, skip_bad: bool = False, report: SkipReport | None = None
) -> Iterator[tuple[int, dict]]:
    """Yield ``(line, record)`` for every object record in ``path``."""
    path = Path(path)
    if not path.is_file():
        raise BadInputError(str(path), None, "no such file")
    raw = path.read_bytes()
    first = _first_char(raw)
    if first == "[":
        yield from _iter_array(path, raw)
        return
    lines = raw.split(b"\n")
    if first == "{" and len(lines) > 1:
        try:
            json.loads(lines[0].decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError):
            # first line is not a full record: the file is one pretty-printed object
            yield from _iter_single_object(path, raw)
            return
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError as e:
            _fail(
                BadInputError(str(path), lineno, f"not valid UTF-8 ({e.reason} at byte {e.start})"),
                skip_bad,
                report,
            )
            continue
        try:
            rec = json.loads(text)
        except json.JSONDecodeError as e:
            _fail(BadInputError(str(path), lineno, f"not valid JSON ({e.msg})"), skip_bad, report)
            continue
        if not isinstance(rec, dict):
            _fail(
                BadInputError(str(path), lineno, f"expected a JSON object, got {type(rec).__name__}"),
                skip_bad,
                report,
            )
            continue
        yield lineno, rec


def _decode_whole(path: Path, raw: bytes) -> str:
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise BadInputError(str(path), line, f"not valid UTF-8 ({e.reason})") from e


def _iter_array(path: Path, raw: bytes) -> Iterator[tuple[int, dict]]:
    text = _decode_whole(path, raw)
    decoder = json.JSONDecoder()
    i = text.index("[") + 1
    n = len(text)
    line = text.count("\n", 0, i) + 1
    last = i
    while True:
        while i < n and text[i] in " \t\r\n,":
            i += 1
        if i >= n:
            raise BadInputError(str(path), text.count("\n") + 1, "not valid JSON (unterminated array)")
        if text[i] == "]":
            return
        line += text.count("\n", last, i)
        last = i
        try:
            rec, end = decoder.raw_decode(text, i)
        except json.JSONDecodeError as e:
            raise BadInputError(str(path), e.lineno, f"not valid JSON ({e.msg})") from e
        if not isinstance(rec, dict):
            raise BadInputError(str(path), line, f"expected a JSON object, got {type(rec).__name__}")
        yield line, rec
        i = end


def _iter_single_object(path: Path, raw: bytes) -> Iterator[tuple[int, dict]]:
    text = _decode_whole(path, raw)
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as e:
        raise BadInputError(str(path), e.lineno, f"not valid JSON ({e.msg})") from e
    # containers seen in benchmark files: {"queries": [...]} and {"0": {...}, "1": {...}}
    if isinstance(obj.get("queries"), list):
        items = obj["queries"]
    elif obj and all(isinstance(v, dict) for v in obj.values()):
        items = [dict(v, _key=k) for k, v in obj.items()]
    else:
        items = [obj]
    for idx, rec in enumerate(items):
        if not isinstance(rec, dict):
            raise BadInputError(str(path), None, f"record #{idx}: expected a JSON object")
        yield 1, rec
