"""Does a backticked name of the docs exist? Flags against the CLI's parsers (per sub-command when
the span names one), dotted names against the package's modules, files against the tree,
``PARALLELSEARCH_*`` variables against the settings, and plain identifiers against the words of
the code. Spans that are not a name (values, expressions, protocol text) are not checked."""

from __future__ import annotations

import argparse
import importlib.util
import re
from functools import cache
from pathlib import Path

from doc_blocks import ROOT, source_words

#: the project's sub-packages, as the docs write them without the ``parallelsearch.`` prefix
_OURS = {"agents", "graphs", "rl", "stores", "data", "eval", "serving", "cli", "training", "demo_data"}
_IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
_TOP_DIRS = ("agents", "graphs", "rl", "stores", "parallelsearch", "benchmarks", "tests", "docs", "examples")
_FILE_SUFFIXES = (".py", ".md", ".yaml", ".toml", ".ipynb", ".txt", ".sh", ".json", ".html")
_DATA_SUFFIXES = (".index", ".jsonl", ".npy", ".npz", ".pem", ".sqlite", ".svg", ".png")
#: installed libraries whose names the docs may use as theirs (LangChain, LangGraph, OpenRLHF, ...)
LIBRARIES = (
    "langchain", "langchain_core", "langchain_openai", "langgraph", "langgraph_sdk", "langgraph_api",
    "langgraph_cli", "langserve", "openrlhf", "httpx",
)  # fmt: skip


@cache
def cli_flags() -> dict[str, set[str]]:
    """Each sub-command's option strings (key ""= all of them together)."""
    from parallelsearch.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    out: dict[str, set[str]] = {"": set()}
    for name, p in sub.choices.items():
        out[name] = {s for a in p._actions for s in a.option_strings}
        out[""] |= out[name]
    return out


@cache
def words() -> frozenset[str]:
    return frozenset(source_words())


@cache
def code_flags() -> frozenset[str]:
    """Flags the code spells as string literals: the benchmark scripts', the OpenRLHF arguments the
    launcher writes, pip's in the Makefile."""
    files = [ROOT / "Makefile", *(ROOT / "benchmarks").glob("*.py"), *(ROOT / "rl").rglob("*.py")]
    text = " ".join(f.read_text(encoding="utf-8") for f in files)
    return frozenset(re.findall(r"(--[A-Za-z0-9][A-Za-z0-9_.-]*)", text))


@cache
def library_names() -> frozenset[str]:
    """The identifiers and flags of :data:`LIBRARIES` that are installed (names the docs give as
    theirs)."""
    names: set[str] = set()
    for name in LIBRARIES:
        spec = _spec(name)
        for folder in (spec.submodule_search_locations or []) if spec else []:
            for f in Path(folder).rglob("*.py"):
                names.update(
                    re.findall(
                        r"--?[A-Za-z0-9][A-Za-z0-9_.-]*|[A-Za-z_][A-Za-z0-9_]*", f.read_text(errors="replace")
                    )
                )
    return frozenset(names)


def _in_library(name: str) -> bool:
    return name in library_names()


@cache
def _built_prefixes() -> frozenset[str]:
    """Prefixes of names the code builds (``f"reward_{name}"``): ``reward_outcome`` exists then."""
    text = " ".join(f.read_text(encoding="utf-8") for f in (ROOT / "rl").rglob("*.py"))
    return frozenset(re.findall(r'f"([a-z_]+_)\{', text))


def _known_word(name: str, allowed: dict[str, str]) -> bool:
    if name in words() or name in allowed:
        return True
    if any(name.startswith(p) and name[len(p) :] in words() for p in _built_prefixes()):
        return True
    return _in_library(name)


def problem(span: str, allowed: dict[str, str]) -> str | None:
    """What is wrong with ``span`` as a name (None: it exists, is allowed, or is not a name)."""
    s = span.strip().removeprefix("parallelsearch ").strip()
    if s in allowed:
        return None
    first = s.split()[0] if s.split() else ""
    if s.startswith("--") or first in cli_flags() and first:
        return _flags(s, allowed)
    if re.fullmatch(r"_[A-Z][A-Z0-9_]+", s) and s not in words():  # a PARALLELSEARCH_ variable's tail
        s = "PARALLELSEARCH" + s
    if re.fullmatch(r"[A-Z][A-Z0-9_]+", s):
        return _variable(s, allowed)
    if s.endswith(_DATA_SUFFIXES) and " " not in s:
        return None  # a data file's name
    if "/" in s or s.endswith(_FILE_SUFFIXES):
        return _path(s)
    head = re.sub(r"\(.*\)$", "", s).rstrip("=")  # a call's name, a keyword argument's name
    if re.fullmatch(rf"{_IDENT}(\.{_IDENT})+(:{_IDENT})?", head):
        return _dotted(head, allowed)
    if re.fullmatch(_IDENT, head) and len(head) > 1:
        return None if _known_word(head, allowed) else f"{head!r} is not a name in the code"
    return None


