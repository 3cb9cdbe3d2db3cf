"""Shape-keyed diff of two profiles (``traceview diff BASE TREATMENT``).

The question a treatment raises is "did the change take effect, and what did it do?". XLA's
instruction names cannot answer it: they are renumbered at every compilation (``fusion.12``
becomes ``fusion.40``) and reused across programs. The diff therefore matches *populations*
(:mod:`traceview.analysis.compare.populations`: key ``(kind, program, stem, shape, fingerprint)``,
the program being the module's bucket-free stem, so a prefill population never matches a
decode one of equal shape; named kernels as one population each).

Matching
--------
1. exact key equality;
2. kernel populations left over are paired by kernel identity: first when the modules they
   ran in have the same name after substituting the changed configuration values
   (``jit_decode_b8_bkv2048`` vs ``jit_decode_b8_bkv256`` when bkv went 2048 -> 256), then
   when exactly one unmatched population per side is left (``match`` column says which);
3. populations whose shapes differ only by dimensions scaled with a changed kernel
   configuration value (a kernel's scratch buffers, on CPU outside the kernel), when the
   pairing is one to one (``config-scaled``).

Everything else is ``appeared`` (treatment only) or ``vanished`` (base only).

Reported: per population the occurrence and self-time deltas; populations that appeared or
vanished; populations whose direct source file changed (:mod:`traceview.analysis.ops.sources`);
kernels whose configuration changed; op families (:mod:`traceview.analysis.ops.families`);
module executions; the step-time delta (:func:`traceview.analysis.steps.anatomy`: each side's
steps as ``analyze`` finds them, step markers else the dominant module; a treatment stepped by
a module, as the base is, takes the base's module when it runs it, found by name after
configuration substitution). Profiling-overhead notes: a population whose
traced event count differs by ``overhead_factor`` (default 4) or more between the sides gets a
note that per-event tracing overhead may distort the comparison of its timing — throughput is
never to be quoted from a profiled run.

Noise: every matched population carries the Hodges-Lehmann ratio of its self time per step
(treatment / base) with an exact rank interval (:func:`traceview.analysis.compare.noise.shift`;
samples from :mod:`traceview.analysis.compare.samples`: self time per step over every step of the
side, or per occurrence for populations outside the steps). The interval must clear the
run-to-run noise: measured from the recordings when a side has several
(:func:`~traceview.analysis.compare.noise.measured_band`), else the stated A/A prior of the machine
class (:data:`~traceview.analysis.compare.noise.PRIOR`); never the treatment's own shifts. A change
whose interval reaches into that band is "within noise"; too few samples for an interval is
"no interval", with how many more steps to record. One recording a side on devices the prior
was not measured on has no band: an interval holding 1 is then "no change" (not significant:
every band holds 1), one excluding 1 "unknown". The step time gets the same from the
per-step durations.

Units: every time is integer (or mean float) picoseconds; shares are fractions of all ops'
self time on that side. Errors: :class:`~traceview.errors.UsageError` for bad arguments.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import numpy as np
import polars as pl

from traceview.analysis import derived
from traceview.analysis.compare import noise
from traceview.analysis.steps import anatomy as steps
from traceview.analysis.compare.populations import KEY, family_shares, kernel_table, populations
from traceview.analysis.compare.samples import Samples, population_samples
from traceview.analysis.steps.stepstats import step_walls
from traceview.analysis.ops.tagged import TaggedOps
from traceview.model.runtable import as_runs
from traceview.model.units import fmt_ratio
from traceview.errors import TraceviewError, UsageError
from traceview.model.kernelname import config_changes, format_config_value, kernel_id

#: default ratio of traced event counts above which a population gets an overhead note
OVERHEAD_FACTOR = 4.0
#: populations with fewer traced events than this on both sides never get the note
OVERHEAD_MIN_EVENTS = 50
#: the study's rule, quoted in every diff that carries an overhead note
THROUGHPUT_RULE = "throughput is never to be quoted from a profiled run"
#: a common-shift note (:func:`common_shift`) needs this share of the matched populations with
#: an interval, and at least :data:`COMMON_SHIFT_MIN` of them, moved the same way
COMMON_SHIFT_SHARE = 0.9
COMMON_SHIFT_MIN = 8


# -- the diff -------------------------------------------------------------------------------

@dataclass
class StepDelta:
    """Mean step wall time on each side (:func:`traceview.analysis.steps.anatomy`), ps.

    ``module_*``: the module whose executions define the steps (None when the side has no
    module runs: one whole-trace step per device). ``method_*``: anatomy's method
    ("module", "trace", "markers"). ``steps_*``: every step found; ``step_ps_*``: the mean
    over the ``window_steps_*`` steps of the step window ``window`` of each step's time, its
    slowest device's (:func:`~traceview.analysis.steps.stepstats.step_walls`)
    (:mod:`traceview.analysis.steps.stepstats`: "steady" leaves the outlier steps out).
    ``delta_ps`` = treatment − base; ``ratio`` = treatment / base (None when the base step is 0).
    """

    module_base: str | None
    module_treatment: str | None
    steps_base: int
    steps_treatment: int
    step_ps_base: float
    step_ps_treatment: float
    method_base: str = ""
    method_treatment: str = ""
    window_steps_base: int | None = None
    window_steps_treatment: int | None = None
    window: str = "all"
    change: "noise.Change | None" = None

    @property
    def delta_ps(self) -> float:
        return self.step_ps_treatment - self.step_ps_base

    @property
    def ratio(self) -> float | None:
        return self.step_ps_treatment / self.step_ps_base if self.step_ps_base else None

    def to_dict(self) -> dict:
        return {"module_base": self.module_base, "module_treatment": self.module_treatment,
                "steps_base": self.steps_base, "steps_treatment": self.steps_treatment,
                "step_ps_base": self.step_ps_base, "step_ps_treatment": self.step_ps_treatment,
                "delta_ps": self.delta_ps, "ratio": self.ratio, "method_base": self.method_base,
                "method_treatment": self.method_treatment, "window": self.window,
                "window_steps_base": self.window_steps_base, "window_steps_treatment": self.window_steps_treatment,
                "noise": self.change.to_dict() if self.change is not None else None}


@dataclass
class DiffReport:
    """Result of :func:`diff`. Frames (times in ps, shares as fractions):

    ``populations`` — one row per population, :data:`DIFF_COLUMNS`: ``status`` ("matched",
    "appeared", "vanished"), ``match`` ("exact", "kernel+module", "kernel", ""), the key of
    the base side (treatment side for appeared rows), ``shape_treatment`` (differs from
    ``shape`` only for kernel populations matched in pass 2), per side (``_base`` /
    ``_treatment``): op_names, kernels, occurrences, events, self_ps, mean_ps, share,
    per_execution, source, source_files, modules; then delta_self_ps, self_ratio,
    occurrence_ratio, events_ratio, source_changed ("file", "line" or ""), kernel_changes
    (text such as ``bkv 2048_2048 -> 256_256``), family, overhead_note; then the noise
    columns (matched rows; null elsewhere): samples ("per step" / "per occurrence" / null),
    n_samples_base, n_samples_treatment, median_ratio (median per sample, treatment / base),
    ratio_lo, ratio_hi (its interval at ``noise_level``), significant (Boolean: the interval
    lies beyond the noise band; False when it holds 1, null when it excludes 1 and the band is
    unknown; a population on one side only: True when it ran in at least
    :data:`MIN_PRESENT` samples there), noise ("within noise", "significant", "significant
    (vanished)", "significant (appeared)", "no change" (the interval holds 1, the band is
    unknown), "unknown" or "no interval": :attr:`noise.Change.verdict`), noise_band (the
    run-to-run band's upper edge as a ratio: changes within [1/band, band] are noise),
    more_samples (samples each side lacks for an interval, null when it has one). Sorted by
    ``|delta_self_ps|``.
    ``kernels`` — kernel identity, names on each side, configs, ``changes`` text, invocations
    and events per side. ``families`` — family, self_ps and share per side, delta_self_ps.
    ``modules`` — module (base name; treatment names mapped through configuration
    substitution), executions and mean_ps per side. ``steps``: :class:`StepDelta`.
    ``notes``: one line each (sides on different hardware, steps found differently or of
    different programs, overhead, collectives whose size or groups changed). ``hardware``:
    each side's devices in words (:func:`hardware_text`). ``collectives``: :func:`traceview.analysis.communication.collectives.collective_diff` (None when
    the sides are not profiles). ``findings``: the diff's findings
    (:func:`traceview.analysis.findings.find` with ``diff=``), set by :func:`diff_sides`.
    """

    base_label: str
    treatment_label: str
    populations: pl.DataFrame
    kernels: pl.DataFrame
    families: pl.DataFrame
    modules: pl.DataFrame
    steps: StepDelta | None
    op_time_ps_base: int
    op_time_ps_treatment: int
    events_base: int
    events_treatment: int
    overhead_factor: float = OVERHEAD_FACTOR
    notes: list[str] = field(default_factory=list)
    collectives: pl.DataFrame | None = None  # traceview.analysis.communication.collectives.collective_diff
    findings: list | None = None  # traceview.analysis.findings (the diff's rules: profiling overhead)
    noise_level: float = noise.LEVEL
    run_noise: "NoiseSummary | None" = None  # which run-to-run noise the changes were judged against
    hardware: tuple[str, str] = ("", "")  # each side's devices in words (hardware_text)

    # -- views ----------------------------------------------------------------------------
    def matched(self) -> pl.DataFrame:
        return self.populations.filter(pl.col("status") == "matched")

    def appeared(self) -> pl.DataFrame:
        return self.populations.filter(pl.col("status") == "appeared")

    def vanished(self) -> pl.DataFrame:
        return self.populations.filter(pl.col("status") == "vanished")

    def source_changes(self) -> pl.DataFrame:
        return self.populations.filter(pl.col("source_changed") != "")

    def kernel_changes(self) -> pl.DataFrame:
        return self.kernels.filter(pl.col("changes") != "")

    def significant(self) -> pl.DataFrame:
        """Populations whose change is outside the noise: matched ones, and those that
        appeared or vanished from at least :data:`MIN_PRESENT` samples of one side."""
        return self.populations.filter(pl.col("significant").fill_null(False))

    def noise_counts(self) -> dict[str, int] | None:
        """The noise verdicts counted (None without noise columns): ``compared`` (matched
        populations with an interval), ``significant_matched`` (those beyond the noise),
        ``unknown`` (their intervals excluding 1 against an unknown noise), ``vanished`` and
        ``appeared`` (significant populations on one side only), ``significant`` (every
        significant population: the last three added), ``one_side_too_few`` (populations on
        one side only that ran in too few samples to be significant)."""
        p = self.populations
        if "significant" not in p.columns or "ratio_lo" not in p.columns:
            return None
        m = p.filter(pl.col("ratio_lo").is_not_null())
        k = int(m["significant"].sum() or 0)
        sig = p.filter(pl.col("significant").fill_null(False))
        gone = {s: sig.filter(pl.col("status") == s).height for s in ("vanished", "appeared")}
        one_side = p.filter(pl.col("status").is_in(["vanished", "appeared"])).height
        return {"compared": m.height, "significant": k + gone["vanished"] + gone["appeared"],
                "significant_matched": k, "unknown": int(m["significant"].is_null().sum()), **gone,
                "one_side_too_few": one_side - gone["vanished"] - gone["appeared"]}

    def overhead_notes(self) -> pl.DataFrame:
        return self.populations.filter(pl.col("overhead_note") != "")

    def counts(self) -> dict[str, int]:
        """Populations per status: {"matched": n, "appeared": n, "vanished": n}."""
        return {s: self.populations.filter(pl.col("status") == s).height for s in ("matched", "appeared", "vanished")}


_SIDE = ["op_names", "kernels", "occurrences", "events", "self_ps", "mean_ps", "share", "per_execution", "source",
         "source_files", "modules", "hlo_text"]

#: columns of :attr:`DiffReport.populations`
DIFF_COLUMNS = (["status", "match"] + KEY + ["shape_treatment", "is_kernel", "family"]
                + [f"{c}_base" for c in _SIDE] + [f"{c}_treatment" for c in _SIDE]
                + ["delta_self_ps", "self_ratio", "occurrence_ratio", "events_ratio", "source_changed",
                   "kernel_changes", "overhead_note"]
                + ["samples", "n_samples_base", "n_samples_treatment", "median_ratio", "ratio_lo", "ratio_hi",
                   "significant", "noise", "noise_band", "more_samples"])


def _label(prof, given: str | None) -> str:
    if given:
        return given
    files = [str(t.path) for t in getattr(prof, "traces", [])]
    return ", ".join(files) if files else "<profile>"


def _value_map(changes: list[dict]) -> dict[str, str]:
    """Treatment number -> base number for every changed configuration value."""
    out: dict[str, str] = {}
    for ch in changes:
        for a, b in ch.values():
            if isinstance(a, tuple) and isinstance(b, tuple) and len(a) == len(b):
                for x, y in zip(a, b):
                    if x != y:
                        out.setdefault(str(y), str(x))
    return out


def _subst(name: str, vmap: dict[str, str]) -> str:
    if not vmap or not name:
        return name
    return re.sub(r"\d+", lambda m: vmap.get(m.group(0), m.group(0)), name)


_NUM = re.compile(r"\d+")


def _scaled(b: dict, t: dict, pairs: set, ratios: set) -> bool:
    """Same kind, stem and shape/fingerprint skeleton, and every differing dimension pair
    (base, treatment) is a changed configuration value pair or in one of their ratios."""
    if b["kind"] != t["kind"] or b["stem"] != t["stem"] or b.get("program") != t.get("program"):
        return False
    if _NUM.sub("#", b["shape"]) != _NUM.sub("#", t["shape"]):
        return False
    if _NUM.sub("#", b["fingerprint"]) != _NUM.sub("#", t["fingerprint"]):
        return False
    db = [int(x) for x in _NUM.findall(b["shape"])]
    dt = [int(x) for x in _NUM.findall(t["shape"])]
    differ = [(x, y) for x, y in zip(db, dt) if x != y]
    if not differ:
        return False
    return all((x, y) in pairs or (y and x / y in ratios) for x, y in differ)


def _changes_text(ch: dict) -> str:
    return "; ".join(f"{k} {format_config_value(a) if a is not None else '-'} -> "
                     f"{format_config_value(b) if b is not None else '-'}" for k, (a, b) in ch.items())


def _recording_files(sd: "DiffSide") -> dict:
    """{real path: path as read} of the local trace files of a side's recordings."""
    import os

    return {os.path.realpath(f): f for f in sd.files if os.path.isfile(f)}


