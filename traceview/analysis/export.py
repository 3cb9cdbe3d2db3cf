"""What ``traceview export`` writes on top of a trace's window: the window itself (a range of
steps, by default the median step and its neighbours) and traceview's own tracks.

:func:`plan_export` turns a :class:`~traceview.analysis.report.Report` and a step range into
an :class:`ExportPlan`: per host, the window on the op table's clock (each device cut at its
own steps' ends, :class:`~traceview.read.window.Window`), and per device the events of four
lines drawn on top of the device's plane (times in ps, op table's clock):

* ``traceview steps``: one slice per step, named ``step N`` and its phase
  (:mod:`traceview.analysis.steps.phases`), with its record (duration, busy, idle, outlier reason);
* ``traceview families``: the op families (:mod:`traceview.analysis.ops.families`) in time order,
  consecutive ops of one family (gaps under :data:`FAMILY_GAP_PS`) merged into one slice;
  an op inside the current slice is absorbed, so the line never overlaps itself;
* ``traceview exposed communication``: the instants a collective is in flight and no compute
  op runs on the device (a synchronous collective wholly; :mod:`traceview.analysis.communication.overlap`'s
  definition), merged across collectives, each slice naming its collectives;
* ``traceview findings``: one marker per finding (:mod:`traceview.analysis.findings`) on the
  first event in the window of an op it cites (its span), named by its id and those ops; a
  finding that cites no op of the window spans the window.

A trace without steps (none found, or only the whole trace taken as one) is cut by time (``window_ps``, relative to the first op event), or whole
when its op events number at most :data:`WHOLE_TRACE_EVENTS`. Errors are
:class:`~traceview.errors.UsageError`, one line.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field

import numpy as np
import polars as pl

from traceview.model.naming import EXPORT_STEPS_LINE, printable

from traceview.errors import UsageError

#: a trace without steps is exported whole when its op events number at most this
WHOLE_TRACE_EVENTS = 200_000
#: ops of one family closer than this (ps) are drawn as one slice of the families line
FAMILY_GAP_PS = 1_000_000
#: op events of a window beyond which the families and exposed communication lines are left out
#: (worked out op by op; a window that large is no longer read on a timeline)
MAX_TRACK_EVENTS = 2_000_000

LINES = (EXPORT_STEPS_LINE, "traceview families", "traceview exposed communication", "traceview findings")


@dataclass
class TrackEvent:
    """One slice of traceview's lines: ``host``, ``device`` (the plane drawn on), ``line``
    (one of :data:`LINES`), ``name``, ``start_ps`` / ``dur_ps`` (op table's clock, ps),
    ``args`` (JSON-able: its XStats / Chrome ``args``)."""

    host: str
    device: str
    line: str
    name: str
    start_ps: int
    dur_ps: int
    args: dict = field(default_factory=dict)


@dataclass
class ExportPlan:
    """Result of :func:`plan_export`. ``steps``: (A, B) exported, None when cut by time;
    ``lo_ps`` / ``hi_ps``: the window over every device (op table's clock, ps);
    ``windows``: host -> :class:`~traceview.read.window.Window` (every host of ``files``; one
    without a step in the range gets ``lo_ps`` / ``hi_ps``); ``files``: host -> trace file
    path; ``tracks``: :class:`TrackEvent` list; ``notes``: one line each."""

    steps: tuple | None
    lo_ps: int
    hi_ps: int
    windows: dict
    files: dict
    tracks: list
    notes: list = field(default_factory=list)


def export_command(path, a: int, b: int) -> str:
    """The command that exports steps ``a``..``b`` of the trace at ``path``."""
    out = f"steps_{a}_{b}" if a != b else f"step_{a}"
    return f"traceview export {shlex.quote(str(path))} --steps {a}:{b} -o {out}"


def step_numbers(anat) -> pl.DataFrame:
    """Per step number: ``step``, ``duration_ps`` (mean over devices), ``in_window``; by step."""
    st = anat.steps
    fast = _step_numbers_counted(st)
    if fast is not None:
        return fast
    win = pl.col("in_window").fill_null(True) if "in_window" in st.columns else pl.lit(True)
    return (st.group_by("step").agg(pl.col("duration_ps").mean(), win.all().alias("in_window"))
            .sort("step"))


def _step_numbers_counted(st: pl.DataFrame) -> pl.DataFrame | None:
    """:func:`step_numbers` by counting over the step numbers (``np.bincount``), when they are
    non-null integers over a range at most a few times the row count and every per-step sum of
    durations is exact in float64 (so each mean is the correctly rounded sum / count, as the
    group-by gives); None otherwise."""
    n = st.height
    s, d = st["step"], st["duration_ps"]
    if (n == 0 or not s.dtype.is_integer() or not d.dtype.is_integer() or s.null_count() or d.null_count()):
        return None
    lo, hi = int(s.min()), int(s.max())
    if hi - lo > 4 * n + 1024:
        return None
    dv = d.to_numpy()
    i = s.to_numpy().astype(np.int64) - lo
    cnt = np.bincount(i, minlength=hi - lo + 1)
    if int(np.abs(dv).max()) * int(cnt.max()) >= 1 << 53:
        return None
    tot = np.bincount(i, weights=dv.astype(np.float64), minlength=hi - lo + 1)
    if "in_window" in st.columns:
        out = ~st["in_window"].fill_null(True).to_numpy()
        bad = np.bincount(i, weights=out.astype(np.float64), minlength=hi - lo + 1) > 0
    else:
        bad = np.zeros(hi - lo + 1, dtype=bool)
    have = np.flatnonzero(cnt)
    return pl.DataFrame({"step": pl.Series(have + lo, dtype=s.dtype),
                         "duration_ps": pl.Series(tot[have] / cnt[have], dtype=pl.Float64),
                         "in_window": pl.Series(~bad[have], dtype=pl.Boolean)})


def has_steps(anat) -> bool:
    """Whether the anatomy found steps (markers or a program's executions; not the whole
    trace taken as one, method "trace")."""
    return (anat is not None and anat.steps is not None and anat.steps.height > 0
            and getattr(anat, "method", None) != "trace")


def median_step(anat) -> int | None:
    """The step holding the device-step whose duration is nearest the median the step summary
    shows (the median over the analysed window's device-steps; the lowest step number on a
    tie), or None when there are no steps."""
    if not has_steps(anat):
        return None
    st = anat.steps.select([c for c in ("step", "duration_ps", "in_window") if c in anat.steps.columns])
    if "in_window" in st.columns and not bool(st["in_window"].fill_null(True).all()):
        w = st.filter(pl.col("in_window").fill_null(True))
    else:  # every step in the window: the frame itself, no copy
        w = st
    if w["duration_ps"].null_count():
        w = w.filter(pl.col("duration_ps").is_not_null())
    if w.height == 0:
        w = st.filter(pl.col("duration_ps").is_not_null())
        if w.height == 0:
            return int(st["step"].min())
    med = float(w["duration_ps"].median())
    gap = (w["duration_ps"].cast(pl.Float64) - med).abs()
    return int(w["step"].filter(gap == gap.min()).min())


def default_steps(anat) -> tuple[int, int] | None:
    """The median step and its neighbours (those that exist), or None without steps."""
    m = median_step(anat)
    if m is None:
        return None
    have = _step_numbers(anat)
    return (m - 1 if have(m - 1) else m, m + 1 if have(m + 1) else m)


def _step_numbers(anat):
    """A membership test for the step numbers of ``anat.steps`` (one comparison pass per
    question: a report asks a few, the steps may be millions)."""
    nums = anat.steps["step"].drop_nulls().to_numpy()
    return lambda s: bool((nums == s).any())


def cited_step(evidence) -> int | None:
    """The first ``step`` number a finding's evidence names (nested dicts and lists), or None."""
    stack = [evidence]
    while stack:
        x = stack.pop(0)
        if isinstance(x, dict):
            v = x.get("step")
            if isinstance(v, int) and not isinstance(v, bool):
                return v
            stack.extend(x.values())
        elif isinstance(x, (list, tuple)):
            stack.extend(x)
    return None


def cited_ops(evidence) -> list[str]:
    """The op names a finding's evidence cites (``op_name``/``op`` values and ``ops`` lists,
    nested), in order, once each."""
    out: list[str] = []
    stack = [evidence]
    while stack:
        x = stack.pop(0)
        if isinstance(x, dict):
            for k, v in x.items():
                if k in ("op_name", "op") and isinstance(v, str) and v:
                    out.append(v)
                elif k == "ops" and isinstance(v, list):
                    out.extend(s for s in v if isinstance(s, str) and s)
                else:
                    stack.append(v)
        elif isinstance(x, (list, tuple)):
            stack.extend(x)
    return list(dict.fromkeys(out))


def attach_export_commands(rep) -> None:
    """Set ``rep.export_command`` (the median step and its neighbours) and each finding's
    ``export_command`` (the step it cites and its neighbours, else the default window) when
    the report has steps; leave them empty otherwise."""
    anat = getattr(rep, "steps", None)
    disc = getattr(rep, "discovery", None)
    if not has_steps(anat) or disc is None:
        return
    path = getattr(disc, "url", None) or disc.root  # a URL's discovery: the URL, not its local copy
    dflt = default_steps(anat)
    rep.export_command = export_command(path, *dflt)
    have = _step_numbers(anat)
    for f in rep.findings or ():
        s = cited_step(f.evidence)
        if s is not None and have(s):
            f.export_command = export_command(path, s - 1 if have(s - 1) else s, s + 1 if have(s + 1) else s)
        else:
            f.export_command = rep.export_command


def parse_range(text: str, what: str = "--steps") -> tuple[int, int]:
    """``A:B`` (or ``N``) -> (A, B), integers. Raises UsageError."""
    a, sep, b = text.partition(":")
    try:
        lo, hi = int(a), int(b if sep else a)
    except ValueError:
        raise UsageError(f"{what} {text}: expected A:B with whole numbers (e.g. 10:12)") from None
    if lo > hi:
        raise UsageError(f"{what} {text}: A is after B; give A:B with A <= B")
    return lo, hi


def _files(rep) -> dict:
    """host -> the trace file its op events were read from (the op table's own host names:
    an XSpace's hostname, else the file's stem), else the files found."""
    anat = getattr(rep, "steps", None)
    table = anat.table if anat is not None and anat.table is not None else None
    out = {}
    disc = rep.discovery
    local = getattr(disc, "local_copy", None) or (lambda f: f)  # a URL's file: its local copy (read.remote)
    # the table names a file as shown (printable: undecodable bytes as \xff); open the real path
    real = {printable(str(f.path)): str(f.path) for f in (disc.files if disc is not None else ())}
    if table is not None and table.attrs.height:
        for h, f in table.attrs.select("host", "file").unique().sort(["host", "file"]).iter_rows():
            if f:
                out.setdefault(h, local(real.get(f, f)))
    for f in disc.files if disc is not None and not out else ():
        out.setdefault(f.host, str(f.path))
    return out


def plan_export(rep, *, steps: tuple[int, int] | None = None, window_ps: tuple[int, int] | None = None) -> ExportPlan:
    """The :class:`ExportPlan` of ``rep`` (a :class:`~traceview.analysis.report.Report` with
    its step anatomy, phases, overlap and findings as built). ``steps``: (A, B), step numbers
    of the anatomy (default: :func:`default_steps`); ``window_ps``: (start, end) ps after the
    first op event, for a trace without steps. Raises UsageError when the range holds no step,
    lies outside the trace, or the trace has no steps and is too large to export whole
    without ``window_ps``."""
    anat = rep.steps
    table = anat.table if anat is not None and anat.table is not None else None
    files = _files(rep)
    where = f"{rep.discovery.root}: " if getattr(rep, "discovery", None) is not None else ""
    notes: list[str] = []
    have_steps = has_steps(anat)
    if steps is not None and window_ps is not None:
        raise UsageError("give --steps or --window-ps, not both")
    if have_steps and window_ps is None:
        nums = anat.steps["step"]
        first, last = int(nums.min()), int(nums.max())
        if steps is None:
            steps = default_steps(anat)
            notes.append(f"steps {steps[0]}:{steps[1]}: the median step and its neighbours (of steps {first}..{last})")
        a, b = steps
        if a < 0:
            raise UsageError(f"{where}--steps {a}:{b}: step numbers start at 0 (the trace's steps are {first}..{last})")
        sel = anat.steps.filter((pl.col("step") >= a) & (pl.col("step") <= b))
        if sel.height == 0:
            raise UsageError(f"{where}--steps {a}:{b} is outside the trace: its steps are numbered {first}..{last}")
        if b > last:  # a window running past the last step: the steps there are, said
            notes.append(f"--steps {a}:{b} runs past the last step: exporting steps {a}:{last}")
            steps = (a, last)
        per_dev = sel.group_by(["host", "device"]).agg(pl.col("start_ps").min().alias("lo"),
                                                       (pl.col("start_ps") + pl.col("duration_ps")).max().alias("hi"))
        windows = {}
        for h, d, lo, hi in per_dev.sort(["host", "device"]).iter_rows():
            w = windows.get(h)
            if w is None:
                from traceview.read.window import Window

                w = windows[h] = Window(lo, hi)
            w.lo_ps, w.hi_ps = min(w.lo_ps, lo), max(w.hi_ps, hi)
            w.planes[d] = (lo, hi)
        lo_all = min(w.lo_ps for w in windows.values())
        hi_all = max(w.hi_ps for w in windows.values())
        from traceview.read.window import Window

        for h in files:  # a host (a rank) without a step in the range: the window over every device
            if h not in windows:
                windows[h] = Window(lo_all, hi_all)
    else:
        from traceview.read.window import Window

        if table is None:
            table = rep.table if hasattr(rep.table, "events") else None
        ev = table.events if table is not None else None
        s = ev["start_ps"].drop_nulls() if ev is not None else pl.Series([], dtype=pl.Int64)
        if s.len() == 0:
            raise UsageError(f"{where}the trace has no timed op events to export")
        t0 = int(s.min())
        t_end = int((ev["start_ps"] + ev["duration_ps"]).max())
        if steps is not None:
            raise UsageError(f"{where}--steps {steps[0]}:{steps[1]}: the trace has no steps; export a time window with "
                             f"--window-ps START:END (ps after the first op event, which is at 0; the trace spans "
                             f"0:{t_end - t0})")
        if window_ps is None:
            if s.len() > WHOLE_TRACE_EVENTS:
                raise UsageError(f"{where}the trace has no steps and {s.len():,} op events, over the "
                                 f"{WHOLE_TRACE_EVENTS:,} exported whole; give --window-ps START:END (ps after the "
                                 f"first op event; the trace spans 0:{t_end - t0})")
            lo_all, hi_all = t0, t_end
            notes.append("the trace has no steps: exported whole")
        else:
            a, b = window_ps
            if a >= b:
                raise UsageError(f"{where}--window-ps {a}:{b} is empty: give START < END (ps after the first op event; "
                                 f"the trace spans 0:{t_end - t0})")
            if a >= t_end - t0 or b <= 0:
                raise UsageError(f"{where}--window-ps {a}:{b} is outside the trace: it spans 0:{t_end - t0} ps after its "
                                 f"first op event")
            lo_all, hi_all = t0 + max(a, 0), t0 + min(b, t_end - t0)
        windows = {h: Window(lo_all, hi_all) for h in files}
    tracks: list[TrackEvent] = []
    if have_steps and window_ps is None:
        tracks += _step_track(rep, sel)
    dev_windows = {(h, d): w for h, win in windows.items() for d, w in win.planes.items()}
    ops = _window_ops(table, windows, dev_windows, lo_all, hi_all) if table is not None else None
    if ops is not None and ops.height:
        fam = getattr(anat, "attr_family", None) if anat is not None else None
        if ops.height > MAX_TRACK_EVENTS:
            notes.append(f"{ops.height:,} op events in the window, over {MAX_TRACK_EVENTS:,}: the families and "
                         f"exposed communication lines are left out (export fewer steps)")
        else:
            if fam is not None:
                tracks += _family_track(ops, fam)
            tracks += _exposed_track(ops)
        tracks += _finding_track(rep, ops, dev_windows, lo_all, hi_all)
    return ExportPlan(steps if have_steps and window_ps is None else None, lo_all, hi_all, windows, files, tracks,
                      notes)


def _step_track(rep, sel: pl.DataFrame) -> list[TrackEvent]:
    ph = getattr(rep, "phases", None)
    phase = {}
    if ph is not None and ph.steps is not None and "phase" in ph.steps.columns:
        for h, d, s, p, why in ph.steps.select("host", "device", "step", "phase",
                                               pl.col("why") if "why" in ph.steps.columns else pl.lit(None)).iter_rows():
            phase[(h, d, s)] = (p, why)
    keep = [c for c in ("busy_ps", "idle_ps", "op_time_ps", "ops", "gap_before_ps", "outlier", "reason", "module")
            if c in sel.columns]
    out = []
    for r in sel.sort(["host", "device", "step"]).iter_rows(named=True):
        p, why = phase.get((r["host"], r["device"], r["step"]), (None, None))
        name = f"step {r['step']}" + (f" · {p}" if p else "")
        args = {"step": r["step"], "duration_ps": r["duration_ps"], **{k: r[k] for k in keep if r[k] is not None}}
        if p:
            args["phase"] = p
        if why:
            args["phase_why"] = why
        out.append(TrackEvent(r["host"], r["device"], LINES[0], name, int(r["start_ps"]), int(r["duration_ps"]), args))
    return out


def _window_ops(table, windows: dict, dev_windows: dict, lo: int, hi: int) -> pl.DataFrame:
    """Op events overlapping the window of their (host, device): start_ps, end_ps, attr,
    host, device, op_name, op_kind, hlo_text; by host, device, start."""
    ev = table.events.filter(pl.col("start_ps").is_not_null() & (pl.col("start_ps") < hi)
                             & ((pl.col("start_ps") + pl.col("duration_ps")) > lo))
    ev = ev.select("attr", "start_ps", (pl.col("start_ps") + pl.col("duration_ps")).alias("end_ps"))
    attrs = table.attrs.select("attr", "host", "device", "op_name", "op_kind", "hlo_text", "shape")
    ops = ev.join(attrs, on="attr", how="left")
    if dev_windows:
        w = pl.DataFrame({"host": [k[0] for k in dev_windows], "device": [k[1] for k in dev_windows],
                          "_lo": [v[0] for v in dev_windows.values()], "_hi": [v[1] for v in dev_windows.values()]},
                         schema={"host": pl.Utf8, "device": pl.Utf8, "_lo": pl.Int64, "_hi": pl.Int64})
        ops = ops.join(w, on=["host", "device"], how="inner").filter(
            (pl.col("start_ps") < pl.col("_hi")) & (pl.col("end_ps") > pl.col("_lo"))).drop("_lo", "_hi")
    return ops.sort(["host", "device", "start_ps", "end_ps"], descending=[False, False, False, True])


def _family_track(ops: pl.DataFrame, attr_family: pl.DataFrame) -> list[TrackEvent]:
    f = ops.join(attr_family.select("attr", "family"), on="attr", how="left")
    out = []
    for (h, d), g in f.group_by(["host", "device"], maintain_order=True):
        run = None  # [family, start, end, ops]
        for s, e, fam in g.select("start_ps", "end_ps", "family").iter_rows():
            fam = fam or "other"
            if run is not None and e <= run[2]:
                continue  # inside the current slice
            if run is not None and fam == run[0] and s - run[2] <= FAMILY_GAP_PS:
                run[2], run[3] = e, run[3] + 1
                continue
            if run is not None:
                out.append(TrackEvent(h, d, LINES[1], run[0], run[1], run[2] - run[1], {"family": run[0], "ops": run[3]}))
            run = [fam, max(s, run[2]) if run is not None else s, e, 1]
        if run is not None:
            out.append(TrackEvent(h, d, LINES[1], run[0], run[1], run[2] - run[1], {"family": run[0], "ops": run[3]}))
    return [t for t in out if t.dur_ps > 0]


def _exposed_track(ops: pl.DataFrame) -> list[TrackEvent]:
    """Exposed communication per device (module doc): collective in flight (a synchronous
    collective's event, an async pair's start to its done) minus the union of compute ops."""
    from traceview.analysis.communication.overlap import ASYNC_DONES, ASYNC_STARTS, SYNC_COLLECTIVES, _OPERAND

    coll = tuple(c for c in ASYNC_STARTS if c not in ("copy-start", "async-start"))
    out = []
    for (h, d), g in ops.group_by(["host", "device"], maintain_order=True):
        kinds = g["op_kind"].to_list()
        names = g["op_name"].to_list()
        starts = g["start_ps"].to_list()
        ends = g["end_ps"].to_list()
        texts = g["hlo_text"].to_list()
        flights = []  # (start, end, name)
        pending: dict = {}
        compute = []
        for k, n, s, e, t in zip(kinds, names, starts, ends, texts):
            k = k or ""
            is_coll_start = k in coll or (k == "async-start" and any(n.startswith(c + "-start") for c in SYNC_COLLECTIVES))
            if k in SYNC_COLLECTIVES:
                flights.append((s, e, n))
            elif is_coll_start:
                pending[n] = (s, n)
            elif k in ASYNC_DONES and k not in ("copy-done",):
                started = next((m for m in _OPERAND.findall(t or "") if m in pending), None)
                if started is not None:
                    s0, n0 = pending.pop(started)
                    flights.append((s0, e, n0))
                elif k != "async-done":
                    flights.append((s, e, n))
            else:
                compute.append((s, e))
        if not flights:
            continue
        busy = _union(compute)
        pieces = []
        for s, e, n in flights:
            for a, b in _subtract((s, e), busy):
                pieces.append((a, b, n))
        for a, b, nm in _merge_named(pieces):
            out.append(TrackEvent(h, d, LINES[2], "exposed: " + ", ".join(nm[:4]) + (" …" if len(nm) > 4 else ""),
                                  a, b - a, {"collectives": nm, "exposed_ps": b - a}))
    return out


def _union(iv: list) -> list:
    out = []
    for s, e in sorted(iv):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return out


def _subtract(span: tuple, busy: list) -> list:
    s, e = span
    out = []
    cur = s
    import bisect

    i = max(bisect.bisect_left(busy, [s, s]) - 1, 0)
    for bs, be in busy[i:]:
        if bs >= e:
            break
        if be <= cur:
            continue
        if bs > cur:
            out.append((cur, min(bs, e)))
        cur = max(cur, be)
        if cur >= e:
            break
    if cur < e:
        out.append((cur, e))
    return [p for p in out if p[1] > p[0]]


def _merge_named(pieces: list) -> list:
    out = []
    for a, b, n in sorted(pieces):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
            if n not in out[-1][2]:
                out[-1][2].append(n)
        else:
            out.append([a, b, [n]])
    return [(a, b, nm) for a, b, nm in out]


def _finding_track(rep, ops: pl.DataFrame, dev_windows: dict, lo: int, hi: int) -> list[TrackEvent]:
    out = []
    devices = ops.select("host", "device").unique(maintain_order=True).rows()
    if not devices:
        return out
    for f in rep.findings or ():
        cited = cited_ops(f.evidence)
        hit = ops.filter(pl.col("op_name").is_in(cited)).sort("start_ps").head(1) if cited else ops.clear()
        args = {"id": f.id, "severity": f.severity, "statement": f.statement, "cited_ops": cited,
                "doc": f.doc}
        if hit.height:
            r = hit.row(0, named=True)
            name = f"{f.severity}: {f.id} — {r['op_name']}"
            s, e, h, d = r["start_ps"], r["end_ps"], r["host"], r["device"]
            args["op"] = r["op_name"]
        else:
            h, d = devices[0]
            s, e = dev_windows.get((h, d), (lo, hi))
            name = f"{f.severity}: {f.id}" + (" (no cited op in this window)" if cited else "")
        out.append(TrackEvent(h, d, LINES[3], name, int(s), max(int(e - s), 1), args))
    return out
