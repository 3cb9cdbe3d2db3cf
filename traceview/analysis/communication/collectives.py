"""Communication as its own family: collectives with their bandwidth model, and host transfers.

**Collectives** (all-reduce, all-gather, reduce-scatter, all-to-all, ragged-all-to-all,
collective-permute, collective-broadcast, send/recv and their ``-start``/``-done`` halves) are
keyed by (kind, shape, replica groups or source-target pairs, channel), attributes read off the
HLO text by :mod:`traceview.model.collective_hlo`. Per key: the data size S (bytes), the bytes
each participant sends (and receives), the time of one execution, algorithm bandwidth and bus
bandwidth, with the conventions of nccl-tests (doc/PERFORMANCE.md in NVIDIA's nccl-tests):

- algbw = S / t, with S the collective's full buffer: the all-reduce's operand, the
  all-gather's *output* (operand x n), the reduce-scatter's *input*, the all-to-all's operand,
  the permute's / broadcast's / send's operand;
- busbw = algbw x factor, factor = 2(n-1)/n for all-reduce, (n-1)/n for all-gather,
  reduce-scatter and all-to-all, 1 for collective-permute, collective-broadcast, send and recv;
- bytes each participant sends = receives = S x factor (the ring / pairwise algorithms those
  factors stand for), so busbw = bytes sent / t.

n is the group size read from the HLO (``replica_groups``, explicit or iota form); 2 for a
permute pair or send/recv. ragged-all-to-all moves data-dependent sizes: its bytes are unknown.

t is one execution's time: a synchronous collective's op duration; for an async pair, from the
``-start``'s start to the matching ``-done``'s end on the same device (the time in flight, an
upper bound on the transfer time; the ``-done`` halves are matched to their ``-start`` by the
operand named in their HLO text, in time order). Rates use the median over executions. busbw
is compared with the chip's interconnect peak one way (:mod:`traceview.analysis.hardware.interconnect`);
unknown chip or figure: the fraction is null and the notes say so. Collectives never enter
the HBM roofline (:mod:`traceview.analysis.ops.roofline` gives them ``bound_by`` "collective" or,
for the async halves, "async").

**Host transfers**: ``copy-start``/``copy-done`` pairs whose source or destination lies in host
memory (``S(5)``), host-offload custom calls (``MoveToHost``/``MoveToDevice``) and host
send/recv, per (direction, mechanism, shape): bytes per execution, time in flight, achieved
bandwidth (bytes / median time in flight) against the host link one way where the chip's link is
known. Times in ps, sizes in bytes, rates in bytes/s.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import polars as pl

from traceview.analysis.hardware.interconnect import Link, find_link
from traceview.analysis.communication.overlap import _match, _orphans
from traceview.model.collective_hlo import collective_attrs, host_transfer
from traceview.model.shapes import parse_instruction

try:  # optional C accelerators
    from traceview.analysis import _passes as _fast
    from traceview.model import _passes as _model_fast
except ImportError:  # pragma: no cover - exercised when the extension is absent
    _fast = _model_fast = None

#: bus-bandwidth factor per kind as a function of the group size n (nccl-tests doc/PERFORMANCE.md)
BUS_FACTOR = {
    "all-reduce": lambda n: 2 * (n - 1) / n,
    "all-gather": lambda n: (n - 1) / n,
    "reduce-scatter": lambda n: (n - 1) / n,
    "all-to-all": lambda n: (n - 1) / n,
    "collective-permute": lambda n: 1.0,
    "collective-broadcast": lambda n: 1.0,
    "send": lambda n: 1.0,
    "recv": lambda n: 1.0,
}

COLLECTIVES_SCHEMA = {
    "kind": pl.Utf8, "async": pl.Boolean, "shape": pl.Utf8, "groups": pl.Utf8, "channel_id": pl.Int64,
    "group_size": pl.Int64, "n_groups": pl.Int64, "ops": pl.List(pl.Utf8), "modules": pl.List(pl.Utf8),
    "devices": pl.Int64, "executions": pl.Int64, "data_bytes": pl.Float64, "bytes_sent": pl.Float64,
    "bytes_received": pl.Float64, "bus_factor": pl.Float64, "time_ps": pl.Float64, "mean_ps": pl.Float64,
    "total_ps": pl.Int64, "algbw": pl.Float64, "busbw": pl.Float64, "link_peak": pl.Float64,
    "frac_link_peak": pl.Float64, "time_basis": pl.Utf8, "note": pl.Utf8,
}

HOST_SCHEMA = {
    "direction": pl.Utf8, "mechanism": pl.Utf8, "shape": pl.Utf8, "ops": pl.List(pl.Utf8),
    "modules": pl.List(pl.Utf8), "devices": pl.Int64, "executions": pl.Int64, "bytes": pl.Float64,
    "time_ps": pl.Float64, "total_ps": pl.Int64, "op_time_ps": pl.Int64, "bandwidth": pl.Float64,
    "direction_bandwidth": pl.Float64, "link_peak": pl.Float64, "frac_link_peak": pl.Float64,
}


@dataclass
class Communication:
    """``collectives`` (:data:`COLLECTIVES_SCHEMA`, one row per (kind, shape, groups, channel),
    by total time) and ``host_transfers`` (:data:`HOST_SCHEMA`, one row per (direction,
    mechanism, shape)); ``link`` (the chip's :class:`~traceview.analysis.hardware.interconnect.Link` or
    None); ``op_time_ps`` (all op self time); ``collective_ps`` / ``host_ps`` (self time of the
    collective / host-transfer ops, both halves of async pairs); ``host_module_share`` (host
    transfer self time over the op time of the modules holding them, None without any);
    ``notes`` (one-line statements: no collectives, unknown peaks, stress tests)."""

    collectives: pl.DataFrame
    host_transfers: pl.DataFrame
    link: Link | None
    op_time_ps: int
    collective_ps: int
    host_ps: int
    host_module_share: float | None = None
    notes: list = field(default_factory=list)

    @property
    def collective_share(self) -> float | None:
        return self.collective_ps / self.op_time_ps if self.op_time_ps else None

    @property
    def host_share(self) -> float | None:
        return self.host_ps / self.op_time_ps if self.op_time_ps else None

    def to_dict(self) -> dict:
        """Plain data for JSON: collectives and host_transfers (lists of row dicts), then
        :meth:`summary`."""
        return {"collectives": self.collectives.to_dicts(), "host_transfers": self.host_transfers.to_dicts(),
                **self.summary()}

    def summary(self) -> dict:
        """Everything but the two tables: link (chip, interconnect, bidirectional,
        per_direction, host_link, host_per_direction, source; None when the chip is unknown),
        op_time_ps, collective_ps, collective_share, host_ps, host_share, host_module_share,
        notes."""
        ln = self.link
        return {
            "link": None if ln is None else {
                "chip": ln.chip, "interconnect": ln.interconnect, "bidirectional": ln.bidirectional,
                "per_direction": ln.per_direction, "host_link": ln.host_link,
                "host_per_direction": ln.host_per_direction, "source": ln.source},
            "op_time_ps": self.op_time_ps, "collective_ps": self.collective_ps,
            "collective_share": self.collective_share, "host_ps": self.host_ps, "host_share": self.host_share,
            "host_module_share": self.host_module_share, "notes": list(self.notes)}


_EVENT_COLS = ["host", "device", "module", "program_id", "op_name", "op_kind", "shape", "hlo_text",
               "start_ps", "duration_ps", "self_ps"]
_KINDS_RX = (r"^(?:all-reduce|all-gather|reduce-scatter|all-to-all|ragged-all-to-all|collective-permute"
             r"|collective-broadcast|send|recv)(?:-start|-done|-update)?(?:\.\d+)?$")


def _data_bytes(kind: str, hlo_text: str, group_size: int | None) -> float | None:
    """S of the nccl-tests convention (see the module docstring) from the instruction's text."""
    ins = parse_instruction(hlo_text or "")
    if ins is None or kind == "ragged-all-to-all":
        return None
    if kind == "recv":
        res = ins.result
        arr = res.members[0] if res is not None and res.is_tuple and res.members else res
        return float(arr.bytes) if arr is not None else None
    ops = [o for o in ins.operands if o is not None]
    if not ops:
        return None
    if kind in ("send",):
        return float(ops[0].bytes)
    size = float(sum(o.bytes for o in ops))
    if kind == "all-gather":
        return size * group_size if group_size else None
    return size