@dataclass
class DiffSide:
    """What a diff needs of one profile, so that a profile's op events can be released before
    the other side is read: ``label``, ``populations`` (:func:`~traceview.analysis.compare.populations.populations`),
    ``kernels`` (:func:`~traceview.analysis.compare.populations.kernel_table`), ``families``
    (:func:`~traceview.analysis.compare.populations.family_shares`), ``module_sums`` (per module name:
    ``executions``, ``n_timed`` executions with a duration and their ``total_ps``; None
    without module runs), ``events`` (op events as traced: an interpreted kernel's events
    before they are folded into its invocations), ``self_ps`` (their self time, ps) and ``steps`` ((module, steps, mean step ps,
    method) of the step anatomy, None when it failed), ``communication``
    (:func:`traceview.analysis.communication.collectives.communication`, None when it could not be made),
    ``samples`` (:class:`~traceview.analysis.compare.samples.Samples`, for the noise intervals, from
    the steps of the step window) and ``recordings`` (profiles pooled into it,
    :func:`traceview.analysis.compare.pooled.pool`)."""

    label: str
    populations: pl.DataFrame
    kernels: pl.DataFrame
    families: pl.DataFrame
    module_sums: pl.DataFrame | None
    events: int
    self_ps: int
    steps: tuple | None = None
    communication: object = None  # traceview.analysis.communication.collectives.Communication
    samples: "Samples | None" = None
    recordings: int = 1
    #: device kinds of the profile's devices ("CPU", "TPU", "GPU"; "" when unknown)
    device_kinds: tuple = ()
    #: the devices that ran ops, by kind: :func:`hardware`
    hardware: tuple = ()
    #: what pooling this side's recordings found worth saying (:func:`~traceview.analysis.compare.pooled.pool`)
    notes: list = field(default_factory=list)
    #: the trace files its recordings were read from (every recording's, when pooled)
    files: tuple = ()


