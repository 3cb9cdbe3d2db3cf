"""The CLI in odd surroundings: closed standard streams, an output that is a hard link to a
trace, running out of memory, bad --workers. Each must end with a documented exit code and
at most one line on stderr, never a traceback."""

from __future__ import annotations

import json
from pathlib import Path
import os
import subprocess
import sys

import pytest

import traceview
import traceview.errors
from traceview.cli import main

TPU = "tpu_v6e_4chip_psum.xplane.pb"


def _run(args, close: str):
    """The CLI as a process started with file descriptor ``close`` (1 or 2) closed."""
    import shlex

    cmd = " ".join(shlex.quote(a) for a in [sys.executable, "-m", "traceview.cli", *args])
    return subprocess.run(["sh", "-c", f"exec {cmd} {close}>&-"], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "TRACEVIEW_NO_CACHE": "1"})


def test_closed_stderr_keeps_the_exit_codes(shared_traces):
    ok = _run(["analyze", str(shared_traces / TPU), "--format", "json"], close="2")
    assert ok.returncode == 0 and ok.stdout.lstrip().startswith("{")
    missing = _run(["analyze", "/nonexistent/trace"], close="2")
    assert missing.returncode == 3 and missing.stdout == ""  # the error line is not sent to stdout


def test_closed_stdout_still_writes_the_output_file(shared_traces, tmp_path):
    out = tmp_path / "a.json"
    r = _run(["analyze", str(shared_traces / TPU), "--format", "json", "-o", str(out)], close="1")
    assert r.returncode == 0 and "Traceback" not in r.stderr and out.stat().st_size > 1000
    r = _run(["analyze", str(shared_traces / TPU), "--format", "json"], close="1")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip() == "traceview: error: cannot write standard output: standard output is closed"


def test_an_output_that_is_a_hard_link_to_the_trace_is_refused(shared_traces, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("TRACEVIEW_NO_CACHE", "1")
    run = tmp_path / "run"
    run.mkdir()
    trace = run / "h.xplane.pb"
    trace.write_bytes((shared_traces / TPU).read_bytes())
    elsewhere = tmp_path / "out"
    elsewhere.mkdir()
    link = elsewhere / "h.json"
    os.link(trace, link)
    before = trace.read_bytes()
    rc = main(["analyze", str(trace), "--format", "json", "-o", str(link)])
    err = capsys.readouterr().err
    assert rc == 2 and "refusing to write" in err and "is the trace file" in err
    assert trace.read_bytes() == before


def test_outputs_onto_devices_and_pipes_are_written_in_place(shared_traces, tmp_path, capsys, monkeypatch):
    """``-o /dev/null`` or a FIFO is written into, never replaced by a regular file (as root
    the rename used to swap /dev/null for a file); a symbolic link is followed, not replaced."""
    import stat
    import threading

    monkeypatch.setenv("TRACEVIEW_NO_CACHE", "1")
    trace = str(shared_traces / "mi300x_jax_gemm_sweep.xplane.pb")
    assert main(["analyze", trace, "--format", "json", "-o", "/dev/null"]) == 0
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    fifo = tmp_path / "out.json"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(open(fifo, "rb").read()))
    reader.start()
    assert main(["analyze", trace, "--format", "json", "-o", str(fifo)]) == 0
    reader.join(30)
    assert stat.S_ISFIFO(os.stat(fifo).st_mode) and json.loads(got[0])["rows"]["ops"]["total"] == 16
    real = tmp_path / "real.json"
    link = tmp_path / "link.json"
    link.symlink_to(real)
    assert main(["analyze", trace, "--format", "json", "-o", str(link)]) == 0
    assert link.is_symlink() and json.loads(real.read_text())["rows"]["ops"]["total"] == 16


def test_outputs_beside_loose_traces_are_written_run_folders_refused(shared_traces, tmp_path, capsys, monkeypatch):
    """A folder of loose traces is no profile tree: outputs beside a trace or in a folder
    under it are written (``analyze ~/Downloads/x.xplane.pb -o ~/Downloads/sub/out.json``),
    the traces untouched; a name a trace could bear, the trace itself, and a run folder
    (the profiler's run name, holding traces, wherever it was copied) are refused, by the CLI
    and the library alike."""
    monkeypatch.setenv("TRACEVIEW_NO_CACHE", "1")
    flat = tmp_path / "Downloads"
    (flat / "sub").mkdir(parents=True)
    data = (shared_traces / "mi300x_jax_gemm_sweep.xplane.pb").read_bytes()
    (flat / "a.xplane.pb").write_bytes(data)
    (flat / "sub" / "b.xplane.pb").write_bytes(data)
    x = str(flat / "a.xplane.pb")
    for argv, out in ((["analyze", x, "-o", str(flat / "sub" / "out.json")], flat / "sub" / "out.json"),
                      (["analyze", x, "-o", str(flat / "out.json")], flat / "out.json"),
                      (["report", str(flat / "sub"), "-o", str(flat / "r.html")], flat / "r.html"),
                      (["diff", str(flat / "sub"), x, "-o", str(flat / "sub" / "d.txt")], flat / "sub" / "d.txt")):
        assert main(argv) == 0, (argv, capsys.readouterr().err)
        assert out.stat().st_size > 100
    capsys.readouterr()
    assert traceview.load(flat / "sub").report(flat / "x.html").is_file()
    assert (flat / "a.xplane.pb").read_bytes() == data and (flat / "sub" / "b.xplane.pb").read_bytes() == data
    run = tmp_path / "copied" / "2026_01_02_03_04_05"
    (run / "deeper").mkdir(parents=True)
    (run / "h.xplane.pb").write_bytes(data)
    for argv, says in ((["analyze", x, "--format", "json", "-o", str(flat / "c.xplane.pb")], "bears a trace file's name"),
                       (["analyze", x, "--format", "json", "-o", x], "bears a trace file's name"),
                       (["analyze", str(run), "-o", str(run / "out.json")], f"inside the run folder {run}"),
                       (["analyze", x, "-o", str(run / "deeper" / "out.json")], f"inside the run folder {run}")):
        rc = main(argv)
        err = capsys.readouterr().err
        assert rc == 2 and says in err and len(err.splitlines()) == 1, (argv, err)
    with pytest.raises(traceview.errors.UsageError, match="inside the run folder"):
        traceview.load(run).report(run / "x.html")
    assert sorted(p.name for p in run.iterdir()) == ["deeper", "h.xplane.pb"] and not any((run / "deeper").iterdir())
    assert (flat / "a.xplane.pb").read_bytes() == data