def _pair_async(ev: pl.DataFrame, attrs: pl.DataFrame) -> pl.DataFrame:
    """Match ``-done`` events to their ``-start`` (same host, device, program; the done's operand
    names the start; k-th done with the k-th start in time order). ``ev``: events with ``attr``,
    ``start_ps``, ``duration_ps``, ``self_ps`` (any other columns are kept); ``attrs``: their
    descriptions (attr, host, device, program_id, op_name, op_kind, hlo_text). Returns the
    non-done events in start order with ``span_ps`` (start's start to done's end; null when
    unmatched) and ``done_self_ps`` (0 when unmatched). Keys are computed once per description;
    the events are matched by sorts and searches (:func:`_pair_index`)."""
    si, span, valid, dself = _pair_spans(ev, attrs)
    return ev[pl.Series(si)].with_columns(pl.when(pl.lit(pl.Series(valid))).then(pl.lit(pl.Series(span))).alias("span_ps"),
                                          pl.lit(pl.Series(dself)).alias("done_self_ps"))


def _pair_spans(ev: pl.DataFrame, attrs: pl.DataFrame, keep=None, ordered: bool = True, counts=None) -> tuple:
    """The pairing of :func:`_pair_async` as int64/bool arrays over the rows of ``ev`` (only
    the rows whose attr id ``keep`` (bool per attr id) marks, when given): (the non-done rows,
    in start order, or in row order when not ``ordered``; span_ps per such row (0 where not
    valid), valid (matched with both times known), done_self_ps (0 when unmatched)). ``counts``: the
    events per attr id (``np.bincount`` of the attr column) when the caller has them."""
    import numpy as np

    from traceview.analysis.communication.overlap import _codes

    start, dur = ev["start_ps"], ev["duration_ps"]
    t_all = _codes(start, np.iinfo(np.int64).min)  # nulls first, as polars sorts them
    si, d = _pair_index(ev["attr"].to_numpy(), t_all, attrs, keep, ordered, counts)
    if _fast is not None and not (start.null_count() or dur.null_count()):  # one C pass over the pairs
        span, valid, dself = np.empty(len(si), dtype=np.int64), np.empty(len(si), dtype=bool), np.empty(len(si), dtype=np.int64)
        if _fast.pair_spans(np.ascontiguousarray(si, dtype=np.int64), np.ascontiguousarray(d, dtype=np.int64), t_all,
                            np.ascontiguousarray(_codes(dur)), np.ascontiguousarray(_codes(ev["self_ps"], 0)),
                            span, valid.view(np.uint8), dself):
            return si, span, valid, dself
    span = np.zeros(len(si), dtype=np.int64)
    valid = np.zeros(len(si), dtype=bool)
    dself = np.zeros(len(si), dtype=np.int64)
    hit = d >= 0
    if hit.any():
        d, s_ = d[hit], si[hit]
        if start.null_count() or dur.null_count():
            end = start + dur
            dnull = start.is_null().to_numpy()[s_]
            if end.null_count():
                dnull = dnull | end.is_null().to_numpy()[d]
            span[hit] = np.where(dnull, 0, _codes(end, 0)[d] - t_all[s_])
            valid[hit] = ~dnull
        else:  # start + duration, as polars adds them (wrapping)
            span[hit] = t_all[d] + _codes(dur)[d] - t_all[s_]
            valid[hit] = True
        dself[hit] = _codes(ev["self_ps"], 0)[d]
    return si, span, valid, dself


