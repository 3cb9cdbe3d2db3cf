"""Device memory from the allocators' events: per allocator the peak, what was alive at it,
fragmentation and the growth per step.

Input: the profile's ``memory`` frame (:data:`traceview.model.memory_events.MEMORY_SCHEMA`).
Definitions (bytes unless stated), per allocator (host, XProf memory id), matching XProf
2.24's ``memory_profile`` tool (``xprof/convert/xplane_to_memory_profile.cc``) field by field:

- ``peak_in_use`` = max over the allocator's events of ``heap_bytes + stack_bytes``
  (XProf ``profileSummary.peakStats.peakBytesInUse``); the event attaining it is *the peak*
  (the latest such event, as XProf's ``>=`` keeps the last); ``peak_heap`` / ``peak_stack``
  are its two terms (``heapAllocatedBytes`` / ``stackReservedBytes``);
- ``capacity`` = ``heap_bytes + stack_bytes + free_bytes`` at the peak (``memoryCapacity``);
- ``lifetime_peak`` = max of the allocator's own ``peak_bytes_in_use`` stat, which covers the
  allocator's life before the profile too, and counts its heap only (no stack reservation:
  below ``peak_in_use`` where a stack is reserved) (``peakBytesUsageLifetime``);
- ``fragmentation`` = the allocator's ``fragmentation`` stat at the peak (``peakStats.fragmentation``);
- ``peak_time_ps``: the peak's time on the host clock (XProf: ``peakStatsTimePs``, the
  offset within its XLine).

``alive``: the allocations alive at the peak (allocated at or before it, on the same address
not deallocated before it), grouped by (op, shape, region, data type, bytes) largest first;
``unattributed`` = ``peak_heap`` minus their bytes (allocated before the profile began: XProf's
"unused preallocated device memory" is computed within the peak's step instead, so the two
differ where earlier steps allocated). Per step with allocator events in it: the in-use at
the step's end (as of its last event) and the peak within it, from the events' step ids (``group_id``) when they
carry them, else from the profile's step windows when the events share their clock; growth per
step is the least-squares slope of the in-use at the steady steps' ends.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import polars as pl

#: alive-at-peak groups kept per allocator
ALIVE_ROWS = 20
#: points of the in-use series kept per allocator for charts (max per time bin)
SERIES_POINTS = 400
#: byte counts above this (64 PiB) are not a device's: the event is dropped with a note
ABSURD_BYTES = 1 << 56
#: a steady window needs this many steps before a growth per step is stated
MIN_GROWTH_STEPS = 3


@dataclass
class AllocatorMemory:
    """One allocator's memory (module docstring for each figure; bytes, ps)."""

    host: str
    allocator: str
    events: int
    allocations: int
    capacity: int | None
    lifetime_peak: int | None
    peak_in_use: int
    peak_heap: int
    peak_stack: int
    peak_time_ps: int
    fragmentation: float | None
    alive: pl.DataFrame
    alive_bytes: int
    unattributed: int
    steps: pl.DataFrame | None = None
    step_source: str = "unknown"
    peak_step: int | None = None
    growth_per_step: float | None = None
    growth_pct: float | None = None
    series: tuple = field(default=((), ()), repr=False)
    notes: list[str] = field(default_factory=list)

    @property
    def peak_share(self) -> float | None:
        """peak_in_use / capacity, None when the capacity is unknown or zero."""
        return self.peak_in_use / self.capacity if self.capacity else None

    def to_dict(self) -> dict:
        """JSON-able summary (the alive rows and steps as lists of dicts)."""
        return {
            "host": self.host, "allocator": self.allocator, "events": self.events,
            "allocations": self.allocations, "capacity_bytes": self.capacity,
            "lifetime_peak_bytes": self.lifetime_peak, "peak_in_use_bytes": self.peak_in_use,
            "peak_heap_bytes": self.peak_heap, "peak_stack_bytes": self.peak_stack,
            "peak_time_ps": self.peak_time_ps, "peak_share_of_capacity": self.peak_share,
            "fragmentation_at_peak": self.fragmentation, "alive_at_peak_bytes": self.alive_bytes,
            "unattributed_bytes": self.unattributed, "alive_at_peak": self.alive.to_dicts(),
            "step_source": self.step_source, "peak_step": self.peak_step, "growth_per_step_bytes": self.growth_per_step,
            "growth_per_step_pct": self.growth_pct,
            "steps": self.steps.to_dicts() if self.steps is not None else None,
            "notes": list(self.notes),
        }