def side(prof, *, rules=None, name_stem: bool = True, label: str | None = None, base: DiffSide | None = None,
         tagged: TaggedOps | None = None, step_window: str = "steady", program_key: bool = True,
         expand_kernels: bool = False, release=None, drop_derived: bool = False,
         window_option: str = "step_window", beside: bool = False) -> DiffSide:
    """The :class:`DiffSide` of ``prof`` (anything with ``table``, ``module_runs`` and
    ``traces``). ``base``: the base's side when ``prof`` is the treatment (its step module is
    the base's, after configuration substitution, when both are stepped by a module and the
    treatment runs it; else its own steps). ``tagged``: its
    :func:`~traceview.analysis.ops.tagged.tag` result made with ``rules``, when the caller has it.
    ``step_window``: the steps the step time is the mean of (:mod:`traceview.analysis.steps.stepstats`).
    ``expand_kernels``: each op of a named kernel is its own population
    (:func:`~traceview.analysis.compare.populations.keyed`; pass it with a profile loaded so).
    ``release``: as :func:`traceview.analysis.report.build_report`'s, called after the
    populations, the step anatomy and the noise samples. ``drop_derived``: ``prof`` is read
    for this side alone, so the step anatomy it keeps (:mod:`traceview.analysis.derived`) is
    dropped as soon as the noise samples have their steps (its per-step frames are the
    largest a side holds). ``beside``: the tagging, kernels, populations and module sums are
    computed on a thread of their own while this one computes the step anatomy (as
    :func:`~traceview.analysis.report.build_report`'s ``beside``; ``release`` is then not called
    between them); the same side either way. Raises UsageError on bad rules or step window."""
    from traceview.analysis.steps.stepstats import parse_window, window_holds_steps

    parse_window(step_window)
    release = release if release is not None else (lambda: None)
    runs = prof.runs if hasattr(prof, "runs") else prof.module_runs

    def tables():  # the populations and what the side's tables read (none of it the step anatomy's)
        t = tagged if tagged is not None else derived.tagged(prof, rules)
        kern = kernel_table(prof, tagged=t)
        pops = populations(prof, name_stem=name_stem, tagged=t, program_stem_key=program_key,
                           expand_kernels=expand_kernels)
        kern, pops, traced = _traced_kernel_events(prof, kern, pops)
        return t, kern, pops, traced, family_shares(t), module_sums(runs)

    if beside:
        from traceview.analysis.report import _beside

        (tables_of,) = _beside(tables)
    else:
        got = tables()
        release()
        tables_of = lambda: got  # noqa: E731
    vmap = None if base is None else (lambda: _value_map(_kernel_changes(base.kernels, tables_of()[1])))
    a = _step_anatomy(prof, None if base is None else (base, vmap), step_window)
    t, kern, pops, traced, fams, msums = tables_of()
    s = DiffSide(label=_label(prof, label), populations=pops,
                 kernels=kern, families=fams, module_sums=msums,
                 events=t.events if traced is None else traced,
                 self_ps=t.self_ps, files=tuple(str(tr.path) for tr in getattr(prof, "traces", []) or []))
    # as analyze: no diff of no steps; naming the profile, as the two sides may have different step counts
    window_holds_steps(None if a is None else a.steps, step_window, window_option, prof=prof)
    release()
    s.steps = _steps_tuple(a)
    rows, durs = None, None
    if a is not None:  # the noise samples: every step under "steady" (ranks need no outlier removal), else the window's
        win = a.steps["in_window"].to_numpy() if "in_window" in a.steps.columns else np.ones(a.steps.height, bool)
        if step_window == "steady":
            win = np.ones(a.steps.height, bool)
        rows = a.step_rows
        if rows is not None and not win.all():
            rows = np.where(rows >= 0, np.where(win[np.clip(rows, 0, None)], rows, -1), -1)
        # one sample per step index, the devices' copies of a step pooled (stepstats.step_walls)
        idx = a.steps["step"].to_numpy().astype(np.int64)
        if rows is not None:
            if len(idx) and 0 <= int(idx.min()) and int(idx.max()) < 1 << 31:  # 4 bytes an event, not 8
                idx = idx.astype(np.int32)
            rows = np.where(rows >= 0, idx[np.clip(rows, 0, None)], idx.dtype.type(-1))
        durs = step_walls(a.steps.filter(pl.Series(win)))
        del win, idx
    del a
    if drop_derived and hasattr(prof, "forget"):  # the largest frames a side holds, no longer needed
        prof.forget("anatomy")
    s.samples = population_samples(prof.table, t, rows, durs, name_stem=name_stem, program_stem_key=program_key,
                                   expand_kernels=expand_kernels)
    del rows, durs
    release()
    s.device_kinds = device_kinds(prof)
    s.hardware = hardware(prof)
    if hasattr(prof, "used_devices"):
        s.communication = derived.communication(prof)
    return s


def device_kinds(prof) -> tuple:
    """The kinds (``CPU``, ``TPU``, ``GPU``) of the devices of ``prof``'s op events, read off
    the device names (``/device:TPU:0``, ``GPU:1``, ``CPU:0``); () when none can be told."""
    try:
        names = prof.table.attrs["device"].drop_nulls().unique().to_list()
    except Exception:
        return ()
    kinds = set()
    for n in names:
        up = str(n).upper()
        kind = next((k for k in ("TPU", "GPU", "CPU") if k in up), None)
        if kind is None:
            return ()
        kinds.add(kind)
    return tuple(sorted(kinds))


