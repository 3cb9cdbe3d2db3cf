"""The step window's grammar (``steady``, ``all``, ``A:B``), apart from the per-step statistics
(:mod:`traceview.analysis.steps.stepstats`) so that a command can check it before it imports
numpy or polars."""

from __future__ import annotations

from traceview.errors import UsageError


def parse_window(spec: str) -> tuple[str, slice | None]:
    """(``"steady"`` | ``"all"`` | ``"A:B"``, the slice for A:B else None). Raises
    UsageError naming the expected forms."""
    if not isinstance(spec, str):
        raise UsageError(f"step window must be a string (all, steady or A:B), got {spec!r}")
    s = spec.strip()
    if s in ("steady", "all"):
        return s, None
    if s.count(":") == 1:
        a, b = (x.strip() for x in s.split(":"))
        try:
            lo = int(a) if a else None
            hi = int(b) if b else None
        except ValueError:
            lo = hi = "bad"
        if lo != "bad":
            return f"{'' if lo is None else lo}:{'' if hi is None else hi}", slice(lo, hi)
    raise UsageError(f"unknown step window {spec!r}: expected all, steady or A:B (step indices, "
                     f"A inclusive, B exclusive, e.g. 2: or 1:-1)")
