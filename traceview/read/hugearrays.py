"""Large numpy arrays in memory the kernel can back with transparent huge pages.

Reading a multi-million-event trace allocates a few hundred MB of fresh arrays. On Linux each
4 KiB page of fresh memory costs a page fault on first write, which for such arrays costs far
more than filling them. glibc serves them from its heap or from plain ``mmap``, where numpy's
own ``MADV_HUGEPAGE`` hint does not take effect; an anonymous mapping of our own with
``madvise(MADV_HUGEPAGE)`` faults in 2 MiB at a time (figures in ``benchmarks/RESULTS.md``).

:func:`empty` returns such an array for :data:`MIN_BYTES` and more on Linux (the memory is
unmapped when the array and every view of it are gone), a plain ``np.empty`` otherwise.
Values, dtypes and shapes are exactly those of ``np.empty``; only where the memory comes from
differs. Raises what ``np.empty`` raises (``MemoryError`` when the mapping fails).
"""

from __future__ import annotations

import mmap
import sys

import numpy as np

#: arrays of at least this many bytes get their own huge-page mapping (numpy's own
#: huge-page threshold is 4 MiB too)
MIN_BYTES = 4 << 20

_ENABLED = sys.platform.startswith("linux") and hasattr(mmap, "MADV_HUGEPAGE") and hasattr(mmap, "MAP_ANONYMOUS")


def empty(n: int, dtype) -> np.ndarray:
    """A 1-d array of ``n`` elements of ``dtype``, uninitialized, as ``np.empty(n, dtype)``."""
    dt = np.dtype(dtype)
    nbytes = int(n) * dt.itemsize
    if not _ENABLED or nbytes < MIN_BYTES:
        return np.empty(n, dtype=dt)
    try:
        m = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    except OSError:
        raise MemoryError(f"cannot map {nbytes} bytes") from None
    try:
        m.madvise(mmap.MADV_HUGEPAGE)
    except OSError:  # a kernel without THP: ordinary pages
        pass
    return np.frombuffer(m, dtype=dt, count=int(n))


def full(n: int, value, dtype) -> np.ndarray:
    """As ``np.full(n, value, dtype)``, in :func:`empty`'s memory."""
    out = empty(n, dtype)
    out.fill(value)
    return out


def take(a: np.ndarray, order: np.ndarray) -> np.ndarray:
    """``a[order]`` for a 1-d ``a`` and an index array whose values are all valid indices
    of ``a`` (a permutation, a lookup), in :func:`empty`'s memory. (``mode="clip"``: with
    the default ``"raise"`` numpy gathers into a temporary buffer of fresh pages first.)"""
    out = empty(len(order), a.dtype)
    np.take(a, order, out=out, mode="clip")
    return out