def hardware(prof) -> tuple:
    """The devices of ``prof`` that ran ops, as sorted ``(kind, device type, count)`` triples:
    ``(("TPU", "TPU v6 Lite", 4),)``; the type is "" where the trace names only the kind (a
    trace.json's ``TPU``); () when no device can be told."""
    from collections import Counter

    got: Counter = Counter()
    if hasattr(prof, "used_devices"):
        for d in prof.used_devices():
            kind = str(d.kind or "").upper()
            typ = str(d.device_type or "")
            got[(kind, "" if typ.upper() == kind else typ)] += 1
    else:
        try:
            names = prof.table.collapse().select("host", "device").unique().iter_rows()
        except Exception:
            return ()
        for _, n in names:
            up = str(n).upper()
            got[(next((k for k in ("TPU", "GPU", "CPU") if k in up), ""), "")] += 1
    return tuple(sorted((k, t, n) for (k, t), n in got.items()))


def hardware_text(hw: tuple) -> str:
    """:func:`hardware` in words: ``"4 x TPU v6 Lite"``, ``"1 x CPU"``; "unknown devices" for ()."""
    return " + ".join(f"{n} x {t or k or 'device'}" for k, t, n in hw) or "unknown devices"


def same_hardware(a: tuple, b: tuple) -> bool:
    """Whether two :func:`hardware` tuples are one hardware: the same device kinds and counts,
    and the same device types where both name one. True when either is unknown (())."""
    if not a or not b:
        return True

    def by_kind(hw):
        out: dict = {}
        for k, t, n in hw:
            types, count = out.get(k, (set(), 0))
            out[k] = (types | ({t} if t else set()), count + n)
        return out

    ka, kb = by_kind(a), by_kind(b)
    if ka.keys() != kb.keys():
        return False
    return all(ka[k][1] == kb[k][1] and (not ka[k][0] or not kb[k][0] or ka[k][0] == kb[k][0]) for k in ka)


def step_definition(steps: tuple | None) -> tuple[str, str] | None:
    """How a side's steps were found (the ``steps`` tuple of a :class:`DiffSide`): (method,
    bucket-free program of the step module, :func:`~traceview.analysis.compare.populations.program_stem`;
    "" for step markers or the whole trace); None without steps."""
    if steps is None:
        return None
    from traceview.analysis.compare.populations import program_stem

    module, method = steps[0], steps[3]
    return method, "" if method == "markers" else program_stem(module)


def step_definition_text(steps: tuple | None) -> str:
    """How a side's steps were found, in words: "step markers", "executions of jit_decode_b8",
    "the whole trace", "no steps"."""
    if steps is None:
        return "no steps"
    module, method = steps[0], steps[3]
    if method == "markers":
        return "step markers"
    return f"executions of {module}" if module else "the whole trace"


def _traced_kernel_events(prof, kern: pl.DataFrame, pops: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame, int | None]:
    """``kern`` and ``pops`` with ``events`` counted in the files as traced when the profile
    folds interpreted kernel invocations into one row each
    (:func:`traceview.model.interpreted.collapse_kernels`): the overhead notes are about the
    events the profiler recorded. A kernel's traced events (ops carrying its name, in the
    profile's devices: the events folded into its invocations,
    :func:`traceview.model.interpreted.folded_events`, and its ops left unfolded) go to its
    populations in proportion to their occurrences; the third
    item is the op events traced in the profile's devices (occurrences; None: the profile's
    own). Unchanged when nothing was folded."""
    traces = getattr(prof, "traces", None) or []
    if not traces:
        return kern, pops, None
    from traceview.model.optable import OpTable

    if sum(tr.table.height for tr in traces) == prof.table.height:
        return kern, pops, None  # nothing folded (nor filtered)
    raw = OpTable.concat([tr.table for tr in traces])
    devs = prof.table.collapse().select("host", "device").unique()
    raw = raw.filter(pl.struct("host", "device").is_in(devs.to_struct().implode()))
    win = getattr(prof, "phase_windows", None)
    if win is not None:  # --phase: the traced events inside the phase's executions, as the profile's
        from traceview.analysis.steps.phases import in_windows

        raw = OpTable(raw.events.filter(pl.Series(in_windows(raw, win))), raw.attrs)
    if raw.height == prof.table.height:
        return kern, pops, None
    total = int(raw.events["count"].sum() or 0)
    if kern.height == 0:
        return kern, pops, total
    from traceview.model.interpreted import folded_events
    from traceview.model.kernelname import find_kernel_name

    # a kernel's traced events: those folded into its invocations, and its ops left unfolded
    # (its rows in the folded table less the invocations)
    traced = {r["kernel"]: r["events"] for r in kern.iter_rows(named=True)}
    for name, (n_inv, members) in folded_events(raw).items():
        k = find_kernel_name(name) or name
        if k in traced:
            traced[k] += members - n_inv
    kern = kern.with_columns(pl.struct("kernel", "events").map_elements(
        lambda r: traced.get(r["kernel"], r["events"]), return_dtype=pl.Int64).alias("events"))
    inv = {r["kernel"]: r["invocations"] for r in kern.iter_rows(named=True)}

    def pop_events(r):
        ks = [k for k in (r["kernels"] or []) if k in traced and inv.get(k)]
        if not r["is_kernel"] or not ks:
            return r["events"]
        return round(sum(traced[k] * r["occurrences"] / inv[k] for k in ks))

    pops = pops.with_columns(pl.struct("is_kernel", "kernels", "occurrences", "events").map_elements(
        pop_events, return_dtype=pl.Int64).alias("events"))
    return kern, pops, total


def _kernel_changes(kb: pl.DataFrame, kt: pl.DataFrame) -> list[dict]:
    kernels = _kernel_diff(kb, kt)
    return [config_changes(a, b) for r in kernels.filter(pl.col("changes") != "").iter_rows(named=True)
            for a in r["names_base"] for b in r["names_treatment"]]


def _src_tail(src: str) -> str:
    """A source file (or ``file:line``) by its last two path parts, ``engine_shim/model.py:81``:
    the same code recorded from two checkouts (``/work/main/...`` against ``/work/wt-b/...``,
    an A/B's usual set-up) is the same source."""
    parts = src.replace("\\", "/").rsplit("/", 2)
    return "/".join(parts[-2:])


def _steps_tuple(a) -> tuple | None:
    """(module, steps, mean step ps over the window, method, steps in the window, window) of
    a step anatomy (None for None); steps are counted by step index (a step on 8 devices is
    one step) and a step's time is its slowest device's (:func:`step_walls`, as the noise
    samples and ``history``'s)."""
    if a is None:
        return None
    st = a.steps
    n_all = int(st["step"].n_unique()) if st.height else 0
    win = st.filter(pl.col("in_window").fill_null(False)) if "in_window" in st.columns and st.height else st
    n_win = int(win["step"].n_unique()) if win.height else 0
    walls = step_walls(win) if win.height else np.zeros(0)
    step_ps = float(walls.mean()) if walls.size else a.coverage.step_ps
    return a.module, n_all, step_ps, a.method, n_win, a.window


def _side_steps(prof, base, window: str = "steady") -> tuple | None:
    """:func:`_steps_tuple` of :func:`_step_anatomy`, None when it fails."""
    return _steps_tuple(_step_anatomy(prof, base, window))


