"""OpenRLHF's own ``train_ppo_ray`` argument parser and checks, built on CPU without importing it.

``openrlhf.cli.train_ppo_ray`` imports Ray, vLLM and DeepSpeed at the top and builds its
parser inside ``if __name__ == "__main__":``; we run that block's statements from the source
with ``train`` replaced, and evaluate ``train()``'s assertions (GPU placement arithmetic) on
the parsed arguments, so a command is checked by OpenRLHF's real code without a GPU.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
from pathlib import Path
from typing import Any

from parallelsearch.stores.errors import UnavailableError


def _source() -> tuple[Path, ast.Module]:
    spec = importlib.util.find_spec("openrlhf")
    if spec is None or not spec.submodule_search_locations:
        raise UnavailableError(
            "openrlhf is not installed: pip install --no-deps openrlhf==0.11.2 (see the 'train' extra)"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / "cli" / "train_ppo_ray.py"
    if not path.is_file():
        raise UnavailableError(f"{path} is missing: is this the pinned openrlhf 0.11.2?")
    return path, ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def _main_parts(tree: ast.Module) -> tuple[list[ast.stmt], list[ast.stmt]]:
    """The ``__main__`` block's statements before and after ``parse_args``."""
    body = next(
        (
            node.body
            for node in tree.body
            if isinstance(node, ast.If)
            and isinstance(node.test, ast.Compare)
            and isinstance(node.test.left, ast.Name)
            and node.test.left.id == "__name__"
        ),
        None,
    )
    if body is None:
        raise UnavailableError(
            "train_ppo_ray.py has no __main__ block; the OpenRLHF version is not the pinned one"
        )
    for i, stmt in enumerate(body):
        if (
            isinstance(stmt, ast.Assign)
            and isinstance(stmt.value, ast.Call)
            and isinstance(stmt.value.func, ast.Attribute)
            and stmt.value.func.attr == "parse_args"
        ):
            return body[:i], body[i + 1 :]
    raise UnavailableError("train_ppo_ray.py's main block never calls parse_args")


def _run(stmts: list[ast.stmt], namespace: dict[str, Any], filename: str) -> None:
    code = compile(ast.Module(body=stmts, type_ignores=[]), filename, "exec")
    exec(code, namespace)  # noqa: S102 - OpenRLHF's own parser code, from the installed package


class _ParserError(ValueError):
    pass


class _RaisingParser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse would print and exit
        raise _ParserError(message)


def build_parser() -> argparse.ArgumentParser:
    """OpenRLHF 0.11.2's exact ``train_ppo_ray`` parser (errors raise ValueError instead of exiting)."""
    path, tree = _source()
    before, _ = _main_parts(tree)
    import datetime as _dt
    import os as _os
    import types

    shim = types.SimpleNamespace(**{**vars(argparse), "ArgumentParser": _RaisingParser})
    ns: dict[str, Any] = {
        "__name__": "openrlhf_cli_check",
        "argparse": shim,
        "os": _os,
        "datetime": _dt.datetime,
    }
    _run(before, ns, str(path))
    return ns["parser"]


def check_command(argv: list[str]) -> Any:
    """Parse ``argv`` (the flags after ``-m openrlhf.cli.train_ppo_ray``) and run OpenRLHF's checks.

    Returns the hierarchical args OpenRLHF would train with; raises ValueError naming the
    problem (unknown flag, bad value, or a failed OpenRLHF assertion).
    """
    path, tree = _source()
    _, after = _main_parts(tree)
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except _ParserError as e:
        raise ValueError(f"OpenRLHF's parser rejects the command: {e}") from e
    captured: dict[str, Any] = {}
    ns: dict[str, Any] = {
        "__name__": "openrlhf_cli_check",
        "args": args,
        "parser": parser,
        "train": lambda a: captured.setdefault("args", a),
    }
    try:
        _run(after, ns, str(path))
    except AssertionError as e:
        raise ValueError(f"OpenRLHF's argument checks fail: {e}") from e
    checked = captured.get("args", ns["args"])
    check_train_asserts(checked)
    return checked


def _train_asserts(tree: ast.Module) -> list[tuple[list[ast.expr], ast.Assert]]:
    """Every ``assert`` in ``train()``, with the ``if`` tests (negated in ``else``) that guard it."""
    fn = next(
        (n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "train"),
        None,
    )
    if fn is None:
        raise UnavailableError("train_ppo_ray.py has no train(); the OpenRLHF version is not the pinned one")
    found: list[tuple[list[ast.expr], ast.Assert]] = []

    def walk(stmts: list[ast.stmt], guards: list[ast.expr]) -> None:
        for s in stmts:
            if isinstance(s, ast.Assert):
                found.append((guards, s))
            elif isinstance(s, ast.If):
                walk(s.body, [*guards, s.test])
                walk(s.orelse, [*guards, ast.UnaryOp(op=ast.Not(), operand=s.test)])
            elif isinstance(s, ast.For | ast.While | ast.With | ast.Try):
                walk(getattr(s, "body", []), guards)

    walk(fn.body, [])
    return found


def check_train_asserts(args: Any) -> None:
    """Run the assertions OpenRLHF makes inside ``train()`` (the GPU colocation arithmetic) on ``args``.

    Those checks sit after ``ray.init`` in OpenRLHF, so they would first fail on the cluster.
    An assertion whose guard or test needs anything but ``args`` is skipped (it cannot be
    decided before the run). Raises ValueError with OpenRLHF's own message.
    """
    path, tree = _source()

    def ev(expr: ast.expr) -> Any:
        code = compile(ast.Expression(body=ast.fix_missing_locations(expr)), str(path), "eval")
        return eval(code, {"args": args})  # noqa: S307 - OpenRLHF's own expressions, from the installed package

    for guards, node in _train_asserts(tree):
        try:
            if not all(ev(g) for g in guards) or ev(node.test):
                continue
            message = ev(node.msg) if node.msg is not None else ast.unparse(node.test)
        except (NameError, AttributeError):
            continue
        raise ValueError(f"OpenRLHF's train() would fail on the cluster: {message}")
