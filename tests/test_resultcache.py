"""The stored-result cache: the same ``analyze`` over unchanged files answers without reading,
byte for byte what the first run wrote; a changed file, other options or --no-cache do not."""

from __future__ import annotations

import shutil

import pytest

import traceview.model.load as profile
from traceview.cli import main, resultcache
from traceview.read import cache


@pytest.fixture
def trace(tmp_path, shared_traces):
    src = tmp_path / "in" / "tpu_v6e_4chip_psum.xplane.pb"
    src.parent.mkdir()
    shutil.copyfile(shared_traces / "tpu_v6e_4chip_psum.xplane.pb", src)
    # two hours old: the run's age in the output ("2 h old") and in the key stays the same
    # while a test runs (a fresh file's age is in seconds)
    import os
    import time

    t = time.time() - 2 * 3600
    os.utime(src, (t, t))
    return src


def _no_reading(monkeypatch):
    def boom(*a, **k):
        raise AssertionError("the trace was read although the stored result applies")

    monkeypatch.setattr(profile, "load", boom)


@pytest.mark.parametrize("fmt", ["json", "csv", "parquet"])
def test_same_command_is_answered_from_the_stored_result(cache_dir, trace, tmp_path, monkeypatch, fmt):
    a, b = tmp_path / f"a.{fmt}", tmp_path / f"b.{fmt}"
    assert main(["analyze", str(trace), "--format", fmt, "-o", str(a)]) == 0
    assert len(list((cache_dir / "results").glob("*.out"))) == 1
    with monkeypatch.context() as m:
        _no_reading(m)
        assert main(["analyze", str(trace), "--format", fmt, "-o", str(b)]) == 0
    assert a.read_bytes() == b.read_bytes()
    # and it is what an uncached run writes
    c = tmp_path / f"c.{fmt}"
    assert main(["analyze", str(trace), "--format", fmt, "-o", str(c), "--no-cache"]) == 0
    assert c.read_bytes() == a.read_bytes()


def test_stdout_is_stored_too(cache_dir, trace, monkeypatch, capsysbinary):
    assert main(["analyze", str(trace), "--format", "json", "--top", "3"]) == 0
    first = capsysbinary.readouterr().out
    assert first.startswith(b"{") and b'"ops"' in first
    _no_reading(monkeypatch)
    assert main(["analyze", str(trace), "--format", "json", "--top", "3"]) == 0
    assert capsysbinary.readouterr().out == first


def test_changed_file_or_other_options_are_misses(cache_dir, trace, tmp_path, monkeypatch):
    out = tmp_path / "o.json"
    assert main(["analyze", str(trace), "--format", "json", "-o", str(out)]) == 0
    calls = []
    real = profile.load

    def counting(*a, **k):
        calls.append(1)
        return real(*a, **k)

    monkeypatch.setattr(profile, "load", counting)
    assert main(["analyze", str(trace), "--format", "json", "-o", str(out), "--top", "5"]) == 0
    assert len(calls) == 1  # other options: computed again
    data = bytearray(trace.read_bytes())
    trace.write_bytes(bytes(data))  # same bytes, new mtime: the identity changed
    assert main(["analyze", str(trace), "--format", "json", "-o", str(out)]) == 0
    assert len(calls) == 2
    assert main(["analyze", str(trace), "--format", "json", "-o", str(out), "--no-cache"]) == 0
    assert len(calls) == 3


def test_no_cache_stores_nothing_and_html_is_never_served(cache_dir, trace, tmp_path):
    out = tmp_path / "o.json"
    assert main(["analyze", str(trace), "--format", "json", "-o", str(out), "--no-cache"]) == 0
    assert not (cache_dir / "results").exists()
    html = tmp_path / "r.html"
    assert main(["analyze", str(trace), "--format", "json", "-o", str(out), "--html", str(html)]) == 0
    assert not (cache_dir / "results").exists() and html.is_file()