def _step_anatomy(prof, base, window: str = "steady") -> "steps.StepAnatomy | None":
    """``prof``'s step anatomy over ``window``: the one ``analyze`` shows (step markers when the
    trace has them, else its dominant module). For a treatment (``base`` = (base side, value
    map, or a callable giving it when first needed)) whose own steps are a module's, as the
    base's are: the base's module, found by name after configuration substitution, when the
    treatment runs it; else (no such module, or steps of another kind on the two sides: markers
    against a module) its own, as ``analyze`` finds them. None when the anatomy fails on the
    trace."""
    runs = as_runs(prof.runs if hasattr(prof, "runs") else prof.module_runs)
    try:
        own = derived.step_anatomy(prof, None, window=window)
    except TraceviewError:
        own = None
    if base is None or (own is not None and own.method == "markers"):
        return own
    b, vmap = base
    vmap = vmap() if callable(vmap) else vmap
    if b.steps is None or b.steps[3] == "markers" or not b.steps[0] or runs is None or not runs.height:
        return own  # steps of another kind than the treatment's own: its own
    mb = b.steps[0]
    names = list(steps._run_modules(runs, [runs.runs["key"]]))
    mod = mb if mb in names else next((m for m in names if _subst(m, vmap) == mb), None)
    if mod is None:  # the base's step program does not run in the treatment: its own steps
        return own
    if own is not None and own.module == mod:
        return own
    try:  # cached like the treatment's own, for the report sections that read it again
        return derived.step_anatomy(prof, None, module=mod, window=window)
    except TraceviewError:
        return None


def diff(base, treatment, *, rules=None, name_stem: bool = True, overhead_factor: float = OVERHEAD_FACTOR,
         overhead_min_events: int = OVERHEAD_MIN_EVENTS, labels: tuple[str, str] | None = None,
         tagged: tuple[TaggedOps, TaggedOps] | None = None, step_window: str = "steady",
         program_key: bool = True, noise_level: float = noise.LEVEL, expand_kernels: bool = False) -> DiffReport:
    """Diff two profiles population by population (method in the module doc).

    Args:
      base, treatment: profiles (anything with ``table``, ``module_runs`` and ``traces``, as
        :class:`traceview.Profile`).
      rules: user op families for :func:`traceview.analysis.ops.families.classify`
        (``["name=regex", ...]``).
      name_stem: include the op-name stem in the population key (default True).
      program_key: include the program's bucket-free stem in the key (default True).
      overhead_factor: ratio of traced event counts (either way) that earns a population an
        overhead note (default 4.0); must be > 1.
      overhead_min_events: populations with fewer events than this on both sides get no note.
      labels: display names for the two sides (default: their file paths).
      tagged: the sides' :func:`~traceview.analysis.ops.tagged.tag` results made with ``rules``,
        when the caller has them.
      step_window: the steps whose mean is each side's step time: "steady" (default, outlier
        steps left out), "all" or "A:B" (:mod:`traceview.analysis.steps.stepstats`); the noise
        samples come from the same steps.
      noise_level: confidence level of the noise intervals (default 0.95), in (0, 1).
      expand_kernels: each op of a named kernel is its own population, not one kernel
        population (profiles loaded with ``expand_kernels=True``).

    Returns: :class:`DiffReport` (:func:`diff_sides` of the two :func:`side` summaries).
    Raises: UsageError for ``overhead_factor <= 1``, a bad ``noise_level`` or bad rules.
    """
    if not overhead_factor > 1:
        raise UsageError(f"overhead factor must be > 1, got {overhead_factor!r}")
    tb, tt = tagged if tagged is not None else (None, None)
    b = side(base, rules=rules, name_stem=name_stem, label=labels[0] if labels else None, tagged=tb,
             step_window=step_window, program_key=program_key, expand_kernels=expand_kernels)
    t = side(treatment, rules=rules, name_stem=name_stem, label=labels[1] if labels else None, base=b, tagged=tt,
             step_window=step_window, program_key=program_key, expand_kernels=expand_kernels)
    return diff_sides(b, t, overhead_factor=overhead_factor, overhead_min_events=overhead_min_events,
                      noise_level=noise_level)


