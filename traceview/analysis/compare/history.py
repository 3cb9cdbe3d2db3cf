"""A run history: one summary per profiled run, oldest first, and a regression rule
(``traceview history``).

Per run (:func:`summarise`): the steady step time (median, p10, p90 of the durations of the
steady window's steps, ps; one per step index, the longest of the devices':
:func:`~traceview.analysis.steps.stepstats.step_walls`) from the step anatomy
(:func:`traceview.analysis.steps.anatomy.profile_anatomy`), every step's duration for the
regression rule, the top op families' self time
per step, the custom kernels' configurations read off their names
(:func:`traceview.analysis.ops.kernels.kernels`), and the ids of the findings of its report
(:mod:`traceview.analysis.findings`).

Step program (:func:`~traceview.model.naming.program_stem` with ``bare=False``): the step
module's name (the module whose ops hold the most self time inside the steps when steps come
from markers) without its bucket and config tokens (``jit_decode_b8_bkv128`` -> ``jit_decode``;
``.N`` / ``(N)`` copies dropped; a bare shape bucket ``_<N>`` kept: another is other work). Only
runs of one step program are compared: a GEMM sweep's steps and a decode engine's are not the
same step, however their medians compare.

Regression rule (:func:`compare_runs`): each run against its baseline (the latest earlier run of
the same step program on the same hardware, or the run named as ``baseline`` for every run),
:func:`traceview.analysis.compare.noise.shift` of the per-step durations (treatment = the run): the
Hodges-Lehmann ratio of the step times with its exact rank interval (4 steps a side at 0.95),
judged against the run-to-run noise of one recording against another: ``noise`` when stated
(:func:`~traceview.analysis.compare.noise.stated_band`), else the prior
(:data:`~traceview.analysis.compare.noise.PRIOR`, step-time bound) when it was measured on the runs'
device kinds, else unknown. A run is compared only with runs of the same work: the same step
program and the same batch and token buckets (:func:`work_tokens`), its kernel configuration
free to differ (a treatment). Verdicts: ``baseline`` for the first run of each work (the named
baseline with ``baseline``); ``no comparable run`` when the run's program is unknown (no step
module) or, with a named baseline, not the baseline's work or hardware (device kind, type or
count: :func:`~traceview.analysis.compare.diff.same_hardware`; :meth:`History.hardware_changes`
lists the runs whose previous run of their work ran on other hardware);
``no interval`` when a side has too few steps (the change cannot be judged; ``more_samples``
says how many more); ``no change`` when there is no run-to-run noise to judge against but
the interval holds 1 and lies within the threshold both ways ([1 / (1 + threshold), 1 +
threshold]: not significant under any band); ``inconclusive`` when it is not significant but
reaches past the threshold, and past the noise band when one is known (too few or too spread
steps to tell no change from a change that size); ``noise unknown`` when the interval
excludes 1 and there is no run-to-run noise to judge it against; ``within noise`` when the
interval does not clear the noise band;
``regression`` when it clears the band and lies wholly at or above ``1 + threshold``;
``improvement`` when it clears the band at or below ``1 / (1 + threshold)``; ``below
threshold`` when it clears the band but not the threshold. :meth:`History.across_configs`
lists the comparisons whose kernel configurations differ. :meth:`History.unjudged` lists the ``no interval`` and ``noise unknown`` runs
whose ratio reaches the threshold and the ``inconclusive`` runs whose interval does: a slowdown
that cannot be ruled out. Times in ps.
"""

from __future__ import annotations

import math

from dataclasses import dataclass, field

import numpy as np

from traceview.analysis.compare import noise
from traceview.analysis.compare.diff import hardware_text, same_hardware
from traceview.model.naming import COPY, bucket_tokens, program_stem

