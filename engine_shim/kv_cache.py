"""Paged KV cache: per-layer page pools and a host-side page allocator with a trash page.

Pools are ``[Hkv, num_pages, page_size, D]`` per layer (the layout
:func:`traceview.kernels.paged_attention.paged_decode` reads). Page 0 is never handed out:
padded request slots and padded prefill positions point at it, so their writes land in a
page nobody reads (MaxText's ``page_manager`` reserves page 0 the same way).
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict

import jax.numpy as jnp
import numpy as np

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
    """Zeroed K and V pools: two lists of ``num_layers`` arrays ``[Hkv, num_pages, page_size, D]``."""
    shape = (num_kv_heads, num_pages, page_size, head_dim)
    return [jnp.zeros(shape, dtype) for _ in range(num_layers)], [jnp.zeros(shape, dtype) for _ in range(num_layers)]


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