@dataclass
class MemoryReport:
    """Per allocator :class:`AllocatorMemory`, largest peak first; ``notes``: why figures
    are missing (no allocator events, bad events dropped). The tables renderers read, built
    once: ``summary`` (one row per allocator, the scalar figures), ``alive`` (host, allocator
    and the alive-at-peak groups), ``steps`` (host, allocator and the per-step rows)."""

    allocators: list[AllocatorMemory]
    notes: list[str] = field(default_factory=list)
    #: why there is no allocator though the trace had events (a device filter kept none), else None
    absent: str | None = None
    summary: pl.DataFrame = field(init=False, repr=False)
    alive: pl.DataFrame = field(init=False, repr=False)
    steps: pl.DataFrame = field(init=False, repr=False)

    def __post_init__(self) -> None:
        rows = []
        for a in self.allocators:
            d = a.to_dict()
            for k in ("alive_at_peak", "steps", "notes"):
                d.pop(k)
            rows.append(d)
        self.summary = pl.DataFrame(rows, schema=_SUMMARY_SCHEMA)
        keyed = [a.alive.select(pl.lit(a.host).alias("host"), pl.lit(a.allocator).alias("allocator"), pl.all())
                 for a in self.allocators if a.alive.height]
        self.alive = pl.concat(keyed, how="vertical_relaxed") if keyed else pl.DataFrame()
        steps = [a.steps.select(pl.lit(a.host).alias("host"), pl.lit(a.allocator).alias("allocator"),
                                pl.all().cast(pl.Int64, strict=False).name.keep()).with_columns(
                     a.steps["steady"]) for a in self.allocators if a.steps is not None and a.steps.height]
        self.steps = pl.concat(steps, how="vertical_relaxed") if steps else pl.DataFrame()

    @property
    def known(self) -> bool:
        """Whether the trace had any allocator events."""
        return bool(self.allocators)

    def to_dict(self) -> dict:
        return {"allocators": [a.to_dict() for a in self.allocators], "notes": list(self.notes)}


_SUMMARY_SCHEMA = {
    "host": pl.Utf8, "allocator": pl.Utf8, "events": pl.Int64, "allocations": pl.Int64,
    "capacity_bytes": pl.Int64, "lifetime_peak_bytes": pl.Int64, "peak_in_use_bytes": pl.Int64,
    "peak_heap_bytes": pl.Int64, "peak_stack_bytes": pl.Int64, "peak_time_ps": pl.Int64,
    "peak_share_of_capacity": pl.Float64, "fragmentation_at_peak": pl.Float64, "alive_at_peak_bytes": pl.Int64,
    "unattributed_bytes": pl.Int64, "step_source": pl.Utf8, "peak_step": pl.Int64, "growth_per_step_bytes": pl.Float64,
    "growth_per_step_pct": pl.Float64,
}


