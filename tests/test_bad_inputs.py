"""Bad, hostile and half-written inputs through ``traceview analyze`` (issue 6).

Every case of the corpus in ``tests/badinputs.py`` is built into a temporary folder and run
through ``traceview.cli.main``, with the C XLine decoder and with the pure-Python fallback.
An error is exactly one line on stderr, ``traceview: error: <path>: <fault>``, naming the
file (or folder) and the fault, with the documented exit code and no traceback; a success
prints its JSON on stdout with the documented warnings. A guard fails the test if a case runs
for minutes (a hang), without asserting anything about speed.

The second half checks that nothing is ever written under the input path, whatever the
output format, and that trace strings reach the HTML report escaped.
"""

from __future__ import annotations

import json
import os
import signal
import stat
from pathlib import Path

import pytest

import traceview.read.xplane.wire
import traceview.model.from_xplane
from traceview.cli import main

from badinputs import ADD, CASES, MI300X, RUN, SHARED, gz, readme_table, tpu_trace_doc, tpu_xspace, write

HANG_GUARD_S = 120


@pytest.fixture
def hang_guard():
    """Fail (instead of hanging CI) if the body runs longer than HANG_GUARD_S seconds."""
    def on_alarm(signum, frame):
        raise TimeoutError(f"still running after {HANG_GUARD_S} s: a hang")

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(HANG_GUARD_S)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


def _no_constant(name):
    raise AssertionError(f"invalid JSON constant {name} in the output")


def run_cli(argv, capsys):
    rc = main(argv)
    out, err = capsys.readouterr()
    return rc, out, err


RUNS = [(c, d) for c in CASES for d in (("c", "python") if c.xplane else ("c",))]


@pytest.mark.parametrize(("case", "decoder"), RUNS, ids=[f"{c.id}-{d}" for c, d in RUNS])
def test_bad_input(case, decoder, tmp_path, monkeypatch, capsys, hang_guard):
    if decoder == "python":
        monkeypatch.setattr(traceview.model.from_xplane, "_fast", None)
        monkeypatch.setattr(traceview.read.xplane.wire, "_fast", None)
    else:
        assert traceview.model.from_xplane._fast is not None, "the C decoder is not built"
    monkeypatch.delenv("TRACEVIEW_MAX_BYTES", raising=False)
    monkeypatch.setenv("TRACEVIEW_NO_CACHE", "1")  # the readers themselves, every time
    work = tmp_path / "in"
    work.mkdir()
    built = case.build(work)
    for k, v in built.env.items():
        monkeypatch.setenv(k, v)
    if built.patch is not None:
        built.patch(monkeypatch)
    monkeypatch.chdir(tmp_path)
    rc, out, err = run_cli(["analyze", str(built.path), "--format", "json", *built.args], capsys)
    assert "Traceback" not in err and "Traceback" not in out
    assert rc == case.exit_code, f"exit {rc}, expected {case.exit_code}; stderr: {err}"
    if case.exit_code != 0:
        lines = err.splitlines()
        assert len(lines) == 1, f"expected one line on stderr, got {len(lines)}: {err[:2000]}"
        line = lines[0]
        assert line.startswith("traceview: error: ")
        assert (built.names or str(built.path)) in line, line
        for s in case.expect:
            assert s in line, f"{s!r} not in {line!r}"
        for s in case.expect_not:
            assert s not in line, f"{s!r} in {line!r}"
        assert len(line) < 4000  # one readable line, even for a multi-megabyte input
        assert out == ""
    else:
        assert err == ""
        payload = json.loads(out, parse_constant=_no_constant)  # valid JSON: no NaN or Infinity
        assert payload["ops"], "no op rows"
        warnings = payload["warnings"]
        for s in case.expect:
            assert any(s in w for w in warnings), f"no warning with {s!r}: {warnings}"
        for s in case.expect_not:
            assert not any(s in w for w in warnings), f"a warning has {s!r}: {warnings}"
        if built.check is not None:
            built.check(payload)
        if built.ops_from:
            with_ops = [f["path"] for f in payload["provenance"]["files"] if f["op_events"]]
            assert with_ops and all(built.ops_from in p for p in with_ops), with_ops
    for argv, want in built.also:  # the same input through other commands and formats
        argv = [a.replace("{path}", str(built.path)).replace("{tmp}", str(tmp_path)) for a in argv]
        rc, out, err = run_cli(argv, capsys)
        assert "Traceback" not in err and "Traceback" not in out, (argv, err[-2000:])
        assert rc == want, f"{argv}: exit {rc}, expected {want}; stderr: {err[-2000:]}"
        if rc != 0:
            assert len(err.splitlines()) == 1 and err.startswith("traceview: error: "), (argv, err)
        else:
            said = ("wrote ", "traceview: warning", "traceview: note", "traceview: steps ")  # export's summary too
            assert not [ln for ln in err.splitlines() if not ln.startswith(said)], (argv, err)


