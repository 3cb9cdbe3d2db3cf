"""The study's verification lines: model memory, KV cache capacity, buckets compiled, donation.

The study checked every treatment against the engine's own start-up lines rather than the
flag that requested it (a KV-dtype flag that reached the printed configuration and changed
nothing was caught by the unchanged capacity line). So every figure here is read off what
was allocated or compiled, never off the configuration:

* model memory: bytes of the parameter arrays (``size * itemsize`` summed over the leaves);
* KV cache capacity: pages and tokens from the cache arrays' shapes (``[Hkv, pages, page, D]``,
  page 0 being the trash page), bytes summed over every cache leaf (scales included, should
  a quantised cache carry them), so another KV dtype changes it by itself;
* buckets compiled: the ``jit_*`` program names compiled so far;
* decode donation: ``alias_size_in_bytes`` of the compiled decode executable
  (``jax.stages.Compiled.memory_analysis()``), the input bytes XLA reuses for outputs: the
  KV cache's bytes when it is donated, 0 for the copying update.
"""

from __future__ import annotations

import math

import jax
import numpy as np


def array_bytes(tree) -> tuple[int, int]:
    """``(elements, bytes)`` summed over the leaves of ``tree`` (arrays or ShapeDtypeStructs)."""
    n = b = 0
    for a in jax.tree.leaves(tree):
        size = math.prod(a.shape)
        n += size
        b += size * np.dtype(a.dtype).itemsize
    return n, b


def cache_capacity(k_cache, v_cache) -> dict:
    """Capacity of the allocated pools (lists of ``[Hkv, pages, page, D]`` per layer).

    Returns ``pages`` (allocated, trash page included), ``usable_pages`` (pages - 1),
    ``page_size``, ``tokens`` (usable_pages * page_size: what requests can hold), ``bytes``
    (every K and V leaf), ``bytes_per_token`` (bytes / (pages * page_size), all layers, K and
    V) and ``dtypes``.
    """
    first = jax.tree.leaves(k_cache)[0]
    pages, page = int(first.shape[1]), int(first.shape[2])
    _, nbytes = array_bytes((k_cache, v_cache))
    usable = pages - 1  # page 0, the trash page, is never handed out
    return {"pages": pages, "usable_pages": usable, "page_size": page, "tokens": usable * page, "bytes": nbytes,
            "bytes_per_token": nbytes / (pages * page),
            "dtypes": sorted({str(np.dtype(a.dtype)) for a in jax.tree.leaves((k_cache, v_cache))})}


def aliased_bytes(compiled) -> int | None:
    """Input bytes the executable aliases to outputs (donated buffers), or None when the
    backend gives no memory analysis."""
    try:
        m = compiled.memory_analysis()
    except Exception:  # noqa: BLE001 - backends without the analysis raise various errors
        return None
    v = getattr(m, "alias_size_in_bytes", None) if m is not None else None
    return None if v is None else int(v)


def _gib(b: float) -> str:
    return f"{b / 2 ** 30:.3f} GiB" if b >= 2 ** 30 else f"{b / 2 ** 20:.2f} MiB"


def format_lines(v: dict) -> list[str]:
    """The verification dict of :meth:`LLM.verification` as start-up lines."""
    kv, d = v["kv_cache"], v["decode_donation"]
    lines = [
        f"model memory      {v['param_bytes']:,} bytes ({_gib(v['param_bytes'])}) in {v['param_count']:,} parameters",
        (f"KV cache capacity {kv['usable_pages']:,} pages x {kv['page_size']} = {kv['tokens']:,} tokens "
         f"({kv['pages']:,} pages allocated with the trash page); {kv['bytes']:,} bytes ({_gib(kv['bytes'])}), "
         f"{kv['bytes_per_token']:,.0f} B/token, {'/'.join(kv['dtypes'])}"),
        (f"buckets compiled  {len(v['buckets_compiled'])}: "
         + (", ".join(v["buckets_compiled"]) or "none yet (compiled on first use)")),
    ]
    if d["module"] is None:
        lines.append(f"decode donation   requested {'on' if d['requested'] else 'off'}; no decode bucket compiled yet")
    else:
        alias = "unknown (no memory analysis)" if d["aliased_bytes"] is None else f"{d['aliased_bytes']:,} bytes aliased"
        lines.append(f"decode donation   requested {'on' if d['requested'] else 'off'}; {d['module']}: {alias} "
                     f"of {kv['bytes']:,} cache bytes")
    return lines
