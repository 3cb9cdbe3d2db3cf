"""Bounded outputs (issue 23.3): the default JSON keeps the first rows of every table and says
under ``rows`` how many each has; ``--all-rows`` gives them all; ``--top N`` caps every table
in table, CSV and JSON output. Counts are checked against the report's own frames."""

from __future__ import annotations

import json

import pytest

V6E = "tpu_v6e_4chip_psum.xplane.pb"
VLLM = "vllm_tpu_qwen"


@pytest.fixture
def cli(capsys):
    """The command line in this process: (exit code, stdout)."""
    from traceview.cli import main

    def run(*argv):
        rc = main([*argv, "--no-cache"])
        return rc, capsys.readouterr().out
    return run


def _at(payload: dict, path: str):
    node = payload
    for part in path.split("."):
        node = node[part]
    return node


def _frames(rep) -> dict:
    """{JSON path: frame} of every table the analyze JSON holds, read off the report."""
    anat, comm, ov, st, mem = rep.steps, rep.communication, rep.overlap, rep.stragglers, rep.memory
    out = {"devices": rep.devices, "ops": rep.table, "roofline": rep.roofline, "roofline_layers": rep.roofline_layers,
           "kernels": rep.kernels,
           "sources": rep.sources, "occurrence_checks": rep.checks, "population_regimes": rep.population_regimes,
           "family_roofline": rep.family_roofline, "split_names": rep.split}
    if anat is not None:
        out |= {"steps.records": anat.steps, "steps.families": anat.families}
    if comm is not None:
        out |= {"communication.collectives": comm.collectives, "communication.host_transfers": comm.host_transfers}
    if ov is not None:
        out |= {"overlap.populations": ov.populations, "overlap.steps": ov.steps}
    if st is not None:
        out |= {"stragglers.steps": st.steps, "stragglers.devices": st.devices,
                "stragglers.collectives": st.collectives}
    h = rep.hlo
    if h is not None and h.source != "none":
        out |= {"hlo.patterns": h.patterns, "hlo.detections": h.detections, "hlo.flop_provenance": h.flop_provenance}
    ki = rep.kernel_inside
    if ki is not None:
        out |= {"kernel_inside.invocations": ki.invocations, "kernel_inside.stages": ki.stages,
                "kernel_inside.counters": ki.counters}
    ph = rep.phases
    if ph is not None:
        out |= {"phases.summary": ph.summary, "phases.families": ph.families, "phases.steps": ph.steps,
                "phases.programs": ph.programs}
    if mem is not None:
        out |= {"memory.allocators": mem.summary, "memory.alive_at_peak": mem.alive, "memory.steps": mem.steps}
    return {k: v for k, v in out.items() if v is not None}


@pytest.fixture(scope="module")
def vllm_report(shared_traces):
    import traceview

    return traceview.load(shared_traces / VLLM).analyze()


def test_default_json_is_bounded_and_counts_every_table(shared_traces, cli, vllm_report):
    rc, out = cli("analyze", str(shared_traces / VLLM), "--format", "json")
    assert rc == 0
    assert len(out.encode()) <= 5 * 1024 * 1024
    got = json.loads(out)
    frames = _frames(vllm_report)
    assert set(got["rows"]) == set(frames)
    for path, df in frames.items():
        assert got["rows"][path] == {"shown": min(df.height, 25), "total": df.height}, path
        assert len(_at(got, path)) == min(df.height, 25), path
    assert got["rows"]["ops"] == {"shown": 25, "total": 3454}  # cut: the op table is longer
    assert got["top"] is None
    assert got["steps"]["records_rows"] == got["rows"]["steps.records"]
    # the first rows are the table's first rows, values as the frame holds them
    assert [r["op_name"] for r in got["ops"]] == vllm_report.table["op_name"].head(25).to_list()
    assert [r["self_ps"] for r in got["ops"]] == vllm_report.table["self_ps"].head(25).to_list()


def test_all_rows_gives_every_row(shared_traces, cli, vllm_report):
    rc, out = cli("analyze", str(shared_traces / VLLM), "--format", "json", "--all-rows")
    assert rc == 0
    got = json.loads(out)
    for path, df in _frames(vllm_report).items():
        assert got["rows"][path] == {"shown": df.height, "total": df.height}, path
        assert len(_at(got, path)) == df.height, path
    assert len(got["ops"]) == 3454
    assert [r["shape"] for r in got["ops"]] == vllm_report.table["shape"].to_list()


@pytest.mark.parametrize("top", [1, 3])
def test_top_caps_every_table_in_json(shared_traces, cli, top):
    rc, out = cli("analyze", str(shared_traces / V6E), "--format", "json", "--top", str(top))
    assert rc == 0
    got = json.loads(out)
    assert got["top"] == top and got["rows"]
    for path, n in got["rows"].items():
        assert len(_at(got, path)) == n["shown"] == min(top, n["total"]), path
    assert got["rows"]["ops"] == {"shown": top, "total": 17}


