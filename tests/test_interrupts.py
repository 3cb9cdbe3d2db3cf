"""Ctrl-C anywhere: one line on stderr, exit 130, no traceback, in every command and the engine
(issue 24, item 4). The signal goes to the whole process group, as a terminal's Ctrl-C does
(worker processes included), once the command's entry point runs (its interrupt watchdog
thread exists: the interpreter's own start-up, before any traceview code, is Python's)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TPU = "tpu_v6e_4chip_psum.xplane.pb"


def _threads(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as fh:
            return next(int(line.split()[1]) for line in fh if line.startswith("Threads:"))
    except (OSError, StopIteration, ValueError):
        return 0


def interrupt(argv: list[str], delay: float, *, env: dict | None = None, stdin=subprocess.DEVNULL, cwd=None,
              after: str | None = None, sig: int = signal.SIGINT, group: bool = True):
    """Run ``traceview ARGV``, send SIGINT (``sig``) to its process group (``group`` False: to
    the process alone, as ``kill PID``) ``delay`` s after its entry point started (or after it
    wrote a stderr line starting with ``after``); (exit code, stderr lines, seconds from start
    to the signal)."""
    import threading

    p = subprocess.Popen([sys.executable, "-m", "traceview.cli", *argv], stdin=stdin, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True, start_new_session=True, cwd=cwd,
                         # SIGINT as a terminal leaves it (a background job's parent may ignore it)
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
                         env={**os.environ, "TRACEVIEW_NO_CACHE": "1", **(env or {})})
    lines: list[str] = []
    seen = threading.Event()

    def read():
        for line in p.stderr:
            lines.append(line.rstrip("\n"))
            if after is not None and line.startswith(after):
                seen.set()
        seen.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    t0 = time.monotonic()
    try:
        if after is not None:
            seen.wait(300)
        while p.poll() is None and _threads(p.pid) < 2 and time.monotonic() - t0 < 60:
            time.sleep(0.005)
        time.sleep(delay)
        sent = time.monotonic() - t0
        if p.poll() is None:
            if group:
                os.killpg(p.pid, sig)
            else:
                p.send_signal(sig)
        p.wait(timeout=120)
        reader.join(10)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    return p.returncode, lines, sent


def _check(rc, lines, what, line="traceview: interrupted", code=130):
    assert "Traceback" not in "\n".join(lines), (what, lines)
    assert rc == code and lines == [line], (what, rc, lines)


def test_ctrl_c_during_analyze_is_one_line_and_exit_130(shared_traces):
    """13 interrupts spread over ``analyze`` of a TPU trace (start-up, imports, reading,
    analysis, output): each one line and exit 130. An interrupt later than the run (a fast
    machine) finds it finished: exit 0, nothing on stderr."""
    done = 0
    for delay in (0, 0.005, 0.02, 0.07, 0.15, 0.3, 0.5, 0.65, 0.8, 1.0, 1.3, 1.8, 2.6):
        rc, lines, _ = interrupt(["analyze", str(shared_traces / TPU), "--top", "5"], delay)
        if rc == 0 and delay >= 0.3:  # an idle machine finishes this small trace in about half a second
            assert lines == [], lines
            continue
        _check(rc, lines, delay)
        done += 1
    assert done >= 5


def test_ctrl_c_in_every_command(shared_traces, tmp_path):
    """report, diff, verify, ladder, history, query, export and mcp (waiting on its client), each
    interrupted mid-run (imports, reading, analysis: the delays differ)."""
    v6e, b4, b8 = str(shared_traces / TPU), str(ROOT / "fixtures/greedy_b4"), str(ROOT / "fixtures/greedy_b8")
    commands = {
        "report": ["report", v6e, "-o", str(tmp_path / "r.html")],
        "diff": ["diff", v6e, v6e],
        "verify": ["verify", v6e, "-c", "op matching . present"],
        "ladder": ["ladder", b4, b8, "--x", "4,8"],
        "history": ["history", b4, b8],
        "query": ["query", v6e, "SELECT * FROM ops"],
        "export": ["export", v6e, "-o", str(tmp_path / "w")],
    }
    for (name, argv), delay in zip(commands.items(), (0.3, 1.0, 0.6, 1.2, 0.4, 0.8, 0.9)):
        # a command that finished before the signal (a fast machine: exit 0, nothing on
        # stderr but what it says on success, as export's notes) is interrupted again sooner,
        # until one interrupt lands mid-run
        for _ in range(6):
            rc, lines, _ = interrupt(argv, delay)
            if rc == 0 and not any(x.startswith("traceview: interrupted") or "Traceback" in x for x in lines):
                delay /= 2
                continue
            # what a command says on its way to success (export's notes, "wrote ...") may come
            # before an interrupt that lands in its last milliseconds
            said = [x for x in lines if not x.startswith(("traceview: note:", "wrote "))]
            _check(rc, said, (name, delay))
            break
        else:
            raise AssertionError(f"{name} always finished before the interrupt (last delay {delay:.3f} s)")
    report = tmp_path / "r.html"  # written whole (os.replace) or not at all
    assert not report.exists() or report.read_text().rstrip().endswith("</html>")
    rc, lines, _ = interrupt(["mcp", "--root", str(shared_traces)], 1.5, stdin=subprocess.PIPE)
    _check(rc, lines, "mcp")


def test_sigterm_during_a_pool_read_is_one_line_and_exit_143(shared_traces, tmp_path):
    """``kill PID`` (SIGTERM to traceview alone) while ``analyze --workers 2`` reads ten hosts:
    ``traceview: terminated``, exit 143, and nothing else (its default action killed the process
    where it stood, and the resource tracker then warned of the pool's leaked semaphores)."""
    run = tmp_path / "logs" / "plugins" / "profile" / "2026_01_01_00_00_00"
    run.mkdir(parents=True)
    for h in range(10):  # 8.5 MB: past read.batch.PARALLEL_MIN_BYTES, so the pool starts
        os.link(shared_traces / TPU, run / f"host{h}.xplane.pb")
    delay = 1.2
    for _ in range(6):
        rc, lines, _ = interrupt(["analyze", str(tmp_path / "logs"), "--workers", "2"], delay,
                                 sig=signal.SIGTERM, group=False)
        if rc == 0 and lines == []:  # finished first: sooner
            delay /= 2
            continue
        _check(rc, lines, delay, line="traceview: terminated", code=143)
        break
    else:
        raise AssertionError(f"analyze always finished before the SIGTERM (last delay {delay:.3f} s)")


@pytest.mark.slow
def test_ctrl_c_during_the_engine_stops_cleanly(tmp_path):
    """``traceview engine profile`` interrupted while JAX is imported, and while the engine
    compiles its programs on first use (after its start-up lines), where it used to print
    54-82 lines and exit 139: one line, exit 130, no traceback. The verification lines the
    engine prints on start (``engine: ...``) may precede it."""
    argv = ["engine", "profile", "--log-dir", str(tmp_path / "prof"), "--no-precompile", "--max-tokens", "64"]
    for delay, after in ((1.0, None), (0.5, "engine: decode donation")):
        rc, lines, sent = interrupt(argv, delay, after=after)
        said = [x for x in lines if not x.startswith("engine: ")]
        _check(rc, said, (delay, after, lines), line="traceview engine: interrupted")
        assert after is None or any(x.startswith(after) for x in lines)


def test_an_interrupted_write_leaves_no_temporary_file(tmp_path, monkeypatch):
    """Ctrl-C while an output is renamed into place: the old output stays whole and no
    ``.NAME.*.tmp`` is left beside it."""
    from traceview.read import guard

    out = tmp_path / "o.json"
    out.write_text("old")

    def interrupted(*a):
        raise KeyboardInterrupt

    monkeypatch.setattr(guard.os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        guard.write_atomic(out, "new")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o.json"] and out.read_text() == "old"


def test_ctrl_c_inside_a_garbage_collector_callback_is_one_line_and_exit_130(tmp_path):
    """A Ctrl-C that lands inside a garbage-collector callback (JAX registers one) cannot be
    raised there: Python printed "Exception ignored in: <function _xla_gc_callback>" with a
    traceback and ran on (seen once in a clean-clone CI run of the engine's Ctrl-C test). It
    now ends the process as any first interrupt would be reported: one line, exit 130."""
    import subprocess
    import sys
    import textwrap

    script = tmp_path / "gc_interrupt.py"
    script.write_text(textwrap.dedent("""
        import gc, os, signal, time
        from traceview.cli import process
        process.handle_interrupts("traceview")
        fired = []
        def cb(phase, info):
            if phase == "start" and not fired:
                fired.append(1)
                os.kill(os.getpid(), signal.SIGINT)
                for _ in range(2000):
                    time.sleep(0.001)  # the handler runs here, inside the collector's callback
        gc.callbacks.append(cb)
        gc.collect()
        time.sleep(2)
        print("ran on", flush=True)
    """))
    p = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert p.returncode == 130, (p.stdout, p.stderr)
    assert p.stderr.strip().splitlines() == ["traceview: interrupted"] and p.stdout == ""


def test_ctrl_c_while_the_arguments_are_parsed_is_one_line_and_exit_130(tmp_path):
    """A Ctrl-C while argparse parses (it restores its actions in a ``finally`` block that then
    fails on a name the interrupt left unbound: a clean-clone CI run saw a traceback ending in
    'save_nargs'): one line, exit 130."""
    import subprocess
    import sys
    import textwrap

    script = tmp_path / "parse_interrupt.py"
    script.write_text(textwrap.dedent("""
        import argparse, os, signal, sys, time
        real = argparse.ArgumentParser.format_usage
        def interrupted(self):
            os.kill(os.getpid(), signal.SIGINT)  # lands while argparse formats the usage
            time.sleep(0.2)
            return real(self)
        argparse.ArgumentParser.format_usage = interrupted
        sys.argv = ["traceview", "analyze", "x.xplane.pb"]
        from traceview.cli import entry
        entry()
    """))
    p = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert p.returncode == 130, (p.stdout, p.stderr)
    assert p.stderr.strip().splitlines() == ["traceview: interrupted"]


def test_the_command_imports_little_before_its_ctrl_c_handling(tmp_path):
    """What the ``traceview`` script imports before :func:`traceview.cli.entry` installs the
    Ctrl-C handling is all a Ctrl-C can land in untreated: neither argparse (with gettext,
    imported by the parser after the handling) nor numpy or polars. A fresh-user run saw a
    traceback from an interrupt inside argparse's import."""
    import subprocess
    import sys

    code = ("import sys; before = set(sys.modules); import traceview.cli; "
            "print(sorted(m for m in set(sys.modules) - before if m.split('.')[0] in "
            "('argparse', 'gettext', 'numpy', 'polars', 'locale', 'traceview')))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert eval(p.stdout) == ["traceview", "traceview.cli", "traceview.errors"]


def _sigint_state() -> tuple[bool, bool]:
    """(SIGINT blocked, SIGINT ignored) in the calling process (a pool worker)."""
    return signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, []), signal.getsignal(signal.SIGINT) == signal.SIG_IGN


@pytest.mark.skipif(not hasattr(signal, "pthread_sigmask"), reason="POSIX signal masks")
def test_pool_workers_start_with_ctrl_c_held_then_ignore_it():
    """``--workers N``: the pool's spawned workers start with SIGINT blocked (a Ctrl-C while
    their interpreter starts printed its KeyboardInterrupt traceback, 8 runs in 40 before),
    then ignore it and unblock it in their initializer; the parent's mask is restored."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    from traceview.read.batch import _interrupts_held, _worker_init

    before = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(1, mp_context=ctx) as bare, ProcessPoolExecutor(
            1, mp_context=ctx, initializer=_worker_init) as pool:
        with _interrupts_held():
            assert signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, [])
            started_bare, started = bare.submit(_sigint_state), pool.submit(_sigint_state)
        assert signal.pthread_sigmask(signal.SIG_BLOCK, []) == before
        assert started_bare.result(timeout=60) == (True, False)  # the mask is inherited through spawn
        assert started.result(timeout=60) == (False, True)  # the initializer: ignored, unblocked


_POOL_THEN_WAIT = """
import multiprocessing, os, sys, time
from concurrent.futures import ProcessPoolExecutor
from traceview.read.batch import _worker_init

if __name__ == "__main__":
    pool = ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn"), initializer=_worker_init)
    print(*sorted({pool.submit(os.getpid).result() for _ in range(8)}), flush=True)
    time.sleep(600)
"""


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_pool_workers_end_when_the_process_that_started_them_is_killed(sig, tmp_path):
    """``--workers N`` killed (SIGKILL, or SIGTERM as ``timeout`` sends): its workers end too
    (they held both ends of the pool's queues and waited for ever, 350 MB each on a 109 MB trace)."""
    import traceview

    script = tmp_path / "pool.py"
    script.write_text(_POOL_THEN_WAIT)
    p = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, cwd=tmp_path,
                         env={**os.environ, "PYTHONPATH": str(Path(traceview.__file__).parent.parent)})
    try:
        workers = [int(x) for x in p.stdout.readline().split()]
        assert workers and all(_alive(w) for w in workers)
        p.send_signal(sig)
        p.wait(timeout=60)
        deadline = time.monotonic() + 30
        while any(_alive(w) for w in workers) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not any(_alive(w) for w in workers)
    finally:
        p.kill()


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, ended and not yet reaped by init, counts as ended)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_the_line_reaches_the_process_stderr_while_a_call_captures_it(capfd, monkeypatch):
    """An MCP tool call captures sys.stderr (redirect_stderr); a SIGTERM landing then ended the
    server with exit 143 and no line (5 of 5 at 0.25-0.35 s into an analyze call): the line
    goes to descriptor 2 whenever sys.stderr is not the process's own."""
    import contextlib
    import io
    import threading

    from traceview.cli import process

    monkeypatch.setattr(process, "_said", threading.Lock())
    monkeypatch.setattr(process, "_how", ["terminated", process.EXIT_TERMINATED])
    captured = io.StringIO()
    with contextlib.redirect_stderr(captured):
        assert process.say_interrupted() == 143
    assert captured.getvalue() == "" and capfd.readouterr().err == "traceview: terminated\n"
