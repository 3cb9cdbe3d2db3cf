"""traceview.model.from_tracejson: the Chrome-trace JSON reader, on the real vLLM TPU trace, a live
XLA:CPU profile, and small synthetic files for the format's corners and the faults."""

from __future__ import annotations

import gzip
import os
import zlib
from pathlib import Path

import orjson
import polars as pl
import pytest

from traceview.errors import EXIT_LIMIT, EXIT_UNREADABLE, LimitExceeded, NoTraceFound, TraceUnreadable
from traceview.model.schema import MODULE_RUNS_SCHEMA, OPS_SCHEMA
from traceview.model.shapes import parse_instruction
from traceview.model.from_tracejson import EVENT_CAPS, read_trace_json

VLLM = "vllm_tpu_qwen/plugins/profile/2026_01_11_21_26_41/t1v-n-9eb622fc-w-0.trace.json.gz"


@pytest.fixture(scope="module")
def vllm(shared_traces):
    return read_trace_json(shared_traces / VLLM, run="2026_01_11_21_26_41")


def _write(path: Path, doc, *, gz: bool = True) -> Path:
    raw = doc if isinstance(doc, bytes) else orjson.dumps(doc)
    path.write_bytes(gzip.compress(raw, compresslevel=1) if gz else raw)
    return path


def _meta(pid, pname, threads):
    rows = [{"ph": "M", "pid": pid, "name": "process_name", "args": {"name": pname}}]
    for tid, tname in threads.items():
        rows.append({"ph": "M", "pid": pid, "tid": tid, "name": "thread_name", "args": {"name": tname}})
    return rows


def _x(pid, tid, ts, dur, name, args=None):
    e = {"ph": "X", "pid": pid, "tid": tid, "ts": ts, "dur": dur, "name": name}
    if args is not None:
        e["args"] = args
    return e


# -- the real TPU trace --------------------------------------------------------------------

def test_vllm_devices_ops_and_modules(vllm, shared_traces):
    assert vllm.format == "trace_json"
    assert vllm.host == "t1v-n-9eb622fc-w-0"
    assert vllm.path == str(shared_traces / VLLM)
    assert vllm.n_events == 10_381 - 68 - 1  # all traceEvents less the ph:M rows and the final {}
    assert vllm.notes == [] and vllm.has_shapes
    assert [(d.name, d.kind) for d in vllm.devices] == [("/device:TPU:0", "TPU"), ("/device:TPU:1", "TPU")]
    assert all(d.peak_flops is None and d.peak_bw is None for d in vllm.devices)
    ops = vllm.ops
    assert ops.schema == pl.Schema(OPS_SCHEMA)
    assert dict(ops.group_by("device").len().iter_rows()) == {"/device:TPU:0": 3454, "/device:TPU:1": 3454}
    assert set(ops["line"]) == {"XLA Ops"}
    assert set(ops["run"]) == {"2026_01_11_21_26_41"} and set(ops["count"]) == {1}
    # every op sits inside an XLA Modules execution
    assert ops.filter(pl.col("module") == "").height == 0
    assert ops["program_id"].null_count() == 0
    assert (ops["shape"] != "").all() and (ops["hlo_text"] != "").all()
    mods = dict(ops.select("module", "program_id").unique().iter_rows())
    assert mods == {"jit_step_fun": 5120112285394406626, "jit__select_from_array_fn": 2075894867643732319,
                    "jit_compute_logits_func": 14478353077513490656, "jit_sample": 9401537312596110889}
    runs = vllm.module_runs
    assert runs.schema == pl.Schema(MODULE_RUNS_SCHEMA)
    assert runs.height == 8
    step0 = runs.filter((pl.col("device") == "/device:TPU:0") & (pl.col("module") == "jit_step_fun")).row(0, named=True)
    assert step0["program_id"] == 5120112285394406626
    # on the device clock (args device_offset_ps / device_duration_ps), as the xplane reader
    assert step0["start_ps"] == 1_145_388_794_718 and step0["duration_ps"] == 66_914_493_397
    # no op nests in another on this trace's XLA Ops lines
    assert (ops["self_ps"] == ops["duration_ps"]).all()


