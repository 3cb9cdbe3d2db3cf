"""Per-population time samples for the diff's noise intervals (:mod:`traceview.analysis.compare.noise`).

A population's sample is its **self time per step**: the sum of its op events' self time
(ps) inside each step of the side's step anatomy (:func:`traceview.analysis.steps.anatomy`:
``step_rows`` per event), over the steps in which it has events, in step order. A step is one
execution of the step module (or a step marker's window), so the occurrences of one
execution, which are not independent, are one sample. A population with fewer than
:data:`MIN_STEPS` such steps (it runs outside the steps, e.g. prefill against a decode step)
gets its **per-occurrence** self times instead, in start order, thinned to at most
:data:`MAX_OCCURRENCES` by an even stride.

Events map to populations through their op description (``attr``): the description's
non-absorbed tagged row decides (:mod:`traceview.analysis.ops.tagged`); a description of which
some events were absorbed into a kernel and others not counts all its events with the
non-absorbed population (rare: absorption needs ops without a name stack between a kernel's
ops). One sort of the events inside a step by (population, step); memory O(events) int64.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import polars as pl

from traceview.analysis.compare.populations import KEY, keyed
from traceview.analysis.ops.tagged import ABSORBED_DEPTH
from traceview.model.optable import int_bincount

try:  # optional C accelerator (setup.py); the numpy below gives the same sums
    from traceview.analysis import _passes as _fast
except ImportError:  # pragma: no cover - exercised when the extension is absent
    _fast = None

#: fewest steps with events for a per-step sample (else per occurrence)
MIN_STEPS = 2
#: most per-occurrence samples kept per population
MAX_OCCURRENCES = 20000


@dataclass
class Samples:
    """Samples of one profile: ``by_key`` maps a population key tuple (:data:`KEY` order) to
    (kind, array): kind "per step" (self ps per step with events) or "per occurrence" (self
    ps per event); ``steps``: per-step wall durations (ps, the anatomy's ``duration_ps``) in
    step order, empty when there are none."""

    by_key: dict = field(default_factory=dict)
    steps: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))

    def get(self, key: tuple) -> tuple[str, np.ndarray] | None:
        return self.by_key.get(tuple(key))


def _attr_codes(tagged, name_stem: bool, n_attrs: int, program_stem_key: bool = True,
                expand_kernels: bool = False) -> tuple[np.ndarray, list[tuple]]:
    """Per description (attr): population index (-1 for none) and the keys."""
    rows = keyed(tagged.rows, name_stem=name_stem, program_stem_key=program_stem_key,
                 expand_kernels=expand_kernels).with_columns(
        (pl.col("kdepth").fill_null(0) == ABSORBED_DEPTH).alias("_abs"))
    # the non-absorbed row of an attr wins
    rows = rows.sort(["attr", "_abs"]).unique("attr", keep="first", maintain_order=True)
    keys = rows.select(KEY).unique(maintain_order=True)
    kid = {tuple(r): i for i, r in enumerate(keys.iter_rows())}
    code = np.full(n_attrs, -1, dtype=np.int64)
    ids = rows["attr"].to_numpy().astype(np.int64)
    code[ids] = np.fromiter((kid[tuple(r)] for r in rows.select(KEY).iter_rows()), dtype=np.int64, count=rows.height)
    return code, list(kid)


#: cells of the (population, step) grid summed at a time when the events' steps ascend
#: (:func:`_per_step`): 9 MB of grid
CHUNK_CELLS = 1 << 20
#: most (chunk, population) pieces the chunked grid may gather (:func:`_ascending_grid`); more
#: (many populations over many steps) and the events are sorted instead
MAX_PIECES = 1 << 15


def _ascending_grid(pop: np.ndarray, self_ps: np.ndarray, step_rows: np.ndarray, n_pop: int, n_steps: int,
                    chunk_cells: int = CHUNK_CELLS) -> dict[int, np.ndarray] | None:
    """:func:`_per_step`'s sums when the steps of the events inside a step ascend in event order
    (one device's events in time order, devices one after another with their steps numbered
    apart, as step indices are): the (population, step) grid summed a run of steps at a time
    (``chunk_cells`` cells) by the C accelerator's ``cell_sums``, each run's events being a
    contiguous slice. No per-event key, sort or permutation: 8 bytes per event (a running
    maximum of the steps and an int32 copy of them when they are wider) and one chunk's grid.
    None when the steps do not ascend, the pieces would be too many (:data:`MAX_PIECES`), or
    without the accelerator."""
    if _fast is None or not n_pop or not 0 < n_steps < 1 << 31 or len(pop) != len(self_ps) or len(pop) != len(step_rows):
        return None
    spc = max(1, chunk_cells // n_pop)  # steps per chunk
    if -(-n_steps // spc) * n_pop > MAX_PIECES:
        return None
    rows = np.ascontiguousarray(step_rows, dtype=np.int32)  # n_steps <= 2**31 (a step index)
    top = np.maximum.accumulate(rows)
    ok = rows == top
    ok |= rows < 0
    if not ok.all():
        return None
    del ok
    runs = []  # (first event, end, first step, steps) of each run of steps, events in a slice
    n, last = len(rows), int(top[-1]) if len(rows) else -1
    a = int(np.searchsorted(top, 0, "left"))  # the first event inside a step
    while a < n:
        s0 = int(top[a])
        s1 = min(s0 + spc, last + 1)
        b = n if s1 > last else int(np.searchsorted(top, s1, "left"))
        runs.append((a, b, s0, s1 - s0))
        a = b
    del top
    pop = np.ascontiguousarray(pop, dtype=np.int32)
    self_ps = np.ascontiguousarray(self_ps, dtype=np.int64)
    sums = np.empty(n_pop * min(spc, max(last + 1, 1)), dtype=np.int64)
    got = np.empty(len(sums), dtype=np.uint8)
    pieces: list[list[np.ndarray]] = [[] for _ in range(n_pop)]
    for a, b, s0, w in runs:
        cells = n_pop * w
        sums[:cells] = 0
        got[:cells] = 0
        rel = rows[a:b] - np.int32(s0)  # outside every step: negative, skipped
        if not _fast.cell_sums(pop[a:b], rel, self_ps[a:b], w, sums[:cells], got[:cells]):
            return None
        grid, seen = sums[:cells].reshape(n_pop, w), got[:cells].view(bool).reshape(n_pop, w)
        for p in np.flatnonzero(seen.any(axis=1)):
            pieces[p].append(grid[p][seen[p]].astype(np.float64))
    out = {}
    for p, ps in enumerate(pieces):
        if sum(len(x) for x in ps) >= MIN_STEPS:
            out[p] = np.concatenate(ps) if len(ps) > 1 else ps[0]
    return out


def _per_step(pop: np.ndarray, self_ps: np.ndarray, step_rows: np.ndarray,
              dense: bool | None = None, runs: bool = True, chunk_cells: int = CHUNK_CELLS) -> dict[int, np.ndarray]:
    """{population: its self time per step with events (float64, ps, in step order)} for the
    populations with events in at least :data:`MIN_STEPS` steps. Per event: ``pop``
    (population index, -1 for none), ``self_ps`` (int64), ``step_rows`` (step index, -1
    outside every step). One stable sort of the (population, step) keys of the events inside
    a step, then exact int64 sums per key (a profile's times are clamped so that no sum
    wraps, :func:`~traceview.model.bounds.clamp_profile`), as float64; or, when the
    (population, step) grid has no more cells than events (``dense`` None: chosen so; True /
    False: forced), the same sums by two bincounts over the grid (one C pass, 9 bytes a cell,
    when built); or, when the events' steps ascend, the grid a run of steps at a time
    (:func:`_ascending_grid`, with the C accelerator; ``runs`` False: not tried, ``chunk_cells``:
    its runs' size). Memory: about 32 bytes per event inside
    a step sorted, 16 per event plus 16 per cell on the grid, 8 per event in runs."""
    n_steps = int(step_rows.max()) + 1
    n_pop = int(pop.max()) + 1 if len(pop) else 0
    if dense is None:
        dense = 0 < n_pop * n_steps <= max(len(pop), 1 << 20)
    if dense and n_pop and _fast is not None and len(pop) == len(self_ps) == len(step_rows):
        # the grid's sums in one C pass: no per-event key, no float copies of the grid
        sums = np.zeros(n_pop * n_steps, dtype=np.int64)
        got = np.zeros(n_pop * n_steps, dtype=np.uint8)
        if _fast.cell_sums(np.ascontiguousarray(pop, dtype=np.int32), np.ascontiguousarray(step_rows, dtype=np.int32),
                           np.ascontiguousarray(self_ps, dtype=np.int64), n_steps, sums, got):
            sums, seen = sums.reshape(n_pop, n_steps), got.view(bool).reshape(n_pop, n_steps)
            return {p: sums[p][seen[p]].astype(np.float64) for p in range(n_pop) if int(seen[p].sum()) >= MIN_STEPS}
    if not dense and runs:
        got = _ascending_grid(pop, self_ps, step_rows, n_pop, n_steps, chunk_cells)
        if got is not None:
            return got
    if dense and n_pop:  # a dense (population, step) grid: two bincounts
        k = pop.astype(np.int64)
        k *= n_steps
        k += step_rows
        k[(step_rows < 0) | (pop < 0)] = n_pop * n_steps  # outside: one spare cell
        got = np.bincount(k, minlength=n_pop * n_steps + 1)[:-1].reshape(n_pop, n_steps) > 0
        sums = int_bincount(k, self_ps, n_pop * n_steps + 1)[:-1].reshape(n_pop, n_steps)
        del k
        return {p: sums[p][got[p]].astype(np.float64) for p in range(n_pop) if int(got[p].sum()) >= MIN_STEPS}
    inside = (step_rows >= 0) & (pop >= 0)
    kt = np.int32 if n_pop * n_steps < (1 << 31) else np.int64
    if inside.all():  # every event in a step: no selected copies
        pp, sr = pop, step_rows
        w = self_ps
    else:
        pp, sr = pop[inside], step_rows[inside]
        w = self_ps[inside]
    del inside
    k = pp.astype(kt)
    k *= kt(n_steps)
    k += sr.astype(kt, copy=False)  # by population, then step
    # when the events' step indices already ascend in event order (a device's events in time
    # order, devices one after another), the same stable order is one radix sort of the
    # populations alone
    by_pop = n_pop <= 1 << 16 and len(sr) > 1 and bool((sr[1:] >= sr[:-1]).all())
    del sr
    key = pp.astype(np.uint16) if by_pop else k
    del pp
    o = np.argsort(key, kind="stable")
    del key
    k, w = k[o], w[o]
    del o
    if not len(k):
        return {}
    first = np.flatnonzero(np.r_[True, k[1:] != k[:-1]])
    p_of = k[first].astype(np.int64) // n_steps
    del k
    sums = np.add.reduceat(w, first)  # exact int64, then float64 (each array freed as soon as it is used)
    del w, first
    sums = sums.astype(np.float64)
    bounds = np.r_[0, np.flatnonzero(np.diff(p_of)) + 1, len(p_of)]
    return {int(p_of[a]): sums[a:b] for a, b in zip(bounds[:-1], bounds[1:]) if b - a >= MIN_STEPS}


def population_samples(table, tagged, step_rows: np.ndarray | None, step_durations=None, *,
                       name_stem: bool = True, program_stem_key: bool = True, expand_kernels: bool = False) -> Samples:
    """:class:`Samples` of one profile (module doc). ``table``: its
    :class:`~traceview.model.optable.OpTable`; ``tagged``: its
    :func:`~traceview.analysis.ops.tagged.tag` result; ``step_rows``: per event, the step index
    (-1 outside every step), or None; ``step_durations``: per-step wall time, ps;
    ``expand_kernels``: the populations' keys as :func:`~traceview.analysis.compare.populations.keyed` makes them so."""
    out = Samples()
    if step_durations is not None:
        out.steps = np.asarray(step_durations, dtype=np.int64)
    ev = table.events
    if ev.height == 0 or tagged.height == 0:
        return out
    code, keys = _attr_codes(tagged, name_stem, table.attrs.height, program_stem_key, expand_kernels)
    P = len(keys)
    pop = code.astype(np.int32)[ev["attr"].to_numpy()]  # P < 2**31: one population per description at most
    self_ps = ev["self_ps"].fill_null(0).to_numpy()  # int64, a view of the column when it has no null
    per_step: dict[int, np.ndarray] = {}
    if step_rows is not None and len(step_rows) == ev.height and (step_rows >= 0).any():
        per_step = _per_step(pop, self_ps, step_rows)
    missing = [i for i in range(P) if i not in per_step]
    if missing:
        start = ev["start_ps"].fill_null(0).to_numpy()
        want = np.zeros(P, dtype=bool)
        want[missing] = True
        sel = np.flatnonzero((pop >= 0) & want[np.clip(pop, 0, None)])
        sel = sel[np.lexsort((sel, start[sel], pop[sel]))]
        ps = pop[sel]
        bounds = np.r_[0, np.flatnonzero(np.diff(ps)) + 1, len(sel)]
        for a, b in zip(bounds[:-1], bounds[1:]):
            if b <= a:
                continue
            idx = sel[a:b]
            if len(idx) > MAX_OCCURRENCES:
                idx = idx[:: -(-len(idx) // MAX_OCCURRENCES)]
            out.by_key[keys[int(ps[a])]] = ("per occurrence", self_ps[idx].astype(np.float64))
    for i, arr in per_step.items():
        out.by_key[keys[i]] = ("per step", arr)
    return out
