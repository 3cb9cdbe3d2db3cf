"""Tensor parallelism for the bundled model across ``N`` devices (``LLM(tensor_parallel=N)``).

Megatron-style split over a 1-D mesh with axis ``tp``: the query projection ``wq`` and the MLP's
``w_gate`` / ``w_up`` are split by columns (query heads, hidden units), ``wo`` and ``w_down``
by rows, so each layer's attention output and MLP output are partial sums that XLA's SPMD
partitioner completes with one all-reduce each (2 per layer per step). The single KV head
of the multi-query presets (``wk``, ``wv``, the KV cache), the embedding and the norms are
replicated. The decode kernel runs under ``shard_map`` on each device's ``Hq / N`` query
heads against the replicated KV pages (a Pallas call is not partitioned by the SPMD
partitioner; under ``shard_map`` each device runs it on its local operands).

Works on any backend with N devices; on CPU use
``XLA_FLAGS=--xla_force_host_platform_device_count=N`` before JAX starts.
"""

from __future__ import annotations

import jax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

try:  # JAX >= 0.6 exports it at the top level
    from jax import shard_map as _shard_map
except ImportError:  # pragma: no cover - older JAX
    from jax.experimental.shard_map import shard_map as _shard_map

AXIS = "tp"

#: per-layer weight -> partition spec
LAYER_SPECS = {"wq": P(None, AXIS), "wk": P(), "wv": P(), "wo": P(AXIS, None), "w_gate": P(None, AXIS),
               "w_up": P(None, AXIS), "w_down": P(AXIS, None), "attn_norm": P(), "mlp_norm": P()}


def make_mesh(n: int, num_heads: int, mlp_hidden: int) -> Mesh:
    """A 1-D mesh of the first ``n`` devices. Raises ValueError when fewer devices exist or
    ``n`` does not divide the query heads and the MLP hidden size."""
    devs = jax.devices()
    if n < 1 or n > len(devs):
        raise ValueError(f"tensor_parallel={n} needs {n} devices, {len(devs)} available"
                         + (" (on CPU set XLA_FLAGS=--xla_force_host_platform_device_count=N before JAX starts)"
                            if jax.default_backend() == "cpu" else ""))
    if num_heads % n or mlp_hidden % n:
        raise ValueError(f"tensor_parallel={n} must divide the {num_heads} query heads and the MLP hidden size "
                         f"{mlp_hidden}")
    return Mesh(devs[:n], (AXIS,))


def replicated(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, P())


def shard_params(params: dict, mesh: Mesh) -> dict:
    """``params`` placed on ``mesh`` by :data:`LAYER_SPECS` (embedding and final norm replicated)."""
    rep = replicated(mesh)
    out = {"embed": jax.device_put(params["embed"], rep), "final_norm": jax.device_put(params["final_norm"], rep),
           "layers": []}
    for layer in params["layers"]:
        out["layers"].append({k: jax.device_put(v, NamedSharding(mesh, LAYER_SPECS[k])) for k, v in layer.items()})
    return out


def replicate(tree, mesh: Mesh):
    """Every array of ``tree`` replicated on ``mesh``."""
    return jax.device_put(tree, replicated(mesh))


def constrain_replicated(tree, mesh: Mesh):
    """Inside a jitted function: every array of ``tree`` constrained to replicated on ``mesh``
    (the step's outputs keep the placement of its inputs, so a donated cache aliases)."""
    rep = replicated(mesh)
    return jax.tree.map(lambda a: jax.lax.with_sharding_constraint(a, rep), tree)


def _shard_map_params() -> set:
    """Parameter names of the installed ``shard_map`` (through any wrapper)."""
    import inspect

    try:
        return set(inspect.signature(_shard_map).parameters)
    except (TypeError, ValueError):  # pragma: no cover - a builtin without a signature
        return set()


def head_sharded_attention(mesh: Mesh, attention):
    """``attention`` (``paged_decode``'s signature) run under ``shard_map``: ``q[B, Hq, D]``
    split on its heads, the KV pages, lengths, page table and scales replicated; the output
    ``[B, Hq, D]`` split the same way."""

    def call(q, k_pages, v_pages, kv_lens, page_table, **kw):
        scales = {k: kw.pop(k) for k in ("k_scales", "v_scales") if kw.get(k) is not None}
        kw.pop("k_scales", None), kw.pop("v_scales", None)
        names = list(scales)

        def local(q, k_pages, v_pages, kv_lens, page_table, *sc):
            return attention(q, k_pages, v_pages, kv_lens, page_table, **dict(zip(names, sc)), **kw)

        qspec = P(None, AXIS, None)
        specs = (qspec, P(), P(), P(), P()) + (P(),) * len(names)
        kwargs = dict(mesh=mesh, in_specs=specs, out_specs=qspec)
        params = _shard_map_params()
        if "check_vma" in params:  # the kernel's outputs carry no varying-axes annotation
            kwargs["check_vma"] = False
        elif "check_rep" in params:  # older JAX's name for the same check
            kwargs["check_rep"] = False
        return _shard_map(local, **kwargs)(q, k_pages, v_pages, kv_lens, page_table, *scales.values())

    return call
