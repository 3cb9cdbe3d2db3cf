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

import hashlib
from collections import OrderedDict
from dataclasses import asdict, dataclass

import jax.numpy as jnp
import numpy as np

from traceview.kernels.quant import QuantizedPages, dequantize_int8, kv_dtype_name, kv_token_bytes, quantize_int8

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


def gather_pages(pool, page_ids):
    """Pages ``page_ids`` of one pool as ``[Hkv, len(page_ids), page_size, D]``, dequantized to
    float32 for an int8 pool (:func:`~traceview.kernels.quant.dequantize_int8`)."""
    if isinstance(pool, QuantizedPages):
        return dequantize_int8(pool.values[:, page_ids], pool.scales[:, page_ids])
    return pool[:, page_ids]


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


#: Most pages a pool may have: page ids are int32 in the page tables.
MAX_PAGES = (1 << 31) - 1


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
        if num_pages > MAX_PAGES:
            raise ValueError(f"kv_cache_bytes={kv_cache_bytes} gives {num_pages:,} {name} KV pages; at most "
                             f"{MAX_PAGES:,} fit an int32 page table")
        if num_pages < 2:
            raise ValueError(f"kv_cache_bytes={kv_cache_bytes} holds {num_pages} {name} KV page(s) of {pb} bytes; "
                             "at least 2 are needed (page 0 is the trash page)")
    elif num_pages < 2:
        raise ValueError(f"num_pages={num_pages} must be at least 2 (page 0 is the trash page)")
    return KVCapacity(dtype=name, page_size=page_size, page_bytes=pb, num_pages=int(num_pages),
                      usable_pages=int(num_pages) - 1, tokens=(int(num_pages) - 1) * page_size,
                      bytes=int(num_pages) * pb, budget_bytes=None if kv_cache_bytes is None else int(kv_cache_bytes))


def page_hashes(token_ids: list[int], page_size: int) -> list[bytes]:
    """Chained hashes of the *full* pages of ``token_ids``: page ``i``'s key is
    ``blake2b(key[i-1] || i || tokens of page i)`` (vLLM's prefix-caching block hash: the
    previous block's hash chained with the block's tokens; the page index is folded in as
    well). A trailing partial page has no key."""
    out, prev = [], b""
    for i in range(len(token_ids) // page_size):
        h = hashlib.blake2b(prev, digest_size=16)
        h.update(i.to_bytes(4, "little"))
        h.update(np.asarray(token_ids[i * page_size: (i + 1) * page_size], np.int64).tobytes())
        prev = h.digest()
        out.append(prev)
    return out


class PrefixCache:
    """Reference-counted KV pages with a prefix cache over full prompt pages (vLLM's
    automatic prefix caching, reduced to one pool).

    Every page a request holds has a reference count. A full prompt page, once its K/V are
    written, is registered under its chained hash (:func:`page_hashes`); a later request
    whose prompt starts with the same pages takes them (count + 1) instead of recomputing.
    A page whose count drops to 0 goes back to the free list if unregistered, else it stays
    cached and *evictable* (least recently released first) until a miss needs its memory.

    Counters (cumulative): ``queried_pages`` / ``hit_pages`` and ``queried_tokens`` /
    ``hit_tokens`` count the full prompt pages looked up and found (tokens = pages x page size).
    """

    def __init__(self, allocator: PageAllocator, page_size: int):
        self.allocator, self.page_size = allocator, page_size
        self._page_of: dict[bytes, int] = {}
        self._key_of: dict[int, bytes] = {}
        self._refs: dict[int, int] = {}
        self._evictable: OrderedDict[int, None] = OrderedDict()
        self.queried_pages = self.hit_pages = 0

    @property
    def queried_tokens(self) -> int:
        return self.queried_pages * self.page_size

    @property
    def hit_tokens(self) -> int:
        return self.hit_pages * self.page_size

    @property
    def num_available(self) -> int:
        """Pages a new request can get: free plus cached-and-unreferenced."""
        return self.allocator.num_free + len(self._evictable)

    @property
    def num_cached(self) -> int:
        return len(self._key_of)

    def match(self, keys: list[bytes], max_pages: int) -> list[int]:
        """Cached pages of the longest prefix of ``keys`` (at most ``max_pages``); no side effects."""
        pages = []
        for key in keys[:max_pages]:
            p = self._page_of.get(key)
            if p is None:
                break
            pages.append(p)
        return pages

    def allocate(self, keys: list[bytes], num_pages: int, max_hit_pages: int) -> tuple[list[int], int]:
        """Pages for a request of ``num_pages`` pages whose full prompt pages have ``keys``;
        up to ``max_hit_pages`` leading pages come from the cache.

        Returns ``(pages, hit_pages)``. Counts ``min(len(keys), max_hit_pages)`` pages queried.
        Raises MemoryError (nothing taken, nothing counted) if the pool cannot supply the rest.
        """
        hits = self.match(keys, max_hit_pages)
        fresh = num_pages - len(hits)
        reusable = len(self._evictable) - sum(1 for p in hits if p in self._evictable)
        if fresh > self.allocator.num_free + reusable:
            raise MemoryError(f"need {fresh} KV pages, only {self.allocator.num_free + reusable} free or evictable")
        for p in hits:
            self._evictable.pop(p, None)
            self._refs[p] = self._refs.get(p, 0) + 1
        new = []
        for _ in range(fresh):
            if self.allocator.num_free:
                p = self.allocator.allocate(1)[0]
            else:  # evict the least recently released cached page
                p, _ = self._evictable.popitem(last=False)
                del self._page_of[self._key_of.pop(p)]
            self._refs[p] = 1
            new.append(p)
        self.queried_pages += min(len(keys), max_hit_pages)
        self.hit_pages += len(hits)
        return hits + new, len(hits)

    def register(self, key: bytes, page: int) -> None:
        """Record that ``page`` now holds the K/V of the full page with ``key`` (first writer wins)."""
        if key not in self._page_of and page not in self._key_of:
            self._page_of[key] = page
            self._key_of[page] = key

    def release(self, pages: list[int]) -> None:
        """Drop one reference to each page; unreferenced pages become evictable (cached) or free.
        Raises ValueError for a page not held."""
        for p in pages:
            n = self._refs.get(p, 0)
            if n <= 0:
                raise ValueError(f"cannot release page {p}: not held")
            if n > 1:
                self._refs[p] = n - 1
                continue
            del self._refs[p]
            if p in self._key_of:
                self._evictable[p] = None
            else:
                self.allocator.free([p])
