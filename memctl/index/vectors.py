"""The unit vectors, .index/vectors.npy: a float32 .npy file, one row a unit.

Search memory-maps the file. An update that adds a few units appends their
rows in place and rewrites the header's row count, instead of writing the
whole file anew (77 MB at 50k units); numpy leaves room in every .npy header
for the row count to grow, so the header keeps its length. Readers that
mapped the file before see their own rows, which appending leaves alone.
A compaction writes a new file that replaces the old one.
"""

from __future__ import annotations

import io
import os
from pathlib import Path

import numpy as np

from memctl.store.store import open_file

_FORMAT = np.lib.format


def _header(rows: int, dimension: int) -> bytes:
    out = io.BytesIO()
    _FORMAT.write_array_header_1_0(out, {"descr": "<f4", "fortran_order": False, "shape": (rows, dimension)})
    return out.getvalue()


def shape(path: Path) -> tuple[int, int]:
    """(rows, dimension) from the header alone."""
    rows, dimension, _ = _layout(path)
    return rows, dimension


def _layout(path: Path) -> tuple[int, int, int]:
    """(rows, dimension, where the data starts)."""
    with open(path, "rb") as fh:
        version = _FORMAT.read_magic(fh)
        if version != (1, 0):
            raise ValueError(f"{path}: .npy version {version}, expected 1.0")
        dims, fortran_order, dtype = _FORMAT.read_array_header_1_0(fh)
        offset = fh.tell()
    if len(dims) != 2 or fortran_order or dtype != np.dtype("<f4"):
        raise ValueError(f"{path}: not a float32 matrix")
    return dims[0], dims[1], offset


def open_readonly(path: Path) -> np.ndarray:
    return np.load(path, mmap_mode="r")


def save_partial(path: Path, array: np.ndarray) -> Path:
    """Write the whole matrix to a new file beside `path`, for the caller to put in place."""
    partial = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(partial, "wb") as fh:
        fh.write(_header(*array.shape))
        fh.write(np.ascontiguousarray(array, dtype="<f4").tobytes())
        fh.flush()
        os.fsync(fh.fileno())
    os.chmod(partial, 0o600)
    return partial


def append(path: Path, rows: np.ndarray) -> None:
    """Add rows at the end in place: data first, then the header that counts them.

    An append cut short leaves bytes past the counted rows; the next append
    writes over them.
    """
    count, dimension, offset = _layout(path)
    if rows.shape[1] != dimension:
        raise ValueError(f"{path}: rows of {rows.shape[1]} dimensions, the file has {dimension}")
    header = _header(count + len(rows), dimension)
    if len(header) != offset:  # cannot happen for files written here: numpy leaves room for 21 digits
        raise ValueError(f"{path}: no room in the header for {count + len(rows)} rows")
    fd = open_file(path, os.O_WRONLY)
    try:
        os.pwrite(fd, np.ascontiguousarray(rows, dtype="<f4").tobytes(), offset + count * dimension * 4)
        os.fsync(fd)
        os.pwrite(fd, header, 0)
        os.fsync(fd)
    finally:
        os.close(fd)


def clear(path: Path, rows: list[int]) -> None:
    """Zero rows no unit names any more, so that vector search does not offer them (done after
    the table stops naming them; a search still reading the table before sees a cosine of 0)."""
    if not rows:
        return
    count, dimension, offset = _layout(path)
    zero = bytes(dimension * 4)
    fd = open_file(path, os.O_WRONLY)
    try:
        for row in sorted(rows):
            if row < count:
                os.pwrite(fd, zero, offset + row * dimension * 4)
        os.fsync(fd)
    finally:
        os.close(fd)