def test_vllm_one_op_in_detail(vllm):
    row = vllm.ops.filter((pl.col("device") == "/device:TPU:0") & (pl.col("op_name") == "slice.1996")).row(0, named=True)
    # the device clock (ts 1144995.94963 µs, dur 1.320453 µs on the host-aligned clock)
    assert row["start_ps"] == 1_145_398_025_210 and row["duration_ps"] == 1_320_528
    assert row["op_kind"] == "slice" and row["category"] == "slice"
    assert row["shape"] == "s32[1] <- s32[3]"
    assert row["hlo_text"].startswith("%slice.1996 = s32[1]{0:T(128)} slice(")
    assert row["module"] == "jit_step_fun" and row["program_id"] == 5120112285394406626
    assert row["source_file"] == "/home/amandaliang_google_com/tpu-inference/tpu_inference/layers/vllm/attention.py"
    assert row["source_line"] == 262
    stack = row["source_stack"].split("\n")
    assert len(stack) == 10 and stack[0].endswith("attention.py:262:8") and not row["source_stack"].endswith("\n")
    assert row["framework_op"] == "jit(step_fun)/jit(_jax_attn_func)/shard_map/jit(ragged_paged_attention)/slice"
    assert row["bytes_accessed"] == 8.0 and row["model_flops"] == 0.0 and row["flops"] == 0.0
    assert row["kernel"] == ""


def test_vllm_same_op_name_has_several_shapes_across_modules(vllm):
    per_name = (vllm.ops.group_by("op_name")
                .agg(pl.col("shape").n_unique().alias("shapes"), pl.col("module").n_unique().alias("modules")))
    split = per_name.filter((pl.col("shapes") >= 2) & (pl.col("modules") >= 2))
    assert "fusion" in split["op_name"].to_list()
    fusion = vllm.ops.filter(pl.col("op_name") == "fusion").select("module", "shape").unique()
    by_module = {m: s.split(" <- ")[0] for m, s in fusion.iter_rows()}
    assert by_module["jit_step_fun"] == "bf16[1024,5120]"
    assert by_module["jit__select_from_array_fn"] == "bf16[8,5120]"
    assert by_module["jit_compute_logits_func"] == "bf16[8,76032]"


def test_vllm_shapes_agree_with_the_hlo_parser(vllm):
    # the reader's fast path must give exactly what traceview.model.shapes gives for each HLO text
    for text, kind, shape in vllm.ops.select("hlo_text", "op_kind", "shape").unique().iter_rows():
        ins = parse_instruction(text)
        assert (ins.opcode, ins.signature()) == (kind, shape), text


def test_vllm_flops_and_bytes(vllm):
    ops = vllm.ops
    assert ops["flops"].null_count() == 0 and ops["bytes_accessed"].null_count() == 0
    assert (ops["flops"] == ops["model_flops"]).all()
    assert ops["model_flops"].max() > 1e9


# -- XLA:CPU, recorded live --------------------------------------------------------------

def test_live_cpu_trace_json(cpu_profile_dir, cpu_profile_spec):
    (path,) = cpu_profile_dir.glob("plugins/profile/*/*.trace.json.gz")
    td = read_trace_json(path)
    assert td.host == path.name[: -len(".trace.json.gz")]
    assert not td.has_shapes
    assert td.notes == [f"{path}: trace.json carries no shapes or program ids for CPU ops; "
                        "read the .xplane.pb for shape-keyed tables"]
    ops = td.ops
    assert ops.height > 0
    assert set(ops["device"]) == {"/host:CPU"}
    assert set(ops["module"]) == {cpu_profile_spec["module"]}
    assert set(ops["shape"]) == {""} and ops["program_id"].null_count() == ops.height
    assert not ops["op_name"].str.starts_with("end: ").any()
    assert (ops["duration_ps"] > 0).all() and (ops["self_ps"] <= ops["duration_ps"]).all()
    assert [d.kind for d in td.devices] == ["CPU"]
    # one module run per profiled call, from the ops' run_id
    n_calls = cpu_profile_spec["calls"] * len(cpu_profile_spec["batches"])
    assert td.module_runs.height == n_calls
    assert set(td.module_runs["module"]) == {cpu_profile_spec["module"]}
    # each program runs `calls` times: every op name occurs a multiple of that many times
    counts = ops.group_by("op_name").len()["len"].to_list()
    assert all(c % cpu_profile_spec["calls"] == 0 for c in counts) and max(counts) <= n_calls


