"""Read the files of a run in parallel: local processes or a Dask cluster.

A multi-host run has one trace file per host; each is read on its own (one process per
host locally, bounded by the cores) and :func:`traceview.load` merges the results into one
table (the ``host`` column tells them apart). The per-file work is
:func:`read_task` (a plain, picklable function of a :class:`ReadTask`), submitted to any
``concurrent.futures.Executor``-compatible object:

* default: the calling process. Local worker processes are opt-in
  (:func:`set_local_workers`, CLI ``--workers N``): a ``ProcessPoolExecutor`` in the
  ``spawn`` context (polars' threads do not survive a ``fork``; ``spawn`` re-imports the
  caller's main module, which a script must guard with ``if __name__ == "__main__":``).
  They do not pay off on a 2-core machine: one process already reads a file's TPU planes
  on threads (the C decoder and numpy release the GIL), and a spawned worker pays ~0.5 s of
  start-up and imports before it reads. Measured (analyze, 2026-11-29, with the
  dictionary-encoded op table, whose 36 bytes per event travel back cheaply): two hosts of
  the 3M-event TPU xplane, 4.8 s in one process against 5.9 s with two workers. Before the
  op table was encoded (16 string columns per event) it was 4 s against 14 s;
* ``scheduler="tcp://host:8786"`` (CLI ``--scheduler ADDRESS``): the workers of an existing
  Dask distributed cluster, through ``distributed.Client(address).get_executor()``
  (``pip install 'traceview[dist]'``). The workers must see the trace files at the same
  paths and have traceview installed;
* ``executor=``: any object with ``submit(fn, *args) -> Future`` (a Dask ``Client`` works).

Results come back in file order whatever order they finish in, so the merged table is
identical to a sequential read. A :class:`~traceview.errors.TraceviewError` raised while
reading one file is returned in its place (``load`` turns it into a warning when other
hosts were readable); any other exception propagates.

Progress: ``progress(p)`` is called with a :class:`Progress` after each file completes (in
the calling process); the CLI draws it as a bar on stderr when stderr is a terminal.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Sequence

from .errors import TraceviewError, UsageError

if TYPE_CHECKING:  # imported where used: concurrent.futures with its process pool and
    from concurrent.futures import Executor  # logging is ~35 ms of every CLI start otherwise

#: Below this many bytes in total (on disk), files are read in the calling process (worker
#: start-up, about 0.5 s each, and result transfer would cost more than they save).
PARALLEL_MIN_BYTES = 8 << 20
#: Local worker processes for multi-file trace.json runs; 0 = read in the calling process.
_local_workers = 0


def set_local_workers(n: int | None) -> None:
    """Allow up to ``n`` local worker processes for :func:`read_many` (None: one per core;
    0: none, the default). Only for programs whose main module is import-safe (``spawn``)."""
    global _local_workers
    _local_workers = default_workers() if n is None else max(0, int(n))


@dataclass(frozen=True)
class ReadTask:
    """One file to read: arguments of :func:`traceview.read_file` plus its size in bytes."""

    path: str
    kind: str | None = None
    host: str | None = None
    run: str = ""
    max_bytes: int | None = None
    size: int = 0
    use_cache: bool = True


@dataclass(frozen=True)
class Progress:
    """Where a multi-file read stands: files and bytes (on disk) done of the total, and the
    events read so far (``n_events`` of the files done)."""

    files_done: int
    files_total: int
    bytes_done: int
    bytes_total: int
    events: int
    path: str = ""


class _Failed:
    """A TraceviewError carried back from a worker as (class, fault, path): rebuilt on
    this side, so its ``fault``/``path`` attributes survive pickling."""

    def __init__(self, exc: TraceviewError):
        self.cls, self.fault, self.path = type(exc), exc.fault, exc.path
        self.exc = exc

    def __getstate__(self):
        return {"cls": self.cls, "fault": self.fault, "path": self.path}

    def __setstate__(self, st):
        self.cls, self.fault, self.path = st["cls"], st["fault"], st["path"]
        self.exc = None

    def rebuild(self) -> TraceviewError:
        if self.exc is not None:
            return self.exc
        try:
            return self.cls(self.fault, self.path)
        except Exception:  # a subclass with another signature
            return TraceviewError(self.fault, self.path)


def read_task(task: ReadTask):
    """Read one file (runs in a worker); returns its TraceData, or a carrier of the
    TraceviewError it raised."""
    from . import cache
    from .profile import read_file

    from contextlib import nullcontext

    try:
        limit = {} if task.max_bytes is None else {"max_bytes": task.max_bytes}
        with (nullcontext() if task.use_cache else cache.off()):
            return read_file(task.path, kind=task.kind, host=task.host, run=task.run, **limit)
    except TraceviewError as exc:
        return _Failed(exc)


def tasks_for(files, max_bytes: int | None = None, use_cache: bool = True) -> list[ReadTask]:
    """ReadTasks for discovered files (:class:`traceview.discover.TraceFile`-like objects
    with ``path``, ``kind``, ``host``, ``run``)."""
    out = []
    for tf in files:
        try:
            size = int(getattr(tf, "size", 0) or os.stat(tf.path).st_size)
        except OSError:
            size = 0
        out.append(ReadTask(path=str(tf.path), kind="xplane" if tf.kind == "xplane" else "trace_json",
                            host=tf.host, run=tf.run, max_bytes=max_bytes, size=size, use_cache=use_cache))
    return out


def dask_executor(address: str):
    """(executor, close) for the Dask cluster at ``address``. Raises :class:`UsageError`
    when ``distributed`` is not installed or the scheduler cannot be reached."""
    try:
        from distributed import Client
    except ImportError:
        raise UsageError("--scheduler needs Dask: pip install 'traceview[dist]' (dask[distributed])") from None
    try:
        client = Client(address, timeout="10s", set_as_default=False)
    except Exception as exc:  # OSError, TimeoutError, ValueError for a bad address...
        raise UsageError(f"cannot reach the Dask scheduler at {address}: {exc}") from None
    return client.get_executor(pure=False), client.close


def default_workers() -> int:
    """Processes for a local parallel read: the cores this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def read_many(tasks: Sequence[ReadTask], *, executor: Executor | None = None, scheduler: str | None = None,
              workers: int | None = None, progress: Callable[[Progress], None] | None = None) -> list:
    """Read every task; returns, in task order, a TraceData or a TraceviewError per file.

    ``executor``: use it as given (not shut down here). ``scheduler``: a Dask scheduler
    address (a client is opened and closed here). Otherwise a local process pool of
    ``workers`` processes (default: what :func:`set_local_workers` allowed, 0 unless set;
    capped by the number of files) when there are at least two files and
    :data:`PARALLEL_MIN_BYTES` in total, else the calling process. ``progress`` gets a
    :class:`Progress` after each file.
    """
    tasks = list(tasks)
    n = len(tasks)
    total = sum(t.size for t in tasks)
    results: list = [None] * n
    done = {"files": 0, "bytes": 0, "events": 0}

    def finish(i: int, res) -> None:
        if isinstance(res, _Failed):
            res = res.rebuild()
        results[i] = res
        done["files"] += 1
        done["bytes"] += tasks[i].size
        done["events"] += getattr(res, "n_events", 0) or 0
        if progress is not None:
            progress(Progress(done["files"], n, done["bytes"], total, done["events"], tasks[i].path))

    if progress is not None and n:
        progress(Progress(0, n, 0, total, 0, tasks[0].path))
    close = None
    own_pool = None
    if executor is None and scheduler:
        executor, close = dask_executor(scheduler)
    elif executor is None:
        w = min(_local_workers if workers is None else workers, n)
        if w >= 2 and total >= PARALLEL_MIN_BYTES:
            import multiprocessing

            from concurrent.futures import ProcessPoolExecutor

            own_pool = executor = ProcessPoolExecutor(max_workers=w, mp_context=multiprocessing.get_context("spawn"))
    try:
        if executor is None:
            for i, t in enumerate(tasks):
                finish(i, read_task(t))
        else:
            from concurrent.futures import Future, as_completed

            futures = [executor.submit(read_task, t) for t in tasks]
            if all(isinstance(f, Future) for f in futures):
                index = {f: i for i, f in enumerate(futures)}
                for fut in as_completed(futures):
                    finish(index[fut], fut.result())
            else:  # e.g. a Dask Client's own futures: collect them in order
                for i, fut in enumerate(futures):
                    finish(i, fut.result())
    finally:
        if own_pool is not None:
            own_pool.shutdown(wait=True, cancel_futures=True)
        if close is not None:
            close()
    return results


