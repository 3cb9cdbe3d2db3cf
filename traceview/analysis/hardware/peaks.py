"""Peak FLOP/s and memory bandwidth for a roofline, each with where it came from.

Precedence, per figure (:func:`resolve_peaks`): an explicit figure > ``--chip`` > the trace's
own plane stats, unless they disagree with the chip the trace identifies
(:mod:`traceview.analysis.hardware.chips`) > that chip's table entry. CPU traces carry none: pass them,
or measure this host (:func:`measure_cpu_peaks`).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

from traceview.analysis.hardware.chips import find_chip, gpu_peak_flops, identify_chip
from traceview.errors import UsageError
from traceview.model.schema import DeviceInfo
from traceview.model.units import fmt_rate


#: a trace's own peak gives way to the identified chip's sourced figure when they differ by more
#: than this factor: parts and clocks within one chip family differ by less (H100 SXM vs PCIe
#: clocks ~1.2x), while a plane stat computed from the wrong memory clock is off by 2x
DISAGREE = 1.25


@dataclass
class Peaks:
    """Peak rates used for a roofline, each with where it came from.

    ``peak_flops`` in FLOP/s, ``peak_bw`` in bytes/s; ``ridge`` = peak_flops / peak_bw
    (FLOP/byte), None when either is unknown or the ratio is not finite. ``trace_flops`` /
    ``trace_bw`` keep the trace's own figures and ``table_flops`` / ``table_bw`` the identified
    chip's (``chip``, identified by ``chip_how``), whichever was used.
    """

    peak_flops: float | None = None
    peak_bw: float | None = None
    flops_source: str = "unknown"
    bw_source: str = "unknown"
    device_type: str = ""
    notes: list = field(default_factory=list)
    trace_flops: float | None = None
    trace_bw: float | None = None
    table_flops: float | None = None
    table_bw: float | None = None
    chip: str = ""
    chip_how: str = ""

    @property
    def ridge(self) -> float | None:
        if self.peak_flops and self.peak_bw:
            r = self.peak_flops / self.peak_bw
            return r if math.isfinite(r) and r > 0 else None
        return None

    @property
    def complete(self) -> bool:
        return bool(self.peak_flops and self.peak_bw)


def _positive(v, what: str) -> float | None:
    if v is None:
        return None
    try:
        f = float(v)
    except (TypeError, ValueError, OverflowError):
        f = math.nan
    if not (math.isfinite(f) and f > 0):
        raise UsageError(f"{what} must be a finite positive number, got {v}")
    return f


def _trace_figure(v, what: str, dev, notes: list) -> float | None:
    """The trace's figure when it is a finite positive number; else None, with a note."""
    if v is None:
        return None
    if isinstance(v, (int, float)) and math.isfinite(v) and v > 0:
        return float(v)
    notes.append(f"the trace's {what} of {dev.name} is {v!r}, not a finite positive rate: ignored")
    return None


def _reconcile(p: Peaks, which: str, trace: float | None, trace_src: str, chip, unit: str, *,
               given: bool = False) -> None:
    """Set one figure from the trace's and the chip table's, preferring the table when they differ
    by more than :data:`DISAGREE` (with a note, unless the figure is ``given`` explicitly)."""
    table = None if chip is None else (chip.peak_flops if which == "flops" else chip.peak_bw)
    setattr(p, f"trace_{which}", trace)
    setattr(p, f"table_{which}", table)
    table_src = None if chip is None else f"chip table ({chip.key}): {chip.source}"
    use, src = (trace, trace_src) if trace else (table, table_src)
    if trace and table:
        ratio = max(trace, table) / min(trace, table)
        if ratio > DISAGREE:
            use, src = table, table_src
        if ratio > DISAGREE and not given:
            flag = "--peak-flops" if which == "flops" else "--peak-bw"
            p.notes.append(f"the trace's peak {fmt_rate(trace, unit)} ({trace_src}) is {ratio:.2f}x off the "
                           f"{fmt_rate(table, unit)} of {chip.name}, identified by {p.chip_how}: using the chip "
                           f"table's figure (differences over {DISAGREE}x are not clock or part variation; "
                           f"pass {flag} to choose)")
    if use:
        setattr(p, f"peak_{which}", use)
        setattr(p, f"{which}_source", src)


