"""``traceview query`` in a child process under a memory and a time limit.

polars bounds nothing a SQL query asks for: an aggregate or ORDER BY over a 4-way cross join
of the op table allocates until polars aborts the process ("memory allocation failed",
SIGABRT), which took an MCP server down with it. So the query runs in a child (:func:`run`):
the child reads the profile, runs the SQL, renders the output and sends back its bytes, or
the error it raised. While the SQL and the rendering run (:func:`limited`) the child may take
at most ``memory`` bytes of address space above what it held before (``RLIMIT_AS``) and
``seconds`` of wall time (``SIGALRM`` left at its default action, which ends the process even
inside polars' Rust code); its standard error goes to ``/dev/null`` meanwhile (polars' abort
message). A child that dies is a :class:`~traceview.errors.LimitExceeded` (exit 6) naming the
limit, in the parent, which stays alive.

How the child is made: a fork of this process while polars' thread pool has not started in
it and no other thread runs (the command line: it reads nothing before the query). Otherwise
(an MCP server, a test calling :func:`traceview.cli.main` in-process) a forked child would
deadlock on its first parallel polars call, so the child is a fork of a query server: a fresh
interpreter started once per process (``python -c``, this process's ``sys.path``, never its
``__main__``) with the query's modules imported (:data:`PRELOAD`), which forks one child per
query and relays its answer and exit status. Without ``os.fork`` (Windows) the query runs in
this process, unlimited.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import re
import signal
import struct
import sys
import threading

from traceview.errors import LimitExceeded

#: defaults of ``--query-memory`` (GiB above the profile's tables) and ``--query-timeout`` (s)
MEMORY_GIB = 4.0
TIMEOUT_S = 60.0

#: modules the query server imports once, so that each child starts with them: these, and
#: those of traceview and of these packages the starting process had imported (:func:`_preload`)
PRELOAD = ["polars", "numpy", "traceview.cli.query", "traceview.analysis.sql", "traceview.analysis.report",
           "traceview.model.load", "traceview.read.discover", "traceview.render.json", "traceview.render.query",
           "traceview.render.tables"]


def _preload() -> list[str]:
    """:data:`PRELOAD` and the modules of this process under its packages (never a
    ``__main__``, which would run a command)."""
    roots = {n.split(".")[0] for n in PRELOAD}
    had = sorted(n for n in list(sys.modules) if n.split(".")[0] in roots and not n.endswith("__main__"))
    return PRELOAD + [n for n in had if n not in PRELOAD]

#: (memory bytes or None, seconds or None) inside a child :func:`run` made; None elsewhere
_limits: list = [None]

#: name of the Ctrl-C watchdog thread of :func:`traceview.cli.process.handle_interrupts` (blocked
#: in a read, holding no lock: harmless to a fork)
_WATCHDOG = "traceview-interrupt"

#: the signals a child under the memory limit dies of: polars' abort on a failed allocation,
#: a fault on one, the kernel's OOM killer
_MEMORY_DEATHS = (signal.SIGABRT, signal.SIGSEGV, signal.SIGBUS, signal.SIGKILL)


def _pool_started() -> bool:
    """Whether polars' thread pool runs in this process (threads named ``polars-<n>``); True
    when it cannot be told (no ``/proc``)."""
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return True
    for task in tasks:
        try:
            with open(f"/proc/self/task/{task}/comm", encoding="utf-8", errors="replace") as f:
                if re.fullmatch(r"polars-\d+", f.read().strip()):
                    return True
        except OSError:
            continue
    return False


def _fork_safe() -> bool:
    """Whether a plain fork of this process is safe: on the main thread, no other Python
    thread but the Ctrl-C watchdog, polars' pool not started."""
    others = [t for t in threading.enumerate() if t is not threading.main_thread() and t.name != _WATCHDOG]
    return threading.current_thread() is threading.main_thread() and not others and not _pool_started()


def _gib(n: int) -> str:
    return f"{n / (1 << 30):g} GiB"


