"""Several recordings per diff side pooled into one :class:`~traceview.analysis.compare.diff.DiffSide`
(``traceview diff --base A1 A2 --treatment B1 B2``).

Additive figures (occurrences, events, times, executions of populations and kernels, family
self time, a side's op events and self time) become the **mean per recording**, rounded to
integers, so that sides pooled from different numbers of recordings compare; shares,
``mean_ps`` and ``per_execution`` are recomputed from those. Name, module and file lists are
unions; ``source``, ``family`` and ``hlo_text`` are the first recording's. Module executions
(``module_sums``) are added up per module: the diff's module table counts the executions of
every recording and means their time. The noise samples (:mod:`traceview.analysis.compare.samples`) stay one array per recording
and population, so :func:`traceview.analysis.compare.noise.shift` ranks every sample of every
recording and measures the run-to-run noise from the recordings' medians. The step line: the first recording's module, method and step window, steps (all, and in
the window) summed, the mean step over every recording's window steps. Recordings of one side
must be of one hardware (device kinds, types and counts) and one step definition (step markers,
or executions of one bucket-free program): others are refused (:func:`pool`).
"""

from __future__ import annotations

import os

import numpy as np
import polars as pl

from traceview.analysis.compare.diff import DiffSide
from traceview.analysis.compare.populations import KERNEL_SCHEMA, KEY, POPULATION_SCHEMA
from traceview.analysis.compare.samples import Samples
from traceview.read.discover import host_from_filename

_POP_SUMS = ["occurrences", "events", "total_ps", "self_ps", "executions"]
_POP_LISTS = ["kernels", "op_names", "modules", "source_files"]


def _mean_int(col: str, k: int) -> pl.Expr:
    return (pl.col(col).sum() / k).round(0).cast(pl.Int64).alias(col)


def _union(col: str) -> pl.Expr:
    return pl.col(col).explode().drop_nulls().unique().sort().alias(col)


def _refuse_repeats(sides: list[DiffSide]) -> None:
    """UsageError naming both when two sides are one recording (the same files twice, a copy):
    identical step times, ps, op events and self time. Pooled, a repeat would pass for a second
    recording and make the noise measured between recordings zero."""
    from traceview.errors import UsageError

    seen: dict = {}
    files: dict = {}
    for s in sides:
        # the same host's files in one run folder are one recording, whatever their format
        # (a run's .xplane.pb and its .trace.json.gz)
        where = frozenset((os.path.dirname(os.path.realpath(f)), host_from_filename(f))
                          for f in s.files if os.path.isfile(f))
        if where and where in files:
            which = (f"{s.label} is given twice (a run folder and a path inside it name one recording)"
                     if s.label == files[where] else
                     f"{s.label} and {files[where]} are the same recording (the same hosts of one run folder)")
            raise UsageError(f"{which}: give each recording once; a repeat would pass for a second recording and "
                             "make the measured noise zero")
        files[where] = s.label
        steps = None if s.samples is None else s.samples.steps
        if steps is None or len(steps) == 0:
            continue
        key = (np.asarray(steps).tobytes(), int(s.events), int(s.self_ps))
        if key in seen:
            raise UsageError(f"{s.label} and {seen[key]} are the same recording (identical step times and op "
                             "events): give each recording once; a repeat would pass for a second recording and "
                             "make the measured noise zero")
        seen[key] = s.label


def _refuse_mixed(sides: list[DiffSide]) -> None:
    """UsageError naming both and what differs when a side's recordings ran on different
    hardware (device kinds, types or counts: a population's sample sums its devices) or found
    their steps differently (step markers against a module, or step modules of different
    bucket-free programs): pooled, their differences would pass for run-to-run noise."""
    from traceview.analysis.compare.diff import hardware_text, same_hardware, step_definition, step_definition_text
    from traceview.errors import UsageError

    first = sides[0]
    for s in sides[1:]:
        what = []
        if not same_hardware(first.hardware, s.hardware):
            what.append(f"hardware ({hardware_text(first.hardware)} vs {hardware_text(s.hardware)})")
        da, db = step_definition(first.steps), step_definition(s.steps)
        if da is not None and db is not None and da != db:
            what.append(f"steps ({step_definition_text(first.steps)} vs {step_definition_text(s.steps)})")
        if what:
            raise UsageError(f"cannot pool {first.label} with {s.label}: they differ in {' and '.join(what)}; "
                             "pool only recordings of one configuration on one hardware")


def _configuration(s: DiffSide) -> tuple:
    """(step module, kernel names) of a side: the names carry the compiled buckets and the
    kernels' configurations (``jit_decode_b4_bkv64``, ``RPAd-p_16-bq_1_1-bkv_64_64``)."""
    module = s.steps[0] if s.steps is not None else None
    kernels = tuple(sorted(s.kernels["kernel"].to_list())) if s.kernels is not None and s.kernels.height else ()
    return module, kernels


