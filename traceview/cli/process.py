"""The one place traceview tunes the process it runs in (the command line only; the library
never does): allocators, BLAS threads, the GIL switch interval while decoding on a thread,
standard streams a process was started without, and the exit path."""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import sys
import threading

#: total trace bytes from which the allocators trade allocation speed for memory (see tune_allocator)
BIG_INPUT_BYTES = 256 << 20
#: inputs from which the heap is trimmed once they are read (:func:`trim_heap`)
TRIM_INPUT_BYTES = 32 << 20
#: inputs from which the pages polars' allocator has kept unused go back to the OS without a
#: second delay (see tune_allocator)
PURGE_INPUT_BYTES = 32 << 20
#: inputs from which diff reads each profile in a child process of its own (:func:`pickled_in_child`):
#: below, the second interpreter's imports and page faults cost more than the memory it saves
FORK_INPUT_BYTES = 32 << 20
#: GIL switch interval while a file is decoded on a thread, s (Python's default is 5 ms)
DECODE_SWITCH_INTERVAL_S = 0.0005
#: exit code after an interrupt (Ctrl-C, SIGINT): 128 + SIGINT, as a shell reports it
EXIT_INTERRUPTED = 130
#: exit code after a SIGTERM (``kill``, a job scheduler, a container stopped): 128 + SIGTERM
EXIT_TERMINATED = 143
#: seconds from a SIGINT to a forced exit when the main thread has not ended by then (it may
#: be inside a long C call, e.g. an XLA compilation, where Python cannot raise)
INTERRUPT_GRACE_S = 3.0


#: loggers of the object-store libraries (traceview.read.remote) whose warnings would reach
#: stderr through logging's last-resort handler: a credential chain trying a metadata server,
#: gcsfs's bucket-type lookup, retries. Their faults reach the user as traceview's one line.
STORAGE_LOGGERS = ("gcsfs", "s3fs", "fsspec", "google", "botocore", "aiobotocore", "urllib3")


def quiet_storage_logs() -> None:
    """A null handler on each of :data:`STORAGE_LOGGERS` (records still propagate to any
    handler a caller configured; only the last-resort print to stderr is gone)."""
    import logging

    for name in STORAGE_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(h, logging.NullHandler) for h in logger.handlers):
            logger.addHandler(logging.NullHandler())


def limit_blas_threads() -> None:
    """One OpenBLAS thread (before numpy is imported): its threads spin after start-up, and
    traceview does no linear algebra."""
    if "numpy" not in sys.modules:
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def safe_child_path() -> None:
    """The Python processes the command starts (a spawn pool's workers, which run ``python -c``)
    do not put their working directory first on ``sys.path`` (``PYTHONSAFEPATH``, Python 3.11):
    a ``traceview.py``, ``matplotlib.py`` or ``multiprocessing.py`` in the folder the command
    runs in (a downloaded profile bundle) would otherwise be imported, and run, by them. The
    chart worker and the query server are started with ``-P`` themselves."""
    os.environ.setdefault("PYTHONSAFEPATH", "1")


def matplotlib_home() -> None:
    """Point matplotlib's config and font cache (``MPLCONFIGDIR``) at a folder of this user's in
    the temporary directory when ``HOME`` is missing or not writable, so that a report run
    never creates ``$HOME/.cache`` or ``$HOME/.config`` (matplotlib makes them on import)."""
    if os.environ.get("MPLCONFIGDIR"):
        return
    home = os.environ.get("HOME", "")
    if home and os.path.isdir(home) and os.access(home, os.W_OK | os.X_OK):
        return
    import tempfile

    folder = os.path.join(tempfile.gettempdir(), f"traceview-matplotlib-{os.getuid()}")
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
    except OSError:
        return
    os.environ["MPLCONFIGDIR"] = folder