def test_out_of_memory_is_one_line_and_exit_6(shared_traces, capsys, monkeypatch):
    import traceview.model.load

    def boom(*a, **k):
        raise MemoryError

    monkeypatch.setattr(traceview.model.load, "load", boom)
    rc = main(["analyze", str(shared_traces / TPU), "--format", "json", "--no-cache"])
    err = capsys.readouterr().err
    assert rc == 6 and err.startswith("traceview: error: out of memory") and len(err.splitlines()) == 1


@pytest.mark.parametrize("value", ["-3", "0", "two"])
def test_workers_must_be_one_or_more(value, shared_traces, capsys):
    """A usage error is one line (argparse's usage block is not printed), exit 2."""
    rc = main(["analyze", str(shared_traces / TPU), "--workers", value])
    err = capsys.readouterr().err
    assert rc == 2 and "--workers" in err and len(err.splitlines()) == 1
    assert err.startswith("traceview: error: argument --workers") and "see traceview analyze --help" in err


def test_workers_that_start_no_pool_say_so(shared_traces, capsys, cache_dir):
    """--workers 4 on one 842.49 KiB file reads it in this process (a pool needs 2 files and
    8 MiB): a note on standard error says so, not the output, so a stored result read back
    without the flag does not carry it; --workers 1 (the default) says nothing."""
    t = str(shared_traces / TPU)
    assert main(["analyze", t, "--workers", "4", "--format", "json"]) == 0
    got = capsys.readouterr()
    assert "worker processes" not in got.out
    assert ("traceview: note: read in this process, not by 4 worker processes: 1 file(s), 842.49 KiB (a pool is "
            "started for 2 files or more and 8.00 MiB in all, where it pays for its start-up)") in got.err
    assert main(["analyze", t, "--format", "json"]) == 0  # the stored result
    got = capsys.readouterr()
    assert "worker processes" not in got.out + got.err
    assert main(["report", t, "--workers", "2", "-o", str(cache_dir.parent / "r.html")]) == 0
    assert "not by 2 worker processes" in capsys.readouterr().err
    assert main(["export", t, "--workers", "3", "-o", str(cache_dir.parent / "w")]) == 0
    assert "not by 3 worker processes" in capsys.readouterr().err


def test_diff_and_verify_take_no_cache(shared_traces, capsys, cache_dir):
    """--no-cache: the parsed-table cache is neither read nor written (the cache_dir fixture
    caches every file, so without the flag the same commands write an entry)."""
    t = str(shared_traces / TPU)
    assert main(["diff", t, t, "--no-cache", "--format", "json"]) == 0
    assert main(["verify", t, "--no-cache", "-c", "no op matching nonexistent_op_zz"]) == 0
    capsys.readouterr()
    assert not cache_dir.exists()
    assert main(["verify", t, "-c", "no op matching nonexistent_op_zz"]) == 0
    assert len(list(cache_dir.rglob("meta.json"))) == 1


def test_output_suffix_decides_or_is_refused(shared_traces, tmp_path, capsys, monkeypatch):
    """-o FILE without --format: a known suffix picks the format, .html points analyze at
    --html, any other suffix is a one-line usage error naming it; nothing is written then."""
    monkeypatch.setenv("TRACEVIEW_NO_CACHE", "1")
    g = str(shared_traces / "mi300x_jax_gemm_sweep.xplane.pb")
    refused = {("analyze", "g.html"): "the HTML report is --html",
               ("analyze", "g.xyz"): "the suffix '.xyz' is not an output format here (suffixes: .csv, .json, "
                                     ".parquet, .pq, .txt; or give --format {table,json,csv,parquet})",
               ("diff", "d.csv"): "the suffix '.csv' is not an output format here (suffixes: .htm, .html, .json, "
                                  ".txt; or give --format {table,json,html})",
               ("diff", "d.parquet"): "the suffix '.parquet' is not an output format here"}
    for (cmd, name), why in refused.items():
        out = tmp_path / name
        rc = main([cmd, g, *([g] if cmd == "diff" else []), "-o", str(out)])
        err = capsys.readouterr().err
        assert rc == 2 and len(err.splitlines()) == 1 and why in err and not out.exists(), err
    for cmd, name, head in (("analyze", "a.json", "{"), ("analyze", "a.csv", "op_name,"), ("analyze", "a.txt", "traceview"),
                            ("diff", "d.html", "<!DOCTYPE html>"), ("diff", "d.json", "{"), ("diff", "d.txt", "traceview diff")):
        assert main([cmd, g, *([g] if cmd == "diff" else []), "-o", str(tmp_path / name)]) == 0
        assert (tmp_path / name).read_text().lstrip().startswith(head), name
    assert main(["analyze", g, "-o", str(tmp_path / "plain")]) == 0  # no suffix: the table
    assert (tmp_path / "plain").read_text().startswith("traceview")


