"""What a read-back of every vector of a store found (``stores --check``, ``index --verify``): the
same report for every store kind, so the CLI prints and exits on it without knowing the kind."""

from __future__ import annotations

from dataclasses import dataclass, field

from parallelsearch.stores.store_files import repair_hint
from parallelsearch.stores.vector_checksum import rot_message


@dataclass
class StoreCheck:
    """What a store's ``verify`` found: ids whose vector is missing or cannot be read."""

    store: str
    count: int
    checked: int = 0
    missing: list[str] = field(default_factory=list)
    unreadable: list[str] = field(default_factory=list)
    first_error: str | None = None
    #: why Chroma could not open the store here (its files were checked, its vectors not read)
    read_only: str | None = None
    #: groups of ids holding the same text (or one text beginning another of the same title)
    duplicates: list[list[str]] = field(default_factory=list)
    #: ids whose vector differs from the checksum recorded at ingestion (overwritten: bit rot)
    rotted: list[str] = field(default_factory=list)
    #: vectors that had a checksum to compare with (0 with vectors read: made before checksums)
    checksummed: int = 0
    #: the damage is in chroma.sqlite3, shared by every store of the folder: repair in a new folder
    new_folder: bool = False
    #: the kind records a checksum per vector (Chroma does; a FAISS flat index has nowhere to keep one)
    checksums_apply: bool = True

    @property
    def bad(self) -> list[str]:
        return self.missing + self.unreadable + self.rotted

    @property
    def ok(self) -> bool:
        read = self.read_only is not None or self.checked == self.count
        return self.count >= 0 and read and not self.bad and self.first_error is None

    def summary(self) -> str:
        if self.ok and self.read_only:
            return (
                f"store {self.store}: READ-ONLY ({self.read_only}): its files add up ({self.count} passages); "
                "its vectors were not read back (Chroma cannot open a store it may not write)"
            )
        if self.ok:
            return f"store {self.store}: all {self.checked} vectors read back" + self._sums() + self._twice()
        if self.count < 0 or self.checked < 0:
            return f"store {self.store}: CORRUPT: it cannot be read ({self.first_error})"
        line = (
            f"store {self.store}: CORRUPT: {len(self.unreadable)} unreadable and {len(self.missing)} missing "
            f"vector(s) of {self.count} passages ({self.checked} checked)"
        )
        if self.rotted:
            line += "; " + rot_message(self.store, self.rotted, self.checksummed)
        return line + (f"; first error: {self.first_error}" if self.first_error else "") + self._twice()

    def _sums(self) -> str:
        if not self.checksums_apply:
            return ""
        if self.checksummed:
            return f", all {self.checksummed} match their checksums"
        return f"; vector checksums are absent ({CHECKSUMS_ABSENT})" if self.checked else ""

    def _twice(self) -> str:
        if not self.duplicates:
            return ""
        n = sum(len(g) - 1 for g in self.duplicates)
        shown = ", ".join("=".join(g) for g in self.duplicates[:3])
        return (
            f"; {n} passage(s) stored twice (the same text under other ids, e.g. {shown}): search can return "
            "their text twice; index the files into a new store to drop them"
        )

    def repair(self) -> str:
        """The repair that holds: Chroma 1.x cannot repair a collection in place, and a copy in the same
        process lost passages from search, so a fresh store is built from the source files."""
        return repair_hint(self.store, new_folder=self.new_folder)


#: what a store without vector checksums is told (opening it works; its vectors are not compared)
CHECKSUMS_ABSENT = (
    "the store was indexed before they were recorded, so overwritten vectors cannot be found; "
    "index its files into a new store to record them"
)