# -- synthetic files: format corners -----------------------------------------------------

def _tpu_doc():
    hlo = "%fusion.7 = bf16[8,128]{1,0:T(8,128)(2,1)} fusion(bf16[8,256]{1,0:T(8,128)(2,1)} %p0, f32[128]{0} %p1), kind=kLoop"
    events = _meta(3, "/device:TPU:0", {0: "_counters_", 2: "XLA Modules", 3: "XLA Ops"})
    events += _meta(701, "/host:CPU", {5: "main"})
    events += [
        _x(3, 2, 100.0, 50.0, "jit_f(18446744073709551615)", {"run_id": "1"}),
        _x(3, 2, 200.0, 10.0, "jit_g", {}),
        _x(3, 0, 100.0, 1e-6, "P state", {"P State": "3"}),  # a counter: 1 ps
        # a loop op with a nested op (self time), string args throughout
        _x(3, 3, 101.000001, 20.5, "while.1", {"long_name": "%while.1 = (s32[], f32[8]{0}) while((s32[], f32[8]{0}) %t), body=%b",
                                               "hlo_category": "control flow", "model_flops": "12", "bytes_accessed": "64",
                                               "source": "m.py:3", "source_stack": "m.py:3:1\nn.py:9:2\n", "tf_op": "jit(f)/while:"}),
        _x(3, 3, 102.0, 5.25, "fusion.7", {"long_name": hlo, "hlo_category": "loop fusion", "model_flops": "2048",
                                           "bytes_accessed": "4608.5", "source": "no line here"}),
        _x(3, 3, 110.0, 1.0, "copy.3", {"shape_with_layout": "f32[5,1024]{1,0:T(8,128)}",
                                        "device_offset_ps": "110000007", "device_duration_ps": "999999"}),
        _x(3, 3, 120.0, 1.0, "%add.2 = f32[4]{0} add(f32[4]{0} %a, f32[4]{0} %b)", {}),  # no display name
        _x(3, 3, 130.0, 1.0, "custom-call.9", "not a dict"),
        _x(3, 3, 140.0, None, "fusion.8"),  # no args, null dur
        _x(3, 3, 205.0, 1.0, "slice.1", {"long_name": "%slice.1 = s32[1]{0} slice(s32[3]{0} %p), slice={[2:3]}"}),
        _x(3, 3, 400.0, 1.0, "orphan.1", {}),  # outside any module
        {"ph": "X", "pid": 3, "tid": 3, "ts": "150.5", "dur": "2", "name": "reshape.4"},  # numbers as strings
        _x(701, 5, 100.0, 10.0, "fusion.7", {"hlo_op": "fusion.7", "hlo_module": "jit_f"}),  # host copy: ignored on TPU
        {"ph": "i", "pid": 3, "tid": 3, "ts": 1.0, "name": "instant"},
        "not an event",
        {},
    ]
    return {"displayTimeUnit": "ns", "metadata": {"highres-ticks": True}, "traceEvents": events}