def test_chip_help_lists_the_chip_table(capsys, monkeypatch):
    from traceview.analysis.hardware.chips import CHIPS

    monkeypatch.setenv("COLUMNS", "2000")  # argparse wraps help at hyphens too

    assert main(["analyze", "--help"]) == 0
    helptext = " ".join(capsys.readouterr().out.split())
    assert "(" + ", ".join(CHIPS) + ")" in helptext and len(CHIPS) > 8


def test_no_output_lands_in_the_log_dir_of_a_run_read(tmp_path, capsys):
    """``LOGDIR/plugins/profile/RUN/`` is one profile: an output anywhere in LOGDIR (beside
    ``plugins``, or in a folder of its own there) is refused with exit 2 by every command that
    writes one, and nothing is written; next to LOGDIR is fine."""
    import shutil
    from pathlib import Path

    from traceview.cli import main

    prof = tmp_path / "prof"
    shutil.copytree(Path(__file__).resolve().parents[1] / "fixtures" / "greedy_b4", prof)
    before = sorted(p.relative_to(prof) for p in prof.rglob("*"))
    p = str(prof)
    for argv in (["analyze", p, "-o", f"{p}/out.json"], ["analyze", p, "--html", f"{p}/sub/r.html"],
                 ["report", p, "-o", f"{p}/r.html"], ["diff", p, p, "-o", f"{p}/d.json"],
                 ["query", p, "SELECT 1 AS a", "-o", f"{p}/q.csv"], ["history", p, "-o", f"{p}/h.json"],
                 ["history", p, "--append", f"{p}/h.jsonl"], ["ladder", p, p, "--x", "4,8", "-o", f"{p}/l.json"],
                 ["export", p, "-o", f"{p}/w"], ["export", p, "-o", f"{p}/plugins/profile/w.xplane.pb"]):
        assert main([*argv, "--no-cache"]) == 2, argv
        assert "refusing to write" in capsys.readouterr().err
    assert sorted(q.relative_to(prof) for q in prof.rglob("*")) == before
    assert main(["analyze", p, "-o", str(tmp_path / "out.json"), "--no-cache"]) == 0
    # a log dir whose run holds symbolic links to traces kept elsewhere is protected alike
    linked = tmp_path / "linked"
    for f in prof.rglob("*.xplane.pb"):
        dest = linked / f.relative_to(prof)
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.symlink_to(f)
    for argv in (["analyze", str(linked), "-o", f"{linked}/x.json"], ["diff", p, str(linked), "-o", f"{linked}/d.json"]):
        assert main([*argv, "--no-cache"]) == 2, argv
        err = capsys.readouterr().err
        assert f"it is inside the log dir {linked} it reads" in err, err
    assert not (linked / "x.json").exists() and not (linked / "d.json").exists()
    # and one whose run folder, or whose plugins folder, is a link to a folder elsewhere (named
    # like a run, or not): nothing goes into the log dir, nor through the link into the traces' folder
    run = next(prof.rglob("*.xplane.pb")).parent
    for n, (link_at, target_name) in enumerate([("run", run.name), ("run", "realrun"), ("plugins", "plugins")]):
        store, logdir = tmp_path / f"store{n}", tmp_path / f"logdir{n}"
        target = store / target_name
        shutil.copytree(run if link_at == "run" else prof / "plugins", target)
        at = logdir / ("plugins/profile/" + run.name if link_at == "run" else "plugins")
        at.parent.mkdir(parents=True)
        at.symlink_to(target)
        for argv in (["analyze", str(logdir), "-o", f"{logdir}/x.json"],
                     ["analyze", str(logdir), "-o", f"{logdir}/plugins/profile/{run.name}/x.json"],
                     ["diff", p, str(logdir), "-o", f"{logdir}/d.json"], ["report", str(logdir), "-o", f"{logdir}/r.html"]):
            assert main([*argv, "--no-cache"]) == 2, argv
            assert "refusing to write" in capsys.readouterr().err
        assert not list(logdir.glob("*.*")) and not list(target.rglob("x.json")), n


def test_a_negative_step_window_is_taken_as_a_value(capsys):
    """``--step-window -2:`` (negatives count from the end, as the help says) reads as
    ``--step-window=-2:``; argparse alone took ``-2:`` for an option and refused the command."""
    fixture = str(Path(__file__).resolve().parents[1] / "fixtures" / "greedy_b4")
    assert main(["analyze", fixture, "--step-window=-2:", "--format", "json", "--no-cache"]) == 0
    want = json.loads(capsys.readouterr().out)["steps"]
    assert main(["analyze", fixture, "--step-window", "-2:", "--format", "json", "--no-cache"]) == 0
    got = json.loads(capsys.readouterr().out)["steps"]
    assert got == want and got["window"] == "-2:" and "2 of 3 steps in window -2:" in got["summary"]