def one_malloc_arena() -> None:
    """glibc: every thread allocates from the main malloc arena (``M_ARENA_MAX`` = 1, as
    :func:`tune_allocator` intends), for a one-shot command. Called before any other thread
    runs (:func:`traceview.cli.main`, :func:`handle_interrupts`): glibc fixes its arena limit
    when a second thread first allocates, and a later ``mallopt`` no longer changes it (a
    thread's arena then keeps its freed arrays, which ``malloc_trim`` does not hand back).
    Nothing elsewhere or on failure."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").mallopt(-8, 1)  # M_ARENA_MAX
    except (OSError, AttributeError):
        pass


def tune_allocator(input_bytes: int) -> None:
    """Tune the allocators for the input size, before polars is imported.

    * **glibc, every size**: one malloc arena (``M_ARENA_MAX`` = 1). The plane and step
      threads otherwise each get an arena whose freed arrays the next thread cannot reuse,
      so each new array is faulted in again.
    * **inputs under** :data:`BIG_INPUT_BYTES`: freed arrays stay in the heap for reuse
      (mmap threshold 32 MiB, trim threshold 4 GiB, 64 MiB top pad); the heap is at most a
      few hundred MB there. From :data:`PURGE_INPUT_BYTES` on, polars' allocator (jemalloc)
      purges the pages it has freed at once (``dirty_decay_ms:0,muzzy_decay_ms:0``; polars'
      default keeps them 0.5 s, then lazily freed but still resident for another second, so
      that they add to the next stage's peak).
    * **inputs of** :data:`BIG_INPUT_BYTES` **and more**, allocation speed is traded for
      memory on glibc too: allocations of 1 MiB and more are served from ``mmap``, so freed
      arrays go back to the OS at once (glibc's dynamic threshold otherwise rises to 32 MiB
      after the first large free, keeping freed arrays in the heap while the next stage
      allocates). jemalloc's settings (``_RJEM_MALLOC_CONF``) are read when polars loads.

    Options are ``mallopt`` parameters (glibc ``malloc.h``: M_TRIM_THRESHOLD -1, M_TOP_PAD
    -2, M_MMAP_THRESHOLD -3, M_ARENA_MAX -8). Nothing on other platforms or C libraries.
    The figures behind these choices are in ``benchmarks/RESULTS.md``."""
    big = input_bytes >= BIG_INPUT_BYTES
    if input_bytes >= PURGE_INPUT_BYTES and "polars" not in sys.modules:
        os.environ.setdefault("_RJEM_MALLOC_CONF", "dirty_decay_ms:0,muzzy_decay_ms:0")
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-8, 1)  # M_ARENA_MAX
        if big:
            libc.mallopt(-3, 1 << 20)  # M_MMAP_THRESHOLD
        else:
            libc.mallopt(-3, 32 << 20)
            libc.mallopt(-1, 4 << 30)  # M_TRIM_THRESHOLD
            libc.mallopt(-2, 64 << 20)  # M_TOP_PAD
    except (OSError, AttributeError):
        pass


#: the cyclic collector's thresholds in a one-shot command (``gc.set_threshold``; Python's
#: defaults are 700, 10, 10): see :func:`tune_gc`
GC_THRESHOLDS = (20000, 20, 20)


def tune_gc() -> None:
    """Collect cycles less often in a command that runs once and exits: reading and analysing
    a trace allocates millions of short-lived containers (rows, tuples, lists of column
    values), and with Python's defaults the collector walks them some 150 times a run and
    the whole heap once or twice (figures in ``benchmarks/RESULTS.md``). Garbage in cycles
    is still collected, after 20,000 net allocations rather than 700."""
    import gc

    gc.set_threshold(*GC_THRESHOLDS)


@contextlib.contextmanager
def read_uncollected():
    """Around the read of a one-shot command's trace (:func:`tune_gc` in force): no cycle
    collection inside, then everything alive (the modules imported meanwhile, the profile read)
    frozen out of the collector's generations (``gc.freeze``) and collection resumed. The
    collector would otherwise walk each of those long-lived objects once, at the first
    collection after it was made, and find next to no garbage. Elsewhere (a caller's process:
    tests, a notebook) nothing changes."""
    import gc

    if gc.get_threshold() != GC_THRESHOLDS or not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        gc.enable()


def fleet_client_bytes(input_bytes: int) -> int:
    """The input size :func:`tune_allocator` is given in fleet mode: at least
    :data:`BIG_INPUT_BYTES`, whatever the hosts' files weigh, so memory goes before allocation
    speed. The client holds one host at a time (none with workers) and merges the hosts'
    partials, small frames whose freed pages polars' allocator would otherwise keep (its
    dirty decay) while the next merge step allocates."""
    return max(input_bytes, BIG_INPUT_BYTES)


def trim_heap(input_bytes: int) -> None:
    """After an input of :data:`TRIM_INPUT_BYTES` or more is read: hand the free pages in the
    middle of glibc's heap back to the OS (``malloc_trim(0)``, glibc ``malloc.h``). Reading
    leaves small freed blocks between live ones (parsed protobuf messages, per-plane buffers)
    that the mmap threshold does not cover and that polars' allocator (jemalloc) cannot reuse,
    so the analyses would grow the peak on top of them. Nothing elsewhere or on failure."""
    release = heap_releaser(input_bytes)
    if release is not None:
        release()


def heap_releaser(input_bytes: int):
    """For an input of :data:`TRIM_INPUT_BYTES` or more on glibc: a callable that hands the
    heap's free pages back to the OS (``malloc_trim(0)``), for
    :func:`~traceview.analysis.report.build_report`'s ``release`` between its sections (each
    section's freed temporaries would otherwise stay resident under the next one's); None
    elsewhere. ``malloc_trim`` only returns pages no live block uses, so it never costs
    memory; what it costs is the next allocation's page faults."""
    if input_bytes < TRIM_INPUT_BYTES or not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        trim = ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int

    def release() -> None:
        trim(0)

    return release


