"""The headline lines of a diff (what matched, op time, step time, kernel changes), shared by
the terminal, JSON and HTML renderers."""

from __future__ import annotations

from traceview.model.units import fmt_time_ps


def summary_lines(d) -> list[str]:
    """Plain-text headline lines of a :class:`~traceview.analysis.diff.DiffReport`."""
    n = d.counts()
    lines = [f"base {d.base_label}", f"treatment {d.treatment_label}",
             f"populations: {n['matched']} matched, {n['appeared']} appeared, {n['vanished']} vanished; "
             f"op time {fmt_time_ps(d.op_time_ps_base)} -> {fmt_time_ps(d.op_time_ps_treatment)}; "
             f"traced op events {d.events_base:,} -> {d.events_treatment:,}"]
    s = d.steps
    if s is not None:
        r = f" ({s.ratio:.2f}x)" if s.ratio else ""
        lines.append(f"step time {fmt_time_ps(s.step_ps_base)} -> {fmt_time_ps(s.step_ps_treatment)}{r} "
                     f"[{s.module_base or 'whole trace'} x{s.steps_base} vs "
                     f"{s.module_treatment or 'whole trace'} x{s.steps_treatment}] (profiled run)"
                     + (f"; means over the {s.window} window: {s.window_steps_base} vs {s.window_steps_treatment} steps"
                        if s.window_steps_base is not None and (s.window_steps_base, s.window_steps_treatment)
                        != (s.steps_base, s.steps_treatment) else ""))
    for r in d.kernel_changes().iter_rows(named=True):
        lines.append(f"kernel {r['kernel_id']}: {r['changes']} "
                     f"({', '.join(r['names_base'])} -> {', '.join(r['names_treatment'])})")
    return lines