def diff_sides(base: DiffSide, treatment: DiffSide, *, overhead_factor: float = OVERHEAD_FACTOR,
               overhead_min_events: int = OVERHEAD_MIN_EVENTS, noise_level: float = noise.LEVEL,
               noise_prior: "noise.Prior | None" = None) -> DiffReport:
    """The :class:`DiffReport` of two sides (:func:`side`; the treatment's made with
    ``base=base``). ``noise_prior``: the run-to-run noise of one recording a side (default
    :data:`traceview.analysis.compare.noise.PRIOR`; ``benchmarks/noise_ab.py`` passes the one it fits). Raises UsageError for ``overhead_factor <= 1`` or ``noise_level`` outside
    (0, 1)."""
    if not overhead_factor > 1:
        raise UsageError(f"overhead factor must be > 1, got {overhead_factor!r}")
    if not 0 < noise_level < 1:
        raise UsageError(f"noise level must be in (0, 1), got {noise_level!r}")
    b_pop, t_pop = base.populations, treatment.populations
    b_label, t_label = base.label, treatment.label

    bs = b_pop.rename({c: f"{c}_base" for c in _SIDE})
    ts = t_pop.rename({c: f"{c}_treatment" for c in _SIDE})
    joined = bs.join(ts.drop("is_kernel", "family"), on=KEY, how="full", coalesce=True, nulls_equal=True)
    in_b = pl.col("occurrences_base").is_not_null()
    in_t = pl.col("occurrences_treatment").is_not_null()
    joined = joined.with_columns(
        pl.when(in_b & in_t).then(pl.lit("matched")).when(in_b).then(pl.lit("vanished")).otherwise(pl.lit("appeared"))
        .alias("status"),
        pl.when(in_b & in_t).then(pl.lit("exact")).otherwise(pl.lit("")).alias("match"),
        pl.col("shape").alias("shape_treatment"),
        pl.col("fingerprint").alias("_fp_treatment"),
    )
    # fill is_kernel/family for appeared rows from the treatment table
    t_meta = t_pop.select(KEY + [pl.col("is_kernel").alias("_ik"), pl.col("family").alias("_fam")])
    joined = joined.join(t_meta, on=KEY, how="left", nulls_equal=True).with_columns(
        pl.coalesce("is_kernel", "_ik").alias("is_kernel"), pl.coalesce("family", "_fam").alias("family")
    ).drop("_ik", "_fam")

    kernels = _kernel_diff(base.kernels, treatment.kernels)
    vmap = _value_map(_kernel_changes(base.kernels, treatment.kernels))

    # pass 2: kernel populations paired by kernel identity
    rows = joined.to_dicts()
    vanished_k = [r for r in rows if r["status"] == "vanished" and r["kind"] == "kernel"]
    appeared_k = [r for r in rows if r["status"] == "appeared" and r["kind"] == "kernel"]
    paired: list[tuple[dict, dict, str]] = []
    for kid in sorted({r["stem"] for r in vanished_k} & {r["stem"] for r in appeared_k}):
        bl = [r for r in vanished_k if r["stem"] == kid]
        tl = [r for r in appeared_k if r["stem"] == kid]
        for b in list(bl):
            for t in list(tl):
                chs = [config_changes(x, y) for x in b["kernels_base"] for y in t["kernels_treatment"]]
                vm = _value_map(chs)
                if set(b["modules_base"]) & {_subst(m, vm) for m in t["modules_treatment"]}:
                    paired.append((b, t, "kernel+module"))
                    bl.remove(b)
                    tl.remove(t)
                    break
        if len(bl) == 1 and len(tl) == 1:
            paired.append((bl[0], tl[0], "kernel"))
    # pass 3: populations whose shapes differ only by dimensions scaled with a changed
    # kernel configuration value (a kernel's scratch buffers, on CPU outside the kernel)
    if vmap:
        taken = {id(b) for b, _, _ in paired} | {id(t) for _, t, _ in paired}
        pairs = {(int(t), int(b)) for t, b in vmap.items()}
        ratios = {b / t for t, b in pairs if t}
        van = [r for r in rows if r["status"] == "vanished" and r["kind"] != "kernel" and id(r) not in taken]
        app = [r for r in rows if r["status"] == "appeared" and r["kind"] != "kernel" and id(r) not in taken]
        cand = {id(b): [t for t in app if _scaled(b, t, pairs, ratios)] for b in van}
        back: dict[int, list] = {}
        for b in van:
            for t in cand[id(b)]:
                back.setdefault(id(t), []).append(b)
        for b in van:
            c = cand[id(b)]
            if len(c) == 1 and len(back[id(c[0])]) == 1:
                paired.append((b, c[0], "config-scaled"))
    if paired:
        drop_ids = {id(b) for b, _, _ in paired} | {id(t) for _, t, _ in paired}
        keep = [r for r in rows if id(r) not in drop_ids]
        for b, t, how in paired:
            m = dict(b)
            for c in _SIDE:
                m[f"{c}_treatment"] = t[f"{c}_treatment"]
            m["status"], m["match"], m["shape_treatment"] = "matched", how, t["shape"]
            m["_fp_treatment"] = t["fingerprint"]
            keep.append(m)
        joined = pl.DataFrame(keep, schema=joined.schema)

    # kernel configuration changes per population
    def _kchanges(kb, kt):
        if not kb or not kt:
            return ""
        texts = []
        for x in kb:
            for y in kt:
                if x != y and kernel_id(x) == kernel_id(y):
                    t = _changes_text(config_changes(x, y))
                    if t and t not in texts:
                        texts.append(t)
        return "; ".join(texts)

    def _src_change(fb, ft, sb, st):
        if fb is None or ft is None:
            return ""
        if sorted(map(_src_tail, fb)) != sorted(map(_src_tail, ft)):
            return "file"
        if _src_tail(sb or "") != _src_tail(st or ""):
            return "line"
        return ""

    ratio = lambda a, b: pl.when(pl.col(a) > 0).then(pl.col(b) / pl.col(a)).otherwise(None)  # noqa: E731
    joined = joined.with_columns(
        (pl.col("self_ps_treatment").fill_null(0) - pl.col("self_ps_base").fill_null(0)).alias("delta_self_ps"),
        ratio("self_ps_base", "self_ps_treatment").alias("self_ratio"),
        ratio("occurrences_base", "occurrences_treatment").alias("occurrence_ratio"),
        ratio("events_base", "events_treatment").alias("events_ratio"),
        pl.struct("kernels_base", "kernels_treatment").map_elements(
            lambda s: _kchanges(s["kernels_base"], s["kernels_treatment"]), return_dtype=pl.Utf8).alias("kernel_changes"),
        pl.struct("source_files_base", "source_files_treatment", "source_base", "source_treatment").map_elements(
            lambda s: _src_change(s["source_files_base"], s["source_files_treatment"], s["source_base"],
                                  s["source_treatment"]), return_dtype=pl.Utf8).alias("source_changed"),
    )

    def _note(s):
        eb, et = s["events_base"], s["events_treatment"]
        if not eb or not et or max(eb, et) < overhead_min_events:
            return ""
        r = et / eb
        if r >= overhead_factor:
            return (f"{r:.1f}x more traced events in the treatment ({eb:,} -> {et:,}): per-event profiling "
                    f"overhead may inflate the treatment's time; {THROUGHPUT_RULE}")
        if 1 / r >= overhead_factor:
            return (f"{1 / r:.1f}x fewer traced events in the treatment ({eb:,} -> {et:,}): per-event profiling "
                    f"overhead may inflate the base's time; {THROUGHPUT_RULE}")
        return ""

    joined = joined.with_columns(
        pl.struct("events_base", "events_treatment").map_elements(_note, return_dtype=pl.Utf8).alias("overhead_note"),
        pl.col("kernel_changes").fill_null(""), pl.col("source_changed").fill_null(""),
    )
    kinds = set(base.device_kinds) | set(treatment.device_kinds)
    p = noise.PRIOR if noise_prior is None else noise_prior
    unknown = None
    if (base.recordings, treatment.recordings) == (1, 1) and not p.applies_to(kinds):
        unknown = noise.unknown_band(kinds)  # the prior was measured on other devices
    joined, run_noise = _with_noise(joined, base.samples, treatment.samples, noise_level,
                                    (base.recordings, treatment.recordings), noise_prior, unknown)
    joined = joined.with_columns(pl.col("delta_self_ps").abs().alias("_abs")).sort(
        ["_abs", "status", "stem", "shape"], descending=[True, False, False, False]).drop("_abs")
    joined = joined.select(DIFF_COLUMNS)

    families = _family_diff(base.families, treatment.families)
    modules = _module_diff(base.module_sums, treatment.module_sums, vmap)
    step = None
    if base.steps is not None and treatment.steps is not None:
        (mb, nb, sb, hb, wb, win), (mt, nt, st, ht, wt, _) = base.steps, treatment.steps
        step = StepDelta(module_base=mb, module_treatment=mt, steps_base=nb, steps_treatment=nt, step_ps_base=sb,
                         step_ps_treatment=st, method_base=hb, method_treatment=ht, window_steps_base=wb,
                         window_steps_treatment=wt, window=win)
        if base.samples is not None and treatment.samples is not None:
            step.change = noise.shift(base.samples.steps, treatment.samples.steps, level=noise_level,
                                      prior=noise_prior, step=True, band=unknown)

    notes: list[str] = [f"{who}: {n}" for who, sd in (("base", base), ("treatment", treatment))
                        for n in getattr(sd, "notes", None) or []]
    fb, ft = _recording_files(base), _recording_files(treatment)
    both = set(fb) & set(ft)
    if both and set(fb) != set(ft):
        notes.append(f"{', '.join(sorted(fb[f] for f in both))} {'is' if len(both) == 1 else 'are'} on both sides: "
                     "a recording pooled into both compares with itself, which pulls the two sides together")
    hw = (hardware_text(base.hardware), hardware_text(treatment.hardware))
    if not same_hardware(base.hardware, treatment.hardware):
        notes.append(f"the sides ran on different hardware: {hw[0]} (base) vs {hw[1]} (treatment): the comparison "
                     "crosses hardware, its deltas are the hardware's as much as any treatment's")
    db, dt = step_definition(base.steps), step_definition(treatment.steps)
    if db is not None and dt is not None and db[0] != dt[0]:
        notes.append(f"the sides' steps were found differently: {step_definition_text(base.steps)} (base) vs "
                     f"{step_definition_text(treatment.steps)} (treatment): each side's steps are those analyze "
                     "finds in it; the step time and the per-step changes compare different step definitions")
    over = joined.filter(pl.col("overhead_note") != "")
    for r in over.head(5).iter_rows(named=True):
        what = r["stem"] if r["kind"] == "kernel" else f"{r['stem'] or r['kind']} {r['shape']}"
        notes.append(f"{what}: {r['overhead_note']}")
    if over.height > 5:
        notes.append(f"... and {over.height - 5} more populations with a {overhead_factor:g}x change in traced events")
    eb, et = base.events, treatment.events
    common = common_shift(joined)
    if common is not None:
        notes.append(common)
    if eb and et and max(eb / et, et / eb) >= overhead_factor:
        notes.append(f"traced op events {eb:,} -> {et:,} ({max(eb / et, et / eb):.1f}x): the profiled timings of the "
                     f"two runs carry different tracing overhead; {THROUGHPUT_RULE}")
    if step is not None and step.module_base and step.module_treatment and step.module_base != step.module_treatment \
            and _subst(step.module_treatment, vmap) != step.module_base:
        notes.append(f"steps are executions of {step.module_base} (base) and {step.module_treatment} (treatment): "
                     f"different step programs ({step.module_base} does not run in the treatment, whose steps are "
                     f"those analyze finds in it); the step time and the per-step changes compare different step "
                     f"definitions")
    coll = None
    if getattr(base, "communication", None) is not None and getattr(treatment, "communication", None) is not None:
        from traceview.analysis.communication.collectives import collective_diff

        coll, coll_notes = collective_diff(base.communication, treatment.communication)
        notes.extend(coll_notes)
    rep = DiffReport(base_label=b_label, treatment_label=t_label, populations=joined, kernels=kernels,
                     families=families, modules=modules, steps=step, op_time_ps_base=base.self_ps,
                     op_time_ps_treatment=treatment.self_ps,
                     events_base=eb, events_treatment=et, overhead_factor=overhead_factor, notes=notes,
                     collectives=coll, noise_level=noise_level, run_noise=run_noise, hardware=hw)
    from traceview.analysis.findings import find

    rep.findings = find(diff=rep, thresholds={"overhead_factor": overhead_factor})
    return rep


