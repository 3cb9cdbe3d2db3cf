"""The second hostile corpus's classes that need more than one ``analyze`` run (issue 13): the
diagnosis of a truncated trace at every cut size, a port that is no Dask scheduler, escapes in
``diff``, one ``--top`` rule, occurrence checks that show their failures, piped tables, the
walk of ``/``, a home without a cache, the CPU peak microbenchmark, table cells of megabytes.
The single-run classes are cases of ``tests/badinputs.py``.
"""

from __future__ import annotations

import csv
import http.server
import importlib.util
import io
import json
import os
import re
import sys
import threading
from pathlib import Path

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import traceview
from traceview.cli import main
from traceview.read.diagnose import DENSITY_BYTES, xspace_fault

from badinputs import ADD, MANGLED, MI300X, SHARED, TPU, tpu_xspace, write

_SPEC = importlib.util.spec_from_file_location(
    "scale_trace", Path(__file__).resolve().parents[1] / "benchmarks" / "scale_trace.py")
scale_trace = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(scale_trace)


@pytest.fixture(autouse=True)
def _no_cache(monkeypatch):
    monkeypatch.setenv("TRACEVIEW_NO_CACHE", "1")


def _run(argv, capsys):
    rc = main(argv)
    out, err = capsys.readouterr()
    return rc, out, err


# -- truncated, not re-encoded, at every cut size --------------------------------------------

@pytest.fixture(scope="module")
def scaled_tpu(tmp_path_factory) -> bytes:
    """The TPU trace with its device events repeated 60 times (51 MB, 1.6M events): a valid
    trace that, like the 46 MB one of the report, holds a few EF BF BD sequences in strings."""
    dst = tmp_path_factory.mktemp("scaled") / "x60.xplane.pb"
    scale_trace.scale_xplane(SHARED / TPU, dst, 60)
    return dst.read_bytes()


