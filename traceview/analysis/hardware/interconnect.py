"""Chip-to-chip and host-link peak bandwidths, per chip of :data:`traceview.analysis.hardware.chips.CHIPS`.

Vendors quote the interconnect as a *bidirectional* aggregate per chip (both directions of
every link summed). A collective's bus bandwidth (nccl-tests convention) counts the bytes one
participant moves in one direction, so it is judged against half of that figure: ``per_direction``
(bytes/s). A collective over fewer links than the chip has (a pair of chips on a torus, one
NVLink peer) cannot reach it; the fraction is an upper-bound comparison, not an efficiency.

Sources (vendor documentation, figures as printed there; 1 GB = 1e9 bytes):

- TPU v5e: Google Cloud TPU v5e documentation, "Bidirectional inter-chip interconnect (ICI)
  bandwidth (per chip): 400 GBps" (1,600 Gbps in earlier revisions), 4 ICI ports per chip.
- TPU v5p: Google Cloud TPU v5p documentation, "Bidirectional ICI bandwidth per chip: 1200 GBps"
  (4,800 Gbps in earlier revisions).
- TPU v6e: Google Cloud TPU v6e documentation, "Bidirectional inter-chip interconnect (ICI)
  bandwidth (per chip): 800 GBps", 4 ICI ports; "connects to the host through a PCIe Gen5
  interface" (lane count not stated: host-link peak unknown).
- TPU7x (Ironwood): Google Cloud TPU7x documentation, 1.2 TB/s bidirectional ICI per chip.
- TPU v4: the Google Cloud TPU v4 documentation gives only Pod figures (all-reduce 1.1 PB/s per
  Pod, bisection 24 TB/s), no per-chip ICI figure: unknown.
- NVIDIA (NVLink, total bidirectional per GPU; PCIe as the datasheets print it, bidirectional
  x16): V100 SXM2 datasheet NVLink 300 GB/s, PCIe Gen3 32 GB/s; A100 SXM datasheet NVLink
  600 GB/s, PCIe Gen4 64 GB/s; H100 SXM datasheet NVLink 900 GB/s, PCIe Gen5 128 GB/s; H200 SXM
  datasheet NVLink 900 GB/s, PCIe Gen5 128 GB/s; HGX B200 datasheet NVLink (5th gen) 1.8 TB/s
  per GPU (PCIe not stated per GPU: unknown).
- AMD (Infinity Fabric / xGMI, aggregate of the GPU's links): MI250X datasheet 8 links,
  800 GB/s peak aggregate Infinity Fabric bandwidth, PCIe Gen4 x16 64 GB/s; MI300X datasheet
  7 links x 128 GB/s = 896 GB/s peak aggregate, PCIe Gen5 x16 128 GB/s; MI325X datasheet
  same links (896 GB/s) and PCIe Gen5 x16 128 GB/s.
"""

from __future__ import annotations

from dataclasses import dataclass

from traceview.analysis.hardware.chips import find_chip


@dataclass(frozen=True)
class Link:
    """One chip's link peaks: ``interconnect`` (name), ``bidirectional`` (bytes/s, the vendor's
    aggregate, None when unknown), ``host_link`` (name) and ``host_bidirectional`` (bytes/s or
    None), ``source`` (where the figures come from)."""

    chip: str
    interconnect: str
    bidirectional: float | None
    host_link: str
    host_bidirectional: float | None
    source: str

    @property
    def per_direction(self) -> float | None:
        """Interconnect bytes/s one way: half the bidirectional aggregate."""
        return None if self.bidirectional is None else self.bidirectional / 2

    @property
    def host_per_direction(self) -> float | None:
        """Host-link bytes/s one way: half the bidirectional figure."""
        return None if self.host_bidirectional is None else self.host_bidirectional / 2


