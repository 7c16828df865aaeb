"""The installed package's import graph, read from the source: the block of docs/architecture.md
between the ``import-graph`` markers is written by this script and checked against the code by
tests/test_architecture.py, so the page never depends on a tool that reads imports by path.

``python docs/import_graph.py`` prints the block; ``--write`` puts it into the page; ``--check``
exits 1 when the page is stale. Every ``import``/``from ... import`` (also inside functions) and
every string naming a project module (lazy tables) is a dependency; an import under
``if TYPE_CHECKING:`` is one for the layering but not for import circles, since it never runs.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "architecture.md"
BEGIN, END = (
    "<!-- import-graph: begin (python docs/import_graph.py --write) -->",
    "<!-- import-graph: end -->",
)
#: installed name of each source folder (pyproject.toml's package-dir)
FOLDERS = {"stores": "stores", "agents": "agents", "graphs": "graphs", "rl": "rl", "parallelsearch": ""}


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    if parts[0] != "parallelsearch":
        parts = ["parallelsearch", *parts]
    return ".".join(parts)


def project_modules(root: Path = ROOT) -> dict[str, Path]:
    """Installed module name -> source file, for every module of the package."""
    out = {}
    for folder in FOLDERS:
        for path in sorted((root / folder).rglob("*.py")):
            out[module_name(path, root)] = path
    return out


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    """ids of the nodes inside ``if TYPE_CHECKING:`` blocks."""
    inside: set[int] = set()
    for node in ast.walk(tree):
        test = getattr(node, "test", None)
        if isinstance(node, ast.If) and getattr(test, "id", getattr(test, "attr", None)) == "TYPE_CHECKING":
            inside |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
    return inside


def imports_of(
    source: str, module: str, is_package: bool, known: set[str], runtime_only: bool = False
) -> list[tuple[int, str]]:
    """(line, imported module) for every import statement and every string naming a project module."""
    found: list[tuple[int, str]] = []
    package = module if is_package else module.rpartition(".")[0]
    tree = ast.parse(source)
    skip = _type_checking_nodes(tree) if runtime_only else set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            found.append((node.lineno, base))
            # "from parallelsearch import stores" names a subpackage
            found += [(node.lineno, f"{base}.{a.name}") for a in node.names if f"{base}.{a.name}" in known]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in known:
            found.append((node.lineno, node.value))
    return found


def module_graph(modules: dict[str, Path], runtime_only: bool = True) -> dict[str, set[str]]:
    """Module -> the project modules it imports (a parent package it lives in does not count)."""
    known = set(modules)
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        deps = set()
        for _, target in imports_of(path.read_text(), name, path.name == "__init__.py", known, runtime_only):
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name and not name.startswith(target + "."):
                deps.add(target)
        graph[name] = deps
    return graph


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while (w := stack.pop()) != v:
                group.append(w)
            if group:
                circles.append(sorted([v, *group]))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * len(graph)))
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(circles)


def package_of(module: str, modules: dict[str, Path]) -> str:
    """The (sub)package a module belongs to, without the ``parallelsearch.`` prefix."""
    is_package = modules[module].name == "__init__.py"
    package = module if is_package else module.rpartition(".")[0]
    return package.removeprefix("parallelsearch").lstrip(".") or "parallelsearch"


def package_edges(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Each package -> the other packages its modules import."""
    edges: dict[str, set[str]] = {}
    for name, deps in module_graph(modules).items():
        src = package_of(name, modules)
        edges.setdefault(src, set()).update(package_of(d, modules) for d in deps)
    return {src: targets - {src} for src, targets in edges.items()}


def mutual_pairs(edges: dict[str, set[str]]) -> list[tuple[str, str]]:
    """The package pairs that import each other (a parent and its subpackage often do)."""
    return sorted((a, b) for a in edges for b in edges[a] if a < b and a in edges.get(b, set()))


def block(root: Path = ROOT) -> str:
    """The page's import-graph block: each package and the packages it imports, the pairs that import
    each other and whether modules import in a circle (no module count: a new file changes nothing
    here unless it adds an arrow)."""
    modules = project_modules(root)
    edges = package_edges(modules)
    width = max(map(len, edges))
    lines = [
        f"{src:<{width}} -> {', '.join(sorted(edges[src])) or '(nothing of the project)'}"
        for src in sorted(edges)
    ]
    pairs = mutual_pairs(edges)
    mutual = "packages importing each other: " + (", ".join(f"{a} <-> {b}" for a, b in pairs) or "none")
    circles = import_circles(module_graph(modules))
    circle = f"IMPORT CIRCLES: {circles}" if circles else "no import circle between modules"
    return "\n".join([BEGIN, "```", *lines, "```", mutual + "; " + circle, END])


def page_block(text: str) -> str:
    start, end = text.index(BEGIN), text.index(END) + len(END)
    return text[start:end]


def main(argv: list[str]) -> int:
    new = block()
    if "--write" in argv:
        text = PAGE.read_text()
        PAGE.write_text(text.replace(page_block(text), new))
    elif "--check" in argv:
        if page_block(PAGE.read_text()) != new:
            print("docs/architecture.md's import graph is stale: run python docs/import_graph.py --write")
            return 1
    else:
        print(new)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
