"""The terminal fits the terminal (issue 28, item 4): at 100 and 120 columns the ops table keeps
op, shape, occurrences, total and share, folds the other columns below each row with a note,
and cuts a long shape in the middle; ``analyze --brief`` is one screen on every shared trace and
engine fixture; trace strings stay literal."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.cells import cell_len
from rich.console import Console

import traceview
from traceview.cli import main
from traceview.errors import EXIT_NO_OPS, EXIT_UNREADABLE, EXIT_USAGE
from traceview.render.brief import MAX_LINES
from traceview.render.foldtable import Column, cut_middle, print_table
from traceview.render.terminal import plain

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "traces"
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
VLLM = SHARED / "vllm_tpu_qwen"


def _run(argv, capsys):
    rc = main(argv)
    out, err = capsys.readouterr()
    return rc, out, err


def _ops_table(out: str) -> list[str]:
    """The ops table's lines, from its top border to its bottom border, and the note after."""
    lines = out.splitlines()
    start = next(i for i, ln in enumerate(lines) if "HLO ops keyed by (name, shape)" in ln) + 1
    end = next(i for i in range(start, len(lines)) if lines[i].startswith("└"))
    return lines[start:end + 3]


@pytest.fixture(scope="module")
def vllm_top():
    return traceview.load(VLLM).by_shape().head(25)


@pytest.mark.parametrize("width", [100, 120])
def test_ops_table_folds_at_terminal_widths(width, vllm_top, capsys):
    rc, out, _ = _run(["analyze", str(VLLM), "--width", str(width)], capsys)
    assert rc == 0
    assert max(len(ln) for ln in out.splitlines()) <= width  # every section, not the ops table only
    t = _ops_table(out)
    assert t[0].startswith("┏") and t[2].startswith("┡")
    assert [c.strip() for c in t[1].strip("┃").split("┃")] == ["#", "op", "shape", "occ.", "total", "self %"]
    rows = [ln for ln in t[3:] if ln.startswith("│") and ln.split("│")[1].strip().isdigit()]
    folds = [ln for ln in t[3:] if ln.startswith("│    │  ")]
    assert len(rows) == 25 and len(folds) == 25  # one line per row, one folded line under each
    for i, r in enumerate(vllm_top.iter_rows(named=True)):
        cells = [c.strip() for c in rows[i].strip("│").split("│")]
        assert cells[0] == str(i + 1) and cells[1] == r["op_name"] and cells[3] == f"{r['occurrences']:,}"
        shape = cells[2]
        if shape != r["shape"]:  # cut in the middle: both ends of the real shape kept
            assert "…" in shape
            left, right = shape.split("…")
            assert r["shape"].startswith(left) and r["shape"].endswith(right.lstrip()) and left and right
        fold = folds[i]
        assert f"module(s) {r['modules'][0]}" in fold and "mean " in fold
        assert f"source {'/'.join(r['source'].rsplit('/', 2)[-2:])}" in fold
    assert any("…" in ln.split("│")[3] for ln in rows)  # the vLLM shapes are longer than either width
    note = " ".join(" ".join(t[-2:]).split())  # the note wraps at the width
    assert "folded below each row: mean, module(s), source; shape cut in the middle (…)" in note
    assert f"(at {width} columns; --width N for more, --format json for every cell whole)" in note


def test_wide_output_keeps_every_column_on_one_line(capsys):
    rc, out, _ = _run(["analyze", str(VLLM)], capsys)  # a pipe: as wide as the cells
    t = _ops_table(out)
    heads = [c.strip() for c in t[1].strip("┃").split("┃")]
    assert heads == ["#", "op", "shape", "occ.", "total", "mean", "self %", "module(s)", "source"]
    assert "folded below" not in out and "…" not in "".join(t[3:])


def test_every_by_folds_and_fits(capsys):
    for by, width, kept in (("name", 100, ["#", "op", "occ.", "total", "mean", "self %", "shapes"]),  # fits
                            ("name", 60, ["#", "op", "occ.", "total", "self %"]),
                            ("program-shape", 100, ["#", "module", "op", "shape", "occ.", "total", "self %"]),
                            ("kind", 100, ["#", "op", "shape", "occ.", "total", "self %"])):
        rc, out, _ = _run(["analyze", str(VLLM), "--width", str(width), "--by", by, "--top", "5"], capsys)
        assert rc == 0 and max(len(ln) for ln in out.splitlines()) <= width
        lines = out.splitlines()
        i = next(i for i, ln in enumerate(lines) if ln.startswith("HLO ops keyed") or "HLO ops keyed" in ln)
        head = next(ln for ln in lines[i:] if ln.startswith("┃"))
        assert [c.strip() for c in head.strip("┃").split("┃")] == kept, by