#: default smallest slowdown called a regression (fraction)
THRESHOLD = 0.05
#: top families kept per run
TOP_FAMILIES = 3
#: verdict of a run whose step program no earlier run (or the named baseline) shares
NO_COMPARABLE = "no comparable run"
#: verdict of a run whose change has an interval excluding 1 but no run-to-run noise to clear
NOISE_UNKNOWN = "noise unknown"
#: verdict of a run whose interval holds 1 where the run-to-run noise is unknown: not significant
NO_CHANGE = noise.VERDICT_NO_CHANGE
#: verdict of a run whose change is not significant but whose interval reaches past the
#: threshold (and past the noise band, when one is known)
INCONCLUSIVE = "inconclusive"

#: bucket tokens that change the work a step does (``_b<N>``: the batch's rows, ``_t<N>``:
#: prefill tokens); the others (``_bkv128``, ``_bq32``, ``_p16``) name a kernel's
#: configuration: a treatment of the same work (a bare ``_<N>`` stays in the step program)
WORK_TOKENS = frozenset({"b", "t"})


def work_tokens(module: str | None) -> tuple:
    """The work tokens (:data:`WORK_TOKENS`) of a module name's bucket tokens
    (:func:`~traceview.model.naming.bucket_tokens`), in order: ``jit_decode_b8_bkv512`` ->
    (("b", "8"),); () for none or no module."""
    return tuple((a, d) for a, d in bucket_tokens(module) if a in WORK_TOKENS)


@dataclass
class RunSummary:
    """One run of a history (:func:`summarise`). ``step_ps``: the durations (ps) of every
    step, the regression rule's samples (a rank interval needs no outlier removal: the samples
    diff ranks, on which the noise prior was measured); ``window_ps``: those of the steady
    window's steps, for the median, p10 and p90 (None: ``step_ps``); ``families``: [{family, self_ps (per step), share}];
    ``kernels``: [{kernel, config}]; ``findings``: finding ids (None only in summaries
    built by hand); ``program``: the step program (:func:`~traceview.model.naming.program_stem`, ``bare=False``; default: that of
    ``step_module``; None: unknown, so the run is compared with none). ``change``/``baseline``/
    ``verdict``: set by :func:`compare_runs`; ``device_kinds``: the kinds of its devices."""

    name: str
    directory: str
    time: float
    step_method: str
    step_module: str | None
    step_ps: np.ndarray
    families: list[dict] = field(default_factory=list)
    kernels: list[dict] = field(default_factory=list)
    findings: list[str] | None = None
    program: str | None = None
    #: the step program's full module name (bucket tokens kept: ``jit_decode_b4_bkv64``), that of
    #: the module holding the most self time inside marker steps; None: ``step_module``
    program_module: str | None = None
    #: device kinds of the run ("CPU", "TPU", "GPU"): which noise prior applies
    device_kinds: tuple = ()
    #: the devices that ran ops, ``(kind, device type, count)`` triples
    #: (:func:`~traceview.analysis.compare.diff.hardware`; () unknown): runs are compared only
    #: with runs on the same hardware
    hardware: tuple = ()
    window_ps: np.ndarray | None = None
    change: noise.Change | None = None
    baseline: str | None = None
    verdict: str = "baseline"
    warnings: list = field(default_factory=list)

    def __post_init__(self):
        if self.program is None:
            self.program = program_stem(self.step_module, bare=False) or None  # a bare _<N>: other work

    @property
    def module(self) -> str | None:
        """The step program's full module name (:attr:`program_module`, else ``step_module``)."""
        return self.program_module or self.step_module

    @property
    def work(self) -> tuple:
        """What the run's steps do: its program and the module's work tokens
        (:func:`work_tokens`); runs are compared only with runs of the same work."""
        return (self.program, work_tokens(self.module))

    @property
    def work_label(self) -> str | None:
        """:attr:`work` as it reads: the step program, then its work tokens (``jit_decode b8``);
        None when the program is unknown."""
        if self.program is None:
            return None
        return " ".join([self.program, *(a + d for a, d in work_tokens(self.module))])

    @property
    def n_steps(self) -> int:
        """Steps the median, p10 and p90 are over (the steady window's)."""
        return len(self.step_ps if self.window_ps is None else self.window_ps)

    def _q(self, q: float) -> float | None:
        d = self.step_ps if self.window_ps is None else self.window_ps
        return float(np.quantile(d, q)) if len(d) else None

    @property
    def median_ps(self) -> float | None:
        return self._q(0.5)

    def to_dict(self) -> dict:
        c = self.change
        return {"run": self.name, "directory": self.directory, "time": self.time, "step_method": self.step_method,
                "step_module": self.step_module, "program": self.program, "program_module": self.module, "work": self.work_label,
                "hardware": hardware_text(self.hardware) if self.hardware else None, "n_steps": self.n_steps, "median_step_ps": self.median_ps,
                "p10_step_ps": self._q(0.1), "p90_step_ps": self._q(0.9), "families": self.families,
                "kernels": self.kernels, "findings": self.findings, "baseline": self.baseline,
                "verdict": self.verdict, "change": _change_dict(c) if c is not None else None,
                "warnings": list(self.warnings)}


