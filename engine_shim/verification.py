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
  KV cache's bytes when it is donated, 0 for the copying update;
* program memory (:func:`program_memory`): every compiled program's XLA
  ``CompiledMemoryStats`` (argument, output, alias, temporary and generated-code bytes), the
  memory view an XLA:CPU trace lacks (it carries no allocator events), with the KV pool's
  bytes read off the compiled program's argument shapes.
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


#: the XLA ``CompiledMemoryStats`` fields read, by the key they get here
MEMORY_FIELDS = {"argument_bytes": "argument_size_in_bytes", "output_bytes": "output_size_in_bytes",
                 "alias_bytes": "alias_size_in_bytes", "temp_bytes": "temp_size_in_bytes",
                 "generated_code_bytes": "generated_code_size_in_bytes"}


def _leaf_bytes(leaves) -> int:
    return sum(math.prod(a.shape) * np.dtype(a.dtype).itemsize for a in leaves)


def _shard(leaf, sharding):
    """``leaf`` (an ArgInfo or ShapeDtypeStruct) as one device holds it under ``sharding``:
    the memory analysis is per device."""
    shape = tuple(leaf.shape) if sharding is None else tuple(sharding.shard_shape(tuple(leaf.shape)))
    return jax.ShapeDtypeStruct(shape, leaf.dtype)


def program_memory(compiled, kv_args: tuple[int, ...] = (), kv_outs: tuple[int, ...] = ()) -> dict:
    """Memory of one compiled program, from XLA's ``CompiledMemoryStats``
    (``jax.stages.Compiled.memory_analysis()``); bytes, per device.

    Keys: ``argument_bytes``, ``output_bytes``, ``alias_bytes`` (input bytes the outputs reuse:
    donated buffers), ``temp_bytes``, ``generated_code_bytes`` (the stats' fields as XLA
    gives them; XLA:CPU leaves generated code at 0), ``resident_bytes`` = arguments + outputs
    - aliased + temporaries (what the program holds while it runs), and ``unknown``: None, or
    why the backend gave no analysis (every other key then None: nothing is invented).

    With ``kv_args`` (positions of the KV pools among the compiled arguments) and ``kv_outs``
    (among its outputs), also from the compiled program's shapes (per device: its input and
    output shardings' shard shapes), not the configuration:
    ``kv_pool_bytes`` (the pool leaves in the arguments, per-token scales included),
    ``kv_dtypes`` (of the value leaves), ``kv_scale_bytes`` (the per-token scale leaves of an
    int8 pool, else 0), ``kv_tokens`` (token slots: pages x page size of a pool, trash page
    included), ``kv_bytes_per_token`` (pool bytes / tokens), ``kv_bytes_at`` (the same token
    slots as ``float32`` and ``bfloat16`` pools: the value leaves re-priced, scales dropped)
    and ``kv_pools_held`` = (pool bytes in the arguments + in the outputs - the aliased bytes,
    at most one pool) / pool bytes: 1 when the update is in place, 2 when the program holds a
    second pool (the engine donates nothing but the KV pools).
    """
    out: dict = {k: None for k in (*MEMORY_FIELDS, "resident_bytes")}
    try:
        m = compiled.memory_analysis()
        if m is None:
            raise ValueError("memory_analysis() returned None")
        got = {k: getattr(m, f, None) for k, f in MEMORY_FIELDS.items()}
        missing = [MEMORY_FIELDS[k] for k in ("argument_bytes", "output_bytes", "alias_bytes", "temp_bytes")
                   if got[k] is None]
        if missing:
            raise ValueError(f"no {', '.join(missing)}")
    except Exception as e:  # noqa: BLE001 - backends without the analysis raise various errors
        return {**out, "unknown": f"no memory analysis ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})"}
    out.update({k: None if v is None else int(v) for k, v in got.items()})
    out["resident_bytes"] = out["argument_bytes"] + out["output_bytes"] - out["alias_bytes"] + out["temp_bytes"]
    out["unknown"] = None
    if kv_args:
        args, shardings = compiled.args_info[0], compiled.input_shardings[0]
        pools = [_shard(a, sh) for i in kv_args for a, sh in zip(jax.tree.leaves(args[i]), jax.tree.leaves(shardings[i]))]
        kv = _leaf_bytes(pools)
        outs = [_shard(o, o.sharding) for o in jax.tree.leaves([compiled.out_info[i] for i in kv_outs])]
        values = [a for a in pools if len(a.shape) == 4]  # [Hkv, pages, page, D]; scales are [Hkv, pages, page]
        tokens = int(values[0].shape[1] * values[0].shape[2]) if values else None
        n_values = sum(math.prod(a.shape) for a in values)
        out.update({
            "kv_pool_bytes": kv, "kv_dtypes": sorted({str(np.dtype(a.dtype)) for a in values}),
            "kv_scale_bytes": kv - _leaf_bytes(values), "kv_tokens": tokens,
            "kv_bytes_per_token": kv / tokens if tokens else None,
            "kv_bytes_at": {"float32": 4 * n_values, "bfloat16": 2 * n_values},
            "kv_pools_held": (kv + _leaf_bytes(outs) - min(out["alias_bytes"], kv)) / kv if kv else None,
        })
    return out


