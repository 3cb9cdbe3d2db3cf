"""Peak FLOP/s and memory bandwidth of the chips traceview knows, with the source of each.

Peaks are dense (no structured sparsity) bf16 matrix FLOP/s per chip and HBM bandwidth in
bytes/s (1 GB = 1e9 bytes). Each entry names its source; the trace's own plane stats take
precedence when present (see :func:`traceview.analysis.peaks.resolve_peaks`).

For GPUs whose trace gives clock rate and core count but no FLOP/s, ``FLOPS_PER_CLOCK``
gives dense bf16 FLOP per clock per SM/CU, computed from the vendor's peak figure divided by
(cores × boost clock) of the reference part named alongside; peak = clock × cores × that.
"""

from __future__ import annotations

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


CHIPS: dict[str, Chip] = {c.key: c for c in [
    Chip("tpu-v4", "TPU v4", 275e12, 1200e9,
         "Google Cloud TPU v4 documentation: 275 TFLOP/s bf16, 1,200 GB/s HBM per chip", r"TPU v4"),
    Chip("tpu-v5e", "TPU v5e", 197e12, 819e9,
         "Google Cloud TPU v5e documentation: 197 TFLOP/s bf16, 819 GB/s HBM per chip", r"TPU v5 ?(lite|e)"),
    Chip("tpu-v5p", "TPU v5p", 459e12, 2765e9,
         "Google Cloud TPU v5p documentation: 459 TFLOP/s bf16, 2,765 GB/s HBM per chip", r"TPU v5p?$|TPU v5p"),
    Chip("tpu-v6e", "TPU v6e (Trillium)", 918e12, 1640e9,
         "Google Cloud TPU v6e documentation: 918 TFLOP/s bf16, 1,640 GB/s HBM per chip", r"TPU v6 ?(lite|e)"),
    Chip("a100", "NVIDIA A100 SXM4 80GB", 312e12, 2039e9,
         "NVIDIA A100 datasheet: 312 TFLOP/s bf16 dense (tensor core), 2,039 GB/s HBM2e (SXM 80GB)", r"A100"),
    Chip("h100", "NVIDIA H100 SXM5", 989.4e12, 3350e9,
         "NVIDIA H100 datasheet: 989 TFLOP/s bf16 dense (1,979 with sparsity), 3.35 TB/s HBM3 (SXM)", r"H100"),
    Chip("h200", "NVIDIA H200 SXM", 989.4e12, 4800e9,
         "NVIDIA H200 datasheet: 989 TFLOP/s bf16 dense (1,979 with sparsity), 4.8 TB/s HBM3e", r"H200"),
    Chip("mi300x", "AMD Instinct MI300X", 1307.4e12, 5300e9,
         "AMD Instinct MI300X datasheet: 1,307.4 TFLOP/s bf16 dense, 5.3 TB/s HBM3", r"MI300X|gfx942"),
]}

#: dense bf16 FLOP per clock per SM/CU, keyed by (vendor, compute capability major, minor).
FLOPS_PER_CLOCK: dict[tuple[str, int, int], tuple[int, str]] = {
    ("AMD", 9, 4): (2048, "MI300X: 1,307.4e12 FLOP/s / (304 CU × 2.1 GHz) = 2048 (gfx942)"),
    ("NVIDIA", 9, 0): (4096, "H100 SXM: 989.4e12 FLOP/s / (132 SM × 1.83 GHz) = 4096 (sm_90)"),
    ("NVIDIA", 8, 0): (2048, "A100: 312e12 FLOP/s / (108 SM × 1.41 GHz) = 2048 (sm_80)"),
    ("NVIDIA", 7, 0): (1024, "V100 SXM2: 125e12 FLOP/s fp16 tensor / (80 SM × 1.53 GHz) = 1024 (sm_70)"),
}


def find_chip(text: str) -> Chip | None:
    """The chip whose key equals ``text`` (case-insensitive) or whose pattern matches it."""
    if not text:
        return None
    t = text.strip().lower()
    if t in CHIPS:
        return CHIPS[t]
    for chip in CHIPS.values():
        if re.search(chip.match, text, re.I):
            return chip
    return None


def gpu_peak_flops(stats: dict) -> tuple[float, str] | None:
    """Dense bf16 FLOP/s from a GPU plane's ``clock_rate`` (kHz), ``core_count`` and compute
    capability: clock × cores × FLOPS_PER_CLOCK. None when the architecture is unknown."""
    vendor = str(stats.get("device_vendor") or "NVIDIA")
    vendor = "AMD" if "amd" in vendor.lower() else "NVIDIA"
    try:
        key = (vendor, int(stats.get("compute_cap_major")), int(stats.get("compute_cap_minor")))
        clock_hz = float(stats["clock_rate"]) * 1e3
        cores = int(stats["core_count"])
    except (KeyError, TypeError, ValueError):
        return None
    if key not in FLOPS_PER_CLOCK:
        return None
    per, why = FLOPS_PER_CLOCK[key]
    return clock_hz * cores * per, (f"trace clock {clock_hz / 1e9:.3g} GHz × {cores} cores × {per} FLOP/clock ({why})")
