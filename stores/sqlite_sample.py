"""A sampled read of the SQLite tables a store is searched through, before Chroma opens it.

Counting passages reads only an index of ``embeddings``: pages of the table itself, of
``embedding_metadata`` (titles and texts) or of the log could be overwritten and the store
still opened, then every search failed ("database disk image is malformed"). So rows spread
over each table's whole key range are read, every column, and each sampled passage is also
looked up through the indexes Chroma uses (its id, its metadata). A few dozen B-tree descents
per table: milliseconds at any size, and certain to meet damage that covers a table, likely
to meet damage of a share of it. ``stores --check`` reads every page (:func:`full_check`).
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field

#: rows read per table, spread evenly over its key range (both ends included)
SAMPLE_ROWS = 32


@dataclass
class TableSample:
    """What the sample found: damage per table, and ids of this store's passages it read (a sample
    of passages whose vectors the open check reads back through Chroma)."""

    problems: list[str] = field(default_factory=list)
    passage_ids: list[str] = field(default_factory=list)


def _spread(low: int, high: int, n: int) -> list[int]:
    """``n`` keys evenly over ``low..high`` (fewer when the range is shorter)."""
    if high <= low:
        return [low]
    step = (high - low) / (n - 1)
    return sorted({low + round(i * step) for i in range(n)})


def _sample_table(conn: sqlite3.Connection, table: str, key: str, columns: str) -> list[tuple]:
    """The first row at or after each of :data:`SAMPLE_ROWS` keys spread over ``table``'s range, in
    one statement (one descent of the table's B-tree each)."""
    (low, high) = conn.execute(f"SELECT min({key}), max({key}) FROM {table}").fetchone()  # noqa: S608
    if low is None:
        return []
    starts = _spread(int(low), int(high), SAMPLE_ROWS)
    one = f"SELECT * FROM (SELECT {columns} FROM {table} WHERE {key} >= ? ORDER BY {key} LIMIT 1)"  # noqa: S608
    return conn.execute(" UNION ALL ".join([one] * len(starts)), starts).fetchall()


def _passages(conn: sqlite3.Connection) -> list[tuple]:
    """Sampled passages, each found again by (segment, id) as Chroma finds it: through the
    table's index, which is pages of its own."""
    rows = _sample_table(conn, "embeddings", "id", "id, segment_id, embedding_id, seq_id, created_at")
    if not rows:
        return rows
    one = "SELECT * FROM (SELECT id FROM embeddings WHERE segment_id = ? AND embedding_id = ?)"
    args = [value for _pk, segment, embedding_id, *_ in rows for value in (segment, embedding_id)]
    found = [r[0] for r in conn.execute(" UNION ALL ".join([one] * len(rows)), args)]
    if found != [r[0] for r in rows]:
        raise sqlite3.DatabaseError("sampled passages are not where the table's index says")
    return rows


def _metadata(conn: sqlite3.Connection, passages: list[tuple]) -> None:
    """Sampled metadata rows, and the sampled passages' metadata through its index."""
    _sample_table(
        conn, "embedding_metadata", "rowid", "id, key, string_value, int_value, float_value, bool_value"
    )
    if passages:
        marks = ", ".join("?" * len(passages))
        conn.execute(
            "SELECT key, string_value, int_value, float_value, bool_value FROM embedding_metadata "
            f"WHERE id IN ({marks})",  # noqa: S608
            [r[0] for r in passages],
        ).fetchall()


def sample_tables(conn: sqlite3.Connection, metadata_segment: str, collection: str) -> TableSample:
    """Read :data:`SAMPLE_ROWS` rows of each table the store is searched through (see the module
    docstring) and the collection's own metadata; a table SQLite cannot read is a problem naming it."""
    out = TableSample()
    passages: list[tuple] = []
    steps = {
        "embeddings": lambda: passages.extend(_passages(conn)),
        "embedding_metadata": lambda: _metadata(conn, passages),
        "embeddings_queue": lambda: _sample_table(
            conn, "embeddings_queue", "seq_id", "seq_id, operation, topic, id, vector, encoding, metadata"
        ),
        "collection_metadata": lambda: conn.execute(
            "SELECT * FROM collection_metadata WHERE collection_id = ?", (collection,)
        ).fetchall(),
    }
    for table, step in steps.items():
        try:
            step()
        except sqlite3.DatabaseError as e:
            out.problems.append(f"its table {table} cannot be read ({e})")
    out.passage_ids = [r[2] for r in passages if r[1] == metadata_segment]
    return out


def full_check(conn: sqlite3.Connection) -> list[str]:
    """SQLite's own check of every page of the file (``PRAGMA quick_check``): what a sample can miss."""
    try:
        rows = [r[0] for r in conn.execute("PRAGMA quick_check(5)")]
    except sqlite3.DatabaseError as e:
        return [f"SQLite's check of every page fails ({e})"]
    if rows == ["ok"]:
        return []
    return [f"SQLite's check of every page finds: {'; '.join(rows)}"]
