"""Step anatomy: where the time of one step goes, by op family, and how much is covered.

This is the study's "families sum to X of Y ms" line: find the steps, put every HLO op in the
step it started in, group the ops into families, and compare the families' op time with the
step's wall time; the difference is the gap (device idle: host, dispatch, synchronisation).

Steps (:func:`find_steps`), per (host, device), in this order:

1. **markers** — a frame of step markers (host, device, start_ps, duration_ps) when there is
   one: the readers give a TPU plane's ``Steps`` line and a GPU export's ``traceview steps``
   line as the profile's ``step_markers`` (not as op events), which :func:`profile_anatomy`
   uses by default; a caller may pass its own.
2. **dominant module** — otherwise each execution (``module_runs`` row) of the *dominant
   module* is a step: the module whose ops have the largest total self time (over all devices),
   among modules that have executions; ``module=`` overrides the choice. Executions are first
   put on the ops' clock (:func:`align_module_runs`: TPU ops timed on the device clock next to
   host-aligned ``XLA Modules`` events are re-anchored on the ops; ``StepAnatomy.notes`` says so).
3. **whole trace** — when there are no module runs: one step per device, from its first op's
   start to its last op's end.

Step windows for case 2 (the step *extent*, ``extent=``), with s_k the k-th execution's start on a device:

* ``"span"`` (default): from s_k to the latest end of any op or module run that starts in
  [s_k, s_{k+1}) on that device — the dominant program *plus* the programs that run after it
  in the same step (vLLM on TPU: ``jit_step_fun`` then ``jit_compute_logits_func`` and
  ``jit_sample``). The host time before the next step is ``gap_after_ps``, not step time; this
  is the study's split (an 11.9 ms step and an 85 µs gap between steps). For the last
  execution s_{k+1} is s_k + the longest earlier start-to-start period on that device (no
  limit when there is a single execution), so a trailing unrelated program is not swallowed.
  A window never reaches past the next step's start.
* ``"period"``: [s_k, s_{k+1}) — start to start, host gaps included (the last step as in
  span).
* ``"run"``: the execution itself, [s_k, s_k + duration), extended to the end of the latest op
  of the same program that starts before s_{k+1}, because GPU/CPU module runs are derived
  from one anchor op (:func:`traceview.model.from_xplane._derive_module_runs`) and are shorter than the
  execution.

An op belongs to the step whose window contains its start (its whole self time counts there);
ops with no start (pre-aggregated) or starting outside every window are reported as
``outside_ps``, not dropped silently.

Ops are grouped into op families by :mod:`traceview.analysis.ops.families`.

All times are integer ps (means are floats). Errors: bad rules raise
:class:`~traceview.errors.UsageError` with a one-line message; an unknown ``extent`` or
``module`` also raises UsageError. Empty inputs give empty frames and a zero coverage.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import polars as pl

from traceview.analysis import eventstats
from traceview.analysis.steps import stepstats
from traceview.analysis.ops.families import attr_families, rules_of
from traceview.errors import UsageError
from traceview.model.naming import EXPORT_STEPS_LINE
from traceview.model.optable import as_table, int_bincount
from traceview.model.runtable import RunTable, as_runs
from traceview.model.schema import MODULE_RUNS_SCHEMA
from traceview.model.timeline import enclosing
from traceview.read import hugearrays

try:  # optional C accelerator
    from traceview.analysis import _passes as _fast
except ImportError:  # pragma: no cover - exercised when the extension is absent
    _fast = None

EXTENTS = ("span", "period", "run")


STEPS_SCHEMA = {"host": pl.Utf8, "device": pl.Utf8, "step": pl.Int64, "module": pl.Utf8, "program_id": pl.UInt64,
                "start_ps": pl.Int64, "duration_ps": pl.Int64, "run_ps": pl.Int64, "gap_after_ps": pl.Int64,
                "ops": pl.Int64, "op_time_ps": pl.Int64, "busy_ps": pl.Int64, "idle_ps": pl.Int64}


class _Placed:
    """The events of an OpTable as numpy arrays for timeline work: ``devs`` (list of
    (host, device)), per event ``dev`` (int16/int32 index into ``devs``), ``placed`` (has a
    start), ``start``, ``dur`` (ps; start 0 where not placed), ``count``, ``self_ps``; ends
    through :meth:`end` and program ids through :meth:`pid` / :meth:`has_pid` (looked up per
    description, not stored per event).

    A device's placed events are reached through :meth:`sel`: a ``slice`` of the event arrays
    when they are one contiguous, time-ordered run (the xplane reader writes each TPU plane's
    ops in start order, one plane after another), so that ``start[sel]`` is a view and not a
    gather; otherwise the index array of :meth:`on`."""

    def __init__(self, table):
        ev = table.events
        attrs = table.attrs
        dev_tab = attrs.select("host", "device").unique(maintain_order=True).with_row_index("_d")
        a = attrs.join(dev_tab, on=["host", "device"], how="left", maintain_order="left")
        self.devs = [(h, d) for _, h, d in dev_tab.iter_rows()]
        self.dev_index = {k: i for i, k in enumerate(self.devs)}
        self.attr = ev["attr"].to_numpy()
        dt = np.int16 if len(self.devs) < (1 << 15) else np.int32  # 2 bytes per event on any real pod
        self.dev = hugearrays.take(a["_d"].to_numpy().astype(dt), self.attr) if len(self.attr) else np.zeros(0, dt)
        self._pid_lut = a["program_id"].fill_null(0).to_numpy().astype(np.uint64)
        self._has_lut = a["program_id"].is_not_null().to_numpy()
        self._attr_dev = a["_d"].to_numpy()  # device index per description
        self._table = table
        self._rows: np.ndarray | None = None  # events per description, on first use
        st = ev["start_ps"]
        self.placed = st.is_not_null().to_numpy()
        self.start = st.fill_null(0).to_numpy() if st.null_count() else st.to_numpy()
        self.start = np.ascontiguousarray(self.start)
        self.dur = np.ascontiguousarray(ev["duration_ps"].to_numpy())  # (views when single-chunk)
        self.count = np.ascontiguousarray(ev["count"].to_numpy())
        self.self_ps = np.ascontiguousarray(ev["self_ps"].to_numpy())
        self.n = len(self.attr)
        self._on: dict = {}
        self._spans = self._find_spans()

    def _find_spans(self) -> dict:
        """{device index: slice} when every event is placed, each device's events are one
        contiguous run and each run is in start order; else {}."""
        n = self.n
        if n == 0 or not self.placed.all():
            return {}
        d = self.dev
        cuts = np.flatnonzero(d[1:] != d[:-1]) + 1
        bounds = [0, *cuts.tolist(), n]
        order = d[bounds[:-1]].tolist()
        if len(set(order)) != len(order):
            return {}
        down = np.flatnonzero(self.start[1:] < self.start[:-1]) + 1  # where the start order breaks
        if len(down) and not np.isin(down, cuts).all():
            return {}
        return {dv: slice(a, b) for dv, a, b in zip(order, bounds[:-1], bounds[1:])}

    def sel(self, host: str, device: str):
        """The placed events of one device in time order: a slice (see the class doc) or an
        index array (:meth:`on`)."""
        i = self.dev_index.get((host, device))
        hit = self._spans.get(i) if i is not None else None
        return hit if hit is not None else self.on(host, device)

    def end(self, idx) -> np.ndarray:
        """End (start + duration, ps) of the events ``idx`` (a slice or an index array;
        computed, not stored: 8 bytes per event saved)."""
        return self.start[idx] + self.dur[idx]

    def pid(self, idx) -> np.ndarray:
        """program_id (uint64, 0 where unknown) of the events ``idx``."""
        return self._pid_lut[self.attr[idx]]

    def has_pid(self, idx) -> np.ndarray:
        """Whether the events ``idx`` have a program_id (bool)."""
        return self._has_lut[self.attr[idx]]

    def events_per_attr(self) -> np.ndarray:
        """Number of events per description (int64, indexed by attr id; from the table's
        cached collapse)."""
        if self._rows is None:
            col = self._table.collapse()
            rows = np.zeros(self._table.attrs.height, dtype=np.int64)
            rows[col["attr"].to_numpy().astype(np.int64)] = col["rows"].to_numpy()
            self._rows = rows
        return self._rows

    def of_program(self, pid: int) -> np.ndarray:
        """Per description (attr id): whether its program_id is ``pid`` (bool lookup table)."""
        return self._has_lut & (self._pid_lut == np.uint64(pid))

    def on(self, host: str, device: str, need_pid: bool = False) -> np.ndarray:
        """Indices of the placed events of one device, in time order (stable); cached."""
        if need_pid:  # not cached: used once per device
            idx = self.on(host, device)
            return idx[self.has_pid(idx)]
        key = (host, device)
        hit = self._on.get(key)
        if hit is not None:
            return hit
        i = self.dev_index.get(key)
        if i is None:
            return np.zeros(0, dtype=np.int64)
        span = self._spans.get(i)
        if span is not None:
            idx = np.arange(span.start, span.stop, dtype=np.int32 if self.n < (1 << 31) else np.int64)
            self._on[key] = idx
            return idx
        idx = np.flatnonzero(self.placed & (self.dev == i))
        if self.n < (1 << 31):
            idx = idx.astype(np.int32)  # half the memory of int64 indices
        st = self.start[idx]
        if len(st) > 1 and not (st[1:] >= st[:-1]).all():
            idx = idx[np.argsort(st, kind="stable")]
        del st
        self._on[key] = idx
        return idx


def _placed(ops) -> tuple:
    table = as_table(ops)
    return table, _Placed(table)


#: fewest op events per device, on average, for the per-device step work to go on threads: below,
#: a device's work is mostly Python that holds the GIL, and the threads only contend (a merged
#: profile of thousands of ranks)
THREAD_MIN_EVENTS = 2_000
#: below this many op events the per-device step work runs on threads (numpy, polars and the
#: C pass release the GIL); above it, one device at a time bounds the temporaries
PARALLEL_MAX_EVENTS = 8_000_000


def _per_device(fn, items: list, pe: "_Placed") -> list:
    """``[fn(item) for item in items]``, on up to
    :func:`~traceview.read.batch.threads_available` threads when there are several devices
    and fewer than :data:`PARALLEL_MAX_EVENTS` events. Order is kept."""
    from traceview.read.batch import threads_available

    workers = min(len(items), threads_available())
    if workers < 2 or pe.n >= PARALLEL_MAX_EVENTS or pe.n < len(items) * THREAD_MIN_EVENTS:
        return [fn(it) for it in items]
    from concurrent.futures import ThreadPoolExecutor

    for host, device in {k for k, _ in items} if items and isinstance(items[0][0], tuple) else ():
        pe.sel(host, device)  # fill the index cache before the threads share it
    with ThreadPoolExecutor(max_workers=workers) as ex:
        return list(ex.map(fn, items))


def dominant_module(ops, module_runs) -> str | None:
    """The module with the largest total op self time among modules with executions in
    ``module_runs`` (a frame or :class:`~traceview.model.runtable.RunTable`; ties: name
    order); None when there is none."""
    rt = as_runs(module_runs)
    return _dominant(as_table(ops), _run_modules(rt, [rt.runs["key"]]))


def _run_modules(rt: RunTable, keys: list, used: np.ndarray | None = None) -> set:
    """The modules of ``rt``'s programs whose key is in one of the ``keys`` series (``used``:
    :func:`_used_keys` of them, when the caller has it)."""
    used = _used_keys(rt, keys) if used is None else used
    return set(rt.keys["module"].filter(pl.Series(used)).drop_nulls().unique().to_list())


def _used_keys(rt: RunTable, keys: list, counts: list = ()) -> np.ndarray:
    """Per program key of ``rt``, whether it is in one of the ``keys`` series or has a
    non-zero entry in one of the ``counts`` (bincounts of such series) (bool)."""
    used = np.zeros(rt.keys.height, dtype=bool)
    for k in keys:
        if len(k):
            used |= np.bincount(k.to_numpy(), minlength=rt.keys.height)[:rt.keys.height] > 0
    for c in counts:
        used |= c[:rt.keys.height] > 0
    return used


def _dominant(table, have: set) -> str | None:
    """:func:`dominant_module` among the modules ``have`` ("" left out)."""
    have = have - {""}
    if table.height == 0 or not have:
        return None
    t = (table.collapse().filter(pl.col("module").is_in(list(have)))
         .group_by("module").agg(pl.col("self_ps").sum().alias("t"))
         .sort(["t", "module"], descending=[True, False]))
    return t["module"][0] if t.height else None


def align_module_runs(ops, module_runs, _placed_events: "_Placed | None" = None) -> tuple[pl.DataFrame, dict]:
    """Module runs on the ops' clock, per (host, device), for step windows.

    TPU ops can be timed on the device clock (``device_offset_ps``) while the ``XLA Modules``
    events of older traces are host-aligned, and the two clocks drift apart over a trace, so the
    host-aligned windows do not hold their ops. Method: for each
    program whose op count on a device is a whole multiple m of its executions there, the
    k-th execution's ops are ops k·m .. k·m+m-1 in time order (its *chunk*). When some chunk's
    first op does not start inside its execution, the device's runs are taken from the ops:
    each such execution becomes [first op start, latest op end] of its chunk, and executions of
    other programs move by the median (first op start − execution start). When every chunk
    starts inside its execution (vLLM JSON, GPU/CPU runs derived from ops) nothing changes.
    ``module_runs``: a frame (:data:`~traceview.model.schema.MODULE_RUNS_SCHEMA`) or a
    :class:`~traceview.model.runtable.RunTable`. Returns (runs, {(host, device): median shift
    in ps}) for the devices rebuilt, runs as a MODULE_RUNS_SCHEMA frame. Never raises.
    """
    rt = as_runs(module_runs)
    fixed, parts, whole = _align(ops, rt, _placed_events)
    if whole or not parts:
        return rt.frame(), fixed
    keys = rt.keys.drop("key")
    wide = [pl.concat([keys[r["key"]], r.drop("key")], how="horizontal").select(list(MODULE_RUNS_SCHEMA))
            for _, r in parts]
    return pl.concat(wide, how="vertical"), fixed


def _device_parts(rt: RunTable) -> list:
    """[((host, device), that device's runs in row order)], devices in order of first
    appearance; each device's runs as rows of ``rt.runs`` (key, start_ps, duration_ps):
    slices (no copy) when each device's rows are one run of consecutive rows, else gathered."""
    if rt.height == 0:
        return []
    keys = rt.keys
    g = keys.select("host", "device").with_row_index("i").group_by(["host", "device"], maintain_order=True).agg("i")
    if g.height == 1:  # one device: its runs are every row
        return [(tuple(g.row(0)[:2]), rt.runs)]
    hd_of_key = np.zeros(keys.height, dtype=np.int64)
    hd_of_key[g["i"].explode().to_numpy()] = np.repeat(np.arange(g.height), g["i"].list.len().to_numpy())
    kc = rt.runs["key"].to_numpy()
    runs = rt.runs
    hd = hd_of_key[kc]
    cuts = np.flatnonzero(hd[1:] != hd[:-1]) + 1
    firsts = np.r_[0, cuts]
    names = list(g.select("host", "device").iter_rows())
    seq = hd[firsts]
    if len(np.unique(seq)) == len(seq):  # each device one block of consecutive rows
        ends = np.r_[cuts, len(hd)]
        return [(names[k], runs.slice(a, b - a)) for k, a, b in zip(seq.tolist(), firsts.tolist(), ends.tolist())]
    order = np.argsort(hd, kind="stable")
    bounds = np.searchsorted(hd[order], np.arange(g.height + 1))
    uniq, first_at = np.unique(hd, return_index=True)
    return [(names[c], runs[pl.Series(order[bounds[c]:bounds[c + 1]])]) for c in uniq[np.argsort(first_at)].tolist()]


def _program_rows(key: np.ndarray, pid_of_key: list) -> dict:
    """{program_id: indices (ascending) of the rows with that program}, of rows coded by
    ``key`` (the programs' codes, ``pid_of_key[k]`` the program_id of code k, None for
    none): one stable sort of the codes (radix when they fit 16 bits); rows without a
    program are left out."""
    n = len(key)
    if n == 0:
        return {}
    order = np.argsort(key.astype(np.uint16) if len(pid_of_key) <= 1 << 16 else key, kind="stable")
    ks = key[order]
    cuts = (np.flatnonzero(ks[1:] != ks[:-1]) + 1).tolist()
    out: dict = {}
    for a, b in zip([0] + cuts, cuts + [n]):
        p = pid_of_key[int(ks[a])]
        if p is None:
            continue
        idx = order[a:b]
        out[p] = idx if p not in out else np.sort(np.concatenate([out[p], idx]))
    return out


def _align(ops, module_runs: RunTable, _placed_events: "_Placed | None" = None,
           key_counts: dict | None = None) -> tuple[dict, list, bool]:
    """:func:`align_module_runs` as ({(host, device): shift}, its runs per device:
    [((host, device), runs in start order: :func:`_device_parts` frames)], whether the runs
    are ``module_runs`` as they are (no op placed: devices in row order, nothing dropped)),
    devices in order of first appearance in ``module_runs``. ``key_counts``: filled with
    {(host, device): runs per key of that device's runs (int64, indexed by key)} for the
    devices whose runs were counted on the way."""
    fixed: dict = {}
    if module_runs.height == 0:
        return fixed, [], True
    if _placed_events is None:
        table, pe = _placed(ops)
        if table.height == 0:
            return fixed, _device_parts(module_runs), True
    else:
        pe = _placed_events
    if pe.n == 0:
        return fixed, _device_parts(module_runs), True
    pid_of_key = module_runs.keys["program_id"].to_list()

    def one(item):
        (host, device), r = item
        if r["start_ps"].null_count():
            r = r.filter(pl.col("start_ps").is_not_null())  # a run without a start has no place
        r = _in_start_order(r)
        dsel = pe.sel(host, device)
        o_start, o_dur, o_attr = pe.start[dsel], pe.dur[dsel], pe.attr[dsel]  # views for a slice
        r_start, r_dur = r["start_ps"].to_numpy(), r["duration_ps"].to_numpy()  # read-only views
        chunks: dict = {}
        stand = True  # whether every chunk starts inside its execution (then the runs stand)
        key = r["key"].to_numpy()
        c_chunks = None
        if isinstance(dsel, slice) and _fast is not None:
            # the chunks in one C pass and every run checked in another: no sort of the runs by
            # program when they all stand (the usual case); else the general path below
            counts = np.bincount(key, minlength=len(pid_of_key)) if len(key) else None
            if key_counts is not None and counts is not None:
                key_counts[(host, device)] = counts  # the same keys as the runs returned, in any order
            raw = _c_chunk_plan(pe, host, device, dsel, _runs_of(key, pid_of_key, counts))
            if raw is not None:
                c_chunks = _chunks_of(raw)
                if r_dur.dtype == np.int64 and _fast.chunks_inside(
                        np.ascontiguousarray(key, dtype=np.uint32), np.ascontiguousarray(r_start),
                        np.ascontiguousarray(r_dur), _plan_of_key(raw[0], pid_of_key, np.unique(key)),
                        np.array([k for _, k, _ in raw[0]], dtype=np.int64), raw[1], raw[2]):
                    return r, None
        by_prog = _program_rows(key, pid_of_key)
        for pid, ridx in by_prog.items():
            if c_chunks is not None:
                if pid not in c_chunks:
                    continue
                heads, ends = c_chunks[pid]
            else:
                lut = pe.of_program(pid)
                if not lut.any():
                    continue
                sel = lut[o_attr]
                st = o_start[sel]
                en = st + o_dur[sel]
                if len(st) == 0 or len(st) % len(ridx):
                    continue
                m = len(st) // len(ridx)
                heads = st[::m]
                ends = en.reshape(len(ridx), m).max(axis=1)
            chunks[pid] = (ridx, heads, ends)
            stand = stand and _inside(heads - r_start[ridx], r_dur[ridx])
        if stand:
            return r, None
        # the offsets of the runs with a chunk (their order does not matter to the median)
        allo = np.concatenate([heads - r_start[ridx] for ridx, heads, _ in chunks.values()]) if chunks else np.zeros(0)
        if allo.size:
            shift = int(np.median(allo))
            new_start, new_dur = r_start + shift, r_dur.copy()
            for ridx, heads, ends in chunks.values():
                new_start[ridx] = heads
                new_dur[ridx] = ends - heads
            r = r.with_columns(pl.Series("start_ps", new_start, dtype=pl.Int64),
                               pl.Series("duration_ps", new_dur, dtype=pl.Int64)).sort("start_ps")
            return r, ((host, device), shift)
        return r, None

    parts = []
    items = _device_parts(module_runs)
    for (key, _), (r, fix) in zip(items, _per_device(one, items, pe)):
        parts.append((key, r))
        if fix is not None:
            fixed[fix[0]] = fix[1]
    return fixed, parts, False


def _inside(off: np.ndarray, dur: np.ndarray) -> bool:
    """Whether every offset ``off`` (ps, a chunk's first op start minus its execution's start)
    lies inside its execution: 0 <= off < max(dur, 1); a null duration (float NaN) is never
    inside."""
    if dur.dtype == np.int64:  # without an array of bounds (unsigned: off < 0 is past any dur)
        ok = (off.view(np.uint64) < dur.view(np.uint64)) & (dur > 0)
        ok |= off == 0
    else:
        ok = (off >= 0) & (off < np.maximum(dur, 1))
    return bool(ok.all())


def _runs_of(key: np.ndarray, pid_of_key: list, counts: np.ndarray | None = None) -> dict:
    """{program_id: number of the rows coded ``key`` with that program} (``pid_of_key[k]``: the
    program_id of code k, None for none, left out), as :func:`_program_rows` groups them;
    ``counts``: ``np.bincount(key, minlength=len(pid_of_key))`` when the caller has it."""
    out: dict = {}
    if len(key) == 0:
        return out
    if counts is None:
        counts = np.bincount(key, minlength=len(pid_of_key))
    nz = np.flatnonzero(counts)  # the device's own keys: per device, not per key of every device
    for k, c in zip(nz.tolist(), counts[nz].tolist()):
        p = pid_of_key[k] if k < len(pid_of_key) else None
        if p is not None:
            out[p] = out.get(p, 0) + c
    return out


def _plan_of_key(plan: list, pid_of_key: list, keys: np.ndarray) -> np.ndarray:
    """Per run key, the index in ``plan`` (:func:`_c_chunk_plan`) of its program, -1 for none
    (int32), set for the codes ``keys`` (the runs' own; the others -1)."""
    at = {pid: j for j, (pid, _, _) in enumerate(plan)}
    out = np.full(len(pid_of_key), -1, dtype=np.int32)
    for k in keys.tolist():
        p = pid_of_key[k]
        if p is not None:
            out[k] = at.get(p, -1)
    return out


def _chunks_of(raw: tuple) -> dict:
    """:func:`_c_chunks`'s dict of a :func:`_c_chunk_plan` result."""
    plan, offs, heads, ends = raw
    return {pid: (heads[offs[j]:offs[j] + k], ends[offs[j]:offs[j] + k]) for j, (pid, k, _) in enumerate(plan)}


def _c_chunks(pe: _Placed, host: str, device: str, dsel: slice, runs_of: dict) -> dict | None:
    """{program_id: (heads, ends)} for one device whose events are the slice ``dsel``, as
    align_module_runs computes them per program (the k-th execution's chunk of m ops: its
    first op's start and its latest op end), in one C pass (``chunk_heads``); ``runs_of``:
    {program_id: executions on the device}. Programs whose op count on the device is not a
    whole multiple of their executions are left out. None without the C accelerator or when
    the pass refuses (the caller then uses numpy)."""
    raw = _c_chunk_plan(pe, host, device, dsel, runs_of)
    return None if raw is None else _chunks_of(raw)


def _c_chunk_plan(pe: _Placed, host: str, device: str, dsel: slice, runs_of: dict) -> tuple | None:
    """:func:`_c_chunks` as (plan: [(program_id, executions, m)], offs (int64: where each
    program's chunks start), heads, ends), chunks of plan entry j at offs[j]:offs[j] +
    executions; None as :func:`_c_chunks`."""
    if _fast is None:
        return None
    d = pe.dev_index[(host, device)]
    rows = pe.events_per_attr()
    on_dev = pe._attr_dev == d
    prog = np.full(len(rows), -1, dtype=np.int32)
    plan = []  # (pid, executions, m)
    for pid, runs_n in runs_of.items():
        lut = pe.of_program(pid) & on_dev
        n_ops = int(rows[lut].sum())
        if n_ops == 0 or runs_n == 0 or n_ops % runs_n:
            continue
        prog[lut] = len(plan)
        plan.append((pid, runs_n, n_ops // runs_n))
    offs = np.cumsum([0] + [k for _, k, _ in plan]).astype(np.int64)
    heads = np.empty(int(offs[-1]), dtype=np.int64)
    ends = np.empty(int(offs[-1]), dtype=np.int64)
    if not plan:
        return plan, offs[:-1], heads, ends
    ok = _fast.chunk_heads(pe.attr[dsel], pe.start[dsel], pe.dur[dsel], prog,
                           np.array([m for _, _, m in plan], dtype=np.int64), offs[:-1], heads, ends)
    if not ok:
        return None
    return plan, offs[:-1], heads, ends


def _step_windows(table, pe: _Placed, module_runs: pl.DataFrame | RunTable, markers: pl.DataFrame | None,
                  module: str | None, extent: str) -> tuple[pl.DataFrame, str, str | None, list[str], list | None]:
    """Per (host, device) step windows: host, device, module, program_id, start_ps, end_ps,
    run_ps, next_ps (start of the next step or null); the method; the module; notes; the
    windows' :func:`_device_blocks` when known without a scan (None: not computed)."""
    rows: list[dict] = []
    placed_devs = sorted(set(table.collapse().filter(pl.col("first_ps").is_not_null())
                             .select("host", "device").iter_rows())) if pe.n else []
    if markers is not None and markers.height:
        for r in markers.sort("start_ps").iter_rows(named=True):
            host = r.get("host") or ""
            targets = [(host, r["device"])] if r.get("device") else [(h, d) for h, d in placed_devs if h == host]
            for h, d in targets:
                rows.append({"host": h, "device": d, "module": "", "program_id": None, "start_ps": r["start_ps"],
                             "end_ps": r["start_ps"] + r["duration_ps"], "run_ps": None,
                             "step_num": r.get("step_num") if r.get("device") else None})
        return (_with_next(pl.DataFrame(rows, schema=_WIN_SCHEMA | {"step_num": pl.Int64})), "markers", None, [],
                None)
    module_runs = as_runs(module_runs)
    if module_runs.height and table.height:
        counted: dict = {}
        fixed, parts, as_given = _align(table, module_runs, pe, counted)
        notes = [f"{d}: module runs rebuilt from the ops (XLA Modules and XLA Ops on different clocks, "
                 f"median offset {v / 1e6:+.1f} µs)" for (_, d), v in sorted(fixed.items())]
        used = _used_keys(module_runs, [r["key"] for k, r in parts if k not in counted],
                          [counted[k] for k, _ in parts if k in counted])
        have = _run_modules(module_runs, [], used)
        mod = module if module is not None else _dominant(table, have)
        if module is not None and module not in have:
            raise UsageError(f"module {module!r} has no executions in this trace")
        if mod is not None:
            of_mod = (module_runs.keys["module"] == mod).fill_null(False).to_numpy()
            pid = module_runs.keys["program_id"]
            runs = _module_parts(parts, of_mod, pid)
            # the programs of the module's runs: of the keys used, those of the module (no pass over the runs)
            progs = sorted(set(pid.filter(pl.Series(used & of_mod)).to_list()) - {None})
            if len(progs) > 1:  # one name, several compiled programs (shape buckets, a sweep)
                shown = ", ".join(str(p) for p in progs[:8]) + (", ..." if len(progs) > 8 else "")
                notes.append(f"{mod} is {len(progs)} compiled programs (program_id {shown}): its steps mix them "
                             f"(shape buckets or a sweep), so the step distribution is over different programs")
            win, blocks = _module_windows(pe, parts, runs, extent, mod, pid, ordered=not as_given)
            return win, "module", mod, notes, blocks
    # whole trace
    if not pe.n or not pe.placed.any():
        return pl.DataFrame(schema=_WIN_SCHEMA | {"next_ps": pl.Int64}), "trace", None, [], []
    for h, d in placed_devs:
        idx = pe.sel(h, d)
        rows.append({"host": h, "device": d, "module": "", "program_id": None,
                     "start_ps": int(pe.start[idx].min()), "end_ps": int(pe.end(idx).max()), "run_ps": None})
    return _with_next(pl.DataFrame(rows, schema=_WIN_SCHEMA)), "trace", None, [], None


_WIN_SCHEMA = {"host": pl.Utf8, "device": pl.Utf8, "module": pl.Utf8, "program_id": pl.UInt64,
               "start_ps": pl.Int64, "end_ps": pl.Int64, "run_ps": pl.Int64}


def _with_next(w: pl.DataFrame) -> pl.DataFrame:
    return w.sort(["host", "device", "start_ps"]).with_columns(
        pl.col("start_ps").shift(-1).over(["host", "device"]).alias("next_ps"))


_I64_MIN = np.iinfo(np.int64).min


def _range_max(values: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """max(values[lo[k]:hi[k]]) per k (int64), ``_I64_MIN`` for an empty range. Ordered,
    disjoint ranges (the windows of one device) take one ``maximum.reduceat`` pass; others a
    sparse table (O(n log n) build, O(1) per query)."""
    out = np.full(len(lo), _I64_MIN, dtype=np.int64)
    n = len(values)
    ok = hi > lo
    if n == 0 or not ok.any():
        return out
    a, b = lo[ok], hi[ok]
    if (a[1:] >= b[:-1]).all():
        # ranges in order and disjoint (consecutive windows): one reduceat pass, O(n)
        cuts = np.empty(2 * len(a), dtype=np.int64)
        cuts[0::2], cuts[1::2] = a, b
        vals = np.append(values.astype(np.int64, copy=False), np.int64(_I64_MIN))  # hi may equal n
        out[ok] = np.maximum.reduceat(vals, cuts)[0::2]
        return out
    levels = [values.astype(np.int64)]
    j = 1
    while (1 << j) <= n:
        prev = levels[-1]
        half = 1 << (j - 1)
        levels.append(np.maximum(prev[:-half], prev[half:]))
        j += 1
    length = (hi - lo)[ok]
    k = np.floor(np.log2(length)).astype(np.int64)
    # guard against floating-point log2 rounding at powers of two
    k = np.where((1 << (k + 1)) <= length, k + 1, k)
    k = np.where((1 << k) > length, k - 1, k)
    a, b = lo[ok], hi[ok]
    res = np.empty(len(a), dtype=np.int64)
    for lvl in np.unique(k).tolist():
        m = k == lvl
        tab = levels[lvl]
        res[m] = np.maximum(tab[a[m]], tab[b[m] - (1 << lvl)])
    out[ok] = res
    return out


def _module_parts(parts: list, of_mod: np.ndarray, pid: pl.Series) -> list:
    """The runs of ``parts`` ([((host, device), runs)]) whose key is the module's (``of_mod``,
    bool per key), with their ``program_id`` (``pid`` per key), as [((host, device), runs)]
    for the devices that ran it, in ``parts``' order: one filter and one gather over every
    device's runs stacked, not a frame operation per device (a merged profile of thousands of
    device planes)."""
    if not parts:
        return []
    frames = [r for _, r in parts]
    heights = np.array([r.height for r in frames], dtype=np.int64)
    part = np.repeat(np.arange(len(frames), dtype=np.int64), heights)
    keep = of_mod[pl.concat([r["key"] for r in frames]).to_numpy().astype(np.int64)] if heights.sum() else \
        np.zeros(0, dtype=bool)
    if not keep.any():
        return []
    at = np.flatnonzero(keep)
    rows = pl.concat(frames).gather(pl.Series(at))
    rows = rows.with_columns(pid.gather(rows["key"]).alias("program_id"))
    part = part[at]
    cuts = np.flatnonzero(np.diff(part)) + 1  # part is sorted: each device's rows one slice
    starts = np.concatenate([[0], cuts])
    ends = np.concatenate([cuts, [len(part)]])
    return [(parts[int(part[a])][0], rows.slice(int(a), int(b - a))) for a, b in zip(starts, ends)]


def _module_windows(pe: _Placed, all_runs: list, runs: list, extent: str, module: str,
                    pid: pl.Series, ordered: bool = False) -> tuple[pl.DataFrame, list]:
    """Windows for the dominant module's (``module``) executions ``runs``, and their :func:`_device_blocks`;
    the activity on a device is every placed op and every module run of ``all_runs`` (start,
    end, program: ``pid`` per key). Both are [((host, device), that device's runs; ``runs``
    with their program_id)]. The two kinds of
    activity are searched separately (each is already in time order) and their maxima
    combined, which is the maximum over their union. ``ordered``: both lists' runs are
    already in start order (:func:`_align` sorted them), so they are not checked again."""
    def one(item):
        (host, device), r = item
        idx = pe.sel(host, device)
        ar = ar_parts.get((host, device))
        ar = r.clear().drop("program_id") if ar is None else ar if ordered else _in_start_order(ar)
        ar_start = ar["start_ps"].to_numpy()
        sources = [  # (starts, ends, has program, program) per kind of activity, time-ordered
            (pe.start[idx], None, lambda i=idx: pe.has_pid(i), lambda i=idx: pe.pid(i)),
            (ar_start, ar_start + ar["duration_ps"].to_numpy(), lambda a=ar: pid_has[a["key"].to_numpy()],
             lambda a=ar: pid_val[a["key"].to_numpy()]),
        ]
        starts = r["start_ps"].to_numpy().astype(np.int64)
        ends = starts + r["duration_ps"].to_numpy()
        r_has = r["program_id"].is_not_null().to_numpy()
        progs = r["program_id"].fill_null(0).to_numpy().astype(np.uint64)
        n = len(starts)
        longest = int(np.diff(starts).max()) if n > 1 else None
        nxt = np.empty(n, dtype=np.int64)
        nxt[:-1] = starts[1:]
        if longest is not None:
            nxt[-1] = min(int(starts[-1]) + longest, np.iinfo(np.int64).max)  # no int64 wrap
        end = ends.copy()
        if extent == "span" and _fast is not None:
            # one C merge pass per kind of activity (ends computed from durations on the fly)
            nxt_c = nxt.copy()
            if longest is None:
                nxt_c[-1] = np.iinfo(np.int64).max  # a single execution: no limit
            ok = True
            for a_start, a_len, is_dur in ((pe.start[idx], pe.dur[idx], True),
                                           (ar_start, ar["duration_ps"].to_numpy(), True)):
                ok = ok and _fast.window_max(np.ascontiguousarray(a_start, dtype=np.int64),
                                             np.ascontiguousarray(a_len, dtype=np.int64), is_dur, starts, nxt_c, end)
            if ok:
                sources = []
            else:
                end = ends.copy()
        for a_start, a_end, a_has_f, a_prog_f in sources:
            if a_end is None:
                a_end = pe.end(idx)
            lo = np.searchsorted(a_start, starts, side="left")
            hi = (np.searchsorted(a_start, nxt, side="left") if longest is not None
                  else np.concatenate([np.searchsorted(a_start, nxt[:-1], side="left"), [len(a_start)]]))
            if extent == "run":
                a_has, a_prog = a_has_f(), a_prog_f()
                for pid, has in {(int(p), bool(h)) for p, h in zip(progs.tolist(), r_has.tolist())}:
                    m = (r_has == has) & (progs == np.uint64(pid))
                    same = (a_has & (a_prog == np.uint64(pid))) if has else ~a_has
                    masked = np.where(same, a_end, _I64_MIN)
                    end[m] = np.maximum(end[m], _range_max(masked, lo[m], hi[m]))
            elif extent == "period":  # start to start; the last step as in span
                end[-1] = max(end[-1], _range_max(a_end, lo[-1:], hi[-1:])[0])
            else:
                end = np.maximum(end, _range_max(a_end, lo, hi))
        if extent == "period":
            end[:-1] = starts[1:]
        end[:-1] = np.minimum(end[:-1], starts[1:])  # never past the next step's start
        end = np.maximum(end, starts)
        return r["program_id"], starts, end, ends - starts

    # devices in (host, device) order, each in time order: the order _with_next gives, no sort
    ar_parts = dict(all_runs)
    pid_has, pid_val = pid.is_not_null().to_numpy(), pid.fill_null(0).to_numpy().astype(np.uint64)
    groups = sorted(((k, r if ordered else _in_start_order(r)) for k, r in runs), key=lambda g: g[0])
    got = [(k, w) for (k, _), w in zip(groups, _per_device(one, groups, pe)) if len(w[1])]
    schema = _WIN_SCHEMA | {"next_ps": pl.Int64}
    if not got:
        return pl.DataFrame(schema=schema), []
    # one frame of every device's arrays (a frame per device cost ~2 ms: seconds over a merged
    # profile's thousands of ranks)
    lens = np.array([len(w[1]) for _, w in got], dtype=np.int64)
    cut = np.cumsum(lens)
    blocks = [(h, d, b - n, b) for ((h, d), _), b, n in zip(got, cut.tolist(), lens.tolist())]
    starts = np.concatenate([w[1] for _, w in got])
    nxt = np.empty(len(starts), dtype=np.int64)  # the device's next step's start; null after its last
    nxt[:-1] = starts[1:]
    keys = pl.DataFrame({"host": [h for (h, _), _ in got], "device": [d for (_, d), _ in got]},
                        schema={"host": pl.Utf8, "device": pl.Utf8})
    win = keys[pl.Series(np.repeat(np.arange(len(got)), lens))].with_columns(
        pl.lit(module, dtype=pl.Utf8).alias("module"),
        pl.concat([w[0].cast(pl.UInt64) for _, w in got]).alias("program_id"),
        pl.Series("start_ps", starts, dtype=pl.Int64),
        pl.Series("end_ps", np.concatenate([w[2] for _, w in got]), dtype=pl.Int64),
        pl.Series("run_ps", np.concatenate([w[3] for _, w in got]), dtype=pl.Int64),
        pl.Series("next_ps", nxt, dtype=pl.Int64).scatter(cut - 1, None))
    return win.select(list(schema)).cast(schema), blocks


def _in_start_order(runs: pl.DataFrame) -> pl.DataFrame:
    """``runs`` sorted by start_ps (stable), without sorting when they already are (module
    runs of one device after :func:`align_module_runs`)."""
    st = runs["start_ps"]
    if st.null_count() == 0:
        a = st.to_numpy()
        if len(a) < 2 or (a[1:] >= a[:-1]).all():
            return runs
    return runs.sort("start_ps", maintain_order=True)


def _busy(starts: np.ndarray, ends: np.ndarray, lo: int, hi: int) -> int:
    """Length of the union of [starts, ends) clipped to [lo, hi), ps: the span from the first
    start to the last end minus the gaps where an interval starts after every earlier one
    ended. (Reference form of the vectorized computation in :func:`_steps`.)"""
    if len(starts) == 0:
        return 0
    s = np.clip(starts, lo, hi)
    e = np.clip(ends, lo, hi)
    order = np.argsort(s, kind="stable")
    s, e = s[order], np.maximum.accumulate(e[order])
    gaps = np.maximum(s[1:] - e[:-1], 0).sum() if len(s) > 1 else 0
    return int(max(int(e[-1]) - int(s[0]) - int(gaps), 0))


def _assign(pe: _Placed, win: pl.DataFrame) -> np.ndarray:
    """Per event, the row of ``win`` whose window holds its start, -1 when none (int64)."""
    idx = np.full(pe.n, -1, dtype=np.int64)
    if win.height and pe.n:
        w = win.with_row_index("_w")
        for (host, device), wd in w.group_by(["host", "device"]):
            od = pe.on(host, device)
            if len(od) == 0:
                continue
            st = pe.start[od]
            enc = enclosing(st, st, wd["start_ps"].to_numpy(), wd["end_ps"].to_numpy())
            wi = wd["_w"].to_numpy().astype(np.int64)
            hit = enc >= 0
            idx[od[hit]] = wi[enc[hit]]
    return idx


def _busy_per_step(pe: _Placed, step_row: np.ndarray, win: pl.DataFrame) -> np.ndarray:
    """Per window row: length of the union of its ops' [start, end) clipped to the window
    (ps), as :func:`_busy` computes it for one window, for all windows of a device at once.

    An op belongs to the window holding its start, so on one device, in start order, the ops
    come window by window; when the device's windows are disjoint (module and whole-trace
    windows always are) a running maximum of the clipped ends never carries a window's
    maximum into the next (it is at most that window's end, at most the next one's start),
    and each window's union is its span minus the gaps inside it. Overlapping windows (step
    markers can overlap) are done one window at a time."""
    busy = np.zeros(win.height, dtype=np.int64)
    if win.height == 0 or not (step_row >= 0).any():
        return busy
    w_lo = win["start_ps"].to_numpy()
    w_hi = win["end_ps"].to_numpy()
    rows = win.with_row_index("_w").group_by(["host", "device"], maintain_order=True).agg(pl.col("_w"))
    for host, device, wrows in rows.iter_rows():
        idx = pe.on(host, device)
        k = step_row[idx]
        keep = k >= 0
        idx, k = idx[keep], k[keep]
        if len(k) == 0:
            continue
        lo, hi = w_lo[k], w_hi[k]
        s = np.clip(pe.start[idx], lo, hi)
        e = np.clip(pe.end(idx), lo, hi)
        w = np.asarray(wrows, dtype=np.int64)
        disjoint = (w_lo[w][1:] >= w_hi[w][:-1]).all() and (np.diff(k) >= 0).all()
        first = np.ones(len(k), dtype=bool)
        first[1:] = k[1:] != k[:-1]
        starts_at = np.flatnonzero(first)
        if not disjoint:
            bounds = starts_at.tolist() + [len(k)]
            for a, b in zip(bounds[:-1], bounds[1:]):
                busy[k[a]] = _busy(s[a:b], e[a:b], int(w_lo[k[a]]), int(w_hi[k[a]]))
            continue
        e_max = np.maximum.accumulate(e)
        gaps = np.zeros(len(k), dtype=np.int64)
        gaps[1:] = np.maximum(s[1:] - e_max[:-1], 0)
        gaps[first] = 0
        gap_sum = np.add.reduceat(gaps, starts_at)
        last = np.append(starts_at[1:], len(k)) - 1
        busy[k[starts_at]] = np.maximum(e_max[last] - s[starts_at] - gap_sum, 0)
    return busy


def _device_blocks(win: pl.DataFrame) -> list[tuple[str, str, int, int]] | None:
    """(host, device, first row, end row) per device of ``win`` when each device's windows
    are one run of consecutive rows (the order :func:`_step_windows` gives); None when a
    device's rows are split."""
    n = win.height
    if n == 0:
        return []
    new = win.select((pl.col("host").ne_missing(pl.col("host").shift(1))
                      | pl.col("device").ne_missing(pl.col("device").shift(1))).alias("f"))["f"]
    firsts = np.flatnonzero(new.fill_null(True).to_numpy()).tolist()
    if not firsts or firsts[0] != 0:
        firsts = [0] + firsts
    hosts, devices = win["host"].gather(firsts).to_list(), win["device"].gather(firsts).to_list()
    keys = list(zip(hosts, devices))
    if len(set(keys)) != len(keys):
        return None
    return [(h, d, a, b) for (h, d), a, b in zip(keys, firsts, firsts[1:] + [n])]


def _measure(pe: _Placed, win: pl.DataFrame, blocks: list | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray,
                                                                                 np.ndarray]:
    """Per event its window row (-1: none), and per window: op events (sum of count), op
    self time and busy time (ps). With the C accelerator one merge pass per device
    (``step_pass``); else, or when a device's windows overlap, :func:`_assign`,
    :func:`_busy_per_step` and a group-by, which compute the same. ``blocks``:
    :func:`_device_blocks` of ``win`` when the caller has it."""
    m = win.height
    if blocks is None:
        blocks = _device_blocks(win)
    if _fast is not None and m and pe.n and m < (1 << 31):
        step_row = hugearrays.full(pe.n, -1, np.int32)
        n_ops = np.zeros(m, dtype=np.int64)
        op_time = np.zeros(m, dtype=np.int64)
        busy = np.zeros(m, dtype=np.int64)
        w_lo = win["start_ps"].to_numpy()
        w_hi = win["end_ps"].to_numpy()
        done = True
        if blocks is None:
            done = False  # windows of a device are contiguous rows of win (sorted); else fall back
            blocks = []
        for host, device, a, z in blocks:
            w = slice(a, z)
            sel = pe.sel(host, device)
            if isinstance(sel, slice):  # the device's events are one run: views, rows written in place
                idx = np.arange(sel.stop - sel.start, dtype=np.int32)
                arrays = (pe.start[sel], pe.dur[sel], pe.self_ps[sel], pe.count[sel])
                rows = step_row[sel]
            else:
                idx = sel
                arrays = (pe.start, pe.dur, pe.self_ps, pe.count)
                rows = np.empty(len(idx), dtype=np.int32)
            if len(idx) == 0:
                continue
            if not _fast.step_pass(idx, *arrays, w_lo[w], w_hi[w], rows, n_ops[w], op_time[w], busy[w], a):
                done = False
                break
            if not isinstance(sel, slice):
                step_row[idx] = rows
        if done:
            return step_row, n_ops, op_time, busy
    step_row = _assign(pe, win)
    inside = step_row >= 0
    k = step_row[inside]
    per = (pl.DataFrame({"_step": k, "c": pe.count[inside], "t": pe.self_ps[inside]}).group_by("_step")
           .agg(pl.col("c").sum(), pl.col("t").sum()))
    n_ops = np.zeros(m, dtype=np.int64)
    op_time = np.zeros(m, dtype=np.int64)
    kk = per["_step"].to_numpy().astype(np.int64)
    n_ops[kk] = per["c"].to_numpy()
    op_time[kk] = per["t"].to_numpy()
    return step_row, n_ops, op_time, _busy_per_step(pe, step_row, win)


def find_steps(ops, module_runs: pl.DataFrame | RunTable, *, markers: pl.DataFrame | None = None,
               module: str | None = None, extent: str = "span") -> pl.DataFrame:
    """One row per (host, device, step): the columns of :data:`STEPS_SCHEMA`.

    ``step`` numbers a device's steps from 0 in time order; ``start_ps``/``duration_ps`` are
    the window (wall, ps); ``run_ps`` the dominant execution's own duration (null for markers
    and whole-trace steps); ``gap_after_ps`` = next step's start − this step's end (null for a
    device's last step); ``ops`` = op events (sum of ``count``) starting in the window;
    ``op_time_ps`` = sum of their self_ps; ``busy_ps`` = length of the union of their
    [start, end) intervals clipped to the window; ``idle_ps`` = duration_ps − busy_ps (no op
    running on the device). Step choice and windows: module doc. ``ops``: an
    :class:`~traceview.model.optable.OpTable` or a wide op-event frame. Raises UsageError on an
    unknown ``extent`` or a ``module`` with no executions.
    """
    table, pe = _placed(ops)
    return _steps(table, pe, module_runs, markers=markers, module=module, extent=extent)[0]


def _starts_in_order(win: pl.DataFrame, blocks: list) -> bool:
    """Whether each device block of ``win`` is in non-decreasing start order."""
    st = win["start_ps"].to_numpy()
    for _, _, a, b in blocks:
        s = st[a:b]
        if len(s) > 1 and not (s[1:] >= s[:-1]).all():
            return False
    return True


def _marker_numbers(win: pl.DataFrame) -> np.ndarray | None:
    """The ``step_num`` of each window (int64) when every window is a device's step marker
    carrying one and each device's numbers rise with its windows' starts (``win`` sorted by
    host, device, start: :func:`_with_next`), so a window cut from a trace (``traceview
    export --steps 6:8``) keeps its steps' numbers; else None (steps are numbered from 0 per
    device). Host markers (a CPU trace's step annotations) never carry one here."""
    if "step_num" not in win.columns or win.height == 0 or win["step_num"].null_count():
        return None
    nums = win["step_num"].to_numpy().astype(np.int64)
    if win.height > 1:
        dev = win.select(pl.struct("host", "device").rank("dense")).to_series().to_numpy()
        same = dev[1:] == dev[:-1]
        if not (nums[1:][same] > nums[:-1][same]).all():
            return None
    return nums


def _steps(table, pe: _Placed, module_runs, *, markers, module, extent):
    """(steps frame of :func:`find_steps`, per event its step row (-1: none), method, module,
    notes, the steps' :func:`_device_blocks`)."""
    if extent not in EXTENTS:
        raise UsageError(f"unknown step extent {extent!r}: expected one of {', '.join(EXTENTS)}")
    win, method, mod, notes, blocks = _step_windows(table, pe, module_runs, markers, module, extent)
    numbered = _marker_numbers(win)
    if "step_num" in win.columns:
        win = win.drop("step_num")
    if blocks is None:
        blocks = _device_blocks(win)
    step_row, n_ops, op_time, busy = _measure(pe, win, blocks)
    if win.height == 0:
        return pl.DataFrame(schema=STEPS_SCHEMA), step_row, method, mod, notes, blocks
    if numbered is not None:  # a device's step markers (a TPU Steps line, an export's): their own numbers
        step_col = pl.Series("step", numbered, dtype=pl.Int64)
    elif blocks is not None and (win.height < 2 or _starts_in_order(win, blocks)):
        # each device's windows are consecutive rows in start order: step = row - device's first row
        step = np.arange(win.height, dtype=np.int64)
        for _, _, a, b in blocks:
            step[a:b] -= a
        step_col = pl.Series("step", step, dtype=pl.Int64)
    else:
        step_col = pl.int_range(pl.len()).over(["host", "device"], order_by="start_ps").cast(pl.Int64).alias("step")
    out = win.with_columns(
        pl.Series("ops", n_ops, dtype=pl.Int64), pl.Series("op_time_ps", op_time, dtype=pl.Int64),
        pl.Series("busy_ps", busy, dtype=pl.Int64),
        (pl.col("end_ps") - pl.col("start_ps")).alias("duration_ps"),
        (pl.col("next_ps") - pl.col("end_ps")).alias("gap_after_ps"),
        step_col,
    ).with_columns((pl.col("duration_ps") - pl.col("busy_ps")).alias("idle_ps"))
    # row order = window index (step_row), cast to the documented schema
    steps = out.select(list(STEPS_SCHEMA)).cast(STEPS_SCHEMA)
    return steps, step_row, method, mod, notes, blocks


# --------------------------------------------------------------------------------------
# anatomy


@dataclass
class Coverage:
    """The study's "families sum to X of Y ms" line, per step means over the device-steps of
    the analysed window (``in_window`` steps, :mod:`traceview.analysis.steps.stepstats`).

    ``family_ps`` X = Σ_steps Σ_{ops starting in the step} self_ps / n_steps.
    ``step_ps`` Y = Σ_steps duration_ps / n_steps (wall). ``ratio`` = X / Y (0 when Y is 0).
    ``busy_ps`` = mean union of op intervals in the step; ``idle_ps`` = Y − busy_ps (the gap:
    no op on the device — host, dispatch, synchronisation); ``overlap_ps`` = X − busy_ps (op
    time counted twice in wall time: ops running concurrently, e.g. XLA:CPU thunks on several
    threads, or ops spilling past the step end). So X = Y − idle + overlap exactly.
    ``gap_between_ps`` = mean ``gap_after_ps`` (host time between steps, not in Y; null when
    no device has two steps). ``outside_ps`` = op self time in no step (total, not per step)
    and ``outside_share`` its part of all op self time. ``n_steps`` counts device-steps over
    ``devices`` devices; ``excluded`` the device-steps left out of the window (outliers of
    the steady window, or steps outside an A:B range).
    """

    n_steps: int = 0
    devices: int = 0
    family_ps: float = 0.0
    step_ps: float = 0.0
    ratio: float = 0.0
    busy_ps: float = 0.0
    idle_ps: float = 0.0
    overlap_ps: float = 0.0
    gap_between_ps: float | None = None
    outside_ps: int = 0
    outside_share: float = 0.0
    excluded: int = 0

    def line(self) -> str:
        """``"families sum to 30.00 of 31.20 ms per step (96.2%); idle 1.20 ms; ..."``."""
        ms = 1e-9
        parts = [f"families sum to {self.family_ps * ms:.3f} of {self.step_ps * ms:.3f} ms per step "
                 f"({self.ratio:.1%}, {self.n_steps} steps on {self.devices} device(s))",
                 f"idle {self.idle_ps * ms:.3f} ms"]
        if self.overlap_ps > 0.0005 * max(self.step_ps, 1):
            parts.append(f"overlapping ops {self.overlap_ps * ms:.3f} ms")
        if self.gap_between_ps is not None:
            parts.append(f"gap between steps {self.gap_between_ps * ms:.3f} ms")
        if self.outside_ps:
            parts.append(f"op time outside steps {self.outside_share:.1%}")
        if self.excluded:
            parts.append(f"{self.excluded:,} step(s) outside the window excluded")
        return "; ".join(parts)


@dataclass
class StepAnatomy:
    """Result of :func:`anatomy`.

    ``steps``: :func:`find_steps`'s frame plus the per-step record columns of
    :func:`traceview.analysis.steps.stepstats.annotate` (``gap_before_ps``, ``outlier``, ``reason``,
    ``in_window``). ``families``: family, self_ps (mean per step, ps),
    share (self_ps / mean step wall time), occurrences (total op events in steps), per_step
    (occurrences / n_steps), n_populations (distinct (op_name, shape)); sorted by self time;
    over the ``in_window`` steps only. ``coverage``: :class:`Coverage` over the window,
    ``coverage_all`` over every step. ``method``: "markers", "module" or "trace";
    ``module``: the dominant module (method "module"); ``extent``: the step extent used
    (span, period, run); ``window``: the analysed window ("steady", "all", "A:B");
    ``distribution``: :func:`traceview.analysis.steps.stepstats.distribution` of the window.
    ``ops`` (built on first use): the wide op table with ``family`` and ``step_row`` (row
    index into ``steps``, null for ops outside every step). ``notes``: one line per adjustment
    made (module runs rebuilt on a device whose ops and executions are on different clocks,
    :func:`align_module_runs`). ``table``, ``step_rows`` (per event, -1 outside every step)
    and ``attr_family`` (attr -> family) are the compact form behind ``ops``.
    ``window_sums``: (attr ids, self_ps, count) of the op descriptions with events in the
    window's steps, exact int64 sums over those events (numpy arrays). ``step_sums``: (count,
    events) per op description (int64, indexed by attr id) over the events inside any step;
    None when the table has a null count.
    """

    steps: pl.DataFrame
    families: pl.DataFrame
    coverage: Coverage
    method: str
    module: str | None
    extent: str
    notes: list[str] = field(default_factory=list)
    table: object = field(repr=False, default=None)
    step_rows: np.ndarray | None = field(repr=False, default=None)
    attr_family: pl.DataFrame | None = field(repr=False, default=None)
    window: str = "steady"
    distribution: dict | None = None
    coverage_all: Coverage | None = None
    window_sums: tuple | None = field(repr=False, default=None)
    step_sums: tuple | None = field(repr=False, default=None)
    #: whether user family rules made ``attr_family`` (:meth:`builtin_family` then classifies apart)
    user_rules: bool = False
    summary_text: str = field(init=False, default="")
    _builtin: pl.DataFrame | None = field(init=False, repr=False, default=None)
    _order: np.ndarray | None = field(init=False, repr=False, default=None)
    _sums_for: tuple | None = field(init=False, repr=False, default=None)

    def sums_hold(self) -> bool:
        """Whether ``window_sums`` and ``step_sums`` are those of this anatomy's ``steps``,
        ``step_rows`` and ``table`` (a copy with other steps or rows, ``dataclasses.replace``,
        does not carry them over)."""
        got = self._sums_for
        return got is not None and got[0] is self.steps and got[1] is self.step_rows and got[2] is self.table

    def builtin_family(self) -> pl.DataFrame | None:
        """``attr_family`` by the built-in families alone, the user's rules left out (on first
        use; ``attr_family`` itself without rules): what the finding rules that look for a
        built-in family (sampling, copies and conversions, collectives) read, so that a
        display rule that renames those ops cannot hide a finding."""
        if not self.user_rules or self.table is None or self.attr_family is None:
            return self.attr_family
        if self._builtin is None:
            self._builtin = attr_families(self.table) if self.table.height else self.attr_family
        return self._builtin

    def __post_init__(self) -> None:
        # worked out once here, so that renderers only read it
        self.summary_text = stepstats.summary_line(self.distribution or {}, self.steps)

    @property
    def step_order(self) -> np.ndarray:
        """:func:`traceview.analysis.steps.stepstats.step_order` of ``steps`` (on first use)."""
        if self._order is None:
            self._order = stepstats.step_order(self.steps)
        return self._order

    def summary(self) -> str:
        """The distribution's line (:func:`traceview.analysis.steps.stepstats.summary_line`)."""
        return self.summary_text

    def top_steps(self, n: int) -> pl.DataFrame:
        """At most ``n`` rows of ``steps`` for a per-step table: the first ``n`` of
        ``step_order`` (:func:`traceview.analysis.steps.stepstats.top_steps`)."""
        return stepstats.top_steps(self.steps, n, self._order)

    @property
    def ops(self) -> pl.DataFrame:
        """The wide op-event frame plus ``family`` (Utf8) and ``step_row`` (Int64, null
        outside every step). Costs ~16 bytes per string column per event."""
        if self.table is None:
            return pl.DataFrame()
        wide = self.table.frame().with_columns(self.table.events["attr"].alias("_attr"))
        fam = self.attr_family.rename({"attr": "_attr"})
        rows = pl.Series("step_row", self.step_rows, dtype=pl.Int64)
        return (wide.join(fam, on="_attr", how="left", maintain_order="left").drop("_attr")
                .with_columns(pl.when(rows >= 0).then(rows).otherwise(None).alias("step_row")))

    def family_time_by_step(self, step_rows=None) -> pl.DataFrame:
        """Op self time per (step_row, family) over the ops inside steps (or only those of
        the rows of ``steps`` listed in ``step_rows``): columns step_row (Int64), family
        (Utf8), self_ps (Int64, ps); one row per pair with events, by step_row then family.
        One pass over the events (integer keys, exact sums)."""
        schema = {"step_row": pl.Int64, "family": pl.Utf8, "self_ps": pl.Int64}
        rows = self.step_rows
        if self.table is None or rows is None or not (rows >= 0).any():
            return pl.DataFrame(schema=schema)
        if step_rows is not None:  # the events of those rows only, no per-event copy of the rows
            keep = np.zeros(int(rows.max()) + 2, dtype=bool)  # index -1 (outside) -> the last, False
            wanted = np.asarray(step_rows, dtype=np.int64)
            keep[wanted[(wanted >= 0) & (wanted < len(keep) - 1)]] = True
            inside = np.flatnonzero(keep[rows])
        else:
            inside = np.flatnonzero(rows >= 0)
        fam = self.attr_family
        names = sorted(set(fam["family"].to_list()))
        code = np.full(self.table.attrs.height, 0, dtype=np.int64)
        code[fam["attr"].to_numpy().astype(np.int64)] = fam["family"].replace_strict(
            {f: i for i, f in enumerate(names)}, return_dtype=pl.Int64).to_numpy()
        if len(inside) == 0:
            return pl.DataFrame(schema=schema)
        nf = max(len(names), 1)
        row_in = rows[inside].astype(np.int64)
        key = row_in * nf + code[self.table.events["attr"].to_numpy()[inside]]
        n = (int(row_in.max()) + 1) * nf
        sums = int_bincount(key, self.table.events["self_ps"].to_numpy()[inside], n)
        have = np.flatnonzero(np.bincount(key, minlength=n))
        return pl.DataFrame({"step_row": have // nf, "family": pl.Series([names[i] for i in (have % nf).tolist()],
                                                                          dtype=pl.Utf8),
                             "self_ps": sums[have]}, schema=schema)


FAMILIES_SCHEMA = {"family": pl.Utf8, "self_ps": pl.Float64, "share": pl.Float64, "occurrences": pl.Int64,
                   "per_step": pl.Float64, "n_populations": pl.UInt32}


def _coverage(steps: pl.DataFrame, total_self: int, outside: int, excluded: int = 0,
              devices: int | None = None) -> Coverage:
    """:class:`Coverage` of the device-steps ``steps`` (formulas in its doc); ``devices``:
    their number of distinct (host, device) when the caller knows it."""
    n = steps.height
    if not n:
        return Coverage(outside_ps=outside, outside_share=(outside / total_self if total_self else 0.0),
                        excluded=excluded)
    y = float(steps["duration_ps"].sum()) / n
    x = float(steps["op_time_ps"].sum()) / n
    busy = float(steps["busy_ps"].sum()) / n
    gaps = steps["gap_after_ps"].drop_nulls()
    if devices is None:
        devices = steps.select("host", "device").unique().height
    return Coverage(n_steps=n, devices=devices, family_ps=x, step_ps=y,
                    ratio=(x / y if y else 0.0), busy_ps=busy, idle_ps=y - busy, overlap_ps=x - busy,
                    gap_between_ps=(float(gaps.mean()) if gaps.len() else None), outside_ps=outside,
                    outside_share=(outside / total_self if total_self else 0.0), excluded=excluded)


def anatomy(ops, module_runs: pl.DataFrame | RunTable, rules=None, *, markers: pl.DataFrame | None = None,
            module: str | None = None, extent: str = "span", window: str = "steady",
            outlier_z: float = stepstats.THRESHOLD, reasons: bool = True, rows_only: bool = False) -> StepAnatomy:
    """Step anatomy of a profile: steps, families per step and the coverage line.

    ``ops`` / ``module_runs``: the tables of :mod:`traceview.model.schema` (``prof.table`` — an
    :class:`~traceview.model.optable.OpTable` — or a wide frame such as ``prof.ops``;
    ``prof.runs`` — a :class:`~traceview.model.runtable.RunTable` — or a wide frame such as
    ``prof.module_runs``). ``rules``: user families (see :func:`classify`). ``markers``,
    ``module``, ``extent``: see :func:`find_steps`. ``window`` ("steady", "all", "A:B") and
    ``outlier_z`` (the modified z-score cut-off): :mod:`traceview.analysis.steps.stepstats`; the
    families and the coverage are over the window's steps. ``reasons``: False gives an outlier
    step's ratio to the median alone (no op mix or first executions read off the events).
    ``rows_only`` (without ``rules``): the annotated steps, ``step_rows``, ``attr_family`` and
    the notes only (families empty, coverage and distribution not computed: what a fleet
    host's partial reads). Formulas: :class:`Coverage` and the module doc. Raises UsageError
    on bad rules, extent, window or module.
    """
    rs = rules_of(rules)  # validate before any work
    stepstats.parse_window(window)
    table, pe = _placed(ops)
    steps, step_rows, method, mod, notes, blocks = _steps(table, pe, module_runs, markers=markers, module=module,
                                                          extent=extent)
    devices = None
    if blocks is not None:  # the (host, device) ids of the rows, without a scan of the strings
        devices = (np.repeat(np.arange(len(blocks), dtype=np.int64), [b - a for _, _, a, b in blocks]),
                   [(h, d) for h, d, _, _ in blocks])
    steps = (stepstats.annotate(steps, window=window, table=table, attr=pe.attr, count=pe.count,
                                step_rows=step_rows, threshold=outlier_z, devices=devices) if reasons else
             stepstats.annotate(steps, window=window, threshold=outlier_z, devices=devices))
    fam_of = attr_families(table, rs) if table.height else pl.DataFrame(schema={"attr": pl.UInt32, "family": pl.Utf8})
    in_win = steps["in_window"].to_numpy().astype(bool) if steps.height else np.zeros(0, dtype=bool)
    n = int(in_win.sum())
    if rows_only and rules is None and (n or not steps.height):  # (else a note read off the families or
        # the window)
        return StepAnatomy(steps=steps, families=pl.DataFrame(schema=FAMILIES_SCHEMA), coverage=Coverage(),
                           method=method, module=mod, extent=extent, notes=notes, table=table, step_rows=step_rows,
                           attr_family=fam_of, window=window)
    total_self = eventstats.total_self_ps(table)
    # per op description: its events inside the window's steps (self time, occurrences),
    # exact int64 sums: the description's totals (OpTable.collapse, cached) less its events
    # outside every window step, which are few (bincount over those alone)
    if table.height:
        na = table.attrs.height
        col = table.collapse()
        tot_t = np.zeros(na, dtype=np.int64)
        tot_c = np.zeros(na, dtype=np.int64)
        tot_r = np.zeros(na, dtype=np.int64)
        ca = col["attr"].to_numpy().astype(np.int64)
        tot_t[ca], tot_c[ca], tot_r[ca] = col["self_ps"].to_numpy(), col["count"].to_numpy(), col["rows"].to_numpy()
        if in_win.all():
            out_idx = np.flatnonzero(step_rows < 0)
        else:
            drop = np.append(~in_win, True)  # index -1 (outside every step) -> the last, True
            out_idx = np.flatnonzero(drop[step_rows])
        a_out = pe.attr[out_idx].astype(np.int64)
        t_sum = tot_t - int_bincount(a_out, pe.self_ps[out_idx], na)
        c_sum = tot_c - int_bincount(a_out, pe.count[out_idx], na)
        r_sum = tot_r - np.bincount(a_out, minlength=na)
        ids = np.flatnonzero(r_sum > 0)
        inside = pl.DataFrame({"attr": pl.Series(ids, dtype=pl.UInt32), "self_ps": t_sum[ids], "count": c_sum[ids]})
        window_sums = (ids, t_sum[ids], c_sum[ids])
        step_sums = None
        if not table.events["count"].null_count():  # over every step: the window's, or less the events in none
            if in_win.all():
                step_sums = (c_sum, r_sum)
            else:
                none = out_idx[step_rows[out_idx] < 0]
                a_no = pe.attr[none].astype(np.int64)
                step_sums = (tot_c - int_bincount(a_no, pe.count[none], na), tot_r - np.bincount(a_no, minlength=na))
        del a_out, out_idx
    else:
        inside = pl.DataFrame(schema={"attr": pl.UInt32, "self_ps": pl.Int64, "count": pl.Int64})
        window_sums = step_sums = None
    outside = total_self - int(steps["op_time_ps"].sum() or 0) if steps.height else total_self
    win_steps = steps.select("duration_ps", "op_time_ps", "busy_ps", "gap_after_ps", "in_window") if steps.height \
        else steps
    if steps.height and n < steps.height:
        win_steps = win_steps.filter(pl.col("in_window"))
    if steps.height:
        dev, dev_keys = devices if devices is not None else stepstats._device_ids(steps)
        per_dev = np.bincount(dev if n == steps.height else dev[in_win], minlength=len(dev_keys))
        cov = _coverage(win_steps, total_self, outside, excluded=steps.height - n,
                        devices=int(np.count_nonzero(per_dev)))
        # every step in the window, on every device: the same figures (no second pass over the steps)
        cov_all = (replace(cov) if n == steps.height and cov.devices == len(dev_keys)
                   else _coverage(steps, total_self, outside, devices=len(dev_keys)))
    else:
        cov, cov_all = Coverage(), Coverage()
    if n and inside.height:
        desc = table.attrs.select("attr", "op_name", "shape")
        fam = inside.join(fam_of, on="attr", how="left").join(desc, on="attr", how="left").group_by("family").agg(
            (pl.col("self_ps").sum() / n).alias("self_ps"),
            pl.col("count").sum().alias("occurrences"),
            pl.struct("op_name", "shape").n_unique().alias("n_populations"),
        ).with_columns(
            (pl.col("self_ps") / cov.step_ps if cov.step_ps else pl.lit(0.0)).alias("share"),
            (pl.col("occurrences") / n).alias("per_step"),
        ).select(list(FAMILIES_SCHEMA)).cast(FAMILIES_SCHEMA).sort(["self_ps", "family"], descending=[True, False])
    else:
        fam = pl.DataFrame(schema=FAMILIES_SCHEMA)
    if rules is not None and fam.height:  # families the user chose that place (almost) nothing
        tot = float(fam["self_ps"].sum() or 0)
        oth = float(fam.filter(pl.col("family") == "other")["self_ps"].sum() or 0)
        if tot and oth / tot >= 0.9:
            notes = notes + [f"the families given leave {oth / tot:.0%} of the steps' op time in 'other': their "
                             f"rules match almost none of these ops (scope: rules read the JAX name stack, which "
                             f"ops compiled without named scopes do not carry)"]
    dist = stepstats.distribution(steps, window)
    if steps.height and n == 0:
        notes = notes + [f"step window {dist['window']} holds no step: families and coverage are empty"]
    out = StepAnatomy(steps=steps, families=fam, coverage=cov, method=method, module=mod, extent=extent,
                      notes=notes, table=table, step_rows=step_rows, attr_family=fam_of, window=dist["window"],
                      distribution=dist, coverage_all=cov_all, window_sums=window_sums, step_sums=step_sums,
                      user_rules=bool(rs))
    out._sums_for = (steps, step_rows, table)
    return out


def profile_anatomy(prof, rules=None, *, module: str | None = None, extent: str = "span",
                    markers="auto", window: str = "steady", outlier_z: float = stepstats.THRESHOLD,
                    reasons: bool = True, rows_only: bool = False) -> StepAnatomy:
    """:func:`anatomy` of a profile (a :class:`~traceview.model.profiledata.ProfileData`).

    ``markers``: "auto" uses, when no ``module`` is named, the events of the TPU planes'
    ``Steps`` lines or of a GPU export's steps line (device markers, on the ops' clock; a note
    says so), else the trace's step
    annotations (``StepTraceAnnotation``) when the ops run on the host (CPU traces: markers
    and ops share the host clock); None ignores them; or a frame of
    :data:`~traceview.model.schema.STEP_MARKERS_SCHEMA`.
    ``window`` / ``outlier_z`` / ``reasons`` / ``rows_only``: :func:`anatomy`. Raises UsageError on bad rules, extent,
    window, module or ``markers``."""
    table = prof.table
    note = None
    if isinstance(markers, str):
        if markers != "auto":
            raise UsageError(f"markers must be 'auto', None or a frame, got {markers!r}")
        mk = prof.step_markers
        on_device = mk.filter(pl.col("device") != "") if mk.height else mk
        on_host = table.height > 0 and bool(table.collapse()["device"].str.contains("^(/host:|/device:CPU:)").all())
        if module is None and on_device.height:
            markers = on_device
            n_dev = on_device.select("host", "device").unique().height
            if bool((on_device["name"] == EXPORT_STEPS_LINE).all()):
                note = (f"steps are the {EXPORT_STEPS_LINE!r} line of a traceview export ({on_device.height} on "
                        f"{n_dev} device(s)): the steps of the trace it was cut from, not program executions "
                        f"found again in the window")
            else:
                note = (f"steps are the events of the TPU Steps line ({on_device.height} on "
                        f"{n_dev} device(s)), not program executions")
        else:
            host_mk = mk.filter(pl.col("device") == "") if mk.height else mk
            markers = host_mk if (module is None and on_host and host_mk.height) else None
    a = anatomy(table, prof.runs, rules=rules, module=module, extent=extent, markers=markers,
                window=window, outlier_z=outlier_z, reasons=reasons, rows_only=rows_only)
    if note is not None:
        a.notes.insert(0, note)
    return a
