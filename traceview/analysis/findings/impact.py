"""What each finding is worth: the step time a change could recover, as a range, with its method
and the provenance of every input.

A finding's ``impact`` (:func:`impact_of`) is ``{low_ps, high_ps, share_low, share_high,
step_ps, method, basis, inputs}``: time per step (ps) the change the finding names would
recover, at least and at most; the same as a share of one basis for every finding of a report,
the mean period from one step's start to the next (``step_ps``: the step plus the gap after it,
:func:`attach`); ``method``:

- ``measured``: the ops the change removes, timed in the trace (low = high = their time);
- ``bounded``: at most the time the finding names (idle, exposed communication, transfers,
  conversions): the change can recover part of it, nothing says how much;
- ``modelled``: up to the gap between the measured time and the roofline's prediction (FLOPs
  and bytes over the peaks);
- ``unknown``: the finding is about what the trace can be trusted for, or about memory, or its
  time cannot be read off the trace (a KV block's padding needs the sequence lengths).

``inputs``: {input: "counted" (read off the trace's events) or "inferred" (from a model: a
chip table's peak, FLOPs derived from HLO shapes, a threshold)}. Findings are ranked by the
upper share (unknown last, then severity): :func:`rank`.
"""

from __future__ import annotations

from traceview.analysis.findings import SEVERITIES, Finding

METHODS = ("measured", "bounded", "modelled", "unknown")


def _imp(low: float, high: float, step: float, method: str, basis: str, inputs: dict) -> dict:
    share = (lambda x: x / step if step and step > 0 else None)
    return {"low_ps": float(low), "high_ps": float(high), "share_low": share(low), "share_high": share(high),
            "step_ps": float(step) if step else None, "method": method, "basis": basis, "inputs": inputs}


def _unknown(basis: str, inputs: dict | None = None) -> dict:
    return {"low_ps": None, "high_ps": None, "share_low": None, "share_high": None, "step_ps": None,
            "method": "unknown", "basis": basis, "inputs": inputs or {}}


def _inputs(report, ctx=None):
    """``ctx`` (the rules' :class:`~traceview.analysis.findings.Inputs`, whose derived tables are
    reused) when it is of ``report``, else new Inputs of ``report``."""
    from traceview.analysis.findings import Inputs

    return ctx if ctx is not None and ctx.report is report else Inputs(report)


def _steps(report, ctx=None) -> float:
    """The mean step's wall time (ps) of the report's window steps, 0 without steps."""
    from traceview.analysis.findings._context import step_info

    return float(step_info(_inputs(report, ctx))["step_ps"] or 0)


def impact_of(f: Finding, report=None, ctx=None) -> dict:
    """The impact of finding ``f`` (module docstring), from its evidence and, for
    ``far-below-roofline``, the report's roofline per family. ``ctx``: the rules' Inputs of
    ``report``, when the caller has them."""
    ev = f.evidence or {}
    fid = f.id
    if fid in ("sampler-search-dominates", "state-copied-every-step"):
        per, step = ev.get("per_step_ps"), ev.get("step_ps") or (_steps(report, ctx) if report is not None else 0)
        if per is None or not step:
            return _unknown("no per-step time of the ops it names")
        what = "the sampler's search ops" if fid.startswith("sampler") else "the copies of the state"
        return _imp(per, per, step, "measured", f"{what} per step: the change removes them",
                    {"op time": "counted", "step time": "counted"})
    if fid == "logits-conversions":
        per, step = ev.get("per_step_ps"), (report is not None and _steps(report, ctx)) or 0
        if per is None or not step:
            return _unknown("no per-step time of the conversions")
        return _imp(0, per, step, "bounded", "at most the conversions' time per step (fusing them keeps the work, "
                    "splitting programs made the study slower)", {"op time": "counted", "step time": "counted"})
    if fid == "host-bound-steps":
        idle, gap, step = ev.get("idle_ps"), ev.get("gap_ps") or 0.0, ev.get("step_ps")
        period = ev.get("period_ps") or ((step or 0) + gap)
        if idle is None or not step:
            return _unknown("no idle time")
        return _imp(0, idle + gap, period, "bounded", "at most the device's idle time inside and between steps",
                    {"idle time": "counted", "step time": "counted"})
    if fid == "exposed-communication":
        exp, step = ev.get("exposed_ps"), ev.get("step_ps")
        if exp is None or not step:
            return _unknown("no exposed time")
        return _imp(0, exp, step, "bounded", "at most the exposed communication per step (hidden behind compute it "
                    "costs nothing)", {"exposed time": "counted", "step time": "counted"})
    if fid == "host-transfers-dominate":
        host, step = ev.get("host_ps"), ev.get("step_ps")
        if host is None or not step:
            return _unknown("no host-transfer time")
        return _imp(0, host, step, "bounded", "at most the host transfers' time per step with nothing else running",
                    {"transfer time": "counted", "step time": "counted"})
    if fid == "straggler-device":
        sg = getattr(report, "stragglers", None) if report is not None else None
        steps = getattr(sg, "steps", None)
        st = _steps(report, ctx) if report is not None else 0
        if steps is not None and steps.height and st and {"busy_max_ps", "busy_median_ps"} <= set(steps.columns):
            lead = float((steps["busy_max_ps"] - steps["busy_median_ps"]).mean() or 0)
            return _imp(0, max(lead, 0.0), st, "bounded", "at most the slowest device's busy time over the median "
                        "device's, per step", {"busy time": "counted", "step time": "counted"})
        return _unknown("the straggler's lead is a ratio of busy times; its time per step is not in the evidence",
                        {"lead": "counted"})
    if fid == "far-below-roofline":
        fr = getattr(report, "family_roofline", None) if report is not None else None
        fams = {h.get("family") for h in ev.get("families") or []}
        if fr is None or not fams or "predicted_ps" not in getattr(fr, "columns", []):
            return _unknown("no roofline per family")
        rows = [r for r in fr.iter_rows(named=True) if r["family"] in fams and r["predicted_ps"] is not None]
        if not rows:
            return _unknown("no roofline prediction for the family")
        gap = sum(max(r["time_ps"] - r["predicted_ps"], 0.0) for r in rows)
        step = rows[0].get("step_ps") or 0
        prov = getattr(getattr(report, "hlo", None), "flop_provenance", None)
        derived = prov is None or not prov.height or bool((prov["source"] != "trace").any())
        return _imp(0, gap, step, "modelled", "up to the gap between the family's measured time and its roofline "
                    "time (FLOPs / peak FLOP/s, bytes / peak bandwidth) per step",
                    {"family time": "counted", "FLOPs and bytes": "inferred" if derived else "counted",
                     "peaks": "inferred"})
    if fid == "warmup-in-window":
        return _unknown("a warm-up step skews the window's mean, not the run: it costs no steady-state time",
                        {"step times": "counted"})
    if fid == "kv-block-covers-context":
        return _unknown("the padding a smaller block saves depends on the sequences' lengths, which the trace "
                        "does not hold", {"block and context": "counted"})
    if fid == "one-name-several-regimes":
        return _unknown("a measurement pitfall (name-keyed figures mix shape buckets): no time to recover")
    if fid.startswith("memory-"):
        return _unknown("a memory finding: it decides what fits, not the step time", {"allocator bytes": "counted"})
    return _unknown("about what the trace can be trusted for: no step time to recover")