def _death(exitcode: int, memory: int | None, seconds: float | None, path) -> Exception:
    """The error of a child that ended without an answer (``exitcode``: minus the signal)."""
    if exitcode == -signal.SIGINT:
        return KeyboardInterrupt()
    if exitcode == -signal.SIGALRM and seconds:
        return LimitExceeded(f"the query ran past its time limit ({seconds:g} s; --query-timeout raises it)", path)
    try:
        how = f"signal {signal.Signals(-exitcode).name}" if exitcode < 0 else f"exit code {exitcode}"
    except ValueError:
        how = f"signal {-exitcode}"
    if memory and -exitcode in _MEMORY_DEATHS:
        return LimitExceeded(f"the query exceeded its memory limit ({_gib(memory)} above the tables; "
                             "--query-memory raises it)", path)
    return LimitExceeded(f"the query's process ended with {how} (out of memory?)", path)


def _portable(exc: BaseException) -> BaseException:
    """``exc`` if it survives pickling, else a RuntimeError of its first line."""
    import pickle

    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:  # noqa: BLE001 - any failure to pickle: send its text
        first = (str(exc).strip().splitlines() or [""])[0]
        return RuntimeError(f"{type(exc).__name__}: {first}")


def _child(fd: int, work, args, memory, seconds) -> None:
    """A forked child's body: ``work(*args)`` with the limits armed for :func:`limited`, its
    outcome (("ok", value) or ("error", exception)) pickled onto ``fd``; never returns. Ctrl-C
    ends it at once (the parent says so); what it would print to standard output goes nowhere
    (a query server's or an MCP server's standard output is a channel)."""
    code = 0
    try:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)
        os.close(null)
        _limits[0] = (memory, seconds)
        try:
            msg = ("ok", work(*args))
        except BaseException as exc:  # noqa: BLE001 - every outcome goes back to the parent
            msg = ("error", _portable(exc))
        try:
            data = pickle.dumps(msg, protocol=pickle.HIGHEST_PROTOCOL)
        except MemoryError:
            data = pickle.dumps(("error", LimitExceeded(f"the query's result exceeded its memory limit "
                                                        f"({_gib(memory or 0)}; --query-memory raises it)")))
        with open(fd, "wb") as f:
            f.write(data)
        with contextlib.suppress(Exception):
            sys.stderr.flush()
    except BaseException:  # noqa: BLE001 - the parent reads no answer: the exit status says it
        code = 70
    finally:
        os._exit(code)


def _fork_run(request: tuple, context: tuple | None = None) -> tuple[int, bytes]:
    """Fork a child running ``request`` (work, args, memory, seconds: :func:`_child`); its exit
    code (minus the signal that ended it) and the bytes it wrote. ``context``: (environment,
    working directory) the child takes first: those of the process that asked, not the query
    server's, which date from its start. Ctrl-C here kills it."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        if context is not None:
            env, cwd = context
            os.environ.clear()
            os.environ.update(env)
            with contextlib.suppress(OSError):
                os.chdir(cwd)
        _child(w, *request)
    os.close(w)
    try:
        with open(r, "rb") as f:
            data = f.read()  # to the child's end
        _, status = os.waitpid(pid, 0)
    except BaseException:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        raise
    return os.waitstatus_to_exitcode(status), data


def _send(stream, obj) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(struct.pack("<Q", len(data)) + data)
    stream.flush()


def _receive(stream):
    """The next object :func:`_send` wrote on ``stream``; None at its end."""
    head = stream.read(8)
    if len(head) < 8:
        return None
    n = struct.unpack("<Q", head)[0]
    data = stream.read(n)
    return None if len(data) < n else pickle.loads(data)


def serve() -> None:
    """The query server's loop (module doc): on standard input the modules to import
    (:func:`_preload`), then requests; on standard output, per request, (exit code, bytes) of
    :func:`_fork_run`. Ends at the end of its input, or quietly when its answer cannot be
    written (the asking process is gone). Ctrl-C is for its children, not for it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    channel_in, channel_out = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # nothing but answers on the channel
    import importlib

    for name in _receive(channel_in) or ():
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    while True:
        got = _receive(channel_in)
        if got is None:
            return
        request, context = got
        try:
            _send(channel_out, _fork_run(request, context))
        except OSError:  # the process it answers is gone (interrupted, terminated): end quietly
            return


#: the query server of this process (a subprocess.Popen), started on first need
_server: list = [None]
_server_lock = threading.Lock()