def test_readme_lists_every_case():
    """tests/README.md carries the corpus table as generated from badinputs.py."""
    readme = (Path(__file__).parent / "README.md").read_text(encoding="utf-8")
    assert readme_table() in readme, "regenerate the table: python tests/badinputs.py"


def test_error_line_in_table_format_too(tmp_path, capsys):
    # the default output format takes the same error path
    p = write(tmp_path / "h.xplane.pb", (SHARED / MI300X).read_bytes()[:5000])
    rc, out, err = run_cli(["analyze", str(p)], capsys)
    assert rc == 4 and out == "" and len(err.splitlines()) == 1 and "truncated" in err


def test_mangled_file_in_library_api():
    """The library raises the same one-line TraceUnreadable the CLI prints."""
    import traceview

    with pytest.raises(traceview.TraceUnreadable) as ei:
        traceview.load(SHARED / "corrupt_utf8_mangled.xplane.pb")
    assert "\n" not in str(ei.value) and "re-encoded as text" in str(ei.value)
    assert ei.value.exit_code == 4


def test_bad_max_bytes_env_is_a_usage_error(tmp_path, monkeypatch, capsys):
    p = write(tmp_path / "h.xplane.pb", tpu_xspace().SerializeToString())
    monkeypatch.setenv("TRACEVIEW_MAX_BYTES", "lots")
    rc, out, err = run_cli(["analyze", str(p)], capsys)
    assert rc == 2 and len(err.splitlines()) == 1 and "TRACEVIEW_MAX_BYTES" in err


def test_every_command_the_read_limit_names_takes_max_bytes(shared_traces, capsys):
    """The read limit's message says "raise it with --max-bytes": diff, verify and ladder take
    it as analyze does, refuse past it with exit 6 naming the file, and read under it."""
    f = str(shared_traces / "tpu_v6e_4chip_psum.xplane.pb")
    for argv in (["diff", f, f], ["verify", f, "-c", "op matching . present"], ["ladder", f, f, "--x", "1,2"]):
        rc, out, err = run_cli([*argv, "--max-bytes", "1000", "--no-cache"], capsys)
        assert rc == 6 and len(err.splitlines()) == 1 and f in err and "--max-bytes" in err, (argv, err)
        rc, out, err = run_cli([*argv, "--max-bytes", str(1 << 30), "--no-cache"], capsys)
        assert rc == 0, (argv, err)


# -- nothing is written under the input path ------------------------------------------------

