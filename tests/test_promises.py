"""The small promises of issue 24, item 6: a log dir inside a run is refused, a run dated in
the future is not the newest, ``""`` is no path, a single file is read as itself, and step
numbers have one base (0, as the ``step`` column) in every chart and table."""

from __future__ import annotations

import os
import re
import shutil
import time
from pathlib import Path

import pytest

import traceview
from traceview.cli import main
from traceview.errors import UsageError
from traceview.read.discover import discover

ROOT = Path(__file__).resolve().parents[1]
B4 = ROOT / "fixtures" / "greedy_b4"
GEMM = "mi300x_jax_gemm_sweep.xplane.pb"


def _listing(folder: Path) -> list:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def test_engine_log_dir_inside_a_run_is_refused(tmp_path, capsys):
    """``engine profile --log-dir`` into a run folder, its ``plugins/profile`` or ``plugins``
    folder, below a run, or into a copied run folder: one line naming the log dir above to
    pass, exit 2, before JAX is started; nothing written."""
    from traceview.engine_shim.cli import main as engine

    log = tmp_path / "log"
    shutil.copytree(B4, log)
    run = next((log / "plugins" / "profile").iterdir())
    copied = tmp_path / "copies" / run.name
    shutil.copytree(run, copied)
    before = _listing(tmp_path)
    for where, above in ((run, log), (log / "plugins" / "profile", log), (log / "plugins", log),
                         (run / "sub", log), (copied, copied.parent)):
        assert engine(["profile", "--log-dir", str(where)]) == 2, where
        err = capsys.readouterr().err
        assert len(err.splitlines()) == 1 and "is inside a profile tree" in err, err
        assert err.rstrip().endswith(f"pass the log dir {above.resolve()} to add a run beside the others"), err
    assert _listing(tmp_path) == before


def _run_folder(log: Path, name: str, data: bytes) -> Path:
    run = log / "plugins" / "profile" / name
    run.mkdir(parents=True)
    (run / "h.xplane.pb").write_bytes(data)
    return run


def test_a_run_dated_in_the_future_is_not_the_newest(shared_traces, tmp_path, capsys):
    data = (shared_traces / GEMM).read_bytes()
    log = tmp_path / "log"
    now = time.time()
    stamp = lambda t: time.strftime("%Y_%m_%d_%H_%M_%S", time.localtime(t))  # noqa: E731
    future, recent, old = (stamp(now + 86400 * 400), stamp(now - 3600), stamp(now - 7200))
    for name in (future, recent, old):
        _run_folder(log, name, data)
    d = discover(log, now=now)
    assert [r.name for r in d.runs] == [future, recent, old]  # listed by date, newest first
    assert [r.name for r in d.selected] == [recent]
    warn = " ".join(d.warnings)
    assert f"1 run(s) dated in the future (clock skew?): {future}; reading {recent}, the newest run not in the future" in warn
    assert any(f"reading run {recent} (" in x and "not dated in the future (1 are)" in x for x in d.reasons)
    parts = [p for x in d.reasons for p in x.split("; ")]
    assert not any("old, 1 host" in p and future in p for p in parts)  # never "in the future ... old"
    assert any(f"{future} (" in p and "dated in the future (clock skew?), 1 host" in p for p in parts)
    assert main(["analyze", str(log), "--top", "1", "--no-cache"]) == 0
    said = capsys.readouterr()
    assert f"reading {recent}, the newest run not in the future" in said.out + said.err
    # every run in the future: the newest of them, said so
    only = tmp_path / "only"
    _run_folder(only, future, data)
    _run_folder(only, stamp(now + 86400 * 30), data)
    d = discover(only, now=now)
    assert [r.name for r in d.selected] == [future]
    assert "reading " + future + ", the newest of them (no run is dated before now)" in " ".join(d.warnings)


def test_an_empty_path_is_a_usage_error(shared_traces, tmp_path, capsys, monkeypatch):
    """``analyze ""`` (an unset shell variable) is exit 2 with one line, never ``.``; in every
    command that takes a PATH, and in the library."""
    monkeypatch.chdir(tmp_path)
    gemm = str(shared_traces / GEMM)
    for argv in (["analyze", ""], ["analyze", "  "], ["report", "", "-o", "r.html"], ["query", "", "SELECT 1"],
                 ["diff", "", gemm], ["diff", gemm, ""], ["verify", "", "-c", "no finding x"],
                 ["history", ""], ["ladder", "", gemm, "--x", "1,2"], ["export", "", "-o", "w"]):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert len(err.splitlines()) == 1 and "PATH is empty" in err, (argv, err)
    with pytest.raises(UsageError, match="the path is empty"):
        traceview.load("")
    with pytest.raises(UsageError, match="the path is empty"):
        discover("")
    assert os.listdir(tmp_path) == []


def test_a_single_file_is_read_as_itself(shared_traces, tmp_path):
    """A file given is named as read, with its date; its folder (``traces``) is never called a
    run. A file inside a run folder names the run too."""
    f = shared_traces / GEMM
    d = discover(f)
    assert d.reasons[0].startswith(f"reading {f}: the file given (written ")
    assert not any(x.startswith("reading run") for x in d.reasons), d.reasons
    assert not any("traces" in x and "run" in x for x in d.reasons), d.reasons
    run = _run_folder(tmp_path, "2026_01_02_03_04_05", f.read_bytes())
    d = discover(run / "h.xplane.pb")
    assert d.reasons[0].startswith(f"reading {run / 'h.xplane.pb'}: the file given, of run 2026_01_02_03_04_05 (written ")
    assert not any(x.startswith("reading run") for x in d.reasons), d.reasons


def _ticks(svg: str) -> list[str]:
    """The x tick labels of a chart (text elements, ``svg.fonttype`` none), in order."""
    axis = svg.split('id="xtick_', 1)[1].split('id="ytick_', 1)[0] if 'id="xtick_' in svg else ""
    return [t for t in re.findall(r"<text[^>]*>([^<]*)</text>", axis) if t != "step"]


def test_step_numbers_are_zero_based_in_every_chart_and_table(shared_traces):
    """The stacked bars, the skew strip and the strip chart number steps as the ``step``
    column of the tables and the JSON does: from 0."""
    from traceview.render import charts

    bars = charts.steps_svg([[1e9, 2e9, 3e9], [1e9, 1e9, 1e9]], ["#000", "#111"])
    assert _ticks(bars) == ["0", "1", "2"], _ticks(bars)
    skew = charts.skew_svg(["a", "b"], [[1.0, 2.0, 3.0], [1.0, 1.0, 1.0]])
    assert _ticks(skew) == ["0", "1", "2"], _ticks(skew)
    assert _ticks(charts.steps_svg([[1e9, 2e9]], ["#000"], [4, 5])) == ["4", "5"]
    steps = traceview.load(shared_traces / GEMM, cache=False).steps().steps
    assert steps["step"].min() == 0  # the tables' and the JSON's step column
    strip = charts.step_strip_svg(steps["step"].to_list(), steps["duration_ps"].to_list(), [False] * steps.height)
    ticks = _ticks(strip)
    assert "0" in ticks and all(t.replace("\u2212", "-").lstrip("-").isdigit() for t in ticks), ticks
