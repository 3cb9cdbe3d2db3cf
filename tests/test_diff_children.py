"""diff reads each profile in a forked child process of its own (traceview.cli.process:
``can_fork``, ``pickled_in_child``) from FORK_INPUT_BYTES of input: the same output, faults and
exit codes as in one process, nothing left behind on Ctrl-C, and never a fork once polars'
pool threads run (a child would wait for them forever).

Each case runs in a fresh interpreter: the test process itself has polars' pool running."""

from __future__ import annotations

import json
import os
import pickle
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="diff forks on Linux only")


def _python(code: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], capture_output=True, text=True,
                          timeout=timeout)


def test_can_fork_until_polars_pool_threads_run():
    """Importing polars starts no pool thread (a fork is safe); its first parallel work starts
    threads named as POLARS_POOL_THREADS says (a fork is refused); small inputs never fork."""
    r = _python("""
        import os
        import polars as pl
        from traceview.cli import process
        print(process.can_fork(1 << 40), process.can_fork(process.FORK_INPUT_BYTES - 1))
        pl.DataFrame({"a": list(range(200_000))}).group_by("a").len()
        pool = [n for n in process.thread_names() if n.startswith(process.POLARS_POOL_THREADS) and n != "polars-ooc-clea"]
        print(bool(pool), process.can_fork(1 << 40))
    """)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["True", "False", "True", "False"]


_FORCED = """
    import os, sys
    from traceview.cli import main, process
    process.FORK_INPUT_BYTES = 0
    forks, real = [], os.fork
    def fork():
        pid = real()
        if pid:
            forks.append(pid)
        return pid
    os.fork = fork
    rc = main(sys.argv[1:])
    print("forks", len(forks), "rc", rc)
"""


def test_diff_in_children_equals_diff_in_one_process(shared_traces, tmp_path):
    """The JSON of a diff read in two children (one fork per side) and of a pooled diff (three)
    equals the one process's, byte for byte."""
    from traceview.cli import main

    fx = Path(__file__).resolve().parents[1] / "fixtures"
    cases = [[str(shared_traces / "mi300x_jax_gemm_sweep.xplane.pb"), str(shared_traces / "mi300x_jax_attention.xplane.pb")],
             ["--base", str(fx / "greedy_b4"), str(fx / "topp_b4"), "--treatment", str(fx / "nodonate_b4")]]
    for n, case in enumerate(cases):
        here, there = tmp_path / f"here{n}.json", tmp_path / f"there{n}.json"
        assert main(["diff", *case, "--no-cache", "-o", str(here)]) == 0
        r = _python(_FORCED, "diff", *case, "--no-cache", "-o", str(there))
        assert r.returncode == 0, r.stderr
        assert r.stdout.split()[-4:] == ["forks", str(3 if "--base" in case else 2), "rc", "0"]
        assert "Traceback" not in r.stderr
        assert there.read_bytes() == here.read_bytes()
        assert json.loads(here.read_text())["steps"]


def test_later_children_are_forked_with_what_the_parent_imported_meanwhile(shared_traces):
    """While the first side's child reads, the parent imports the reader, polars and the
    comparison (a ``meanwhile`` that fails is ignored): the second child is forked with them,
    and the parent's polars pool never starts (it could not fork again)."""
    r = _python(_FORCED.replace('print("forks"', 'print("pool", any(n.startswith(process.POLARS_POOL_THREADS) and '
                                'n != "polars-ooc-clea" for n in process.thread_names()), "parent_polars", '
                                '"polars" in sys.modules, "compare", "traceview.analysis.compare.diff" in sys.modules)\n'
                                '    print("forks"'),
                "diff", str(shared_traces / "mi300x_jax_gemm_sweep.xplane.pb"),
                str(shared_traces / "mi300x_jax_attention.xplane.pb"), "--no-cache", "--format", "json")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split()[-10:] == ["pool", "False", "parent_polars", "True", "compare", "True", "forks", "2", "rc",
                                      "0"]
    r = _python("""
        import pickle
        from traceview.cli import process
        print(pickle.loads(process.pickled_in_child(lambda: 5, "a.pb", meanwhile=lambda: 1 / 0)))
    """)
    assert r.returncode == 0 and r.stdout.split() == ["5"], r.stderr


