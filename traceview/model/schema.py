"""The op-event table: one schema shared by every reader and every analysis.

Readers (:mod:`traceview.model.from_xplane`, :mod:`traceview.model.from_tracejson`) turn a trace file into a
:class:`TraceData`; analyses only ever see these frames. Times are integer picoseconds
throughout (XPlane's native unit); renderers convert to µs/ms for display.

``ops`` — one row per HLO op event on a device timeline (held dictionary-encoded as a
:class:`traceview.model.optable.OpTable`: the per-event columns start_ps, duration_ps, self_ps and
count plus an id into one row per distinct op description holding every other column;
``TraceData.ops`` / ``Profile.ops`` join the two into this wide frame on first use) (TPU ``XLA Ops`` line, GPU kernel
stream line, XLA:CPU thunk-executor thread). On GPU an HLO op that launches k kernels gives
k rows, as XProf counts it (its ``occurrences`` are per kernel). A pre-aggregated XEvent
(``num_occurrences``) gives one row with ``count`` = that number and no start time.

==================  =========  ==============================================================
column              dtype      meaning
==================  =========  ==============================================================
host                Utf8       host name (XSpace hostname, else the file stem)
run                 Utf8       run folder name (``YYYY_MM_DD_HH_MM_SS``) or "" when none
file                Utf8       path of the trace file the row was read from
device              Utf8       XPlane name, e.g. ``/device:TPU:0``, ``/host:CPU``
line                Utf8       XLine name, e.g. ``XLA Ops``, ``Stream #16(Kernel)``
module              Utf8       hlo_module name, e.g. ``jit_step_fun`` ("" if unknown)
program_id          UInt64     XLA program id (TPU: 64-bit fingerprint; GPU/CPU: per-process
                               sequential id, meaningless across runs); null if unknown
op_name             Utf8       HLO instruction name, e.g. ``fusion.12``, ``custom-call.1``
op_kind             Utf8       HLO opcode, e.g. ``fusion``, ``custom-call``, ``dot``
category            Utf8       TPU ``hlo_category`` (e.g. ``loop fusion``), else derived
shape               Utf8       canonical shape signature ``result <- operand, ...`` with
                               layouts, tiling and memory spaces stripped ("" if unknown)
hlo_text            Utf8       HLO text of the instruction as written by XLA ("" if unknown)
kernel              Utf8       device event name when it differs from op_name (GPU kernel)
start_ps            Int64      start, ps since the profile session start (null if aggregated)
duration_ps         Int64      wall duration, ps (total over ``count`` when aggregated)
self_ps             Int64      duration minus nested child ops on the same line, ps
count               Int64      occurrences this row stands for (1 unless pre-aggregated)
source_file         Utf8       Python file that emitted the op ("" if unknown)
source_line         Int32      line in source_file (null if unknown)
source_stack        Utf8       newline-separated ``file:line[:col]`` frames, innermost first
framework_op        Utf8       framework op path (``tf_op`` / HLO ``op_name``), e.g.
                               ``jit(step_fun)/dot_general``
flops               Float64    FLOPs of one occurrence as recorded in the trace (TPU
                               ``flops``), else derived from the HLO, else null
model_flops         Float64    TPU ``model_flops`` (FLOPs the model asked for), else null
bytes_accessed      Float64    bytes of one occurrence as recorded in the trace, else
                               derived from the HLO (:mod:`traceview.model.costs`), else null
cost_source         Utf8       where flops/bytes_accessed come from: ``trace``, ``derived``
                               or ``unknown``
==================  =========  ==============================================================

``module_runs`` — one row per execution of a compiled program (TPU ``XLA Modules`` line,
GPU/CPU derived from op events): host, device, module, program_id, start_ps, duration_ps.

``step_markers`` — one row per step annotation (``jax.profiler.StepTraceAnnotation``: a host
event carrying a ``step_num`` stat) on a CPU trace, where ops and markers share the host
clock, one per event of a TPU plane's ``Steps`` line (name "Steps", device the plane, on
the ops' clock) and one per event of a GPU plane's ``traceview steps`` line (a window
``traceview export`` wrote; step_num the step's number in the trace it was cut from): host,
device ("" = every device of the host), name, step_num, start_ps, duration_ps.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

OPS_SCHEMA: dict[str, pl.DataType] = {
    "host": pl.Utf8,
    "run": pl.Utf8,
    "file": pl.Utf8,
    "device": pl.Utf8,
    "line": pl.Utf8,
    "module": pl.Utf8,
    "program_id": pl.UInt64,
    "op_name": pl.Utf8,
    "op_kind": pl.Utf8,
    "category": pl.Utf8,
    "shape": pl.Utf8,
    "hlo_text": pl.Utf8,
    "kernel": pl.Utf8,
    "start_ps": pl.Int64,
    "duration_ps": pl.Int64,
    "self_ps": pl.Int64,
    "count": pl.Int64,
    "source_file": pl.Utf8,
    "source_line": pl.Int32,
    "source_stack": pl.Utf8,
    "framework_op": pl.Utf8,
    "flops": pl.Float64,
    "model_flops": pl.Float64,
    "bytes_accessed": pl.Float64,
    "cost_source": pl.Utf8,
}

STEP_MARKERS_SCHEMA: dict[str, pl.DataType] = {
    "host": pl.Utf8,
    "device": pl.Utf8,
    "name": pl.Utf8,
    "step_num": pl.Int64,
    "start_ps": pl.Int64,
    "duration_ps": pl.Int64,
}

MODULE_RUNS_SCHEMA: dict[str, pl.DataType] = {
    "host": pl.Utf8,
    "device": pl.Utf8,
    "module": pl.Utf8,
    "program_id": pl.UInt64,
    "start_ps": pl.Int64,
    "duration_ps": pl.Int64,
}


def empty_ops() -> pl.DataFrame:
    """An op-event table with no rows and the full :data:`OPS_SCHEMA`."""
    return pl.DataFrame(schema=OPS_SCHEMA)


def empty_module_runs() -> pl.DataFrame:
    """A module-runs table with no rows and :data:`MODULE_RUNS_SCHEMA`."""
    return pl.DataFrame(schema=MODULE_RUNS_SCHEMA)


def frame(columns: dict[str, list], schema: dict[str, pl.DataType]) -> pl.DataFrame:
    """Build a frame from column lists; missing columns are filled with nulls.

    Raises ``ValueError`` if the column lists differ in length.
    """
    n = {len(v) for v in columns.values()}
    if len(n) > 1:
        raise ValueError(f"column lengths differ: {sorted(n)}")
    rows = n.pop() if n else 0
    data = {}
    for name, dtype in schema.items():
        values = columns.get(name)
        data[name] = pl.Series(name, values if values is not None else [None] * rows, dtype=dtype, strict=False)
    return pl.DataFrame(data)


@dataclass
class DeviceInfo:
    """What a trace says about one device (an XPlane's stats).

    ``peak_flops`` is in FLOP/s and ``peak_bw`` in bytes/s; both are None when the trace does
    not carry them. TPU planes carry ``peak_teraflops_per_second`` and
    ``peak_hbm_bw_gigabytes_per_second`` (libtpu; GB = 1e9 bytes). GPU planes carry
    ``clock_rate`` (kHz), ``core_count`` and ``memory_bandwidth`` (bytes/s). ``host`` is the
    host the plane belongs to (planes are named per host: a pod has ``/device:TPU:0`` on
    every host), set when a profile merges several files.
    """

    name: str
    kind: str  # "TPU", "GPU", "CPU"
    device_type: str = ""
    peak_flops: float | None = None
    peak_bw: float | None = None
    stats: dict = field(default_factory=dict)
    host: str = ""


@dataclass(init=False)
class TraceData:
    """Everything one reader extracted from one trace file.

    ``table`` is the op-event table in dictionary-encoded form
    (:class:`traceview.model.optable.OpTable`); ``ops`` is its wide :data:`OPS_SCHEMA` frame, built
    on first use (readers pass either as ``ops`` or ``table``). ``runs`` holds the module runs
    in dictionary-encoded form (:class:`traceview.model.runtable.RunTable`); ``module_runs`` is
    their wide :data:`MODULE_RUNS_SCHEMA` frame, built on first use (readers pass either).
    ``memory``: the allocator events (:data:`traceview.model.memory_events.MEMORY_SCHEMA`, None
    when the reader has none); ``kernel_lines``: the TPU kernel-profiling lines
    (:data:`traceview.model.kernel_lines.KERNEL_SCHEMA`, None when the trace has none);
    ``hlo_protos``: the programs' serialized HLO protos
    (:data:`traceview.model.hlo_graph.PROTOS_SCHEMA`, None when the trace has none).
    ``notes`` are reader warnings (one line each) to show the user, e.g. that a
    ``trace.json.gz`` from CPU/GPU carries no shapes. ``has_shapes`` is False when no op in the
    file could be given a shape signature. ``n_events`` counts every event read.
    ``dataclasses.replace`` works on it.
    """

    path: str
    host: str
    format: str  # "xplane" or "trace_json"
    table: object
    runs: object
    devices: list[DeviceInfo]
    notes: list[str]
    has_shapes: bool
    n_events: int
    profile_start_ns: int | None
    profile_stop_ns: int | None
    step_markers: pl.DataFrame | None
    memory: pl.DataFrame | None
    kernel_lines: pl.DataFrame | None
    hlo_protos: pl.DataFrame | None

    def __init__(self, path: str, host: str, format: str, ops=None, module_runs: pl.DataFrame | None = None,
                 devices: list[DeviceInfo] | None = None, notes: list[str] | None = None,
                 has_shapes: bool = True, n_events: int = 0, profile_start_ns: int | None = None,
                 profile_stop_ns: int | None = None, step_markers: pl.DataFrame | None = None, table=None,
                 runs=None, memory: pl.DataFrame | None = None, kernel_lines: pl.DataFrame | None = None,
                 hlo_protos: pl.DataFrame | None = None):
        from traceview.model.optable import OpTable, as_table
        from traceview.model.runtable import as_runs

        self.path = path
        self.host = host
        self.format = format
        src = ops if ops is not None else table  # replace(x, ops=...) passes the old table too
        self.table = OpTable.empty() if src is None else as_table(src)
        self.runs = as_runs(module_runs if module_runs is not None else runs)  # replace(x, module_runs=...) too
        self.devices = list(devices or [])
        self.notes = list(notes or [])
        self.has_shapes = has_shapes
        self.n_events = n_events
        self.profile_start_ns = profile_start_ns
        self.profile_stop_ns = profile_stop_ns
        self.step_markers = step_markers
        self.memory = memory
        self.kernel_lines = kernel_lines
        self.hlo_protos = hlo_protos

    @property
    def ops(self) -> pl.DataFrame:
        """The wide op-event frame (:data:`OPS_SCHEMA`), built from ``table`` and cached."""
        return self.table.frame()

    @property
    def module_runs(self) -> pl.DataFrame:
        """The wide module-runs frame (:data:`MODULE_RUNS_SCHEMA`), built from ``runs`` and cached."""
        return self.runs.frame()

    @module_runs.setter
    def module_runs(self, value) -> None:
        from traceview.model.runtable import as_runs

        self.runs = as_runs(value)

    def __repr__(self) -> str:
        return (f"<TraceData {self.format} {self.path!r}: host {self.host!r}, "
                f"{self.table.height:,} op events, {len(self.devices)} devices>")


def _ops_column_docs() -> dict[str, str]:
    """{column: meaning} read off the op-table block of this module's docstring."""
    return _block_docs(__doc__, OPS_SCHEMA)


def _block_docs(doc: str | None, columns) -> dict[str, str]:
    """{column: meaning} read off the column/dtype/meaning table of a module docstring ``doc``
    (its first ``====`` block), for the names in ``columns``."""
    import re

    docs: dict[str, str] = {}
    block = (doc or "").split("==================  =========", 3)
    last = None
    for line in (block[2] if len(block) > 2 else "").splitlines():
        m = re.match(r"^(\w+)\s+(\w+)\s{2,}(.*)$", line)  # a 19-character name leaves one space
        if m and m.group(1) in columns:
            last = m.group(1)
            docs[last] = m.group(3).strip()
        elif last and line.startswith(" " * 20) and line.strip():
            docs[last] += " " + line.strip()
    return {k: v.replace("``", "") for k, v in docs.items()}


_POP = {"op_name": "HLO instruction name", "shape": "shape signature (result <- operands)", "op_kind": "HLO opcode",
        "category": "TPU hlo_category, else derived", "occurrences": "op events (XProf's count)",
        "executions": "executions of the op (GPU: kernels of one execution are one)", "total_ps": "inclusive time, ps",
        "self_ps": "self time, ps", "mean_ps": "mean duration per occurrence (total_ps / occurrences), ps",
        "median_ps": "median duration per occurrence, ps", "min_ps": "shortest occurrence, ps",
        "max_ps": "longest occurrence, ps", "share": "share of all ops' self time (0-1)",
        "modules": "hlo_module names (list; SQL: array_contains(modules, 'jit_f'))",
        "n_programs": "program_ids", "devices": "devices it ran on", "source": "most frequent file:line",
        "framework_op": "most frequent framework op path (named scopes)"}

#: The named tables of ``traceview query`` / ``Profile.sql`` (:mod:`traceview.analysis.sql`):
#: {table: (what one row is, {column: meaning})}. A table of a Report section added later is
#: queryable without an entry here (its columns are listed with no doc).
TABLE_DOCS: dict[str, tuple[str, dict[str, str]]] = {
    "ops": ("one HLO op event on a device timeline (times in ps)", {}),
    "module_runs": ("one execution of a compiled program on a device",
                    {"start_ps": "start, ps since the session start", "duration_ps": "wall time, ps"}),
    "programs": ("one (hlo_module, program_id), summed over devices",
                 {"executions": "executions on all devices", "devices": "devices that ran it",
                  "total_ps": "module wall time summed, ps"}),
    "step_markers": ("one step annotation (StepTraceAnnotation) of a CPU trace", {}),
    "populations": ("one (op_name, shape) population: traceview analyze's op table", _POP),
    "split_names": ("an op name with several shape populations (lists per population)",
                    {"n": "populations", "t": "their self time summed, ps"}),
    "occurrence_checks": ("a population checked against the step count (--steps / --expect-batch)", {}),
    "devices": ("one device: kind, op count, op time and peaks",
                {"peak_flops": "FLOP/s", "peak_bw": "bytes/s", "op_time_ps": "op self time, ps"}),
    "device_groups": ("devices grouped by (kind, device_type)", {}),
    "roofline": ("one population against the roofline",
                 {"flops": "FLOPs per execution", "bytes": "bytes per execution",
                  "intensity": "arithmetic intensity, FLOP/byte", "achieved_flops": "FLOP/s",
                  "achieved_bw": "bytes/s", "bound_by": "compute, memory, collective, async or unknown",
                  "roofline_ps": "roofline time per execution, ps", "efficiency": "roofline_ps / exec_ps"}),
    "roofline_layers": ("one op against the roofline, its per-layer copies (names that differ only in XLA's "
                        "numeric suffix, with equal shape and costs) as one row",
                        {"members": "op names in the row", "op_names": "those names, sorted",
                         "flops": "FLOPs per execution", "bytes": "bytes per execution",
                         "intensity": "arithmetic intensity, FLOP/byte", "achieved_flops": "FLOP/s over the members' time",
                         "achieved_bw": "bytes/s over the members' time",
                         "roofline_ps": "roofline time per execution, ps",
                         "efficiency": "roofline_ps / exec_ps (time-weighted over the members)",
                         "efficiency_min": "the lowest member's efficiency",
                         "efficiency_max": "the highest member's efficiency"}),
    "kernels": ("one custom kernel (configuration read off its name) per module",
                {"config": "key=value pairs read off the name", "invocations": "calls",
                 "self_ps": "self time, ps"}),
    "sources": ("one source file (self time attributed to the frame chosen)",
                {"origin": "project, site-packages or unknown", "n_ops": "populations from it"}),
    "steps": ("one step on one device (step anatomy)",
              {"run_ps": "program run time, ps", "idle_ps": "time with no op, ps", "busy_ps": "time with ops, ps"}),
    "families": ("one op family of the step anatomy",
                 {"per_step": "self time per step, ps", "n_populations": "populations in it"}),
    "communication": ("one collective (kind, shape, replica groups, channel), when the trace has them",
                      {"data_bytes": "the nccl-tests size S, bytes", "bytes_sent": "bytes each participant sends",
                       "bytes_received": "bytes each participant receives", "group_size": "participants per group",
                       "time_ps": "median time per execution, ps (async: start to done)",
                       "algbw": "S / time, bytes/s", "busbw": "algbw x the nccl-tests bus factor, bytes/s",
                       "link_peak": "interconnect peak one way, bytes/s (null: unknown)",
                       "frac_link_peak": "busbw / link_peak"}),
    "host_transfers": ("one host transfer population (direction, mechanism, shape): copies to or from host memory",
                       {"bytes": "bytes per copy", "time_ps": "median time in flight per copy, ps",
                        "bandwidth": "bytes / median time in flight, bytes/s",
                        "direction_bandwidth": "all copies of the direction over their merged time in flight, "
                                               "bytes/s"}),
    "population_regimes": ("one population whose spread mixes regimes (warm-up, programs, two modes)",
                           {"regimes": "why: warm-up, N programs, bimodal or device split", "p50_ps": "median per occurrence, ps",
                            "p90_ps": "90th percentile per occurrence, ps", "cv": "std / mean per occurrence"}),
    "family_roofline": ("one op family per step of the window, against the roofline",
                        {"time_ps": "self time per step, ps", "share": "of the step", "flops": "FLOPs per step",
                         "bytes": "bytes per step", "intensity": "FLOP/byte", "predicted_ps": "roofline time per "
                         "step, ps", "measured_ps": "time per step of the costed ops, ps"}),
    "overlap_ops": ("one async collective or copy execution: in flight, hidden, exposed",
                    {"in_flight_ps": "start to done, ps", "hidden_ps": "in flight while the device computed, ps",
                     "exposed_ps": "in flight minus hidden, ps"}),
    "overlap_populations": ("one collective or async copy population: its in-flight, hidden and exposed time", {}),
    "overlap_steps": ("one step on one device: compute + exposed + host + idle = the step",
                      {"compute_ps": "ps", "exposed_ps": "ps", "hidden_ps": "part of compute with a collective in "
                       "flight, ps", "host_ps": "host transfers, ps", "idle_ps": "ps"}),
    "stragglers_devices": ("one device in one step: busy time, waits, waits it caused", {}),
    "stragglers_steps": ("one step: the slowest device and its lead over the median", {}),
    "stragglers_collectives": ("one collective execution matched across devices: arrivals, the last, the waits", {}),
    "findings": ("one finding: id, severity, statement, evidence, why, next step, verify hint, doc", {}),
    "memory": ("one device memory allocator (XProf's memory id) from its allocation events, as XProf's "
               "memory_profile reads them (bytes)",
               {"host": "host name", "allocator": "XProf's memory id: allocator_name, else the device index",
                "events": "allocation and deallocation events", "allocations": "allocation events",
                "capacity_bytes": "heap + stack + free bytes at the peak (memoryCapacity; null: unknown)",
                "lifetime_peak_bytes": "the allocator's own peak heap bytes in use over its life, before the "
                                       "profile too (peakBytesUsageLifetime)",
                "peak_in_use_bytes": "max over the events of heap + stack bytes (peakBytesInUse)",
                "peak_heap_bytes": "heap bytes in use at the peak", "peak_stack_bytes": "stack bytes reserved at the peak",
                "peak_time_ps": "the peak's time, ps on the host plane's clock",
                "peak_share_of_capacity": "peak_in_use_bytes / capacity_bytes (0-1)",
                "fragmentation_at_peak": "the allocator's fragmentation at the peak (0-1)",
                "alive_at_peak_bytes": "bytes of the allocations alive at the peak",
                "unattributed_bytes": "peak_heap_bytes minus alive_at_peak_bytes: allocated before the profile "
                                      "began",
                "step_source": "how events are put in steps: step ids (group_id), step windows or unknown",
                "peak_step": "the step of the peak", "growth_per_step_bytes": "least-squares slope of the in-use at "
                "the steady steps' ends, bytes per step",
                "growth_per_step_pct": "growth_per_step_bytes as a percentage of the mean in-use at those ends"}),
    "memory_alive_at_peak": ("one group of the allocations alive at an allocator's peak (op, shape, region, "
                             "data type, bytes), largest first",
                             {"host": "host name", "allocator": "XProf's memory id",
                              "bytes": "allocation_bytes x count", "count": "allocations in the group",
                              "allocation_bytes": "bytes the allocator handed out per allocation",
                              "requested_bytes": "bytes the caller asked for per allocation",
                              "op": "op that allocated (tf_op; \"\" if absent)", "shape": "tensor shape as recorded",
                              "region": "region_type", "data_type": "data_type"}),
    "memory_steps": ("one step with allocator events in it, per allocator: the in-use at its end and its peak",
                     {"host": "host name", "allocator": "XProf's memory id",
                      "step": "step id (group_id) or step number of the profile's step windows",
                      "end_in_use": "heap + stack bytes as of the step's last event",
                      "peak_in_use": "max heap + stack bytes within the step",
                      "steady": "in the steady window (counted in the growth per step)",
                      "events": "allocator events in the step"}),
    "memory_events": ("one allocation or deallocation event of a device memory allocator", {}),
}


def column_docs(table: str) -> dict[str, str]:
    """{column: meaning} of a named table (:data:`TABLE_DOCS`; the op table's from this
    module's docstring, the allocator events' from :mod:`traceview.model.memory_events`'); {}
    for a table without docs."""
    if table == "ops":
        return _ops_column_docs()
    if table == "memory_events":  # the allocator events' table, documented where it is read
        from traceview.model import memory_events

        return _block_docs(memory_events.__doc__, memory_events.MEMORY_SCHEMA)
    return dict(TABLE_DOCS.get(table, ("", {}))[1])
