"""Communication/computation overlap: per async op and per step, on each device's timeline.

**Per op** (``Overlap.ops``, one row per collective or async copy execution on a device):

- an async pair ``X-start`` .. ``X-done`` (``all-reduce-start``, ``all-gather-start``,
  ``collective-permute-start``, ``copy-start``, ``async-start`` (a collective only when XLA
  named it after one: ``all-gather-start``; ``slice-start`` is a device-side async op),
  ``send``/``recv`` ..
  ``send-done``/``recv-done``) is matched on a device by the done's operand (its HLO text
  names the start: ``copy-done(... %copy-start)``), oldest unmatched start first. **In flight**
  = the start's begin to the done's end (ps). **Hidden** = the part of that time during which
  the same device executed compute ops (the union of their events, any thread or stream);
  **exposed** = in flight - hidden (the device waited at the done, or ran nothing);
  ``wait_at_done_ps`` is the done event's own duration (part of the exposed time).
- a synchronous collective (``all-reduce``, ``all-gather``, ``reduce-scatter``, ``all-to-all``,
  ``collective-permute``, ...: one event) is in flight for its duration and wholly **exposed**:
  the device does nothing else of the program meanwhile. XLA:CPU runs every collective this
  way (a blocking rendezvous of the devices' threads), so on CPU traces all communication is
  exposed by construction.

**Per step** (``Overlap.steps``, per (host, device, step) of the step anatomy): the step's
wall time is partitioned, each instant counted once, in this priority order:
**exposed communication** (a synchronous collective runs, or an async collective is in flight
and no compute runs), **compute** (any other op runs: fusions, matmuls, the start/done events
of async copies between device buffers and of other async ops...), **host** (a transfer to or from host memory, a
copy whose HLO shape carries memory space ``S(5)``, is in flight and nothing above runs),
**idle** (nothing). So compute + exposed + host + idle = step time exactly. **Hidden
communication** is the part of compute during which an async collective was in flight (not a
fifth bucket: it lies inside compute). ``critical_share`` = exposed / step time: the share of
the step that communication holds on the critical path.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
import polars as pl

from traceview.read import hugearrays

try:  # optional C accelerator
    from traceview.analysis import _passes as _fast
except ImportError:  # pragma: no cover - exercised when the extension is absent
    _fast = None

#: synchronous collective opcodes (HLO), each one event
SYNC_COLLECTIVES = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "ragged-all-to-all",
                    "collective-permute", "collective-broadcast")
#: opcodes that begin an async pair
ASYNC_STARTS = ("all-reduce-start", "all-gather-start", "collective-permute-start", "copy-start", "async-start",
                "send", "recv")
#: opcodes that end one
ASYNC_DONES = ("all-reduce-done", "all-gather-done", "collective-permute-done", "copy-done", "async-done",
               "send-done", "recv-done")
_OPERAND = re.compile(r"%([A-Za-z0-9_.\-]+)")
_HOST_SPACE = "S(5)"  # XLA's host memory space annotation in an HLO layout

OPS_SCHEMA = {"host": pl.Utf8, "device": pl.Utf8, "module": pl.Utf8, "op_name": pl.Utf8, "op_kind": pl.Utf8,
              "shape": pl.Utf8, "kind": pl.Utf8, "sync": pl.Boolean, "start_ps": pl.Int64, "end_ps": pl.Int64,
              "in_flight_ps": pl.Int64, "hidden_ps": pl.Int64, "exposed_ps": pl.Int64, "wait_at_done_ps": pl.Int64}
STEPS_SCHEMA = {"host": pl.Utf8, "device": pl.Utf8, "step": pl.Int64, "start_ps": pl.Int64, "step_ps": pl.Int64,
                "compute_ps": pl.Int64, "exposed_ps": pl.Int64, "hidden_ps": pl.Int64, "host_ps": pl.Int64,
                "idle_ps": pl.Int64, "critical_share": pl.Float64}


@dataclass
class Overlap:
    """Result of :func:`overlap`. ``ops``: :data:`OPS_SCHEMA` (``kind``: "collective",
    "host transfer", "copy" or "async op"; times in ps). ``populations``: ``ops`` summed per (kind, op_kind,
    op_name, shape): n, sync, in_flight_ps, hidden_ps, exposed_ps, wait_at_done_ps, hidden_share;
    collectives first, then host transfers, then device copies, each by in-flight time. ``steps``:
    :data:`STEPS_SCHEMA`. ``summary``: over all steps: step_ps, compute_ps, exposed_ps,
    hidden_ps, host_ps, idle_ps (sums), exposed_share (exposed / step time), n_steps, n_devices,
    collectives (collective executions), async_ops (async pairs of any kind), synchronous
    (True when every collective was synchronous). ``notes``: what the reader must
    know (synchronous collectives counted exposed). ``n_ops``: rows of ``ops``, which is built
    on first use (a row per execution of every collective and async copy: the largest frame of
    a long TPU trace, read only by the findings that name ops and by ``query``)."""

    populations: pl.DataFrame
    steps: pl.DataFrame
    summary: dict
    notes: list = field(default_factory=list)
    n_ops: int = 0
    _ops: pl.DataFrame | None = field(default=None, repr=False)
    _build: object = field(default=None, repr=False)

    @property
    def ops(self) -> pl.DataFrame:
        """The per-op frame (:data:`OPS_SCHEMA`), built on first use and kept."""
        if self._ops is None:
            self._ops = self._build() if self._build is not None else pl.DataFrame(schema=OPS_SCHEMA)
            self._build = None
        return self._ops

    #: frames built on first use that ``query`` lists as tables (:func:`traceview.analysis.sql.report_tables`)
    LAZY_FRAMES = ("ops",)


def _class_expr() -> pl.Expr:
    """Per op description: "collective", "host transfer", "copy" (async copy between device
    buffers), "async op" (another wrapped async computation, e.g. ``slice-start``) or null
    (compute)."""
    kind, host = pl.col("op_kind"), pl.col("hlo_text").str.contains(_HOST_SPACE, literal=True)
    is_async = kind.is_in(list(ASYNC_STARTS) + list(ASYNC_DONES))
    # a generic async-start/-done wraps any computation: XLA names it after it (all-gather-start,
    # slice-start); only a collective's name makes it communication
    wraps_collective = pl.col("op_name").str.contains("^(" + "|".join(SYNC_COLLECTIVES) + ")-(start|done)")
    return (pl.when(kind.is_in(list(SYNC_COLLECTIVES))).then(pl.lit("collective"))
            .when(is_async & kind.str.starts_with("copy-") & host).then(pl.lit("host transfer"))
            .when(is_async & kind.str.starts_with("copy-")).then(pl.lit("copy"))
            .when(kind.is_in(["async-start", "async-done"]) & ~wraps_collective).then(pl.lit("async op"))
            .when(is_async).then(pl.lit("collective"))
            .when((kind == "copy") & host).then(pl.lit("host transfer"))
            .otherwise(pl.lit(None, dtype=pl.Utf8)).alias("_cls"))


def _union(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Disjoint sorted intervals covering the union of [starts, ends)."""
    if len(starts) == 0:
        return starts, ends
    if bool((starts[1:] >= starts[:-1]).all()):
        s, e = starts, ends
    else:
        o = np.argsort(starts, kind="stable")
        s, e = starts[o], ends[o]
    run_end = np.maximum.accumulate(e)
    new = np.empty(len(s), dtype=bool)
    new[0] = True
    new[1:] = s[1:] > run_end[:-1]
    idx = np.flatnonzero(new)
    us = s[idx]
    ue = run_end[np.r_[idx[1:] - 1, len(s) - 1]]  # each group's end: the running max at its last member
    return us, ue


