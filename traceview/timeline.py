"""Timeline arithmetic shared by the readers: self time of nested events on one line."""

from __future__ import annotations

import numpy as np


def self_times(starts: np.ndarray, durations: np.ndarray) -> np.ndarray:
    """Self time of each event on one timeline line, in the input's unit (ps).

    An event's self time is its duration minus the durations of the events directly
    nested in it (fully contained, same line), as XProf's ``self_time`` is defined for
    ``XLA Ops``. Events that merely overlap without containment are treated as siblings.
    ``starts`` and ``durations`` are int64 arrays of equal length; the result is int64 and
    never negative. O(n log n).
    """
    n = len(starts)
    out = np.array(durations, dtype=np.int64, copy=True)
    if n < 2:
        return out
    ends = starts + durations
    order = np.lexsort((-ends, starts))  # by start, longer first
    stack: list[int] = []
    s_list = starts[order].tolist()
    e_list = ends[order].tolist()
    d_list = durations[order].tolist()
    o_list = order.tolist()
    child_sum = [0] * n
    for k in range(n):
        s, e = s_list[k], e_list[k]
        # drop enclosing candidates that ended before this event, or that it outlasts
        while stack and (e_list[stack[-1]] <= s or e > e_list[stack[-1]]):
            stack.pop()
        if stack:
            child_sum[stack[-1]] += d_list[k]
        stack.append(k)
    for k in range(n):
        if child_sum[k]:
            out[o_list[k]] = max(0, d_list[k] - child_sum[k])
    return out


def enclosing(starts: np.ndarray, ends: np.ndarray, outer_starts: np.ndarray, outer_ends: np.ndarray) -> np.ndarray:
    """For each inner interval, the index of the outer interval containing its start, or -1.

    Outer intervals must not overlap each other (e.g. ``XLA Modules`` executions on one
    device). Units are the caller's (ps). Returns int64 indices into the outer arrays as
    given (not sorted order).
    """
    if len(outer_starts) == 0:
        return np.full(len(starts), -1, dtype=np.int64)
    order = np.argsort(outer_starts, kind="stable")
    os_, oe = outer_starts[order], outer_ends[order]
    pos = np.searchsorted(os_, starts, side="right") - 1
    ok = (pos >= 0)
    pos_c = np.clip(pos, 0, len(os_) - 1)
    ok &= starts < oe[pos_c]
    ok |= (pos >= 0) & (starts == os_[pos_c])
    result = np.where(ok, order[pos_c], -1)
    return result.astype(np.int64)