def _gib(b: float) -> str:
    return f"{b / 2 ** 30:.3f} GiB" if b >= 2 ** 30 else f"{b / 2 ** 20:.2f} MiB"


def _mib(b: int) -> str:
    return f"{b / 2 ** 20:.2f} MiB"


def memory_lines(memory: dict) -> list[str]:
    """Lines for ``{program: program_memory(...)}``: one per decode program (its bytes and the
    KV pools it holds), the KV pool's capacity per byte as the last decode program compiled
    takes it (every decode bucket takes the same pool), and the program holding the most
    bytes. ``[]`` when nothing is compiled."""
    if not memory:
        return []
    lines = []
    decode = [(n, m) for n, m in memory.items() if n.startswith("jit_decode_")]
    for name, m in decode:
        if m["unknown"]:
            lines.append(f"{name}: unknown ({m['unknown']})")
            continue
        held = m.get("kv_pools_held")
        lines.append(f"{name}: arguments {_mib(m['argument_bytes'])} (KV pool {m['kv_pool_bytes']:,} B), outputs "
                     f"{_mib(m['output_bytes'])}, aliased {m['alias_bytes']:,} B, temporaries {_mib(m['temp_bytes'])}; "
                     f"resident {_mib(m['resident_bytes'])}, KV pool held "
                     + ("unknown" if held is None else f"{held:.2f}x"))
    known = [(n, m) for n, m in decode if not m["unknown"] and m.get("kv_tokens")]
    if known:
        name, m = known[-1]
        kv, dt = m["kv_pool_bytes"], "+".join(m["kv_dtypes"])
        if m["kv_scale_bytes"]:
            dt += f" ({m['kv_scale_bytes']:,} of them per-token scales)"
        others = ", ".join(f"{d} {at:,} ({at / kv:.2f}x the bytes)" for d, at in m["kv_bytes_at"].items()
                           if [d] != m["kv_dtypes"])
        lines.append(f"KV pool as compiled in {name}: {kv:,} bytes {dt} for {m['kv_tokens']:,} token slots "
                     f"({m['kv_bytes_per_token']:,.0f} B/token); the same slots at {others}")
    analysed = [(n, m) for n, m in memory.items() if not m["unknown"]]
    unknown = [n for n, m in memory.items() if m["unknown"]]
    if analysed:
        name, m = max(analysed, key=lambda nm: nm[1]["resident_bytes"])
        lines.append(f"peak program {name}: resident {_mib(m['resident_bytes'])} (arguments {_mib(m['argument_bytes'])}, "
                     f"temporaries {_mib(m['temp_bytes'])}); {len(analysed)} of {len(memory)} programs analysed"
                     + (f", unknown: {', '.join(unknown)}" if unknown else ""))
    else:
        lines.append(f"no program analysed ({len(memory)} compiled, the backend gives no memory analysis)")
    return lines


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
    lines += [f"memory            {x}" for x in memory_lines(v.get("memory") or {})]
    return lines