#: names (``/proc/self/task/*/comm``) of the threads polars starts on its first parallel work:
#: its compute pool (``polars-N``) and its async runtime (``tokio-rt-worker``). A child forked
#: after they run waits forever on threads it does not have (a test checks that polars still
#: names them so).
POLARS_POOL_THREADS = ("polars-", "tokio-")


def can_fork(input_bytes: int) -> bool:
    """Whether a command reading ``input_bytes`` of traces should read them in forked children
    (:data:`FORK_INPUT_BYTES` or more) and a child forked now may use polars and numpy: Linux,
    no Python thread but the main one and the interrupt watchdog (:func:`handle_interrupts`),
    and none of polars' pool threads (:data:`POLARS_POOL_THREADS`) started, with standard
    output and error the process' own descriptors 1 and 2 (a caller that redirected them, to a
    StringIO say, gets nothing from a child). Importing polars starts only its allocator's and
    spill cleaner's threads, which a child does without."""
    if input_bytes < FORK_INPUT_BYTES or not sys.platform.startswith("linux") or not hasattr(os, "fork"):
        return False
    try:  # what a child prints must reach this process' own outputs, not a caller's redirect
        if sys.stdout.fileno() != 1 or sys.stderr.fileno() != 2:
            return False
    except (AttributeError, ValueError, OSError):  # a StringIO, a closed stream
        return False
    if any(t is not threading.main_thread() and t.name != "traceview-interrupt" for t in threading.enumerate()):
        return False
    names = thread_names()
    return "?" not in names and not any(n.startswith(POLARS_POOL_THREADS) and n != "polars-ooc-clea" for n in names)


def thread_names() -> list[str]:
    """The names (``comm``) of this process' threads; ``["?"]`` when /proc cannot be read
    (:func:`can_fork` then refuses)."""
    names = []
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return ["?"]
    for task in tasks:
        try:
            with open(f"/proc/self/task/{task}/comm") as f:
                names.append(f.read().strip())
        except FileNotFoundError:  # a thread that ended since the listing
            continue
        except OSError:
            return ["?"]
    return names


class Headed:
    """A child's answer in two parts (:func:`pickled_in_child`): ``head``, small, which the
    parent unpickles at once (plain Python objects only), and ``body``, which it gets pickled."""

    __slots__ = ("head", "body")

    def __init__(self, head, body):
        self.head, self.body = head, body


class _ChildTraceback(Exception):
    """A child's traceback, as the cause of the exception it raised (as concurrent.futures does)."""

    def __init__(self, text: str):
        super().__init__(text)

    def __str__(self) -> str:
        return "\n" + self.args[0]