def _flags(s: str, allowed: dict[str, str]) -> str | None:
    first = s.split()[0]
    known = cli_flags().get(first, cli_flags()[""])
    for flag in re.findall(r"(?:^|\s)(--[A-Za-z0-9][A-Za-z0-9_.-]*)", s):
        if flag not in known and flag not in allowed and flag not in code_flags() and not _in_library(flag):
            return f"flag {flag} is not an option of {'parallelsearch ' + first if first in cli_flags() else 'the CLI'}"
    return None


def _variable(s: str, allowed: dict[str, str]) -> str | None:
    from parallelsearch.settings import Settings

    if s in words() or s in allowed or _in_library(s):
        return None
    name = s.removeprefix("PARALLELSEARCH_").lower()
    field, _, sub = name.partition("__")
    if s.startswith("PARALLELSEARCH_") and field in Settings.model_fields:
        return None if not sub else _nested_field(field, sub)
    return f"variable {s} is read nowhere in the code"


def _nested_field(field: str, sub: str) -> str | None:
    from parallelsearch.graphs.config import GraphConfig

    ok = field == "graph_config" and sub in GraphConfig.model_fields
    return None if ok else f"setting {field}.{sub} does not exist"


def _path(s: str) -> str | None:
    path = s.rstrip("/").split(":")[0]
    if not re.fullmatch(r"[A-Za-z0-9_./-]+", path) or path.split("/")[0] not in _TOP_DIRS:
        return None  # a user's file (data/..., runs/...) or a pattern, not the tree's
    if (ROOT / path).exists() or path.startswith("benchmarks/results"):
        return None
    module, _, attr = path.rpartition(".")  # rl/vllm_weight_sync.CpuWeightSync: a module's attribute
    source = ROOT / f"{module}.py"
    if source.is_file() and re.search(rf"\b{re.escape(attr)}\b", source.read_text(encoding="utf-8")):
        return None
    return f"file {path} does not exist"


def _dotted(head: str, allowed: dict[str, str]) -> str | None:
    module_part, _, attr = head.partition(":")
    parts = module_part.split(".")
    if parts[0] in _OURS:
        parts = ["parallelsearch", *parts]
    if parts[0] != "parallelsearch":
        return _other_dotted(head, parts, allowed)
    for i in range(len(parts), 0, -1):
        spec = _spec(".".join(parts[:i]))
        if spec is None:
            continue
        rest = parts[i:] + ([attr] if attr else [])
        if not rest:
            return None
        text = _module_text(spec)
        if rest[0] not in re.findall(_IDENT, text):
            return f"{head!r}: {'.'.join(parts[:i])} has no {rest[0]!r}"
        missing = [r for r in rest[1:] if r not in words()]
        return f"{head!r}: no {missing[0]!r} in the code" if missing else None
    return f"{head!r}: no such module"


def _other_dotted(head: str, parts: list[str], allowed: dict[str, str]) -> str | None:
    """``Class.attr`` of ours (each part a word of the code) or another library's module path."""
    if all(_known_word(p, allowed) for p in parts):
        return None
    for i in range(len(parts), 0, -1):
        if _spec(".".join(parts[:i])) is not None:
            return None  # an installed library's module: its attributes are its own business
    return f"{head!r} is not a name in the code or an installed module"


def _spec(name: str):
    try:
        return importlib.util.find_spec(name)
    except (ImportError, ValueError, AttributeError):
        return None


def _module_text(spec) -> str:
    origin = Path(spec.origin) if spec.origin else None
    if origin is None or not origin.is_file():
        return ""
    text = origin.read_text(encoding="utf-8", errors="replace")
    if origin.name == "__init__.py":  # a package: its modules' names count as its attributes
        text += " ".join(p.stem for p in origin.parent.iterdir())
    return text
