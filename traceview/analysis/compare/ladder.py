"""The ladder: one family roofline per profile of a sweep (a batch sweep: batch 8, 16, 32, 64),
side by side, with how each family's time per step scales and where its arithmetic intensity
crosses the ridge point.

Per profile, :func:`traceview.analysis.steps.family_roofline.family_roofline` over its step
anatomy, all under one set of peaks (so one ridge point). The sweep variable x of each
profile is given (``xs``) or read off the bundled engine's program names: the request bucket
R of its decode program ``jit_decode_b{R}_bkv{K}`` (the one with most op time when there are
several), which is the batch when ``--max-num-seqs`` is a bucket (8, 16, 32, ...).

Figures per family over the points with time > 0, x ascending:

* ``factor_per_doubling`` = 2^s, s the least-squares slope of log2(time per step) against
  log2(x): 2.0 means linear in x, 1.0 flat; ``factors`` the same between consecutive points,
  (t2 / t1)^(1 / log2(x2 / x1)); ``flops_per_doubling`` the same fit over FLOPs per step (what
  the work does, against what the time does);
* ridge crossing: the first consecutive pair whose intensities lie on either side of the
  ridge point (``crosses`` "memory -> compute" or "compute -> memory"), with ``cross_x`` the
  x where the log-log line between the two points meets the ridge. A point whose intensity is
  an upper bound (``no_bytes_share`` > 0: some of the family's time has FLOPs but no byte
  count) at or above the ridge is on no known side of it and takes part in no pair.

Times in ps, intensities in FLOP/byte. Errors: :class:`~traceview.errors.UsageError` when a
profile's x can be neither read nor is given, when ``xs`` and the profiles differ in number,
or two profiles share an x.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import polars as pl

from traceview.analysis.compare.diff import hardware, hardware_text, same_hardware
from traceview.analysis.steps.family_roofline import family_roofline
from traceview.errors import UsageError

_DECODE = re.compile(r"(?:^|_)decode_b(\d+)(?:_|$)")

POINTS_SCHEMA = {"label": pl.Utf8, "x": pl.Float64, "x_source": pl.Utf8, "n_steps": pl.Int64, "step_ps": pl.Float64,
                 "families_ps": pl.Float64, "window": pl.Utf8}
TABLE_SCHEMA = {"family": pl.Utf8, "x": pl.Float64, "label": pl.Utf8, "time_ps": pl.Float64, "share": pl.Float64,
                "flops": pl.Float64, "bytes": pl.Float64, "intensity": pl.Float64, "bound_by": pl.Utf8,
                "predicted_ps": pl.Float64, "measured_ps": pl.Float64, "no_bytes_share": pl.Float64}
SCALING_SCHEMA = {"family": pl.Utf8, "points": pl.Int64, "first_ps": pl.Float64, "last_ps": pl.Float64,
                  "factor_per_doubling": pl.Float64, "factors": pl.List(pl.Float64),
                  "flops_per_doubling": pl.Float64, "crosses": pl.Utf8,
                  "cross_between": pl.List(pl.Float64), "cross_x": pl.Float64}


@dataclass
class Ladder:
    """Result of :func:`ladder`: ``points`` (per profile: label, x, x_source, n_steps, step_ps
    (mean step wall time), families_ps (families' time per step summed), window), ``table``
    (per family and point, x ascending: time per step, share, FLOPs, bytes, intensity, bound
    by, predicted and measured ps per step), ``scaling`` (per family: module doc), ``ridge``
    (FLOP/byte or None), ``x_name`` ("batch" when read off the engine's buckets, else "x"),
    ``notes``."""

    points: pl.DataFrame
    table: pl.DataFrame
    scaling: pl.DataFrame
    ridge: float | None
    x_name: str = "x"
    notes: list = field(default_factory=list)


def batch_of(prof) -> tuple[int | None, str]:
    """(request bucket R of the engine's decode program ``jit_decode_b{R}_...``, which program)
    for a profile of the bundled engine; (None, why not) otherwise. Of several decode programs
    the one with most op self time is taken."""
    col = prof.table.collapse() if prof.table.height else None
    if col is None:
        return None, "no op in the profile"
    t = (col.filter(pl.col("module").fill_null("").str.contains(_DECODE.pattern))
         .group_by("module").agg(pl.col("self_ps").sum()).sort(["self_ps", "module"], descending=[True, False]))
    if t.height == 0:
        return None, "no program named like the engine's decode buckets (jit_decode_b<R>_...)"
    mod = t["module"][0]
    return int(_DECODE.search(mod).group(1)), f"decode program {mod}"


def _slope(xs: list[float], ts: list[float]) -> float | None:
    pts = [(math.log2(x), math.log2(t)) for x, t in zip(xs, ts) if x > 0 and t and t > 0]
    if len(pts) < 2:
        return None
    mx = sum(p[0] for p in pts) / len(pts)
    my = sum(p[1] for p in pts) / len(pts)
    sxx = sum((p[0] - mx) ** 2 for p in pts)
    if sxx == 0:
        return None
    return sum((p[0] - mx) * (p[1] - my) for p in pts) / sxx


def _crossing(xs: list[float], ins: list, ridge: float | None, upper: list | None = None):
    """(direction, [x1, x2], x at the ridge) of the first pair on either side of ``ridge``;
    ``upper``: per point, whether its intensity is only an upper bound (then, at or above the
    ridge, the point's side is unknown)."""
    if not ridge:
        return None, None, None
    upper = upper or [False] * len(xs)
    ins = [None if u and i is not None and i >= ridge else i for i, u in zip(ins, upper)]
    for (x1, i1), (x2, i2) in zip(zip(xs, ins), list(zip(xs, ins))[1:]):
        if not i1 or not i2 or i1 <= 0 or i2 <= 0:
            continue
        if (i1 < ridge) != (i2 < ridge):
            direction = "memory -> compute" if i1 < ridge else "compute -> memory"
            li1, li2 = math.log(i1), math.log(i2)
            f = (math.log(ridge) - li1) / (li2 - li1) if li2 != li1 else 0.5
            cx = math.exp(math.log(x1) + f * (math.log(x2) - math.log(x1)))
            return direction, [x1, x2], cx
    return None, None, None


def ladder(profiles, *, xs=None, labels=None, rules=None, peaks=None, step_module: str | None = None) -> Ladder:
    """The :class:`Ladder` of ``profiles`` (:class:`~traceview.model.profiledata.ProfileData`
    objects, one per sweep point). ``xs``: the sweep variable per profile (default: read with
    :func:`batch_of`); ``labels``: a name per profile (default ``p1``, ``p2``, ...); ``rules``:
    family rules (:func:`traceview.analysis.ops.families.rules_of`: a list, a file or ``"study"``);
    ``peaks``: one :class:`~traceview.analysis.hardware.peaks.Peaks` for every point (default: the first
    profile's :func:`~traceview.analysis.hardware.peaks.profile_peaks`); ``step_module``: the program whose
    executions are steps. Raises UsageError (module doc; bad rules or module)."""
    from traceview.analysis.compare.populations import program_stem
    from traceview.analysis.hardware.peaks import profile_peaks
    from traceview.analysis.ops.families import rules_of
    from traceview.analysis.steps.anatomy import profile_anatomy

    profiles = list(profiles)
    if not profiles:
        raise UsageError("ladder needs at least one profile")
    labels = list(labels) if labels is not None else [f"p{i}" for i in range(1, len(profiles) + 1)]
    if xs is not None and len(xs) != len(profiles):
        raise UsageError(f"--x gives {len(xs)} value(s) for {len(profiles)} profile(s)")
    notes: list[str] = []
    points = []
    for i, prof in enumerate(profiles):
        if xs is not None:
            x, src = float(xs[i]), "given (--x)"
        else:
            b, why = batch_of(prof)
            if b is None:
                raise UsageError(f"cannot read its batch: {why}; give the sweep values with --x", labels[i])
            x, src = float(b), f"batch: request bucket of the {why}"
        points.append((x, src, labels[i], prof))
    seen: dict = {}
    for x, _, lab, _ in points:
        if x in seen:
            raise UsageError(f"{seen[x]} and {lab} have the same x ({x:g}): give distinct values with --x")
        seen[x] = lab
    if peaks is None:
        peaks = profile_peaks(points[0][3])
    points.sort(key=lambda p: p[0])
    prow, trows = [], []
    kinds: dict = {}  # (device kinds, step program stem) -> labels: one sweep has one
    rules_of(rules)  # bad rules are no profile's fault: refused before any is analysed
    for x, src, lab, prof in points:
        try:
            anat = profile_anatomy(prof, rules, module=step_module)
        except UsageError as e:  # a step module this profile lacks: say which profile
            raise e if e.path is not None else UsageError(e.fault, lab) from None
        what = (hardware(prof),
                program_stem(anat.module) or ("step markers" if anat.method == "markers" else "no step program"))
        kinds.setdefault(what, []).append(lab)
        fr = family_roofline(anat, peaks)
        prow.append({"label": lab, "x": x, "x_source": src, "n_steps": int(fr["n_steps"][0]) if fr.height else 0,
                     "step_ps": float(fr["step_ps"][0]) if fr.height else None,
                     "families_ps": float(fr["time_ps"].sum()) if fr.height else None,
                     "window": fr["window"][0] if fr.height else None})
        if fr.height == 0:
            notes.append(f"{lab}: no step with ops found")
        for r in fr.iter_rows(named=True):
            trows.append({"family": r["family"], "x": x, "label": lab, **{k: r[k] for k in TABLE_SCHEMA
                                                                        if k not in ("family", "x", "label")}})
    first_hw, first_prog = next(iter(kinds))
    if any(prog != first_prog or not same_hardware(hw, first_hw) for hw, prog in kinds):
        # a factor across different programs, chips or device counts is not a scaling
        parts = "; ".join(f"{', '.join(labs)}: {prog} on {hardware_text(hw)}" for (hw, prog), labs in kinds.items())
        notes.append(f"the points are not one sweep (different step programs or devices: {parts}): their "
                     "per-doubling factors compare different work")
    table = pl.DataFrame(trows, schema=TABLE_SCHEMA) if trows else pl.DataFrame(schema=TABLE_SCHEMA)
    srows = []
    ridge = peaks.ridge
    order = (table.group_by("family").agg(pl.col("time_ps").max().alias("m")).sort(["m", "family"], descending=[True, False])
             ["family"].to_list() if table.height else [])
    for fam in order:
        sub = table.filter(pl.col("family") == fam).sort("x")
        fx, ft, fi = sub["x"].to_list(), sub["time_ps"].to_list(), sub["intensity"].to_list()
        s = _slope(fx, ft)
        sf = _slope(fx, sub["flops"].to_list())
        factors = [(t2 / t1) ** (1 / math.log2(x2 / x1)) if t1 and t2 and t1 > 0 and t2 > 0 else None
                   for (x1, t1), (x2, t2) in zip(zip(fx, ft), list(zip(fx, ft))[1:])]
        d, between, cx = _crossing(fx, fi, ridge, [bool(v) for v in sub["no_bytes_share"].to_list()])
        srows.append({"family": fam, "points": sub.height, "first_ps": ft[0], "last_ps": ft[-1],
                      "factor_per_doubling": None if s is None else 2.0 ** s, "factors": factors,
                      "flops_per_doubling": None if sf is None else 2.0 ** sf, "crosses": d,
                      "cross_between": between, "cross_x": cx})
    scaling = pl.DataFrame(srows, schema=SCALING_SCHEMA) if srows else pl.DataFrame(schema=SCALING_SCHEMA)
    if ridge is None:
        notes.append("no peaks known: no ridge point, so no crossing (--chip, --peak-flops/--peak-bw, --measure-cpu-peaks)")
    upper = (table.filter((pl.col("no_bytes_share") > 0) & pl.col("intensity").is_not_null())
             .select("family").unique(maintain_order=True)["family"].to_list() if table.height else [])
    if upper:
        notes.append("intensities shown with <= are upper bounds: part of the family's time has FLOPs but no byte "
                     f"count ({', '.join(upper[:3])}{', ...' if len(upper) > 3 else ''}); at or above the ridge "
                     "such a point is bound by unknown and takes part in no crossing")
    if rules is not None and table.height:  # rules that match no op: say so, not a silent "other"
        from traceview.analysis.ops.families import unmatched_rules

        what = unmatched_rules(rules, table["family"].to_list())
        if what:
            notes.append(f"no op of any profile matched {what}: every family shown is the built-in ones or the "
                         "rules' catch-all")
    x_name = "batch" if xs is None else "x"
    return Ladder(points=pl.DataFrame(prow, schema=POINTS_SCHEMA), table=table, scaling=scaling, ridge=ridge,
                  x_name=x_name, notes=notes)