def test_every_cut_of_a_large_trace_is_called_truncated(scaled_tpu):
    data = scaled_tpu
    n = len(data)
    valid = data.count(b"\xef\xbf\xbd")
    cuts = sorted({int(n * f) for f in (1e-6, 1e-4, 1e-3, 0.01, 0.1)} | set(range(1, n, n // 300)))
    called = {}
    for at in cuts:
        why = xspace_fault(memoryview(data)[:at])
        called[at] = why
        assert why is not None and "truncated" in why and "re-encoded" not in why, (at, why)
    assert len(called) >= 300
    # the corrupt shared file, cut anywhere, is still called re-encoded (a density, not a count)
    bad = (SHARED / MANGLED).read_bytes()
    for at in range(100, len(bad), len(bad) // 50):
        assert "re-encoded as text" in xspace_fault(bad[:at]), at
    # a valid file holding more EF BF BD sequences than the old absolute threshold of 3
    assert valid >= 3 and xspace_fault(data) is None
    assert DENSITY_BYTES >= 100  # one sequence per DENSITY_BYTES bytes: far above a valid file's


def test_cut_large_trace_through_the_cli(scaled_tpu, tmp_path, capsys):
    p = write(tmp_path / "cut.xplane.pb", scaled_tpu[: int(len(scaled_tpu) * 0.4)])
    rc, out, err = _run(["analyze", str(p)], capsys)
    assert rc == 4 and "truncated" in err and "re-encoded" not in err and len(err.splitlines()) == 1


# -- a port that answers, but is no Dask scheduler --------------------------------------------

def test_scheduler_pointed_at_an_http_server(tmp_path, capsys, monkeypatch):
    import traceview.read.batch as batch

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):  # the server's access log would land on the test's stderr
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setattr(batch, "CONNECT_TIMEOUT_S", 2.0)
    monkeypatch.setattr(batch, "HANDSHAKE_GRACE_S", 2.0)
    try:
        pytest.importorskip("distributed")
        p = write(tmp_path / "run" / "h.xplane.pb", (SHARED / MI300X).read_bytes())
        rc, out, err = _run(["analyze", str(p.parent), "--scheduler", f"tcp://127.0.0.1:{server.server_port}"],
                            capsys)
    finally:
        server.shutdown()
    assert rc == 7 and len(err.splitlines()) == 1  # a remote that does not answer (docs/exit-codes.md)
    assert "no Dask scheduler answered" in err and "HTTP/1.0" in err and "an HTTP server" in err


# -- diff escapes what the terminal would obey ------------------------------------------------

def test_diff_table_strips_escape_sequences(tmp_path, capsys):
    evil = "add\x1b[2J\x1b]0;owned\x07.1"
    text = ADD.replace("%add.1", f"%{evil}", 1)
    a = write(tmp_path / "a" / "h.xplane.pb", tpu_xspace([(text, evil, 0, 1000)]).SerializeToString())
    b = write(tmp_path / "b" / "h.xplane.pb", tpu_xspace([(text, evil, 0, 3000)]).SerializeToString())
    for argv in (["diff", str(a), str(b)], ["diff", str(a), str(b), "-o", str(tmp_path / "d.txt")]):
        rc, out, err = _run(argv, capsys)
        assert rc == 0
        shown = out + ((tmp_path / "d.txt").read_text() if "-o" in argv else "")
        assert "add" in shown and "\x1b" not in shown and "\x07" not in shown


# -- control and bidi characters in op names reach no terminal or page raw ---------------------

#: op names with ESC (ANSI colour), NUL, CR and LF, TAB and C1 CSI, bidi overrides and isolates,
#: and invisible ones (zero-width space, BOM, soft hyphen) with a line separator
_EVIL = ["esc\x1b[31mRED\x1b[0m.1", "nul\x00.2", "cr\rnl\n.3", "tab\tc1\x9b2J.4",
         "bidi\u202eevil\u2066x\u2069\u200f.5", "zw\u200bbom\ufeffshy\xadls\u2028.6"]
_RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\xad\u200b-\u200f\u2028-\u202e\u2066-\u2069\ufeff]")
_SHOWN = ["esc\\x1b[31mRED\\x1b[0m.1", "nul\\x00.2", "cr\\rnl\\n.3", "tab\\tc1\\x9b2J.4",
          "bidi\\u202eevil\\u2066x\\u2069\\u200f.5", "zw\\u200bbom\\ufeffshy\\xadls\\u2028.6"]


@pytest.fixture(scope="module")
def evil_pair(tmp_path_factory):
    """A profile whose six ops carry :data:`_EVIL` names, and the same without the first."""
    tmp = tmp_path_factory.mktemp("evil")
    ops = [(ADD.replace("%add.1", f"%add.{i}"), n, i * 2000, 1000 + i) for i, n in enumerate(_EVIL, 1)]
    a = write(tmp / "a" / "h.xplane.pb", tpu_xspace(ops).SerializeToString())
    b = write(tmp / "b" / "h.xplane.pb", tpu_xspace(ops[1:]).SerializeToString())
    return a, b


def test_control_characters_are_shown_escaped(evil_pair, tmp_path, capsys, monkeypatch):
    a, b = map(str, evil_pair)
    rc, out, _ = _run(["verify", a, b, "-c", "all matched", "-c", "op matching RED appeared",
                       "-c", "no op matching nul"], capsys)
    assert rc == 1 and not _RAW.search(out)
    lines = out.splitlines()
    assert len(lines) == 3 * 2 + 1  # three FAIL lines, each with its reason on one line, and the count
    assert "vanished: esc\\x1b[31mRED\\x1b[0m.1" in lines[1] and "nul\\x00.2" in lines[5]
    for argv in (["analyze", a, "--chip", "tpu-v6e"], ["diff", a, b]):
        rc, out, _ = _run(argv, capsys)
        assert rc == 0 and not _RAW.search(out)
        for name in (_SHOWN if argv[0] == "analyze" else _SHOWN[1:]):
            assert name in out  # on one row: a newline in a name does not split it
    rc, out, _ = _run(["analyze", a, "--html", str(tmp_path / "r.html"), "--format", "json"], capsys)
    assert {r["op_name"] for r in json.loads(out)["ops"]} == set(_EVIL)  # JSON keeps the data
    page = (tmp_path / "r.html").read_text()
    assert not _RAW.search(page) and "esc\\x1b[31mRED" in page and "bidi\\u202eevil" in page
    for name in _SHOWN:  # a newline or tab in a name too (the page keeps them only in HLO text)
        assert name in page
    assert main(["analyze", a, "-o", str(tmp_path / "o.csv")]) == 0
    with open(tmp_path / "o.csv", newline="") as fh:  # a CSV file keeps the data
        assert {r["op_name"] for r in csv.DictReader(fh)} == set(_EVIL)
    capsys.readouterr()
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    rc, out, _ = _run(["analyze", a, "--format", "csv"], capsys)  # CSV on a terminal: the safe form
    assert rc == 0 and not _RAW.search(out)
    assert {r["op_name"] for r in csv.DictReader(io.StringIO(out))} == set(_SHOWN)
    rc, out, _ = _run(["query", a, "select distinct op_name from ops", "--format", "csv"], capsys)  # query's too
    assert rc == 0 and not _RAW.search(out)
    assert {r["op_name"] for r in csv.DictReader(io.StringIO(out))} == set(_SHOWN)
    for argv in (["analyze", a, "--format", "json"], ["query", a, "select distinct op_name from ops", "--format",
                                                       "json"]):  # JSON on a terminal: \\u escapes, the same data
        rc, out, _ = _run(argv, capsys)
        assert rc == 0 and not _RAW.search(out) and "\\u202e" in out
        rows = json.loads(out)["ops" if argv[0] == "analyze" else "result"]
        assert {r["op_name"] for r in rows} == set(_EVIL)


# -- one --top rule ---------------------------------------------------------------------------

def test_top_is_one_rule_for_every_format(tmp_path, capsys):
    path = str(SHARED / MI300X)
    rc, out, _ = _run(["analyze", path, "--format", "json"], capsys)
    full = json.loads(out)
    assert full["top"] is None and len(full["ops"]) == full["rows"]["ops"]["total"] == 16
    rc, out, _ = _run(["analyze", path, "--format", "json", "--top", "3"], capsys)
    cut = json.loads(out)
    assert len(cut["ops"]) == 3 and cut["rows"]["ops"] == {"shown": 3, "total": 16}
    rc, out, _ = _run(["analyze", path, "--format", "csv", "--top", "3"], capsys)
    assert len(list(csv.reader(io.StringIO(out)))) == 1 + 3
    rc, out, _ = _run(["analyze", path, "--format", "csv"], capsys)
    assert len(list(csv.reader(io.StringIO(out)))) == 1 + 16
    pq = tmp_path / "o.parquet"
    assert main(["analyze", path, "-o", str(pq), "--top", "4"]) == 0  # the suffix picks parquet
    assert pl.read_parquet(pq).height == 4
    rc, out, _ = _run(["diff", path, path, "--format", "json", "--top", "2"], capsys)
    d = json.loads(out)
    assert len(d["populations"]) == 2 and d["rows"]["populations"]["total"] == 16


# -- occurrence checks show their failures ----------------------------------------------------

def test_steps_failures_first_counted_and_per_program(capsys):
    path = str(SHARED / MI300X)
    # --steps 2: the GEMMs ran 3 times each, most broadcasts once or twice
    rc, out, _ = _run(["analyze", path, "--format", "json", "--steps", "2"], capsys)
    d = json.loads(out)
    rows, summ = d["occurrence_checks"], d["occurrence_checks_summary"]
    fails = [r for r in rows if r["steps_ok"] is False]
    assert summ == {"populations": len(rows), "checked": len(rows), "failing": len(fails)} and 0 < len(fails) < len(rows)
    assert all(r["steps_ok"] is False for r in rows[:len(fails)])  # failures first, whatever --top cuts
    rc, out, _ = _run(["analyze", path, "--steps", "2", "--top", "3"], capsys)
    assert f"{len(fails)} of {len(rows)} checked populations fail" in out
    assert f"{len(rows) - 3} more populations (failures are listed first" in out
    # per program: jit_dot's populations checked against 3, the others not at all
    rc, out, _ = _run(["analyze", path, "--format", "json", "--steps", "jit_dot=3"], capsys)
    d = json.loads(out)
    dot = [r for r in d["occurrence_checks"] if r["modules"] == ["jit_dot"]]
    other = [r for r in d["occurrence_checks"] if "jit_dot" not in r["modules"]]
    assert dot and all(r["steps_ok"] is True and r["steps"] == 3 for r in dot)
    assert other and all(r["steps_ok"] is None for r in other)
    assert d["occurrence_checks_summary"]["failing"] == 0
    rc, _, err = _run(["analyze", path, "--steps", "2", "--steps", "jit_dot=3"], capsys)
    assert rc == 2 and "not both" in err


# -- piped tables keep every character --------------------------------------------------------

def test_piped_table_is_not_cropped(capsys, monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)
    rc, out, _ = _run(["analyze", str(SHARED / "vllm_tpu_qwen")], capsys)
    assert rc == 0
    prof = traceview.load(SHARED / "vllm_tpu_qwen")
    top = prof.by_shape().head(25)
    shown = [s.rsplit("/", 2)[-2:] for s in top["source"] if s]
    for parts in shown:  # the source column's file:line, whole, on one row
        assert "/".join(parts) in out
    assert all(len(line) <= 8192 for line in out.splitlines())
    assert not any(line.rstrip().endswith("…") for line in out.splitlines())


def test_piped_tables_ignore_columns_and_obey_top(capsys, monkeypatch):
    """A shell exports COLUMNS to pipes too: a piped table is as wide as without it, and
    --top sets the rows of the roofline and source tables as of the op table."""
    path = str(SHARED / "vllm_tpu_qwen")
    argv = ["analyze", path, "--top", "30", "--chip", "tpu-v6e"]
    monkeypatch.delenv("COLUMNS", raising=False)
    rc, wide, _ = _run(argv, capsys)
    d_wide = _run(["diff", path, path, "--top", "3"], capsys)[1]
    monkeypatch.setenv("COLUMNS", "60")
    rc, narrow, _ = _run(argv, capsys)
    assert rc == 0 and narrow == wide and "convolutio…" not in narrow
    assert _run(["diff", path, path, "--top", "3"], capsys)[1] == d_wide
    rep = json.loads(_run(argv + ["--format", "json"], capsys)[1])
    n_src, n_roof = len(rep["sources"]), len(rep["roofline"])
    assert n_roof == 30 and n_src == 14
    assert "roofline of the top 30 ops (×N: an op's N per-layer copies as one row)" in narrow and "— top 14 of 14" in narrow
    assert len(rep["roofline_layers"]) == 30 and rep["rows"]["roofline_layers"] == {"shown": 30, "total": 75}


def test_terminal_cells_of_megabytes_are_cut(tmp_path, capsys):
    name = "n" * (2 << 20)
    text = ADD.replace("%add.1", f"%{name[:100]}", 1)
    p = write(tmp_path / "h.xplane.pb", tpu_xspace([(text, name, 0, 1000)]).SerializeToString())
    rc, out, _ = _run(["analyze", str(p)], capsys)
    assert rc == 0 and "more characters]" in out and len(out) < 200_000
    rc, out, _ = _run(["analyze", str(p), "--format", "json"], capsys)
    cut = json.loads(out)["ops"][0]["op_name"]  # cut at read: 64 Ki characters at most, marker included
    assert len(cut) <= 1 << 16 and cut.startswith("n" * 60_000) and cut.endswith(" more characters]")


# -- the walk of / ----------------------------------------------------------------------------

def test_pseudo_mounts_reading(tmp_path, monkeypatch):
    import traceview.read.discover as d

    fake = tmp_path / "root" / "proc"
    write(tmp_path / "root" / "logs" / "2024_01_01_00_00_00" / "h.xplane.pb", (SHARED / MI300X).read_bytes())
    write(fake / "1234" / "cwd" / "2025_01_01_00_00_00" / "h.xplane.pb", (SHARED / MI300X).read_bytes())
    mounts = tmp_path / "mounts"
    mounts.write_text(f"proc {fake} proc rw 0 0\n/dev/sda1 / ext4 rw 0 0\nsysfs /sys sysfs rw 0 0\n")
    assert d.pseudo_mounts(str(mounts)) == {str(fake), "/sys"}
    assert d.pseudo_mounts(str(tmp_path / "none")) == {"/proc", "/sys", "/dev"}
    real = d.pseudo_mounts
    monkeypatch.setattr(d, "pseudo_mounts", lambda mounts=str(mounts): real(mounts))
    disc = d.discover(tmp_path / "root")
    assert [str(f.path) for f in disc.files] == [str(tmp_path / "root" / "logs" / "2024_01_01_00_00_00" / "h.xplane.pb")]
    assert "/proc" in real()  # and this machine's /proc is one of them


# -- a home without a usable cache folder ----------------------------------------------------

def test_no_cache_without_a_home(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("TRACEVIEW_NO_CACHE")
    monkeypatch.delenv("TRACEVIEW_CACHE_DIR", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    home = tmp_path / "nonexistent"
    monkeypatch.setenv("HOME", str(home))
    from traceview.read.cache import TableCache, default_root

    assert default_root() is None and TableCache.default() is None
    rc, out, err = _run(["analyze", str(SHARED / MI300X), "--format", "json"], capsys)
    assert rc == 0 and not home.exists()
    notes = [ln for ln in err.splitlines() if "no cache" in ln]
    assert len(notes) == 1 and str(home) in notes[0] and "TRACEVIEW_CACHE_DIR" in notes[0]
    rc, out, err = _run(["analyze", str(SHARED / MI300X), "--format", "json", "--no-cache"], capsys)
    assert "no cache" not in err


def test_report_without_a_home_creates_nothing_there(tmp_path):
    """matplotlib makes ``$HOME/.cache`` and ``$HOME/.config`` when it is imported; with no
    usable HOME the CLI points it at a folder in the temporary directory instead (report and
    its chart worker process alike)."""
    import subprocess
    import sys

    home = tmp_path / "nonexistent"
    env = {k: v for k, v in os.environ.items() if k not in ("MPLCONFIGDIR", "XDG_CACHE_HOME", "XDG_CONFIG_HOME")}
    env["HOME"] = str(home)
    r = subprocess.run([sys.executable, "-m", "traceview.cli", "report", str(SHARED / MI300X), "-o", str(tmp_path / "r.html")],
                       env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert not home.exists() and (tmp_path / "r.html").stat().st_size > 10_000


# -- the devices line -------------------------------------------------------------------------

def test_devices_line_says_summed_and_long_times_read(capsys):
    rc, out, _ = _run(["analyze", str(SHARED / TPU)], capsys)
    assert "summed over the 4 devices" in out
    from traceview.model.units import fmt_time_ps

    assert fmt_time_ps(315.118e12) == "315.118 s"
    assert fmt_time_ps(5 * 3600e12) == "5.000 h" and fmt_time_ps(4 * 86400e12) == "4.00 days"
    assert fmt_time_ps(float("inf")) == "-"


# -- measured CPU peaks -----------------------------------------------------------------------

def test_measured_cpu_peaks_are_warm_and_labelled(capsys):
    """The copy bandwidth against an independent pass: a numpy add of two 64 MiB arrays into a
    third (3 arrays touched, warmed first), best of five: within 4x either way (the copy moves
    2 bytes per 4 read + written, the add 3). A first-touch measurement was 20-30x lower."""
    import time

    import numpy as np

    from traceview.analysis.hardware.peaks import measure_cpu_peaks

    m = measure_cpu_peaks(0.2)
    assert "measured on this host" in m.flops_source and "measured on this host" in m.bw_source
    a = np.ones(16 << 20, dtype=np.float32)
    b = np.ones_like(a)
    c = np.zeros_like(a)
    np.add(a, b, out=c)
    best = 0.0
    for _ in range(5):
        t = time.perf_counter()
        np.add(a, b, out=c)
        best = max(best, 3 * a.nbytes / (time.perf_counter() - t))
    assert best / 10 < m.peak_bw < best * 10, (m.peak_bw, best)  # two measurements on a shared machine
    assert m.peak_flops > 1e9
    rc, out, _ = _run(["analyze", str(Path(__file__).resolve().parents[1] / "fixtures" / "greedy_b4"),
                       "--measure-cpu-peaks", "--format", "json"], capsys)
    pk = json.loads(out)["peaks"]
    assert "measured on this host" in pk["bw_source"] and "command line" not in pk["bw_source"]
    # on a TPU profile the host's CPU says nothing: the trace's peaks stay
    rc, out, _ = _run(["analyze", str(SHARED / TPU), "--measure-cpu-peaks", "--format", "json"], capsys)
    pk = json.loads(out)["peaks"]
    assert pk["peak_flops"] == 918e12 and any("not used" in n for n in pk["notes"])


# -- the library refuses what the CLI refuses ------------------------------------------------

def test_library_report_refuses_profile_folders(tmp_path):
    log = tmp_path / "log"
    run = log / "plugins" / "profile" / "2024_01_02_03_04_05"
    write(run / "h.xplane.pb", (SHARED / MI300X).read_bytes())
    prof = traceview.load(log)
    for bad in (run / "x.html", log / "plugins" / "profile" / "x.html", tmp_path / "other.xplane.pb",
                tmp_path / "missing" / "x.html", tmp_path, log / "x.html", log / "sub" / "x.html"):
        with pytest.raises(traceview.UsageError):
            prof.report(bad)
        assert not (run / "x.html").exists() and not (log / "x.html").exists()
    out = prof.report(tmp_path / "ok.html")
    assert out.read_text().startswith("<!DOCTYPE html>")
    # a hard link to a trace elsewhere keeps its content: outputs are renamed into place
    other = write(tmp_path / "keep" / "h.xplane.pb", b"not to be overwritten")
    link = tmp_path / "link.html"
    os.link(other, link)
    prof.report(link)
    assert other.read_bytes() == b"not to be overwritten"


def test_family_rules_take_polars_syntax():
    from traceview.analysis.ops.families import parse_rule

    r = parse_rule("mine=^add")
    assert r.matches("add.1", "", "", "") and not r.matches("mul.1", "", "", "")
    with pytest.raises(traceview.UsageError, match="look-around"):
        parse_rule("x=(?=a)a")


# -- the library's own argument errors --------------------------------------------------------

def test_library_arguments_give_usage_errors(tmp_path):
    """Every bad argument of the public API is a TraceviewError (UsageError), never a raw
    TypeError / AttributeError / OverflowError / polars error; counts are held to 2**62 as the
    CLI holds its options; a path may be bytes."""
    import traceview
    from traceview.errors import UsageError

    path = str(SHARED / MI300X)
    prof = traceview.load(path, cache=False)
    assert prof.occurrence_checks(steps=2 ** 70).height == prof.occurrence_checks(steps=1 << 62).height > 0
    out = prof.report(tmp_path / "r.html", top=2 ** 70)
    assert out.stat().st_size > 10_000
    bad = [lambda: traceview.load(path, cache="x"), lambda: prof.roofline(peaks="x"),
           lambda: traceview.verify(path, [1]), lambda: traceview.load(None), lambda: traceview.diff(path, path, bogus=1),
           lambda: prof.report(tmp_path / "s.html", top=-1), lambda: prof.occurrence_checks(steps=0),
           lambda: prof.occurrence_checks(steps={"jit_dot": "3"})]
    for call in bad:
        with pytest.raises(UsageError):
            call()
    assert traceview.load(os.fsencode(path), cache=False).by_shape().height == prof.by_shape().height == 16


@pytest.mark.parametrize("order", [("bad.2", "dot.1"), ("dot.1", "bad.2")])
def test_an_unreadable_hlo_instruction_costs_only_its_own_shapes(monkeypatch, order):
    """A module's instructions are decoded when an event names them: one that fails to decode
    leaves that op without shapes, the module's other ops keep theirs whatever the order of
    lookups, and the module gets one note."""
    from badinputs import hlo_proto_bytes

    from traceview.model import hlo

    real = hlo._decode_op

    def decode(mod, ins, by_id, costs, *stacks):
        if ins.name.startswith("bad"):
            raise ValueError("hostile instruction")
        return real(mod, ins, by_id, costs, *stacks)

    monkeypatch.setattr(hlo, "_decode_op", decode)
    index = hlo.HloIndex()
    index.add(7, "jit_g", hlo_proto_bytes(ops=(("dot.1", "dot"), ("bad.2", "add"))))
    got = {name: index.op(7, name) for name in order + order}
    assert got["bad.2"] is None
    assert got["dot.1"] is not None and str(got["dot.1"].result) == "f32[16,16]"
    assert index.errors == ["HLO proto of jit_g(7): instruction bad.2 is unreadable (ValueError: hostile "
                            "instruction); the ops whose instructions cannot be read have no shapes"]


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="[]\\ab/#@:x1", max_size=24))
def test_terminal_escape_renders_every_string_as_itself(text):
    """A trace string in the terminal reads as it is in the trace: brackets after backslashes
    (a regex in a verify hint: ``f32\\[1,33\\]``), tag-like text and emoji codes; the markup
    after it still works."""
    from rich.markup import render

    from traceview.render.terminal import escape

    after_tag = render(escape(text) + "[bold]z[/bold]", emoji=False).plain
    if text.endswith("\\"):  # trailing backslashes are padded so the markup after them stays markup
        assert after_tag.endswith("z") and "[" not in after_tag[len(text.rstrip("\\")):]
    else:
        assert after_tag == text + "z"
        assert render(escape(text) + " z", emoji=False).plain == text + " z"


def test_verify_hint_in_the_terminal_is_the_json_one(capsys):
    """The hint's regex escapes its brackets; the terminal line must keep them (a user pasted
    it and got 'unclosed character class')."""
    fx = str(Path(__file__).resolve().parents[1] / "fixtures" / "nodonate_b4")
    assert main(["analyze", fx, "--format", "json"]) == 0
    findings = json.loads(capsys.readouterr().out)["findings"]
    hints = [f["verify_hint"] for f in findings if f["verify_hint"] and "\\[" in f["verify_hint"]]
    assert hints
    assert main(["analyze", fx]) == 0
    text = capsys.readouterr().out
    assert all(f"verify: {h}" in text for h in hints)


def test_a_name_that_is_not_utf8_is_named_in_words(tmp_path, capsys):
    """One byte of an op name made invalid UTF-8: in the XSpace's metadata the file is refused
    in one line that says what is wrong (no internal message type); inside an HLO proto the
    module loses its shapes with a warning in the same words, and its ops are still counted."""
    data = bytearray((SHARED / TPU).read_bytes())
    data[data.find(b"all-reduce") + 3] = 0xFF
    bad = tmp_path / "name.xplane.pb"
    bad.write_bytes(bytes(data))
    code, out, err = _run(["analyze", str(bad), "--no-cache"], capsys)
    assert code == 4 and out == "" and err.count("\n") == 1
    assert f"{bad}: not a valid XSpace protobuf: a string field" in err and "not valid UTF-8" in err
    assert "traceview." not in err.replace("traceview: error", "")
    data = bytearray((SHARED / "mi300x_jax_gemm_sweep.xplane.pb").read_bytes())
    at = data.find(b"gemm")  # inside the first HLO proto in /host:metadata
    data[at + 1] = 0xFE
    hlo = tmp_path / "hlo.xplane.pb"
    hlo.write_bytes(bytes(data))
    code, out, err = _run(["analyze", str(hlo), "--no-cache", "--format", "json"], capsys)
    assert code == 0
    doc = json.loads(out)
    said = [w for w in doc["warnings"] if "is unreadable" in w]
    assert len(said) == 1 and "not valid UTF-8" in said[0] and "HloProto" not in said[0]
    assert sum(d["ops"] for d in doc["devices"]) == 42  # every op event, as the intact trace reads


def test_a_value_that_rounds_to_zero_never_reads_minus_zero():
    """A memory-growth slope of -3e-9 B per step read "-0 B"; 0 it is, in every formatter."""
    from traceview.model.units import fmt_bytes, fmt_pct, fmt_ratio, fmt_time_ps

    assert [fmt_bytes(v) for v in (-3e-9, -0.0, -0.4, -0.6)] == ["0 B", "0 B", "0 B", "-1 B"]
    assert [fmt_time_ps(v) for v in (-3e-9, -0.0, -0.6)] == ["0 ps", "0 ps", "-1 ps"]
    assert [fmt_pct(v) for v in (-3e-9, -0.0, -0.4)] == ["0.0%", "0.0%", "-40.0%"]
    assert [fmt_ratio(v) for v in (-0.0, -0.004, -0.4)] == ["0.00", "-0.004", "-0.40"]


def test_query_column_names_are_escaped_on_a_terminal(capsys, monkeypatch):
    """A query's column names (its aliases) reach the terminal as the cells do: escaped in the
    table, and in CSV on a terminal; a CSV to a pipe and the JSON keep the exact name."""
    gemm = str(SHARED / MI300X)
    alias = "op\x1b[2J\x07"
    sql = f'select op_name as "{alias}", count(*) as "n\x1b[0m" from ops group by 1 order by 2 desc limit 1'
    rc, out, _ = _run(["query", gemm, sql], capsys)
    assert rc == 0 and not _RAW.search(out)
    header = out.splitlines()[1]
    assert header.split("|")[1].strip() == "op\\x1b[2J\\x07" and header.split("|")[2].strip() == "n\\x1b[0m"
    assert [c.strip() for c in out.splitlines()[5].split("|")[1:3]] == ["custom-call.1", "15"]
    rc, out, _ = _run(["query", gemm, sql, "--format", "csv"], capsys)  # a pipe: the exact name
    assert rc == 0 and out.splitlines() == [f"{alias},n\x1b[0m", "custom-call.1,15"]
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    rc, out, _ = _run(["query", gemm, sql, "--format", "csv"], capsys)
    assert rc == 0 and out.splitlines() == ["op\\x1b[2J\\x07,n\\x1b[0m", "custom-call.1,15"]
    rc, out, _ = _run(["query", gemm, sql, "--format", "json"], capsys)
    assert json.loads(out)["result"] == [{alias: "custom-call.1", "n\x1b[0m": 15}]
