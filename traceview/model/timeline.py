"""Timeline arithmetic shared by the readers: self time of nested events on one line."""

from __future__ import annotations

import numpy as np

from traceview.read import hugearrays

try:  # optional C accelerator
    from traceview.model import _passes as _fast
except ImportError:  # pragma: no cover - exercised when the extension is absent
    _fast = None

_I64_MAX = (1 << 63) - 1


def self_times(starts: np.ndarray, durations: np.ndarray) -> np.ndarray:
    """Self time of each event on one timeline line, in the input's unit (ps).

    An event's self time is its duration minus the durations of the events directly
    nested in it (fully contained, same line), as XProf's ``self_time`` is defined for
    ``XLA Ops``. Events that merely overlap without containment are treated as siblings.
    ``starts`` and ``durations`` are int64 arrays of equal length; the result is int64 and
    never negative. Events are first split into clusters of mutually overlapping events
    (vectorized); only clusters of two or more events are walked with a stack.
    """
    n = len(starts)
    starts = np.ascontiguousarray(starts, dtype=np.int64)
    durations = np.ascontiguousarray(durations, dtype=np.int64)
    out = hugearrays.empty(n, np.int64)
    out[:] = durations
    if n < 2:
        return out
    if _fast is not None:
        if _fast.self_times_sorted(starts, durations, out):
            return out  # already in (start, longer first) order: one C stack pass, same result
        # nearly sorted (TPU device-clock starts): a stable sort by start is cheap, and if
        # equal starts come longer first it is exactly the lexsort order used below
        order = np.argsort(starts, kind="stable")
        tmp = hugearrays.empty(n, np.int64)
        if _fast.self_times_sorted(starts[order], durations[order], tmp):
            out[order] = tmp
            return out
        out[:] = durations
    ends = starts + durations
    order = np.lexsort((-ends, starts))  # by start, longer first
    s_sorted, e_sorted = starts[order], ends[order]
    if _fast is not None:  # equal starts not longer first (a trace JSON's): that order, in C
        tmp = hugearrays.empty(n, np.int64)
        if _fast.self_times_sorted(s_sorted, durations[order], tmp):
            out[order] = tmp
            return out
    run_max = np.maximum.accumulate(e_sorted)
    new_cluster = np.empty(n, dtype=bool)
    new_cluster[0] = True
    new_cluster[1:] = s_sorted[1:] >= run_max[:-1]
    if new_cluster.all():
        return out
    bounds = np.flatnonzero(new_cluster).tolist() + [n]
    d_sorted = durations[order]
    for a, b in zip(bounds[:-1], bounds[1:]):
        if b - a < 2:
            continue
        s_l = s_sorted[a:b].tolist()
        e_l = e_sorted[a:b].tolist()
        d_l = d_sorted[a:b].tolist()
        child = [0] * (b - a)
        stack: list[int] = []
        for k in range(b - a):
            s, e = s_l[k], e_l[k]
            # drop enclosing candidates that ended before this event, or that it outlasts
            while stack and (e_l[stack[-1]] <= s or e > e_l[stack[-1]]):
                stack.pop()
            if stack:
                child[stack[-1]] += d_l[k]
            stack.append(k)
        for k in range(b - a):
            if child[k]:
                # clamped into int64: children of corrupt traces may have negative durations
                out[order[a + k]] = min(max(0, d_l[k] - child[k]), _I64_MAX)
    return out


def enclosing(starts: np.ndarray, ends: np.ndarray, outer_starts: np.ndarray, outer_ends: np.ndarray) -> np.ndarray:
    """For each inner interval, the index of the outer interval containing its start, or -1.

    Outer intervals must not overlap each other (e.g. ``XLA Modules`` executions on one
    device). Units are the caller's (ps). Returns int64 indices into the outer arrays as
    given (not sorted order).
    """
    if len(outer_starts) == 0:
        return np.full(len(starts), -1, dtype=np.int64)
    if _fast is not None:  # both sides in time order (a line and its modules): one merge pass
        s64 = np.ascontiguousarray(starts, dtype=np.int64)
        os64 = np.ascontiguousarray(outer_starts, dtype=np.int64)
        oe64 = np.ascontiguousarray(outer_ends, dtype=np.int64)
        out = hugearrays.empty(len(s64), np.int64)
        if _fast.enclosing_sorted(s64, os64, oe64, out):
            return out
    order = np.argsort(outer_starts, kind="stable")
    os_, oe = outer_starts[order], outer_ends[order]
    pos = np.searchsorted(os_, starts, side="right") - 1
    ok = (pos >= 0)
    pos_c = np.clip(pos, 0, len(os_) - 1)
    ok &= starts < oe[pos_c]
    ok |= (pos >= 0) & (starts == os_[pos_c])
    result = np.where(ok, order[pos_c], -1)
    return result.astype(np.int64)