def pickled_in_child(work, what: str, meanwhile=None) -> memoryview:
    """``work()`` run in a forked child process: its result, pickled (the caller unpickles it
    once it forks no more, as unpickling polars frames may start polars' pool). The child's
    memory goes with it, whatever its allocators kept. Call only when :func:`can_fork`.

    An exception ``work`` raises is raised here, with its class (a TraceviewError keeps its
    exit code) and the child's traceback as its cause. A child that ends without an answer
    raises KeyboardInterrupt (SIGINT), LimitExceeded (SIGKILL, as the out-of-memory killer
    sends) or TraceviewError, naming ``what`` (the input it was reading). A Ctrl-C ends the
    child at once, silently, and raises KeyboardInterrupt here (the parent says so, once); the
    child dies with the parent. ``meanwhile``: called here, with no argument, while the child
    works (what this process does then is the next fork's too: imports a later child needs);
    what it raises is ignored. A :class:`Headed` answer comes back as ``Headed(head, body)``:
    the head unpickled, the body pickled."""
    import pickle

    from traceview.errors import LimitExceeded, TraceviewError

    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    r, w = os.pipe()
    parent = os.getpid()
    ignored = signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child; its work is what the tests check
        os.close(r)
        _child(work, w, parent, ignored)
    os.close(w)
    try:
        if meanwhile is not None:
            try:
                meanwhile()
            except Exception:  # noqa: BLE001 - the child's work is what counts; an import failing here fails there too
                pass
        with os.fdopen(r, "rb") as f:
            data = f.read()
        _, status = os.waitpid(pid, 0)
    except BaseException:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            os.waitpid(pid, 0)
        raise
    if not data or status != 0:  # killed, or its answer not whole (the child printed why)
        sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
        if sig == signal.SIGINT or (sig is None and os.WEXITSTATUS(status) == EXIT_INTERRUPTED):
            raise KeyboardInterrupt
        if sig == signal.SIGKILL:
            raise LimitExceeded(f"the process reading {what} was killed (SIGKILL, as sent when memory runs out)")
        how = f"signal {sig}" if sig is not None else f"exit code {os.WEXITSTATUS(status)}"
        raise TraceviewError(f"the process reading {what} ended without an answer ({how})")
    if data[:1] == b"\x01":
        return memoryview(data)[1:]
    if data[:1] == b"\x02":  # the head's length, the head, the body
        n = int.from_bytes(data[1:9], "little")
        return Headed(pickle.loads(memoryview(data)[9:9 + n]), memoryview(data)[9 + n:])
    value, tb = pickle.loads(memoryview(data)[1:])
    if tb:
        value.__cause__ = _ChildTraceback(tb)
    raise value


def _child_interrupted(signum, frame) -> None:
    """SIGINT in a child of :func:`pickled_in_child`: end at once, silently (exit 130; a Python
    handler, not the default action, which polars' own handler would keep from acting)."""
    os._exit(EXIT_INTERRUPTED)


def _child(work, fd: int, parent: int, ignored: bool) -> None:
    """The forked child of :func:`pickled_in_child`: runs ``work``, writes to ``fd`` a flag byte
    (1: done) and the pickled result, or 0 and the pickled (exception, traceback text), and
    ends without the interpreter's teardown (exit code 1 when the answer could not be written).
    ``parent``: the parent's pid (a child whose parent is gone already ends); ``ignored``: the
    parent ignores SIGINT (a background job), and so does the child."""
    import pickle
    import traceback

    code = 0
    try:
        # the parent says it was interrupted, once; a parent that ignores SIGINT, its child too
        signal.signal(signal.SIGINT, signal.SIG_IGN if ignored else _child_interrupted)
        signal.set_wakeup_fd(-1)  # the parent's watchdog pipe: the child's signals are its own
        with contextlib.suppress(Exception):
            import ctypes

            ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: die with the parent
        if os.getppid() != parent:  # it died before the line above: nobody to answer
            os._exit(1)
        try:
            result, flag, tb = work(), b"\x01", ""
        except BaseException as e:  # noqa: BLE001 - every fault goes back to the parent
            from traceview.errors import TraceviewError

            tb = "" if isinstance(e, (TraceviewError, KeyboardInterrupt, MemoryError)) else traceback.format_exc()
            result, flag = (e, tb), b"\x00"
        head = None
        if isinstance(result, Headed):
            head, result, flag = pickle.dumps(result.head), result.body, b"\x02"
        if flag == b"\x00":
            try:
                answer = pickle.dumps(result)
                pickle.loads(answer)  # an exception class whose arguments do not rebuild it
            except Exception:  # noqa: BLE001 - an exception that does not pickle: its text
                answer = pickle.dumps((RuntimeError(f"{type(result[0]).__name__}: {result[0]}"), tb))
        with os.fdopen(fd, "wb") as f:
            f.write(flag)
            if head is not None:
                f.write(len(head).to_bytes(8, "little") + head)
            if flag == b"\x00":
                f.write(answer)
            else:  # streamed: no second copy of the answer
                pickle.dump(result, f, protocol=pickle.HIGHEST_PROTOCOL)
    except BaseException as e:  # noqa: BLE001 - the parent reads no answer and says so
        if not isinstance(e, (BrokenPipeError, KeyboardInterrupt)):  # not a parent gone or interrupted
            traceback.print_exc()
        code = 1
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code)