def _pair_index(a, t, attrs: pl.DataFrame, keep=None, ordered: bool = True, counts=None) -> tuple:
    """(the indices of the non-done events of ``a`` (attr ids) in time order ``t`` (stable;
    in event order when not ``ordered``), per such event the index of its done event or -1):
    the matching of :func:`_pair_async`. ``keep`` (bool per attr id, optional): only the
    events of those descriptions take part (the others are neither starts nor dones).
    ``counts``: ``np.bincount(a)`` when the caller has it."""
    import numpy as np

    from traceview.analysis.communication.overlap import _keyed

    cnt = np.bincount(a) if counts is None else counts
    present = cnt > 0
    if keep is not None:
        present &= keep[:len(cnt)]
    ua = np.flatnonzero(present)  # the attr ids taking part, ascending
    used = attrs.filter(pl.col("attr").is_in(pl.Series(ua, dtype=attrs.schema["attr"]).implode()))
    done_of = used.select((pl.col("op_kind").fill_null("").str.ends_with("-done")
                           | pl.col("op_name").str.contains(r"-done(\.\d+)?$")).fill_null(False))
    used = used.with_columns(done_of.to_series().alias("_done"))
    pair = [_done_operand(t_, n) if d else n for t_, n, d in used.select("hlo_text", "op_name", "_done").iter_rows()]
    used = used.with_columns(pl.Series("_pair", pair, dtype=pl.Utf8))
    size = max(attrs.height, len(cnt)) + 1
    lut_key = np.full(size, -1, dtype=np.int64)
    lut_done = np.zeros(size, dtype=bool)
    ua = used["attr"].to_numpy().astype(np.int64)
    lut_key[ua] = _keyed(used, ["host", "device", "program_id", "_pair"])
    lut_done[ua] = used["_done"].to_numpy()
    if keep is not None:  # the others: dones of no key, which take no part in C below
        kept = np.zeros(size, dtype=bool)
        kept[:len(keep)] = keep
        lut_done |= ~kept
    if _fast is not None:  # one C pass when each key's events are already in time order
        n_si = int(cnt[~lut_done[:len(cnt)]].sum())
        si, d = np.empty(n_si, dtype=np.int64), np.empty(n_si, dtype=np.int64)
        if _fast.pair_by_key(np.ascontiguousarray(a, dtype=np.uint32), np.ascontiguousarray(t, dtype=np.int64),
                             lut_key, lut_done.view(np.uint8), si, d) == n_si:
            if not ordered:
                return si, d
            o = _time_order(t[si])
            return si[o], d[o]
    rows = None
    if keep is not None:
        rows = np.flatnonzero(kept[a])
        a, t = a[rows], t[rows]
    key, is_done = lut_key[a], lut_done[a]
    si, di = np.flatnonzero(~is_done), np.flatnonzero(is_done)
    si = si[_time_order(t[si])]
    di = di[_time_order(t[di])]
    ks, kd = key[si], key[di]
    kd[_orphans(ks, (t[si], si), kd, (t[di], di))] = -1  # its start was not captured
    match = _match(ks, kd)
    hit = match >= 0
    match[hit] = di[match[hit]]  # no done at all: nothing to index
    if rows is not None:
        si = rows[si]
        match[hit] = rows[match[hit]]
    return si, match


def _time_order(t):
    """``np.argsort(t, kind="stable")``, skipped when ``t`` is already ascending."""
    import numpy as np

    if len(t) < 2 or bool((t[1:] >= t[:-1]).all()):
        return np.arange(len(t))
    return np.argsort(t, kind="stable")


def _done_operand(hlo_text: str, op_name: str) -> str:
    """The ``-start`` a ``-done`` awaits: its first operand, else its name with ``-start``."""
    ins = parse_instruction(hlo_text or "")
    if ins is not None and ins.operand_names:
        return ins.operand_names[0]
    return op_name.replace("-done", "-start")


