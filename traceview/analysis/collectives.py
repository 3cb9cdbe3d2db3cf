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
is compared with the chip's interconnect peak one way (:mod:`traceview.analysis.interconnect`);
unknown chip or figure: the fraction is null and the notes say so. Collectives never enter
the HBM roofline (:mod:`traceview.analysis.roofline` gives them ``bound_by`` "collective" or,
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

from traceview.analysis.interconnect import Link, find_link
from traceview.model.collective_hlo import collective_attrs, host_transfer
from traceview.model.shapes import parse_instruction

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
    mechanism, shape)); ``link`` (the chip's :class:`~traceview.analysis.interconnect.Link` or
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
        """Plain data for JSON: collectives and host_transfers (lists of row dicts), link
        (chip, interconnect, bidirectional, per_direction, host_link, host_per_direction,
        source; None when the chip is unknown), op_time_ps, collective_ps, collective_share,
        host_ps, host_share, host_module_share, notes."""
        ln = self.link
        return {
            "collectives": self.collectives.to_dicts(), "host_transfers": self.host_transfers.to_dicts(),
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


def _pair_async(ev: pl.DataFrame) -> pl.DataFrame:
    """Match ``-done`` events to their ``-start`` (same host, device, program; the done's operand
    names the start; k-th done with the k-th start in time order). Returns the start events
    with ``span_ps`` (start's start to done's end) and ``done_self_ps``; span null when unmatched."""
    is_done = pl.col("op_kind").fill_null("").str.ends_with("-done") | pl.col("op_name").str.contains(r"-done(\.\d+)?$")
    starts = ev.filter(~is_done)
    dones = ev.filter(is_done)
    keys = ["host", "device", "program_id", "pair"]
    if dones.height:
        dones = dones.join(_done_pairs(dones), on=["hlo_text", "op_name"], how="left", nulls_equal=True)
        dones = dones.sort("start_ps").with_columns(pl.int_range(pl.len()).over(keys).alias("k")).select(
            keys + ["k", (pl.col("start_ps") + pl.col("duration_ps")).alias("done_end"),
                    pl.col("self_ps").alias("done_self_ps")])
    starts = starts.with_columns(pl.col("op_name").alias("pair")).sort("start_ps").with_columns(
        pl.int_range(pl.len()).over(keys).alias("k"))
    if not dones.height:
        return starts.with_columns(pl.lit(None, pl.Int64).alias("span_ps"), pl.lit(0, pl.Int64).alias("done_self_ps"))
    out = starts.join(dones, on=keys + ["k"], how="left", nulls_equal=True)
    return out.with_columns((pl.col("done_end") - pl.col("start_ps")).alias("span_ps"),
                            pl.col("done_self_ps").fill_null(0))


def _done_pairs(dones: pl.DataFrame) -> pl.DataFrame:
    """Per distinct (hlo_text, op_name) of ``-done`` events: ``pair``, the ``-start`` it awaits."""
    d = dones.select("hlo_text", "op_name").unique()
    return d.with_columns(pl.Series("pair", [_done_operand(t, n) for t, n in d.iter_rows()], dtype=pl.Utf8))


def _done_operand(hlo_text: str, op_name: str) -> str:
    ins = parse_instruction(hlo_text or "")
    if ins is not None and ins.operand_names:
        return ins.operand_names[0]
    return op_name.replace("-done", "-start")


def communication(prof, peaks=None) -> Communication:
    """The :class:`Communication` of a profile (a :class:`~traceview.model.profiledata.ProfileData`);
    ``peaks`` (:class:`~traceview.analysis.peaks.Peaks`) names the chip whose link peaks apply
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
    coll_ev = table.filter(is_coll).frame(_EVENT_COLS)
    cols = _collectives(coll_ev, link, notes)
    host_ev = table.filter(is_copy | (is_coll & pl.col("hlo_text").str.contains("is_host_transfer=true"))).frame(_EVENT_COLS)
    hosts, host_ps, host_modules = _host_transfers(host_ev, link, notes)
    coll_ps = int(coll_ev.filter(~pl.col("hlo_text").str.contains("is_host_transfer=true"))["self_ps"].sum() or 0)
    module_share = None
    if host_ps and host_modules:
        mod_time = int(table.filter(pl.col("module").is_in(sorted(host_modules))).total_self_ps())
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


def _collectives(ev: pl.DataFrame, link: Link | None, notes: list) -> pl.DataFrame:
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
        paired = _pair_async(asy.filter(pl.col("phase") != "update"))
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


def _host_transfers(ev: pl.DataFrame, link: Link | None, notes: list):
    schema_empty = pl.DataFrame(schema=HOST_SCHEMA)
    if not ev.height:
        return schema_empty, 0, set()
    descs = ev.filter(~pl.col("op_kind").fill_null("").str.ends_with("-done")).select(
        "op_kind", "op_name", "hlo_text").unique()
    rows = []
    for kind_txt, name, text in descs.iter_rows():
        h = host_transfer(kind_txt or "", text or "")
        if h is not None:
            rows.append({"op_kind": kind_txt, "op_name": name, "hlo_text": text, "direction": h.direction,
                         "mechanism": h.mechanism, "bytes": None if h.bytes is None else float(h.bytes)})
    if not rows:
        return schema_empty, 0, set()
    attrs = pl.DataFrame(rows, schema={"op_kind": pl.Utf8, "op_name": pl.Utf8, "hlo_text": pl.Utf8,
                                       "direction": pl.Utf8, "mechanism": pl.Utf8, "bytes": pl.Float64})
    starts = ev.join(attrs, on=["op_kind", "op_name", "hlo_text"], how="inner", nulls_equal=True)
    start_names = set(attrs["op_name"].to_list())
    dones = ev.filter(pl.col("op_kind").fill_null("").str.ends_with("-done"))
    if dones.height:
        pairs = _done_pairs(dones).filter(pl.col("pair").is_in(sorted(start_names)))
        dones = dones.join(pairs.select("hlo_text", "op_name"), on=["hlo_text", "op_name"], how="semi", nulls_equal=True)
    copies = starts.filter(pl.col("op_kind") == "copy-start")
    others = starts.filter(pl.col("op_kind") != "copy-start").with_columns(
        pl.col("duration_ps").alias("t_ps"), pl.col("self_ps").alias("all_self_ps"))
    parts = [others.select(_HREC)] if others.height else []
    if copies.height:
        paired = _pair_async(pl.concat([copies.select(_EVENT_COLS), dones.select(_EVENT_COLS)]))
        paired = paired.join(attrs.select("op_name", "hlo_text", "direction", "mechanism", "bytes"),
                             on=["op_name", "hlo_text"], how="inner", nulls_equal=True).with_columns(
            pl.col("span_ps").alias("t_ps"), (pl.col("self_ps") + pl.col("done_self_ps")).alias("all_self_ps"))
        parts.append(paired.select(_HREC))
    rec = pl.concat(parts, how="vertical_relaxed")
    keys = ["direction", "mechanism", "shape"]
    peak = link.host_per_direction if link is not None else None
    g = rec.group_by(keys, maintain_order=True).agg(
        pl.col("op_name").unique().sort().alias("ops"), pl.col("module").unique().sort().alias("modules"),
        pl.struct("host", "device").n_unique().cast(pl.Int64).alias("devices"),
        pl.len().cast(pl.Int64).alias("executions"), pl.col("bytes").first(),
        pl.col("t_ps").median().alias("time_ps"), pl.col("t_ps").sum().cast(pl.Int64).alias("total_ps"),
        pl.col("all_self_ps").sum().cast(pl.Int64).alias("op_time_ps"))
    g = g.with_columns(
        pl.when(pl.col("time_ps") > 0).then(pl.col("bytes") / (pl.col("time_ps") * 1e-12)).alias("bandwidth"),
        pl.lit(peak, pl.Float64).alias("link_peak"))
    g = g.join(_direction_bandwidth(rec), on="direction", how="left").with_columns(
        (pl.col("direction_bandwidth") / pl.col("link_peak")).alias("frac_link_peak"))
    if peak is None:
        notes.append("host-link peak unknown for this chip" + (f" ({link.host_link}: {link.source})" if link else "")
                     + ": host-transfer bandwidth is not compared with a peak")
    host_ps = int(rec["all_self_ps"].sum() or 0)
    modules = set(rec["module"].drop_nulls().to_list())
    return (g.select(list(HOST_SCHEMA)).sort(["op_time_ps", "direction", "mechanism", "shape"],
                                             descending=[True, False, False, False]), host_ps, modules)


def _direction_bandwidth(rec: pl.DataFrame) -> pl.DataFrame:
    """Per direction: bytes of every transfer that way over the time at least one of them was
    in flight (intervals merged per device, summed over devices): the link's achieved rate when
    transfers overlap, as they share it."""
    import numpy as np

    out = []
    for (direction,), part in rec.filter(pl.col("t_ps").is_not_null() & pl.col("bytes").is_not_null()).group_by(
            ["direction"], maintain_order=True):
        busy, moved = 0, 0.0
        for _, dev in part.group_by(["host", "device"]):
            lo = dev["start_ps"].to_numpy()
            hi = lo + dev["t_ps"].to_numpy()
            order = np.argsort(lo, kind="stable")
            end = None
            for a, b in zip(lo[order], hi[order]):
                if end is None or a > end:
                    busy += int(b - a)
                    end = b
                elif b > end:
                    busy += int(b - end)
                    end = b
            moved += float(dev["bytes"].sum())
        out.append({"direction": direction, "direction_bandwidth": moved / (busy * 1e-12) if busy else None})
    return pl.DataFrame(out, schema={"direction": pl.Utf8, "direction_bandwidth": pl.Float64})


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
