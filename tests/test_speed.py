"""The speed yardstick (benchmarks/speed.py): its verdicts and one small run.

Timings are never asserted: the verdicts are checked on given figures, and the small run
only has to produce a row for each command it ran.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

_HERE = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(_HERE))
_SPEC = importlib.util.spec_from_file_location("speed", _HERE / "speed.py")
speed = sys.modules["speed"] = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(speed)


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
    # analyze was not run: the ratio to it is unknown, never a verdict
    assert "| mi300x_x2 | verify <= 1.5x analyze | - | unknown |" in text


def test_an_absent_xprof_rs_is_said_so_not_unreadable():
    res = {"t": {"analyze": _r(1.0), "xprof-rs": {"wall_s": float("nan"), "rss_mib": float("nan"), "rc": 127,
                                                  "error": "xprof-rs not installed"}}}
    rows = speed.table_rows(res, {"t": 100 * 1048576})
    assert rows[-1][2] == "not installed"
    got = {what: (fig, v) for _, what, fig, v in speed.targets(res, {"t": 100 * 1048576})}
    assert got["analyze no slower than xprof-rs cold"] == ("xprof-rs not installed", "unknown")