def memory(mem: pl.DataFrame | None, steps: pl.DataFrame | None = None, device_names=(),
           absent: str | None = None) -> MemoryReport:
    """The :class:`MemoryReport` of a profile's allocator events ``mem``. ``steps``: the step
    anatomy's steps (host, device, step, start_ps, duration_ps, in_window) for per-step
    figures when the events carry no step ids; None for none. ``device_names``: the profile's
    device planes, to take each allocator's steps from its own device
    (:func:`~traceview.model.memory_events.allocator_device`; every device's when it serves none).
    ``absent``: why ``mem`` is empty though the trace had events (a device filter), said
    instead of "no allocator events in this trace"."""
    if mem is None or mem.height == 0:
        return MemoryReport([], [absent or "no allocator events in this trace (TPU and GPU xplanes carry "
                                 "MemoryAllocation/MemoryDeallocation on the host plane; XLA:CPU traces and "
                                 "trace.json exports carry none)"], absent=absent)
    notes = []
    mem = mem.with_columns(pl.col("heap_bytes").fill_null(0), pl.col("stack_bytes").fill_null(0))
    cols = ("heap_bytes", "stack_bytes", "free_bytes", "allocation_bytes", "requested_bytes", "lifetime_peak_bytes")
    is_bad = (pl.any_horizontal([((pl.col(c) < 0) | (pl.col(c) > ABSURD_BYTES)).fill_null(False) for c in cols])
              | (pl.col("allocator") == ""))
    n_bad = int(mem.select(is_bad.sum()).item())
    if n_bad:
        notes.append(f"{n_bad:,} allocator events with a negative or absurd byte count (over "
                     f"{ABSURD_BYTES:,}) or no allocator dropped")
        mem = mem.filter(~is_bad)
        if mem.height == 0:
            return MemoryReport([], notes)
    if steps is not None:  # only the columns read per allocator: each filter below copies none of the others
        steps = steps.select([c for c in ("host", "device", "step", "start_ps", "duration_ps", "in_window")
                              if c in steps.columns])
    out = []
    for (host, alloc), grp in mem.group_by(["host", "allocator"], maintain_order=True):
        from traceview.model.memory_events import allocator_device

        dev = allocator_device(alloc, device_names)
        own = steps
        if dev and steps is not None and "device" in steps.columns and not _all_equal(steps, "device", dev):
            own = steps.filter(pl.col("device") == dev)
        out.append(_allocator(host, alloc, grp.sort("time_ps", maintain_order=True),
                              own if own is not None and own.height else steps))
    out.sort(key=lambda a: (-a.peak_in_use, a.host, a.allocator))
    return MemoryReport(out, notes)


def _allocator(host: str, name: str, ev: pl.DataFrame, steps: pl.DataFrame | None) -> AllocatorMemory:
    in_use = (ev["heap_bytes"] + ev["stack_bytes"]).to_numpy()
    t = ev["time_ps"].to_numpy()
    top = in_use.max()
    k = int(np.flatnonzero(in_use == top)[-1])  # the latest event at the peak, as XProf's >= keeps it
    row = ev.row(k, named=True)
    free = row["free_bytes"]
    capacity = int(top) + int(free) if free is not None else None
    lifetime = ev["lifetime_peak_bytes"].max()
    notes = []
    frag = row["fragmentation"]
    if frag is not None and not 0 <= frag <= 1:
        notes.append(f"fragmentation at the peak reads {frag:g}, outside 0-1: not shown")
        frag = None
    if capacity is not None and capacity <= 0:
        notes.append("capacity reads as zero: the allocator recorded no free bytes")
        capacity = None
    alive, alive_bytes = _alive_at(ev, k)
    unattributed = int(row["heap_bytes"]) - alive_bytes
    a = AllocatorMemory(host=host, allocator=name, events=ev.height, allocations=int(ev["alloc"].sum()),
                        capacity=capacity, lifetime_peak=int(lifetime) if lifetime is not None else None,
                        peak_in_use=int(top), peak_heap=int(row["heap_bytes"]), peak_stack=int(row["stack_bytes"]),
                        peak_time_ps=int(row["time_ps"]), fragmentation=frag, alive=alive,
                        alive_bytes=alive_bytes, unattributed=unattributed, series=_series(t, in_use),
                        notes=notes)
    _per_step(a, ev, in_use, steps)
    return a


def _alive_at(ev: pl.DataFrame, k: int) -> tuple[pl.DataFrame, int]:
    """Allocations alive just after event ``k``: per address, the last allocation at or before
    ``k`` with no deallocation of that address after it (and at or before ``k``)."""
    upto = ev.head(k + 1).with_row_index("_i").filter(pl.col("address").is_not_null())
    last = upto.group_by("address").agg(pl.all().sort_by("_i").last())
    alive = last.filter(pl.col("alloc"))
    total = int(alive["allocation_bytes"].fill_null(0).sum())
    grouped = (alive.group_by(["op", "shape", "region", "data_type", "allocation_bytes", "requested_bytes"])
               .agg(pl.len().alias("count"))
               .with_columns((pl.col("allocation_bytes").fill_null(0) * pl.col("count")).alias("bytes"))
               .sort(["bytes", "allocation_bytes", "op", "shape", "region", "data_type", "requested_bytes"],
                     descending=[True, True, False, False, False, False, True])  # (every group key: ties broke by
               # a group_by's order, which varies from run to run)
               .head(ALIVE_ROWS)
               .select("bytes", "count", "allocation_bytes", "requested_bytes", "op", "shape", "region", "data_type"))
    return grouped, total


