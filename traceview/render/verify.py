"""``traceview verify`` results as text: one PASS/FAIL line per check (the reason under a
failed one) and a count."""

from __future__ import annotations


def result_line(r) -> str:
    """``PASS  <check>`` or ``FAIL  <check>`` with the reason on the next line."""
    return f"{'PASS' if r.ok else 'FAIL'}  {r.check}" + ("" if r.ok else f"\n      {r.message}")


def verify_text(report) -> str:
    """The text of a :class:`~traceview.analysis.verify.VerifyReport` (no final newline)."""
    n = len(report.results)
    lines = [result_line(r) for r in report.results]
    lines.append(f"{n} check(s): {n - len(report.failed)} passed, {len(report.failed)} failed")
    return "\n".join(lines)