def test_top_caps_every_table_in_table_and_csv(shared_traces, cli, monkeypatch):
    from rich.console import Console
    from rich.table import Table

    seen = []
    real_print = Console.print

    def spy(self, *objects, **kw):
        seen.extend(o for o in objects if isinstance(o, Table))
        return real_print(self, *objects, **kw)

    monkeypatch.setattr(Console, "print", spy)
    rc, out = cli("analyze", str(shared_traces / VLLM), "--top", "2", "--steps", "7")
    assert rc == 0
    assert len(seen) >= 6  # ops, sources, steps, families, roofline, checks, ...
    assert all(t.row_count <= 2 for t in seen), [(t.title, t.row_count) for t in seen]
    assert "top 2 of 3454 by self time" in out
    rc, out = cli("analyze", str(shared_traces / VLLM), "--format", "csv", "--top", "3")
    assert rc == 0
    assert len(out.splitlines()) == 1 + 3  # header and three rows


def test_top_and_all_rows_exclude_each_other(shared_traces, capsys):
    from traceview.cli import main

    assert main(["analyze", str(shared_traces / V6E), "--top", "3", "--all-rows"]) == 2
    assert "not allowed with argument --top" in capsys.readouterr().err


def test_non_finite_figures_are_null_and_listed(shared_traces, cli):
    # a peak of 1e-300 FLOP/s: the roofline's times and efficiencies overflow to infinity
    rc, out = cli("analyze", str(shared_traces / V6E), "--format", "json", "--all-rows", "--peak-flops", "1e-300",
                  "--peak-bw", "1e12")
    assert rc == 0
    got = json.loads(out)
    bad = got["non_finite"]
    assert bad and set(bad.values()) <= {"inf", "-inf", "nan"}
    for where in bad:  # each listed path holds null
        node = got
        for part in where.removeprefix("$.").replace("]", "").replace("[", ".").split("."):
            node = node[int(part)] if isinstance(node, list) else node[part]
        assert node is None, where


def test_frame_json_matches_rows_as_python_holds_them():
    import datetime

    import polars as pl

    from traceview.render.json import dumps

    df = pl.DataFrame({"f": [1.5, float("nan"), float("-inf")], "s": ["a\x1b", None, "é\u202e"],
                       "l": [[1.0, float("inf")], [], None], "t": [datetime.datetime(2026, 1, 2, 3, 4, 5)] * 3})
    got = json.loads(dumps({"x": df, "k": {3: float("inf")}}))
    assert got["x"] == [{"f": 1.5, "s": "a\x1b", "l": [1.0, None], "t": "2026-01-02 03:04:05"},
                        {"f": None, "s": None, "l": [], "t": "2026-01-02 03:04:05"},
                        {"f": None, "s": "é\u202e", "l": None, "t": "2026-01-02 03:04:05"}]
    assert got["k"] == {"3": None}
    assert got["non_finite"] == {"$.x[1].f": "nan", "$.x[2].f": "-inf", "$.x[0].l[1]": "inf", "$.k.3": "inf"}


#: jit_f's 64-bit program id on the v6e trace (a double rounds it to 12190760917235804000)
JIT_F_ID = "12190760917235803885"


@pytest.mark.parametrize("rows", [["--top", "3"], ["--all-rows"]])
def test_ids_are_decimal_strings(shared_traces, cli, rows):
    """Every id column is written as a decimal string, whatever its size, so a reader that holds
    numbers as doubles (``parse_int=float``: JavaScript, jq) keeps the 64-bit program ids exact."""
    rc, out = cli("analyze", str(shared_traces / V6E), "--format", "json", *rows)
    assert rc == 0
    got = json.loads(out, parse_int=float)
    assert got["steps"]["module"] == "jit_f" and got["steps"]["records"][0]["program_id"] == JIT_F_ID
    ids = {r["module"]: r["program_id"] for r in got["phases"]["programs"]}
    assert ids == {"jit_f": JIT_F_ID, "jit__psum": "9646411105960254074",
                   "jit_broadcast_in_dim": "11287434908481120160"}
    assert {r["module"]: r["program_id"] for r in got["hlo"]["flop_provenance"]} == ids
    assert got["communication"]["collectives"][0]["channel_id"] == "1"
    assert got["rows"]["ops"]["total"] == 17.0  # counts and times stay numbers


def test_frame_json_writes_id_columns_as_text():
    import polars as pl

    from traceview.render.json import dumps

    df = pl.DataFrame({"program_id": pl.Series([2**64 - 1, None], dtype=pl.UInt64), "step_id": [7, None],
                       "ids": pl.Series([[1, 2**63], []], dtype=pl.List(pl.UInt64)), "n": [2**60, 1],
                       "slot_id": ["a", "b"]})
    assert json.loads(dumps({"x": df}))["x"] == [
        {"program_id": "18446744073709551615", "step_id": "7", "ids": ["1", "9223372036854775808"], "n": 2**60,
         "slot_id": "a"},
        {"program_id": None, "step_id": None, "ids": [], "n": 1, "slot_id": "b"}]
