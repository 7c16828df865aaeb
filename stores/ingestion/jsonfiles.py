"""Record-level reading of JSON-lines, JSON-array and single-object JSON files with line numbers.

Every record is yielded with the 1-based line it starts on, so a bad record can be named;
undecodable bytes and invalid JSON become :class:`BadInputError` (or, with ``skip_bad``, an
entry in a :class:`SkipReport`): nothing is dropped silently.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from parallelsearch.stores.errors import BadInputError


@dataclass
class SkipReport:
    """What was skipped and where, for ``--skip-bad`` runs."""

    entries: list[tuple[str, int | None, str]] = field(default_factory=list)
    #: decisions a reader took that a person should know of (how a file's layout was read)
    notes: list[str] = field(default_factory=list)
    #: invalid characters (lone surrogates) replaced with U+FFFD in records that were kept
    replaced: int = 0

    def add(self, err: BadInputError) -> None:
        self.entries.append((err.path, err.line, err.reason))

    def note(self, text: str) -> None:
        self.notes.append(text)

    @property
    def count(self) -> int:
        return len(self.entries)

    def summary(self, limit: int = 10) -> str:
        notes = [f"note: {n}" for n in self.notes]
        if self.replaced:
            notes.append(f"note: replaced {self.replaced} invalid character(s) (lone surrogates) with U+FFFD")
        if not self.entries:
            return "\n".join([*notes, "skipped 0 bad records"])
        lines = [*notes, f"skipped {self.count} bad record(s):"]
        for path, line, reason in self.entries[:limit]:
            lines.append(f"  {path}:{line if line is not None else '-'}: {reason}")
        if self.count > limit:
            lines.append(f"  ... and {self.count - limit} more")
        return "\n".join(lines)


def skip_or_raise(path: Path, line: int, reason: str, skip_bad: bool, report: SkipReport | None) -> None:
    """Raise the bad record's error, or with ``skip_bad`` add it to ``report``."""
    err = BadInputError(str(path), line, reason)
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


DATA_SUFFIXES = (".json", ".jsonl")


def expand_paths(paths: Iterable[str | Path]) -> list[Path]:
    """Files as given; a directory becomes its ``.json``/``.jsonl`` files (recursively, sorted)."""
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            found = sorted(f for f in p.rglob("*") if f.is_file() and f.suffix.lower() in DATA_SUFFIXES)
            if not found:
                raise BadInputError(str(p), None, "is a directory holding no .json or .jsonl files")
            out.extend(found)
        elif p.is_file():
            out.append(p)
        else:
            raise BadInputError(str(p), None, "no such file or directory")
    return out


def _parse_line(lineno: int, line: bytes) -> tuple[Any, str | None]:
    """One line of a JSON-lines file as a value, or None and why it is not one."""
    try:
        return json.loads(line.decode("utf-8-sig" if lineno == 1 else "utf-8")), None
    except UnicodeDecodeError as e:
        return None, f"not valid UTF-8 ({e.reason} at byte {e.start})"
    except json.JSONDecodeError as e:
        return None, f"not valid JSON ({e.msg})"


def _first_line_record(lines: list[bytes]) -> tuple[int, str | None]:
    """The first non-empty line and why it is not one JSON value (None = it is)."""
    for lineno, line in enumerate(lines, 1):
        if line.strip():
            return lineno, _parse_line(lineno, line)[1]
    return 1, None


def iter_json_records(
    path: str | Path, *, skip_bad: bool = False, report: SkipReport | None = None
) -> Iterator[tuple[int, dict]]:
    """Yield ``(line, record)`` for every object record in ``path``.

    ``[`` = a JSON array; ``{`` with a first line that is a whole JSON value = JSON lines;
    otherwise ONE JSON document when the whole file parses as one, else JSON lines whose first
    line is bad (an error, or with ``skip_bad`` a skipped line and a note of the decision).
    """
    path = Path(path)
    if path.is_dir():
        raise BadInputError(
            str(path), None, "is a directory, not a data file (pass the .json or .jsonl files in it)"
        )
    if not path.is_file():
        raise BadInputError(str(path), None, "no such file")
    raw = path.read_bytes()
    first = _first_char(raw)
    if first == "[":
        yield from _iter_array(path, raw, skip_bad, report)
        return
    lines = raw.split(b"\n")
    if first == "{" and len(lines) > 1:
        bad_line, why = _first_line_record(lines)
        if why is not None:
            try:
                whole = json.loads(raw.decode("utf-8-sig"))
            except (UnicodeDecodeError, json.JSONDecodeError):
                whole = None
            if isinstance(whole, dict):
                # a pretty-printed JSON document: its first line alone is not a record
                yield from _iter_single_object(path, whole, skip_bad, report)
                return
            if not skip_bad:
                raise BadInputError(
                    str(path),
                    bad_line,
                    f"{why}; the file is not one JSON document either, so it was read as JSON lines",
                )
            if report is not None:
                report.note(f"{path}: line {bad_line} is bad ({why}); read the file as JSON lines")
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        rec, why = _parse_line(lineno, line)
        if why is None and not isinstance(rec, dict):
            why = f"expected a JSON object, got {type(rec).__name__}"
        if why is None:
            yield lineno, rec
        else:
            skip_or_raise(path, lineno, why, skip_bad, report)


def _iter_array(
    path: Path, raw: bytes, skip_bad: bool, report: SkipReport | None
) -> Iterator[tuple[int, dict]]:
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise BadInputError(
            str(path), raw[: e.start].count(b"\n") + 1, f"not valid UTF-8 ({e.reason})"
        ) from e
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
            # the array cannot be resynchronised after a syntax error: the rest is unreadable
            raise BadInputError(
                str(path), e.lineno, f"not valid JSON ({e.msg}); the rest of the array cannot be read"
            ) from e
        i = end
        if not isinstance(rec, dict):
            why = f"array element is {type(rec).__name__}, expected a JSON object"
            skip_or_raise(path, line, why, skip_bad, report)
            continue
        yield line, rec


def _iter_single_object(
    path: Path, obj: dict, skip_bad: bool, report: SkipReport | None
) -> Iterator[tuple[int, dict]]:
    # containers seen in benchmark files: {"queries": [...]} and {"0": {...}, "1": {...}}
    if isinstance(obj.get("queries"), list):
        items = obj["queries"]
    elif obj and all(isinstance(v, dict) for v in obj.values()):
        items = [dict(v, _key=k) for k, v in obj.items()]
    else:
        items = [obj]
    for idx, rec in enumerate(items):
        if not isinstance(rec, dict):
            skip_or_raise(
                path, 1, f"record #{idx} is {type(rec).__name__}, expected a JSON object", skip_bad, report
            )
            continue
        yield 1, rec
