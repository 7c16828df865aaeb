"""A gateway-mode run's ``agent.factory`` before GPU time: its module is found here and shipped
in the job folder (every Ray actor runs in its own copy of the folder, where a module left in the
directory ``train`` ran in does not exist), or it comes from an installed distribution every
node must have; and the factory returns an agent, not None or a chat model."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import sys
from pathlib import Path
from typing import Any


def _module_origin(top: str) -> Path | None:
    """Where Python would import the top-level module ``top`` from (the working directory first,
    as :func:`~parallelsearch.rl.gateway.factory.load_factory` imports it), or None."""
    added = os.getcwd() not in sys.path and "" not in sys.path
    if added:
        sys.path.insert(0, os.getcwd())
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        spec = None
    finally:
        if added:
            sys.path.remove(os.getcwd())
    if spec is None or not spec.origin or spec.origin in ("built-in", "frozen"):
        return None
    return Path(spec.origin)


def factory_files(spec: str) -> tuple[dict[str, Path], str]:
    """The files the job folder ships for ``agent.factory = spec`` (name in the folder -> source) and
    a line saying where its module comes from. A module of an installed distribution ships nothing
    (every node installs it); a module or package found as files is copied whole; one that cannot
    be found is a ValueError naming the setting and the fix."""
    module = spec.split(":", 1)[0]
    top = module.split(".", 1)[0]
    dists = importlib.metadata.packages_distributions().get(top)
    if dists:
        return (
            {},
            f"agent.factory {spec}: from the installed distribution {dists[0]} (install it on every node)",
        )
    origin = _module_origin(top)
    if origin is None:
        raise ValueError(
            f"agent.factory {spec!r}: module {top!r} is not found from {os.getcwd()} or PYTHONPATH, so the job "
            "folder cannot ship it and every actor would fail to import it: run train from the folder that "
            f"holds {top}.py, or install it as a package on every node"
        )
    if origin.name != "__init__.py":
        return {
            origin.name: origin
        }, f"agent.factory {spec}: {origin} ships in the job folder as {origin.name}"
    root = origin.parent
    files = {
        (Path(top) / p.relative_to(root)).as_posix(): p
        for p in sorted(root.rglob("*.py"))
        if "__pycache__" not in p.parts
    }
    return (
        files,
        f"agent.factory {spec}: package {root} ({len(files)} files) ships in the job folder as {top}/",
    )


def _no_search(query: str) -> list[Any]:
    raise RuntimeError(f"the factory check ran a search ({query!r}): building an agent searches nothing")


def check_factory(agent_cfg: Any) -> str:
    """``agent.factory`` (gateway mode) is found, ships, and returns an agent when called as the
    executor calls it (the gateway's chat model, a searcher); a line saying where it comes from."""
    from parallelsearch.agents.searchers.adapters import FunctionSearcher
    from parallelsearch.rl.gateway.factory import gateway_agent
    from parallelsearch.rl.gateway.transport import gateway_chat_model

    _, line = factory_files(agent_cfg.factory)
    agent = gateway_agent(agent_cfg, gateway_chat_model(), FunctionSearcher(_no_search))
    return f"{line}; it returns a {type(agent).__name__}"
