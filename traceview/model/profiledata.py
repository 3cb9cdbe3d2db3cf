"""One or more trace files merged into one profile's tables, and selections of them.

Imports polars only when a method needs it, so that :func:`traceview.model.load.load` can
start decoding on a thread before polars is imported.
"""

from __future__ import annotations

from dataclasses import dataclass


def check_regex(rx: str, option: str | None = None) -> str:
    """``rx`` when it compiles in polars' regex engine (the one the filters run in: Rust
    ``regex``, which has no look-around or back-references); raises
    :class:`~traceview.errors.UsageError` with the engine's one-line reason otherwise (naming
    ``option``, e.g. ``--filter``, when given)."""
    import polars as pl

    from traceview.errors import UsageError

    try:
        pl.Series([""], dtype=pl.Utf8).str.contains(rx)
    except Exception as exc:  # polars raises ComputeError / other engine errors
        raise UsageError(f"{option + ': ' if option else ''}invalid regular expression {rx!r}: "
                         f"{regex_reason(exc)}") from None
    return rx


def regex_reason(exc: Exception) -> str:
    """The regex engine's reason in a polars error, one line: its ``error: ...`` line
    (``unclosed group``), else its first line (``Compiled regex exceeds size limit ...``),
    without polars' "regex error:" prefix and the expression it appends."""
    text = str(exc).split("This error occurred in the following expression:")[0]
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    reason = next((ln for ln in lines if ln.startswith("error:")), lines[0] if lines else "rejected")
    for prefix in ("regex error:", "error:", "regex parse error:"):
        reason = reason.removeprefix(prefix).strip()
    return reason or "rejected"


