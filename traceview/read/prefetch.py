"""Decode an xplane file's planes on a background thread while the caller is still starting.

A cold ``traceview.load`` spends its first fraction of a second importing polars on one core
while the other is idle. :func:`start` (called right after discovery, before polars is imported) maps the file
and runs ``plan(space)``'s ``work(plane, path)`` over the planes it names on a daemon thread (the caller passes
:func:`traceview.model.annotated_plane.prefetch_plan`, whose work imports no polars and spends most of
its time in C and numpy code that releases the GIL). A plan may name a plane several times,
each work doing a part of it (a list, its lines, say): the parts' lists are joined in plan
order; a part may carry a weight (``(plane, work, weight)``), the heaviest parts are started
first. :meth:`Prefetch.take` hands the mapped XSpace and the per-plane results over: while the
background thread decodes, it first does the caller's idle work (its imports), then works on
the calling thread through the parts the background thread has not started, so both cores
work, then waits for the rest.

Nothing changes in what is read: the same function runs on the same bytes, and a plane whose
work failed hands its exception over, for the reader to raise as it would have. A prefetch is
used only if the file's identity (size, mtime, ctime, inode, device) is unchanged at
:meth:`~Prefetch.take`; anything else (no C decoder, an unmappable or malformed file, a
changed file) makes it return None and the reader starts afresh. A prefetch never taken is
dropped with its object (its thread finishes on its own). Nothing here raises.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Callable


def _identity(path: str) -> tuple | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev)


class Prefetch:
    """One file's prefetch: the mapped space, the planes its plan names with their work, and
    per-plane results (what the work returned, or the exception it raised). Made by :func:`start`."""

    def __init__(self, path: str, ident: tuple, plan: Callable, idle: Callable | None = None):
        self.path, self.ident, self._plan, self.idle = path, ident, plan, idle
        self.space = None
        self.planes: list = []  # (plane, work) per part, in plan order
        self.order: list[int] = []  # the parts in the order they are started (heaviest first)
        self.results: list = []
        self.done: list[threading.Event] = []
        self.next = 0  # parts of self.order claimed
        self.failed = False
        self.ready = threading.Event()  # set once planes are listed (or the job failed)
        self.lock = threading.Lock()

    def matches(self, path: str | os.PathLike) -> bool:
        """Whether this prefetch is for ``path`` (the same file once links are resolved)."""
        return os.path.realpath(path) == os.path.realpath(self.path)

    def _decoded(self) -> bool:
        return all(ev.is_set() for ev in self.done)

    def _drain(self) -> None:
        """Work through unclaimed parts on the calling thread until none is left."""
        while True:
            with self.lock:
                if self.next >= len(self.order):
                    return
                i = self.order[self.next]
                self.next += 1
            plane, work = self.planes[i]
            try:
                self.results[i] = work(plane, self.path)
            except Exception as exc:  # handed over to the reader, which raises it
                self.results[i] = exc
            self.done[i].set()

    def _run(self) -> None:
        try:
            from traceview.read.xplane.wire import has_decoder, map_xspace

            space = map_xspace(Path(self.path)) if has_decoder() else None
            if space is None:
                self.failed = True
                return
            self.space = space
            parts = list(self._plan(space))
            self.planes = [(x[0], x[1]) for x in parts]
            weight = [x[2] if len(x) > 2 else 0 for x in parts]
            self.order = sorted(range(len(parts)), key=lambda i: -weight[i])  # stable: plan order among equals
            self.results = [None] * len(self.planes)
            self.done = [threading.Event() for _ in self.planes]
        except BaseException:  # noqa: BLE001 - a prefetch never fails the run
            self.failed = True
            return
        finally:
            self.ready.set()
        self._drain()

    def take(self):
        """``(space, results)`` (``results``: ``{id(plane): what its work returned or the
        exception to raise}`` for each plane of ``space.planes`` the plan named; a plane of several
        parts: their lists joined in plan order, or the first part's exception), or None when the
        prefetch failed, the file changed since it started, or it was taken already (the
        prefetch lets go of what it hands over). When parts are still being decoded, runs
        ``idle`` (given to :func:`start`; once, its exceptions ignored: work the caller needs
        anyway, done beside the background thread rather than after; an ``idle`` with a
        ``steps`` attribute, a callable returning an iterator, is stepped through instead,
        and left as soon as every part is decoded: its rest is the caller's to do later),
        then works through the parts not yet started on the calling thread, then waits for
        the others. Never raises
        but what ``idle`` raises that is not an ``Exception`` (``KeyboardInterrupt``)."""
        self.ready.wait()
        if self.failed or self.space is None or _identity(os.path.realpath(self.path)) != self.ident:
            return None
        idle, self.idle = self.idle, None
        if idle is not None and not self._decoded():
            try:  # the caller's own work while the background thread decodes
                steps = getattr(idle, "steps", None)
                if steps is None:
                    idle()
                else:
                    for _ in steps():  # step by step, until every part is decoded
                        if self._decoded():
                            break
            except Exception:  # noqa: BLE001 - it is the caller's to redo where it needs it
                pass
        self._drain()
        for ev in self.done:
            ev.wait()
        results: dict = {}
        parts: dict = {}
        for (p, _), r in zip(self.planes, self.results):
            parts[id(p)] = parts.get(id(p), 0) + 1
            if parts[id(p)] == 1:
                results[id(p)] = r
            elif not isinstance(results[id(p)], BaseException):  # an earlier part's exception stands
                results[id(p)] = r if isinstance(r, BaseException) else results[id(p)] + r
        out = self.space, results
        self.space, self.results, self.planes = None, [], []
        return out


def start(path: str | os.PathLike, plan: Callable, idle: Callable | None = None) -> Prefetch | None:
    """Begin running, on a daemon thread, each ``work(plane, path)`` of ``plan(space)`` (a
    list of ``(plane, work)``, ``space`` the xplane file ``path`` mapped in place); returns
    the :class:`Prefetch`, or None when the file cannot be stat'ed or no thread can be
    started. ``idle``: what the thread that takes the prefetch does while it waits for this
    one (:meth:`Prefetch.take`), e.g. the caller's imports. Never raises."""
    key = os.path.realpath(path)
    ident = _identity(key)
    if ident is None:
        return None
    job = Prefetch(str(path), ident, plan, idle)
    try:
        threading.Thread(target=job._run, name="traceview-prefetch", daemon=True).start()
    except RuntimeError:  # no thread can be started
        return None
    return job