def communication(prof, peaks=None) -> Communication:
    """The :class:`Communication` of a profile (a :class:`~traceview.model.profiledata.ProfileData`);
    ``peaks`` (:class:`~traceview.analysis.hardware.peaks.Peaks`) names the chip whose link peaks apply
    (default: identified from the devices' type)."""
    table = prof.table
    op_time = int(table.total_self_ps()) if table.height else 0
    link = _link(prof, peaks)
    notes: list[str] = []
    empty = Communication(pl.DataFrame(schema=COLLECTIVES_SCHEMA), pl.DataFrame(schema=HOST_SCHEMA), link,
                          op_time, 0, 0, None, notes)
    if not table.height:
        notes.append("no op events: no collectives and no host transfers")
        return empty
    is_coll = pl.col("op_kind").fill_null("").str.contains(_KINDS_RX) | pl.col("op_name").str.contains(_KINDS_RX)
    is_copy = pl.col("op_kind").fill_null("").is_in(["copy-start", "copy-done", "custom-call"]) & (
        pl.col("hlo_text").str.contains(r"S\(5\)|MoveTo(?:Host|Device)") | pl.col("op_kind").is_in(["copy-done"]))
    coll_ev = table.filter(is_coll).frame(["attr"] + _EVENT_COLS)
    cols = _collectives(coll_ev, table.attrs, link, notes)
    host_attrs = table.attrs.filter(is_copy | (is_coll & pl.col("hlo_text").str.contains("is_host_transfer=true")))
    hosts, host_ps, host_modules = _host_transfers(table, host_attrs["attr"], link, notes)
    coll_ps = int(coll_ev.filter(~pl.col("hlo_text").str.contains("is_host_transfer=true"))["self_ps"].sum() or 0)
    module_share = None
    if host_ps and host_modules:
        per = table.collapse()  # self time per description, shared with the by-shape table
        mod_time = int(per.filter(pl.col("module").is_in(sorted(host_modules)))["self_ps"].sum() or 0)
        module_share = host_ps / mod_time if mod_time else None
    if cols.height == 0:
        notes.append("no collectives in this trace (no all-reduce, all-gather, reduce-scatter, all-to-all, "
                     "collective-permute, collective-broadcast or send/recv op ran)")
    if hosts.height and op_time and host_ps / op_time >= 0.5:
        notes.append(f"host-offload stress: host transfers (copies across host memory S(5)) take "
                     f"{host_ps / op_time:.1%} of op time"
                     + (f", {module_share:.1%} of the op time of {', '.join(sorted(host_modules))}" if module_share else ""))
    return Communication(cols, hosts, link, op_time, coll_ps, host_ps, module_share, notes)


def _link(prof, peaks) -> Link | None:
    chip = getattr(peaks, "chip", "") if peaks is not None else ""
    types = [d.device_type for d in prof.used_devices() if getattr(d, "device_type", "")]
    return find_link(types[0] if types else "", chip or None)


def _collectives(ev: pl.DataFrame, attrs: pl.DataFrame, link: Link | None, notes: list) -> pl.DataFrame:
    if not ev.height:
        return pl.DataFrame(schema=COLLECTIVES_SCHEMA)
    ev = ev.filter(~pl.col("hlo_text").str.contains("is_host_transfer=true"))
    # attributes per distinct (op_kind, op_name, hlo_text): few, whatever the event count
    descs = ev.select("op_kind", "op_name", "hlo_text").unique()
    rows = []
    for kind_txt, name, text in descs.iter_rows():
        a = collective_attrs(kind_txt or "", text or "", name)
        if a is None:
            continue
        rows.append({"op_kind": kind_txt, "op_name": name, "hlo_text": text, "kind": a.kind, "phase": a.phase,
                     "groups": a.groups_text(), "channel_id": a.channel_id, "group_size": a.group_size,
                     "n_groups": len(a.pairs) if a.pairs is not None else (len(a.groups) if a.groups else None),
                     "data_bytes": _data_bytes(a.kind, text, a.group_size)})
    if not rows:
        return pl.DataFrame(schema=COLLECTIVES_SCHEMA)
    attrs = pl.DataFrame(rows, schema={"op_kind": pl.Utf8, "op_name": pl.Utf8, "hlo_text": pl.Utf8, "kind": pl.Utf8,
                                       "phase": pl.Utf8, "groups": pl.Utf8, "channel_id": pl.Int64,
                                       "group_size": pl.Int64, "n_groups": pl.Int64, "data_bytes": pl.Float64})
    ev = ev.join(attrs, on=["op_kind", "op_name", "hlo_text"], how="inner", nulls_equal=True)
    sync = ev.filter(pl.col("phase") == "sync").with_columns(
        pl.col("duration_ps").alias("t_ps"), pl.col("self_ps").alias("all_self_ps"), pl.lit(False).alias("async"))
    parts = [sync.select(_REC)] if sync.height else []
    asy = ev.filter(pl.col("phase") != "sync")
    if asy.height:
        paired = _pair_async(asy.filter(pl.col("phase") != "update"), attrs)
        paired = paired.filter(pl.col("phase") == "start").with_columns(
            pl.col("span_ps").alias("t_ps"), (pl.col("self_ps") + pl.col("done_self_ps")).alias("all_self_ps"),
            pl.lit(True).alias("async"))
        if paired.height:
            parts.append(paired.select(_REC))
    if not parts:
        return pl.DataFrame(schema=COLLECTIVES_SCHEMA)
    rec = pl.concat(parts, how="vertical_relaxed")
    keys = ["kind", "async", "shape", "groups", "channel_id"]
    g = rec.group_by(keys, maintain_order=True).agg(
        pl.col("group_size").first(), pl.col("n_groups").first(),
        pl.col("op_name").unique().sort().alias("ops"), pl.col("module").unique().sort().alias("modules"),
        pl.struct("host", "device").n_unique().cast(pl.Int64).alias("devices"),
        pl.len().cast(pl.Int64).alias("executions"), pl.col("data_bytes").first(),
        pl.col("t_ps").median().alias("time_ps"), pl.col("t_ps").mean().alias("mean_ps"),
        pl.col("all_self_ps").sum().cast(pl.Int64).alias("total_ps"))
    factor = [(BUS_FACTOR[k](n) if k in BUS_FACTOR and n else None) for k, n in zip(g["kind"], g["group_size"])]
    g = g.with_columns(pl.Series("bus_factor", factor, dtype=pl.Float64))
    peak = link.per_direction if link is not None else None
    secs = pl.col("time_ps") * 1e-12
    g = g.with_columns((pl.col("data_bytes") * pl.col("bus_factor")).alias("bytes_sent")).with_columns(
        pl.col("bytes_sent").alias("bytes_received"),
        pl.when(secs > 0).then(pl.col("data_bytes") / secs).alias("algbw"),
        pl.when(secs > 0).then(pl.col("bytes_sent") / secs).alias("busbw"),
        pl.lit(peak, pl.Float64).alias("link_peak"),
        pl.when(pl.col("async")).then(pl.lit("start..done in flight")).otherwise(pl.lit("op duration")).alias("time_basis"),
        pl.when(pl.col("kind") == "ragged-all-to-all").then(pl.lit("data-dependent sizes: bytes unknown"))
        .when(pl.col("group_size").is_null()).then(pl.lit("replica_groups={} (all replicas): group size not in the HLO"))
        .otherwise(pl.lit("")).alias("note"))
    g = g.with_columns((pl.col("busbw") / pl.col("link_peak")).alias("frac_link_peak"))
    n_dev = rec.select(pl.struct("host", "device").n_unique()).item()
    for kind, groups in g.select("kind", "groups").unique(maintain_order=True).iter_rows():
        ids = [int(x) for x in re.findall(r"\d+", groups or "")]
        if ids and max(ids) + 1 > n_dev:
            notes.append(f"{kind} replica groups {groups} name {max(ids) + 1} device ids; the profile shows "
                         f"{n_dev} device(s) running it (the other participants are not in this profile)")
    if peak is None and g.height:
        notes.append("interconnect peak unknown for this chip" + (f" ({link.source})" if link is not None else "")
                     + ": bus bandwidth is not compared with a peak")
    return g.select(list(COLLECTIVES_SCHEMA)).sort(["total_ps", "kind", "shape", "groups", "channel_id", "async"],
                                                   descending=[True, False, False, False, False, False], nulls_last=True)


