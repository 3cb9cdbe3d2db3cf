"""The per-event passes as sorts and searches over arrays, against straightforward references:
the overlap's step partition (per-picosecond membership on synthetic intervals), its async
pairing and the collectives' pairing (per-key queues on the shared traces and fixtures), and
the derived frames a report shares (one anatomy, overlap, communication per profile)."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings, strategies as st

import traceview
from traceview.analysis import derived
from traceview.analysis.communication.collectives import _match
from traceview.analysis.communication.overlap import (ASYNC_DONES, ASYNC_STARTS, SYNC_COLLECTIVES, _comm_ops, _Events, _partition,
                                        _union)

FIX = Path(__file__).resolve().parents[1] / "fixtures"

_intervals = st.lists(st.tuples(st.integers(0, 60), st.integers(0, 12)), max_size=12)


def _set(pairs):
    s = np.array([a for a, _ in pairs], dtype=np.int64)
    return _union(s, s + np.array([d for _, d in pairs], dtype=np.int64))


@settings(max_examples=300, deadline=None)
@given(_intervals, _intervals, _intervals, _intervals, st.lists(st.tuples(st.integers(-5, 80), st.integers(0, 40)),
                                                                min_size=1, max_size=6))
def test_partition_matches_picosecond_membership(cu, sy, asy, ho, wins):
    sets = [_set(x) for x in (cu, sy, asy, ho)]
    wa = np.array([a for a, _ in wins], dtype=np.int64)
    wb = wa + np.array([d for _, d in wins], dtype=np.int64)
    got = _partition(*sets, wa, wb)

    def member(x, t):
        return any(a <= t < b for a, b in zip(*x))

    want = [[0] * len(wa) for _ in range(4)]
    for i, (a, b) in enumerate(zip(wa, wb)):
        for t in range(a, b):
            c, s, y, h = (member(x, t) for x in sets)
            want[0][i] += s or (y and not c)          # exposed
            want[1][i] += c and not s                 # compute
            want[2][i] += y and c and not s           # hidden
            want[3][i] += h and not (c or s or y)     # host only
    assert [list(map(int, g)) for g in got] == want


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(-1, 4), max_size=30), st.lists(st.integers(-1, 4), max_size=30))
def test_match_pairs_kth_start_with_kth_done(ks, kd):
    got = _match(np.array(ks, dtype=np.int64), np.array(kd, dtype=np.int64))
    queues = defaultdict(list)
    for j, k in enumerate(kd):
        queues[k].append(j)
    seen = defaultdict(int)
    want = []
    for k in ks:
        q = queues.get(k, [])
        want.append(q[seen[k]] if k >= 0 and seen[k] < len(q) else -1)
        seen[k] += 1
    assert got.tolist() == want


def _reference_pairs(table) -> list[tuple]:
    """Per-key queues over the wide frame, oldest unmatched start first (overlap module doc)."""
    f = table.frame(["host", "device", "module", "op_name", "op_kind", "hlo_text", "start_ps", "duration_ps"])
    f = f.filter(pl.col("start_ps").is_not_null()).sort(["host", "device", "start_ps"], maintain_order=True)
    starts, dones, sync = defaultdict(list), defaultdict(list), []
    import re

    for h, d, m, name, kind, text, s, dur in f.iter_rows():
        if kind in SYNC_COLLECTIVES:
            sync.append((h, d, name, s, s + dur, 0))
        elif kind in ASYNC_STARTS:
            starts[(h, d, m, name)].append((s, s + dur))
        elif kind in ASYNC_DONES:
            of = re.search(r"-done\(.*?%([A-Za-z0-9_.\-]+)", text or "")
            if of:
                dones[(h, d, m, of.group(1))].append((s, s + dur))
    out = list(sync)
    for key, ss in starts.items():
        for (s, e), (ds, de) in zip(ss, dones.get(key, [])):
            if ds >= s:
                out.append((key[0], key[1], key[3], s, max(de, e), de - ds))
    return sorted(out)


@pytest.mark.parametrize("where", ["tpu_v6e_4chip_psum.xplane.pb", "vllm_tpu_qwen", "fx:collectives_8dev",
                                   "fx:tp_decode"])
def test_comm_ops_pairs_as_per_key_queues(where, shared_traces):
    path = FIX / where[3:] if where.startswith("fx:") else shared_traces / where
    prof = traceview.load(str(path), cache=False)
    ev = _Events(prof.table)
    rec = _comm_ops(ev)
    names = ev.attrs.select("host", "device", "op_name", "op_kind", "_cls")
    rows = names[pl.Series(rec["attr"])]
    # the reference counts only collectives and copies by opcode; the pass adds what the class keeps
    keep = rows["_cls"].is_not_null().to_numpy() & (rows["op_kind"] != "copy").to_numpy()
    got = sorted((h, d, n, int(s), int(e), int(w)) for (h, d, n, _, _), s, e, w, k in zip(
        rows.iter_rows(), rec["start"], rec["end"], rec["wait"], keep) if k)
    want = [r for r in _reference_pairs(prof.table)]
    assert len(got) > 0
    assert got == want


def test_report_sections_share_one_derived_result(shared_traces):
    from traceview.analysis.report import build_report

    prof = traceview.load(str(shared_traces / "tpu_v6e_4chip_psum.xplane.pb"), cache=False)
    rep = build_report(prof)
    assert rep.overlap is derived.overlap(prof)
    assert rep.steps is derived.step_anatomy(prof)
    assert rep.stragglers is None or rep.stragglers is derived.stragglers(prof)
    assert derived.tagged(prof) is derived.tagged(prof, None)
    # another window is another result; a filtered profile starts with none
    assert derived.step_anatomy(prof, window="all") is not rep.steps
    sub = prof.filter(device_regex="TPU:0")
    assert derived.overlap(sub) is not rep.overlap
    assert derived.overlap(sub).steps.select("device").unique().height == 1


def _reference_series(table, runs, lut) -> list[tuple]:
    """The nth-execution series by its definition (distributions module doc), event by event."""
    f = table.frame(["attr", "host", "device", "module", "program_id", "start_ps", "duration_ps"])
    by_group = defaultdict(list)
    for r in runs.filter(pl.col("start_ps").is_not_null()).iter_rows(named=True):
        by_group[(r["host"], r["device"], r["program_id"])].append((r["start_ps"], r["start_ps"] + (r["duration_ps"] or 0)))
    pops = defaultdict(list)
    for a, h, d, m, p, s, dur in f.iter_rows():
        if lut[a] >= 0:
            pops[(int(lut[a]), h, d, p)].append((s, m, dur))
    out = []
    for (k, h, d, p), evs in pops.items():
        evs.sort(key=lambda e: e[0])
        rs = sorted(by_group.get((h, d, p), []))
        ex = []
        for s, _, _ in evs:
            i = max((j for j, (a, _) in enumerate(rs) if a <= s), default=-1)
            ex.append(i if i >= 0 and (s < rs[i][1] or s == rs[i][0]) else None)
        if rs and None in ex:
            n = len(evs)
            ex = [i // (n // len(rs)) for i in range(n)] if n % len(rs) == 0 else [None] * n
        elif not rs:
            ex = [None] * len(evs)
        seen = defaultdict(int)
        for (s, m, dur), e in zip(evs, ex):
            out.append((k, h, d, m, p, e, seen[e], s, dur))
            seen[e] += 1
    return sorted(out, key=lambda r: tuple((x is None, x) for x in r))


@pytest.mark.parametrize("where", ["mi300x_jax_conv3d.xplane.pb", "vllm_tpu_qwen", "fx:straggler_8dev"])
def test_series_by_definition(where, shared_traces):
    from traceview.analysis.ops.distributions import series

    path = FIX / where[3:] if where.startswith("fx:") else shared_traces / where
    prof = traceview.load(str(path), cache=False)
    t = prof.table
    ids = t.attrs.select(pl.struct("op_name", "shape", "module").rank("dense").cast(pl.Int32) - 1).to_series()
    lut = ids.to_numpy().astype(np.int32)
    got = series(t, prof.module_runs, lut).select("key", "host", "device", "module", "program_id", "execution",
                                                  "occurrence", "start_ps", "duration_ps").rows()
    got = sorted(got, key=lambda r: tuple((x is None, x) for x in r))
    assert got == _reference_series(t, prof.module_runs, lut)
    assert len(got) == t.height


def test_direction_bandwidth_merges_each_devices_transfers_per_direction():
    """collectives._direction_bandwidth (the C pass when built) against the rule written out:
    per direction (in order of its first counted transfer), bytes of its counted transfers over
    the merged length of their [start, start + t) per device, summed over devices; negative
    spans as a sweep in start order meets them."""
    from traceview.analysis.communication.collectives import _direction_bandwidth

    rng = np.random.default_rng(5)
    names = pl.Series(["d2h", "h2d", "other"])
    for _ in range(300):
        n = int(rng.integers(0, 40))
        dcode, dev = rng.integers(-1, 3, n), rng.integers(0, 4, n)
        start, t = rng.integers(0, 100, n), rng.integers(-5, 40, n)
        by, ok = rng.random(n) * 1e6, rng.random(n) < 0.8
        # one description per transfer (its direction, device and bytes), each transfer its own event
        rec = np.arange(n)
        got = {r["direction"]: r["direction_bandwidth"] for r in _direction_bandwidth(
            names, rec.astype(np.uint32), rec, start, t, ok, dcode, dev, by).iter_rows(named=True)}
        order, want = [], {}
        for i in range(n):
            if ok[i] and dcode[i] >= 0 and dcode[i] not in order:
                order.append(int(dcode[i]))
        for k in order:
            busy, moved = 0, 0.0
            for d in range(4):
                rows = [i for i in range(n) if ok[i] and dcode[i] == k and dev[i] == d]
                end = None
                for i in sorted(rows, key=lambda i: (start[i], i)):
                    a, b = int(start[i]), int(start[i] + t[i])
                    if end is None or a > end:
                        busy, end = busy + b - a, b
                    elif b > end:
                        busy, end = busy + b - end, b
                moved += sum(float(by[i]) for i in rows)
            want[names[k]] = moved / (busy * 1e-12) if busy else None
        assert list(got) == list(want)
        for k, v in want.items():
            assert (got[k] is None) == (v is None) and (v is None or got[k] == pytest.approx(v, rel=1e-12))
