"""Peak FLOP/s and memory bandwidth of the chips traceview knows, with the source of each.

Peaks are dense (no structured sparsity) bf16 matrix FLOP/s per chip and HBM bandwidth in
bytes/s (1 GB = 1e9 bytes). Each entry names its source. The trace's own plane stats are used
when they agree with the identified chip's entry (see :func:`traceview.analysis.hardware.peaks.resolve_peaks`).

A GPU plane often names only its vendor ("AMD GPU"); :func:`identify_chip` then identifies the
part from its compute capability (``arch``) and, where one architecture has several parts,
from the HBM capacity the plane reports (``memory_size``) and its clock.

For GPUs whose trace gives clock rate and core count but no FLOP/s, ``FLOPS_PER_CLOCK``
gives dense bf16 FLOP per clock per SM/CU, computed from the vendor's peak figure divided by
(cores × boost clock) of the reference part named alongside; peak = clock × cores × that.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Chip:
    """One chip's peaks: ``peak_flops`` (FLOP/s, dense bf16), ``peak_bw`` (bytes/s, HBM)."""

    key: str
    name: str
    peak_flops: float
    peak_bw: float
    source: str
    match: str  # regex matched against the trace's device type string
    arch: tuple[str, int, int] | None = None  # (vendor, compute capability major, minor)
    memory_bytes: float | None = None  # HBM capacity, tells parts of one architecture apart
    clock_hz: float | None = None  # peak engine clock of the part, the last tie-break


CHIPS: dict[str, Chip] = {c.key: c for c in [
    Chip("tpu-v4", "TPU v4", 275e12, 1200e9,
         "Google Cloud TPU v4 documentation: 275 TFLOP/s bf16, 1,200 GB/s HBM per chip", r"TPU v4"),
    Chip("tpu-v5e", "TPU v5e", 197e12, 819e9,
         "Google Cloud TPU v5e documentation: 197 TFLOP/s bf16, 819 GB/s HBM per chip", r"TPU v5 ?(lite|e)"),
    Chip("tpu-v5p", "TPU v5p", 459e12, 2765e9,
         "Google Cloud TPU v5p documentation: 459 TFLOP/s bf16, 2,765 GB/s HBM per chip", r"TPU v5p?$|TPU v5p"),
    Chip("tpu-v6e", "TPU v6e (Trillium)", 918e12, 1640e9,
         "Google Cloud TPU v6e documentation: 918 TFLOP/s bf16, 1,640 GB/s HBM per chip", r"TPU v6 ?(lite|e)"),
    Chip("v100", "NVIDIA V100 SXM2", 125e12, 900e9,
         "NVIDIA V100 datasheet: 125 TFLOP/s fp16 tensor core, 900 GB/s HBM2 (SXM2)", r"V100",
         ("NVIDIA", 7, 0), 32e9, 1.53e9),
    Chip("a100-40gb", "NVIDIA A100 SXM4 40GB", 312e12, 1555e9,
         "NVIDIA A100 datasheet: 312 TFLOP/s bf16 dense (tensor core), 1,555 GB/s HBM2 (SXM 40GB)",
         r"A100.*40 ?GB", ("NVIDIA", 8, 0), 40e9, 1.41e9),
    Chip("a100", "NVIDIA A100 SXM4 80GB", 312e12, 2039e9,
         "NVIDIA A100 datasheet: 312 TFLOP/s bf16 dense (tensor core), 2,039 GB/s HBM2e (SXM 80GB)", r"A100",
         ("NVIDIA", 8, 0), 80e9, 1.41e9),
    Chip("h100", "NVIDIA H100 SXM5", 989.4e12, 3350e9,
         "NVIDIA H100 datasheet: 989 TFLOP/s bf16 dense (1,979 with sparsity), 3.35 TB/s HBM3 (SXM)", r"H100",
         ("NVIDIA", 9, 0), 80e9, 1.83e9),
    Chip("h200", "NVIDIA H200 SXM", 989.4e12, 4800e9,
         "NVIDIA H200 datasheet: 989 TFLOP/s bf16 dense (1,979 with sparsity), 4.8 TB/s HBM3e, 141 GB", r"H200",
         ("NVIDIA", 9, 0), 141e9, 1.83e9),
    Chip("b200", "NVIDIA B200", 2250e12, 8000e9,
         "NVIDIA HGX B200 datasheet: 2.25 PFLOP/s bf16 dense (4.5 with sparsity), 8 TB/s HBM3e per GPU", r"B200",
         ("NVIDIA", 10, 0), 180e9),
    Chip("mi300x", "AMD Instinct MI300X", 1307.4e12, 5300e9,
         "AMD Instinct MI300X datasheet: 1,307.4 TFLOP/s bf16 dense, 5.3 TB/s HBM3, 192 GB", r"MI300X",
         ("AMD", 9, 4), 192 * 2 ** 30, 2.1e9),
    Chip("mi325x", "AMD Instinct MI325X", 1307.4e12, 6000e9,
         "AMD Instinct MI325X datasheet: 1,307.4 TFLOP/s bf16 dense, 6 TB/s HBM3E, 256 GB", r"MI325X",
         ("AMD", 9, 4), 256 * 2 ** 30, 2.1e9),
    Chip("mi350x", "AMD Instinct MI350X", 2306.9e12, 8000e9,
         "AMD Instinct MI350X datasheet: 2.3 PFLOP/s bf16 dense (256 CU × 2.2 GHz × 4096), 8 TB/s HBM3E, 288 GB",
         r"MI350X", ("AMD", 9, 5), 288 * 2 ** 30, 2.2e9),
    Chip("mi355x", "AMD Instinct MI355X", 2516.6e12, 8000e9,
         "AMD Instinct MI355X datasheet: 2.5 PFLOP/s bf16 dense (256 CU × 2.4 GHz × 4096), 8 TB/s HBM3E, 288 GB",
         r"MI355X", ("AMD", 9, 5), 288 * 2 ** 30, 2.4e9),
]}