_REC = ["host", "device", "module", "op_name", "kind", "async", "shape", "groups", "channel_id", "group_size",
        "n_groups", "data_bytes", "t_ps", "all_self_ps"]


def _host_transfers(table, candidates: pl.Series, link: Link | None, notes: list):
    """(:data:`HOST_SCHEMA` frame, host transfer op time in ps, modules holding them) of the
    events of ``table`` (an OpTable) whose descriptions are among ``candidates`` (attr ids of
    the candidate copies, custom calls and host send/recv). Transfers are described once per
    op description; an async copy's time is its start paired with its done
    (:func:`_pair_async`). Per event only lookups by attr id, gathers and sorts over the
    table's columns (no copy of its events); the grouping keys come from the descriptions."""
    import numpy as np

    from traceview.analysis.communication.overlap import _codes, _keyed

    schema_empty = pl.DataFrame(schema=HOST_SCHEMA)
    ev = table.events
    if not ev.height or not len(candidates):
        return schema_empty, 0, set()
    attrs = table.attrs
    a = ev["attr"].to_numpy()  # uint32, no copy
    counts = _attr_counts(a, attrs.height)  # events per attr id, shared with the pairing below
    present = np.zeros(max(attrs.height, len(counts)), dtype=bool)
    present[:len(counts)] = counts > 0
    cand_attr = np.zeros(len(present), dtype=bool)
    cand_attr[_codes(candidates)] = True
    used = attrs.join(pl.DataFrame({"attr": pl.Series(np.flatnonzero(present & cand_attr), dtype=attrs.schema["attr"])}),
                      on="attr", how="semi")
    del present, cand_attr
    done = used["op_kind"].fill_null("").str.ends_with("-done").to_numpy()
    seen: dict = {}
    rows = []
    for attr, kind_txt, text in used.filter(pl.Series(~done)).select("attr", "op_kind", "hlo_text").iter_rows():
        k = (kind_txt, text)
        if k not in seen:
            seen[k] = host_transfer(kind_txt or "", text or "")
        h = seen[k]
        if h is not None:
            rows.append({"attr": attr, "direction": h.direction, "mechanism": h.mechanism,
                         "bytes": None if h.bytes is None else float(h.bytes)})
    if not rows:
        return schema_empty, 0, set()
    info = pl.DataFrame(rows, schema={"attr": pl.UInt32, "direction": pl.Utf8, "mechanism": pl.Utf8,
                                      "bytes": pl.Float64}).join(
        attrs.select("attr", "op_kind", "op_name", "shape"), on="attr", how="left")
    info = info.with_columns(pl.Series("_g", _keyed(info, ["direction", "mechanism", "shape"])))
    start_names = set(info["op_name"].to_list())
    dones = used.filter(pl.Series(done)).select("attr", "hlo_text", "op_name")
    done_ok = [a_ for a_, t, n in dones.iter_rows() if _done_operand(t, n) in start_names]
    # per attr id: its transfer group, bytes, direction; whether it is an async copy's start
    size = max(int(attrs["attr"].max()), int(a.max())) + 1
    ia = _codes(info["attr"])
    g_of = np.full(size, -1, dtype=np.int64)
    g_of[ia] = _codes(info["_g"])
    is_copy = np.zeros(size, dtype=bool)
    is_copy[ia] = (info["op_kind"] == "copy-start").fill_null(False).to_numpy()
    other = np.zeros(size, dtype=bool)
    other[ia] = ~is_copy[ia]
    # every other transfer: one event, in event order
    idx = [np.flatnonzero(other[a]) if other.any() else np.zeros(0, dtype=np.int64)]
    t_ps = [ev["duration_ps"].gather(pl.Series(idx[0]))]
    self_ps = [ev["self_ps"].gather(pl.Series(idx[0]))]
    if is_copy.any():
        cand_of = is_copy.copy()
        cand_of[np.asarray(done_ok, dtype=np.int64)] = True
        # the copies in start order only where the records' order shows: the first record of a
        # group names its bytes, and bytes add up per direction in record order
        si, span, valid, dself = _pair_spans(ev, attrs, cand_of, not _order_free(info), counts)
        # the pairing's non-done events are copy starts: every other candidate's op_kind ends
        # in "-done", which _pair_index counts as a done
        idx.append(si)
        t_ps.append(pl.Series(span) if valid.all()
                    else pl.select(pl.when(pl.lit(pl.Series(valid))).then(pl.lit(pl.Series(span)))).to_series())
        sp = ev["self_ps"]
        self_ps.append(pl.Series(_codes(sp)[si] + dself) if not sp.null_count()
                       else sp.gather(pl.Series(si)) + pl.Series(dself))
    ix = np.concatenate(idx) if len(idx[0]) else idx[-1]
    ra = a[ix]
    by_attr = np.full(size, np.nan)  # bytes per attr id, NaN: unknown
    by_attr[ia] = info["bytes"].fill_null(np.nan).to_numpy()
    rec = pl.DataFrame({"_g": g_of[ra], "attr": pl.Series(ra, dtype=pl.UInt32),
                        "t_ps": pl.concat(t_ps).cast(pl.Int64), "all_self_ps": pl.concat(self_ps).cast(pl.Int64)})
    if rec.height == 0:
        return schema_empty, 0, set()
    peak = link.host_per_direction if link is not None else None
    g, ua = _transfer_groups(rec, g_of, ra)
    names = (pl.DataFrame({"_g": g_of[ua], "attr": pl.Series(ua, dtype=pl.UInt32)})
             .join(attrs.select("attr", "op_name", "module", "host", "device"), on="attr", how="left")
             .group_by("_g").agg(pl.col("op_name").unique().sort().alias("ops"),
                                 pl.col("module").unique().sort().alias("modules"),
                                 pl.struct("host", "device").n_unique().cast(pl.Int64).alias("devices")))
    keys = info.group_by("_g").agg(pl.col("direction", "mechanism", "shape").first())
    g = (g.join(names, on="_g", how="left", maintain_order="left").join(keys, on="_g", how="left", maintain_order="left")
         .join(info.select(pl.col("attr").alias("_first"), "bytes"), on="_first", how="left", maintain_order="left"))
    g = g.with_columns(
        pl.when(pl.col("time_ps") > 0).then(pl.col("bytes") / (pl.col("time_ps") * 1e-12)).alias("bandwidth"),
        pl.lit(peak, pl.Float64).alias("link_peak"))
    dev_of = np.zeros(size, dtype=np.int64)
    dev_of[_codes(attrs["attr"])] = _keyed(attrs, ["host", "device"])
    dir_names = info["direction"].unique(maintain_order=True)
    dir_of = np.full(size, -1, dtype=np.int64)
    dir_of[ia] = _codes(info["direction"].replace_strict(dir_names, pl.Series(np.arange(len(dir_names))),
                                                         return_dtype=pl.Int64))
    ok = rec["t_ps"].is_not_null().to_numpy()
    g = g.join(_direction_bandwidth(dir_names, ra, ix, _codes(ev["start_ps"]), _codes(rec["t_ps"], 0), ok,
                                    dir_of, dev_of, by_attr),
               on="direction", how="left").with_columns(
        (pl.col("direction_bandwidth") / pl.col("link_peak")).alias("frac_link_peak"))
    if peak is None:
        notes.append("host-link peak unknown for this chip" + (f" ({link.host_link}: {link.source})" if link else "")
                     + ": host-transfer bandwidth is not compared with a peak")
    host_ps = int(rec["all_self_ps"].sum() or 0)
    mods = attrs.join(pl.DataFrame({"attr": pl.Series(ua, dtype=attrs.schema["attr"])}), on="attr", how="semi")["module"]
    modules = set(mods.drop_nulls().to_list())
    return (g.select(list(HOST_SCHEMA)).sort(["op_time_ps", "direction", "mechanism", "shape"],
                                             descending=[True, False, False, False]), host_ps, modules)