def _mixed_configurations(sides: list[DiffSide]) -> list[str]:
    """A note when the recordings pooled differ in step program or kernel configuration (same
    hardware and step definition, else :func:`_refuse_mixed` refused them): their differences
    count as run-to-run noise, widening the measured band."""
    confs = [_configuration(s) for s in sides]
    if all(c == confs[0] for c in confs):
        return []
    i = next(j for j, c in enumerate(confs) if c != confs[0])

    def text(c):
        return ", ".join([x for x in (c[0],) if x] + list(c[1][:3])) or "no step program or kernel"

    return [f"the pooled recordings are not one configuration: {sides[0].label} ({text(confs[0])}) vs "
            f"{sides[i].label} ({text(confs[i])}); their differences count as run-to-run noise, so the measured band "
            "is wide and a real change can read as within noise: pool re-recordings of one configuration"]


def pool(sides: list[DiffSide]) -> DiffSide:
    """One side from ``sides`` (each made by :func:`traceview.analysis.compare.diff.side`; module doc).
    A single side is returned as is. Raises ValueError for an empty list, UsageError when two
    sides are one recording or differ in hardware or step definition (:func:`_refuse_mixed`)."""
    if not sides:
        raise ValueError("no side to pool")
    if len(sides) == 1:
        return sides[0]
    _refuse_repeats(sides)
    _refuse_mixed(sides)
    notes = _mixed_configurations(sides)
    k = len(sides)
    pops = pl.concat([s.populations for s in sides], how="vertical_relaxed")
    self_total = round(sum(s.self_ps for s in sides) / k)
    pops = pops.group_by(KEY, maintain_order=True).agg(
        pl.col("is_kernel").any(), *[_union(c) for c in _POP_LISTS], *[_mean_int(c, k) for c in _POP_SUMS],
        pl.col("source").first(), pl.col("family").first(), pl.col("hlo_text").first(),
    ).with_columns(
        pl.when(pl.col("occurrences") > 0).then(pl.col("total_ps") / pl.col("occurrences")).otherwise(None)
        .alias("mean_ps"),
        (pl.col("self_ps") / self_total if self_total else pl.lit(0.0)).alias("share"),
        pl.when(pl.col("executions") > 0).then(pl.col("occurrences") / pl.col("executions")).otherwise(None)
        .alias("per_execution"),
    ).select(list(POPULATION_SCHEMA)).cast(POPULATION_SCHEMA).sort(["self_ps"] + KEY, descending=[True] + [False] * len(KEY))
    kern = pl.concat([s.kernels for s in sides], how="vertical_relaxed")
    kern = kern.group_by("kernel", maintain_order=True).agg(
        pl.col("kernel_id").first(), pl.col("config").first(),
        *[_mean_int(c, k) for c in ("invocations", "events", "self_ps")],
        *[_union(c) for c in ("modules", "shapes", "source_files")],
    ).select(list(KERNEL_SCHEMA)).cast(KERNEL_SCHEMA).sort(["self_ps", "kernel"], descending=[True, False])
    fam = pl.concat([s.families for s in sides], how="vertical_relaxed").group_by("family").agg(_mean_int("self_ps", k))
    fam = fam.with_columns((pl.col("self_ps") / self_total if self_total else pl.lit(0.0)).alias("share"))
    sums = [s.module_sums for s in sides if s.module_sums is not None and s.module_sums.height]
    module_sums = (pl.concat(sums, how="vertical_relaxed").group_by("module", maintain_order=True)
                   .agg(pl.col("executions", "n_timed", "total_ps").sum()) if sums else None)
    steps = None
    have = [s.steps for s in sides if s.steps is not None]
    if have:
        n = sum(x[1] for x in have)
        nw = sum(x[4] for x in have)
        mean = sum(x[4] * x[2] for x in have) / nw if nw else 0.0
        steps = (have[0][0], n, mean, have[0][3], nw, have[0][5])
    return DiffSide(label=" + ".join(s.label for s in sides), populations=pops, kernels=kern, families=fam,
                    module_sums=module_sums, events=round(sum(s.events for s in sides) / k), self_ps=self_total,
                    steps=steps, samples=pool_samples([s.samples for s in sides]),
                    recordings=sum(s.recordings for s in sides), device_kinds=sides[0].device_kinds,
                    hardware=sides[0].hardware, notes=notes, files=tuple(f for s in sides for f in s.files))


def pool_samples(samples: list[Samples | None]) -> Samples | None:
    """One :class:`Samples` holding, per population, a list of the recordings' arrays of its
    most frequent sample kind (recordings with the other kind or without the population left
    out), and the recordings' step durations as a list."""
    have = [s for s in samples if s is not None]
    if not have:
        return None
    out = Samples(steps=[s.steps for s in have if len(s.steps)])
    keys = {key for s in have for key in s.by_key}
    for key in keys:
        got = [s.by_key[key] for s in have if key in s.by_key]
        kinds = [g[0] for g in got]
        kind = max(set(kinds), key=lambda x: (kinds.count(x), x))
        out.by_key[key] = (kind, [g[1] for g in got if g[0] == kind])
    return out
