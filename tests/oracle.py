"""XProf's own HLO tables, as an independent oracle for traceview's tests.

Test-only: this module imports ``xprof`` (the ``test`` extra) and is never used on traceview's
analysis path. It runs XProf 2.24.2's C++ converters on an xplane file and returns what the
XProf UI would show, as polars frames, so tests can compare traceview's numbers with XProf's
row by row.

XProf writes cache files into the folder it reads (``ALL_HOSTS.op_stats_v2.pb``,
``<module>(<id>).hlo_proto.pb``, ``*.SSTABLE``) and, with ``use_saved_result=True`` (its
default), returns those caches even after the xplane file changed. So every conversion here
runs on a private copy laid out as ``<tmp>/plugins/profile/run/<host>.xplane.pb`` with
``use_saved_result=False``, and the copy is deleted afterwards. Nothing is ever written next
to the input (``../shared/traces`` is read-only).

:func:`xprof_hlo_stats` columns (XProf ``hlo_stats`` tool, ``HloStatsDataTableColumns`` in
``xprof/convert/op_stats_to_hlo_stats.cc``); meanings verified on the shared traces:

=============================  =======  =====================================================
column                         dtype    meaning
=============================  =======  =====================================================
rank                           Int64    XProf's rank by total self time (1 = largest)
program_id                     UInt64   XLA program id. XProf sends it as a *string* cell
                                        (TPU ids are 64-bit fingerprints, e.g.
                                        ``12190760917235803885``, beyond a JSON double)
module                         Utf8     hlo module name of that program, from XProf's
                                        ``op_profile`` program nodes ``<module>(<id>)``;
                                        null if XProf lists no such program
category                       Utf8     XProf's HLO category (TPU ``hlo_category``; GPU
                                        derived: ``custom-call``, ``loop fusion``, ...)
hlo_op_name                    Utf8     HLO instruction name, e.g. ``custom-call.1``
hlo_op_expression              Utf8     HLO text of the instruction with shapes and layouts
tf_op_name                     Utf8     framework op, e.g. ``jit(dot)/dot_general:``
occurrences                    Int64    events counted, **summed over all cores/devices**
                                        (TPU: 4 cores x 100 runs = 400; GPU: one per kernel,
                                        so an HLO op launching 2 kernels counts 2 per run)
total_time_us                  Float64  sum of event durations, µs, over all cores/devices.
                                        TPU: from the ``device_duration_ps`` stat (device
                                        clock, XLA's ``GetDeviceEventTimespan``), *not* the
                                        XEvent's ``duration_ps``; GPU: kernel durations.
                                        Not rounded: it is the ps sum / 1e6 as a double
avg_time_us                    Float64  total_time_us / occurrences
total_self_time_us             Float64  total time minus nested child ops, µs
avg_self_time_us               Float64  total_self_time_us / occurrences
total_self_time_percent        Float64  % of all device op self time (a fraction x 100)
cumulative_total_self_time_... Float64  running sum of the above in rank order
dma_stall_percent              Float64  % of time stalled by DMA (TPU only, else 0)
model_flop_rate                Float64  GFLOP/s from ``model_flops`` / total time (TPU
                                        stat; GPU/CPU: HLO cost analysis, 0 for
                                        custom-calls such as GEMMs)
normalized_flop_rate           Float64  GFLOP/s from ``flops`` (bf16-normalised on TPU)
measured_memory_bw             Float64  GiB/s, bytes_accessed / total time
hbm_bw, cmem_read_bw,          Float64  GiB/s per memory (from memory_access_breakdown;
cmem_write_bw                           all bytes count as HBM when absent)
operational_intensity          Float64  FLOP/byte
bound_by                       Utf8     ``Compute``, ``HBM``, ... or ``Unknown`` (all
                                        utilisations 0, e.g. GEMM custom-calls on GPU)
hlo_rematerialization,         Utf8     ``Yes``/``No``
outside_compilation, autotuned
source_info                    Utf8     raw HTML cell ``<div class='source-info-cell'
                                        title='<stack>'>file:line</div>``
source                         Utf8     the visible ``file:line`` text of source_info
core_type                      Utf8     TPU core type (``TensorCore``), "" on GPU
parent_op_name                 Utf8     parent op (async/while bodies), usually ""
vdd_energy                     Float64  J (0 when not measured)
=============================  =======  =====================================================

Facts (xprof 2.24.2, checked on ``../shared/traces``): 17 rows for the TPU v6e trace, 16 for
the MI300X GEMM sweep (five ``custom-call.1`` rows, program ids 21/34/49/64/79), 24 for the
MI300X attention trace, 4 for the conv3d trace, 0 for the TF V100 trace (no XLA ops) and 0
for any XLA:CPU profile (XProf ignores XLA:CPU op events).
"""

