"""Peak FLOP/s and memory bandwidth for a roofline, each with where it came from.

Precedence, per figure (:func:`resolve_peaks`): an explicit figure > ``--chip`` > the trace's
own plane stats > the chip table (:mod:`traceview.analysis.chips`) matched on the trace's
device type. CPU traces carry none: pass them, or measure this host (:func:`measure_cpu_peaks`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from traceview.analysis.chips import find_chip, gpu_peak_flops
from traceview.errors import UsageError
from traceview.model.schema import DeviceInfo


@dataclass
class Peaks:
    """Peak rates used for a roofline, each with where it came from.

    ``peak_flops`` in FLOP/s, ``peak_bw`` in bytes/s; ``ridge`` = peak_flops / peak_bw
    (FLOP/byte), None when either is unknown.
    """

    peak_flops: float | None = None
    peak_bw: float | None = None
    flops_source: str = "unknown"
    bw_source: str = "unknown"
    device_type: str = ""
    notes: list = field(default_factory=list)

    @property
    def ridge(self) -> float | None:
        if self.peak_flops and self.peak_bw:
            return self.peak_flops / self.peak_bw
        return None

    @property
    def complete(self) -> bool:
        return bool(self.peak_flops and self.peak_bw)


def resolve_peaks(devices: list[DeviceInfo], *, chip: str | None = None, peak_flops: float | None = None,
                  peak_bw: float | None = None) -> Peaks:
    """Choose the peaks for a profile's devices.

    Precedence, per figure: explicit ``peak_flops`` / ``peak_bw`` (FLOP/s, bytes/s) >
    ``chip`` (a key or name from :data:`traceview.analysis.chips.CHIPS`) > the trace's plane stats
    (TPU ``peak_teraflops_per_second`` / ``peak_hbm_bw_gigabytes_per_second``; GPU
    ``memory_bandwidth`` and clock × cores × FLOP/clock) > the chip table matched on the
    trace's device type. CPU traces carry none: pass them or use :func:`measure_cpu_peaks`.
    Raises :class:`UsageError` for an unknown ``chip`` or a non-positive peak.
    """
    for v, what in ((peak_flops, "peak FLOP/s"), (peak_bw, "peak bandwidth")):
        if v is not None and not v > 0:
            raise UsageError(f"{what} must be positive, got {v}")
    kinds = [d for d in devices if d.kind in ("TPU", "GPU", "CUSTOM")] or list(devices)
    dev = kinds[0] if kinds else None
    p = Peaks(device_type=dev.device_type if dev else "")
    types = sorted({d.device_type for d in kinds if d.device_type})
    if len(types) > 1 and peak_flops is None and peak_bw is None and chip is None:
        p.notes.append(f"devices of several types ({', '.join(types)}): the roofline uses the peaks of "
                       f"{dev.device_type} ({dev.host + ':' if dev.host else ''}{dev.name}); select one kind with --device")
    table = None
    if chip is not None:
        table = find_chip(chip)
        if table is None:
            from traceview.analysis.chips import CHIPS

            raise UsageError(f"unknown chip {chip!r}; known: {', '.join(CHIPS)}")
        p.peak_flops, p.flops_source = table.peak_flops, f"--chip {table.key}: {table.source}"
        p.peak_bw, p.bw_source = table.peak_bw, f"--chip {table.key}: {table.source}"
        p.device_type = p.device_type or table.name
    elif dev is not None:
        if dev.peak_flops:
            p.peak_flops, p.flops_source = dev.peak_flops, f"trace plane stats of {dev.name}"
        elif dev.kind == "GPU":
            g = gpu_peak_flops(dev.stats)
            if g:
                p.peak_flops, p.flops_source = g[0], g[1]
        if dev.peak_bw:
            p.peak_bw, p.bw_source = dev.peak_bw, f"trace plane stats of {dev.name}"
        auto = find_chip(dev.device_type) or find_chip(str(dev.stats.get("gpu_device_name", "")))
        if auto is not None:
            if not p.peak_flops:
                p.peak_flops, p.flops_source = auto.peak_flops, f"chip table ({auto.key}): {auto.source}"
            if not p.peak_bw:
                p.peak_bw, p.bw_source = auto.peak_bw, f"chip table ({auto.key}): {auto.source}"
    if peak_flops is not None:
        p.peak_flops, p.flops_source = float(peak_flops), "given on the command line"
    if peak_bw is not None:
        p.peak_bw, p.bw_source = float(peak_bw), "given on the command line"
    return p


def measure_cpu_peaks(seconds: float = 0.5) -> Peaks:
    """Opt-in microbenchmark of this host: float32 matmul FLOP/s (numpy, 1024³, 2·N³ FLOPs per
    call) and copy bandwidth (256 MiB array copy, read + write bytes). Best of repeated runs
    within about ``seconds`` each. Returns :class:`Peaks` labelled 'measured'."""
    import numpy as np

    n = 1024
    a = np.ones((n, n), dtype=np.float32)
    best = 0.0
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        t = time.perf_counter()
        a @ a
        best = max(best, 2 * n ** 3 / (time.perf_counter() - t))
    src = np.ones(64 << 20, dtype=np.float32)
    dst = np.empty_like(src)
    bw = 0.0
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        t = time.perf_counter()
        np.copyto(dst, src)
        bw = max(bw, 2 * src.nbytes / (time.perf_counter() - t))
    return Peaks(best, bw, "measured: numpy float32 1024³ matmul on this host",
                 "measured: numpy 256 MiB copy (read+write) on this host", "CPU")


def profile_peaks(prof, *, chip: str | None = None, peak_flops: float | None = None,
                  peak_bw: float | None = None) -> Peaks:
    """:func:`resolve_peaks` for the devices of a profile that ran ops (a folder of loose
    traces can hold others; all of them when none did)."""
    return resolve_peaks(prof.used_devices(), chip=chip, peak_flops=peak_flops, peak_bw=peak_bw)