_BOOT = ("import pickle, struct, sys; n = struct.unpack('<Q', sys.stdin.buffer.read(8))[0]; "
         "sys.path[:] = pickle.loads(sys.stdin.buffer.read(n)); "
         "from traceview.cli.sqlguard import serve; serve()")


def _served(request: tuple) -> tuple[int, bytes]:
    """:func:`_fork_run` of ``request`` done by this process's query server (started on first
    use; a server that failed or was interrupted mid-request is dropped, the next starts anew)."""
    import subprocess

    with _server_lock:
        proc = _server[0]
        if proc is None or proc.poll() is not None:
            proc = subprocess.Popen([sys.executable, "-P", "-c", _BOOT], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    close_fds=True)
            _server[0] = proc
            _send(proc.stdin, list(sys.path))
            _send(proc.stdin, _preload())
            import atexit

            atexit.register(_stop, proc)
        try:
            # the asking process's environment and folder: credentials, the cache folder, a
            # relative path, each as they are now, not as they were when the server started
            _send(proc.stdin, (request, (dict(os.environ), os.getcwd())))
            reply = _receive(proc.stdout)
            if reply is None:
                raise LimitExceeded("the query server ended unexpectedly")
        except BaseException:
            _server[0] = None
            _stop(proc)
            raise
    return reply


def _stop(proc) -> None:
    """End a query server (its input closed, then killed)."""
    with contextlib.suppress(Exception):
        proc.stdin.close()
    with contextlib.suppress(Exception):
        proc.kill()
        proc.wait(timeout=5)


def run(work, *args, memory: int | None, seconds: float | None, path: str | None = None):
    """``work(*args)`` run in a child process (module doc), ``memory`` bytes and ``seconds``
    the limits :func:`limited` applies there (None: none); returns what it returned and raises
    what it raised (``work``, its arguments and its result must pickle). Raises LimitExceeded,
    naming ``path``, when the child dies, and KeyboardInterrupt when Ctrl-C ended it."""
    if not hasattr(os, "fork"):
        return work(*args)
    for stream in (sys.stdout, sys.stderr):  # a fork would write the buffers twice
        with contextlib.suppress(Exception):
            stream.flush()
    request = (work, args, memory, seconds)
    code, data = _fork_run(request) if _fork_safe() else _served(request)
    try:
        kind, value = pickle.loads(data) if data else (None, None)
    except Exception:  # noqa: BLE001 - an answer cut short: the child died writing it
        kind, value = None, None
    if kind == "ok":
        return value
    if kind == "error":
        raise value
    raise _death(code, memory, seconds, path)


def _vm_size() -> int:
    """Bytes of this process's address space (``VmSize``), 0 when unknown."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


@contextlib.contextmanager
def limited(path=None):
    """Inside a child of :func:`run`: from here to the child's end, its address space held to
    the memory limit above its present size, ``SIGALRM`` (ending it) after the time limit,
    standard error to ``/dev/null``, and a MemoryError a LimitExceeded naming ``path``.
    Elsewhere: nothing."""
    lim = _limits[0]
    if lim is None:
        yield
        return
    memory, seconds = lim
    if memory:
        with contextlib.suppress(ImportError, ValueError, OSError):
            import resource

            soft, hard = resource.getrlimit(resource.RLIMIT_AS)
            cap = _vm_size() + memory
            resource.setrlimit(resource.RLIMIT_AS, (cap if hard == resource.RLIM_INFINITY else min(cap, hard), hard))
    if seconds:
        signal.signal(signal.SIGALRM, signal.SIG_DFL)
        signal.setitimer(signal.ITIMER_REAL, seconds)
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 2)
    os.close(null)
    try:
        yield
    except MemoryError:
        raise LimitExceeded(f"the query exceeded its memory limit ({_gib(memory or 0)} above the tables; "
                            "--query-memory raises it)", path) from None
    except BaseException as exc:  # noqa: BLE001 - polars panicking under the cap (no thread, no page)
        if not memory or type(exc).__name__ != "PanicException":  # pyo3's PanicException: a BaseException
            raise
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        raise LimitExceeded(f"the query failed under its memory limit ({_gib(memory)} above the tables; "
                            f"--query-memory raises it): {first}", path) from None