def resolve_peaks(devices: list[DeviceInfo], *, chip: str | None = None, peak_flops: float | None = None,
                  peak_bw: float | None = None, given: str = "given on the command line") -> Peaks:
    """Choose the peaks for a profile's devices.

    Precedence, per figure: explicit ``peak_flops`` / ``peak_bw`` (FLOP/s, bytes/s; labelled
    ``given``) > ``chip`` (a key or name from :data:`traceview.analysis.hardware.chips.CHIPS`) > the
    trace's plane stats (TPU ``peak_teraflops_per_second`` / ``peak_hbm_bw_gigabytes_per_second``;
    GPU ``memory_bandwidth`` and clock × cores × FLOP/clock) unless they differ from the
    identified chip's table entry (:func:`traceview.analysis.hardware.chips.identify_chip`) by more than
    :data:`DISAGREE`, when the table's figure is used and a note says so > the chip table alone.
    CPU traces carry none: pass them or use :func:`measure_cpu_peaks`.
    Raises :class:`UsageError` for an unknown ``chip`` or a peak that is not finite and positive.
    """
    peak_flops = _positive(peak_flops, "peak FLOP/s")
    peak_bw = _positive(peak_bw, "peak bandwidth")
    kinds = [d for d in devices if d.kind in ("TPU", "GPU", "CUSTOM")] or list(devices)
    dev = kinds[0] if kinds else None
    p = Peaks(device_type=dev.device_type if dev else "")
    types = sorted({d.device_type for d in kinds if d.device_type})
    if len(types) > 1 and peak_flops is None and peak_bw is None and chip is None:
        p.notes.append(f"devices of several types ({', '.join(types)}): the roofline uses the peaks of "
                       f"{dev.device_type} ({dev.host + ':' if dev.host else ''}{dev.name}); select one kind with --device")
    if chip is not None:
        table = find_chip(chip)
        if table is None:
            from traceview.analysis.hardware.chips import CHIPS

            raise UsageError(f"unknown chip {chip!r}; known: {', '.join(CHIPS)}")
        p.peak_flops, p.flops_source = table.peak_flops, f"--chip {table.key}: {table.source}"
        p.peak_bw, p.bw_source = table.peak_bw, f"--chip {table.key}: {table.source}"
        p.device_type = p.device_type or table.name
        p.chip, p.chip_how = table.key, "--chip"
    elif dev is not None:
        auto, p.chip_how = identify_chip(dev.device_type, dev.stats)
        p.chip = auto.key if auto is not None else ""
        flops, flops_src = _trace_figure(dev.peak_flops, "peak FLOP/s", dev, p.notes), f"trace plane stats of {dev.name}"
        if flops is None and dev.kind == "GPU":
            g = gpu_peak_flops(dev.stats)
            if g:
                flops, flops_src = g
        bw = _trace_figure(dev.peak_bw, "memory bandwidth", dev, p.notes)
        _reconcile(p, "flops", flops, flops_src, auto, "FLOP/s", given=peak_flops is not None)
        _reconcile(p, "bw", bw, f"trace plane stats of {dev.name}", auto, "B/s", given=peak_bw is not None)
    if peak_flops is not None:
        p.peak_flops, p.flops_source = peak_flops, given
    if peak_bw is not None:
        p.peak_bw, p.bw_source = peak_bw, given
    return p


def measure_cpu_peaks(seconds: float = 0.5, *, passes: int = 5) -> Peaks:
    """Opt-in microbenchmark of this host: float32 matmul FLOP/s (numpy, 1024³, 2·N³ FLOPs per
    call) and copy bandwidth (a 256 MiB float32 array copied into another: 512 MiB read +
    written per pass). Each is warmed up first (BLAS threads started, both arrays' pages
    touched: a fresh process otherwise measures first-touch page faults, 20-30x slower), then
    timed as the best of at least ``passes`` runs within about ``seconds``. Returns
    :class:`Peaks` labelled "measured on this host"."""
    import numpy as np

    def best(fn, work: float) -> float:
        fn()  # warm-up, untimed
        top, runs, end = 0.0, 0, time.perf_counter() + seconds
        while runs < passes or time.perf_counter() < end:
            t = time.perf_counter()
            fn()
            dt = time.perf_counter() - t
            if dt > 0:
                top = max(top, work / dt)
            runs += 1
            if runs >= 10 * passes and time.perf_counter() >= end:
                break
        return top

    n = 1024
    a = np.ones((n, n), dtype=np.float32)
    flops = best(lambda: a @ a, 2.0 * n ** 3)
    src = np.ones(64 << 20, dtype=np.float32)
    dst = np.zeros_like(src)  # pages touched here, not in the timed copies
    bw = best(lambda: np.copyto(dst, src), 2.0 * src.nbytes)
    return Peaks(flops, bw, f"measured on this host: numpy float32 1024³ matmul, best of {passes}+ after a warm-up",
                 f"measured on this host: numpy 256 MiB copy (read + write), best of {passes}+ after a warm-up", "CPU")


def profile_peaks(prof, *, chip: str | None = None, peak_flops: float | None = None,
                  peak_bw: float | None = None) -> Peaks:
    """:func:`resolve_peaks` for the devices of a profile that ran ops (a folder of loose
    traces can hold others; all of them when none did)."""
    return resolve_peaks(prof.used_devices(), chip=chip, peak_flops=peak_flops, peak_bw=peak_bw)