def _attr_counts(a, n_attrs: int):
    """``np.bincount(a)`` of the attr ids ``a`` (uint32), in one C pass (``attr_counts``: no
    int64 copy of ``a``) when built and every id is below ``n_attrs``."""
    import numpy as np

    if _fast is not None and a.dtype == np.uint32:
        out = np.empty(max(n_attrs, 0), dtype=np.int64)
        m = _fast.attr_counts(np.ascontiguousarray(a), out)
        if m >= 0:
            return out[:m]
    return np.bincount(a)


def _transfer_groups(rec: pl.DataFrame, g_of, ra) -> tuple:
    """(the host-transfer records ``rec`` (``_g``, ``attr``, ``t_ps``, ``all_self_ps``) per
    transfer group ``_g`` in order of first appearance: ``_first`` (the first record's attr),
    ``executions``, ``time_ps`` (median), ``total_ps`` and ``op_time_ps`` (sums); the attr
    ids among the records, ascending). ``g_of``: the group per attr id, ``ra``: the records'
    attr ids (uint32). Without nulls and with the C passes built: per attr id counted and
    summed in one pass (``traceview.model._passes.attr_stats``, first by position), the medians per group by quickselect
    (``median_by``, polars' median), the few per-attr figures folded into their groups;
    else polars' group-by."""
    import numpy as np

    t, sp = rec["t_ps"], rec["all_self_ps"]
    if (_fast is not None and rec.height and not t.null_count() and not sp.null_count() and len(g_of)
            and int(g_of.max()) < (1 << 31) - 1 and bool((g_of[ra] >= 0).all())):
        size = len(g_of)
        tv, sv = np.ascontiguousarray(_codes_of(t)), np.ascontiguousarray(_codes_of(sp))
        cnt, st, ss = (np.zeros(size, dtype=np.int64) for _ in range(3))
        big = np.iinfo(np.int64).max
        lo, hi, first = np.full(size, big), np.full(size, -big - 1), np.full(size, big)
        ra32 = np.ascontiguousarray(ra, dtype=np.uint32)
        ng = int(g_of.max()) + 1
        med, have = np.empty(ng), np.zeros(ng, dtype=np.uint8)
        if (_model_fast.attr_stats(ra32, np.empty(0, dtype=np.int64), tv, sv, cnt, st, ss, lo, hi, first)
                and _fast.median_by(ra32, np.ascontiguousarray(g_of, dtype=np.int32), tv, med, have)):
            ids = np.flatnonzero(cnt)
            gi = g_of[ids]
            n_g, t_g, s_g = np.zeros(ng, dtype=np.int64), np.zeros(ng, dtype=np.int64), np.zeros(ng, dtype=np.int64)
            f_g = np.full(ng, len(ra), dtype=np.int64)
            np.add.at(n_g, gi, cnt[ids])
            np.add.at(t_g, gi, st[ids])
            np.add.at(s_g, gi, ss[ids])
            np.minimum.at(f_g, gi, first[ids])
            gs = np.unique(gi)
            gs = gs[np.argsort(f_g[gs], kind="stable")]  # groups in order of their first record
            return pl.DataFrame({"_g": pl.Series(gs, dtype=pl.Int64), "_first": pl.Series(ra32[f_g[gs]], dtype=pl.UInt32),
                                 "executions": pl.Series(n_g[gs], dtype=pl.Int64),
                                 "time_ps": pl.Series(med[gs], dtype=pl.Float64),
                                 "total_ps": pl.Series(t_g[gs], dtype=pl.Int64),
                                 "op_time_ps": pl.Series(s_g[gs], dtype=pl.Int64)}), ids
    g = rec.group_by("_g", maintain_order=True).agg(
        pl.col("attr").first().alias("_first"), pl.len().cast(pl.Int64).alias("executions"),
        pl.col("t_ps").median().alias("time_ps"), pl.col("t_ps").sum().cast(pl.Int64).alias("total_ps"),
        pl.col("all_self_ps").sum().cast(pl.Int64).alias("op_time_ps"))
    return g, np.flatnonzero(np.bincount(ra))