#: what a command imports once its trace is read, by the part of the work that needs it: imported
#: instead while the trace's last planes are still being decoded on the prefetch thread
#: (:func:`imports_while_decoding`); each name must import (a test checks)
AFTER_READ_IMPORTS = {
    "analysis": ("traceview.analysis.report", "traceview.analysis.findings", "traceview.analysis.export",
                 "traceview.analysis.steps.anatomy", "traceview.analysis.steps.phases",
                 "traceview.analysis.steps.family_roofline", "traceview.analysis.communication.collectives",
                 "traceview.analysis.communication.overlap", "traceview.analysis.memory.allocators",
                 "traceview.analysis.ops.hlo_detect", "traceview.model.interpreted",
                 "traceview.analysis.ops.distributions", "traceview.analysis.findings.decode",
                 "traceview.analysis.findings.quality", "traceview.analysis.findings.memory",
                 "traceview.analysis.findings.impact"),
    "table": ("traceview.render.terminal", "traceview.cli.outputs", "traceview.render.findings",
              "traceview.render.family_roofline", "traceview.render.hlo_view", "traceview.render.kernel_view",
              "traceview.render.memory_view", "traceview.render.phases_view"),
    "json": ("traceview.render.json",),
    "html": ("traceview.render.html",),
    "diff": ("traceview.analysis.compare.diff", "traceview.analysis.compare.pooled",
             "traceview.analysis.communication.collectives", "traceview.analysis.communication.overlap",
             "traceview.analysis.findings", "traceview.model.interpreted", "traceview.render.diff_terminal",
             "traceview.render.diff_summary", "traceview.cli.outputs", "traceview.analysis.findings.decode",
             "traceview.analysis.findings.impact", "traceview.analysis.findings.quality",
             "traceview.analysis.findings.memory", "numpy.random"),
}


def imports_while_decoding(*parts: str):
    """The ``idle`` work of :func:`traceview.model.load.load` for a command that goes on to
    ``parts`` (keys of :data:`AFTER_READ_IMPORTS`): it imports their modules, so the loading
    thread does while the prefetch thread finishes decoding what it would do after. Its
    ``steps`` (a generator, one module each) let the prefetch stop importing as soon as the
    trace is decoded (:meth:`traceview.read.prefetch.Prefetch.take`): the loading thread
    then reads on, and the modules left are imported beside the report
    (:func:`imports_beside`) or where they are used."""
    names = [m for p in parts for m in AFTER_READ_IMPORTS.get(p, ())]

    def steps():
        import importlib

        for m in names:
            importlib.import_module(m)
            yield m

    def idle() -> None:
        for _ in steps():
            pass
    idle.steps = steps  # one import at a time: the prefetch stops once the trace is decoded
    return idle


def imports_may_race() -> bool:
    """Whether importing on a second thread may break this one's imports: an import hook of
    pytest's is installed (its assertion rewriting, which rewrites traceview's modules as a
    plugin's, parses them with ``ast``, which CPython 3.11 does not make thread-safe). A
    command then leaves :func:`imports_beside` out, its modules imported where used."""
    return any(type(f).__module__.startswith("_pytest") for f in sys.meta_path)


