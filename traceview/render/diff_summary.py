"""The headline lines of a diff (what matched, op time, step time, kernel changes), shared by
the terminal, JSON and HTML renderers."""

from __future__ import annotations

from traceview.model.units import fmt_time_ps, fmt_ratio


def summary_lines(d) -> list[str]:
    """Plain-text headline lines of a :class:`~traceview.analysis.compare.diff.DiffReport`."""
    n = d.counts()
    lines = [f"base {d.base_label}", f"treatment {d.treatment_label}",
             f"populations: {n['matched']} matched, {n['appeared']} appeared, {n['vanished']} vanished; "
             f"op time {fmt_time_ps(d.op_time_ps_base)} -> {fmt_time_ps(d.op_time_ps_treatment)}; "
             f"traced op events {d.events_base:,} -> {d.events_treatment:,}"]
    s = d.steps
    if s is not None:
        r = f" ({fmt_ratio(s.ratio)}x)" if s.ratio else ""
        lines.append(f"step time {fmt_time_ps(s.step_ps_base)} -> {fmt_time_ps(s.step_ps_treatment)}{r} "
                     f"[{_steps_of(s.module_base, s.method_base)} x{s.steps_base} vs "
                     f"{_steps_of(s.module_treatment, s.method_treatment)} x{s.steps_treatment}] (profiled run)"
                     + (f"; means over the {s.window} window: {s.window_steps_base} vs {s.window_steps_treatment} steps"
                        if s.window_steps_base is not None and (s.window_steps_base, s.window_steps_treatment)
                        != (s.steps_base, s.steps_treatment) else ""))
        c = getattr(s, "change", None)
        if c is not None:
            against = f"; against {c.noise_source}" if getattr(c, "noise_source", "") else ""
            lines.append(f"median step {change_text(c)} "
                         f"({c.level:.0%} interval, {c.method}{against})")
    level = getattr(d, "noise_level", None)
    c = d.noise_counts() if level is not None else None
    if c is not None:
        n, k, u = c["compared"], c["significant_matched"], c["unknown"]
        ns = getattr(d, "run_noise", None)
        gone = _gone_text(c, d.counts())
        if ns is not None and getattr(ns, "source", "") == "unknown":
            lines.append(f"noise: {ns.text}: of the {n} matched populations with an interval, "
                         f"{n - u} contain no change (~, not significant) and {u} exclude it "
                         f"(?, significance unknown){gone}")
        else:
            src = f" against the run-to-run noise, {ns.text}" if ns is not None and getattr(ns, "text", "") else ""
            lines.append(f"noise: {k} of {n} matched populations with an interval changed beyond the noise "
                         f"({level:.0%} rank interval of the self time per step{src}; ~ marks a change within noise)"
                         f"{gone}")
        if ns is not None and getattr(ns, "too_few", 0):
            lines.append(f"noise: {ns.too_few} matched populations have too few samples for an interval: "
                         f"record up to {ns.more_samples} more a side (steps; occurrences for a population outside the "
                         f"steps)")
    for r in d.kernel_changes().iter_rows(named=True):
        lines.append(f"kernel {r['kernel_id']}: {r['changes']} "
                     f"({', '.join(r['names_base'])} -> {', '.join(r['names_treatment'])})")
    return lines



def _gone_text(c: dict, total: dict) -> str:
    """The populations on one side only, as the noise line's last clause: how many of the
    vanished and appeared (``total``: :meth:`DiffReport.counts`) are significant ("; 4 of 5
    vanished and 88 of 101 appeared are significant: each ran in 2 or more samples of one side
    only"; "61 vanished" when all are); "" when none is."""
    from traceview.analysis.compare.diff import MIN_PRESENT

    parts = [f"{c[s]} {s}" if c[s] == total.get(s, c[s]) else f"{c[s]} of {total[s]} {s}"
             for s in ("vanished", "appeared") if c[s]]
    if not parts:
        return ""
    verb = "is" if len(parts) == 1 and c["vanished"] + c["appeared"] == 1 else "are"
    few = c.get("one_side_too_few", 0)
    return (f"; {' and '.join(parts)} {verb} significant: each ran in {MIN_PRESENT} or more samples of one side only"
            + (f" ({few} more on one side only ran in fewer)" if few else ""))


def _steps_of(module, method) -> str:
    """What a side's steps are, for the step line: the step markers, a module, or the trace."""
    return "step markers" if method == "markers" else (module or "whole trace")


def change_text(c) -> str:
    """A :class:`~traceview.analysis.compare.noise.Change` in words: ``"2.78x [2.10x-3.60x]"``
    outside the noise, ``"~1.04x [0.90x-1.20x] within noise"`` inside it, ``"~1.00x
    [0.99x-1.01x] not significant: the interval contains no change"`` against an unknown
    noise, ``"?1.30x [1.20x-1.40x] significance unknown"`` when the interval excludes 1
    there, ``"1.04x (no interval)"`` without interval, ``"-"`` without ratio."""
    from traceview.analysis.compare import noise

    if c.ratio is None:
        return "-"
    if c.lo is None or c.hi is None:
        return f"{fmt_ratio(c.ratio)}x (no interval)"
    body = f"{fmt_ratio(c.ratio)}x [{fmt_ratio(c.lo)}x-{fmt_ratio(c.hi)}x]"
    v = c.verdict
    if v == noise.VERDICT_UNKNOWN:
        return f"?{body} significance unknown"
    if v == noise.VERDICT_NO_CHANGE:
        return f"~{body} not significant: the interval contains no change"
    return body if v == noise.VERDICT_SIGNIFICANT else f"~{body} within noise"


def noise_cell(r: dict) -> str:
    """A diff row's per-step change: the median ratio (Hodges-Lehmann) of its self time per step
    inside its interval, ``"~ 1.02x [0.91-1.20x]"`` within noise (or, the noise unknown, an
    interval holding 1: no change), ``"2.80x [2.10-3.60x]"`` outside, ``"? ..."`` when the
    noise is unknown and the interval excludes 1, ``"gone"`` / ``"new"`` for a population that
    ran in several samples of one side only (significant), ``"-"`` without interval (too few
    samples); ``" per occ."`` after the interval of a population compared per occurrence (it
    runs outside the steps). The ratio column beside it is total over total self time, which
    also moves with the occurrences."""
    lo, hi = r.get("ratio_lo"), r.get("ratio_hi")
    if str(r.get("noise") or "").startswith("significant ("):  # gone from every step, or new in each
        return "gone" if "vanished" in r["noise"] else "new"
    if lo is None or hi is None:
        return "-"
    mark = "? " if r.get("significant") is None else "" if r.get("significant") else "~ "
    med = r.get("median_ratio")
    est = f"{fmt_ratio(med)}x " if med is not None else ""
    # a population outside the steps is compared occurrence by occurrence: said in the cell
    per = " per occ." if r.get("samples") == "per occurrence" else ""
    return f"{mark}{est}[{fmt_ratio(lo)}-{fmt_ratio(hi)}x]{per}"