def _covered(us: np.ndarray, ue: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per window [a_i, b_i): the time inside it covered by the disjoint sorted intervals (us, ue)."""
    if len(us) == 0:
        return np.zeros(len(a), dtype=np.int64)
    if _fast is not None:  # one binary search per bound, in C
        out = np.empty(len(a), dtype=np.int64)
        if _fast.covered(*(np.ascontiguousarray(x, dtype=np.int64) for x in (us, ue, a, b)), out):
            return out
    cum = np.concatenate([[0], np.cumsum(ue - us)])

    def upto(t):  # covered time in (-inf, t)
        i = np.searchsorted(us, t, side="right")  # intervals starting before t
        k, some = np.maximum(i - 1, 0), i > 0
        inside = np.where(some, np.minimum(ue[k], t) - us[k], 0)
        return cum[k] * some + np.maximum(inside, 0)

    return upto(b) - upto(a)


#: per-event class codes of :func:`_class_expr` (0: compute)
_CLS_CODES = {"collective": 1, "host transfer": 2, "copy": 3, "async op": 4}


def _lut(codes) -> np.ndarray:
    """uint8 table over the codes 0..9: 1 at ``codes``."""
    out = np.zeros(10, dtype=np.uint8)
    out[list(codes)] = 1
    return out


#: event classes that count as compute (:data:`_CLS_CODES`): compute, device copies, other async ops
_COMPUTE = _lut([0, _CLS_CODES["copy"], _CLS_CODES["async op"]])
#: record codes (class * 2 + sync) of synchronous collectives, async collectives, host transfers
_SYNC_COLL = _lut([_CLS_CODES["collective"] * 2 + 1])
_ASYNC_COLL = _lut([_CLS_CODES["collective"] * 2])
_HOST = _lut([_CLS_CODES["host transfer"] * 2, _CLS_CODES["host transfer"] * 2 + 1])


def _union_where(starts: np.ndarray, ends, durs, codes: np.ndarray, lut: np.ndarray) -> tuple:
    """:func:`_union` of the elements whose ``codes`` (int8, 0..9) ``lut`` marks, their ends
    ``ends`` or, when ``ends`` is None, ``starts + durs``. In one C pass (``union_where``)
    when built and the kept starts are in order, else by masks and :func:`_union`."""
    if _fast is not None:
        us, ue = np.empty(len(starts), dtype=np.int64), np.empty(len(starts), dtype=np.int64)
        m = _fast.union_where(np.ascontiguousarray(starts, dtype=np.int64),
                              b"" if ends is None else np.ascontiguousarray(ends, dtype=np.int64),
                              np.ascontiguousarray(durs, dtype=np.int64) if ends is None else b"",
                              np.ascontiguousarray(codes, dtype=np.int8), lut, us, ue)
        if m >= 0:
            return us[:m], ue[:m]
    keep = lut[codes].astype(bool)
    s = starts[keep]
    return _union(s, ends[keep] if ends is not None else s + durs[keep])


def _attr_counts(attr: np.ndarray, n: int) -> np.ndarray:
    """``np.bincount(attr, minlength=n)`` of attr ids (uint32): in one C pass (``attr_counts``,
    no int64 copy of ``attr``) when built and every id is below ``n``."""
    if _fast is not None and attr.dtype == np.uint32:
        out = np.empty(n, dtype=np.int64)
        if _fast.attr_counts(np.ascontiguousarray(attr), out) >= 0:
            return out
    return np.bincount(attr, minlength=n)


def _codes(values, null: int = -1) -> np.ndarray:
    """int64 array of a polars Series' values (nulls as ``null``)."""
    return values.fill_null(null).to_numpy().astype(np.int64, copy=False)


def _keyed(frame: pl.DataFrame, keys: list[str]) -> np.ndarray:
    """Per row of ``frame``, a dense id of its ``keys`` (nulls equal), int64."""
    if frame.height == 0:
        return np.zeros(0, dtype=np.int64)
    ids = frame.select(keys).unique(maintain_order=True).with_row_index("_id")
    return _codes(frame.select(keys).join(ids, on=keys, how="left", nulls_equal=True, maintain_order="left")["_id"])


def _stable_order(keys: np.ndarray) -> np.ndarray:
    """``np.argsort(keys, kind="stable")``; keys of a small range (description or pair ids,
    -1 for none) are sorted as 16-bit integers, which numpy sorts by radix (linear)."""
    if len(keys) and keys.min() >= -1 and keys.max() < (1 << 16) - 1:
        return np.argsort((keys + 1).astype(np.uint16), kind="stable")
    return np.argsort(keys, kind="stable")


def _rank(keys: np.ndarray) -> np.ndarray:
    """Per element, how many earlier elements share its key (0 for the first)."""
    o = _stable_order(keys)
    sk = keys[o]
    pos = np.arange(len(keys))
    head = np.maximum.accumulate(np.where(np.r_[True, sk[1:] != sk[:-1]], pos, 0)) if len(keys) else pos
    r = np.empty(len(keys), dtype=np.int64)
    r[o] = pos - head
    return r


def _match(ks: np.ndarray, kd: np.ndarray) -> np.ndarray:
    """Per element of ``ks`` (int64 start keys, in time order), the index into ``kd`` (int64
    done keys, in time order) of the done with the same key and the same rank among its key;
    -1 where none (keys below 0 match nothing). The dones grouped by key (stable) are indexed
    by each start's key offset plus its rank; in C (``rank_match``) by one counting pass."""
    out = np.full(len(ks), -1, dtype=np.int64)
    if len(ks) == 0 or len(kd) == 0:
        return out
    if _fast is not None:
        ks, kd = np.ascontiguousarray(ks, dtype=np.int64), np.ascontiguousarray(kd, dtype=np.int64)
        if _fast.rank_match(ks, kd, out):
            return out
        out.fill(-1)
    nk = int(max(ks.max(), kd.max())) + 1
    if nk <= 0:
        return out
    od = _stable_order(kd)  # -1 keys first, then each key's dones in time order
    n_done = np.bincount(kd[kd >= 0], minlength=nk)
    head = int((kd < 0).sum()) + np.cumsum(n_done) - n_done
    r = _rank(ks)
    kc = np.maximum(ks, 0)
    hit = (ks >= 0) & (r < n_done[kc])
    out[hit] = od[head[kc[hit]] + r[hit]]
    return out


def _orphans(sk: np.ndarray, s_at: tuple, dk: np.ndarray, d_at: tuple) -> np.ndarray:
    """Per done (keys ``dk``), whether it comes before every start of its key (keys ``sk``):
    a done whose start the capture missed (it began before the trace), matched with nothing,
    so that the key's later dones still pair with their own starts. ``s_at`` / ``d_at``:
    each event's place in time as a tuple of int64 arrays compared in turn (time, then
    position); the starts in that order. Keys below 0 are nobody's."""
    s = np.flatnonzero(sk >= 0)
    keys, first = np.unique(sk[s], return_index=True)  # each key's first start, in order
    kd = np.maximum(dk, 0)
    size = int(max(keys.max(initial=-1), kd.max(initial=-1))) + 1
    before, tie = np.zeros(len(dk), dtype=bool), np.ones(len(dk), dtype=bool)
    for xs, xd in zip(s_at, d_at):
        at = np.full(size, np.iinfo(np.int64).max)  # a key without a start: every done of it is before
        at[keys] = xs[s[first]]
        before |= tie & (xd < at[kd])
        tie &= xd == at[kd]
    return (dk >= 0) & before


class _Events:
    """A table's placed events as arrays in (host, device, start) order, stable: ``attr``,
    ``start``, ``dur`` (ps; the table's own columns when they are in that order), ``dev``
    (index into ``devices``, (host, device) sorted, nulls first), ``cls`` (per event,
    :data:`_CLS_CODES`); ``attrs``: the descriptions with ``_cls``; ``any_comm``: whether an
    event is communication or a transfer."""

    def __init__(self, table):
        from traceview.model.optable import as_table

        table = as_table(table)
        cols = ["host", "device", "module", "op_name", "op_kind", "shape", "hlo_text"]
        self.attrs = table.attrs.select(["attr"] + cols).with_columns(_class_expr())
        cls_of = _codes(self.attrs["_cls"].replace_strict(_CLS_CODES, default=0, return_dtype=pl.Int64), 0).astype(np.int8)
        ev = table.events.select("attr", "start_ps", "duration_ps")
        if ev["start_ps"].null_count():
            ev = ev.filter(pl.col("start_ps").is_not_null())
        attr = ev["attr"].to_numpy()  # uint32, no copy
        self.counts = _attr_counts(attr, len(cls_of))  # events per description
        self.any_comm = bool(len(attr)) and bool((self.counts[:len(cls_of)][cls_of != 0] > 0).any())
        self.devices = self.attrs.select("host", "device").unique().sort(["host", "device"])
        self.cls_of = cls_of
        if not self.any_comm:  # nothing to place: the caller returns empty frames
            self.attr = self.start = self.dur = self.dev = self.cls = np.zeros(0, dtype=np.int64)
            self.slices = []
            return
        dev_of = _codes(self.attrs.select("host", "device").join(
            self.devices.with_row_index("_d"), on=["host", "device"], how="left", nulls_equal=True,
            maintain_order="left")["_d"]).astype(np.int32)
        # the per-event arrays made here in mappings of their own (read.hugearrays): freed,
        # they leave no hole in the heap for the later stages to grow around; an event's end
        # is computed where it is read (a device's events, a record's), not kept per event
        start, dur = _codes(ev["start_ps"]), _codes(ev["duration_ps"])
        del ev
        dev, cls, placed = _placed(attr, start, dev_of, cls_of)
        if placed != 1 and len(dev) > 1 and not (np.all(dev[1:] >= dev[:-1])
                                                 and np.all((dev[1:] > dev[:-1]) | (start[1:] >= start[:-1]))):
            o = _stable_order(dev)  # by device (radix), each device's events in their order
            attr, start, dur, dev = attr[o], start[o], dur[o], dev[o]
            if not np.all((dev[1:] > dev[:-1]) | (start[1:] >= start[:-1])):
                o = np.lexsort((start, dev))  # stable
                attr, start, dur, dev = attr[o], start[o], dur[o], dev[o]
            cls = None
        self.attr, self.start, self.dur, self.dev = attr, start, dur, dev
        self.cls = cls if cls is not None else hugearrays.take(cls_of, attr)
        # each device's slice of the arrays
        cuts = np.searchsorted(dev, np.arange(self.devices.height + 1), side="left")
        self.slices = [(d, slice(int(cuts[d]), int(cuts[d + 1]))) for d in range(self.devices.height)
                       if cuts[d + 1] > cuts[d]]


def _placed(attr: np.ndarray, start: np.ndarray, dev_of: np.ndarray, cls_of: np.ndarray) -> tuple:
    """(per event its device ``dev_of[attr]``, its class ``cls_of[attr]`` or None, 1 when the
    events are known to be in (device, start) order, else 0 or -1): in one C pass
    (``events_placed``) when built, else the device by a gather and the class left to the caller."""
    if _fast is not None and attr.dtype == np.uint32:
        dev, cls = hugearrays.empty(len(attr), np.int32), hugearrays.empty(len(attr), np.int8)
        got = _fast.events_placed(np.ascontiguousarray(attr), np.ascontiguousarray(start, dtype=np.int64),
                                  np.ascontiguousarray(dev_of, dtype=np.int32), np.ascontiguousarray(cls_of, dtype=np.int8),
                                  dev, cls)
        if got >= 0:
            return dev, cls, got
        del dev, cls
    return hugearrays.take(dev_of, attr), None, -1


def _row_devices(frame: pl.DataFrame, devices: pl.DataFrame) -> np.ndarray:
    """Per row of ``frame`` (columns ``host``, ``device``), the index of its (host, device) in
    ``devices`` (nulls equal), -1 where absent (int64): the left join of the rows' runs of one
    device, repeated over each run's rows."""
    if frame.height == 0:
        return np.zeros(0, dtype=np.int64)
    new = frame.select((pl.col("host").ne_missing(pl.col("host").shift(1))
                        | pl.col("device").ne_missing(pl.col("device").shift(1))).alias("f"))["f"].to_numpy().copy()
    new[0] = True
    firsts = np.flatnonzero(new)
    runs = frame.select("host", "device")[firsts]
    code = _codes(runs.join(devices.with_row_index("_d"), on=["host", "device"], how="left", nulls_equal=True,
                            maintain_order="left")["_d"])
    return np.repeat(code, np.diff(np.append(firsts, frame.height)))


def _comm_ops(ev: _Events) -> dict:
    """One record per collective / transfer execution, as arrays in (host, device, start)
    order (stable; synchronous ones before pairs at one start): ``attr`` (the sync event's or
    the start's description), ``dev``, ``start``, ``end``, ``wait`` (ps), ``sync``. An async
    done is paired with the start its HLO text names (``copy-done(... %copy-start)``), the k-th
    done naming a start on a device with that start's k-th execution there (oldest first), and
    kept when the done begins no earlier than the start."""
    at = ev.attrs
    kind = at["op_kind"]
    is_comm = ev.cls_of != 0
    sync_of = is_comm & (kind.is_in(list(SYNC_COLLECTIVES)) | (kind == "copy")).fill_null(False).to_numpy()
    start_of = is_comm & kind.is_in(list(ASYNC_STARTS)).fill_null(False).to_numpy()
    of = at["hlo_text"].str.extract(r"-done\(.*?%([A-Za-z0-9_.\-]+)", 1)
    done_of = is_comm & kind.is_in(list(ASYNC_DONES)).fill_null(False).to_numpy() & of.is_not_null().to_numpy()
    # one pair key per (host, device, module, name): a start's own name, a done's operand
    key = ["host", "device", "module", "_name"]
    named = pl.concat([at.select("host", "device", "module", pl.col("op_name").alias("_name")),
                       at.select("host", "device", "module", of.alias("_name"))], how="vertical")
    ids = _keyed(named, key)
    n = at.height
    start_key = np.where(start_of, ids[:n], -1)
    done_key = np.where(done_of, ids[n:], -1)
    start_key[start_of & at["op_name"].is_null().to_numpy()] = -1  # a null name names nothing
    a = ev.attr
    if _fast is not None and a.dtype == np.uint32:  # one C pass (comm_records_stream): pairs, the merge below, _records
        cap = int(ev.counts[:n][(start_key >= 0) | sync_of].sum())
        out = {"attr": hugearrays.empty(cap, np.uint32), "dev": hugearrays.empty(cap, np.int32)}
        for k in ("start", "end", "wait"):
            out[k] = hugearrays.empty(cap, np.int64)
        out["sync"] = hugearrays.empty(cap, np.bool_)
        got = _fast.comm_records_stream(
            np.ascontiguousarray(a), np.ascontiguousarray(ev.start, dtype=np.int64),
            np.ascontiguousarray(ev.dur, dtype=np.int64), np.ascontiguousarray(ev.dev, dtype=np.int32),
            start_key.astype(np.int64), done_key.astype(np.int64), sync_of.astype(np.uint8),
            out["attr"], out["dev"], out["start"], out["end"], out["wait"], out["sync"].view(np.uint8))
        if got >= 0:
            return {k: v[:got] for k, v in out.items()}
        del out
    ks, kd = start_key[a], done_key[a]
    si = np.flatnonzero(ks >= 0)
    di = np.flatnonzero(kd >= 0)
    sk, dk = ks[si], kd[di]
    del ks, kd
    dk[_orphans(sk, (si,), dk, (di,))] = -1  # a done before its key's first start: its start was not captured
    # the k-th start of a key takes the k-th done of that key
    m = _match(sk, dk)
    hit = m >= 0
    ps, pd = si[hit], di[m[hit]]
    del sk, dk, m, hit
    ok = ev.start[pd] >= ev.start[ps]
    ps, pd = ps[ok], pd[ok]
    sy = np.flatnonzero(sync_of[a])
    # (device, start) order, synchronous ones first at one start, each part in its order: both
    # parts ascend in event position, so a merge by the first event of each (device, start)
    if len(sy) and len(ps):
        # per record, how many of the other part come before it: those of earlier devices,
        # then those of its device at an earlier start (pairs) / at no later start (sync)
        before_s = np.zeros(len(sy), dtype=np.int64)
        before_p = np.zeros(len(ps), dtype=np.int64)
        cut_s = np.searchsorted(sy, [sl.start for _, sl in ev.slices] + [len(a)])
        cut_p = np.searchsorted(ps, [sl.start for _, sl in ev.slices] + [len(a)])
        for k in range(len(ev.slices)):
            s0, s1, p0, p1 = cut_s[k], cut_s[k + 1], cut_p[k], cut_p[k + 1]
            ts, tp = ev.start[sy[s0:s1]], ev.start[ps[p0:p1]]
            before_s[s0:s1] = p0 + np.searchsorted(tp, ts, side="left")
            before_p[p0:p1] = s0 + np.searchsorted(ts, tp, side="right")
        pos_s = np.arange(len(sy)) + before_s
        pos_p = np.arange(len(ps)) + before_p
        idx = np.empty(len(sy) + len(ps), dtype=np.int64)
        idx[pos_s], idx[pos_p] = sy, ps
        sync = np.zeros(len(idx), dtype=bool)
        sync[pos_s] = True
        pe = np.empty(len(idx), dtype=np.int64)  # per record, its done event (sync: itself)
        pe[pos_s], pe[pos_p] = sy, pd
    else:
        idx = np.concatenate([sy, ps])
        sync = np.r_[np.ones(len(sy), dtype=bool), np.zeros(len(ps), dtype=bool)]
        pe = np.concatenate([sy, pd])
    return _records(ev, idx, pe, sync)


def _records(ev: _Events, idx: np.ndarray, pe: np.ndarray, sync: np.ndarray) -> dict:
    """The :func:`_comm_ops` arrays of its records: ``idx`` (the sync event or the start),
    ``pe`` (the sync event or the done), ``sync`` (bool), positions in ``ev``."""
    take = hugearrays.take
    wait = take(ev.dur, pe)  # the done's duration
    end_d = take(ev.start, pe)
    end_d += wait  # the done's end
    start = take(ev.start, idx)
    end = take(ev.dur, idx)
    end += start  # the start's end, then the record's end in place
    np.maximum(end_d, end, out=end, where=~sync)
    del end_d
    wait[sync] = 0
    return {"attr": take(ev.attr, idx), "dev": take(ev.dev, idx), "start": start, "end": end, "wait": wait,
            "sync": sync}


def _partition(cu, sy, asy, ho, wa: np.ndarray, wb: np.ndarray) -> tuple:
    """Per window [wa, wb): (exposed, compute, hidden, host-only) time, ps, of a device with
    compute ``cu``, synchronous collectives ``sy``, async collectives in flight ``asy`` and host
    transfers ``ho`` (each (starts, ends), disjoint sorted): exposed = sy ∪ (asy \\ cu),
    compute = cu \\ sy, hidden = (asy ∩ cu) \\ sy, host = ho \\ (cu ∪ sy ∪ asy). One sweep over
    the sorted bounds of all four: each elementary segment [p_i, p_i+1) lies wholly in or out
    of each set."""
    sets = (cu, sy, asy, ho)
    if _fast is not None:  # the same sweep as one merge of the sorted bounds, in C
        out = tuple(np.empty(len(wa), dtype=np.int64) for _ in range(4))
        if _fast.partition(*(np.ascontiguousarray(b, dtype=np.int64) for x in sets for b in x),
                           np.ascontiguousarray(wa, dtype=np.int64), np.ascontiguousarray(wb, dtype=np.int64), *out):
            return out
    bounds = np.concatenate([b for x in sets for b in x])
    if len(bounds) == 0:
        z = np.zeros(len(wa), dtype=np.int64)
        return z, z, z, z
    o = np.argsort(bounds, kind="stable")
    pts = bounds[o]
    inside, at = [], 0
    for x in sets:  # depth of each set after each bound; exact at the last of equal bounds
        step = np.zeros(len(bounds), dtype=np.int8)
        step[at:at + len(x[0])] = 1
        step[at + len(x[0]):at + 2 * len(x[0])] = -1
        inside.append(np.cumsum(step[o], dtype=np.int64) > 0)
        at += 2 * len(x[0])
    c, s, a, h = inside
    length = np.diff(pts)
    nseg = len(length)  # >= 1: every interval brings two bounds

    def at(t):  # where each t lies among the bounds, shared by the four sets
        i = np.searchsorted(pts, t, side="right") - 1  # the last bound at or before t
        j = np.clip(i, 0, nseg - 1)
        return i < 0, (i >= 0) & (i < nseg), j, t - pts[j], np.clip(i, 0, nseg)

    def upto(m, cum, where_t):  # time of the set in (-inf, t)
        before, inseg, j, off, ci = where_t
        return np.where(before, 0, cum[ci] + np.where(inseg & m[j], off, 0))

    at_a, at_b = at(wa), at(wb)
    out = []
    for m in (s | (a & ~c), c & ~s, a & c & ~s, h & ~(c | s | a)):
        m = m[:-1]
        cum = np.concatenate([[0], np.cumsum(np.where(m, length, 0))])
        out.append(upto(m, cum, at_b) - upto(m, cum, at_a))
    return tuple(out)


def overlap(table, steps: pl.DataFrame | None, *, keep_ops: bool = False, steps_only: bool = False) -> Overlap:
    """Overlap of ``table`` (an OpTable or the wide op frame: host, device, module, op_name,
    op_kind, shape, hlo_text, start_ps, duration_ps) within the step windows ``steps`` (the
    step anatomy's frame: host, device, step, start_ps, duration_ps; ``in_window`` rows only
    when that column exists; None or empty: one window per device over its ops). Never raises
    on an empty table (empty frames).

    ``Overlap.ops`` is built on first use: from the per-op arrays kept with the result when
    ``keep_ops``, else (the default: those arrays are as long as the trace's async copies and
    most reports never read them) by computing this overlap again from ``table`` and ``steps``,
    which the caller keeps unchanged. ``steps_only``: ``Overlap.steps`` alone (populations
    empty, summary and notes not computed, no per-op frame: what a fleet host's partial reads)."""
    given = steps
    ev = _Events(table)
    cols = ["host", "device", "step", "start_ps", "duration_ps"]
    if steps is not None and "in_window" in steps.columns:
        steps = steps.select(cols + ["in_window"]).filter(pl.col("in_window"))
    wins = {}
    if ev.any_comm and steps is not None and steps.height:
        w = steps.select(cols)
        wd = _row_devices(w, ev.devices)
        order = np.argsort(wd, kind="stable")
        wa_all, wl_all, ws_all = _codes(w["start_ps"])[order], _codes(w["duration_ps"])[order], _codes(w["step"])[order]
        wd = wd[order]
        for d in np.unique(wd[wd >= 0]):
            lo, hi = np.searchsorted(wd, d, "left"), np.searchsorted(wd, d, "right")
            wins[int(d)] = (wa_all[lo:hi], wa_all[lo:hi] + wl_all[lo:hi], ws_all[lo:hi])
    rec = _comm_ops(ev) if ev.any_comm else None
    hid_all = np.zeros(len(rec["attr"]) if rec else 0, dtype=np.int64)
    cuts = np.searchsorted(rec["dev"], np.arange(ev.devices.height + 1)) if rec else None
    rec_cls = ev.cls_of[rec["attr"]] if rec else None
    step_cols = {k: [] for k in ("dev", "step", "start_ps", "step_ps", "compute_ps", "exposed_ps", "hidden_ps",
                                 "host_ps")}
    empty = (np.zeros(0, dtype=np.int64),) * 2
    # per record: its class and whether it is synchronous, as one code (class * 2 + sync)
    rec_code = (rec_cls * 2 + rec["sync"]).astype(np.int8) if rec else None
    for d, sl in (ev.slices if ev.any_comm else []):
        cu = _union_where(ev.start[sl], None, ev.dur[sl], ev.cls[sl], _COMPUTE)
        sy = asy = ho = empty
        lo, hi = int(cuts[d]), int(cuts[d + 1])
        if hi > lo:
            t0, t1, sync = rec["start"][lo:hi], rec["end"][lo:hi], rec["sync"][lo:hi]
            hid_all[lo:hi] = np.where(sync, 0, _covered(cu[0], cu[1], t0, t1))
            code = rec_code[lo:hi]
            sy, asy, ho = (_union_where(t0, t1, None, code, lut) for lut in (_SYNC_COLL, _ASYNC_COLL, _HOST))
        if d in wins:
            wa, wb, wstep = wins[d]
        else:
            s = ev.start[sl]
            wa, wb, wstep = np.array([s.min()]), np.array([(s + ev.dur[sl]).max()]), np.array([0])
        exposed, compute, hidden, host_only = _partition(cu, sy, asy, ho, wa, wb)
        for k, v in (("dev", np.full(len(wa), d)), ("step", wstep), ("start_ps", wa), ("step_ps", wb - wa),
                     ("compute_ps", compute), ("exposed_ps", exposed), ("hidden_ps", hidden), ("host_ps", host_only)):
            step_cols[k].append(np.asarray(v, dtype=np.int64))
    ev.attr = ev.start = ev.dur = ev.dev = ev.cls = None  # the per-event arrays are done with
    build = None
    if rec is not None and len(rec["attr"]) and not keep_ops:
        def build() -> pl.DataFrame:  # the per-op frame, on first use of Overlap.ops: computed again
            return overlap(table, given, keep_ops=True).ops
    elif rec is not None and len(rec["attr"]):
        names = ev.attrs.select("host", "device", "module", "op_name", "op_kind", "shape", pl.col("_cls").alias("kind"))
        r_attr, r_sync, r_start, r_end, r_wait = rec["attr"], rec["sync"], rec["start"], rec["end"], rec["wait"]

        def build() -> pl.DataFrame:  # the per-op frame, on first use of Overlap.ops
            inflight = r_end - r_start
            return names[pl.Series(r_attr)].with_columns(
                pl.Series("sync", r_sync), pl.Series("start_ps", r_start), pl.Series("end_ps", r_end),
                pl.Series("in_flight_ps", inflight), pl.Series("hidden_ps", hid_all),
                pl.Series("exposed_ps", inflight - hid_all), pl.Series("wait_at_done_ps", r_wait)
            ).select(list(OPS_SCHEMA)).cast(OPS_SCHEMA)
    if step_cols["dev"]:
        sc = {k: np.concatenate(v) for k, v in step_cols.items()}
        span = sc["step_ps"]
        # distinct (host, device) and (host, step) of the step rows, on their integer codes
        h, stp = _keyed(ev.devices, ["host"])[sc["dev"]], sc["step"]
        o = np.lexsort((stp, h))
        h, stp = h[o], stp[o]
        # distinct devices: their indices (0 .. devices - 1) counted, no sort
        counts = (1 + int(((h[1:] != h[:-1]) | (stp[1:] != stp[:-1])).sum()),
                  int(np.count_nonzero(np.bincount(sc["dev"]))))
        st_df = ev.devices[pl.Series(sc.pop("dev"))].with_columns(
            *[pl.Series(k, v) for k, v in sc.items()],
            pl.Series("idle_ps", span - sc["compute_ps"] - sc["exposed_ps"] - sc["host_ps"]),
            pl.Series("critical_share", np.where(span > 0, sc["exposed_ps"] / np.maximum(span, 1), np.nan))
        ).select(list(STEPS_SCHEMA)).cast(STEPS_SCHEMA).with_columns(pl.col("critical_share").fill_nan(None))
    else:
        st_df, counts = pl.DataFrame(schema=STEPS_SCHEMA), None
    if steps_only:
        return Overlap(populations=pl.DataFrame(), steps=st_df, summary={})
    return _finish(build, st_df, rec, hid_all, ev, counts)


def _finish(build, st_df: pl.DataFrame, rec: dict | None, hid_all: np.ndarray, ev: _Events,
            counts: tuple | None = None) -> Overlap:
    """The :class:`Overlap` of its per-op arrays and per-step frame (``build``: makes the per-op
    frame, None when there is no op; ``rec``: the per-op arrays of :func:`_comm_ops`, ``hid_all``
    their hidden times, ``ev`` their events; ``counts``: the distinct (host, step) and (host,
    device) of ``st_df`` when the caller counted them): populations (summed per description,
    then per (kind, op_kind, op_name, shape) in order of first appearance), summary, notes."""
    keys = ["kind", "op_kind", "op_name", "shape"]
    sums = ["in_flight_ps", "hidden_ps", "exposed_ps", "wait_at_done_ps"]
    n_ops = len(rec["attr"]) if build is not None else 0
    if n_ops:
        # per description (attr id): its first record, records, whether all are synchronous,
        # exact int64 sums; counted over the few descriptions, no frame of the records
        size = int(rec["attr"].max()) + 1
        cnt, first, n_sync, got = _record_sums(rec, hid_all, size)
        ids = np.flatnonzero(cnt)
        got = {c: v[ids] for c, v in got.items()}
        got["exposed_ps"] = got["in_flight_ps"] - got["hidden_ps"]  # exact sums: the sums of the differences
        per = (pl.DataFrame({"attr": pl.Series(ids, dtype=pl.Int64), "_first": pl.Series(first[ids], dtype=pl.UInt32),
                             "n": pl.Series(cnt[ids], dtype=pl.UInt32), "sync": pl.Series(n_sync[ids] == cnt[ids]),
                             **{c: pl.Series(c, got[c], dtype=pl.Int64) for c in sums}})
               .join(ev.attrs.select(pl.col("attr").cast(pl.Int64), pl.col("_cls").alias("kind"), "op_kind", "op_name",
                                     "shape"), on="attr", how="left")
               .sort("_first"))
    else:
        per = pl.DataFrame(schema=OPS_SCHEMA).select(*keys, "sync", *sums).with_columns(
            pl.lit(0, dtype=pl.UInt32).alias("n"))
    pops = (per.group_by(keys, maintain_order=True)
            .agg(pl.col("n").sum(), pl.col("sync").all(), *[pl.col(c).sum() for c in sums])
            .with_columns((pl.col("hidden_ps") / pl.col("in_flight_ps")).alias("hidden_share"),
                          pl.col("kind").replace_strict({"collective": 0, "host transfer": 1}, default=2,
                                                        return_dtype=pl.Int8).alias("_order"))
            .sort(["_order", "in_flight_ps"], descending=[False, True], maintain_order=True).drop("_order"))
    tot = {k: int(st_df[k].sum()) if st_df.height else 0
           for k in ("step_ps", "compute_ps", "exposed_ps", "hidden_ps", "host_ps", "idle_ps")}
    if n_ops:
        coll = ids[ev.cls_of[ids] == _CLS_CODES["collective"]]  # per description, no pass over the records
        n_coll, coll_sync = int(cnt[coll].sum()), bool((n_sync[coll] == cnt[coll]).all())
        n_async, any_async = n_ops - int(n_sync.sum()), bool((n_sync[coll] < cnt[coll]).any())
    else:
        n_coll, coll_sync, n_async, any_async = 0, True, 0, False
    summary = dict(tot, exposed_share=tot["exposed_ps"] / tot["step_ps"] if tot["step_ps"] else None,
                   n_steps=(counts[0] if counts else st_df.select("host", "step").n_unique()) if st_df.height else 0,
                   n_devices=(counts[1] if counts else st_df.select("host", "device").n_unique()) if st_df.height else 0,
                   collectives=n_coll, async_ops=n_async, synchronous=bool(n_coll) and coll_sync)
    notes = []
    if summary["synchronous"]:
        notes.append("every collective here is synchronous (one event, e.g. XLA:CPU's blocking rendezvous): "
                     "its whole time counts as exposed communication, none as hidden")
    if not any_async and not n_coll:
        notes.append("no collective in the trace")
    return Overlap(populations=pops, steps=st_df, summary=summary, notes=notes, n_ops=n_ops, _build=build)


def _record_sums(rec: dict, hid_all: np.ndarray, size: int) -> tuple:
    """Per attr id in [0, size) of the records ``rec`` (:func:`_comm_ops`; ``hid_all`` their
    hidden times): (records, first record (``len`` when none), synchronous records,
    {"in_flight_ps", "hidden_ps", "wait_at_done_ps": exact int64 sums}), all int64 arrays. In
    C (``record_sums``) when built, else bincounts."""
    from traceview.model.optable import first_positions, int_bincount

    if _fast is not None and rec["attr"].dtype == np.uint32:
        out = [np.empty(size, dtype=np.int64) for _ in range(6)]
        if _fast.record_sums(np.ascontiguousarray(rec["attr"]), np.ascontiguousarray(rec["sync"]).view(np.uint8),
                             *(np.ascontiguousarray(x, dtype=np.int64) for x in (rec["start"], rec["end"], hid_all,
                                                                                 rec["wait"])), *out):
            return out[0], out[1], out[2], {"in_flight_ps": out[3], "hidden_ps": out[4], "wait_at_done_ps": out[5]}
    a = rec["attr"].astype(np.int64)
    cnt = np.bincount(a, minlength=size)
    first = first_positions(a, size)
    n_sync = np.bincount(a[rec["sync"]], minlength=size)
    inflight = (rec["end"] - rec["start"]).astype(np.int64, copy=False)
    got = {"in_flight_ps": int_bincount(a, inflight, size)}
    del inflight
    got["hidden_ps"] = int_bincount(a, hid_all.astype(np.int64, copy=False), size)
    got["wait_at_done_ps"] = int_bincount(a, rec["wait"].astype(np.int64, copy=False), size)
    return cnt, first, n_sync, got


def profile_overlap(prof, steps=None) -> Overlap:
    """:func:`overlap` of a profile within its step anatomy's windows (``steps``: a
    :class:`~traceview.analysis.steps.anatomy.StepAnatomy`, default the profile's: then the result is
    the profile's shared one, :func:`traceview.analysis.derived.overlap`)."""
    if steps is None:
        from traceview.analysis import derived

        return derived.overlap(prof)
    return overlap(prof.table, steps.steps)