def test_a_fault_in_a_child_is_said_as_in_one_process(shared_traces, capsys):
    """A side's fault raised in its child comes back with its class (exit code) and message."""
    from traceview.cli import main

    a, b = str(shared_traces / "mi300x_jax_gemm_sweep.xplane.pb"), str(shared_traces / "tpu_v6e_4chip_psum.xplane.pb")
    for extra in (["--device", "zzz"], ["--step-window", "100000:100001"]):
        rc = main(["diff", a, b, "--no-cache", *extra])
        err = capsys.readouterr().err.strip()
        r = _python(_FORCED, "diff", a, b, "--no-cache", *extra)
        assert (rc, r.stdout.split()[-1]) == (2, "2"), (extra, r.stderr)
        assert r.stderr.strip() == err and err.startswith("traceview: error: ") and a in err


def test_pickled_in_child_answers_and_faults():
    """A result comes back pickled; a TraceviewError keeps its class, path and exit code; a bug
    keeps the child's traceback as its cause; a child killed (SIGKILL: memory ran out) or
    ending without an answer is one TraceviewError naming what it read."""
    r = _python("""
        import os, pickle, signal
        from traceview.cli import process
        from traceview.errors import LimitExceeded, TraceviewError, UsageError
        print(pickle.loads(process.pickled_in_child(lambda: {"x": [1, 2]}, "a.pb")))
        def usage():
            raise UsageError("bad window", path="b.pb")
        def bug():
            return {}["missing"]
        for work in (usage, bug, lambda: os.kill(os.getpid(), signal.SIGKILL), lambda: os._exit(3)):
            try:
                process.pickled_in_child(work, "c.pb")
            except Exception as e:
                cause = getattr(e, "__cause__", None)
                print(type(e).__name__, getattr(e, "exit_code", None), getattr(e, "path", None), str(e),
                      "|", "in bug" in str(cause) if cause is not None else None)
    """)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "{'x': [1, 2]}"
    assert lines[1] == "UsageError 2 b.pb b.pb: bad window | None"
    assert lines[2] == "KeyError None None 'missing' | True"
    assert lines[3] == ("LimitExceeded 6 None the process reading c.pb was killed (SIGKILL, as sent when memory "
                        "runs out) | None")
    assert lines[4] == "TraceviewError 4 None the process reading c.pb ended without an answer (exit code 3) | None"


def test_ctrl_c_while_a_child_reads_is_one_line_and_leaves_no_child(tmp_path):
    """SIGINT to the process group while a child works: the child ends at once, the parent says
    ``traceview: interrupted`` once and exits 130; SIGINT to the parent alone ends the child too."""
    started = tmp_path / "started"
    code = f"""
        import os, time
        from traceview.cli import process
        process.handle_interrupts()
        def work():
            open({str(started)!r}, "w").write(str(os.getpid()))
            time.sleep(60)
        try:
            process.pickled_in_child(work, "x.pb")
            rc = 0
        except KeyboardInterrupt:
            rc = process.say_interrupted()
        process.exit_now(rc)
    """
    for to_group in (True, False):
        if started.exists():
            started.unlink()
        p = subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, start_new_session=True)
        deadline = time.monotonic() + 60
        while not (started.exists() and started.read_text()) and time.monotonic() < deadline:
            time.sleep(0.05)
        child = int(started.read_text())
        (os.killpg if to_group else os.kill)(p.pid, signal.SIGINT)
        out, err = p.communicate(timeout=30)
        assert (p.returncode, err) == (130, "traceview: interrupted\n"), to_group
        for _ in range(100):  # the child is gone (reaped by the parent, or by init once orphaned)
            if not Path(f"/proc/{child}").exists():
                break
            time.sleep(0.05)
        assert not Path(f"/proc/{child}").exists()