from __future__ import annotations

import functools
import json
import re
import shutil
import tempfile
from pathlib import Path

import polars as pl

# Columns renamed to carry their unit; every other XProf column keeps XProf's id.
_RENAME = {
    "total_time": "total_time_us",
    "avg_time": "avg_time_us",
    "total_self_time": "total_self_time_us",
    "avg_self_time": "avg_self_time_us",
}

# The columns always present in :func:`xprof_hlo_stats` (even with 0 rows), in order.
HLO_STATS_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int64,
    "program_id": pl.UInt64,
    "module": pl.Utf8,
    "category": pl.Utf8,
    "hlo_op_name": pl.Utf8,
    "hlo_op_expression": pl.Utf8,
    "tf_op_name": pl.Utf8,
    "occurrences": pl.Int64,
    "total_time_us": pl.Float64,
    "avg_time_us": pl.Float64,
    "total_self_time_us": pl.Float64,
    "avg_self_time_us": pl.Float64,
    "total_self_time_percent": pl.Float64,
    "cumulative_total_self_time_percent": pl.Float64,
    "dma_stall_percent": pl.Float64,
    "model_flop_rate": pl.Float64,
    "normalized_flop_rate": pl.Float64,
    "measured_memory_bw": pl.Float64,
    "hbm_bw": pl.Float64,
    "cmem_read_bw": pl.Float64,
    "cmem_write_bw": pl.Float64,
    "operational_intensity": pl.Float64,
    "bound_by": pl.Utf8,
    "hlo_rematerialization": pl.Utf8,
    "outside_compilation": pl.Utf8,
    "autotuned": pl.Utf8,
    "source_info": pl.Utf8,
    "source": pl.Utf8,
    "core_type": pl.Utf8,
    "parent_op_name": pl.Utf8,
    "vdd_energy": pl.Float64,
}

_PROGRAM_NODE = re.compile(r"^(?P<module>.*)\((?P<pid>\d+)\)$")
_SOURCE_TEXT = re.compile(r">([^<]*)</div>\s*$")


def _host_file_name(path: Path) -> str:
    """``<host>.xplane.pb`` for the private copy: keep the name when it already has that form."""
    return path.name if path.name.endswith(".xplane.pb") else "host.xplane.pb"


def _run_tool(path: Path, tool: str, params: dict) -> bytes:
    """Run one XProf tool on a private copy of ``path``; return XProf's raw output bytes."""
    from xprof.convert import raw_to_tool_data  # test extra; imported only when used

    tmp = Path(tempfile.mkdtemp(prefix="traceview-xprof-"))
    try:
        run_dir = tmp / "plugins" / "profile" / "run"
        run_dir.mkdir(parents=True)
        copy = run_dir / _host_file_name(path)
        shutil.copyfile(path, copy)
        data, _content_type = raw_to_tool_data.xspace_to_tool_data(
            [str(copy)], tool, {**params, "use_saved_result": False}
        )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if data is None:
        raise RuntimeError(f"XProf tool {tool!r} failed on {path}")
    return data if isinstance(data, bytes) else str(data).encode()


@functools.cache
def _tool_json_cached(resolved: str, tool: str, params_json: str):
    return json.loads(_run_tool(Path(resolved), tool, json.loads(params_json)))


def xprof_tool_json(path, tool: str, **params):
    """Parsed JSON output of XProf tool ``tool`` on ``path`` (cached per file, tool, params).

    The result is shared between callers: do not mutate it.
    """
    return _tool_json_cached(str(Path(path).resolve()), tool, json.dumps(params, sort_keys=True))


def _datatable_rows(table: dict) -> list[dict]:
    """Rows of a Google-Charts DataTable JSON as dicts keyed by column id."""
    ids = [c["id"] for c in table.get("cols", [])]
    rows = []
    for row in table.get("rows", []):
        cells = row.get("c", [])
        rows.append({cid: (cell.get("v") if cell else None) for cid, cell in zip(ids, cells)})
    return rows


def xprof_program_modules(path) -> dict[int, str]:
    """program_id -> hlo module name, from XProf ``op_profile``'s program nodes ``<module>(<id>)``."""
    tree = xprof_tool_json(path, "op_profile")
    out: dict[int, str] = {}
    for node in tree.get("byProgram", {}).get("children", []):
        m = _PROGRAM_NODE.match(node.get("name", ""))
        if m:
            out[int(m.group("pid"))] = m.group("module")
    return out


