"""Paged KV cache: per-layer page pools and a host-side page allocator with a trash page.

Pools are ``[Hkv, num_pages, page_size, D]`` per layer (the layout
:func:`traceview.kernels.paged_attention.paged_decode` reads). Page 0 is never handed out:
padded request slots and padded prefill positions point at it, so their writes land in a
page nobody reads (MaxText's ``page_manager`` reserves page 0 the same way).

KV cache dtypes: ``bfloat16`` and ``float32`` pools are plain arrays; an ``int8`` pool is a
:class:`~traceview.kernels.quant.QuantizedPages` (int8 values + float32 per-token scales),
quantized on write by :func:`write_tokens` (prefill and decode alike).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import jax.numpy as jnp

from traceview.kernels.quant import QuantizedPages, kv_dtype_name, kv_token_bytes, quantize_int8

TRASH_PAGE = 0


class PageAllocator:
    """Free list of page ids ``1..num_pages-1`` (page 0 reserved), lowest ids first."""

    def __init__(self, num_pages: int):
        if num_pages < 2:
            raise ValueError(f"num_pages={num_pages} must be at least 2 (page 0 is the trash page)")
        self.num_pages = num_pages
        self._free = list(range(num_pages - 1, 0, -1))  # pop() yields 1, 2, 3, ...

    @property
    def num_free(self) -> int:
        return len(self._free)

    def allocate(self, n: int) -> list[int]:
        """Take ``n`` pages. Raises MemoryError (nothing taken) if fewer are free."""
        if n > len(self._free):
            raise MemoryError(f"need {n} KV pages, only {len(self._free)} free")
        return [self._free.pop() for _ in range(n)]

    def free(self, pages: list[int]) -> None:
        """Return pages; raises ValueError on the trash page, an unknown id or a double free."""
        free = set(self._free)
        for p in pages:
            if p == TRASH_PAGE or not 0 < p < self.num_pages or p in free:
                raise ValueError(f"cannot free page {p}")
            free.add(p)
        self._free.extend(sorted(pages, reverse=True))
        self._free.sort(reverse=True)


def pages_for(num_tokens: int, page_size: int) -> int:
    """Pages needed to hold ``num_tokens`` tokens."""
    return -(-num_tokens // page_size)


def empty_cache(*, num_layers: int, num_kv_heads: int, num_pages: int, page_size: int, head_dim: int, dtype):
    """Zeroed K and V pools: two lists of ``num_layers`` pools ``[Hkv, num_pages, page_size, D]``.

    ``dtype`` bfloat16 / float32: plain arrays. int8: :class:`QuantizedPages` with float32
    scales ``[Hkv, num_pages, page_size]``. Raises ValueError for any other dtype.
    """
    name = kv_dtype_name(dtype)
    shape = (num_kv_heads, num_pages, page_size, head_dim)

    def pool():
        if name == "int8":
            return QuantizedPages(jnp.zeros(shape, jnp.int8), jnp.zeros(shape[:3], jnp.float32))
        return jnp.zeros(shape, name)

    return [pool() for _ in range(num_layers)], [pool() for _ in range(num_layers)]


def write_tokens(pool, page_ids, offsets, x):
    """Write ``x[Hkv, N, D]`` (token ``n`` to page ``page_ids[n]``, slot ``offsets[n]``) into one pool.

    A float pool stores ``x`` cast to its dtype; an int8 pool stores :func:`quantize_int8` of
    each token and head (values and scale). Returns the updated pool (functional update).
    """
    if isinstance(pool, QuantizedPages):
        q, scale = quantize_int8(x)
        return QuantizedPages(pool.values.at[:, page_ids, offsets].set(q), pool.scales.at[:, page_ids, offsets].set(scale))
    return pool.at[:, page_ids, offsets].set(x.astype(pool.dtype))


def decode_operands(k_pool, v_pool) -> tuple[tuple, dict]:
    """``(k_pages, v_pages), {k_scales, v_scales}`` for :func:`~traceview.kernels.paged_attention.paged_decode`."""
    if isinstance(k_pool, QuantizedPages):
        return (k_pool.values, v_pool.values), {"k_scales": k_pool.scales, "v_scales": v_pool.scales}
    return (k_pool, v_pool), {}


@dataclass(frozen=True)
class KVCapacity:
    """What a KV cache holds.

    * ``dtype``: KV cache dtype name; ``page_bytes``: bytes of one page over all layers, K and
      V, scales included (:func:`page_bytes`);
    * ``num_pages``: pages allocated (page 0, the trash page, included); ``usable_pages``:
      ``num_pages - 1``; ``tokens``: ``usable_pages * page_size``;
    * ``bytes``: ``num_pages * page_bytes``, the cache arrays' total size;
    * ``budget_bytes``: the ``kv_cache_bytes`` it was derived from, or None.
    """

    dtype: str
    page_size: int
    page_bytes: int
    num_pages: int
    usable_pages: int
    tokens: int
    bytes: int
    budget_bytes: int | None = None

    def as_dict(self) -> dict:
        return asdict(self)

    def describe(self) -> str:
        """One line for start-up verification output."""
        budget = "" if self.budget_bytes is None else f" from a {self.budget_bytes:,}-byte budget"
        return (f"KV cache {self.dtype}: {self.num_pages} pages of {self.page_size} tokens ({self.usable_pages} usable, "
                f"{self.tokens:,} tokens), {self.bytes:,} bytes ({self.page_bytes:,} per page){budget}")


def page_bytes(*, num_layers: int, num_kv_heads: int, page_size: int, head_dim: int, dtype) -> int:
    """Bytes of one KV page: ``num_layers * 2 (K, V) * Hkv * page_size * (D * itemsize [+ 4 for int8 scales])``."""
    return num_layers * 2 * num_kv_heads * page_size * kv_token_bytes(head_dim=head_dim, dtype=dtype)


def kv_capacity(*, num_layers: int, num_kv_heads: int, page_size: int, head_dim: int, dtype,
                num_pages: int | None = None, kv_cache_bytes: int | None = None) -> KVCapacity:
    """Capacity of a KV cache given either its page count or a byte budget (vLLM-like).

    With ``kv_cache_bytes`` the page count is ``floor(kv_cache_bytes / page_bytes)`` for the
    chosen dtype (so at one budget int8, at ``D + 4`` bytes per token and head, holds
    ``2D / (D + 4)`` times the pages of bfloat16: 1.97x at ``D = 256``).

    Raises: ValueError when both or neither of ``num_pages`` / ``kv_cache_bytes`` are given,
      for a non-positive value, or when fewer than 2 pages result (page 0 is the trash page).
    """
    if (num_pages is None) == (kv_cache_bytes is None):
        raise ValueError("give exactly one of num_pages and kv_cache_bytes")
    name = kv_dtype_name(dtype)
    pb = page_bytes(num_layers=num_layers, num_kv_heads=num_kv_heads, page_size=page_size, head_dim=head_dim, dtype=name)
    if kv_cache_bytes is not None:
        if isinstance(kv_cache_bytes, bool) or int(kv_cache_bytes) != kv_cache_bytes or kv_cache_bytes <= 0:
            raise ValueError(f"kv_cache_bytes={kv_cache_bytes!r} must be a positive integer")
        num_pages = int(kv_cache_bytes) // pb
        if num_pages < 2:
            raise ValueError(f"kv_cache_bytes={kv_cache_bytes} holds {num_pages} {name} KV page(s) of {pb} bytes; "
                             "at least 2 are needed (page 0 is the trash page)")
    elif num_pages < 2:
        raise ValueError(f"num_pages={num_pages} must be at least 2 (page 0 is the trash page)")
    return KVCapacity(dtype=name, page_size=page_size, page_bytes=pb, num_pages=int(num_pages),
                      usable_pages=int(num_pages) - 1, tokens=(int(num_pages) - 1) * page_size,
                      bytes=int(num_pages) * pb, budget_bytes=None if kv_cache_bytes is None else int(kv_cache_bytes))
