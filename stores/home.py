"""The project's home folder (stores, caches, converted models): ``PARALLELSEARCH_HOME``, else
``./.parallelsearch`` when it exists, else the user's data folder. The app's settings read the same."""

from __future__ import annotations

import os
from pathlib import Path


def default_home() -> Path:
    """The home when ``PARALLELSEARCH_HOME`` is not set."""
    local = Path.cwd() / ".parallelsearch"
    if local.is_dir():
        return local
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "parallelsearch"


def home_dir() -> Path:
    """``PARALLELSEARCH_HOME`` when set, else :func:`default_home`."""
    explicit = os.environ.get("PARALLELSEARCH_HOME")
    return Path(explicit).expanduser() if explicit else default_home()