def test_stored_result_is_not_written_into_the_profile_folder(cache_dir, trace, tmp_path, capsys):
    """A stored result is refused inside a profile tree as the first answer was; beside a
    loose trace (no profile tree) it is written."""
    run = tmp_path / "log" / "plugins" / "profile" / "2026_01_01_00_00_00"
    run.mkdir(parents=True)
    shutil.copyfile(trace, run / trace.name)
    assert main(["analyze", str(run), "--format", "json", "-o", str(tmp_path / "o.json")]) == 0
    inside = run / "o.json"
    assert main(["analyze", str(run), "--format", "json", "-o", str(inside)]) == 2
    assert not inside.exists()
    assert "refusing to write" in capsys.readouterr().err
    beside = trace.parent / "o.json"
    assert main(["analyze", str(trace), "--format", "json", "-o", str(tmp_path / "o2.json")]) == 0
    assert main(["analyze", str(trace), "--format", "json", "-o", str(beside)]) == 0
    assert beside.read_bytes() == (tmp_path / "o2.json").read_bytes()


def test_prune_keeps_the_newest(tmp_path):
    d = tmp_path / "results"
    d.mkdir()
    for i in range(5):
        p = d / f"{i}.out"
        p.write_bytes(b"x")
        import os

        os.utime(p, (1000 + i, 1000 + i))
    assert resultcache.prune(d, max_entries=2) == 3
    assert sorted(p.name for p in d.iterdir()) == ["3.out", "4.out"]


def test_output_is_the_same_in_every_process(shared_traces, tmp_path):
    """Ties (equal self and total time) are ordered by key, not by polars' hash order, which
    changes from one process to the next: a stored result must equal a fresh run's bytes."""
    import subprocess
    import sys

    outs = []
    for i in range(3):
        out = tmp_path / f"o{i}.json"
        subprocess.run([sys.executable, "-m", "traceview.cli", "analyze", str(shared_traces / "vllm_tpu_qwen"),
                        "--format", "json", "--no-cache", "-o", str(out)], check=True, capture_output=True)
        outs.append(out.read_bytes())
    assert outs[0] == outs[1] == outs[2]


def test_rules_file_content_and_byte_limit_and_damage(cache_dir, trace, tmp_path, monkeypatch):
    fam = tmp_path / "fam.txt"
    out = tmp_path / "o.json"
    fam.write_text("gemms=copy\n")
    assert main(["analyze", str(trace), "--format", "json", "-o", str(out), "--families", str(fam)]) == 0
    assert b'"gemms"' in out.read_bytes()
    fam.write_text("reductions=copy\n")  # same path, new rules: not the stored result
    assert main(["analyze", str(trace), "--format", "json", "-o", str(out), "--families", str(fam)]) == 0
    assert b'"reductions"' in out.read_bytes() and b'"gemms"' not in out.read_bytes()
    monkeypatch.setenv("TRACEVIEW_MAX_BYTES", "1000")  # a limit is checked by reading, never skipped
    assert main(["analyze", str(trace), "--format", "json", "-o", str(out), "--families", str(fam)]) == 6
    monkeypatch.delenv("TRACEVIEW_MAX_BYTES")
    for p in (cache_dir / "results").glob("*.out"):
        p.write_bytes(p.read_bytes()[:300])  # damaged entries are misses, not served
    assert main(["analyze", str(trace), "--format", "json", "-o", str(out), "--families", str(fam)]) == 0
    assert out.read_bytes().endswith(b"}\n") and b'"reductions"' in out.read_bytes()


def test_cache_folder_in_a_profile_tree_gets_nothing(trace, tmp_path, monkeypatch):
    tree = tmp_path / "logs" / "plugins" / "profile" / "tvcache"
    monkeypatch.setenv("TRACEVIEW_CACHE_DIR", str(tree))
    monkeypatch.setattr(cache, "MIN_FILE_BYTES", 0)
    for _ in range(2):
        assert main(["analyze", str(trace), "--format", "csv", "-o", str(tmp_path / "o.csv")]) == 0
    assert not tree.exists() or not any(tree.rglob("*"))