def _period(report, ctx=None) -> float:
    """The mean time from one window step's start to the next (step + gap after it, ps): the one
    basis every finding's share is of, so shares and the ranking compare; 0 without steps."""
    from traceview.analysis.findings._context import step_info

    info = step_info(_inputs(report, ctx))
    return float((info["step_ps"] or 0) + (info["gap_ps"] or 0))


def attach(findings: list[Finding], report=None, ctx=None) -> list[Finding]:
    """Set each finding's ``impact`` (in place), its shares of one basis (:func:`_period`, when
    the report has steps), and return them ranked (:func:`rank`). ``ctx``: the rules' Inputs
    of ``report`` (their step figures are reused), when the caller has them."""
    basis = _period(report, ctx) if report is not None else 0.0
    for f in findings:
        imp = impact_of(f, report, ctx)
        if basis and imp.get("high_ps") is not None:
            imp.update(step_ps=basis, share_low=imp["low_ps"] / basis, share_high=imp["high_ps"] / basis)
        f.impact = imp
    return rank(findings)


def rank(findings: list[Finding]) -> list[Finding]:
    """By the upper share of the step the change could recover, largest first; findings
    whose impact is unknown after, by severity then id."""
    def key(f):
        hi = (f.impact or {}).get("share_high")
        return (hi is None, -(hi or 0.0), SEVERITIES.index(f.severity), f.id)

    return sorted(findings, key=key)


def impact_line(imp: dict | None) -> str:
    """One line of a finding's impact: ``up to 1.2 ms per step (0-8.1%), bounded: at most ...;
    inputs: idle time counted, ...``; "" when it has none."""
    from traceview.model.units import fmt_pct, fmt_time_ps

    if not imp:
        return ""
    inputs = ", ".join(f"{k} {v}" for k, v in (imp.get("inputs") or {}).items())
    tail = f" (inputs: {inputs})" if inputs else ""
    if imp.get("method") == "unknown" or imp.get("high_ps") is None:
        return f"unknown: {imp.get('basis', '')}{tail}"
    lo, hi = imp["low_ps"], imp["high_ps"]
    size = (f"{fmt_time_ps(hi)} per step" if lo == hi else
            f"up to {fmt_time_ps(hi)} per step" if not lo else f"{fmt_time_ps(lo)}-{fmt_time_ps(hi)} per step")
    share = ""
    if imp.get("share_high") is not None:
        share = (f" ({fmt_pct(imp['share_high'])} of the {fmt_time_ps(imp.get('step_ps'))} step period)" if lo == hi
                 else f" ({fmt_pct(imp['share_low'])}-{fmt_pct(imp['share_high'])} of the "
                      f"{fmt_time_ps(imp.get('step_ps'))} step period)")
    return f"{size}{share}, {imp['method']}: {imp.get('basis', '')}{tail}"
