"""The overlap's per-op records (:func:`traceview.analysis.communication.overlap._comm_ops`) against the
plain statement of the rule: the k-th done naming a start on a device (among those after that
start's first execution there: an earlier done awaits an execution the capture missed) pairs
with that start's k-th execution there, kept when the done begins no earlier; records in (device, start) order,
synchronous ones first at one start, each part in event order (numpy's lexsort)."""

from __future__ import annotations

import numpy as np
import polars as pl

from traceview.analysis.communication.overlap import _comm_ops, _Events, overlap


def _frame(seed: int) -> pl.DataFrame:
    rng = np.random.default_rng(seed)
    rows = []
    for dev in ("/device:TPU:0", "/device:TPU:1", "/device:TPU:2"):
        for i in range(400):
            t = int(rng.integers(0, 60)) * 1000  # few distinct starts: many ties
            r = rng.random()
            n = int(rng.integers(0, 3))
            if r < 0.3:
                rows.append((dev, "fusion.1", "fusion", "%fusion.1 = f32[8]{0} fusion(f32[8]{0} %p)", t, 700))
            elif r < 0.5:
                rows.append((dev, "all-reduce.3", "all-reduce", "%all-reduce.3 = f32[8]{0} all-reduce(f32[8]{0} %p)", t, 500))
            elif r < 0.75:
                rows.append((dev, f"all-gather-start.{n}", "all-gather-start",
                             f"%all-gather-start.{n} = f32[8]{{0}} all-gather-start(f32[8]{{0}} %p)", t, 100))
            elif r < 0.95:
                rows.append((dev, f"all-gather-done.{n}", "all-gather-done",
                             f"%all-gather-done.{n} = f32[8]{{0}} all-gather-done(f32[8]{{0}} %all-gather-start.{n})", t, 200))
            else:
                rows.append((dev, f"copy-start.{n}", "copy-start", f"%copy-start.{n} = f32[8]{{0:S(5)}} copy-start(f32[8]{{0}} %p)",
                             t, 50))
    host, device, name, kind, text, start, dur = zip(*[("h",) + r[:1] + r[1:] for r in rows])
    return pl.DataFrame({"host": host, "device": device, "module": ["m"] * len(rows), "op_name": name,
                         "op_kind": kind, "shape": ["f32[8]"] * len(rows), "hlo_text": text,
                         "start_ps": pl.Series(start, dtype=pl.Int64), "duration_ps": pl.Series(dur, dtype=pl.Int64)})


def _oracle(ev: _Events) -> dict:
    import re

    a = ev.attr
    at = ev.attrs
    comm = ev.cls_of != 0
    kind = at["op_kind"].to_list()
    names = at["op_name"].to_list()
    texts = at["hlo_text"].to_list()
    sync_of = np.array([c and k in ("all-reduce", "copy") for c, k in zip(comm, kind)])
    starts, dones = {}, {}
    for i in range(len(a)):
        j = int(a[i])
        if not comm[j]:
            continue
        if kind[j].endswith("-start"):
            starts.setdefault((int(ev.dev[i]), names[j]), []).append(i)
        elif kind[j].endswith("-done"):
            m = re.search(r"-done\(.*?%([A-Za-z0-9_.\-]+)", texts[j])
            dones.setdefault((int(ev.dev[i]), m.group(1)), []).append(i)
    pairs = []
    for key, ss in starts.items():
        for s, d in zip(ss, [d for d in dones.get(key, []) if d > ss[0]]):  # events in (device, start) order
            if ev.start[d] >= ev.start[s]:
                pairs.append((s, d))
    pairs.sort()
    sy = [i for i in range(len(a)) if sync_of[a[i]]]
    end = ev.start + ev.dur
    rec = [(int(ev.dev[i]), int(ev.start[i]), 0, n, int(a[i]), int(end[i]), 0) for n, i in enumerate(sy)]
    rec += [(int(ev.dev[s]), int(ev.start[s]), 1, n, int(a[s]), int(max(end[d], end[s])),
             int(end[d] - ev.start[d])) for n, (s, d) in enumerate(pairs)]
    rec.sort()
    return {"attr": [r[4] for r in rec], "dev": [r[0] for r in rec], "start": [r[1] for r in rec],
            "end": [r[5] for r in rec], "wait": [r[6] for r in rec], "sync": [r[2] == 0 for r in rec]}


def test_comm_ops_equal_the_rule():
    for seed in range(4):
        ev = _Events(_frame(seed))
        got = _comm_ops(ev)
        want = _oracle(ev)
        for k, v in want.items():
            assert got[k].tolist() == v, (seed, k)
        assert overlap(_frame(seed), None).ops.height == len(want["attr"])


def test_comm_ops_equal_the_rule_without_the_c_pass(monkeypatch):
    from traceview.analysis.communication import overlap as ov

    monkeypatch.setattr(ov, "_fast", None)
    test_comm_ops_equal_the_rule()


def test_ops_computed_again_on_first_use_equal_the_kept_records(shared_traces):
    """The default Overlap keeps no per-op array (the records of every async copy and
    collective execution are as long as the trace's copies); ``ops``, built on first use by
    computing the overlap again, is the frame of the records kept with ``keep_ops``."""
    import traceview
    from traceview.analysis import derived

    prof = traceview.load(shared_traces / "tpu_v6e_4chip_psum.xplane.pb")
    steps = derived.step_anatomy(prof).steps
    lazy, kept = overlap(prof.table, steps), overlap(prof.table, steps, keep_ops=True)
    held = [c.cell_contents for c in lazy._build.__closure__ or ()]
    assert not any(isinstance(v, (np.ndarray, dict)) for v in held)
    assert lazy.n_ops == kept.n_ops > 2000 and lazy.summary == kept.summary
    assert lazy.steps.equals(kept.steps) and lazy.populations.equals(kept.populations)
    ops = lazy.ops
    assert ops.height == lazy.n_ops and ops.equals(kept.ops)
    assert (~ops["sync"]).sum() == lazy.summary["async_ops"] > 0  # async pairs, not only synchronous ones