def test_synthetic_tpu_corners(tmp_path):
    td = read_trace_json(_write(tmp_path / "tpuhost.trace.json.gz", _tpu_doc()), host="h1", run="r1")
    assert td.n_events == 14  # X and instant events; not the M rows, the string or the {}
    # the null dur and the numbers written as text are read, and said in one note
    [note] = td.notes
    assert "1 with a dur that is missing or null (read as 0 ps" in note and "2 ts or dur value(s) written as text" in note
    assert td.has_shapes
    ops = td.ops
    assert set(ops["host"]) == {"h1"} and set(ops["run"]) == {"r1"}
    assert ops.height == 9 and set(ops["device"]) == {"/device:TPU:0"}
    r = {row["op_name"]: row for row in ops.iter_rows(named=True)}
    w = r["while.1"]
    assert w["start_ps"] == 101_000_001 and w["duration_ps"] == 20_500_000
    assert w["self_ps"] == 20_500_000 - 5_250_000 - 999_999 - 1_000_000  # fusion.7, copy.3, add.2 nest in it
    assert w["module"] == "jit_f" and w["program_id"] == 18446744073709551615
    assert w["op_kind"] == "while" and w["category"] == "control flow"
    assert w["shape"] == "(s32[], f32[8]) <- (s32[], f32[8])"
    assert w["source_file"] == "m.py" and w["source_line"] == 3 and w["source_stack"] == "m.py:3:1\nn.py:9:2"
    assert w["framework_op"] == "jit(f)/while"
    assert (w["flops"], w["model_flops"], w["bytes_accessed"]) == (12.0, 12.0, 64.0)
    f = r["fusion.7"]
    assert f["shape"] == "bf16[8,128] <- bf16[8,256], f32[128]" and f["self_ps"] == 5_250_000
    assert f["source_file"] == "no line here" and f["source_line"] is None and f["bytes_accessed"] == 4608.5
    c = r["copy.3"]
    assert (c["start_ps"], c["duration_ps"]) == (110_000_007, 999_999)  # the device clock, where given
    assert c["shape"] == "f32[5,1024]" and c["hlo_text"] == "" and c["op_kind"] == "copy" and c["category"] == "copy"
    a = r["add.2"]
    assert a["op_kind"] == "add" and a["shape"] == "f32[4] <- f32[4], f32[4]" and a["hlo_text"].startswith("%add.2 =")
    assert r["custom-call.9"]["shape"] == "" and r["custom-call.9"]["op_kind"] == "custom-call"
    assert r["fusion.8"]["duration_ps"] == 0 and r["fusion.8"]["op_kind"] == "fusion"
    assert r["reshape.4"]["start_ps"] == 150_500_000 and r["reshape.4"]["duration_ps"] == 2_000_000
    assert r["slice.1"]["module"] == "jit_g" and r["slice.1"]["program_id"] is None
    assert r["orphan.1"]["module"] == "" and r["orphan.1"]["program_id"] is None
    runs = td.module_runs
    assert runs.select("module", "program_id", "start_ps", "duration_ps").rows() == [
        ("jit_f", 18446744073709551615, 100_000_000, 50_000_000), ("jit_g", None, 200_000_000, 10_000_000)]
    assert [d.name for d in td.devices] == ["/device:TPU:0"]


@pytest.mark.parametrize("typed", [True, False])
def test_malformed_event_fields_are_counted_in_one_note(tmp_path, monkeypatch, typed):
    """ts/dur/pid/tid of a type the exporter never writes change figures (an op read as 0 ps,
    left out, off the timeline): each kind is counted in one note naming the file, on the
    typed (msgspec) and the general (orjson) decode alike; the exporter's form has none."""
    from traceview.read import tracejson

    if not typed:
        monkeypatch.setattr(tracejson, "_DECODER", None)
    doc = _tpu_doc()
    ev = doc["traceEvents"]
    ops = [e for e in ev if type(e) is dict and e.get("ph") == "X" and e.get("tid") == 3 and e.get("pid") == 3]
    for e in ops:  # the exporter's form: numbers only
        e["ts"], e["dur"] = float(e["ts"]), float(e["dur"] or 1.0)
    p = _write(tmp_path / "good.trace.json", doc, gz=False)
    ops[0]["dur"], ops[1]["dur"] = True, "abc"  # not numbers
    ops[2]["ts"] = [1]
    ops[3]["pid"], ops[4]["pid"] = "3", {"a": 1}  # on no named process: left out
    ops[5]["tid"] = 3.5  # on a thread with no name
    q = _write(tmp_path / "bad.trace.json", doc, gz=False)
    good, bad = read_trace_json(p), read_trace_json(q)
    assert not any("never writes" in n for n in good.notes)
    [note] = [n for n in bad.notes if "never writes" in n]
    assert note.startswith(str(q) + ": ")
    for part in ("2 with a dur that is not a number", "1 with a ts that is not a number",
                 "2 with a pid that is missing or not an integer",
                 "1 with a tid that is missing or not an integer"):
        assert part in note, (part, note)
    assert bad.ops.height == good.ops.height - 3  # the two pids and the tid
    dur = dict(zip(bad.ops["op_name"], bad.ops["duration_ps"]))
    assert dur["while.1"] == 0 and dur["fusion.7"] == 0  # true and "abc": 0 ps, as said


