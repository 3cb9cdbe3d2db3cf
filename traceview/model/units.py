"""Human formatting of ps, bytes, FLOP/s for terminal and HTML output."""

from __future__ import annotations


import math


def fmt_time_ps(ps: float | int | None) -> str:
    """Format a duration given in picoseconds with an adaptive unit (ns, µs, ms, s, h, days);
    "-" for None or a value that is not finite."""
    if ps is None:
        return "-"
    ps = float(ps)
    a = abs(ps)
    if not math.isfinite(a):
        return "-"
    if a >= 86400e12 * 3:
        return f"{ps / 86400e12:.2f} days"
    if a >= 3600e12 * 3:
        return f"{ps / 3600e12:.3f} h"
    if a >= 1e12:
        return f"{ps / 1e12:.3f} s"
    if a >= 1e9:
        return f"{ps / 1e9:.3f} ms"
    if a >= 1e6:
        return f"{ps / 1e6:.2f} µs"
    if a >= 1e3:
        return f"{ps / 1e3:.1f} ns"
    return f"{ps:z.0f} ps"  # z: a value that rounds to 0 reads 0, never -0


def fmt_rate(value: float | None, unit: str) -> str:
    """Format a rate (FLOP/s, B/s) with SI prefixes: ``fmt_rate(9.18e14, "FLOP/s")`` -> ``918 TFLOP/s``."""
    if value is None or not math.isfinite(value):
        return "-"
    for factor, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            return f"{value / factor:.4g} {prefix}{unit}"
    return f"{value:.4g} {unit}"


def fmt_ratio(x: float | None) -> str:
    """A ratio without its ``x``: two decimals (``1.25``), two significant digits under 0.1
    (``0.0037``: 0.00 would read as no time at all); "-" for None."""
    if x is None:
        return "-"
    return f"{x:.2g}" if 0 < abs(x) < 0.1 else f"{x:z.2f}"


def fmt_pct(x: float | None) -> str:
    """``0.1234`` -> ``"12.3%"``; ``"-"`` for None and for a non-finite value (never ``inf%``)."""
    return "-" if x is None or not math.isfinite(x) else f"{100 * x:z.1f}%"


def fmt_bytes(n: float | int | None) -> str:
    """Bytes with binary prefixes, as allocators count them: ``fmt_bytes(21492671104)`` ->
    ``20.02 GiB``; "-" for None or a value that is not finite."""
    if n is None or not math.isfinite(float(n)):
        return "-"
    v = float(n)
    for factor, prefix in ((1 << 50, "Pi"), (1 << 40, "Ti"), (1 << 30, "Gi"), (1 << 20, "Mi"), (1 << 10, "Ki")):
        if abs(v) >= factor:
            return f"{v / factor:.2f} {prefix}B"
    return f"{v:z.0f} B"