#: dense bf16 FLOP per clock per SM/CU, keyed by (vendor, compute capability major, minor).
FLOPS_PER_CLOCK: dict[tuple[str, int, int], tuple[int, str]] = {
    ("AMD", 9, 5): (4096, "MI355X: 2,516.6e12 FLOP/s / (256 CU × 2.4 GHz) = 4096 (gfx950)"),
    ("AMD", 9, 4): (2048, "MI300X: 1,307.4e12 FLOP/s / (304 CU × 2.1 GHz) = 2048 (gfx942)"),
    ("NVIDIA", 9, 0): (4096, "H100 SXM: 989.4e12 FLOP/s / (132 SM × 1.83 GHz) = 4096 (sm_90)"),
    ("NVIDIA", 8, 0): (2048, "A100: 312e12 FLOP/s / (108 SM × 1.41 GHz) = 2048 (sm_80)"),
    ("NVIDIA", 7, 0): (1024, "V100 SXM2: 125e12 FLOP/s fp16 tensor / (80 SM × 1.53 GHz) = 1024 (sm_70)"),
}


#: two parts of one architecture are told apart by HBM capacity only within this factor
CAPACITY_MATCH = 1.25


def find_chip(text: str) -> Chip | None:
    """The chip whose key equals ``text`` (case-insensitive; punctuation and a missing
    ``tpu`` prefix ignored: ``v6e``, ``TPU_v6e``, ``A100-40GB``) or whose pattern matches it."""
    if not text:
        return None
    t = text.strip().lower()
    if t in CHIPS:
        return CHIPS[t]
    bare = re.sub(r"[^a-z0-9]", "", t)
    for key, chip in CHIPS.items():
        k = re.sub(r"[^a-z0-9]", "", key)
        if bare in (k, k.removeprefix("tpu")):
            return chip
    for chip in CHIPS.values():
        if re.search(chip.match, text, re.I):
            return chip
    return None


def _arch(stats: dict) -> tuple[str, int, int] | None:
    vendor = "AMD" if "amd" in str(stats.get("device_vendor") or "").lower() else "NVIDIA"
    try:
        return vendor, int(stats["compute_cap_major"]), int(stats["compute_cap_minor"])
    except (KeyError, TypeError, ValueError, OverflowError):
        return None


def _number(stats: dict, key: str) -> float | None:
    try:
        v = float(stats.get(key))
    except (TypeError, ValueError, OverflowError):
        return None
    return v if math.isfinite(v) and v > 0 else None


def identify_chip(device_type: str, stats: dict) -> tuple[Chip | None, str]:
    """The chip a device plane describes, and how it was identified.

    By name first (``device_type``, then the ``gpu_device_name`` stat); else, for a GPU plane,
    by compute capability (``compute_cap_major`` / ``_minor`` with ``device_vendor``), choosing
    among the parts of that architecture the one whose HBM capacity is nearest the plane's
    ``memory_size`` (bytes, within :data:`CAPACITY_MATCH`), then the nearest ``clock_rate`` (kHz).
    Returns ``(None, reason)`` when nothing, or nothing unambiguous, matches.
    """
    for text in (device_type, str(stats.get("gpu_device_name") or "")):
        chip = find_chip(text)
        if chip is not None:
            return chip, f"device type {text!r}"
    arch = _arch(stats)
    if arch is None:
        return None, "no chip name or compute capability in the trace"
    cands = [c for c in CHIPS.values() if c.arch == arch]
    what = f"{arch[0]} compute capability {arch[1]}.{arch[2]}"
    if not cands:
        return None, f"{what} is not in the chip table"
    if len(cands) == 1:
        return cands[0], what
    mem, clock = _number(stats, "memory_size"), _number(stats, "clock_rate")
    if mem is None:
        return None, f"{what} is several parts ({', '.join(c.key for c in cands)}) and the trace gives no memory_size"
    near = [c for c in cands if max(mem, c.memory_bytes) / min(mem, c.memory_bytes) <= CAPACITY_MATCH]
    if not near:
        return None, f"{what} with {mem / 1e9:.0f} GB matches no part in the chip table"
    near.sort(key=lambda c: (abs(math.log(mem / c.memory_bytes)),
                             abs(math.log(clock * 1e3 / c.clock_hz)) if clock and c.clock_hz else 0.0))
    return near[0], f"{what}, {mem / 1e9:.0f} GB of memory"


def gpu_peak_flops(stats: dict) -> tuple[float, str] | None:
    """Dense bf16 FLOP/s from a GPU plane's ``clock_rate`` (kHz), ``core_count`` and compute
    capability: clock × cores × FLOPS_PER_CLOCK. None when the architecture is unknown."""
    key, clock_khz, cores = _arch(stats), _number(stats, "clock_rate"), _number(stats, "core_count")
    if key not in FLOPS_PER_CLOCK or not clock_khz or not cores:
        return None
    per, why = FLOPS_PER_CLOCK[key]
    clock_hz, cores = clock_khz * 1e3, int(cores)
    return clock_hz * cores * per, (f"trace clock {clock_hz / 1e9:.3g} GHz × {cores} cores × {per} FLOP/clock ({why})")
