"""Compile buckets: power-of-two token and request paddings, and padding a size to its bucket.

Source of the scheme: tpu-inference's TPU runner (token paddings from 16 doubling to
``max_num_batched_tokens``; request paddings powers of two from 8 to ``max_num_reqs``, the
maximum always included).
"""

from __future__ import annotations

import bisect


def pow2_buckets(minimum: int, maximum: int) -> list[int]:
    """Powers of two from ``minimum`` (rounded up to a power of two, capped at ``maximum``)
    doubling while below ``maximum``; ``maximum`` itself is always the last bucket.

    Raises: ValueError if ``minimum`` or ``maximum`` is not positive.
    """
    if minimum <= 0 or maximum <= 0:
        raise ValueError(f"bucket bounds must be positive, got minimum={minimum}, maximum={maximum}")
    b = 1 << (int(min(minimum, maximum)) - 1).bit_length()
    out = []
    while b < maximum:
        out.append(b)
        b *= 2
    out.append(int(maximum))
    return out


def pad_to_bucket(buckets: list[int], n: int) -> int:
    """Smallest bucket >= ``n`` (by bisect). Raises ValueError if ``n`` exceeds the largest."""
    i = bisect.bisect_left(buckets, n)
    if i == len(buckets):
        raise ValueError(f"size {n} exceeds the largest compile bucket {buckets[-1]}")
    return buckets[i]
