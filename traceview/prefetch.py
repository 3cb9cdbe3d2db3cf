"""Decode an xplane file's TPU planes on a background thread while the CLI is still starting.

A cold ``traceview analyze`` spends its first ~0.3 s importing numpy and polars on one core
while the other is idle. :func:`start` (called by the CLI right after discovery) maps the file
and decodes its TPU planes on a daemon thread with :func:`traceview.tpu_plane.plane_arrays`,
which imports no polars and spends most of its time in C and numpy code that releases the
GIL. :func:`take` (called by :func:`traceview.xplane.read_xplane`) hands the mapped XSpace and
the per-plane arrays over: it first decodes on the calling thread the planes the background
thread has not started, so both cores work once the imports are done, then waits for the rest.

Nothing changes in what is read: the same functions run on the same bytes, and a plane whose
decoding failed hands its exception over, which :func:`~traceview.xplane.read_xplane` raises
as it would have. A prefetch is used only if the file's identity (size, mtime, ctime, inode,
device) is unchanged at :func:`take`; anything else (no C accelerator, an unmappable or
malformed file, a changed file) makes :func:`take` return None and the reader starts afresh.
The library never starts a prefetch by itself; :func:`start` and :func:`take` never raise.
"""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

_jobs: dict[str, "_Job"] = {}
_lock = threading.Lock()


def _identity(path: str) -> tuple | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev)


class _Job:
    """One file's prefetch: the mapped space, its TPU planes and per-plane results (a
    :class:`~traceview.tpu_plane.PlaneArrays` or the exception its decoding raised)."""

    def __init__(self, path: str, ident: tuple):
        self.path, self.ident = path, ident
        self.space = None
        self.planes: list = []
        self.results: list = []
        self.done: list[threading.Event] = []
        self.next = 0
        self.failed = False
        self.ready = threading.Event()  # set once planes are listed (or the job failed)
        self.lock = threading.Lock()

    def work(self) -> None:
        """Decode unclaimed planes on the calling thread until none is left."""
        from .tpu_plane import plane_arrays

        while True:
            with self.lock:
                i = self.next
                if i >= len(self.planes):
                    return
                self.next += 1
            try:
                self.results[i] = plane_arrays(self.planes[i], self.path)
            except Exception as exc:  # handed over to the reader, which raises it
                self.results[i] = exc
            self.done[i].set()


def _run(job: _Job) -> None:
    try:
        from .xline import _fast, map_xspace

        space = map_xspace(Path(job.path)) if _fast is not None else None
        if space is None:
            job.failed = True
            return
        job.space = space
        job.planes = [p for p in space.planes if p.name.startswith("/device:TPU:")]
        job.results = [None] * len(job.planes)
        job.done = [threading.Event() for _ in job.planes]
    except BaseException:  # noqa: BLE001 - a prefetch never fails the run
        job.failed = True
        return
    finally:
        job.ready.set()
    job.work()


#: GIL switch interval while a prefetch runs beside the imports, s (Python's default is 5 ms)
SWITCH_INTERVAL_S = 0.0005
_saved_interval: list[float] = []


def _shorten_switch_interval() -> None:
    """The prefetch thread takes the GIL for short Python steps between long C calls; with
    the default 5 ms interval each step waits up to 5 ms for the importing thread to let go
    (on the 3M-event file one plane took 0.18 s beside the imports, 0.11 s alone)."""
    if not _saved_interval:
        _saved_interval.append(sys.getswitchinterval())
        sys.setswitchinterval(SWITCH_INTERVAL_S)


def _restore_switch_interval() -> None:
    if _saved_interval:
        sys.setswitchinterval(_saved_interval.pop())


def start(path: str | os.PathLike) -> bool:
    """Begin decoding the TPU planes of the xplane file ``path`` on a daemon thread; returns
    whether a prefetch was started (False when the file cannot be stat'ed or one is already
    running for it). Never raises."""
    key = os.path.realpath(path)
    ident = _identity(key)
    if ident is None:
        return False
    with _lock:
        if key in _jobs:
            return False
        job = _jobs[key] = _Job(str(path), ident)
    try:
        threading.Thread(target=_run, args=(job,), name="traceview-prefetch", daemon=True).start()
        _shorten_switch_interval()
    except RuntimeError:  # no thread can be started
        with _lock:
            _jobs.pop(key, None)
        return False
    return True


def take(path: str | os.PathLike):
    """The prefetched ``(space, results)`` of ``path`` (``results``: one entry per TPU plane
    of ``space``, in plane order, each a PlaneArrays or an exception to raise), or None when
    no prefetch was started for it, it failed, or the file changed since. The prefetch is
    consumed: a second call returns None. Decodes the planes not yet started on the calling
    thread, then waits for the others. Never raises."""
    key = os.path.realpath(path)
    with _lock:
        job = _jobs.pop(key, None)
    if job is None:
        return None
    job.ready.wait()
    if job.failed or _identity(key) != job.ident:
        _restore_switch_interval()
        return None
    job.work()
    for ev in job.done:
        ev.wait()
    _restore_switch_interval()
    return job.space, job.results


def discard() -> None:
    """Forget every prefetch not taken (a run that stopped before reading); their threads
    finish on their own and their arrays are freed."""
    with _lock:
        _jobs.clear()
    _restore_switch_interval()


def pending() -> int:
    """Number of prefetches started and not yet taken (for tests)."""
    with _lock:
        return len(_jobs)
