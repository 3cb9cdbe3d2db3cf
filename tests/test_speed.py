"""The speed yardstick (benchmarks/speed.py): its verdicts and one small run; the probe both
harnesses (speed.py, run.py) take of the traceview their children import (benchmarks/tvprobe.py).

Timings are never asserted: the verdicts are checked on given figures, and the small run
only has to produce a row for each command it ran.
"""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path

import pytest

_HERE = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(_HERE))
_SPEC = importlib.util.spec_from_file_location("speed", _HERE / "speed.py")
speed = sys.modules["speed"] = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(speed)
import tvprobe  # noqa: E402 - beside speed.py


def _r(wall, mib=100.0, **kw):
    return {"wall_s": wall, "rss_mib": mib, "rc": 0, **kw}


def test_targets_verdicts():
    res = {"t": {"analyze": _r(1.0, 200), "json": _r(1.3, out_bytes=6_000_000), "report": _r(1.4),
                 "diff": _r(2.5), "verify": _r(1.0, 400), "xprof": _r(12.0),
                 "xprof-rs": {"wall_s": 0.1, "rss_mib": 1.0, "rc": 1, "error": "An event metadata ID is out of range"}}}
    got = {what: (fig, v) for _, what, fig, v in speed.targets(res, {"t": 100 * 1048576})}
    assert got["analyze >= 10x faster than XProf hlo_stats"] == ("12.0x", "PASS")
    assert got["analyze no slower than xprof-rs cold"][1] == "unknown"  # it cannot read the trace
    assert got["analyze peak <= 3x file size"] == ("2.00x", "PASS")
    assert got["verify peak <= 3x file size"] == ("4.00x", "FAIL")
    assert got["JSON <= 1.25x table time"] == ("1.30x", "FAIL")
    assert got["JSON <= 5 MB"] == ("6.0 MB", "FAIL")
    assert got["report <= 1.5x analyze"] == ("1.40x", "PASS")
    assert got["diff <= 2.0x analyze"] == ("2.50x", "FAIL")
    rows = speed.table_rows(res, {"t": 100 * 1048576})
    assert [r[1] for r in rows] == list(speed.COMMANDS)
    assert rows[-1][2] == "cannot read" and "out of range" in rows[-1][-1]


def test_rounds_are_reported_by_their_medians():
    """Each command's rounds: the median wall and the median peak (each its own), with the
    ranges; a failed round is reported as the failure, never averaged away."""
    got = speed._median_run([_r(3.0, 300), _r(1.0, 500), _r(2.0, 100)])
    assert (got["wall_s"], got["rss_mib"], got["walls"], got["peaks"]) == (2.0, 300, [1.0, 2.0, 3.0], [100, 300, 500])
    row = speed.table_rows({"t": {"analyze": got}}, {"t": 100 * 1048576})[0]
    assert row[2] == "2.00 (1.00-3.00)" and row[3] == f"{300 * 1048576 / 1e6:.0f} (105-524)"
    bad = speed._median_run([_r(1.0), _r(9.0, error="boom"), _r(2.0)])
    assert bad["error"] == "boom"


def test_small_run_writes_markdown(tmp_path):
    md = tmp_path / "speed.md"
    assert speed.main(["--small", "--only", "mi300x_x20000", "--commands", "verify", "--cache-dir", str(tmp_path),
                       "--markdown", str(md), "--repeat", "2"]) == 0
    text = md.read_text()
    row = next(line for line in text.splitlines() if line.startswith("| mi300x_x2 | verify |"))
    median, spread = row.split("|")[3].split(" (")
    lo, hi = (float(x) for x in spread.rstrip(") ").split("-"))
    assert 0 < lo <= float(median) <= hi
    assert "2 rounds of every command" in text
    assert f"- traceview timed (as the children import it): traceview 0.1.0 at {_HERE.parent / 'traceview'}: C decoder built" in text
    # analyze was not run: the ratio to it is unknown, never a verdict
    assert "| mi300x_x2 | verify <= 1.5x analyze | - | unknown |" in text


def test_an_absent_xprof_rs_is_said_so_not_unreadable():
    res = {"t": {"analyze": _r(1.0), "xprof-rs": {"wall_s": float("nan"), "rss_mib": float("nan"), "rc": 127,
                                                  "error": "xprof-rs not installed"}}}
    rows = speed.table_rows(res, {"t": 100 * 1048576})
    assert rows[-1][2] == "not installed"
    got = {what: (fig, v) for _, what, fig, v in speed.targets(res, {"t": 100 * 1048576})}
    assert got["analyze no slower than xprof-rs cold"] == ("xprof-rs not installed", "unknown")


