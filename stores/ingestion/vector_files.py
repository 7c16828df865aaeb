"""Precomputed passage vectors read in row ranges, never whole: ``.npy``, ``.npz``, FAISS flat indexes.

A published index (wiki-18's e5 FAISS index is 64 GB) must not be loaded into memory to be
copied into a store: each reader hands out rows ``[start, stop)`` as float32, from a memory map
(``.npy``), a stream after the member's ``.npy`` header (``.npz``), or ``reconstruct_n`` on a
memory-mapped index (:func:`mapped_read_flags`) (FAISS, flat indexes only, the optional ``parallelsearch[faiss]`` extra).
Every error names the file.
"""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from parallelsearch.stores.errors import BadInputError, UnavailableError

FAISS_SUFFIXES = (".faiss", ".index", ".idx")


class VectorFile(Protocol):
    path: Path
    count: int
    dimension: int

    def rows(self, start: int, stop: int) -> np.ndarray: ...

    def close(self) -> None: ...


def _check_shape(path: Path, shape: tuple[int, ...], dtype: np.dtype) -> tuple[int, int]:
    if len(shape) != 2:
        raise BadInputError(
            str(path), None, f"vectors must be a 2-d array (rows x dimension), got shape {shape}"
        )
    if dtype.kind not in "fi":
        raise BadInputError(str(path), None, f"vectors must be numbers, got dtype {dtype}")
    return int(shape[0]), int(shape[1])


class NpyVectors:
    """A ``.npy`` file as a read-only memory map."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self._arr = np.load(path, mmap_mode="r", allow_pickle=False)
        except (ValueError, OSError) as e:
            raise BadInputError(str(path), None, f"not a readable .npy array ({e})") from e
        self.count, self.dimension = _check_shape(path, self._arr.shape, self._arr.dtype)

    def rows(self, start: int, stop: int) -> np.ndarray:
        return np.ascontiguousarray(self._arr[start:stop], dtype=np.float32)

    def close(self) -> None:
        self._arr = None


class NpzVectors:
    """One array of a ``.npz`` archive, read as a stream (bounded memory, compressed or not)."""

    def __init__(self, path: Path, key: str | None = None) -> None:
        self.path = path
        try:
            self._zip = zipfile.ZipFile(path)
        except (zipfile.BadZipFile, OSError) as e:
            raise BadInputError(str(path), None, f"not a readable .npz archive ({e})") from e
        names = [n[:-4] for n in self._zip.namelist() if n.endswith(".npy")]
        if key is None:
            if len(names) != 1:
                raise BadInputError(
                    str(path),
                    None,
                    f"holds {len(names)} arrays ({', '.join(names)}); name one with --vectors-key",
                )
            key = names[0]
        if key not in names:
            raise BadInputError(str(path), None, f"holds no array {key!r} (it holds {', '.join(names)})")
        self._stream = self._zip.open(key + ".npy")
        try:
            version = np.lib.format.read_magic(self._stream)
            read_header = (
                np.lib.format.read_array_header_1_0
                if version == (1, 0)
                else np.lib.format.read_array_header_2_0
            )
            shape, fortran, dtype = read_header(self._stream)
        except ValueError as e:
            raise BadInputError(str(path), None, f"array {key!r} has no valid .npy header ({e})") from e
        if fortran and len(shape) == 2 and shape[0] > 1 and shape[1] > 1:
            raise BadInputError(
                str(path), None, f"array {key!r} is in Fortran order; save it C-ordered to stream it by rows"
            )
        self.count, self.dimension = _check_shape(path, tuple(shape), np.dtype(dtype))
        self._dtype = np.dtype(dtype)
        self._data_start = self._stream.tell()
        self._row_bytes = self.dimension * self._dtype.itemsize
        self._next = 0

    def rows(self, start: int, stop: int) -> np.ndarray:
        stop = min(stop, self.count)
        if start != self._next:  # zip streams seek forward cheaply, backward by re-reading
            self._stream.seek(self._data_start + start * self._row_bytes)
        want = (stop - start) * self._row_bytes
        buf = self._stream.read(want)
        if len(buf) != want:
            raise BadInputError(
                str(self.path), None, f"array ends early at row {start + len(buf) // self._row_bytes}"
            )
        self._next = stop
        arr = np.frombuffer(buf, dtype=self._dtype).reshape(stop - start, self.dimension)
        return np.ascontiguousarray(arr, dtype=np.float32)

    def close(self) -> None:
        self._stream.close()
        self._zip.close()


def import_faiss() -> Any:
    try:
        import faiss
    except ImportError as e:
        raise UnavailableError(
            "reading a FAISS index needs faiss (pip install 'parallelsearch[faiss]' or faiss-cpu)"
        ) from e
    return faiss


def mapped_read_flags() -> int:
    """``read_index`` flags that map a flat index's vectors instead of reading them: the plain
    ``IO_FLAG_MMAP`` maps only inverted lists (a 300 MB flat index still cost 294 MB of RSS in FAISS
    1.15, against 1 MB with ``IO_FLAG_MMAP_IFC``, which FAISS before 1.10 lacks)."""
    faiss = import_faiss()
    return getattr(faiss, "IO_FLAG_MMAP_IFC", faiss.IO_FLAG_MMAP) | faiss.IO_FLAG_READ_ONLY


class FaissFlatVectors:
    """The vectors of a FAISS flat index, memory-mapped and reconstructed a chunk at a time."""

    def __init__(self, path: Path) -> None:
        faiss = import_faiss()
        self.path = path
        try:
            index = faiss.read_index(str(path), mapped_read_flags())
        except RuntimeError as e:
            raise BadInputError(
                str(path), None, f"not a readable FAISS index ({str(e).splitlines()[0]})"
            ) from e
        self._owner = index  # downcast_index returns a view; the C++ object belongs to this one
        index = faiss.downcast_index(index)
        kind = type(index).__name__
        if not kind.startswith("IndexFlat"):
            raise BadInputError(
                str(path),
                None,
                f"is a {kind}, not a flat index: its vectors are not stored exactly; "
                "export them with reconstruct_n to a .npy file",
            )
        self._index = index
        self.count, self.dimension = int(index.ntotal), int(index.d)

    def rows(self, start: int, stop: int) -> np.ndarray:
        stop = min(stop, self.count)
        return np.ascontiguousarray(self._index.reconstruct_n(start, stop - start), dtype=np.float32)

    def close(self) -> None:
        self._index = self._owner = None


def open_vectors(path: str | Path, key: str | None = None) -> VectorFile:
    """The reader for ``path`` by its suffix: ``.npy``, ``.npz``, or a FAISS index (``.faiss``/``.index``)."""
    path = Path(path)
    if not path.is_file():
        raise BadInputError(str(path), None, "no such file")
    suffix = path.suffix.lower()
    if suffix == ".npy":
        return NpyVectors(path)
    if suffix == ".npz":
        return NpzVectors(path, key)
    if suffix in FAISS_SUFFIXES:
        return FaissFlatVectors(path)
    raise BadInputError(
        str(path),
        None,
        f"unknown vector file type {suffix!r}; use .npy, .npz or a FAISS index ({', '.join(FAISS_SUFFIXES)})",
    )
