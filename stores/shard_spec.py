"""The store declaration syntax: a plain store name, or ``NAME=SHARD,SHARD,...`` for one corpus
split over several Chroma collections (docs/scaling.md). A shard is ``COLLECTION`` (where the
configuration says stores live), ``COLLECTION@HOST:PORT`` or ``COLLECTION@PATH`` (a path holds a
``/`` or starts with ``.`` or ``~``): ``wiki=wiki-0@10.0.0.1:8000,wiki-1@10.0.0.2:8000``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from parallelsearch.stores.errors import checked_name

#: Chroma's collection-name rule
STORE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{1,61}[A-Za-z0-9]$")


def validate_store_name(name: str) -> str:
    return checked_name(
        name,
        STORE_NAME,
        "store name {value!r} is invalid: use 3-63 characters of letters, digits, '.', '_' or '-', "
        "starting and ending with a letter or digit",
    )


@dataclass(frozen=True)
class ShardSpec:
    """One collection of a sharded store, and where it lives (neither host nor path: the default)."""

    collection: str
    host: str | None = None
    port: int | None = None
    path: Path | None = None

    @property
    def label(self) -> str:
        """How messages name the shard: ``wiki-1@127.0.0.1:8002``."""
        if self.host:
            return f"{self.collection}@{self.host}:{self.port or 8000}"
        if self.path is not None:
            return f"{self.collection}@{self.path}"
        return self.collection


@dataclass(frozen=True)
class StoreSpec:
    """A declared store: its name and, for a sharded one, its shards (empty: a plain store)."""

    name: str
    shards: tuple[ShardSpec, ...] = ()

    @property
    def sharded(self) -> bool:
        return bool(self.shards)


def _location(collection: str, where: str, entry: str) -> ShardSpec:
    if "/" in where or where.startswith((".", "~")):
        return ShardSpec(collection, path=Path(where).expanduser())
    host, sep, port = where.rpartition(":")
    if not sep:
        host, port = where, ""
    host = host.strip("[]")  # [::1]:8000
    if not host or (port and not port.isdigit()) or (port and not 1 <= int(port) <= 65535):
        raise ValueError(
            f"store {entry!r}: shard location {where!r} is neither HOST:PORT nor a folder "
            "(e.g. wiki-0@127.0.0.1:8000 or wiki-0@/data/chroma-0)"
        )
    return ShardSpec(collection, host=host, port=int(port) if port else None)


def parse_store(entry: str) -> StoreSpec:
    """``NAME`` or ``NAME=SHARD,SHARD,...`` as a :class:`StoreSpec`; a ValueError names the entry."""
    entry = entry.strip()
    name, sep, rest = entry.partition("=")
    name = name.strip()
    if not sep:
        return StoreSpec(validate_store_name(name))
    try:
        validate_store_name(name)
    except ValueError as e:
        raise ValueError(f"store {entry!r}: {e}") from None
    shards = []
    for part in (p.strip() for p in rest.split(",")):
        if not part:
            continue
        collection, at, where = part.partition("@")
        try:
            validate_store_name(collection.strip())
        except ValueError as e:
            raise ValueError(f"store {entry!r}: shard {part!r}: {e}") from None
        shards.append(
            _location(collection.strip(), where.strip(), entry) if at else ShardSpec(collection.strip())
        )
    if not shards:
        raise ValueError(
            f"store {entry!r} declares no shards: write NAME=SHARD,SHARD,... (e.g. wiki=wiki-0,wiki-1)"
        )
    labels = [s.label for s in shards]
    twice = sorted({x for x in labels if labels.count(x) > 1})
    if twice:
        raise ValueError(f"store {entry!r} names shard {', '.join(twice)} more than once")
    return StoreSpec(name, tuple(shards))


def group_store_parts(parts: list[str]) -> list[str]:
    """Comma-split store entries regrouped: a part without ``=`` that follows a ``NAME=...`` entry
    is one more shard of it (``PARALLELSEARCH_STORES=wiki=wiki-0@h:1,wiki-1@h:2``). So list plain
    stores before a sharded one in that form, or use the JSON list form."""
    out: list[str] = []
    for part in parts:
        if out and "=" in out[-1] and "=" not in part:
            out[-1] = f"{out[-1]},{part}"
        else:
            out.append(part)
    return out


def find_store(declared: list[str], name: str) -> StoreSpec:
    """The declaration of ``name`` among ``declared`` entries (a sharded store is named by its
    NAME alone once declared), else ``name`` parsed as an entry of its own."""
    spec = parse_store(name)
    if spec.sharded:
        return spec
    for entry in declared:
        if "=" in entry and (got := parse_store(entry)).name == spec.name:
            return got
    return spec