def test_in_place_edit_with_mtime_put_back_is_a_miss(cache_dir, trace, tmp_path):
    out = tmp_path / "o.json"
    assert main(["analyze", str(trace), "--format", "json", "-o", str(out)]) == 0
    st = trace.stat()
    data = trace.read_bytes()
    i = data.index(b"jit__psum", len(data) // 4)  # a module name inside the file, not at its edges
    with open(trace, "r+b") as fh:
        fh.seek(i)
        fh.write(b"jit__PSUM")
    import os

    os.utime(trace, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert main(["analyze", str(trace), "--format", "json", "-o", str(out)]) == 0
    assert b"jit__PSUM" in out.read_bytes()


def test_code_fingerprint_covers_the_report_template():
    """An edit of the HTML report's template alone must not serve a page the old template
    rendered: the code fingerprint the result cache keys on reads the template too."""
    from traceview.read.cache import code_files

    names = {p.name for p in code_files()}
    assert "report.html.j2" in names
    assert "cache.py" in names


def test_a_stored_answer_names_the_scheduler_it_did_not_contact(cache_dir, trace, monkeypatch, capsysbinary):
    """--scheduler is where files are read: a stored output reads none, so no cluster is asked
    (exit 0) and a warning names the address; without the stored output the same wrong address
    is exit 7."""
    pytest.importorskip("distributed")
    from traceview.errors import EXIT_REMOTE

    bad = ["--scheduler", "tcp://127.0.0.1:1"]
    assert main(["analyze", str(trace), "--format", "json", "--top", "3", *bad]) == EXIT_REMOTE
    assert b"cannot reach the Dask scheduler at tcp://127.0.0.1:1" in capsysbinary.readouterr().err
    assert main(["analyze", str(trace), "--format", "json", "--top", "3"]) == 0  # stored
    first = capsysbinary.readouterr()
    assert b"warning" not in first.err
    with monkeypatch.context() as m:
        _no_reading(m)
        assert main(["analyze", str(trace), "--format", "json", "--top", "3", *bad]) == 0
    got = capsysbinary.readouterr()
    assert got.out == first.out
    assert got.err.decode().splitlines() == [
        "traceview: warning: the Dask scheduler at tcp://127.0.0.1:1 was not contacted: this output was stored by an "
        "earlier run over the same files (--no-cache reads them on the cluster)"]
    assert main(["analyze", str(trace), "--format", "json", "--top", "3", "--no-cache", *bad]) == EXIT_REMOTE


def test_a_host_read_from_its_json_instead_is_not_stored(cache_dir, tmp_path, shared_traces):
    """The key names the files discovery chose: a run whose unreadable .xplane.pb was replaced by
    the trace JSON beside it is not stored, so a changed JSON is never answered from the store."""
    import gzip
    import os

    import orjson

    from badinputs import OLD, tpu_trace_doc

    run = tmp_path / "in" / "2024_01_02_03_04_05"
    run.mkdir(parents=True)
    data = (shared_traces / "tpu_v6e_4chip_psum.xplane.pb").read_bytes()
    (run / "h.xplane.pb").write_bytes(data[: len(data) // 2])
    (run / "h.trace.json.gz").write_bytes(gzip.compress(orjson.dumps(tpu_trace_doc())))
    for p in run.iterdir():
        os.utime(p, (OLD, OLD))
    out = tmp_path / "a.json"
    assert main(["analyze", str(run), "--format", "json", "-o", str(out)]) == 0
    assert orjson.loads(out.read_bytes())["provenance"]["files"][0]["format"] == "trace_json"
    assert not list((cache_dir / "results").glob("*.out"))