@contextlib.contextmanager
def imports_beside(idle):
    """``idle`` (:func:`imports_while_decoding`'s) run on a thread of its own inside, while this
    one computes: polars' work (a report's sections) leaves the GIL free most of the time and
    the second core idle, where the imports the output needs can run. Joined when the block
    ends normally (what it imported is then whole; a module it failed to import is imported
    again where it is used, which raises there), left to run when it raises. A short GIL switch
    interval (:data:`DECODE_SWITCH_INTERVAL_S`) inside, so this thread waits little for the GIL
    when a polars call returns. ``idle`` None: nothing."""
    if idle is None:
        yield
        return

    def work() -> None:
        try:
            idle()
        except Exception:  # noqa: BLE001 - imported again, and raised, where it is used
            pass

    saved = sys.getswitchinterval()
    sys.setswitchinterval(DECODE_SWITCH_INTERVAL_S)
    try:
        thread = threading.Thread(target=work, name="traceview-imports", daemon=True)
        thread.start()
    except RuntimeError:  # no thread can be started: imported where they are used
        sys.setswitchinterval(saved)
        yield
        return
    try:
        yield
        thread.join()
    finally:
        sys.setswitchinterval(saved)


@contextlib.contextmanager
def decoding_beside_imports():
    """A short GIL switch interval (:data:`DECODE_SWITCH_INTERVAL_S`) inside: a thread
    decoding a file (:mod:`traceview.read.prefetch`) takes the GIL for short Python steps
    between long C calls, and with the default 5 ms interval each step waits up to 5 ms for
    the importing thread to let go. Restored on exit."""
    saved = sys.getswitchinterval()
    sys.setswitchinterval(DECODE_SWITCH_INTERVAL_S)
    try:
        yield
    finally:
        sys.setswitchinterval(saved)


class ClosedStream:
    """Stands in for a standard stream the process was started without (``>&-``): writes
    raise ``OSError(EBADF)`` (reported as "cannot write standard output", exit 2), or are
    dropped when ``silent`` (stderr); flushing does nothing."""

    def __init__(self, name: str, silent: bool = False):
        self.name, self.silent = name, silent

    def write(self, text: str) -> int:
        if self.silent:
            return len(text)
        raise OSError(errno.EBADF, f"{self.name} is closed")

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False


@contextlib.contextmanager
def standard_streams():
    """Closed standard streams replaced by :class:`ClosedStream` inside (stdout: writes fail,
    ``-o`` still works; stderr: messages are dropped, not sent to stdout), and text that cannot
    be encoded written with backslash escapes; put back after."""
    saved = sys.stdout, sys.stderr
    if sys.stdout is None:
        sys.stdout = ClosedStream("standard output")
    if sys.stderr is None:
        sys.stderr = ClosedStream("standard error", silent=True)
    for stream in (sys.stdout, sys.stderr):
        # a path's undecodable bytes (lone surrogates) are written as \xff, never a traceback
        try:
            stream.reconfigure(errors="backslashreplace")
        except (AttributeError, ValueError, OSError):
            pass
    try:
        yield
    finally:
        if isinstance(sys.stdout, ClosedStream) or isinstance(sys.stderr, ClosedStream):
            sys.stdout, sys.stderr = saved


def silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush cannot fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # a closed stdout is a ClosedStream: no descriptor
        pass


def exit_now(rc: int, *, teardown: bool = False) -> None:
    """Exit with ``rc`` once stdout and stderr are flushed, without the interpreter's
    teardown (freeing every frame and array one by one, joining polars' thread pool):
    traceview registers no exit handler, and every output is written and closed before this
    is called. ``teardown`` (the engine subcommand: JAX may have exit handlers) or a stream
    that cannot flush take the normal ``sys.exit``; an interrupted command
    (:data:`EXIT_INTERRUPTED`) never does."""
    exiting()
    if teardown and rc not in (EXIT_INTERRUPTED, EXIT_TERMINATED):
        sys.exit(rc)
    try:
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:
                stream.flush()
    except Exception:  # noqa: BLE001 - a stream that cannot flush: the normal exit reports nothing more
        if rc not in (EXIT_INTERRUPTED, EXIT_TERMINATED):
            sys.exit(rc)
    if rc in (EXIT_INTERRUPTED, EXIT_TERMINATED):
        _release_semaphores()
    os._exit(rc)


