"""The fenced blocks and backticked names of README.md and the pages it links, as
tests/test_docs_blocks.py checks them. The conventions are README.md's, "How the blocks are marked":
a block's info string is its language and what it needs (``bash gpu``, ``python openai``, ...)."""

from __future__ import annotations

import ast
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: what a marked block needs, as the test reports a skipped block
NEEDS = {
    "gpu": "needs a GPU",
    "network": "needs the internet or a remote service",
    "data": "needs a dataset that is not shipped",
    "server": "needs the server a block above starts",
    "openai": "needs OPENAI_API_KEY (run against a local stand-in OpenAI server)",
}
_FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```[ \t]*$", re.S | re.M)
_LINK = re.compile(r"\]\(([^)#\s]+\.md)(?:#[^)]*)?\)")
_SPAN = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")


@dataclass(frozen=True)
class Block:
    page: Path
    line: int
    lang: str
    need: str  # "" = runs as printed; else a key of NEEDS
    text: str

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def pages() -> list[Path]:
    """README.md and every Markdown page it links (once), in link order."""
    readme = ROOT / "README.md"
    found = [readme]
    for target in _LINK.findall(readme.read_text(encoding="utf-8")):
        path = (readme.parent / target).resolve()
        if path.is_file() and path not in found:
            found.append(path)
    return found


def blocks(page: Path) -> list[Block]:
    text = page.read_text(encoding="utf-8")
    out = []
    for m in _FENCE.finditer(text):
        words = m.group(1).split()
        lang, need = (words + ["", ""])[:2]
        if need and need not in NEEDS:
            raise ValueError(f"{page.name}: unknown block mark {m.group(1)!r}; known: {sorted(NEEDS)}")
        out.append(Block(page, text.count("\n", 0, m.start()) + 1, lang, need, m.group(2)))
    return out


def prose(page: Path) -> str:
    """The page without its fenced blocks (their lines blanked, so line numbers stay)."""
    text = page.read_text(encoding="utf-8")
    return _FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)


def spans(page: Path) -> list[tuple[int, str]]:
    """Every inline code span of the page's prose, with its line."""
    text = prose(page)
    return [(text.count("\n", 0, m.start()) + 1, m.group(1)) for m in _SPAN.finditer(text)]


def shell_commands(block: Block) -> list[list[str]]:
    """A shell block's commands, one argv each: continuation lines joined, comments dropped, split
    at ``&&``, ``;``, ``|`` and a trailing ``&``."""
    joined = block.text.replace("\\\n", " ")
    commands: list[list[str]] = []
    for line in joined.splitlines():
        lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|")
        lexer.whitespace_split = True
        lexer.commenters = "#"
        argv: list[str] = []
        for token in lexer:
            if token in (";", "&", "&&", "|", "||"):
                commands.append(argv) if argv else None
                argv = []
            else:
                argv.append(token)
        if argv:
            commands.append(argv)
    return commands


def split_env(argv: list[str]) -> tuple[list[str], list[str]]:
    """``VAR=value ... command args`` -> (the variables' names, the command's argv)."""
    names = []
    while argv and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", argv[0]):
        names.append(argv[0].partition("=")[0])
        argv = argv[1:]
    return names, argv


def source_words() -> set[str]:
    """Every identifier-like word of the project's code and build files (not its tests, which
    also name what is gone)."""
    files = [ROOT / name for name in ("Makefile", "pyproject.toml", "langgraph.json", ".env.example")]
    for folder in ("parallelsearch", "agents", "graphs", "rl", "stores", "benchmarks", "examples"):
        files += [
            p for p in (ROOT / folder).rglob("*") if p.suffix in (".py", ".yaml", ".json", ".js", ".html")
        ]
    words: set[str] = set()
    for f in files:
        if f.is_file():
            words.update(
                re.findall(r"[A-Za-z_][A-Za-z0-9_]*", f.read_text(encoding="utf-8", errors="replace"))
            )
    return words


def python_ok(code: str) -> None:
    """A Python block parses (raises SyntaxError naming the line otherwise)."""
    ast.parse(code)