def test_cut_middle():
    s = "bf16[1024,1,27648] <- bf16[27648,5120], bf16[1024,5120], f32[1024], bf16[5120], pred[1024]"
    assert cut_middle(s, len(s)) == s
    for w in (12, 20, 40, 60, len(s) - 1):
        c = cut_middle(s, w)
        left, right = c.split("…")
        assert len(c) <= w and s.startswith(left) and s.endswith(right.lstrip()) and left and right
    assert cut_middle("漢字漢字漢字漢字", 7) == "漢…字"  # two cells a character: 2 + 1 + 2 <= 7


def test_folded_cells_stay_literal():
    """Trace strings in a folded table print as themselves: markup and escapes are text."""
    buf = io.StringIO()
    con = Console(file=buf, width=60, force_terminal=True, color_system="256", highlight=False)
    evil = plain("[bold red]x[/bold red]\x1b[2J[link=http://e]")
    cols = [Column("#", "right"), Column("op", cut=1), Column("source", keep=False)]
    print_table(con, "t", cols, [["1", evil * 3, evil], ["2", "[/]", "\\[red]"]])
    out = buf.getvalue()
    assert "\x1b[2J" not in out and "\\x1b[2J" in out
    assert "[bold red]x[/bold red]" in out and "[link=http://e]" in out and "\\[red]" in out and "[/]" in out
    assert "folded below each row: source" in out


def _brief_targets():
    traces = sorted(p for p in SHARED.iterdir() if p.name.endswith(".pb")) + [VLLM]
    engine = sorted(p for p in FIXTURES.iterdir() if p.is_dir() and any(p.rglob("*.xplane.pb")))
    return traces + engine


@pytest.mark.parametrize("path", _brief_targets(), ids=lambda p: p.name)
def test_brief_on_every_trace(path, capsys):
    rc, out, err = _run(["analyze", str(path), "--brief", "--width", "100"], capsys)
    if path.name.startswith("corrupt_"):
        assert rc == EXIT_UNREADABLE and err.startswith("traceview: error:")
        return
    if "no_xla" in path.name:  # a valid trace without HLO ops: analyze's exit code
        assert rc == EXIT_NO_OPS and "no HLO ops" in err
        return
    assert rc == 0, err
    lines = out.splitlines()
    assert len(lines) <= MAX_LINES and max(len(ln) for ln in lines) <= 100
    text = "\n".join(lines)
    for section in ("traceview — brief", "  read ", "  why ", "  devices ", "step time ", "findings"):
        assert section in text, section
    assert "step time median " in text and "p10–p90 " in text  # every one of these traces has steps
    assert "top families" in text
    # the ranking is the report's: the first finding shown is the full output's first
    d = json.loads(_run(["analyze", str(path), "--format", "json"], capsys)[1])
    if d["findings"]:
        assert f"1. {d['findings'][0]['severity']} {d['findings'][0]['id']}:" in text
    fam = d["steps"]["families"][0]["family"]
    assert f"  {fam} " in text


def test_brief_says_why_fewer_op_events_than_read(capsys):
    """--brief showed "2,454 op events" read and "510 op events" on the device without the line
    the full output gives why (interpreted Pallas kernel invocations folded to one row each)."""
    path = str(FIXTURES / "greedy_b4")
    d = json.loads(_run(["analyze", path, "--format", "json"], capsys)[1])
    read, shown = sum(f["op_events"] for f in d["provenance"]["files"]), sum(g["ops"] for g in d["devices"])
    assert read > shown
    full = _run(["analyze", path, "--width", "400"], capsys)[1].splitlines()
    (note,) = [ln.strip() for ln in full if f"{shown:,} op events below, of the {read:,} read: " in ln]
    assert "each interpreted Pallas kernel invocation is one row" in note
    brief = _run(["analyze", path, "--brief", "--width", "400"], capsys)[1].splitlines()
    assert [ln.strip() for ln in brief if "op events below" in ln] == [note]
    dev = next(i for i, ln in enumerate(brief) if ln.startswith("  devices  "))
    assert brief[dev + 1].strip() == note  # under the devices line it explains
    # the JSON too (full and brief), where it said nothing of why
    bj = json.loads(_run(["analyze", path, "--brief", "--format", "json"], capsys)[1])
    assert d["events_note"] == note and bj["events_note"] == note


def test_brief_json_is_the_full_jsons_head(capsys):
    rc, out, _ = _run(["analyze", str(VLLM), "--brief", "--format", "json"], capsys)
    assert rc == 0
    b = json.loads(out)
    full = json.loads(_run(["analyze", str(VLLM), "--format", "json"], capsys)[1])
    assert b["brief"] is True and b["traceview"] == full["traceview"]
    assert b["read"]["files"] == full["provenance"]["files"] and b["read"]["runs"] == full["provenance"]["runs"]
    assert b["steps"]["distribution"] == full["steps"]["distribution"]
    assert b["families"] == full["steps"]["families"][:5] and b["families_total"] == 6
    assert b["findings"] == full["findings"][:3] and b["findings_total"] == len(full["findings"])
    assert [d["n"] for d in b["devices"]] == [2]
    assert b["events_note"] is None and full["events_note"] is None  # (every op event shown)