def test_plain_json_array_form_and_default_host(tmp_path):
    doc = _tpu_doc()
    p = _write(tmp_path / "myhost.trace.json", doc, gz=False)
    td = read_trace_json(p)
    assert td.host == "myhost" and td.ops.height == 9
    # the Chrome-trace "JSON array" form (no wrapping object)
    td = read_trace_json(_write(tmp_path / "arr.trace.json.gz", doc["traceEvents"]))
    assert td.ops.height == 9
    # perfetto_trace.json.gz: the same JSON without "metadata"
    del doc["metadata"]
    td = read_trace_json(_write(tmp_path / "perfetto_trace.json.gz", doc))
    assert td.ops.height == 9 and td.host == "perfetto_trace"


def test_multi_member_gzip(tmp_path):
    raw = orjson.dumps(_tpu_doc())
    p = tmp_path / "mm.trace.json.gz"
    p.write_bytes(gzip.compress(raw[:1000]) + gzip.compress(raw[1000:]) + b"\0\0\0")
    assert read_trace_json(p).ops.height == 9


def test_gpu_streams(tmp_path):
    events = _meta(1, "/device:GPU:0", {13: "Stream #13(Kernel)", 90: "XLA Ops"})
    events += _meta(701, "/host:CPU", {5: "main"})
    k = {"hlo_op": "custom-call.1", "hlo_module": "jit_dot", "correlation_id": "7", "kernel_details": "grid:1,1,1"}
    events += [
        _x(1, 13, 10.0, 4.0, "Cijk_Ailk_Bljk_BBS_BH_MT128x128", k),
        _x(1, 13, 20.0, 1.0, "loop_add_fusion", {"hlo_op": "loop_add_fusion", "hlo_module": "jit_dot(5)", "run_id": "3"}),
        _x(1, 13, 30.0, 1.0, "memcpy", {"correlation_id": "8"}),  # not an HLO op
        _x(1, 90, 10.0, 4.0, "custom-call.1", {"hlo_op": "custom-call.1", "hlo_module": "jit_dot"}),  # derived line
        _x(701, 5, 9.0, 1.0, "cuLaunchKernel", {"hlo_op": "custom-call.1", "hlo_module": "jit_dot"}),  # host launch
        {},
    ]
    td = read_trace_json(_write(tmp_path / "g.trace.json.gz", {"traceEvents": events}))
    assert not td.has_shapes
    assert td.notes == [f"{tmp_path / 'g.trace.json.gz'}: trace.json carries no shapes or program ids for GPU ops; "
                        "read the .xplane.pb for shape-keyed tables"]
    ops = td.ops
    assert ops.select("device", "line", "op_name", "op_kind", "module", "program_id", "kernel").rows() == [
        ("/device:GPU:0", "Stream #13(Kernel)", "custom-call.1", "custom-call", "jit_dot", None, "Cijk_Ailk_Bljk_BBS_BH_MT128x128"),
        ("/device:GPU:0", "Stream #13(Kernel)", "loop_add_fusion", "fusion", "jit_dot", 5, ""),
    ]
    assert [(d.name, d.kind) for d in td.devices] == [("/device:GPU:0", "GPU")]
    assert td.module_runs.select("module", "program_id", "start_ps", "duration_ps").rows() == [("jit_dot", 5, 20_000_000, 1_000_000)]


def test_host_only_trace_gives_empty_table(tmp_path):
    events = _meta(701, "/host:CPU", {5: "main"}) + [_x(701, 5, 1.0, 2.0, "$main.py:1 f"), {}]
    td = read_trace_json(_write(tmp_path / "h.trace.json.gz", {"traceEvents": events}))
    assert td.ops.height == 0 and td.ops.schema == pl.Schema(OPS_SCHEMA)
    assert not td.has_shapes and td.notes == [] and td.n_events == 1


# -- the event cap ----------------------------------------------------------------------

def test_exactly_one_million_events_means_truncated(tmp_path):
    assert EVENT_CAPS == (1_000_000, 5_000_000)
    ev = b'{"ph":"X","pid":1,"tid":1,"ts":0,"dur":1,"name":"a"}'
    n = 1_000_000
    meta = b'{"ph":"M","pid":1,"name":"process_name","args":{"name":"/host:CPU"}},'
    raw = b'{"displayTimeUnit":"ns","traceEvents":[' + meta + b",".join([ev] * n) + b",{}]}"
    comp = zlib.compressobj(1, wbits=31)
    p = tmp_path / "big.trace.json.gz"
    p.write_bytes(comp.compress(raw) + comp.flush())
    td = read_trace_json(p)
    assert td.n_events == n
    assert td.notes == [f"{p}: holds exactly 1,000,000 events, the profiler's cap: the trace was probably truncated, "
                        "keeping only the earliest events (raise TF_PROFILER_TRACE_VIEWER_MAX_EVENTS or read the .xplane.pb)"]