def _change_dict(c: noise.Change) -> dict:
    """``c.to_dict()`` with the test's own verdict and reason as ``test_verdict`` and
    ``test_reason``: a run's verdict (``verdict`` beside ``change``) also weighs the threshold,
    and a ``verdict`` saying "no change" (or a ``reason`` saying the interval contains no change)
    inside a run that says "inconclusive" misread as the run's."""
    d = c.to_dict()
    d["test_verdict"] = d.pop("verdict")
    d["test_reason"] = d.pop("reason")
    return d


@dataclass
class History:
    """Result of :func:`compare_runs`: ``runs`` oldest first, the rule's ``baseline`` ("previous"
    or a run name), ``threshold`` (fraction) and ``level``; ``skipped``: (run, why) of runs
    found but not analysable (set by the caller)."""

    runs: list[RunSummary]
    baseline: str
    threshold: float
    level: float
    skipped: list[tuple[str, str]] = field(default_factory=list)

    def incomparable(self) -> list[RunSummary]:
        """Runs compared with nothing: their step program is unknown, or (a named baseline)
        not the baseline's."""
        return [r for r in self.runs if r.verdict == NO_COMPARABLE]

    def across_configs(self) -> list[tuple[RunSummary, RunSummary]]:
        """(run, its baseline) pairs whose step modules differ: the same work in another kernel
        configuration (``jit_decode_b4_bkv128`` against ``jit_decode_b4_bkv64``), a treatment
        the change measures."""
        by = {r.name: r for r in self.runs}
        return [(r, by[r.baseline]) for r in self.runs if r.baseline in by and r.module and by[r.baseline].module
                and COPY.sub("", r.module) != COPY.sub("", by[r.baseline].module)]  # a copy number is no config

    def named_baseline(self) -> RunSummary | None:
        """The run the rule's ``baseline`` names (the first of its name or directory); None
        under the default rule."""
        return None if self.baseline == "previous" else _named_run(self.runs, self.baseline)

    def hardware_changes(self) -> list[tuple[RunSummary, RunSummary]]:
        """(run, the run it would be compared with) pairs on other hardware (device kind, type
        or count: :func:`~traceview.analysis.compare.diff.same_hardware`), that run being the
        latest earlier run of its work (the default rule: the run is compared with the latest
        earlier run of its work on its own hardware instead), or the named baseline for each
        run of the baseline's work (the run is compared with none)."""
        out = []
        base = self.named_baseline()
        for i, r in enumerate(self.runs):
            if base is not None:
                prev = base if r is not base and r.program and r.work == base.work else None
            else:
                prev = next((x for x in reversed(self.runs[:i]) if x.work == r.work), None) if r.program else None
            if prev is not None and not same_hardware(prev.hardware, r.hardware):
                out.append((r, prev))
        return out

    def regressions(self) -> list[RunSummary]:
        return [r for r in self.runs if r.verdict == "regression"]

    def unjudged(self) -> list[RunSummary]:
        """Runs without an interval (too few steps) or without a noise band to judge it
        against, whose step ratio is at least 1 + threshold, and inconclusive runs whose
        interval reaches 1 + threshold: a slowdown that cannot be ruled out."""
        return [r for r in self.runs if r.change is not None and (
            (r.verdict in ("no interval", NOISE_UNKNOWN) and r.change.ratio is not None
             and r.change.ratio >= 1 + self.threshold)
            or (r.verdict == INCONCLUSIVE and r.change.hi >= 1 + self.threshold))]

    def to_dict(self) -> dict:
        against = "previous" if self.named_baseline() is None else "baseline"  # the hardware changes' other run
        return {"baseline": self.baseline, "threshold": self.threshold, "level": self.level, "units": "ps",
                "method": noise.METHOD_RANK, "runs": [r.to_dict() for r in self.runs],
                "regressions": [r.name for r in self.regressions()],
                "unjudged_slowdowns": [r.name for r in self.unjudged()],
                "no_comparable_run": [r.name for r in self.incomparable()],
                "across_configs": [{"run": r.name, "module": r.module, "baseline": b.name,
                                    "baseline_module": b.module} for r, b in self.across_configs()],
                "hardware_changes": [{"run": r.name, "hardware": hardware_text(r.hardware), against: p.name,
                                      f"{against}_hardware": hardware_text(p.hardware)}
                                     for r, p in self.hardware_changes()],
                "skipped": [{"run": n, "why": w} for n, w in self.skipped]}