def _series(t: np.ndarray, in_use: np.ndarray) -> tuple[list[int], list[int]]:
    """(times, bytes in use): every event when few, else the max of each of
    :data:`SERIES_POINTS` equal time bins (the peak kept, as XProf's max box filter keeps it)."""
    if len(t) <= SERIES_POINTS:
        return t.tolist(), in_use.tolist()
    edges = np.linspace(t[0], t[-1], SERIES_POINTS + 1)
    b = np.clip(np.searchsorted(edges, t, side="right") - 1, 0, SERIES_POINTS - 1)
    df = pl.DataFrame({"b": b, "t": t, "v": in_use}).group_by("b").agg(pl.all().sort_by("v").last()).sort("b")
    return df["t"].to_list(), df["v"].to_list()


def _per_step(a: AllocatorMemory, ev: pl.DataFrame, in_use: np.ndarray, steps: pl.DataFrame | None) -> None:
    """Fill ``a.steps`` (step, end_in_use, peak_in_use, steady), the source and the growth."""
    sid = ev["step_id"]
    if sid.null_count() < ev.height:
        df = (ev.select(pl.col("step_id").alias("step"), pl.Series("v", in_use))
              .filter(pl.col("step").is_not_null())
              .group_by("step", maintain_order=True).agg(pl.col("v").last().alias("end_in_use"),
                                                         pl.col("v").max().alias("peak_in_use"),
                                                         pl.len().alias("events"))
              .sort("step").with_columns(pl.lit(True).alias("steady"))
              .select("step", "end_in_use", "peak_in_use", "steady", "events"))
        a.step_source = "step ids (group_id)"
        k = int(np.flatnonzero(in_use == a.peak_in_use)[-1])
        a.peak_step = sid[k]
    else:
        df = _steps_by_window(ev, in_use, steps)
        if df is None:
            a.notes.append("memory per step unknown: the allocator events carry no step ids and fall outside "
                           "the profile's step windows (another clock, or no steps)")
            return
        a.step_source = "step windows"
        hit = df.filter(pl.col("peak_in_use") == a.peak_in_use)
        a.peak_step = int(hit["step"][-1]) if hit.height else None
    a.steps = df
    st = df.filter(pl.col("steady"))
    if st.height < MIN_GROWTH_STEPS:
        a.notes.append(f"growth per step unknown: {st.height} steady step(s) with allocator events "
                       f"(needs {MIN_GROWTH_STEPS})")
        return
    y = st["end_in_use"].to_numpy().astype(np.float64)
    x = np.arange(len(y), dtype=np.float64)
    slope = float(np.polyfit(x, y, 1)[0])
    a.growth_per_step = slope
    mean = float(y.mean())
    a.growth_pct = 100.0 * slope / mean if mean > 0 else None