def test_traceview_errors_pickle_with_their_path():
    from traceview.errors import NoTraceFound

    e = pickle.loads(pickle.dumps(NoTraceFound("no trace here", path="/x/y")))
    assert (type(e), e.path, e.fault, str(e), e.exit_code) == (NoTraceFound, "/x/y", "no trace here",
                                                                "/x/y: no trace here", 3)


def test_an_interrupt_in_a_child_is_said_once_by_the_parent():
    """A child that runs the parent's inherited handler (a SIGINT that tripped just before the
    fork) or gets a SIGINT of its own (polars' native handler must not swallow it) ends silently
    with 130; the parent takes that for an interrupt and says it once."""
    r = _python("""
        import os, signal, sys, time
        import polars as pl
        from traceview.cli import process
        process.handle_interrupts()
        def polars_then_sigint():
            pl.DataFrame({"a": list(range(100_000))}).group_by("a").len()  # its pool and handlers
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(30)
        for work in (lambda: process._first_interrupt(signal.SIGINT, None),
                     lambda: process._next_interrupt(signal.SIGINT, None), polars_then_sigint):
            try:
                process.pickled_in_child(work, "x.pb")
                print("no interrupt")
            except KeyboardInterrupt:
                print("interrupted")
        sys.stdout.flush()
        process.exit_now(process.say_interrupted())
    """, timeout=60)
    assert r.stdout.split() == ["interrupted"] * 3, r.stderr
    assert (r.returncode, r.stderr) == (130, "traceview: interrupted\n")


def test_no_fork_when_the_outputs_are_redirected_and_sigint_ignored_stays_ignored(shared_traces):
    """A caller that redirected stdout/stderr (to a StringIO) gets diff's table and warnings: the
    sides are read in its process, not in children whose copies of the streams it never sees. A
    parent that ignores SIGINT (a background job) has children that ignore it too."""
    r = _python(f"""
        import contextlib, io, os, signal, sys
        from traceview.cli import main, process
        process.FORK_INPUT_BYTES = 0
        forks, real = [], os.fork
        os.fork = lambda: (forks.append(1), real())[1]
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = main(["diff", {str(shared_traces / "mi300x_jax_gemm_sweep.xplane.pb")!r},
                       {str(shared_traces / "mi300x_jax_attention.xplane.pb")!r}, "--no-cache"])
        print(rc, len(forks), "step time" in out.getvalue())
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        def work():
            os.kill(os.getpid(), signal.SIGINT)
            return 42
        import pickle
        print(pickle.loads(process.pickled_in_child(work, "x.pb")))
    """)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["0", "0", "True", "42"], r.stdout


def test_children_say_a_warning_once_and_the_json_carries_it(shared_traces, tmp_path):
    """Read in children (one per side), a warning of one file on both sides was said by each
    child; now each child's lines come back beside its side (``process.Headed``): a later
    child says only new ones, and the JSON's ``warnings`` is the one process's."""
    from badinputs import dangling_hlo_refs
    from traceview.cli import main

    root = tmp_path / "p"
    dangling_hlo_refs(root, 5)
    orig = str(shared_traces / "mi300x_jax_attention.xplane.pb")
    for case in ([str(root), str(root)], [str(root), orig], ["--base", str(root), orig, "--treatment", str(root)]):
        here, there = tmp_path / "here.json", tmp_path / "there.json"
        assert main(["diff", *case, "--no-cache", "-o", str(here)]) == 0
        r = _python(_FORCED, "diff", *case, "--no-cache", "-o", str(there))
        assert r.returncode == 0, r.stderr
        assert r.stdout.split()[-4:] == ["forks", str(3 if "--base" in case else 2), "rc", "0"]
        said = json.loads(there.read_text())["warnings"]
        assert len(said) == 1 and "5 event(s)" in said[0] and "dangling ref_value" in said[0], said
        assert [ln for ln in r.stderr.splitlines() if "dangling" in ln] == [f"traceview: warning: {said[0]}"]
        assert there.read_bytes() == here.read_bytes()
