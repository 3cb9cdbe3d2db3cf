"""Read the files of a run: in this process, in local worker processes, or on a Dask cluster.

A multi-host run has one trace file per host; each is read on its own and the caller merges
the results (the ``host`` column tells them apart). :func:`read_many` submits one
:class:`ReadTask` per file to a picklable per-file function (``read``, e.g.
:func:`traceview.model.files.read_task`), through any ``concurrent.futures.Executor``-like
object:

* default (``workers`` 0 or 1): the calling process, one file after the other;
* ``workers=N`` (N >= 2): a ``ProcessPoolExecutor`` of up to N processes in the ``spawn``
  context (polars' threads do not survive a ``fork``; ``spawn`` re-imports the caller's main
  module, which a script must guard with ``if __name__ == "__main__":``), when there are at
  least two files and :data:`PARALLEL_MIN_BYTES` in total. A worker pays its start-up and
  imports before it reads, and one process already reads a file's TPU planes on threads, so
  on a machine with few cores this is slower (``benchmarks/RESULTS.md``);
* ``scheduler="tcp://host:8786"``: the workers of an existing Dask distributed cluster,
  through a ``distributed.Client(address)``, as ``executor=`` takes one (``pip install
  'traceview[dist]'``).
  The workers must see the trace files at the same paths and have traceview installed;
* ``executor=``: any object with ``submit(fn, *args) -> Future`` (a Dask ``Client`` works).

A worker returns its file's encoded op table (a few bytes per event), never a wide table.
Results come back in file order whatever order they finish in, so the merged table is
identical to a sequential read. A :class:`~traceview.errors.TraceviewError` raised while
reading one file is returned in its place (the caller turns it into a warning when other
hosts were readable); any other exception propagates. ``progress(p)`` is called with a
:class:`Progress` after each file completes, in the calling process.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Sequence

from traceview.errors import RemoteUnreadable, TraceviewError, UsageError

if TYPE_CHECKING:  # imported where used: concurrent.futures with its process pool and
    from concurrent.futures import Executor  # logging would otherwise slow every CLI start

#: Below this many bytes in total (on disk), files are read in the calling process (worker
#: start-up and result transfer would cost more than they save).
PARALLEL_MIN_BYTES = 8 << 20


@dataclass(frozen=True)
class ReadTask:
    """One file to read: what the per-file function needs. ``size`` in bytes (on disk);
    ``cache_root``: the parsed-table cache folder to use, None for none; ``min_cache_bytes``:
    the smallest file that cache keeps."""

    path: str
    kind: str | None = None
    host: str | None = None
    run: str = ""
    max_bytes: int | None = None
    size: int = 0
    cache_root: str | None = None
    min_cache_bytes: int = 1 << 20


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


class Failed:
    """A TraceviewError carried back from a worker as (class, fault, path): rebuilt on this
    side, so its ``fault``/``path`` attributes survive pickling."""

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


def tasks_for(files, max_bytes: int | None = None, cache=None) -> list[ReadTask]:
    """ReadTasks for discovered files (:class:`traceview.read.discover.TraceFile`-like
    objects with ``path``, ``kind``, ``host``, ``run``); ``cache``: a
    :class:`traceview.read.cache.TableCache` or None."""
    out = []
    for tf in files:
        try:
            size = int(getattr(tf, "size", 0) or os.stat(tf.path).st_size)
        except OSError:
            size = 0
        out.append(ReadTask(path=str(tf.path), kind="xplane" if tf.kind == "xplane" else "trace_json",
                            host=tf.host, run=tf.run, max_bytes=max_bytes, size=size,
                            cache_root=None if cache is None else str(cache.root),
                            min_cache_bytes=1 << 20 if cache is None else cache.min_file_bytes))
    return out


def dask_executor(address: str):
    """(executor, close) for the Dask cluster at ``address``: its ``Client`` (read_many
    groups files into tasks and fetches results as they complete on one). Raises :class:`UsageError`
    when ``distributed`` is not installed or the address is malformed,
    :class:`~traceview.errors.RemoteUnreadable` (exit 7) when no scheduler answers there or
    what answers is no Dask scheduler."""
    try:
        from distributed import Client
    except ImportError:
        raise UsageError("--scheduler needs Dask: pip install 'traceview[dist]' (dask[distributed])") from None
    import threading

    fault = address_fault(address)
    if fault:
        raise UsageError(f"{address!r} is not a Dask scheduler address: {fault}")
    refused = _refused(address)
    if refused:
        raise RemoteUnreadable(f"cannot reach the Dask scheduler at {address}: {refused}")
    got: dict = {}

    def connect():
        try:
            got["client"] = Client(address, timeout=f"{CONNECT_TIMEOUT_S:g}s", set_as_default=False)
        except Exception as exc:  # OSError, TimeoutError, ValueError for a bad address...
            got["error"] = exc

    # Client's timeout covers the TCP connect, not the handshake: a service that accepts the
    # connection and never answers (an HTTP server) would hold it forever
    t = threading.Thread(target=connect, name="traceview-dask-connect", daemon=True)
    t.start()
    t.join(CONNECT_TIMEOUT_S + HANDSHAKE_GRACE_S)
    if "error" in got:
        err = got["error"]
        if isinstance(err, (OSError, TimeoutError)):
            raise RemoteUnreadable(f"cannot reach the Dask scheduler at {address}: {err}") from None
        if isinstance(err, TypeError) and "ssl_context" in str(err):  # tls:// or wss:// without certificates
            raise UsageError(f"{address} needs TLS certificates: Dask's configuration names none "
                             "(distributed.comm.tls.ca-file, .client.cert and .client.key)") from None
        # the address is well formed (address_fault) and the port accepted a connection: what
        # answers there sent bytes Dask cannot decode (Dask's own error names an array size)
        raise RemoteUnreadable(f"no Dask scheduler at {address}: its reply is not Dask's protocol"
                               f"{_what_answers(address)}") from None  # (Dask's error, a MemoryError
        # or a ValueError from decoding garbage, would send the user after the wrong fault)
    if "client" not in got:
        raise RemoteUnreadable(f"no Dask scheduler answered at {address} within "
                               f"{CONNECT_TIMEOUT_S + HANDSHAKE_GRACE_S:g} s{_what_answers(address)}")
    client = got["client"]
    return client, client.close


#: Seconds to connect to a Dask scheduler, and beyond that for its handshake.
CONNECT_TIMEOUT_S = 10.0
HANDSHAKE_GRACE_S = 5.0
#: Seconds the probes of a scheduler's port wait (:func:`_refused`, :func:`_what_answers`): a
#: refusal or an unknown host answers at once; a silent route is left to Dask's own connect
PROBE_TIMEOUT_S = 3.0


#: the address schemes of Dask's communication backends that reach another process
#: (``distributed.comm.registry``; ``inproc://`` is this process's own)
DASK_SCHEMES = ("tcp", "tls", "ws", "wss", "ucx")


def address_fault(address: str) -> str:
    """What makes ``address`` no Dask scheduler address (``[scheme://]host:port``, ``tcp://``
    when it has none, ``scheme`` one of :data:`DASK_SCHEMES`, a port 1-65535), or "" when it
    is one; the grammar of ``distributed.comm.addressing``, checked before any connection."""
    from urllib.parse import urlsplit

    if not address.strip():
        return "it is empty"
    if any(c.isspace() or not c.isprintable() for c in address):
        return "it holds white space or a control character"
    scheme = address.split("://", 1)[0] if "://" in address else "tcp"  # as Dask: lower case only
    if scheme not in DASK_SCHEMES:
        return f"unknown scheme {scheme!r} (Dask's: {', '.join(DASK_SCHEMES)})"
    try:
        u = urlsplit(address if "://" in address else f"tcp://{address}")
        port = u.port
    except ValueError as exc:
        return f"its port is not a number from 1 to 65535 ({exc})"
    if not u.hostname:
        return "it names no host"
    if port is None:
        return "it names no port (the scheduler's is usually 8786)"
    if port == 0:
        return "its port 0 is not one from 1 to 65535"
    if u.path not in ("", "/") or u.query or u.fragment:
        return "it holds more than host and port"
    return ""


def _host_port(address: str, tcp_only: bool = True) -> tuple[str, int] | None:
    """(host, port) of a scheduler address (``tcp://`` assumed when it has no scheme), None
    without both or, with ``tcp_only``, for another scheme (``tls://``: a plain connect says
    nothing of it)."""
    from urllib.parse import urlsplit

    u = urlsplit(address if "://" in address else f"tcp://{address}")
    if (tcp_only and u.scheme != "tcp") or not u.hostname:
        return None
    try:
        port = u.port
    except ValueError:
        return None
    return (u.hostname, port) if port else None


def _refused(address: str) -> str:
    """The fault when nothing listens at ``address``'s TCP port (connection refused, host
    unknown), else "" (Dask's Client retries a refused connection until its timeout, as for a
    scheduler still starting: a port nobody listens on would cost :data:`CONNECT_TIMEOUT_S`)."""
    import socket

    hp = _host_port(address)
    if hp is None:
        return ""
    try:
        with socket.create_connection(hp, timeout=PROBE_TIMEOUT_S):
            return ""
    except ConnectionRefusedError:
        return "connection refused (no scheduler listens on that port)"
    except socket.gaierror as exc:
        return f"unknown host {hp[0]!r} ({exc.strerror or exc})"
    except OSError:
        return ""  # a timeout or an unreachable route: Dask's own connect says what it finds


def _what_answers(address: str) -> str:
    """``": <what the port says>"`` for a port that accepted the connection but is no Dask
    scheduler (a banner, else the status line it gives an HTTP request), or ""."""
    import socket

    hp = _host_port(address, tcp_only=False)
    if hp is None:
        return ""
    try:
        with socket.create_connection(hp, timeout=PROBE_TIMEOUT_S) as sock:
            sock.settimeout(1)
            try:
                data = sock.recv(256)
            except socket.timeout:
                sock.sendall(b"GET / HTTP/1.0\r\nHost: " + hp[0].encode() + b"\r\n\r\n")
                sock.settimeout(2)
                data = sock.recv(256)
    except OSError:
        return ""
    line = "".join(chr(b) if 32 <= b < 127 else f"\\x{b:02x}" for b in data.split(b"\n", 1)[0].strip())[:80]
    if not line:
        return ": the port accepts connections and says nothing"
    return f": the port answers '{line}'" + (" (an HTTP server)" if line.startswith("HTTP/") else "")


def _worker_init() -> None:
    """A pool worker's start: it leaves Ctrl-C to the process that started it (a terminal
    sends SIGINT to the whole process group: each worker would print its own traceback; that
    process shuts the pool down), and it ends when that process ends without shutting the pool
    down (SIGKILL, SIGTERM: a worker waiting on the pool's queues, which every worker holds both
    ends of, would otherwise wait for ever, holding its memory)."""
    import signal
    import threading
    from multiprocessing import parent_process

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if hasattr(signal, "pthread_sigmask"):  # held while it started (_interrupts_held): a Ctrl-C since is dropped
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    parent = parent_process()
    if parent is not None and parent.sentinel is not None:
        threading.Thread(target=_end_with, args=(parent.sentinel,), name="traceview-parent-watch", daemon=True).start()


def _end_with(sentinel) -> None:
    """Waits until ``sentinel`` (the parent's, readable once that process is gone), then ends
    this process at once."""
    from multiprocessing.connection import wait

    wait([sentinel])
    os._exit(1)


@contextlib.contextmanager
def _interrupts_held():
    """SIGINT held (blocked) in this thread while it starts pool workers: they inherit the mask,
    so a Ctrl-C while a worker's interpreter starts (before :func:`_worker_init`)
    prints no traceback there; this process takes it when the mask is restored."""
    import signal

    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


#: the threads of its own a read may start (plane decoding, per-device step work): 0 for
#: ``os.cpu_count()``; set by :func:`thread_budget`
_THREADS = contextvars.ContextVar("traceview_threads", default=0)


def threads_available() -> int:
    """How many threads a step of one file's work may spread over: ``os.cpu_count()``, or the
    budget of the :func:`thread_budget` in force (a worker's share of the machine)."""
    return _THREADS.get() or os.cpu_count() or 1


@contextlib.contextmanager
def thread_budget(n: int):
    """Within the block (this thread's context), :func:`threads_available` is ``n`` (>= 1)."""
    token = _THREADS.set(max(1, int(n)))
    try:
        yield
    finally:
        _THREADS.reset(token)


def _budgeted(read: Callable, threads: int, task):
    """``read(task)`` within :func:`thread_budget` ``(threads)`` (a worker's per-file function)."""
    with thread_budget(threads):
        return read(task)


#: On a Dask cluster, files are grouped into tasks so that each worker thread gets at least
#: this many tasks (one file a task when there are fewer files)
TASKS_PER_THREAD = 4


def _files_per_task(client, n: int) -> int:
    """Files per Dask task for ``n`` files on ``client``'s workers (:data:`TASKS_PER_THREAD`)."""
    try:
        threads = sum(client.nthreads().values())
    except Exception:  # no answer from the scheduler: one file a task
        return 1
    return max(1, n // (max(threads, 1) * TASKS_PER_THREAD))


class _Files:
    """The tasks of one Dask task (a plain list would be taken apart by Dask's graph)."""

    def __init__(self, tasks: list):
        self.tasks = tasks


def _read_each(read: Callable, files: _Files) -> list:
    """``read(task)`` for each of ``files``' tasks, in order (one Dask task of several files)."""
    return [read(t) for t in files.tasks]


def pool_size(workers: int, tasks: Sequence[ReadTask]) -> int:
    """The processes of the local pool :func:`read_many` starts for ``workers`` and ``tasks``
    (no executor, no scheduler): ``workers`` capped by the number of files when that is 2 or
    more and the files hold :data:`PARALLEL_MIN_BYTES` in all, else 0 (this process reads)."""
    w = min(workers, len(tasks))
    return w if w >= 2 and sum(t.size for t in tasks) >= PARALLEL_MIN_BYTES else 0


def read_many(tasks: Sequence[ReadTask], read: Callable, *, executor: "Executor | None" = None,
              scheduler: str | None = None, workers: int = 0,
              progress: Callable[[Progress], None] | None = None, arrived: Callable | None = None) -> list:
    """``read(task)`` for every task; returns, in task order, its result or the
    TraceviewError it raised, per file.

    ``read`` must be a module-level function (it is pickled by name for worker processes);
    it returns the file's result or a :class:`Failed`. ``executor``: used as given (not shut
    down here). ``scheduler``: a Dask scheduler address (a client is opened and closed here).
    Otherwise a local process pool of up to ``workers`` processes (capped by the number of
    files) when ``workers`` >= 2, there are at least two files and :data:`PARALLEL_MIN_BYTES`
    in total, else the calling process. ``progress`` gets a :class:`Progress` after each
    file. In a worker, ``read`` runs with a :func:`thread_budget`: one thread per Dask task
    (Dask runs a task per worker thread), the machine's cores shared out among a local pool's
    processes. ``arrived(result)``: called with each file's result (or its TraceviewError) as it
    comes, in this process while the other files are still being read; what it returns is
    kept in its place. On a Dask ``Client``, files are grouped into tasks of several when
    there are more than :data:`TASKS_PER_THREAD` per worker thread. Raises
    :class:`UsageError` for ``workers`` < 0.
    """
    if workers < 0:
        raise UsageError(f"workers must be 0 or more, got {workers}")
    tasks = list(tasks)
    n = len(tasks)
    total = sum(t.size for t in tasks)
    results: list = [None] * n
    done = {"files": 0, "bytes": 0, "events": 0}

    def finish(i: int, res) -> None:
        if isinstance(res, Failed):
            res = res.rebuild()
        if arrived is not None:
            res = arrived(res)
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
        w = pool_size(workers, tasks)
        if w:
            import multiprocessing

            from concurrent.futures import ProcessPoolExecutor

            own_pool = executor = ProcessPoolExecutor(max_workers=w, mp_context=multiprocessing.get_context("spawn"),
                                                      initializer=_worker_init)
    try:
        if executor is None:
            for i, t in enumerate(tasks):
                finish(i, read(t))
        else:
            from concurrent.futures import Future, as_completed

            # a Dask client takes the files in one message (keys of their own: no two files
            # merged), a few files a task when there are many per worker thread (each task costs
            # the scheduler, which runs in this process, and the worker a few ms)
            client = type(executor).__module__.startswith("distributed") and hasattr(executor, "gather")
            if client:  # one thread a task: the worker's other threads run other tasks
                read = functools.partial(_budgeted, read, 1)
            elif executor is own_pool:  # the machine's cores shared out among the processes
                read = functools.partial(_budgeted, read, max(1, (os.cpu_count() or 1) // w))
            per = _files_per_task(executor, n) if client else 1
            groups = [list(range(i, min(i + per, n))) for i in range(0, n, per)]
            if per > 1:
                futures = executor.map(functools.partial(_read_each, read), [_Files(tasks[g[0]:g[-1] + 1]) for g in groups],
                                       pure=False)
            else:
                with _interrupts_held() if executor is own_pool else contextlib.nullcontext():  # (its
                    # workers start at the submits)
                    futures = executor.map(read, tasks, pure=False) if client else [executor.submit(read, t)
                                                                                     for t in tasks]
            if all(isinstance(f, Future) for f in futures):
                index = {f: i for i, f in enumerate(futures)}
                for fut in as_completed(futures):
                    finish(index[fut], fut.result())
            elif type(futures[0]).__module__.startswith("distributed"):  # a Dask Client's futures: each
                # result as it comes (fetched on the client's event loop meanwhile, not one
                # blocking round trip per file), its worker's copy released then
                from distributed import as_completed as dask_completed

                index = {id(f): g for f, g in zip(futures, groups)}
                for fut, res in dask_completed(futures, with_results=True, loop=futures[0].client.loop):  # (a
                    # client not set as the default, as dask_executor's)
                    fut.release()
                    g = index[id(fut)]
                    for i, r in zip(g, res if per > 1 else [res]):
                        finish(i, r)
            else:  # other futures: collected in order
                for i, fut in enumerate(futures):
                    finish(i, fut.result())
    finally:
        if own_pool is not None:
            own_pool.shutdown(wait=True, cancel_futures=True)
        if close is not None:
            close()
    return results