def summarise(prof, *, name: str, directory: str, time: float, rules=None,
              top_families: int = TOP_FAMILIES) -> RunSummary:
    """The :class:`RunSummary` of one profile (a :class:`traceview.Profile` or anything
    :func:`~traceview.analysis.report.build_report` takes), from one report: its step anatomy,
    kernels and findings. Raises TraceviewError subclasses when the report fails (UsageError on
    bad ``rules``)."""
    import polars as pl

    from traceview.analysis.compare.diff import device_kinds, hardware
    from traceview.analysis.report import build_report

    rep = build_report(prof, rules=rules)  # one report: its step anatomy, kernels and findings
    a = rep.steps
    st = a.steps
    win = st.filter(pl.col("in_window").fill_null(False)) if "in_window" in st.columns else st
    fam = [{"family": r["family"], "self_ps": float(r["self_ps"]), "share": float(r["share"])}
           for r in a.families.head(top_families).iter_rows(named=True)]
    prog = a.module
    if not prog and getattr(a, "step_rows", None) is not None and a.table is not None:
        inside = a.step_rows >= 0
        if inside.any():  # marker steps: the module holding the most self time inside them
            ev = pl.DataFrame({"attr": a.table.events["attr"].to_numpy()[inside],
                               "self_ps": a.table.events["self_ps"].to_numpy()[inside]})
            top = (ev.join(a.table.attrs.select("attr", "module"), on="attr", how="left")
                   .filter(pl.col("module").fill_null("") != "").group_by("module").agg(pl.col("self_ps").sum())
                   .sort(["self_ps", "module"], descending=[True, False]))
            prog = top["module"][0] if top.height else None
    k = rep.kernels
    ks = [] if k.height == 0 else [
        {"kernel": r["kernel"], "config": r["config"]}
        for r in k.select("kernel", "config").unique(maintain_order=True).iter_rows(named=True)]
    from traceview.analysis.steps.stepstats import step_walls

    return RunSummary(name=name, directory=directory, time=time, step_method=a.method, step_module=a.module,
                      step_ps=step_walls(st).astype(np.float64), window_ps=step_walls(win).astype(np.float64),
                      families=fam, kernels=ks,
                      findings=[f.id for f in rep.findings or []], program=program_stem(prog, bare=False) or None, program_module=prog,
                      device_kinds=device_kinds(prof), hardware=hardware(prof), warnings=list(rep.warnings))