def common_shift(joined: pl.DataFrame) -> str | None:
    """A note when at least :data:`COMMON_SHIFT_SHARE` of the matched populations with an
    interval (at least :data:`COMMON_SHIFT_MIN`) have the whole interval on one side of 1x:
    every op moved together, which a shift common to both sides (machine load, clocks, another
    machine) does and a treatment of a few ops does not. None otherwise, or without intervals."""
    if "ratio_lo" not in joined.columns:
        return None
    m = joined.filter(pl.col("ratio_lo").is_not_null() & pl.col("ratio_hi").is_not_null())
    if m.height < COMMON_SHIFT_MIN:
        return None
    up, down = int((m["ratio_lo"] > 1).sum()), int((m["ratio_hi"] < 1).sum())
    k = max(up, down)
    if k < COMMON_SHIFT_SHARE * m.height:
        return None
    side = m.filter(pl.col("ratio_lo") > 1) if up >= down else m.filter(pl.col("ratio_hi") < 1)
    med = float(side["median_ratio"].median())
    return (f"{k} of {m.height} matched populations moved the same way (median {fmt_ratio(med)}x per step): a treatment "
            f"of some ops does not move every op, a shift common to both recordings does (machine load, clocks, "
            f"power state, another machine); record both sides under the same conditions, interleaved")


_NOISE_SCHEMA = {"samples": pl.Utf8, "n_samples_base": pl.Int64, "n_samples_treatment": pl.Int64,
                 "median_ratio": pl.Float64, "ratio_lo": pl.Float64, "ratio_hi": pl.Float64,
                 "significant": pl.Boolean, "noise": pl.Utf8, "noise_band": pl.Float64, "more_samples": pl.Int64}


@dataclass
class NoiseSummary:
    """Which run-to-run noise a diff's changes were judged against (:func:`_with_noise`):
    ``source`` ("prior", "recordings", or "unknown": one recording a side on devices no prior was measured on), ``text`` (in words, as the diff prints it),
    ``recordings`` (base, treatment), ``prior`` (:data:`~traceview.analysis.compare.noise.PRIOR`
    when used), ``too_few`` (matched populations without an interval for lack of samples),
    ``more_samples`` (the most samples a side any of them lacks)."""

    source: str
    text: str
    recordings: tuple[int, int]
    prior: "noise.Prior | None" = None
    too_few: int = 0
    more_samples: int = 0

    def to_dict(self) -> dict:
        return {"source": self.source, "text": self.text, "recordings": list(self.recordings),
                "prior": None if self.prior is None else self.prior.to_dict(), "too_few": self.too_few,
                "more_samples": self.more_samples}


#: samples (steps or occurrences with time) a population needs on the one side it ran on for its
#: appearing or vanishing to be called significant
MIN_PRESENT = 2


def _with_noise(joined: pl.DataFrame, sb: "Samples | None", st: "Samples | None",
                level: float, rec: tuple[int, int] = (1, 1),
                prior: "noise.Prior | None" = None,
                band: "noise.NoiseBand | None" = None) -> tuple[pl.DataFrame, "NoiseSummary | None"]:
    """(``joined`` with the noise columns (:data:`DIFF_COLUMNS`) for its matched rows, less
    ``_fp_treatment``; the :class:`NoiseSummary`, None without samples): :func:`noise.shift`
    of each matched population's samples on the two sides when they are of the same kind
    (per step, or per occurrence), else no interval. ``rec``: recordings per side; ``prior``:
    the one-recording noise (default :data:`noise.PRIOR`); ``band``: the band to use instead
    (:func:`noise.unknown_band`: ``noise`` "no change" for an interval holding 1, else
    "unknown")."""
    rows, changes, pairs, gone = [], [], [], {}
    for r in joined.select(KEY + ["status", "shape_treatment", "_fp_treatment"]).iter_rows(named=True):
        a = b = None
        if r["status"] in ("vanished", "appeared") and sb is not None and st is not None:
            # a population on one side only: its samples there (steps or occurrences it ran in)
            got = (sb if r["status"] == "vanished" else st).get(tuple(r[k] for k in KEY))
            gone[len(pairs)] = (r["status"], got[1] if got is not None else None)
        if r["status"] == "matched" and sb is not None and st is not None:
            a = sb.get(tuple(r[k] for k in KEY))
            b = st.get(tuple(r["shape_treatment"] if k == "shape" else r["_fp_treatment"] if k == "fingerprint"
                             else r[k] for k in KEY))
        pairs.append((r["status"] == "matched" and sb is not None and st is not None, a, b))
    shifts = {i: noise.shift(a[1], b[1], level=level, prior=prior, band=band)
              for i, (m, a, b) in enumerate(pairs) if m and a is not None and b is not None and a[0] == b[0]}
    for i, (matched, a, b) in enumerate(pairs):
        row = dict.fromkeys(_NOISE_SCHEMA)
        c = None
        if matched:
            if i in shifts:
                c = shifts[i]
                row.update(samples=a[0], n_samples_base=c.n_base, n_samples_treatment=c.n_treatment,
                           median_ratio=c.ratio, ratio_lo=c.lo, ratio_hi=c.hi, significant=c.significant,
                           noise_band=math.exp(c.band.bound) if c.band.known else None,
                           more_samples=c.more_samples)
            else:
                row.update(significant=False, samples=None if a is None or b is None else f"{a[0]} / {b[0]}")
        elif i in gone:
            status, xs = gone[i]
            # pooled: a list of the recordings' arrays (of different lengths), each counted
            n = 0 if xs is None else sum(int(np.count_nonzero(np.asarray(x) > 0))
                                         for x in (xs if isinstance(xs, list) else [xs]))
            # ran with time in at least MIN_PRESENT samples of one side and never on the other: not
            # run-to-run noise (an op does not skip every step of a recording by chance)
            if n >= MIN_PRESENT:
                row.update(significant=True, noise=f"significant ({status})")
                rows.append(row)
                changes.append(None)
                continue
        row["noise"] = "no interval" if c is None else c.verdict
        rows.append(row)
        changes.append(c)
    extra = pl.DataFrame(rows, schema=_NOISE_SCHEMA)
    summary = None
    if sb is not None and st is not None:
        judged = [c for c in changes if c is not None and c.band is not None]
        sources = {c.band.source for c in judged}
        few = [c.more_samples for c in judged if c.more_samples]
        if band is not None and not band.known:
            summary = NoiseSummary("unknown", band.text, rec)
        elif rec == (1, 1) or sources == {"prior"}:
            p = noise.PRIOR if prior is None else prior
            text = noise.prior_band(level, p).text
            summary = NoiseSummary("prior", text, rec, prior=p)
        else:
            summary = NoiseSummary("recordings", f"measured from {sum(rec)} recordings ({rec[0]} + {rec[1]})", rec)
        summary.too_few, summary.more_samples = len(few), max(few, default=0)
    return pl.concat([joined.drop("_fp_treatment"), extra], how="horizontal"), summary


