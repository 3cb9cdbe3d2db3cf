"""Kernel names that carry the block configuration, and their parser.

Format (tpu-inference RPA v3 naming, PR #1820)::

    RPA{phase}-p_{page}-bq_{bq_sz}_{bq_csz}-bkv_{bkv_sz}_{bkv_csz}[-sw_{window}]

``phase`` is ``d`` (decode), ``p`` (prefill) or ``m`` (mixed). Example:
``RPAd-p_16-bq_1_1-bkv_256_256``. The legacy pre-#1820 form
``RPA-bq_{bq}-bkvp_{pages}-p_{page}`` is also understood by the parser. The grammar itself
is :mod:`traceview.model.kernelname`, the one place names are read and written.

The name is passed as ``pallas_call(name=...)``, so it appears in the HLO ``op_name`` of the
kernel's ops (``.../RPAd-p_16-bq_1_1-bkv_256_256/...``) and, on TPU, as the Mosaic
``kernel_name`` of the ``tpu_custom_call``; the KV block size can be read off any trace.
"""

from __future__ import annotations

from traceview.model.kernelname import RPA_PHASES as PHASES
from traceview.model.kernelname import format_kernel_name, rpa_config


def kernel_name(*, page_size: int, kv_block: int, kv_compute_block: int | None = None, q_block: tuple[int, int] = (1, 1),
                phase: str = "d", sliding_window: int | None = None) -> str:
    """Build a kernel name such as ``RPAd-p_16-bq_1_1-bkv_256_256``.

    Args:
      page_size: tokens per page.
      kv_block: KV fetch block (``bkv_sz``) in tokens.
      kv_compute_block: KV compute chunk (``bkv_csz``); defaults to ``kv_block``.
      q_block: ``(bq_sz, bq_csz)`` query block sizes (decode: ``(1, 1)``).
      phase: ``"d"``, ``"p"`` or ``"m"``.
      sliding_window: appended as ``-sw_{w}`` when given.

    Raises: ValueError for an unknown phase or non-positive sizes.
    """
    if phase not in PHASES:
        raise ValueError(f"phase={phase!r} must be one of {sorted(PHASES)}")
    kc = kv_block if kv_compute_block is None else kv_compute_block
    for label, v in (("page_size", page_size), ("kv_block", kv_block), ("kv_compute_block", kc), ("q_block[0]", q_block[0]), ("q_block[1]", q_block[1])):
        if int(v) <= 0:
            raise ValueError(f"{label} must be positive, got {v!r}")
    parts = [("p", (page_size,)), ("bq", tuple(q_block)), ("bkv", (kv_block, kc))]
    if sliding_window is not None:
        parts.append(("sw", (sliding_window,)))
    return format_kernel_name(f"RPA{phase}", parts)


def match_kernel_config(text: str) -> dict | None:
    """Like :func:`parse_kernel_config` but returns None when ``text`` holds no kernel name."""
    return rpa_config(text)


def parse_kernel_config(name: str) -> dict:
    """Read the block configuration out of a kernel name or any string containing one.

    Accepts the bare name (``RPAd-p_16-bq_1_1-bkv_256_256``) or a longer HLO ``op_name`` /
    trace event name that contains it (``jit(decode_b8_bkv256)/RPAd-p_16-.../while``).

    Returns: ``{"phase": "decode"|"prefill"|"mixed", "page": int, "bq": (bq_sz, bq_csz),
      "bkv": (bkv_sz, bkv_csz)}`` in tokens, plus ``"sliding_window": int`` when present.
      Legacy ``RPA-bq_{bq}-bkvp_{pages}-p_{page}`` names give ``bkv = pages * page`` and
      phase ``"mixed"``.
    Raises: ValueError if no kernel name is found.
    """
    out = match_kernel_config(name)
    if out is None:
        raise ValueError(f"no RPA kernel name (e.g. 'RPAd-p_16-bq_1_1-bkv_256_256') found in {name!r}")
    return out