class TerminalProgress:
    """A ``progress`` callback drawing a rich progress bar (files, MB, events) on stderr.

    Draws only when stderr is a terminal (``enabled``); otherwise every call is a no-op.
    Use as a context manager so the bar is removed at the end.
    """

    def __init__(self, stream=None, force: bool = False):
        import sys

        self.stream = stream or sys.stderr
        self.enabled = force or (hasattr(self.stream, "isatty") and self.stream.isatty())
        self._bar = None
        self._task = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
        return False

    def __call__(self, p: Progress) -> None:
        if not self.enabled:
            return
        if self._bar is None:
            from rich.console import Console
            from rich.progress import BarColumn, Progress as Bar, TextColumn, TimeElapsedColumn

            self._bar = Bar(TextColumn("reading traces"), BarColumn(), TextColumn("{task.fields[what]}"),
                            TimeElapsedColumn(), console=Console(file=self.stream), transient=True)
            self._bar.start()
            self._task = self._bar.add_task("read", total=max(p.bytes_total, 1), what="")
        what = (f"{p.files_done}/{p.files_total} files, {p.bytes_done / 1e6:,.0f}/{p.bytes_total / 1e6:,.0f} MB, "
                f"{p.events:,} events")
        self._bar.update(self._task, completed=p.bytes_done, what=what)
        if p.files_done >= p.files_total:
            self._bar.stop()
            self._bar = None


def _workers(text: str) -> int:
    import argparse

    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number of processes, 1 or more: {text!r}")
    return n


def add_cli_arguments(p) -> None:
    """The CLI flags of this module and the cache, for ``analyze`` and ``report`` (``diff``
    and ``verify`` take ``--no-cache`` only: they read each side in this process)."""
    p.add_argument("--no-cache", action="store_true",
                   help="neither read nor write the parsed-table cache (~/.cache/traceview; "
                        "$TRACEVIEW_CACHE_DIR, $TRACEVIEW_NO_CACHE=1)")
    p.add_argument("--workers", type=_workers, default=1, metavar="N",
                   help="read the hosts' files in up to N local processes (default 1: in this process)")
    p.add_argument("--scheduler", metavar="ADDRESS",
                   help="read the hosts' files on this Dask cluster (e.g. tcp://10.0.0.5:8786); "
                        "needs traceview[dist] and the files at the same paths on the workers")


def cli_read_options(args) -> dict:
    """``load()`` keyword arguments from the CLI flags (turns the cache off for
    ``--no-cache``, allows ``--workers`` local processes, draws a progress bar on stderr when
    it is a terminal)."""
    from . import cache

    if getattr(args, "no_cache", False):
        cache.disabled(True)
    set_local_workers(max(0, getattr(args, "workers", 1) or 0))  # the CLI's main is import-safe
    return {"scheduler": getattr(args, "scheduler", None), "progress": TerminalProgress()}