LINKS: dict[str, Link] = {k.chip: k for k in [
    Link("tpu-v4", "ICI", None, "PCIe", None,
         "Google Cloud TPU v4 documentation: Pod figures only, no per-chip ICI bandwidth"),
    Link("tpu-v5e", "ICI", 400e9, "PCIe", None,
         "Google Cloud TPU v5e documentation: 400 GBps bidirectional ICI per chip, 4 ports"),
    Link("tpu-v5p", "ICI", 1200e9, "PCIe", None,
         "Google Cloud TPU v5p documentation: 1200 GBps bidirectional ICI per chip"),
    Link("tpu-v6e", "ICI", 800e9, "PCIe Gen5 (lanes not documented)", None,
         "Google Cloud TPU v6e documentation: 800 GBps bidirectional ICI per chip, 4 ports; host over PCIe Gen5"),
    Link("tpu-v7", "ICI", 1200e9, "PCIe", None,
         "Google Cloud TPU7x (Ironwood) documentation: 1.2 TB/s bidirectional ICI per chip"),
    Link("v100", "NVLink 2", 300e9, "PCIe Gen3 x16", 32e9,
         "NVIDIA V100 datasheet: NVLink 300 GB/s, PCIe Gen3 32 GB/s (SXM2)"),
    Link("a100-40gb", "NVLink 3", 600e9, "PCIe Gen4 x16", 64e9,
         "NVIDIA A100 datasheet: NVLink 600 GB/s, PCIe Gen4 64 GB/s (SXM)"),
    Link("a100", "NVLink 3", 600e9, "PCIe Gen4 x16", 64e9,
         "NVIDIA A100 datasheet: NVLink 600 GB/s, PCIe Gen4 64 GB/s (SXM)"),
    Link("h100", "NVLink 4", 900e9, "PCIe Gen5 x16", 128e9,
         "NVIDIA H100 datasheet: NVLink 900 GB/s, PCIe Gen5 128 GB/s (SXM)"),
    Link("h200", "NVLink 4", 900e9, "PCIe Gen5 x16", 128e9,
         "NVIDIA H200 datasheet: NVLink 900 GB/s, PCIe Gen5 128 GB/s (SXM)"),
    Link("b200", "NVLink 5", 1800e9, "PCIe", None,
         "NVIDIA HGX B200 datasheet: NVLink 1.8 TB/s per GPU"),
    Link("mi250x", "Infinity Fabric (xGMI)", 800e9, "PCIe Gen4 x16", 64e9,
         "AMD Instinct MI250X datasheet: 800 GB/s peak aggregate Infinity Fabric (8 links), PCIe Gen4 x16 64 GB/s"),
    Link("mi300x", "Infinity Fabric (xGMI)", 896e9, "PCIe Gen5 x16", 128e9,
         "AMD Instinct MI300X datasheet: 7 Infinity Fabric links x 128 GB/s = 896 GB/s, PCIe Gen5 x16 128 GB/s"),
    Link("mi325x", "Infinity Fabric (xGMI)", 896e9, "PCIe Gen5 x16", 128e9,
         "AMD Instinct MI325X datasheet: 896 GB/s peak aggregate Infinity Fabric, PCIe Gen5 x16 128 GB/s"),
]}

#: chips outside the chip table (no FLOP/s row there) matched by name
_EXTRA = {"tpu-v7": r"TPU ?(v7|7x)|Ironwood", "mi250x": r"MI250X?"}


def find_link(device_type: str, chip_key: str | None = None) -> Link | None:
    """The :class:`Link` of a device: by ``chip_key`` (a :data:`CHIPS` key) when given, else
    by the chip table's name patterns on ``device_type``; None when the chip is unknown."""
    import re

    if chip_key and chip_key in LINKS:
        return LINKS[chip_key]
    for key, pat in _EXTRA.items():
        if device_type and re.search(pat, device_type, re.I):
            return LINKS[key]
    chip = find_chip(device_type or "")
    return None if chip is None else LINKS.get(chip.key)
