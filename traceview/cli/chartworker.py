"""The report's charts drawn in a second process, started before the trace is read.

Importing matplotlib and drawing a process's first figure cost ``report`` more than reading a
3M-event trace's tables (``benchmarks/RESULTS.md``). :class:`ChartWorker` starts a Python
process that imports matplotlib while this one reads the trace; the charts are then drawn
there while the report's tables are built here (one worker: on 2 cores a second one, or a
throw-away warm-up figure, costs the reader more CPU than it saves). A worker is a child of the command only: it reads requests from its stdin and answers on its
stdout, both pickled, and never touches a file.

Any failure of the worker (it did not start, died, answered an error, or took longer than
:data:`ANSWER_S`) makes that chart be drawn in this process instead, so the report and its
errors are the same with or without it.
"""

from __future__ import annotations

import os
import pickle
import struct
import subprocess
import sys
import threading
import time

#: Seconds to wait for one chart from the worker before drawing it here.
ANSWER_S = 60.0

#: The worker's niceness increment (``os.nice``): its imports and charts take the CPU time the
#: command's own threads leave (on 2 cores they otherwise slow the read and the analyses they
#: overlap); at 10 the worker still gets about a tenth of a core a busy command thread would
#: take (Linux CFS weights 110 against 1024), so it is not starved on a loaded machine.
NICE = 10

#: the worker's program (argv[1]: the parent's pid). On Linux it asks to die with its parent
#: (PR_SET_PDEATHSIG) before anything else, and ends at once if the parent is gone already: an
#: interrupted report leaves no worker importing matplotlib behind it
_CHILD = """
import sys
if sys.platform.startswith("linux"):
    try:
        import ctypes, os, signal
        ctypes.CDLL(None).prctl(1, signal.SIGKILL)
        if os.getppid() != int(sys.argv[1]):
            sys.exit(0)
    except (OSError, AttributeError, ValueError, IndexError):
        pass
from traceview.cli.chartworker import serve
serve()
"""


def serve() -> None:
    """The worker's loop: import matplotlib's figure and SVG backend, then answer each pickled ``(name, args)`` on
    stdin with a pickled ``("ok", chart)`` or ``("error", text)`` on stdout (each preceded by
    its length, 8 bytes little-endian), until EOF (on Linux it dies with its parent:
    :data:`_CHILD`). It runs niced by :data:`NICE`."""
    try:
        os.nice(NICE)
    except (OSError, AttributeError):  # no os.nice (Windows) or not permitted: as it is
        pass
    from traceview.render.charts import CHARTS

    import matplotlib.figure  # noqa: F401
    import matplotlib.backends.backend_svg  # noqa: F401
    out = sys.stdout.buffer
    inp = sys.stdin.buffer
    while True:
        try:
            name, args = pickle.load(inp)
        except EOFError:
            return
        try:
            answer = ("ok", CHARTS[name](*args))
        except Exception as e:  # reported, then drawn by the parent, which raises it itself
            answer = ("error", f"{type(e).__name__}: {e}")
        data = pickle.dumps(answer, protocol=pickle.HIGHEST_PROTOCOL)
        out.write(struct.pack("<Q", len(data)) + data)
        out.flush()