# -- which traceview the children time ---------------------------------------------------------

_REPO = _HERE.parent


@pytest.fixture(scope="module")
def unbuilt_tree(tmp_path_factory):
    """A checkout whose traceview has no C extensions built: this one's sources, no .so."""
    tree = tmp_path_factory.mktemp("unbuilt")
    shutil.copytree(_REPO / "traceview", tree / "traceview", ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    return tree


def test_probe_reports_the_childs_traceview_and_its_extensions(unbuilt_tree):
    """The probe asks a child started as the timed ones are: this checkout (built in place)
    has every C extension; a checkout without them is the pure-Python fallback, though this
    process has them loaded."""
    importlib.import_module("traceview.read.xplane._decode")  # loaded here: the probe must not see this process

    built = tvprobe.probe(_REPO)
    assert built == {"path": str(_REPO / "traceview"), "version": "0.1.0", "missing": {}}
    assert tvprobe.describe(built) == f"traceview 0.1.0 at {_REPO / 'traceview'}: C decoder built"
    assert tvprobe.refusal(_REPO, built) is None
    bare = tvprobe.probe(unbuilt_tree)
    assert bare["path"] == str(unbuilt_tree / "traceview")
    assert sorted(bare["missing"]) == sorted(tvprobe.EXTENSIONS)
    assert all("No module named" in why for why in bare["missing"].values())
    assert tvprobe.describe(bare) == (
        f"traceview 0.1.0 at {unbuilt_tree / 'traceview'}: pure-Python fallback (not built: traceview.analysis._passes, "
        "traceview.model._passes, traceview.read.xplane._decode): timings are not representative")
    # the refusal says how to build, and names the traceview installed here (built) as the alternative
    installed = tvprobe.probe(None)
    assert tvprobe.built(installed) and installed["path"] != bare["path"]
    why = tvprobe.refusal(unbuilt_tree, bare)
    assert why.startswith(f"{unbuilt_tree / 'traceview'} has no built C extensions")
    assert "`python setup.py build_ext --inplace` or `pip install -e .`" in why
    assert f"--installed to time the installed traceview at {installed['path']} (C decoder built)" in why
    assert "\n" not in why


def test_the_harnesses_refuse_a_tree_without_extensions(unbuilt_tree, tmp_path, capsys):
    """run.py and speed.py stop before building or timing anything, with one line."""
    import run

    out = tmp_path / "results.md"
    assert run.main(["--tree", str(unbuilt_tree), "--quick", "--no-xprof", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"benchmarks/run.py: {unbuilt_tree / 'traceview'} has no built C extensions") and "\n" not in err
    assert not out.exists()
    assert speed.main(["--tree", str(unbuilt_tree), "--small", "--cache-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"benchmarks/speed.py: {unbuilt_tree / 'traceview'} has no built C extensions") and "\n" not in err
    assert list(tmp_path.iterdir()) == []  # no trace built
    # a --tree that is no checkout: the children would time whatever traceview is installed
    assert run.main(["--tree", str(tmp_path), "--quick", "--no-xprof", "--out", str(out)]) == 2
    assert capsys.readouterr().err.strip() == (f"benchmarks/run.py: {tmp_path.resolve()} is not a traceview checkout "
                                               "(give --tree CHECKOUT, or --installed)")


def test_allow_fallback_times_it_and_says_so(unbuilt_tree, tmp_path):
    md = tmp_path / "speed.md"
    assert speed.main(["--tree", str(unbuilt_tree), "--allow-fallback", "--small", "--only", "mi300x_x20000",
                       "--commands", "verify", "--cache-dir", str(tmp_path), "--markdown", str(md), "--repeat", "1"]) == 0
    text = md.read_text()
    assert (f"- traceview timed (as the children import it): traceview 0.1.0 at {unbuilt_tree / 'traceview'}: "
            "pure-Python fallback") in text
    assert "timings are not representative" in text
    row = next(line for line in text.splitlines() if line.startswith("| mi300x_x2 | verify |"))
    assert "failed" not in row  # the fallback ran the command