def _release_semaphores() -> None:
    """Unlink the named semaphores a ``--workers`` pool created (multiprocessing's finalizers
    of exit priority 0 and up: ``SemLock._cleanup``; the interpreter's exit, which
    :func:`os._exit` skips, runs them): else its resource tracker, when it outlives this
    process (a SIGTERM sent to traceview alone), warns of them on stderr."""
    mp_util = sys.modules.get("multiprocessing.util")
    if mp_util is None:
        return
    try:
        mp_util._run_finalizers(0)
    except Exception:  # noqa: BLE001 - the exit goes on whatever a finalizer raises
        pass


_verdict = [0]  # the exit code a command's verdict gives, set before its output is written


def verdict(rc: int) -> int:
    """Record ``rc``, the exit code of a command's verdict (``verify``'s failed check, ``history
    --fail-on-regression``'s regression), before its output is written, and return it: a reader
    that stops early (``| head``, ``| true``) ends the command quietly with this code
    (:func:`cut_short`), not 0."""
    _verdict[0] = rc
    return rc


def cut_short() -> int:
    """The exit code of a command whose reader stopped early: its :func:`verdict`, else 0."""
    return _verdict[0]


# ------------------------------------------------------------------ interrupts
_said = threading.Lock()  # taken once, by whoever prints the interrupt line
_who = ["traceview"]
#: what ended the command and its exit code: a SIGINT's, or a SIGTERM's once one arrived first
_how = ["interrupted", EXIT_INTERRUPTED]


def handle_interrupts(who: str = "traceview", one_arena: bool = False) -> None:
    """Ctrl-C (SIGINT) ends the command with one line, ``<who>: interrupted``, and exit code
    :data:`EXIT_INTERRUPTED`, wherever it lands. Called first thing by the entry point.

    * the first SIGINT raises ``KeyboardInterrupt`` in the main thread (``finally`` blocks
      run: the engine stops the profiler), or ends the process at once inside an import
      (numpy's, half done, prints the exception itself); the entry point prints the line and calls
      :func:`exit_now` (``os._exit``: no interpreter teardown, where a late exception would
      print a second traceback, and no JAX exit handlers, which crashed when interrupted);
    * a second SIGINT, or one during the exit, ends the process at once, as does a first one
      that lands where Python cannot raise it (a garbage-collector callback: :func:`_unraisable`);
    * a watchdog thread, woken by the signal itself (``signal.set_wakeup_fd``, written at C
      level even while the main thread is inside a long C call such as an XLA compilation),
      ends the process :data:`INTERRUPT_GRACE_S` after the first SIGINT if the main thread has
      not by then.

    A SIGTERM (``kill``, a job scheduler, a container stopped) first ends the command the same
    way, with ``<who>: terminated`` and exit code :data:`EXIT_TERMINATED` (its default action
    kills the process where it stands: a ``--workers`` pool's semaphores were left to the
    resource tracker, which warned of them), unless SIGTERM is ignored or handled already.

    Nothing is installed when SIGINT is ignored (a background job of a non-interactive
    shell) or handled by someone else already, or off the main thread. ``one_arena``:
    :func:`one_malloc_arena` first (a one-shot command)."""
    _who[0] = who
    _owner[0] = os.getpid()
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        return
    try:
        r, w = os.pipe()
        os.set_blocking(w, False)
        signal.set_wakeup_fd(w, warn_on_full_buffer=False)
    except (OSError, ValueError):
        r = None
    signal.signal(signal.SIGINT, _first_interrupt)
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _first_terminate)
    _default_unraisable[0] = sys.unraisablehook
    sys.unraisablehook = _unraisable
    if r is not None:
        if one_arena:  # before the watchdog's thread allocates
            one_malloc_arena()
        threading.Thread(target=_watchdog, args=(r,), name="traceview-interrupt", daemon=True).start()


