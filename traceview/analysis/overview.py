"""The answer first: the figures the HTML report opens with, read off a built
:class:`~traceview.analysis.report.Report` (nothing is measured here).

:func:`overview` returns a dict:

- ``step``: the analysed window's step time (:func:`traceview.analysis.steps.stepstats.distribution`):
  n (device-steps), n_window, median_ps, p10_ps, p90_ps, window, method; or ``unknown`` (why;
  "" in every part whose figures are known).
- ``utilisation``: per phase with window steps (:class:`~traceview.analysis.steps.phases.Phases`
  summary): phase, window_steps, mfu, mbu (fractions, None when unknown), and
  ``mfu_unknown`` / ``mbu_unknown``: why a figure is missing (the peak not known, no FLOP or
  byte counts, no steps); or ``unknown`` for the whole.
- ``memory``: the largest allocator's peak in use (bytes), its capacity and share of it, the
  allocator, host and how many allocators; or ``unknown`` (why: the memory analysis's notes).
- ``families``: the step's families, mean time per step (ps) and share of the mean step wall
  time (:class:`~traceview.analysis.steps.anatomy.StepAnatomy` families), then the idle time
  (``idle (no op running)``: the step minus the union of op intervals,
  :class:`~traceview.analysis.steps.anatomy.Coverage`); empty without steps.
- ``step_numbers``: :func:`step_numbers`.
"""

from __future__ import annotations

import polars as pl

#: the name of the idle segment of the family bar
IDLE = "idle (no op running)"


def step_numbers(anat, markers: pl.DataFrame | None) -> dict | None:
    """{step index: the trace's own step number} when the steps are the trace's step markers
    and each step index carries one ``step_num`` (``jax.profiler.StepTraceAnnotation``, a TPU
    ``Steps`` line), else None. Step indices are 0-based per device in start order, as the
    ``step`` column of every table; markers are matched to steps by (host, start_ps)."""
    if anat is None or anat.method != "markers" or markers is None or markers.height == 0:
        return None
    if "step_num" not in markers.columns or anat.steps.height == 0:
        return None
    mk = markers.select("host", "start_ps", "step_num").filter(pl.col("step_num").is_not_null()).unique()
    m = (anat.steps.select("host", "start_ps", "step").join(mk, on=["host", "start_ps"], how="left")
         .group_by("step").agg(pl.col("step_num").n_unique().alias("n"), pl.col("step_num").first(),
                               pl.col("step_num").null_count().alias("nulls")))
    if m.height == 0 or (m["n"] != 1).any() or (m["nulls"] > 0).any():
        return None
    out = {int(s): int(n) for s, n in m.select("step", "step_num").iter_rows()}
    return None if all(k == v for k, v in out.items()) else out


def _step(anat) -> dict:
    if anat is None or anat.steps.height == 0:
        return {"unknown": "no steps found (no step markers and no program execution to call a step)"}
    d = anat.distribution or {}
    if d.get("median_ps") is None:
        return {"unknown": f"no step in the analysed window ({d.get('window', '?')})"}
    return {"unknown": "", "n": d["n"], "n_window": d["n_window"], "median_ps": d["median_ps"], "p10_ps": d["p10_ps"],
            "p90_ps": d["p90_ps"], "window": d.get("window", ""), "method": anat.method}


def _utilisation(rep) -> dict:
    ph = getattr(rep, "phases", None)
    if ph is None or ph.steps.height == 0:
        return {"unknown": "no steps to divide work by"}
    pk = rep.peaks
    rows = []
    for r in ph.summary.iter_rows(named=True):
        if not r["window_steps"]:
            continue
        mfu_why = mbu_why = ""
        if r["mfu"] is None:
            mfu_why = ("the chip's peak FLOP/s is unknown" if not pk.peak_flops else
                       "no FLOP counts for the ops of these steps")
        if r["mbu"] is None:
            mbu_why = ("the chip's peak memory bandwidth is unknown" if not pk.peak_bw else
                       "no byte counts for the ops of these steps")
        rows.append({"phase": r["phase"], "window_steps": r["window_steps"], "mfu": r["mfu"], "mbu": r["mbu"],
                     "mfu_unknown": mfu_why, "mbu_unknown": mbu_why})
    if not rows:
        return {"unknown": "no step in the analysed window"}
    return {"unknown": "", "phases": rows, "flops_source": ph.flops_source}


def _memory(rep) -> dict:
    mem = getattr(rep, "memory", None)
    if mem is None:
        return {"unknown": "no memory analysis"}
    if not mem.allocators:
        why = "; ".join(mem.notes) if mem.notes else "no allocator events in the trace"
        return {"unknown": why}
    a = mem.allocators[0]
    return {"unknown": "", "peak_bytes": a.peak_in_use, "capacity_bytes": a.capacity, "share": a.peak_share,
            "allocator": a.allocator, "host": a.host, "n_allocators": len(mem.allocators)}


def _families(anat) -> list[dict]:
    if anat is None or anat.steps.height == 0 or anat.families.height == 0:
        return []
    out = [{"family": r["family"], "time_ps": float(r["self_ps"] or 0), "share": r["share"]}
           for r in anat.families.iter_rows(named=True) if r["self_ps"]]
    cov = anat.coverage
    if cov.idle_ps and cov.idle_ps > 0:
        out.append({"family": IDLE, "time_ps": float(cov.idle_ps),
                    "share": cov.idle_ps / cov.step_ps if cov.step_ps else None})
    return out


def overview(rep, markers: pl.DataFrame | None = None) -> dict:
    """The overview of ``rep`` (module doc); ``markers``: the profile's step markers, for the
    trace's own step numbers."""
    anat = rep.steps
    return {"step": _step(anat), "utilisation": _utilisation(rep), "memory": _memory(rep),
            "families": _families(anat), "step_numbers": step_numbers(anat, markers)}