@functools.cache
def _hlo_stats_cached(resolved: str) -> pl.DataFrame:
    table = xprof_tool_json(resolved, "hlo_stats")
    rows = _datatable_rows(table)
    modules = xprof_program_modules(resolved) if rows else {}
    records = []
    for row in rows:
        row = {_RENAME.get(k, k): v for k, v in row.items()}
        pid = int(row["program_id"])  # a string cell: 64-bit ids do not fit a double
        row["program_id"] = pid
        row["module"] = modules.get(pid)
        occ = row["occurrences"]
        if occ is None or float(occ) != int(occ):
            raise ValueError(f"non-integral occurrences {occ!r} in XProf row {row}")
        row["occurrences"] = int(occ)
        row["rank"] = None if row.get("rank") is None else int(row["rank"])
        m = _SOURCE_TEXT.search(row.get("source_info") or "")
        row["source"] = m.group(1) if m else (row.get("source_info") or "")
        records.append(row)
    names = list(HLO_STATS_SCHEMA) + sorted({k for r in records for k in r} - set(HLO_STATS_SCHEMA))
    return pl.DataFrame(
        [pl.Series(n, [r.get(n) for r in records], dtype=HLO_STATS_SCHEMA.get(n), strict=n in HLO_STATS_SCHEMA) for n in names]
    )


def xprof_hlo_stats(path) -> pl.DataFrame:
    """XProf's ``hlo_stats`` table for the xplane file ``path``: one row per XProf row.

    Columns: :data:`HLO_STATS_SCHEMA` (see the module docstring for meanings and units),
    plus any column a newer XProf adds, under XProf's own id. Keyed by
    (``program_id``, ``hlo_op_name``), which XProf keeps unique. Cached per resolved path for
    the test session; do not mutate the returned frame (polars frames are immutable anyway).
    """
    return _hlo_stats_cached(str(Path(path).resolve()))


# ---------------------------------------------------------------------------------------
# A second, XProf-free oracle for XLA:CPU profiles, which XProf does not analyse at all.


def raw_hlo_events(path) -> pl.DataFrame:
    """Every HLO op XEvent in ``path``, straight from the protobuf, one row per event.

    Deliberately naive and independent of traceview's readers (only the protobuf schema is
    shared). An event is taken when it carries an ``hlo_op`` stat (XLA:CPU thunk-executor
    events; GPU kernels on ``Stream #N`` lines, **and** on GPU traces the host launch-API
    events such as ``hipModuleLaunchKernel`` on ``/host:CPU``, which carry the same stats),
    or when it sits on a TPU ``XLA Ops`` line (op name = metadata ``display_name``; TPU
    ``Async XLA Ops`` spans carry ``hlo_op`` too and are kept, with their line name).
    Filter on ``device``/``line`` as needed.

    Columns: ``device`` (plane name), ``line``, ``hlo_module`` (null on TPU), ``program_id``
    (UInt64; event or metadata stat; null if none), ``hlo_op``, ``name`` (event metadata
    name), ``duration_ps`` (the XEvent's duration on the host-aligned timeline) and
    ``device_duration_ps`` (the stat, TPU only, else null). Event stats override metadata
    stats.
    """
    from traceview.read.xplane.protos import XSpace

    xs = XSpace()
    xs.ParseFromString(Path(path).read_bytes())
    out: dict[str, list] = {k: [] for k in ("device", "line", "hlo_module", "program_id", "hlo_op", "name", "duration_ps", "device_duration_ps")}
    for plane in xs.planes:
        stat_names = {k: v.name for k, v in plane.stat_metadata.items()}

        def values(stats):
            d = {}
            for s in stats:
                kind = s.WhichOneof("value")
                if kind is None:
                    continue
                v = getattr(s, kind)
                if kind == "ref_value":
                    v = stat_names.get(v, "")
                d[stat_names.get(s.metadata_id, "")] = v
            return d

        md_stats = {k: values(md.stats) for k, md in plane.event_metadata.items()}
        for line in plane.lines:
            for ev in line.events:
                st = {**md_stats.get(ev.metadata_id, {}), **values(ev.stats)}
                op = st.get("hlo_op")
                if op is None and line.name == "XLA Ops":
                    op = plane.event_metadata[ev.metadata_id].display_name or None
                if op is None:
                    continue
                pid = st.get("program_id")
                out["device"].append(plane.name)
                out["line"].append(line.name)
                out["hlo_module"].append(st.get("hlo_module"))
                out["program_id"].append(None if pid is None else int(pid) % (1 << 64))
                out["hlo_op"].append(op)
                out["name"].append(plane.event_metadata[ev.metadata_id].name)
                out["duration_ps"].append(ev.duration_ps)
                out["device_duration_ps"].append(st.get("device_duration_ps"))
    return pl.DataFrame(
        out,
        schema={
            "device": pl.Utf8,
            "line": pl.Utf8,
            "hlo_module": pl.Utf8,
            "program_id": pl.UInt64,
            "hlo_op": pl.Utf8,
            "name": pl.Utf8,
            "duration_ps": pl.Int64,
            "device_duration_ps": pl.Int64,
        },
    )
