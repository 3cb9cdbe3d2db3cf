"""``traceview verify`` results as text: one PASS/FAIL/UNKNOWN line per check (the reason
under a failed or unknown one) and a count."""

from __future__ import annotations

from traceview.model.naming import safe_line


def result_line(r) -> str:
    """``PASS  <check>``, ``FAIL  <check>`` or ``UNKNOWN  <check>``, the last two with the reason
    on the next line (a pass with its caveat, ``note: ...``, when it has one); both are :func:`~traceview.model.naming.safe_line` (an op name's ESC or
    newline shown as ``\x1b``, ``\n``), so each stays one terminal line."""
    return f"{r.status.upper()}  {safe_line(r.check)}" + (f"\n      {safe_line(r.message)}" if not r.ok else
                                                         f"\n      note: {safe_line(r.note)}" if getattr(r, "note", "") else "")


def verify_text(report) -> str:
    """The text of a :class:`~traceview.analysis.compare.verify.VerifyReport` (no final newline)."""
    n = len(report.results)
    lines = [result_line(r) for r in report.results]
    lines.append(f"{n} check(s): {len(report.passed)} passed, {len(report.failed)} failed, {len(report.unknown)} unknown")
    return "\n".join(lines)