@dataclass(init=False, eq=False)
class ProfileData:
    """The tables of one or more trace files.

    ``table``: the op events (:class:`~traceview.model.optable.OpTable`: per-event numbers +
    one row per op description); ``ops``: the wide polars frame
    (:data:`~traceview.model.schema.OPS_SCHEMA`, one row per HLO op event, times in ps),
    built from ``table`` on first use; ``runs`` (program executions, a
    :class:`~traceview.model.runtable.RunTable`) and ``module_runs`` (their wide frame,
    :data:`~traceview.model.schema.MODULE_RUNS_SCHEMA`, built on first use); ``devices``
    (:class:`~traceview.model.schema.DeviceInfo` per device plane); ``traces`` (the per-file
    :class:`~traceview.model.schema.TraceData`); ``discovery`` (what was found and why it
    was chosen, or None when built from files directly); ``warnings`` (one line each);
    ``step_markers``; ``memory`` (the allocator events,
    :data:`~traceview.model.memory_events.MEMORY_SCHEMA`; ``memory_note``: why it is empty when
    the trace had allocator events, e.g. a device filter left them out, else None; ``ops_note``:
    likewise why the op table is empty when the trace had op events, an op or device filter
    kept none of them, else None); ``kernel_lines`` (TPU kernel-profiling
    lines, :data:`~traceview.model.kernel_lines.KERNEL_SCHEMA`); ``hlo_protos`` (the programs'
    HLO protos, :data:`~traceview.model.hlo_graph.PROTOS_SCHEMA`, or None). ``ops`` (or ``table``) may be
    given as a wide frame or as an OpTable, ``module_runs`` (or ``runs``) as a wide frame or a
    RunTable; ``dataclasses.replace`` works on it.
    """

    table: object
    runs: object
    devices: list
    traces: list
    discovery: object
    warnings: list
    step_markers: object
    memory: object
    kernel_lines: object
    hlo_protos: object
    memory_note: object = None
    ops_note: object = None

    def __init__(self, ops=None, module_runs=None, devices=None, traces=None, discovery=None, warnings=None,
                 step_markers=None, table=None, runs=None, memory=None, kernel_lines=None, hlo_protos=None,
                 memory_note=None, ops_note=None):
        import polars as pl

        from traceview.model.optable import OpTable, as_table
        from traceview.model.runtable import as_runs
        from traceview.model.schema import STEP_MARKERS_SCHEMA

        src = ops if ops is not None else table  # replace(x, ops=...) passes the old table too
        self.table = OpTable.empty() if src is None else as_table(src)
        self.runs = as_runs(module_runs if module_runs is not None else runs)
        self.devices = list(devices or [])
        self.traces = list(traces or [])
        self.discovery = discovery
        self.warnings = list(warnings or [])
        self.step_markers = step_markers if step_markers is not None else pl.DataFrame(schema=STEP_MARKERS_SCHEMA)
        if memory is None:
            from traceview.model.memory_events import empty_memory

            memory = empty_memory()
        self.memory = memory
        self.memory_note = memory_note
        self.ops_note = ops_note
        if kernel_lines is None:
            from traceview.model.kernel_lines import empty_kernel_lines

            kernel_lines = empty_kernel_lines()
        self.kernel_lines = kernel_lines
        self.hlo_protos = hlo_protos
        self._derived: dict = {}

    def derived(self, key: tuple, make):
        """The frame or result derived from this profile that ``key`` names (an analysis and
        its parameters, hashable: ``("overlap", "anatomy", None, None, "span", "steady")``):
        ``make()`` on first use, the same object afterwards, so that every section of a report
        (and every check of a verify) shares one step anatomy, one overlap, one tagging. A
        profile made by :meth:`filter` or ``dataclasses.replace`` starts with none. Callers
        treat what they get as read-only."""
        try:
            return self._derived[key]
        except KeyError:
            got = self._derived[key] = make()
            return got

    def forget(self, analysis: str) -> None:
        """Drop the derived results of ``analysis`` (the first item of their keys, e.g.
        ``"anatomy"``) that :meth:`derived` keeps: a later call computes them again."""
        for key in [k for k in self._derived if k and k[0] == analysis]:
            del self._derived[key]

    def __getstate__(self) -> dict:
        """Pickled without the derived results (a worker's copy computes its own)."""
        state = dict(self.__dict__)
        state["_derived"] = {}
        return state

    @property
    def ops(self):
        """The wide op-event frame (:data:`~traceview.model.schema.OPS_SCHEMA`), built from
        ``table`` on first use and cached (~16 bytes per string column per event)."""
        return self.table.frame()

    @property
    def module_runs(self):
        """The wide module-runs frame (:data:`~traceview.model.schema.MODULE_RUNS_SCHEMA`),
        built from ``runs`` on first use and cached."""
        return self.runs.frame()

    @classmethod
    def from_traces(cls, traces: list, discovery=None, warnings: list[str] | None = None,
                    expand_kernels: bool = False):
        """One profile of the per-file :class:`~traceview.model.schema.TraceData` (in order):
        their op tables concatenated (times no sum can wrap:
        :func:`~traceview.model.bounds.clamp_profile`), devices tagged with their host, the
        files' notes after ``warnings``. Each interpreted Pallas kernel invocation (a CPU
        trace) is one op row (:func:`traceview.model.interpreted.collapse_kernels`) unless
        ``expand_kernels``."""
        import polars as pl

        from traceview.model.optable import OpTable
        from traceview.model.runtable import RunTable
        from traceview.model.schema import STEP_MARKERS_SCHEMA

        from traceview.model.bounds import clamp_profile

        table = OpTable.concat([t.table for t in traces])
        runs = RunTable.concat([t.runs for t in traces])
        table, runs, clamped = clamp_profile(table, runs)
        if not expand_kernels:
            from traceview.model.interpreted import collapse_kernels

            table = collapse_kernels(table)
        devices, warns = devices_and_notes(traces, warnings)
        warns.extend(clamped)
        marks = [t.step_markers for t in traces if t.step_markers is not None and t.step_markers.height]
        markers = pl.concat(marks, how="vertical") if marks else pl.DataFrame(schema=STEP_MARKERS_SCHEMA)
        mems = [t.memory for t in traces if getattr(t, "memory", None) is not None and t.memory.height]
        memory = pl.concat(mems, how="vertical") if mems else None
        kls = [t.kernel_lines for t in traces if getattr(t, "kernel_lines", None) is not None and t.kernel_lines.height]
        hps = [t.hlo_protos for t in traces if getattr(t, "hlo_protos", None) is not None and t.hlo_protos.height]
        return cls(ops=table, runs=runs, devices=devices, traces=traces, discovery=discovery, warnings=warns,
                   step_markers=markers, memory=memory,
                   kernel_lines=pl.concat(kls, how="vertical") if kls else None,
                   hlo_protos=pl.concat(hps, how="vertical") if hps else None)

    def filter(self, *, op_regex: str | None = None, device_regex: str | None = None):
        """A new profile (of the same class) keeping ops whose name, HLO text or framework op
        path (the named scopes, e.g. a Pallas kernel's name or ``topp_binary_search``) matches
        ``op_regex`` and whose device (plane name, or ``host:plane``) matches
        ``device_regex``. The syntax is polars' (Rust ``regex``: no look-around or
        back-references). A selection that keeps no op of a profile that had some says so in
        ``ops_note`` (as ``memory_note`` for the allocator events). Raises
        :class:`~traceview.errors.UsageError` on an invalid regex."""
        import polars as pl

        table, runs, devices, memory_note = self.table, self.runs, self.devices, self.memory_note
        for rx in (op_regex, device_regex):
            if rx is not None:
                check_regex(rx)
        if op_regex:
            table = table.filter(pl.col("op_name").str.contains(op_regex) | pl.col("hlo_text").str.contains(op_regex)
                                 | pl.col("framework_op").str.contains(op_regex))
        if device_regex:
            dev_match = (pl.col("device").str.contains(device_regex)
                         | (pl.col("host") + ":" + pl.col("device")).str.contains(device_regex))
            table = table.filter(dev_match)
            runs = runs.filter_keys(dev_match)
            names = pl.Series([d.name for d in devices], dtype=pl.Utf8)
            mask = names.str.contains(device_regex).to_list() if len(names) else []
            devices = [d for d, m in zip(devices, mask) if m]
            memory = self.memory
            if memory is not None and memory.height:  # the allocators of the devices kept
                from traceview.model.memory_events import allocator_device

                names = [d.name for d in self.devices]
                serves = {a: allocator_device(a, names) for a in memory["allocator"].unique().to_list()}
                keep = [a for a, dev in serves.items() if dev and pl.Series([dev]).str.contains(device_regex)[0]]
                kept = memory.filter(pl.col("allocator").is_in(keep))
                if kept.height == 0:
                    memory_note = (f"the device filter {device_regex!r} keeps none of the trace's {memory.height:,} "
                                   f"allocator events (allocators {', '.join(sorted(map(str, serves)))})")
                memory = kept
        ops_note = self.ops_note
        if table.height == 0 and self.table.height and (op_regex or device_regex):
            which = " and the ".join(f"{k} filter {v!r}" for k, v in (("op", op_regex), ("device", device_regex)) if v)
            ops_note = f"no op left after the {which}"
        return type(self)(ops=table, runs=runs, devices=devices, traces=self.traces,
                          discovery=self.discovery, warnings=list(self.warnings), step_markers=self.step_markers,
                          memory=memory if device_regex else self.memory, kernel_lines=self.kernel_lines,
                          hlo_protos=self.hlo_protos, memory_note=memory_note, ops_note=ops_note)

    @property
    def op_time_ps(self) -> int:
        """Total self time of all HLO ops, ps (summed over devices)."""
        return self.table.total_self_ps()

    @property
    def op_events(self) -> int:
        """Occurrences of all HLO ops (sum of ``count``)."""
        return int(self.table.events["count"].sum() or 0) if self.table.height else 0

    @property
    def has_shapes(self) -> bool:
        """Whether some file with ops gave them shape signatures."""
        return any(t.has_shapes for t in self.traces if t.table.height)

    def device_summary(self):
        """Per (host, device): host, device, kind, device_type, ops (events), op_time_ps (self),
        peak_flops (FLOP/s), peak_bw (bytes/s), from the trace's plane stats (None when
        absent). Devices are keyed by host because every host of a pod names its planes
        ``/device:TPU:0..n``."""
        return device_rows(self.table.collapse() if self.table.height else None, self.devices)

    def used_devices(self) -> list:
        """The devices that ran ops (a folder of loose traces can hold others), else all."""
        used = (set(self.table.collapse().select("host", "device").unique().iter_rows())
                if self.table.height else set())
        return [d for d in self.devices if (d.host, d.name) in used] or self.devices

    def __repr__(self) -> str:
        hosts = sorted({t.host for t in self.traces})
        # cheap on any size: no aggregation here (by_shape() on millions of events takes seconds)
        return (f"<traceview.Profile: {self.table.height:,} op events, "
                f"{len(self.devices)} device planes, hosts {', '.join(hosts) or '-'}; "
                f"{len(self.warnings)} warning(s)>")