def test_brief_refuses_csv_and_parquet(capsys, tmp_path):
    for argv in (["--format", "csv"], ["-o", str(tmp_path / "x.parquet")], ["--fleet"]):
        rc, _, err = _run(["analyze", str(VLLM), "--brief", *argv], capsys)
        assert rc == EXIT_USAGE and "--brief" in err


def test_width_is_checked(capsys):
    rc, _, err = _run(["analyze", str(VLLM), "--width", "10"], capsys)
    assert rc == EXIT_USAGE and "expected 40 to 8192 columns, got '10'" in err


_CELL = st.lists(st.sampled_from(list("ab c[]/\\:×—漢字é\u0301,.0") + ["[red]", "[/]", " <- "]), max_size=40).map("".join)


@settings(max_examples=150, deadline=None)
@given(rows=st.lists(st.lists(_CELL, min_size=5, max_size=5), min_size=1, max_size=5),
       width=st.sampled_from([40, 60, 80, 100, 120]), colour=st.booleans())
def test_a_table_never_runs_past_the_width(rows, width, colour):
    """Any cells (markup, wide and combining characters), any width: every line fits."""
    buf = io.StringIO()
    con = Console(file=buf, width=width, force_terminal=colour, color_system="256" if colour else None,
                  highlight=False, emoji=False)
    cols = [Column("#", "right"), Column("op", cut=2), Column("shape", cut=1), Column("total", "right"),
            Column("module(s)", keep=False)]
    rows = [[str(i)] + [plain(c) for c in r[1:]] for i, r in enumerate(rows, 1)]
    print_table(con, "title", cols, rows)
    out = buf.getvalue()
    if colour:
        import re

        out = re.sub(r"\x1b\[[0-9;]*m", "", out)
    assert all(cell_len(ln) <= width for ln in out.splitlines())


@pytest.mark.parametrize("width", [80, 120])
def test_diff_folds_at_the_width(width, capsys):
    """``diff --width N``: every line within N columns; the populations table keeps #, op,
    shape, self time and Δ on one line per population and folds the status, occurrences,
    ratios and notes below it, with the figures of the JSON."""
    base, treat = FIXTURES / "greedy_b4", FIXTURES / "greedy_b8"
    rc, out, _ = _run(["diff", str(base), str(treat), "--width", str(width), "--top", "5"], capsys)
    assert rc == 0 and max(len(ln) for ln in out.splitlines()) <= width
    lines = out.splitlines()
    i = next(i for i, ln in enumerate(lines) if ln.startswith("┏") and "populations matched" in " ".join(lines[i - 2:i]))
    assert [c.strip() for c in lines[i + 1].strip("┃").split("┃")] == ["#", "op", "shape", "self time", "Δ"]
    rc, js, _ = _run(["diff", str(base), str(treat), "--format", "json", "--top", "5"], capsys)
    pops = json.loads(js)["populations"][:5]
    body = lines[i + 3:next(j for j in range(i, len(lines)) if lines[j].startswith("└"))]
    rows = [ln for ln in body if ln.split("│")[1].strip().isdigit()]
    assert len(rows) == 5
    for ln, p in zip(rows, pops):
        follow = body[body.index(ln) + 1]
        assert f"status {p['status']}" in follow and "occ. " in follow


def test_ladder_folds_at_the_width(capsys):
    """``ladder --width N``: every line within N columns, each family whole on its row with
    its time per step at each point, the factors folded below it with the JSON's figures."""
    pts = [str(FIXTURES / "greedy_b4"), str(FIXTURES / "greedy_b8")]
    rc, out, _ = _run(["ladder", *pts, "--width", "70"], capsys)
    assert rc == 0 and max(cell_len(ln) for ln in out.splitlines()) <= 70
    rc, js, _ = _run(["ladder", *pts, "--format", "json"], capsys)
    scaling = json.loads(js)["scaling"]
    lines = out.splitlines()
    for r in scaling:
        i = next(i for i, ln in enumerate(lines) if ln.startswith(f"│ {r['family']} "))
        assert f"per doubling {r['factor_per_doubling']:.2f}x" in lines[i + 1]