def _codes_of(values):
    """int64 numpy array of a polars Series without nulls."""
    import numpy as np

    return values.to_numpy().astype(np.int64, copy=False)


def _order_free(info: pl.DataFrame) -> bool:
    """Whether the transfers described by ``info`` (columns ``_g``, ``direction``, ``bytes``)
    have one byte count (null counting as one) per group and per direction: then no figure
    of :func:`_host_transfers` depends on the order of its records."""
    return all(info.group_by(k).agg(pl.col("bytes").n_unique().alias("_n"))["_n"].max() <= 1
               for k in ("_g", "direction")) if info.height else True


def _direction_bandwidth(dir_names: pl.Series, ra, ix, start, t, ok, dir_of, dev_of, by_attr) -> pl.DataFrame:
    """Per direction: bytes of every transfer that way over the time at least one of them was
    in flight (intervals merged per device, summed over devices): the link's achieved rate when
    transfers overlap, as they share it. Per transfer (arrays, in record order): ``ra``
    (description), ``ix`` (its event's position in ``start``, event start times, ps), ``t``
    (time, ps) and ``ok`` (time known); per description: ``dir_of`` (index into ``dir_names``,
    -1 for none), ``dev_of`` (device index), ``by_attr`` (bytes, NaN unknown). Only transfers
    with time and bytes known count; bytes add in record order. Directions in order of their
    first counted transfer. In C when built (``direction_busy_in_order`` in one pass when each
    (direction, device)'s transfers come in start order, else ``direction_busy``), else by one
    stable sort by (direction, device)."""
    import numpy as np

    n_dir = len(dir_names)
    busy = np.zeros(n_dir, dtype=np.int64)
    moved = np.zeros(n_dir)
    first = np.full(n_dir, -1, dtype=np.int64)
    if _fast is not None:
        args = (np.ascontiguousarray(ra, dtype=np.uint32), np.ascontiguousarray(ix, dtype=np.int64),
                np.ascontiguousarray(start, dtype=np.int64), np.ascontiguousarray(t, dtype=np.int64),
                np.ascontiguousarray(ok, dtype=bool).view(np.uint8), np.ascontiguousarray(dir_of, dtype=np.int64),
                np.ascontiguousarray(dev_of, dtype=np.int64), np.ascontiguousarray(by_attr, dtype=np.float64),
                busy, moved, first)
        done = _fast.direction_busy_in_order(*args) or _fast.direction_busy(*args)
    if _fast is None or not done:
        busy, moved, first = _direction_busy(n_dir, ra, ix, start, t, ok, dir_of, dev_of, by_attr)
    out = [{"direction": dir_names[k], "direction_bandwidth": float(moved[k]) / (int(busy[k]) * 1e-12) if busy[k] else None}
           for k in sorted(np.flatnonzero(first >= 0).tolist(), key=lambda k: first[k])]
    return pl.DataFrame(out, schema={"direction": pl.Utf8, "direction_bandwidth": pl.Float64})


