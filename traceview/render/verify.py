"""``traceview verify`` results as text: one PASS/FAIL line per check (the reason under a
failed one) and a count."""

from __future__ import annotations

from traceview.model.naming import safe_line


def result_line(r) -> str:
    """``PASS  <check>`` or ``FAIL  <check>`` with the reason on the next line; both are
    :func:`~traceview.model.naming.safe_line` (an op name's ESC or newline shown as ``\x1b``,
    ``\n``), so each stays one terminal line."""
    return f"{'PASS' if r.ok else 'FAIL'}  {safe_line(r.check)}" + ("" if r.ok else f"\n      {safe_line(r.message)}")


def verify_text(report) -> str:
    """The text of a :class:`~traceview.analysis.compare.verify.VerifyReport` (no final newline)."""
    n = len(report.results)
    lines = [result_line(r) for r in report.results]
    lines.append(f"{n} check(s): {n - len(report.failed)} passed, {len(report.failed)} failed")
    return "\n".join(lines)