def test_history_folds_at_the_width(capsys):
    """``history --width N``: every line within N columns, each run's median and verdict on
    its row, with the JSON's figures; without --width on a pipe, one line per run, cells whole."""
    runs = [str(FIXTURES / "greedy_b4"), str(FIXTURES / "greedy_b8")]
    rc, out, _ = _run(["history", *runs, "--width", "80", "--no-cache"], capsys)
    assert rc == 0 and max(cell_len(ln) for ln in out.splitlines()) <= 80
    rc, js, _ = _run(["history", *runs, "--format", "json", "--no-cache"], capsys)
    for n, r in enumerate(json.loads(js)["runs"], 1):
        row = next(ln for ln in out.splitlines() if ln.startswith(f"│ {n} │"))
        assert r["run"] in row and r["verdict"] in row
    rc, plain, _ = _run(["history", *runs, "--no-cache"], capsys)
    assert rc == 0 and sum(ln[:1] in ("1", "2") and "jit_decode" in ln for ln in plain.splitlines()) == 2


def test_fleet_mode_folds_at_the_width(capsys):
    """``analyze --fleet --width 100``: every line within 100 columns; the fleet's op table keeps
    op, shape, occurrences, total and share and folds the quantiles below each row."""
    rc, out, _ = _run(["analyze", str(VLLM), "--fleet", "--width", "100", "--top", "5"], capsys)
    assert rc == 0 and max(len(ln) for ln in out.splitlines()) <= 100
    lines = out.splitlines()
    i = next(i for i, ln in enumerate(lines) if "ops by (name, shape)" in ln) + 1
    assert [c.strip() for c in lines[i + 1].strip("┃").split("┃")] == ["op", "shape", "occ.", "total", "self %"]
    folds = [ln for ln in lines[i + 3:i + 13] if ln.startswith("│  mean ")]
    assert len(folds) == 5 and all(" · p90 " in ln for ln in folds)


def test_cut_columns_share_the_cut():
    """The widest cut column is cut first, down to the next widest, then both together: an
    op name of 30 cells and a shape of 50 cut by 30 cells end at 25 each, not the op at
    MIN_CUT beside a whole shape (diff cut the op first)."""
    from traceview.render.foldtable import MIN_CUT, Column, FoldTable, table_width

    cols = [Column("op", cut=1), Column("shape", cut=2), Column("n", "right")]
    rows = [["o" * 30, "s" * 50, "7"]]
    natural = [30, 50, 1]
    ft = FoldTable(None, cols, rows, natural, table_width(natural) - 30)
    assert ft.fits and ft.widths == [25, 25, 1] and ft.cut_columns == ["op", "shape"]
    ft = FoldTable(None, cols, rows, natural, table_width(natural) - 10)
    assert ft.widths[:2] == [30, 40] and ft.cut_columns == ["shape"]
    ft = FoldTable(None, cols, rows, natural, table_width([MIN_CUT, MIN_CUT, 1]) - 1)
    assert not ft.fits and ft.widths[:2] == [MIN_CUT, MIN_CUT]


def test_several_is_n_unique_above_one():
    """render.terminal._several (whether a step table names several hosts) is ``n_unique() > 1``,
    nulls counting as a value."""
    import itertools

    import polars as pl

    from traceview.render.terminal import _several

    for n in range(5):
        for values in itertools.product(["a", "b", None], repeat=n):
            s = pl.Series("host", list(values), dtype=pl.String)
            assert _several(s) == (s.n_unique() > 1), values


@pytest.mark.parametrize("width", [None, 41, 80])
def test_no_line_ends_in_a_space(width, shared_traces, capsys):
    """Plain output (a pipe, a file) ends every line at its last visible character: analyze
    on every shared trace, diff and verify, at the pipe's width and at narrow ones (centred
    titles, wrapped lines and folded notes are where rich leaves spaces)."""
    w = [] if width is None else ["--width", str(width)]
    gemm, att = shared_traces / "mi300x_jax_gemm_sweep.xplane.pb", shared_traces / "mi300x_jax_attention.xplane.pb"
    runs = [["analyze", str(p), "--no-cache", *w] for p in sorted(shared_traces.glob("*.xplane.pb"))]
    runs += [["diff", str(gemm), str(att), "--no-cache", *w],
             ["diff", str(FIXTURES / "topp_b4"), str(FIXTURES / "greedy_b4"), "--no-cache", *w],
             ["verify", str(FIXTURES / "topp_b4"), str(FIXTURES / "greedy_b4"), "-c", "all matched", "--no-cache"],
             ["verify", str(att), "-c", "no op matching all-reduce", "-c", "family matmul share < 3%", "--no-cache"]]
    printed = 0
    for argv in runs:
        rc, out, _ = _run(argv, capsys)
        bad = [ln for ln in out.splitlines() if ln.endswith(" ")]
        assert not bad, (argv, bad[:3])
        printed += len(out.splitlines()) if rc in (0, 1) else 0
    assert printed > 500