def devices_and_notes(parts, warnings=None) -> tuple[list, list]:
    """(every device of ``parts`` (read traces or fleet host partials: ``devices``, ``host``,
    ``notes``), each given its part's host when it has none; ``warnings`` then every part's
    notes)."""
    devices = []
    for p in parts:
        for d in p.devices:
            d.host = d.host or p.host
            devices.append(d)
    warns = list(warnings or [])
    for p in parts:
        warns.extend(p.notes)
    return devices, warns


def device_rows(per_attr, devices: list):
    """:meth:`ProfileData.device_summary` of collapsed op rows ``per_attr``
    (:meth:`~traceview.model.optable.OpTable.collapse`'s columns host, device, count,
    self_ps; None for no ops) and the :class:`~traceview.model.schema.DeviceInfo` list
    ``devices``: the devices that ran ops, in the list's order."""
    import polars as pl

    rows = []
    per = {}
    if per_attr is not None and per_attr.height:
        for r in per_attr.group_by(["host", "device"]).agg(pl.col("count").sum().alias("n"),
                                                            pl.col("self_ps").sum().alias("t")).iter_rows(named=True):
            per[(r["host"], r["device"])] = (r["n"], r["t"])
    seen = set()
    for d in devices:
        key = (d.host, d.name)
        if key in seen:
            continue
        seen.add(key)
        n, t = per.get(key, (0, 0))
        if n == 0:
            continue
        rows.append({"host": d.host, "device": d.name, "kind": d.kind, "device_type": d.device_type, "ops": n,
                     "op_time_ps": t, "peak_flops": d.peak_flops, "peak_bw": d.peak_bw})
    return pl.DataFrame(rows, schema={"host": pl.Utf8, "device": pl.Utf8, "kind": pl.Utf8, "device_type": pl.Utf8,
                                      "ops": pl.Int64, "op_time_ps": pl.Int64, "peak_flops": pl.Float64,
                                      "peak_bw": pl.Float64})