def _steps_by_window(ev: pl.DataFrame, in_use: np.ndarray, steps: pl.DataFrame | None) -> pl.DataFrame | None:
    """Per step number of ``steps`` (the union of its devices' windows on the events' host),
    the in-use at its end and its peak; None when no event falls in any window."""
    if steps is None or steps.height == 0:
        return None
    host = ev["host"][0]
    t0, t1 = int(ev["time_ps"].min()), int(ev["time_ps"].max())
    # the steps that can hold an event: those overlapping the events' time range
    st, du = steps["start_ps"], steps["duration_ps"]
    if not st.null_count() and not du.null_count() and st.dtype == pl.Int64 and du.dtype == pl.Int64:
        a = st.to_numpy()
        with np.errstate(over="ignore"):  # int64 sums wrap, as polars' do
            near = (a <= t1) & (a + du.to_numpy() >= t0)
        keep = pl.Series(near)
    else:
        keep = steps.select((pl.col("start_ps") <= t1) & (pl.col("start_ps") + pl.col("duration_ps") >= t0))[:, 0]
    if "host" in steps.columns and not _all_equal(steps, "host", host):
        keep = keep & steps.select(pl.col("host") == host)[:, 0]
    # the steps themselves when every one can hold an event (no copy of the frame)
    s = steps if keep.null_count() == 0 and bool(keep.all()) else steps.filter(keep)
    if s.height == 0:
        return None
    win = _step_spans(s)
    t = ev["time_ps"].to_numpy()
    a, b = win["a"].to_numpy(), win["b"].to_numpy()
    lo = np.searchsorted(t, a, side="left")
    hi = np.searchsorted(t, b, side="right")
    # only the steps with allocator events in them: the in-use is constant across the others
    has = hi > lo
    if not has.any():
        return None
    win, lo, hi = win.filter(pl.Series(has)), lo[has], hi[has]
    # in use at a step's end: as of its last event at or before the end; the peak within it
    end_idx = hi - 1
    end_in_use = pl.Series(in_use[np.clip(end_idx, 0, len(in_use) - 1)], dtype=pl.Int64).set(
        pl.Series(end_idx < 0), None)
    # the max of in_use[lo:hi] per step (hi > lo for each): a reduceat over the pairs (lo, hi), a
    # sentinel after the last event so that hi may be its end
    bounds = np.empty(2 * len(lo), dtype=np.int64)
    bounds[0::2], bounds[1::2] = lo, hi
    peak = np.maximum.reduceat(np.append(in_use, in_use[:1]), bounds)[0::2]
    return pl.DataFrame({"step": win["step"], "end_in_use": end_in_use, "peak_in_use": pl.Series(peak, dtype=pl.Int64),
                         "steady": win["steady"], "events": hi - lo}).filter(pl.col("end_in_use").is_not_null())


def _all_equal(frame: pl.DataFrame, col: str, value) -> bool:
    """Whether every row of ``frame`` has ``value`` in ``col`` (a null is not equal): an
    expression, which reads a column that repeats one value without spelling it out per row."""
    return bool(frame.select(pl.col(col).eq_missing(value).all()).item())


def _step_spans(s: pl.DataFrame) -> pl.DataFrame:
    """Per step number of the steps ``s``: ``a`` (its earliest start), ``b`` (its latest end) and
    ``steady`` (every row in the window, nulls not counted), by ``a``. The rows themselves when
    each step has one row (step numbers ascending) and ``a`` ascends, else a group-by."""
    if s["step"].null_count() == 0 and s["start_ps"].null_count() == 0 and s["duration_ps"].null_count() == 0:
        step, a = s["step"].to_numpy(), s["start_ps"].to_numpy()
        if step.dtype.kind in "iu" and bool((step[1:] > step[:-1]).all()) and bool((a[1:] >= a[:-1]).all()):
            steady = (s["in_window"].fill_null(True) if "in_window" in s.columns
                      else pl.Series("steady", [True] * s.height, dtype=pl.Boolean))
            return pl.DataFrame({"step": s["step"], "a": s["start_ps"], "b": s["start_ps"] + s["duration_ps"],
                                 "steady": steady})
    return (s.group_by("step").agg(pl.col("start_ps").min().alias("a"),
                                   (pl.col("start_ps") + pl.col("duration_ps")).max().alias("b"),
                                   pl.col("in_window").all().alias("steady") if "in_window" in s.columns
                                   else pl.lit(True).alias("steady"))
            .sort("a"))


def profile_memory(prof, anatomy=None) -> MemoryReport:
    """:func:`memory` of a profile's ``memory`` frame, per step over ``anatomy``'s steps (a
    :class:`~traceview.analysis.steps.anatomy.StepAnatomy` or None)."""
    steps = anatomy.steps if anatomy is not None and anatomy.steps.height else None
    return memory(getattr(prof, "memory", None), steps, [d.name for d in getattr(prof, "devices", []) or []],
                  absent=getattr(prof, "memory_note", None))