class _Child:
    """One worker process and its answers, in the order asked. A thread here reads each
    answer as soon as the worker writes it, so the worker never waits on a full pipe (an
    answer is an SVG of up to a few hundred KB) before drawing the next chart."""

    def __init__(self) -> None:
        self.answers: list = []
        self.sent = 0
        self._got = threading.Condition()
        self._done = False  # the reader stopped: the worker ended, failed or was closed
        try:
            self.proc = subprocess.Popen([sys.executable, "-P", "-c", _CHILD, str(os.getpid())],
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                         bufsize=0, env=_child_env())
        except OSError:
            self.proc = None
            self._done = True
            return
        threading.Thread(target=self._read_answers, args=(self.proc.stdout,), name="traceview-charts",
                         daemon=True).start()

    def _read_answers(self, stream) -> None:
        try:
            while True:
                head = _read_exactly(stream, 8)
                if head is None:
                    break
                (size,) = struct.unpack("<Q", head)
                data = _read_exactly(stream, size)
                if data is None:
                    break
                answer = pickle.loads(data)
                with self._got:
                    self.answers.append(answer)
                    self._got.notify_all()
        except Exception:  # noqa: BLE001 - died or answered garbage: the charts left are drawn here
            pass
        finally:
            with self._got:
                self._done = True
                self._got.notify_all()

    def close(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None:
            for stream in (proc.stdin, proc.stdout):
                try:
                    stream.close()
                except OSError:
                    pass
            proc.kill()
            proc.wait()

    def send(self, name: str, args) -> int | None:
        """The request's index, or None when it could not be sent (the child is then closed)."""
        if self.proc is None:
            return None
        try:
            self.proc.stdin.write(pickle.dumps((name, args), protocol=pickle.HIGHEST_PROTOCOL))
            self.proc.stdin.flush()
        except (OSError, pickle.PicklingError, TypeError, AttributeError):
            self.close()
            return None
        self.sent += 1
        return self.sent - 1

    def answer(self, index: int):
        """The answer to request ``index``, or None when the child cannot give one within
        :data:`ANSWER_S` (it is then closed)."""
        deadline = time.monotonic() + ANSWER_S
        with self._got:
            while len(self.answers) <= index and not self._done:
                wait = deadline - time.monotonic()
                if wait <= 0:
                    break
                self._got.wait(wait)
            if len(self.answers) > index:
                return self.answers[index]
        self.close()
        return None


def _child_env() -> dict:
    """The worker's environment: this one's, with the folder this process imported traceview
    from first on ``PYTHONPATH`` unless it is a site-packages folder. The worker runs with
    ``-P`` (its working directory, where a ``traceview.py`` or ``matplotlib.py`` of a
    downloaded profile bundle may lie, is not on its ``sys.path``), so it imports the same
    traceview as this process, installed or not."""
    import site

    import traceview

    root = os.path.dirname(os.path.dirname(os.path.abspath(traceview.__file__)))
    env = dict(os.environ)
    sites = {os.path.abspath(p) for p in site.getsitepackages() + [site.getusersitepackages()]}
    if root not in sites:  # (an installed traceview is found as it is; site-packages is not put first)
        env["PYTHONPATH"] = os.pathsep.join([root] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    return env


def _read_exactly(stream, n: int) -> bytes | None:
    """``n`` bytes of ``stream`` (a raw pipe), or None at its end before them."""
    parts, got = [], 0
    while got < n:
        try:
            part = stream.read(min(n - got, 1 << 20))
        except (OSError, ValueError):  # closed under the reader
            return None
        if not part:
            return None
        parts.append(part)
        got += len(part)
    return b"".join(parts)


class ChartWorker:
    """A drawer for :func:`traceview.render.html.render_report` backed by ``processes`` worker
    processes, asked in turn (charts drawn side by side when there are several).

    Use as a context manager; ``submit(name, *args)`` sends one chart and returns a callable
    that gives it. Never raises for the workers' own failures: the chart is drawn in this
    process instead (see the module docstring)."""

    def __init__(self, processes: int = 1) -> None:
        self._children = [_Child() for _ in range(max(1, processes))]
        self._next = 0
        self._asked: dict = {}  # (name, pickled args) -> the pending chart: asked twice, drawn once

    def __enter__(self) -> ChartWorker:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def alive(self) -> int:
        """How many worker processes are still in use."""
        return sum(c.proc is not None and c.proc.poll() is None for c in self._children)

    @property
    def answered(self) -> int:
        """How many charts the workers have drawn."""
        return sum(len(c.answers) for c in self._children)

    def close(self) -> None:
        """Stop the workers (at once: they hold nothing worth waiting for)."""
        for c in self._children:
            c.close()

    def submit(self, name: str, *args):
        """The pending chart ``name`` of ``args`` (a callable giving it); a chart asked for
        again with equal arguments (submitted early, while the report was still being
        built, then by the renderer) is the same pending chart."""
        try:
            key = (name, pickle.dumps(args, protocol=pickle.HIGHEST_PROTOCOL))
        except (pickle.PicklingError, TypeError, AttributeError):
            key = None
        if key is not None and key in self._asked:
            return self._asked[key]
        took = self._submit(name, *args)
        if key is not None:
            self._asked[key] = took
        return took

    def _submit(self, name: str, *args):
        from traceview.render.charts import CHARTS

        def inline():
            return CHARTS[name](*args)

        child = self._children[self._next % len(self._children)]
        self._next += 1
        index = child.send(name, args)
        if index is None:
            result = inline()
            return lambda: result

        def take():
            answer = child.answer(index)
            return answer[1] if answer is not None and answer[0] == "ok" else inline()

        return take