def _kernel_diff(kb: pl.DataFrame, kt: pl.DataFrame) -> pl.DataFrame:
    """Kernels of both sides by identity: names, configs, changes text, invocations, events
    and self time per side."""
    schema = {"kernel_id": pl.Utf8, "names_base": pl.List(pl.Utf8), "names_treatment": pl.List(pl.Utf8),
              "config_base": pl.Utf8, "config_treatment": pl.Utf8, "changes": pl.Utf8,
              "invocations_base": pl.Int64, "invocations_treatment": pl.Int64,
              "events_base": pl.Int64, "events_treatment": pl.Int64,
              "self_ps_base": pl.Int64, "self_ps_treatment": pl.Int64}
    ids = sorted(set(kb["kernel_id"].to_list()) | set(kt["kernel_id"].to_list()))
    rows = []
    for kid in ids:
        b = kb.filter(pl.col("kernel_id") == kid)
        t = kt.filter(pl.col("kernel_id") == kid)
        nb, nt = sorted(b["kernel"].to_list()), sorted(t["kernel"].to_list())
        texts = []
        if nb and nt and nb != nt:
            for x in nb:
                for y in nt:
                    if x != y:
                        s = _changes_text(config_changes(x, y))
                        if s and s not in texts:
                            texts.append(s)
        rows.append({"kernel_id": kid, "names_base": nb, "names_treatment": nt,
                     "config_base": "; ".join(b["config"].to_list()), "config_treatment": "; ".join(t["config"].to_list()),
                     "changes": "; ".join(texts),
                     "invocations_base": int(b["invocations"].sum()) if b.height else None,
                     "invocations_treatment": int(t["invocations"].sum()) if t.height else None,
                     "events_base": int(b["events"].sum()) if b.height else None,
                     "events_treatment": int(t["events"].sum()) if t.height else None,
                     "self_ps_base": int(b["self_ps"].sum()) if b.height else None,
                     "self_ps_treatment": int(t["self_ps"].sum()) if t.height else None})
    return pl.DataFrame(rows, schema=schema)


def _family_diff(b: pl.DataFrame, t: pl.DataFrame) -> pl.DataFrame:
    """Families of both sides (:func:`traceview.analysis.compare.populations.family_shares`): self
    time and share per side and the delta."""
    out = b.join(t, on="family", how="full", coalesce=True, suffix="_treatment").rename(
        {"self_ps": "self_ps_base", "share": "share_base"})
    out = out.with_columns(pl.col("self_ps_base").fill_null(0), pl.col("self_ps_treatment").fill_null(0),
                           pl.col("share_base").fill_null(0.0), pl.col("share_treatment").fill_null(0.0))
    return out.with_columns((pl.col("self_ps_treatment") - pl.col("self_ps_base")).alias("delta_self_ps")).sort(
        ["self_ps_base", "family"], descending=[True, False])


def module_sums(runs) -> pl.DataFrame | None:
    """Per module name of the module runs (a frame or
    :class:`~traceview.model.runtable.RunTable`), in order of first run: ``executions``
    (rows), ``n_timed`` (rows with a duration) and ``total_ps`` (the sum of those durations,
    ps); None without runs. What a side keeps of its module runs (a million rows on a long
    GPU trace). Summed per program first, then per module."""
    if runs is None or runs.height == 0:
        return None
    rt = as_runs(runs)
    per = rt.runs.with_row_index("_i").group_by("key").agg(
        pl.len().cast(pl.Int64).alias("executions"), pl.col("duration_ps").count().cast(pl.Int64).alias("n_timed"),
        pl.col("duration_ps").sum().cast(pl.Int64).alias("total_ps"), pl.col("_i").min().alias("_first"))
    return (per.join(rt.keys.select("key", "module"), on="key", how="left")
            .group_by("module").agg(pl.col("executions").sum(), pl.col("n_timed").sum(), pl.col("total_ps").sum(),
                                    pl.col("_first").min())
            .sort("_first").select("module", "executions", "n_timed", "total_ps"))


def _module_diff(b_runs: pl.DataFrame | None, t_runs: pl.DataFrame | None, vmap) -> pl.DataFrame:
    """Executions and mean time per module on both sides (:func:`module_sums` of each). A
    treatment module meets the base module of its own name, else the one its name becomes
    through ``vmap`` (a changed kernel configuration), else none. ``module_treatment``: of the
    treatment modules met in a row, the one of most time, ties by name; null where none met it
    (a module only the base ran)."""
    empty = pl.DataFrame(schema={"module": pl.Utf8, "executions": pl.Int64, "mean_ps": pl.Float64})

    def mods(r):
        n, total = pl.col("n_timed").sum(), pl.col("total_ps").sum()
        return r.group_by("module").agg(pl.col("executions").sum().alias("executions"),
                                        pl.when(n > 0).then(total / n).otherwise(None).alias("mean_ps"))

    have_b = b_runs is not None and b_runs.height > 0
    have_t = t_runs is not None and t_runs.height > 0
    b = mods(b_runs.select("module", "executions", "n_timed", "total_ps")) if have_b else empty
    t, names_t = empty, {}
    if have_t:
        in_base = set(b["module"].drop_nulls().to_list())

        def met(m):  # the base name a treatment module meets
            if not m or m in in_base:
                return m
            renamed = _subst(m, vmap)
            return renamed if renamed in in_base else m

        names = sorted(set(t_runs["module"].drop_nulls().to_list()))
        t_runs = t_runs.with_columns(pl.col("module").replace_strict({m: met(m) for m in names}, default=None,
                                                                     return_dtype=pl.Utf8).alias("_met"))
        t = mods(t_runs.drop("module").rename({"_met": "module"}).select("module", "executions", "n_timed",
                                                                          "total_ps"))
        own = (t_runs.filter(pl.col("module").is_not_null()).group_by("_met", "module").agg(pl.col("total_ps").sum())
               .sort(["total_ps", "module"], descending=[True, False]).unique("_met", keep="first",
                                                                             maintain_order=True))
        names_t = dict(zip(own["_met"].to_list(), own["module"].to_list()))
    out = b.join(t, on="module", how="full", coalesce=True, suffix="_treatment", nulls_equal=True).rename(
        {"executions": "executions_base", "mean_ps": "mean_ps_base"})
    out = out.with_columns(pl.col("module").replace_strict(names_t, default=None, return_dtype=pl.Utf8)
                           .alias("module_treatment"))  # (null: no treatment module met the row)
    return out.select("module", "module_treatment", "executions_base", "executions_treatment", "mean_ps_base",
                      "mean_ps_treatment").sort(["mean_ps_base", "module"], descending=[True, False], nulls_last=True)