def _listing(root: Path) -> dict:
    """Every path under root (links not followed) with its type, size, mode and mtime (ns)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            st = p.lstat()
            out[str(p.relative_to(root))] = (stat.S_IFMT(st.st_mode), st.st_size, stat.S_IMODE(st.st_mode), st.st_mtime_ns)
    st = root.lstat()
    out["."] = (stat.S_IFMT(st.st_mode), st.st_size, stat.S_IMODE(st.st_mode), st.st_mtime_ns)
    return out


def _read_only(root: Path) -> None:
    for dirpath, dirnames, filenames in os.walk(root, topdown=False):
        for name in filenames:
            p = Path(dirpath) / name
            if not p.is_symlink():
                p.chmod(p.stat().st_mode & ~0o222)
        Path(dirpath).chmod(Path(dirpath).stat().st_mode & ~0o222)


def _writable(root: Path) -> None:
    for dirpath, dirnames, filenames in os.walk(root):
        Path(dirpath).chmod(0o755)
        for name in filenames:
            p = Path(dirpath) / name
            if not p.is_symlink():
                p.chmod(0o644)


@pytest.fixture
def profile_tree(tmp_path):
    """A read-only log dir: one run with a GPU host (real MI300X trace), a TPU host given as
    trace JSON only, a 1.5 MB TPU host (over the parsed-table cache's minimum size, so the
    cache is exercised) and a truncated host (so the warning path runs too)."""
    root = tmp_path / "logdir"
    run = root / "plugins" / "profile" / RUN
    write(run / "gpu.xplane.pb", (SHARED / MI300X).read_bytes())
    write(run / "tpu.trace.json.gz", gz(tpu_trace_doc()))
    big = ADD + ', metadata={op_name="' + "x" * 1_500_000 + '"}'
    write(run / "big.xplane.pb", tpu_xspace([(big, "add.1", 0, 1000)], device="/device:TPU:1").SerializeToString())
    write(run / "cut.xplane.pb", (SHARED / MI300X).read_bytes()[:3000])
    _read_only(root)
    yield root
    _writable(root)


def test_analyze_writes_nothing_under_the_input(profile_tree, tmp_path, capsys, monkeypatch, hang_guard):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TRACEVIEW_NO_CACHE", raising=False)
    run_dir = profile_tree / "plugins" / "profile" / RUN
    before = _listing(profile_tree)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    runs = [["--format", fmt] for fmt in ("table", "json", "csv")]
    runs += [["--format", fmt, "-o", str(out_dir / f"t.{fmt}")] for fmt in ("table", "json", "csv", "parquet")]
    runs += [["--by", "name"], ["--by", "program", "--steps", "2", "--expect-batch", "8"],
             ["--html", str(out_dir / "r.html")]]
    for cache_dir in (tmp_path / "cache", run_dir / "cache"):  # the cache outside, then pointed into the run
        monkeypatch.setenv("TRACEVIEW_CACHE_DIR", str(cache_dir))
        # every output with the cache outside; pointed into the run, one of each kind of write
        for extra in runs if cache_dir == tmp_path / "cache" else [runs[1], runs[6], runs[-1]]:
            for path in (profile_tree, run_dir / "gpu.xplane.pb", run_dir / "big.xplane.pb"):
                rc, out, err = run_cli(["analyze", str(path), *extra], capsys)
                assert rc == 0, (extra, err)
            assert _listing(profile_tree) == before, f"analyze {extra} changed the input tree"
        rc, out, err = run_cli(["report", str(profile_tree), "-o", str(out_dir / "report.html")], capsys)
        assert rc == 0, err
        assert _listing(profile_tree) == before, "report changed the input tree"
    assert any((tmp_path / "cache").rglob("events.arrow")), "the cache was not exercised"
    # -o inside the tree is refused, and nothing is written there either
    for target in (run_dir / "x.json", run_dir):
        rc, out, err = run_cli(["analyze", str(profile_tree), "--format", "json", "-o", str(target)], capsys)
        assert rc == 2 and "refusing to write" in err and len(err.splitlines()) == 1
    rc, out, err = run_cli(["report", str(profile_tree), "-o", str(run_dir / "r.html")], capsys)
    assert rc == 2 and "refusing to write" in err
    assert _listing(profile_tree) == before
    assert sorted(p.name for p in out_dir.iterdir()) == ["r.html", "report.html", "t.csv", "t.json", "t.parquet", "t.table"]


# -- trace strings reach the HTML report escaped --------------------------------------------

EVIL = "<script>alert(1)</script>\"' onmouseover=\"alert(2)\" </textarea><img src=x onerror=alert(3)>"
EVIL_HOST = "h<img src=x onerror=alert(4)>'\""  # a file name cannot hold "/"


def _evil_xspace() -> bytes:
    text = ADD + f', metadata={{op_name="{EVIL}" source_file="/src/{EVIL}.py"}}'
    xs = tpu_xspace([(text, "add.1" + EVIL, 0, 1000), (EVIL, EVIL, 2000, 500)])
    plane = xs.planes[0]
    plane.event_metadata[1000].name = f"jit_{EVIL}(7)"
    plane.stat_metadata[2].id, plane.stat_metadata[2].name = 2, "source"
    plane.stat_metadata[3].id, plane.stat_metadata[3].name = 3, "tf_op"
    for mid in (1, 2):
        for sid, val in ((2, f"/home/u/{EVIL}/model.py:3"), (3, f"jit({EVIL})/add:")):
            st = plane.event_metadata[mid].stats.add()
            st.metadata_id, st.str_value = sid, val
    return xs.SerializeToString()


def _evil_json() -> bytes:
    doc = tpu_trace_doc([("add.1" + EVIL, ADD, 1.0, 0.5), (EVIL, EVIL, 2.0, 0.5)])
    for e in doc["traceEvents"]:
        if e.get("ph") == "X" and e.get("tid") == 1:
            e["name"] = f"jit_{EVIL}(7)"
        if e.get("ph") == "X" and e.get("tid") == 2:
            e["args"]["source"] = f"/home/u/{EVIL}/model.py:3"
            e["args"]["tf_op"] = f"jit({EVIL})/add:"
    return gz(doc)


def _assert_escaped(html: str) -> None:
    low = html.lower()
    assert "<script" not in low and "</textarea>" not in low and "<img" not in low
    assert 'onmouseover="alert' not in html and "onmouseover='alert" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html  # the strings are there, as text
    assert "onerror=alert(3)&gt;" in html


@pytest.mark.parametrize("kind", ["xplane", "json"])
def test_trace_strings_reach_the_html_report_escaped(kind, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("TRACEVIEW_NO_CACHE", "1")
    run = tmp_path / "logs" / RUN
    name = EVIL_HOST + (".xplane.pb" if kind == "xplane" else ".trace.json.gz")
    write(run / name, _evil_xspace() if kind == "xplane" else _evil_json())
    out = tmp_path / "r.html"
    rc, _, err = run_cli(["report", str(tmp_path / "logs"), "-o", str(out)], capsys)
    assert rc == 0, err
    html = out.read_text(encoding="utf-8")
    _assert_escaped(html)
    assert "h&lt;img src=x onerror=alert(4)&gt;" in html  # the host name, from the file name
    assert "/home/u/&lt;script&gt;" in html  # the source path
    rc, _, err = run_cli(["analyze", str(tmp_path / "logs"), "--html", str(tmp_path / "a.html"), "--format", "json"], capsys)
    assert rc == 0, err
    _assert_escaped((tmp_path / "a.html").read_text(encoding="utf-8"))


def test_zero_fill_message_names_where_the_zeros_begin(shared_traces, tmp_path, capsys, monkeypatch):
    """The fault names the zeroed range itself, not the byte where the walk over whole
    fields happened to land inside it."""
    monkeypatch.setenv("TRACEVIEW_NO_CACHE", "1")
    data = (shared_traces / "tpu_v6e_4chip_psum.xplane.pb").read_bytes()
    tail = tmp_path / "tail.xplane.pb"
    tail.write_bytes(data[:500000] + bytes(len(data) - 500000))
    middle = tmp_path / "middle.xplane.pb"
    middle.write_bytes(data[:300000] + bytes(100000) + data[400000:])
    start = len(data[:500000].rstrip(b"\0"))  # 500000 unless the original ends in zeros there
    assert main(["analyze", str(tail), "--format", "json"]) == 4
    assert f"zero bytes from byte {start} on" in capsys.readouterr().err
    assert main(["analyze", str(middle), "--format", "json"]) == 4
    s2 = len(data[:300000].rstrip(b"\0"))
    e2 = 400000 + (len(data[400000:]) - len(data[400000:].lstrip(b"\0")))
    assert f"zero bytes from byte {s2} to byte {e2}" in capsys.readouterr().err


def test_load_warns_when_reading_without_the_c_decoder(shared_traces, monkeypatch):
    """A copy of traceview without its compiled decoder (a checkout's source tree imported from
    its own folder) reads many times slower: traceview.load says so with a RuntimeWarning;
    with the decoder, no warning."""
    import warnings

    import traceview.read.xplane.wire

    path = shared_traces / "mi300x_jax_gemm_sweep.xplane.pb"
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        traceview.load(path, stale_after_s=None, cache=False)
    assert not [w for w in got if "C decoder" in str(w.message)]
    monkeypatch.setattr(traceview.read.xplane.wire, "_fast", None)
    with pytest.warns(RuntimeWarning, match=r"has no compiled C decoder: traces are read by the pure-Python fallback"):
        traceview.load(path, stale_after_s=None, cache=False)


def test_profile_analyze_options_are_checked_by_name(shared_traces):
    """Profile.analyze / Profile.sql name themselves and list their options for one they do
    not take (not build_report's TypeError), and an option given as None takes its default."""
    import traceview
    from traceview.errors import UsageError

    prof = traceview.load(shared_traces / "tpu_v6e_4chip_psum.xplane.pb", cache=False)
    with pytest.raises(UsageError, match=r"^analyze\(\) got unknown option bogus \(options: by, peaks, "):
        prof.analyze(bogus=1)
    with pytest.raises(UsageError, match=r"^sql\(\) got unknown options on_section, release "):
        prof.sql("SELECT 1", release=None, on_section=None)
    for bad, said in (({"tokens_per_step": 0}, "tokens_per_step must be a whole number > 0, got 0"),
                      ({"tokens_per_step": "abc"}, "tokens_per_step must be a whole number > 0, got 'abc'"),
                      ({"tokens_per_step": True}, "tokens_per_step must be a whole number > 0, got True"),
                      ({"peaks": "x"}, "peaks must be a Peaks (from .peaks()), got str"),
                      ({"html": 5}, "html must be True or False, got 5"),
                      ({"findings": "no"}, "findings must be True or False, got 'no'"),
                      ({"rules": 5}, "family rules must be a rules file's path or a list of 'name=regex' strings")):
        with pytest.raises(UsageError) as ei:
            prof.analyze(**bad)
        assert said in str(ei.value), bad
    with pytest.raises(UsageError, match=r"^sql\(\) takes the query as a string, got int$"):
        prof.sql(5)
    default, given_none = prof.analyze(), prof.analyze(step_window=None, by=None)
    assert given_none.steps.window == default.steps.window == "steady"
    assert given_none.by_shape.equals(default.by_shape)