def test_positionals_may_follow_options(shared_traces, capsys):
    """A subcommand's positionals after its options: query's SQL after --chip, diff's
    treatment after --no-cache (argparse's plain parse refused both as unrecognized)."""
    import traceview
    from traceview.cli import main

    f = str(shared_traces / "mi300x_jax_gemm_sweep.xplane.pb")
    sql = "select count(*) as n from ops"
    assert main(["query", f, "--chip", "MI300X", "--format", "json", sql]) == 0
    after = json.loads(capsys.readouterr().out)
    assert main(["query", f, sql, "--chip", "MI300X", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == after
    assert after["result"] == [{"n": traceview.load(f, cache=False).table.height}]
    assert main(["diff", f, "--no-cache", f, "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["populations"]
    assert main(["analyze", f, "--no-cache", f]) == 2  # one PATH: the second is still refused
    assert "unrecognized arguments" in capsys.readouterr().err
    assert main(["query", sql, f]) == 2  # the SQL first: said so, not "does not exist"
    assert f"the trace comes first, then the query: traceview query {f}" in capsys.readouterr().err


@pytest.mark.parametrize("module", ["traceview.render.terminal", "traceview.analysis.communication.overlap"])
def test_a_broken_install_is_one_line_and_exit_8(shared_traces, capsys, monkeypatch, module):
    """A module of traceview that cannot be imported (deleted, or a dependency of it broken):
    one line naming it and exit 8, never a traceback, nor exit 1 (a failed check). The import
    tried while the trace is still decoded fails silently; the one the command needs says so."""
    for m in [m for m in sys.modules if m == module or m.startswith(module + ".")]:
        monkeypatch.delitem(sys.modules, m)
    monkeypatch.setitem(sys.modules, module, None)  # importing it raises ImportError
    rc = main(["analyze", str(shared_traces / "tpu_v6e_4chip_psum.xplane.pb"), "--no-cache"])
    err = capsys.readouterr().err
    assert rc == traceview.errors.EXIT_INSTALL == 8
    assert err.count("\n") == 1 and err.startswith(f"traceview: error: cannot import {module}")
    assert "reinstall traceview" in err and "Traceback" not in err


def test_a_malformed_step_window_is_refused_before_the_trace_is_read(shared_traces, tmp_path, capsys):
    """Fresh-user pass 16: analyze read the trace (and said "no HLO ops", exit 5) before it
    checked --step-window's form; analyze, report and export now refuse it first, as diff does."""
    f = str(shared_traces / "gpu_v100x8_tf2_bert_no_xla.xplane.pb")
    for argv in (["analyze", f], ["report", f, "-o", str(tmp_path / "r.html")], ["export", f, "-o", str(tmp_path / "w")]):
        assert main([*argv, "--step-window", "abc", "--no-cache"]) == 2, argv
        assert "unknown step window 'abc'" in capsys.readouterr().err
    # and query names its option, as the other commands do, for a window past the steps
    gemm = str(shared_traces / "mi300x_jax_gemm_sweep.xplane.pb")
    assert main(["query", gemm, "SELECT 1 AS a", "--step-window", "100:200", "--no-cache"]) == 2
    assert "--step-window 100:200 holds none of the trace's 18 steps" in capsys.readouterr().err


def test_read_uncollected_only_in_a_one_shot_command():
    """process.read_uncollected: in a process tuned by tune_gc, no collection inside, then
    everything alive frozen and collection back on (also after an error); elsewhere nothing."""
    import gc

    from traceview.cli import process

    saved = gc.get_threshold()
    try:
        with process.read_uncollected():  # pytest's process: thresholds not tuned
            assert gc.isenabled()
        assert gc.get_freeze_count() == 0
        process.tune_gc()
        with pytest.raises(KeyError):
            with process.read_uncollected():
                assert not gc.isenabled()
                raise KeyError
        assert gc.isenabled() and gc.get_freeze_count() > 0
    finally:
        gc.enable()
        gc.unfreeze()
        gc.set_threshold(*saved)


def test_a_path_that_cannot_be_looked_at_is_not_called_missing(tmp_path, capsys):
    """A name over the file system's limit (ENAMETOOLONG; a folder without search permission,
    EACCES, is the same case) is exit 4 naming the fault, not exit 3 "does not exist"."""
    long = tmp_path / ("a" * 300)
    assert main(["analyze", str(long), "--no-cache"]) == 4
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.rstrip().endswith("cannot be looked at (File name too long)"), err
    assert main(["analyze", str(tmp_path / "missing"), "--no-cache"]) == 3
    assert capsys.readouterr().err.rstrip().endswith("missing: does not exist")


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (Linux)")
@pytest.mark.parametrize("argv", [["analyze", "--help"], ["--version"]])
def test_help_and_version_to_a_full_disk_say_so(argv, tmp_path):
    """argparse swallows a failed write of the help or the version: they were lost with exit 0."""
    with open("/dev/full", "w") as full:
        r = subprocess.run([sys.executable, "-m", "traceview.cli", *argv], stdout=full, stderr=subprocess.PIPE,
                           cwd=tmp_path, timeout=120)
    assert r.returncode == 2
    assert r.stderr.decode() == "traceview: error: cannot write standard output: No space left on device\n"


def test_no_command_is_a_usage_error_on_stderr(capsys):
    assert main([]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("usage: traceview") and "analyze" in err


@pytest.mark.parametrize("argv", [["--version"], ["analyze", "--help"]])
def test_help_and_version_with_stdout_closed_say_so(argv, tmp_path):
    """``>&-``: sys.stdout is None; argparse's writer met it as an AttributeError traceback."""
    r = subprocess.run([sys.executable, "-m", "traceview.cli", *argv], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                       cwd=tmp_path, timeout=120, preexec_fn=lambda: os.close(1))
    assert r.returncode == 2
    assert r.stderr.decode() == "traceview: error: cannot write standard output: standard output is closed\n"


@pytest.mark.parametrize("option, value, says", [
    ("--query-memory", "9e9", None), ("--query-memory", "1e308", None), ("--query-timeout", "9.3e9", None),
    ("--query-memory", "1e-12", "expected 0 (no limit) or at least")])
def test_query_limits_past_the_range_a_limit_can_bind(shared_traces, capsys, option, value, says):
    """A limit too large to bind is no limit (it overflowed int or setitimer: a traceback); one
    too small to import a module is refused (1e-12 GiB rounded to 0 read as no limit)."""
    rc = main(["query", str(shared_traces / "mi300x_jax_conv3d.xplane.pb"), "SELECT 1 AS x", option, value,
               "--no-cache", "--format", "csv"])
    out, err = capsys.readouterr()
    if says is None:
        assert rc == 0 and out == "x\n1\n" and "Traceback" not in err
    else:
        assert rc == 2 and says in err and err.count("\n") == 1


def test_a_format_the_output_suffix_contradicts_is_refused(shared_traces, tmp_path, capsys, monkeypatch):
    """``--format parquet -o x.json`` wrote Parquet into a .json file (and csv into .parquet):
    a one-line usage error now, nothing written; ``.txt`` goes with any text format."""
    monkeypatch.setenv("TRACEVIEW_NO_CACHE", "1")
    g = str(shared_traces / "mi300x_jax_gemm_sweep.xplane.pb")
    for fmt, name in (("parquet", "x.json"), ("csv", "x.parquet"), ("json", "x.csv"), ("parquet", "x.txt")):
        rc = main(["analyze", g, "--format", fmt, "-o", str(tmp_path / name)])
        err = capsys.readouterr().err
        assert rc == 2 and err.count("\n") == 1 and f"says {fmt}" in err and not (tmp_path / name).exists(), err
    assert main(["analyze", g, "--format", "json", "-o", str(tmp_path / "x.txt")]) == 0
    assert (tmp_path / "x.txt").read_text().startswith("{")


def test_html_to_standard_output(shared_traces, tmp_path, capsys, monkeypatch):
    """``--html -`` wrote nothing anywhere and exited 0: the report now goes to standard output
    when the table or JSON goes to -o FILE, and is a usage error when both would go there."""
    monkeypatch.setenv("TRACEVIEW_NO_CACHE", "1")
    g = str(shared_traces / "mi300x_jax_gemm_sweep.xplane.pb")
    assert main(["analyze", g, "-o", str(tmp_path / "k.json"), "--html", "-"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("<!DOCTYPE html>") and out.rstrip().endswith("</html>")
    assert (tmp_path / "k.json").read_text().startswith("{")
    assert main(["analyze", g, "--html", "-"]) == 2
    c = capsys.readouterr()
    assert c.out == "" and "--html - writes the HTML report to standard output" in c.err


def _closed_reader(argv, tmp_path):
    """``traceview ARGV | true``: the reader gone before anything is written; (exit code, stderr)."""
    import subprocess
    import sys

    r, w = os.pipe()
    os.close(r)
    try:
        p = subprocess.run([sys.executable, "-m", "traceview.cli", *argv], stdout=w, stderr=subprocess.PIPE,
                           text=True, cwd=tmp_path, env={**os.environ, "TRACEVIEW_NO_CACHE": "1"}, timeout=300)
    finally:
        os.close(w)
    return p.returncode, p.stderr


def test_a_reader_that_stops_early_keeps_the_verdict_and_the_side_outputs(shared_traces, tmp_path):
    """``verify ... | true`` with a failing check exited 0 (the closed pipe's quiet end hid
    the verdict); ``analyze --html FILE | true`` exited 0 without writing FILE. Now exit 1 and
    nothing said, and FILE written."""
    v6e = str(shared_traces / "tpu_v6e_4chip_psum.xplane.pb")
    rc, err = _closed_reader(["verify", v6e, "-c", "family copies share < 30%"], tmp_path)
    assert rc == 1 and err == "", err
    rc, err = _closed_reader(["verify", v6e, "-c", "op matching . present"], tmp_path)
    assert rc == 0 and err == "", err
    page = tmp_path / "h.html"
    rc, err = _closed_reader(["analyze", str(shared_traces / "mi300x_jax_conv3d.xplane.pb"), "--html", str(page)],
                             tmp_path)
    assert rc == 0 and page.read_text().rstrip().endswith("</html>") and err == f"wrote {page}\n", err


def test_history_fail_on_regression_keeps_its_code_and_append_when_the_reader_stops(tmp_path):
    """``history --fail-on-regression --append F | true`` over greedy_b4 then topp_b4 (1.16x,
    too few steps to rule a slowdown out): exit 1 as with a reader, and F appended."""
    root = Path(__file__).resolve().parents[1] / "fixtures"
    profile = tmp_path / "logs" / "plugins" / "profile"
    profile.mkdir(parents=True)
    for fixture, name in (("greedy_b4", "2026_12_01_13_48_13"), ("topp_b4", "2026_12_01_13_48_19")):
        (src,) = (root / fixture / "plugins" / "profile").iterdir()
        (profile / name).symlink_to(src, target_is_directory=True)
    jl = tmp_path / "h.jsonl"
    rc, err = _closed_reader(["history", str(tmp_path / "logs"), "--fail-on-regression", "--append", str(jl)], tmp_path)
    assert rc == 1 and "cannot be judged" in err, err
    assert len(jl.read_text().splitlines()) == 2


def test_an_output_under_a_file_names_the_file_not_a_missing_folder(shared_traces, tmp_path, capsys, monkeypatch):
    """``-o report.html/x.json`` where ``report.html`` is a file: the one line names the file
    that stands where a folder should be, for every command that writes; a folder that is
    really missing is still called missing."""
    monkeypatch.setenv("TRACEVIEW_NO_CACHE", "1")
    gemm = str(shared_traces / "mi300x_jax_gemm_sweep.xplane.pb")
    (tmp_path / "r.html").write_text("kept")
    for out in (tmp_path / "r.html" / "x.json", tmp_path / "r.html" / "a" / "b" / "x.json"):
        for argv in (["analyze", gemm, "-o", str(out)], ["report", gemm, "-o", str(out.with_suffix(".html"))],
                     ["query", gemm, "select 1", "-o", str(out)], ["diff", gemm, gemm, "-o", str(out)]):
            assert main(argv) == 2
            err = capsys.readouterr().err
            assert err == f"traceview: error: refusing to write {argv[-1]}: {tmp_path / 'r.html'} is not a folder\n", err
    assert (tmp_path / "r.html").read_text() == "kept"
    assert main(["analyze", gemm, "-o", str(tmp_path / "missing" / "x.json")]) == 2
    assert f"folder {tmp_path / 'missing'} does not exist" in capsys.readouterr().err


def test_a_dangling_hlo_op_ref_value_is_said_not_dropped_silently(shared_traces, tmp_path, capsys):
    """GPU events whose ``hlo_op`` stat is a ``ref_value`` to a stat id the plane does not define
    cannot be named: they are not counted as ops, and a warning says how many (it dropped them
    without a word). Here 5 of the MI300X trace's 87 kernels (badinputs.dangling_hlo_refs)."""
    from badinputs import dangling_hlo_refs

    dangling_hlo_refs(tmp_path, 5)
    prof = traceview.load(tmp_path, cache=False, stale_after_s=None)
    assert prof.op_events == 82
    said = [w for w in prof.warnings if "dangling ref_value" in w]
    assert len(said) == 1 and "/device:GPU:0: 5 event(s)" in said[0]
    whole = traceview.load(shared_traces / "mi300x_jax_attention.xplane.pb", cache=False)
    assert whole.op_events == 87 and not any("dangling" in w for w in whole.warnings)


def test_python_children_do_not_import_from_the_working_directory(shared_traces, tmp_path):
    """A ``traceview.py``, ``matplotlib.py`` or ``multiprocessing.py`` in the folder a command
    runs in (a downloaded profile bundle) is not imported by the Python processes it starts:
    the report's chart worker, the query server, a spawn pool's workers (they ran ``python -c``,
    which puts the working directory first on sys.path: each of these files ran)."""
    repo = Path(__file__).resolve().parents[1]
    fixtures = repo / "fixtures"
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    marker = tmp_path / "imported"
    for name in ("traceview.py", "matplotlib.py", "multiprocessing.py", "polars.py", "pickle.py"):
        (bundle / name).write_text(f"open({str(marker)!r}, 'a').write({name!r} + '\\n')\n")
    env = dict(os.environ, PYTHONPATH=str(repo), TRACEVIEW_NO_CACHE="1")
    env.pop("PYTHONSAFEPATH", None)
    hosts = tmp_path / "hosts" / "plugins" / "profile" / "2026_01_01_00_00_00"
    hosts.mkdir(parents=True)
    data = (shared_traces / "tpu_v6e_4chip_psum.xplane.pb").read_bytes()
    for h in range(10):  # 8.6 MB in 10 files: a pool is started (read.batch.PARALLEL_MIN_BYTES)
        (hosts / f"h{h}.xplane.pb").write_bytes(data)
    cli = [sys.executable, "-P", "-m", "traceview.cli"]
    runs = [["report", str(fixtures / "greedy_b4"), "-o", str(tmp_path / "r.html")],
            ["analyze", str(tmp_path / "hosts"), "--workers", "2", "--brief"],
            ["query", str(fixtures / "greedy_b4"), "select count(*) from ops"]]
    for argv in runs:
        p = subprocess.run(cli + argv, cwd=bundle, env=env, capture_output=True, text=True, timeout=300)
        assert p.returncode == 0 and "not by 2 worker processes" not in p.stderr, (argv, p.stderr)
    assert not marker.exists(), marker.read_text()
    assert (tmp_path / "r.html").read_text().count("<svg") >= 2


def _gpu_trace(shared_traces, tmp_path, name: str, edit) -> Path:
    """The MI300X trace with ``edit(plane, names)`` applied to /device:GPU:0, as a run folder
    under ``tmp_path / name``."""
    from traceview.read.xplane.protos import XSpace

    space = XSpace()
    space.ParseFromString((shared_traces / "mi300x_jax_attention.xplane.pb").read_bytes())
    plane = next(p for p in space.planes if p.name == "/device:GPU:0")
    edit(plane, {k: v.name for k, v in plane.stat_metadata.items()})
    run = tmp_path / name / "plugins" / "profile" / "2026_01_01_00_00_00"
    run.mkdir(parents=True)
    (run / "h.xplane.pb").write_bytes(space.SerializeToString())
    return tmp_path / name


def test_gpu_kernels_that_cannot_be_named_are_said(shared_traces, tmp_path, capsys):
    """When no GPU event names an HLO op (the hlo_op stats removed; or moved onto the kernels'
    XEventMetadata as ref_values to no stat), the host's hlo_op events are what is read (a CPU
    program in a process that also used a GPU reads so), and a warning says the GPU planes' events
    could not be named and that the ops are the host's (it said nothing: 'CPU x1: 87 op events').
    The TF trace without XLA exits 5 with that line as its reason. With the hlo_op on the
    metadata, resolvable, the 87 kernels are read."""
    def strip(plane, names):
        for ln in plane.lines:
            for e in ln.events:
                keep = [s for s in e.stats if names.get(s.metadata_id) != "hlo_op"]
                del e.stats[:]
                e.stats.extend(keep)

    def onto_metadata(dangle):
        def edit(plane, names):
            moved = set()
            for ln in plane.lines:
                for e in ln.events:
                    hs = [s for s in e.stats if names.get(s.metadata_id) == "hlo_op"]
                    if not hs:
                        continue
                    if e.metadata_id not in moved:
                        ns = plane.event_metadata[e.metadata_id].stats.add()
                        ns.CopyFrom(hs[0])
                        if dangle:
                            ns.ref_value = max(names) + 1000
                        moved.add(e.metadata_id)
                    keep = [s for s in e.stats if names.get(s.metadata_id) != "hlo_op"]
                    del e.stats[:]
                    e.stats.extend(keep)
        return edit

    for name, edit, dangling in (("stripped", strip, False), ("mddang", onto_metadata(True), True)):
        prof = traceview.load(_gpu_trace(shared_traces, tmp_path, name, edit), cache=False, stale_after_s=None)
        said = [w for w in prof.warnings if "none of them named by an HLO op" in w]
        assert len(said) == 1 and "the 8 GPU plane(s) hold 105 event(s)" in said[0], name
        assert "the ops shown are the host's hlo_op events" in said[0], name
        assert prof.op_events == 87 and prof.device_summary()["device"].to_list() == ["/host:CPU"], name
        assert any("/device:GPU:0: 87 event(s) name their HLO op through a stat id" in w
                   for w in prof.warnings) == dangling, name
    rc = main(["analyze", str(shared_traces / "gpu_v100x8_tf2_bert_no_xla.xplane.pb"), "--no-cache"])
    err = capsys.readouterr().err
    assert rc == traceview.errors.EXIT_NO_OPS
    assert "GPU plane(s) hold 1,556 event(s), none of them named by an HLO op" in err
    assert "was it recorded from a JAX/XLA program?" in err
    # the GPU planes' lines gone (a device tracer that recorded nothing): the host's events, said so
    def no_lines(plane, names):
        del plane.lines[:]

    prof = traceview.load(_gpu_trace(shared_traces, tmp_path, "nolines", no_lines), cache=False, stale_after_s=None)
    said = [w for w in prof.warnings if "GPU plane(s) hold no event" in w]
    assert len(said) == 1 and "the 8 GPU plane(s) hold no event: the ops shown are the host's" in said[0]
    assert prof.op_events == 87
    ok = traceview.load(_gpu_trace(shared_traces, tmp_path, "mdok", onto_metadata(False)), cache=False,
                        stale_after_s=None)
    assert ok.op_events == 87 and ok.device_summary()["device"].to_list() == ["/device:GPU:0"]


def test_diff_and_verify_json_carry_each_reading_warning_once(shared_traces, tmp_path, capsys):
    """diff and verify said a side's reading warnings on stderr only (their JSON, and so the MCP
    tools' answers, had none), and diff A A said each twice. Both JSONs carry ``warnings``, the
    lines stderr shows, each once."""
    from badinputs import dangling_hlo_refs

    root = tmp_path / "p"
    f = dangling_hlo_refs(root, 5)
    orig = str(shared_traces / "mi300x_jax_attention.xplane.pb")
    (said,) = [w for w in traceview.load(root, cache=False, stale_after_s=None).warnings if "dangling" in w]
    assert str(f) in said and "5 event(s)" in said

    for argv in (["diff", str(root), str(root)], ["diff", str(root), orig], ["diff", orig, str(root)],
                 ["verify", str(root), "--check", "op matching fusion present"],
                 ["verify", orig, str(root), "--check", "op matching fusion present"]):
        assert main([*argv, "--format", "json", "--no-cache"]) == 0, argv
        got = capsys.readouterr()
        err = [ln.removeprefix("traceview: warning: ") for ln in got.err.splitlines()
               if ln.startswith("traceview: warning: ")]
        assert err == [said], (argv, err)
        assert json.loads(got.out)["warnings"] == [said], argv
    assert main(["diff", orig, orig, "--format", "json", "--no-cache"]) == 0
    assert json.loads(capsys.readouterr().out)["warnings"] == []
    assert main(["verify", orig, "--check", "op matching fusion present", "--format", "json", "--no-cache"]) == 0
    assert json.loads(capsys.readouterr().out)["warnings"] == []
    # ladder too (its JSON had no warnings; helper-109)
    assert main(["ladder", orig, str(root), "--x", "1,2", "--format", "json", "--no-cache"]) == 0
    got = capsys.readouterr()
    assert json.loads(got.out)["warnings"] == [said] and got.err.count("dangling ref_value") == 1
    assert main(["ladder", orig, orig, "--x", "1,2", "--format", "json", "--no-cache"]) == 0
    assert json.loads(capsys.readouterr().out)["warnings"] == []


def test_a_path_after_double_dash_may_start_with_a_minus(shared_traces, tmp_path, monkeypatch, capsys):
    """``analyze -- -dash`` said 'unrecognized arguments: -dash': Python 3.11's intermixed parse
    drops the ``--`` and reads what follows as options. After ``--`` every argument is a path,
    read as ``./-dash`` is; an option after it is refused as argparse refuses it."""
    import shutil

    (tmp_path / "-dash").mkdir()
    shutil.copy(shared_traces / "mi300x_jax_attention.xplane.pb", tmp_path / "-dash")
    monkeypatch.chdir(tmp_path)
    outs = []
    for argv in (["analyze", "--format", "json", "--no-cache", "--", "-dash"],
                 ["analyze", "--format", "json", "--no-cache", "./-dash"]):
        assert main(argv) == 0, capsys.readouterr().err
        outs.append(json.loads(capsys.readouterr().out))
    assert outs[0]["ops"] == outs[1]["ops"] and outs[0]["ops"]
    assert outs[0]["provenance"]["files"][0]["path"].endswith("-dash/mi300x_jax_attention.xplane.pb")
    assert main(["diff", "--format", "json", "--no-cache", "--", "-dash", "-dash"]) == 0
    counts = json.loads(capsys.readouterr().out)["counts"]
    assert counts["matched"] > 0 and counts["appeared"] == counts["vanished"] == 0  # one recording, both sides
    assert main(["verify", "--check", "op matching fusion present", "--no-cache", "--", "-dash"]) == 0
    assert "PASS  op matching fusion present" in capsys.readouterr().out
    assert main(["analyze", "--no-cache", "--", "-dash", "--brief"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "traceview: error: unrecognized arguments: --brief (see traceview analyze --help)"]
    assert main(["analyze", "--no-cache", "--", "-nosuch"]) == traceview.errors.EXIT_NO_TRACE
    assert capsys.readouterr().err.startswith("traceview: error: -nosuch: ")


@pytest.mark.parametrize("rule,why", [("", "empty"), ("  ", "empty"), ("#attn=RPA", "a comment, not a rule")])
def test_an_empty_family_rule_is_refused_as_the_other_bad_rules(shared_traces, capsys, rule, why):
    """``--family ''`` was skipped as a blank line of a rules file is, exit 0, while verify
    refuses an empty ``--check``: a ``--family`` is a rule, refused in one line, exit 2."""
    t = str(shared_traces / "mi300x_jax_attention.xplane.pb")
    for argv in (["analyze", t], ["diff", t, t], ["verify", t, "--check", "op matching fusion present"]):
        assert main([*argv, "--family", "attn=RPA", "--family", rule, "--no-cache"]) == traceview.errors.EXIT_USAGE
        assert capsys.readouterr().err.splitlines() == [
            f"traceview: error: rule 2: bad family rule {rule.strip()!r}: {why}: expected NAME=REGEX or "
            "NAME=FIELD:REGEX"], argv
    assert main(["verify", t, "--check", "", "--no-cache"]) == traceview.errors.EXIT_USAGE
    assert capsys.readouterr().err.splitlines() == ["traceview: error: check 1 is empty"]


def test_csv_and_parquet_say_the_reading_warnings_on_stderr(tmp_path, capsys, monkeypatch, cache_dir):
    """analyze --format csv / parquet write the op table alone: the reading's warnings (here 5
    GPU events with a dangling hlo_op ref) are said on standard error, on a second run answered
    from the result cache too (they said none: the table and JSON carry them, these formats
    cannot)."""
    import traceview.model.load as loading
    from badinputs import dangling_hlo_refs

    f = dangling_hlo_refs(tmp_path / "p", 5)
    os.utime(f, (1704164645, 1704164645))  # (its age in the reasons, so in the stored result's key: days, not s)
    for i, fmt in enumerate(("csv", "parquet", "csv", "parquet")):  # the last two answered from the result cache
        if i == 2:
            monkeypatch.setattr(loading, "load", lambda *a, **k: pytest.fail("read again"))
        out = tmp_path / f"o{i}.{fmt}"
        assert main(["analyze", str(f), "--format", fmt, "-o", str(out)]) == 0
        err = capsys.readouterr().err
        said = [ln for ln in err.splitlines() if ln.startswith("traceview: warning: ") and "dangling ref_value" in ln]
        assert len(said) == 1 and "/device:GPU:0: 5 event(s)" in said[0], err
        assert out.stat().st_size > 0
    assert (tmp_path / "o0.csv").read_bytes() == (tmp_path / "o2.csv").read_bytes()
    assert (tmp_path / "o1.parquet").read_bytes() == (tmp_path / "o3.parquet").read_bytes()
