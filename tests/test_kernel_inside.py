"""Inside a Pallas kernel (issue 26, item 4): the kernel-profiling lines of the shared v6e trace
read into stages, counters and bundles per invocation, against sums taken here from the XLine
protobufs; the note on a TPU trace without those lines; nothing on a GPU trace."""

from __future__ import annotations

import collections
import json
import subprocess
import sys

import polars as pl
import pytest

import traceview
from traceview.read.xplane.protos import XLine, XSpace

LLO = "tpu_v6e_pallas_matmul_llo.xplane.pb"


@pytest.fixture(scope="module")
def llo(shared_traces):
    prof = traceview.load(shared_traces / LLO, cache=False, stale_after_s=None)
    return prof, prof.analyze()


def _proto_stages(path) -> dict:
    """{stage name: (count, sum of device_duration_ps)} of the XLA TraceMe line, read with protobuf."""
    space = XSpace.FromString(path.read_bytes())
    plane = next(p for p in space.planes if p.name == "/device:TPU:0")
    sn = {k: v.name for k, v in plane.stat_metadata.items()}
    out = collections.defaultdict(lambda: [0, 0])
    for line in plane.lines:
        if line.name != "XLA TraceMe":
            continue
        for e in line.events:
            d = next(s.uint64_value or s.int64_value for s in e.stats if sn[s.metadata_id] == "device_duration_ps")
            out[plane.event_metadata[e.metadata_id].name][0] += 1
            out[plane.event_metadata[e.metadata_id].name][1] += d
    return {k: tuple(v) for k, v in out.items()}


def test_stages_equal_the_protobuf_sums(llo, shared_traces):
    _, rep = llo
    ki = rep.kernel_inside
    want = _proto_stages(shared_traces / LLO)
    got = {r["name"]: (r["count"], r["total_ps"]) for r in ki.stages.iter_rows(named=True)}
    assert got == want
    # the kernel's own scopes sit inside ep_run_kernel: nested, kept out of the top-level sum
    nested = set(ki.stages.filter(pl.col("nested"))["name"])
    assert nested == {"init", "acc"}


def test_top_level_stages_fit_in_each_invocation(llo):
    _, rep = llo
    inv = rep.kernel_inside.invocations
    assert inv.height == 3 and set(inv["op_name"]) == {"matmul_optimized.1"}
    assert (inv["stages_ps"] <= inv["duration_ps"]).all()
    s = rep.kernel_inside.summary
    assert s["wait_share"] > s["compute_share"] > s["setup_share"]  # this kernel waits on its copies most
    assert s["stages_ps"] == inv["stages_ps"].sum() and s["kernel_ps"] == inv["duration_ps"].sum()


def test_counters_and_bundles(llo):
    prof, rep = llo
    c = {r["name"]: r for r in rep.kernel_inside.counters.iter_rows(named=True)}
    kl = prof.kernel_lines
    assert c["MXU"]["events"] == kl.filter(pl.col("name") == "MXU").height == 294
    assert c["MXU"]["value_name"] == "% util" and c["Vector Fills"]["value_name"] == "fills"
    assert c["MXU"]["max"] == pytest.approx(kl.filter(pl.col("name") == "MXU")["value"].max())
    bundles = kl.filter(pl.col("line") == "Tensor Core").height
    assert 0 < rep.kernel_inside.summary["bundles"] <= bundles == 438


def test_without_the_lines(shared_traces):
    vllm = traceview.load(shared_traces / "vllm_tpu_qwen", cache=False, stale_after_s=None).analyze()
    assert "xla_enable_custom_call_region_trace=true" in vllm.kernel_inside.notes[0]
    gemm = traceview.load(shared_traces / "mi300x_jax_gemm_sweep.xplane.pb", cache=False, stale_after_s=None).analyze()
    assert gemm.kernel_inside is None


def test_outputs(shared_traces, tmp_path):
    cmd = [sys.executable, "-m", "traceview.cli"]
    path = str(shared_traces / LLO)
    d = json.loads(subprocess.run(cmd + ["analyze", path, "--no-cache", "--format", "json"], capture_output=True,
                                  text=True, check=True).stdout)
    assert d["kernel_inside"]["summary"]["invocations"] == 3 and d["rows"]["kernel_inside.stages"]["total"] == 10
    q = subprocess.run(cmd + ["query", path, "select name, count from kernel_stages where not nested order by name",
                              "--no-cache", "--format", "csv"], capture_output=True, text=True, check=True).stdout
    assert "ep_wait_in,96" in q.splitlines()
    html = tmp_path / "r.html"
    subprocess.run(cmd + ["report", path, "--no-cache", "-o", str(html)], capture_output=True, check=True)
    assert 'id="kernel-inside"' in html.read_text()