# -- faults ---------------------------------------------------------------------------------

def _fault(path: Path, exc=TraceUnreadable, **kw) -> str:
    with pytest.raises(exc) as ei:
        read_trace_json(path, **kw)
    msg = str(ei.value)
    assert str(path) in msg and "\n" not in msg
    return msg


def test_not_gzip(tmp_path):
    p = tmp_path / "h.trace.json.gz"
    p.write_bytes(b"PK\x03\x04 this is a zip, not a gzip")
    assert "not gzip-compressed" in _fault(p)


def test_bad_gzip_crc(tmp_path):
    p = _write(tmp_path / "h.trace.json.gz", _tpu_doc())
    data = bytearray(p.read_bytes())
    data[-8] ^= 0xFF  # the CRC32 in the gzip trailer
    p.write_bytes(bytes(data))
    assert "CRC" in _fault(p)


def test_corrupt_deflate_data(tmp_path):
    p = _write(tmp_path / "h.trace.json.gz", _tpu_doc())
    data = bytearray(p.read_bytes())
    for i in range(20, 60):
        data[i] = 0xFF
    p.write_bytes(bytes(data))
    assert "bad gzip data" in _fault(p)


def test_truncated_gzip(tmp_path):
    p = _write(tmp_path / "h.trace.json.gz", _tpu_doc())
    data = p.read_bytes()
    p.write_bytes(data[: len(data) // 2])
    with pytest.raises(TraceUnreadable) as ei:
        read_trace_json(p)
    assert "truncated gzip" in str(ei.value) and ei.value.exit_code == EXIT_UNREADABLE


def test_not_json(tmp_path):
    assert "not valid JSON" in _fault(_write(tmp_path / "a.trace.json.gz", b"hello, world"))
    assert "not valid JSON" in _fault(_write(tmp_path / "b.trace.json.gz", b'{"traceEvents": [1, 2'))
    assert "not valid JSON" in _fault(_write(tmp_path / "c.trace.json.gz", b'{"traceEvents": ["\xff\xfe"]}'))
    assert "neither gzip nor JSON" in _fault(_write(tmp_path / "d.trace.json", b"\x00\x01binary", gz=False))
    for i, value in enumerate((b"null\n", b'"x"', b"42", b"-1.5e3", b"true")):  # JSON, but no object or array
        assert "JSON holding a bare value" in _fault(_write(tmp_path / f"v{i}.trace.json", value, gz=False))


def test_json_that_is_not_a_trace(tmp_path):
    assert "without traceEvents" in _fault(_write(tmp_path / "a.trace.json.gz", {"foo": 1}))
    assert "not a list" in _fault(_write(tmp_path / "b.trace.json.gz", {"traceEvents": {"a": 1}}))
    assert "not a Chrome trace" in _fault(_write(tmp_path / "c.trace.json.gz", b"42"))


def test_empty_and_missing_files(tmp_path):
    p = tmp_path / "h.trace.json.gz"
    p.write_bytes(b"")
    assert "empty" in _fault(p)
    with pytest.raises(NoTraceFound, match="does not exist"):
        read_trace_json(tmp_path / "nope.trace.json.gz")
    assert "cannot read" in _fault(tmp_path, TraceUnreadable)  # a folder


def test_decompression_limit(tmp_path):
    p = _write(tmp_path / "h.trace.json.gz", _tpu_doc())
    size = len(gzip.decompress(p.read_bytes()))
    msg = _fault(p, LimitExceeded, max_decompressed_bytes=size - 1)
    assert f"{size - 1:,}-byte limit" in msg
    assert read_trace_json(p, max_decompressed_bytes=size).ops.height == 9
    q = _write(tmp_path / "q.trace.json", _tpu_doc(), gz=False)
    with pytest.raises(LimitExceeded) as ei:
        read_trace_json(q, max_decompressed_bytes=100)
    assert "100-byte limit" in str(ei.value) and ei.value.exit_code == EXIT_LIMIT
    # a gzip bomb stops at the limit
    bomb = tmp_path / "bomb.trace.json.gz"
    bomb.write_bytes(gzip.compress(b"[" + b" " * (8 << 20) + b"]", compresslevel=9))
    assert "1,048,576-byte limit" in _fault(bomb, LimitExceeded, max_decompressed_bytes=1 << 20)


def test_reading_writes_nothing(tmp_path):
    d = tmp_path / "ro"
    d.mkdir()
    p = _write(d / "h.trace.json.gz", _tpu_doc())
    p.chmod(0o444)
    d.chmod(0o555)
    try:
        before = sorted((q.name, q.stat().st_mtime) for q in d.iterdir())
        read_trace_json(p)
        after = sorted((q.name, q.stat().st_mtime) for q in d.iterdir())
        assert before == after and os.access(p, os.R_OK)
    finally:
        d.chmod(0o755)


def test_a_utf8_byte_order_mark_is_ignored(shared_traces, tmp_path):
    """RFC 8259 lets a parser ignore a leading BOM (Windows editors and some exporters write
    one); the same trace with and without it, plain and gzipped, reads the same."""
    import gzip

    from traceview.model.files import read_file

    src = next((shared_traces / "vllm_tpu_qwen").rglob("*.trace.json.gz"))
    text = gzip.decompress(src.read_bytes())
    plain = tmp_path / "a" / "h.trace.json"
    plain.parent.mkdir()
    plain.write_bytes(b"\xef\xbb\xbf" + text)
    gz = tmp_path / "b" / "h.trace.json.gz"
    gz.parent.mkdir()
    gz.write_bytes(gzip.compress(b"\xef\xbb\xbf" + text, compresslevel=1))
    ref = tmp_path / "c" / "h.trace.json"
    ref.parent.mkdir()
    ref.write_bytes(text)
    want = read_file(ref).ops.drop("file")
    for p in (plain, gz):
        got = read_file(p).ops.drop("file")
        assert got.equals(want, null_equal=True) and got.height > 1000


# -- large files: streamed in chunks -----------------------------------------------------------

def _same(a, b) -> None:
    assert a.ops.drop("file").equals(b.ops.drop("file"), null_equal=True)
    assert a.module_runs.equals(b.module_runs, null_equal=True)
    assert (a.n_events, a.has_shapes, [d.name for d in a.devices]) == (b.n_events, b.has_shapes, [d.name for d in b.devices])


@pytest.fixture
def streamed(monkeypatch):
    """Every file streamed in 64 KiB chunks; a fall back to the whole text fails the test."""
    import traceview.model.from_tracejson as ftj
    import traceview.read.tracejson as tj

    monkeypatch.setattr(tj, "STREAM_ABOVE", -1)
    monkeypatch.setattr(tj, "_STREAM_CHUNK", 64 << 10)
    chunks = []
    orig = tj.stream_event_chunks

    def counted(*a):
        for c in orig(*a):
            chunks.append(c[3])
            yield c

    monkeypatch.setattr(tj, "stream_event_chunks", counted)

    def whole(*a, **k):
        raise AssertionError("read whole")

    monkeypatch.setattr(ftj, "read_json_bytes", whole)
    return chunks


def test_streamed_reading_equals_whole_text(vllm, shared_traces, streamed, tmp_path):
    """The vLLM trace streamed in 64 KiB chunks (gzip and plain) gives the same tables as the
    whole text; the chunks cover the whole events array."""
    got = read_trace_json(shared_traces / VLLM, run="2026_01_11_21_26_41")
    _same(got, vllm)
    text = gzip.decompress((shared_traces / VLLM).read_bytes())
    assert len(streamed) > 100 and len(text) - 1000 < sum(streamed) < len(text)  # all but head, commas, end
    plain = tmp_path / "t1v-n-9eb622fc-w-0.trace.json"
    plain.write_bytes(text)
    _same(read_trace_json(plain, run="2026_01_11_21_26_41"), vllm)


def test_stream_splits_only_between_events(tmp_path, monkeypatch):
    """Names holding the split pattern ('}, {"'), a bare array, other members before
    traceEvents, a BOM, and what the streamed form does not take (members after the array,
    invalid JSON, a truncated gzip stream): each reads as the whole text does (or fails with
    its error)."""
    import traceview.read.tracejson as tj

    tricky = [_x(1, 2, float(i), 0.5, "x}, {" if i % 3 else '"}, {"a', {"hlo_op": f"add.{i}", "hlo_module": "jit_f(1)"})
              for i in range(3000)]
    doc = _meta(1, "/device:GPU:0", {2: "Stream #1"}) + tricky
    cases = {"obj": {"displayTimeUnit": "ns", "metadata": {"a": [1, {"b": 2}]}, "traceEvents": doc + [{}]},
             "array": doc, "after": {"traceEvents": doc, "x": [{"y": 1}]}}
    want = {}
    for k, d in cases.items():
        _write(tmp_path / f"{k}.trace.json.gz", d)
        want[k] = read_trace_json(tmp_path / f"{k}.trace.json.gz", host="h")
    bom = _write(tmp_path / "bom.trace.json", b"\xef\xbb\xbf" + orjson.dumps(cases["obj"]), gz=False)
    bad = _write(tmp_path / "bad.trace.json.gz", orjson.dumps(cases["obj"])[:-40] + b"}]}")
    cut = tmp_path / "cut.trace.json.gz"
    cut.write_bytes((tmp_path / "obj.trace.json.gz").read_bytes()[:-100])
    assert want["obj"].ops.height == 3000
    monkeypatch.setattr(tj, "STREAM_ABOVE", -1)
    monkeypatch.setattr(tj, "_STREAM_CHUNK", 4096)
    for k in cases:
        _same(read_trace_json(tmp_path / f"{k}.trace.json.gz", host="h"), want[k])
    _same(read_trace_json(bom, host="h"), want["obj"])
    assert "not valid JSON" in _fault(bad)
    assert "truncated gzip" in _fault(cut)


def test_streamed_file_limits(tmp_path, monkeypatch):
    """A streamed file stops at its text limit (max_decompressed_bytes, else 4x the memory
    budget) and when the events kept would pass the memory budget."""
    import traceview.read.tracejson as tj

    doc = _meta(1, "/device:GPU:0", {2: "Stream #1"}) + [
        _x(1, 2, float(i), 0.5, "k", {"hlo_op": "add.1", "hlo_module": "jit_f(1)"}) for i in range(20000)]
    p = _write(tmp_path / "h.trace.json.gz", {"traceEvents": doc})
    size = len(gzip.decompress(p.read_bytes()))
    monkeypatch.setattr(tj, "STREAM_ABOVE", -1)
    monkeypatch.setattr(tj, "_STREAM_CHUNK", 64 << 10)
    # the whole text (about 2 MB) inflated in one block, so that the text limit is met before the
    # events decoded from it pass the memory budget (with 512 KiB blocks the budget is met first)
    monkeypatch.setattr(tj, "_INFLATE_BLOCK", 4 << 20)
    assert read_trace_json(p, max_decompressed_bytes=size).ops.height == 20000
    assert f"{size - 1:,}-byte limit on its text" in _fault(p, LimitExceeded, max_decompressed_bytes=size - 1)
    msg = _fault(p, LimitExceeded, max_bytes=size // 4 - 1)
    assert "limit on its text" in msg and "streamed" in msg
    msg = _fault(p, LimitExceeded, max_bytes=size // 2)  # 96 bytes per event kept: over by the end
    assert "memory limit to read" in msg and "--max-bytes" in msg


def test_a_duration_past_the_float_range_warns_once_in_traceviews_words(tmp_path):
    """An op whose ``dur`` is 1e308 µs (x 1e6 overflows a float): traceview's clamp warning, and
    no numpy RuntimeWarning naming a line of traceview's source before it."""
    import subprocess
    import sys

    events = _meta(3, "/device:TPU:0", {3: "XLA Ops"})
    events += [_x(3, 3, 100.0 + 10 * i, 1e308 if i == 2 else 2.0, f"fusion.{i}", {}) for i in range(5)]
    doc = {"displayTimeUnit": "ns", "traceEvents": events}
    p = _write(tmp_path / "big.trace.json", doc, gz=False)
    r = subprocess.run([sys.executable, "-m", "traceview.cli", "analyze", str(p), "--brief", "--no-cache"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "RuntimeWarning" not in r.stderr and "clamped to" in r.stdout + r.stderr, r.stderr