def _direction_busy(n_dir: int, ra, ix, start, t, ok, dir_of, dev_of, by_attr) -> tuple:
    """(busy, moved, first) per direction of :func:`_direction_bandwidth`, with numpy: the
    counted transfers sorted stably by (direction, device), each slice's intervals merged
    (:func:`~traceview.analysis.communication.overlap._union`, or :func:`_sweep_busy` when some
    transfer ends before it starts)."""
    import numpy as np

    from traceview.analysis.communication.overlap import _stable_order, _union

    dcode, by = dir_of[ra], by_attr[ra]
    m_ok = np.flatnonzero(ok & (dcode >= 0) & ~np.isnan(by))
    dcode = dcode[m_ok]
    moved = np.bincount(dcode, weights=by[m_ok], minlength=n_dir)  # in record order
    first = np.full(n_dir, -1, dtype=np.int64)
    seen, at = np.unique(dcode, return_index=True)
    first[seen] = m_ok[at]
    del by
    n_dev = int(dev_of.max(initial=0)) + 1
    key = dcode * n_dev + dev_of[ra[m_ok]]
    o = _stable_order(key)
    key, rows = key[o], m_ok[o]
    del o, m_ok, dcode
    lo_all = start[ix[rows]]
    hi_all = lo_all + t[rows]
    busy = np.zeros(n_dir, dtype=np.int64)
    cuts = np.r_[0, np.flatnonzero(key[1:] != key[:-1]) + 1, len(key)]
    for c in range(len(cuts) - 1):
        i, j = cuts[c], cuts[c + 1]
        if i == j:
            continue
        lo, hi = lo_all[i:j], hi_all[i:j]
        if (hi >= lo).all():  # the union's length; a negative span counts as the running sweep does
            us, ue = _union(lo, hi)
            busy[key[i] // n_dev] += int((ue - us).sum())
        else:
            busy[key[i] // n_dev] += _sweep_busy(lo, hi)
    return busy, moved, first


def _sweep_busy(lo, hi) -> int:
    """Merged length of [lo, hi) intervals by a sweep in start order (intervals with hi < lo
    included as the sweep meets them)."""
    import numpy as np

    order = np.argsort(lo, kind="stable")
    busy, end = 0, None
    for a, b in zip(lo[order], hi[order]):
        if end is None or a > end:
            busy += int(b - a)
            end = b
        elif b > end:
            busy += int(b - end)
            end = b
    return busy


_HREC = ["host", "device", "module", "op_name", "direction", "mechanism", "shape", "bytes", "start_ps", "t_ps",
         "all_self_ps"]


COLLECTIVE_DIFF_SCHEMA = {
    "kind": pl.Utf8, "status": pl.Utf8, "data_bytes": pl.Float64, "groups": pl.Utf8, "group_size": pl.Int64,
    "executions_base": pl.Int64, "executions_treatment": pl.Int64, "time_ps_base": pl.Float64,
    "time_ps_treatment": pl.Float64, "busbw_base": pl.Float64, "busbw_treatment": pl.Float64,
}


def _rollup(cols: pl.DataFrame) -> pl.DataFrame:
    """Collectives per (kind, data size, groups) over shapes and channels (channel ids and op
    names are renumbered at every compilation, so neither can match two profiles)."""
    return cols.group_by(["kind", "data_bytes", "groups"], maintain_order=True).agg(
        pl.col("group_size").first(), pl.col("executions").sum(),
        ((pl.col("time_ps") * pl.col("executions")).sum() / pl.col("executions").sum()).alias("time_ps"),
        pl.col("busbw").median())


def collective_diff(base: Communication, treatment: Communication) -> tuple[pl.DataFrame, list[str]]:
    """Collectives of two profiles matched on (kind, data size S, replica groups):
    :data:`COLLECTIVE_DIFF_SCHEMA` rows with ``status`` "matched", "appeared" or "vanished"
    (per side: executions, mean time per execution, median busbw), and one note per kind whose
    sizes or groups changed (``all-reduce: 5.369 GB in groups of 2 -> 2.684 GB in groups of 4``)."""
    b, t = _rollup(base.collectives), _rollup(treatment.collectives)
    keys = ["kind", "data_bytes", "groups"]
    j = b.join(t, on=keys, how="full", coalesce=True, nulls_equal=True, suffix="_treatment")
    j = j.rename({"executions": "executions_base", "time_ps": "time_ps_base", "busbw": "busbw_base"}).with_columns(
        pl.coalesce("group_size", "group_size_treatment").alias("group_size"),
        pl.when(pl.col("executions_base").is_null()).then(pl.lit("appeared"))
        .when(pl.col("executions_treatment").is_null()).then(pl.lit("vanished"))
        .otherwise(pl.lit("matched")).alias("status"))
    out = j.select(list(COLLECTIVE_DIFF_SCHEMA)).cast(COLLECTIVE_DIFF_SCHEMA).sort(["kind", "status", "data_bytes"])
    notes = []
    for kind in out.filter(pl.col("status") != "matched")["kind"].unique(maintain_order=True).to_list():
        rows = out.filter(pl.col("kind") == kind)

        def says(status):
            r = rows.filter(pl.col("status").is_in([status, "matched"]))
            return ", ".join(f"{_size(x['data_bytes'])} in groups of {x['group_size'] or '?'}" for x in r.iter_rows(named=True)) or "none"
        notes.append(f"collective {kind} changed: {says('vanished')} -> {says('appeared')}")
    return out, notes


def _size(n) -> str:
    if n is None:
        return "? bytes"
    for unit, f in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= f:
            return f"{n / f:.4g} {unit}"
    return f"{n:.0f} B"
