"""Paged KV cache: per-layer page pools and a host-side page allocator with a trash page.

Pools are ``[Hkv, num_pages, page_size, D]`` per layer (the layout
:func:`traceview.kernels.paged_attention.paged_decode` reads). Page 0 is never handed out:
padded request slots and padded prefill positions point at it, so their writes land in a
page nobody reads (MaxText's ``page_manager`` reserves page 0 the same way).
"""

from __future__ import annotations

import jax.numpy as jnp

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