_default_unraisable: list = [None]
#: the process that installed the handlers (its forked children say nothing: :func:`_in_a_child`)
_owner: list = [None]


def _unraisable(unraisable) -> None:
    """``sys.unraisablehook`` while :func:`handle_interrupts` is in force: the KeyboardInterrupt
    of a Ctrl-C that landed where Python cannot raise it (a garbage-collector callback, such as
    JAX's, or a ``__del__``) ends the process as interrupted (one line, exit 130) instead of
    printing "Exception ignored" with a traceback and running on; anything else goes to the
    hook that was there before."""
    if issubclass(unraisable.exc_type, KeyboardInterrupt) and interrupted():
        _end_interrupted()
    (_default_unraisable[0] or sys.__unraisablehook__)(unraisable)


def _first_interrupt(signum, frame) -> None:
    _in_a_child()
    signal.signal(signal.SIGINT, _next_interrupt)
    if _importing(frame):  # a module half imported: some (numpy) print the KeyboardInterrupt's traceback
        _end_interrupted()
    raise KeyboardInterrupt


def _first_terminate(signum, frame) -> None:
    """A first SIGTERM: as a first SIGINT, said and coded as a SIGTERM's (:data:`_how`)."""
    if not interrupted():
        _how[:] = ["terminated", EXIT_TERMINATED]
    signal.signal(signal.SIGTERM, _next_interrupt)
    if interrupted():  # a SIGINT came first: this one ends it at once
        _end_interrupted()
    _first_interrupt(signum, frame)


def _importing(frame) -> bool:
    """Whether ``frame`` runs inside an import (a module's top level run by importlib)."""
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


def interrupted() -> bool:
    """Whether a SIGINT arrived (checked where an error is reported: an import or a library
    can turn the ``KeyboardInterrupt`` into another error, numpy's import an ImportError)."""
    return signal.getsignal(signal.SIGINT) is _next_interrupt


def _next_interrupt(signum, frame) -> None:
    _end_interrupted()


def _in_a_child() -> None:
    """In a child forked by :func:`pickled_in_child` (a handler inherited before the child set
    its own, or a signal that tripped before the fork): end silently, the parent says it once."""
    if _owner[0] is not None and os.getpid() != _owner[0]:
        os._exit(_how[1])


def _watchdog(fd: int) -> None:
    """Wait for a SIGINT on the wakeup pipe, then give the main thread :data:`INTERRUPT_GRACE_S`."""
    import time

    while True:
        try:
            got = os.read(fd, 64)
        except InterruptedError:
            continue
        except OSError:
            return
        if not got:
            return
        if signal.SIGINT in got or signal.SIGTERM in got:
            time.sleep(INTERRUPT_GRACE_S)
            _end_interrupted()


def say_interrupted(raw: bool = False) -> int:
    """Print ``<who>: interrupted`` (``terminated`` after a SIGTERM) on stderr (once per
    process, whoever asks) and return :data:`EXIT_INTERRUPTED` (:data:`EXIT_TERMINATED`).
    ``raw``: straight to descriptor 2 (from a signal handler or a thread, where the buffered
    stream may be in use)."""
    if _said.acquire(blocking=False):
        line = f"{_who[0]}: {_how[0]}\n"
        try:
            if raw or sys.stderr is None or sys.stderr is not sys.__stderr__:  # redirected (an MCP tool's
                os.write(2, line.encode())  # call captures it): the line goes to the process's stderr
            else:
                sys.stderr.write(line)
                sys.stderr.flush()
        except (OSError, ValueError, RuntimeError):
            pass
    return _how[1]


def _end_interrupted() -> None:
    _in_a_child()
    say_interrupted(raw=True)
    _release_semaphores()
    os._exit(_how[1])


def exiting() -> None:
    """From here on a SIGINT ends the process at once with :data:`EXIT_INTERRUPTED` (the
    command's work is done; nothing is left to stop cleanly)."""
    if threading.current_thread() is threading.main_thread() and \
            signal.getsignal(signal.SIGINT) in (_first_interrupt, _next_interrupt):
        signal.signal(signal.SIGINT, _next_interrupt)