def _named_run(runs: list[RunSummary], baseline: str) -> RunSummary | None:
    """The first of ``runs`` (oldest first) whose name or directory is ``baseline``."""
    return next((r for r in runs if baseline in (r.name, r.directory)), None)


def _verdict(c: noise.Change, threshold: float) -> str:
    if c.lo is None or c.ratio is None:
        return "no interval"
    if c.significant is None:
        return NOISE_UNKNOWN
    if not c.significant:
        # the interval reaches a change past the threshold (and past the noise, when known):
        # no change and a change that size are both in it
        hi, lo = 1 + threshold, 1 / (1 + threshold)
        if c.band is not None and c.band.known:
            hi, lo = max(hi, math.exp(c.band.bound)), min(lo, math.exp(-c.band.bound))
        if c.hi >= hi or c.lo <= lo:
            return INCONCLUSIVE
        return NO_CHANGE if c.verdict == noise.VERDICT_NO_CHANGE else "within noise"
    if c.lo > 1:
        return "regression" if c.lo >= 1 + threshold else "below threshold"
    return "improvement" if c.hi <= 1 / (1 + threshold) else "below threshold"


def compare_runs(runs: list[RunSummary], *, baseline: str | None = None, threshold: float = THRESHOLD,
                 level: float = noise.LEVEL, noise_band: float | None = None,
                 prior: "noise.Prior | None" = None) -> History:
    """Sort ``runs`` oldest first and apply the regression rule (module doc). ``baseline``: a
    run's name or directory (every run of its step program is compared with it), None for
    each run's latest earlier run of the same step program. ``noise_band``: the stated
    run-to-run noise of one run against another (a fraction: 0.1 for ±10%), else ``prior``
    (default :data:`noise.PRIOR`) where it applies. Raises ValueError for a ``baseline`` that
    names no run, a negative threshold or band, or a level outside (0, 1)."""
    if threshold < 0:
        raise ValueError(f"regression threshold must be >= 0, got {threshold!r}")
    if not 0 < level < 1:
        raise ValueError(f"noise level must be in (0, 1), got {level!r}")
    stated = None if noise_band is None else noise.stated_band(noise_band)
    p = noise.PRIOR if prior is None else prior
    runs = sorted(runs, key=lambda r: (r.time, r.directory))
    base_run = None
    if baseline is not None:
        base_run = _named_run(runs, baseline)
        if base_run is None:
            raise ValueError(f"baseline {baseline!r} names no run (runs: {', '.join(r.name for r in runs)})")
    for i, r in enumerate(runs):
        if base_run is not None:
            b = (base_run if base_run.work == r.work and r.program is not None
                 and same_hardware(base_run.hardware, r.hardware) else None)
            first = r is base_run
        else:  # an unknown program is the same as none: never compared
            b = next((x for x in reversed(runs[:i]) if x.work == r.work and same_hardware(x.hardware, r.hardware)),
                     None) if r.program else None
            first = r.program is not None  # the first run of its work (on its hardware): the later ones' baseline
        if b is None or b is r:
            r.change, r.baseline = None, None
            r.verdict = "baseline" if first or b is r else NO_COMPARABLE
            continue
        kinds = set(b.device_kinds) | set(r.device_kinds)
        band = stated if stated is not None else None if p.applies_to(kinds) else noise.unknown_band(kinds)
        r.change = noise.shift(b.step_ps, r.step_ps, level=level, band=band, prior=p, step=True)
        r.baseline = b.name
        r.verdict = _verdict(r.change, threshold)
    return History(runs=runs, baseline=baseline or "previous", threshold=threshold, level=level)
