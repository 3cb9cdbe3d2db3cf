"""The results one command shows, gathered once: :class:`Report` (analyze, report, the
notebook summary); a diff's is :class:`~traceview.analysis.compare.diff.DiffReport`.

A renderer (:mod:`traceview.render`) formats a report and never computes: every table,
group and figure it shows is a field here. :func:`build_report` computes every section in a
fixed order, so a bad option fails the same way whatever the output format; the HTML-only
sections (the step chart's per-step family times, HLO texts, population counts per name) are
computed when ``html`` is set. Times in ps, rates in FLOP/s and bytes/s.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import polars as pl

from traceview.analysis import derived
from traceview.analysis.ops import aggregate, sources as _sources
from traceview.analysis.ops.kernels import kernels as _kernels
from traceview.analysis.hardware.peaks import Peaks, profile_peaks
from traceview.analysis.ops.roofline import layer_copies, predicted_vs_measured, roofline
from traceview.analysis.steps.anatomy import StepAnatomy
from traceview.analysis.steps.family_roofline import family_roofline as _family_roofline, summary as _family_summary
from traceview.analysis.ops.kinds import by_kind as _by_kind
from traceview.analysis.ops.hlo_detect import detect as _hlo_detect
from traceview.analysis.ops.kernel_inside import kernel_inside as _kernel_inside
from traceview.analysis.memory.allocators import profile_memory
from traceview.analysis.steps.phases import phases as _phases

#: the keys of the op table (``by``): analyze --by's choices
OP_TABLE_KEYS = ("shape", "name", "program", "program-shape", "kind")
#: at most this many steps go into the step chart (the first ones, in time order)
CHART_STEPS = 48
#: at most this many x bins in the step strip chart (each keeps its shortest and longest step)
STRIP_BINS = 1500


@dataclass
class StepStrip:
    """The points of the step strip chart: ``steps`` (0-based step index per device),
    ``durations`` (ps), ``outliers`` (bool) and ``median_ps``. The steps, outliers and others
    apart, are each kept whole up to 2 x :data:`STRIP_BINS`, else per bin of step indices the
    shortest and longest (so the envelope of each series is exact and a chart of a million
    steps draws at most 4 x :data:`STRIP_BINS` points). ``n_steps``: steps in the
    anatomy; ``shown``: points kept."""

    steps: list
    durations: list
    outliers: list
    median_ps: float | None
    n_steps: int
    shown: int


def step_strip(an: StepAnatomy, bins: int = STRIP_BINS) -> StepStrip | None:
    """The :class:`StepStrip` of a step anatomy (None when its steps carry no outlier flags)."""
    st = an.steps
    if st.height == 0 or "outlier" not in st.columns:
        return None
    median = (an.distribution or {}).get("median_ps")
    pts = st.select("step", "duration_ps", "outlier").filter(pl.col("duration_ps").is_not_null())

    def envelope(part: pl.DataFrame) -> pl.DataFrame:
        # per bin of step indices, its first and last row by (duration, step): one sort of the
        # arrays, no frame per step (a bin's step range makes (step, duration) name its rows)
        if part.height <= 2 * bins:
            return part
        s, d = part["step"].to_numpy(), part["duration_ps"].to_numpy()
        lo = int(s.min())
        width = max(1, -(-(int(s.max()) - lo + 1) // bins))
        b = (s - lo) // width
        o = np.lexsort((s, d, b))
        ob = b[o]
        first = np.flatnonzero(np.r_[True, ob[1:] != ob[:-1]])
        ends = np.r_[first[1:], len(o)] - 1
        return part[o[np.union1d(first, ends)]].unique(["step", "duration_ps"])

    if pts.height > 2 * bins:
        pts = pl.concat([envelope(pts.filter(~pl.col("outlier"))),
                         envelope(pts.filter(pl.col("outlier")))]).sort("step", "duration_ps")
    return StepStrip(pts["step"].to_list(), pts["duration_ps"].to_list(), pts["outlier"].to_list(), median,
                     st.height, pts.height)


@dataclass
class StepChart:
    """Per-step family times for a stacked-bar chart of the first ``shown`` of ``n_steps``
    steps (ps, averaged over the devices that ran each step): ``series`` is (family, times
    per step) in the anatomy's family order then any other family, families with no time
    left out; ``idle`` the mean idle time per step."""

    n_steps: int
    shown: int
    series: list = field(default_factory=list)
    idle: list = field(default_factory=list)


@dataclass
class Report:
    """What ``traceview analyze`` / ``report`` show about one profile.

    What was read: ``discovery`` (:class:`traceview.read.discover.Discovery` or None),
    ``files`` (per file: path, host, format, events, op_events), ``warnings``, ``has_shapes``.
    Devices: ``devices`` (:meth:`ProfileData.device_summary`), ``device_groups`` (per (kind,
    device_type): n, device (names), op_time_ps, ops, peak_flops, peak_bw), ``op_events``,
    ``op_time_ps``. Ops: ``by`` ("shape", "name", "program" or "program-shape") and
    ``table`` keyed by it,
    ``by_shape``, ``split`` (op names with several shape populations, by their total self
    time: n, and per population shape, occurrences, mean_ps, self_ps, share, modules; t the
    sum), ``checks`` (occurrence checks or None) and ``checks_summary``
    (:func:`~traceview.analysis.ops.aggregate.check_summary`). ``peaks`` (:class:`~traceview.analysis.hardware.peaks.Peaks`),
    ``roofline`` and ``roofline_summary`` (:func:`~traceview.analysis.ops.roofline.predicted_vs_measured`),
    ``kernels``, ``sources`` (by file on ``source_frame``), ``steps``
    (:class:`~traceview.analysis.steps.anatomy.StepAnatomy`). HTML only (else None):
    ``html_sources`` (by file, direct frame) and ``source_kinds`` (origin, share),
    ``populations_per_name`` ({op_name: populations}), ``step_chart`` (:class:`StepChart`),
    ``op_groups`` and ``overview`` (see the fields). ``communication``
    (:class:`~traceview.analysis.communication.collectives.Communication`: collectives and host transfers).
    Populations: ``program_splits`` and ``population_regimes`` (see the fields). ``overlap``
    (:class:`~traceview.analysis.communication.overlap.Overlap`, None when the trace has no collective or
    async copy) and ``stragglers`` (:class:`~traceview.analysis.communication.stragglers.Stragglers`, None
    unless collectives were matched across several devices). ``family_roofline``
    (:func:`~traceview.analysis.steps.family_roofline.family_roofline`: per family and step, time,
    share, FLOPs, bytes, intensity, bound by, predicted against measured) and
    ``family_roofline_summary`` (its :func:`~traceview.analysis.steps.family_roofline.summary`).
    """

    discovery: object
    files: list
    warnings: list
    has_shapes: bool
    devices: pl.DataFrame
    device_groups: pl.DataFrame
    op_events: int
    op_time_ps: int
    by: str
    table: pl.DataFrame
    by_shape: pl.DataFrame
    split: pl.DataFrame
    checks: pl.DataFrame | None
    checks_summary: dict | None
    peaks: Peaks
    roofline: pl.DataFrame
    roofline_summary: dict
    kernels: pl.DataFrame
    sources: pl.DataFrame
    source_frame: str
    steps: StepAnatomy
    html_sources: pl.DataFrame | None = None
    source_kinds: pl.DataFrame | None = None
    populations_per_name: dict | None = None
    step_chart: StepChart | None = None
    step_strip: StepStrip | None = None  # HTML only: the strip chart's points (bounded)
    communication: object = None  # traceview.analysis.communication.collectives.Communication
    #: :func:`~traceview.analysis.ops.aggregate.program_splits` of ``by_shape`` (keys split by module)
    program_splits: dict | None = None
    #: populations whose spread mixes regimes: :func:`~traceview.analysis.ops.distributions.regimes`
    #: rows (op_name, shape, module, regimes, executions, first/later execution and mode figures)
    population_regimes: pl.DataFrame | None = None
    findings: list | None = None  # list of traceview.analysis.findings.Finding; None when --no-findings
    #: {finding id: reason} of the rules that could not run (:func:`traceview.analysis.findings.evaluate`)
    findings_not_evaluated: dict | None = None
    overlap: object = None
    stragglers: object = None
    family_roofline: pl.DataFrame | None = None
    family_roofline_summary: dict | None = None
    #: the roofline with the per-layer copies of one op as one row
    #: (:func:`~traceview.analysis.ops.roofline.layer_copies`), as the terminal shows it
    roofline_layers: pl.DataFrame | None = None
    #: why fewer op events are shown than the files hold (:func:`events_note`), None when as many
    events_note: str | None = None
    #: why there is no op though the trace had some (an op or device filter kept none: the
    #: profile's ``ops_note``), said by the rules that cannot run for want of ops; else None
    ops_note: str | None = None
    #: device memory from the allocators' events (:class:`~traceview.analysis.memory.allocators.MemoryReport`)
    memory: object = None
    #: inside the Pallas kernels: stages, counters, bundles (:class:`~traceview.analysis.ops.kernel_inside.KernelInside`)
    kernel_inside: object = None
    #: what the HLO says: detectors, the instruction table, FLOP provenance (:class:`~traceview.analysis.ops.hlo_detect.HloReport`)
    hlo: object = None
    #: prefill/decode/mixed steps and utilisation (:class:`~traceview.analysis.steps.phases.Phases`)
    phases: object = None
    #: the phase the profile was kept to (``--phase``: :func:`~traceview.analysis.steps.phases.phase_profile`), or None
    phase: str | None = None
    #: the command that exports the median step and its neighbours to a timeline
    #: (:func:`~traceview.analysis.export.attach_export_commands`), None without steps
    export_command: str | None = None
    #: HTML only: the top-ops table's rows, the per-layer copies of one op grouped
    #: (:func:`~traceview.analysis.ops.kinds.layer_groups`)
    op_groups: pl.DataFrame | None = None
    #: HTML only: what the report opens with (:func:`~traceview.analysis.overview.overview`)
    overview: dict | None = None


def events_note(files: list, op_events: int, device_groups: pl.DataFrame, kernels: pl.DataFrame) -> str | None:
    """When the op table holds fewer events than the files read (``files``' op_events summed),
    one line saying why: interpreted Pallas kernel invocations folded to one row each (a
    CPU-only profile with named kernels), else events left out by ``--filter`` / ``--device``.
    None when the counts agree."""
    read = sum(int(f.get("op_events") or 0) for f in files if isinstance(f, dict))
    if not read or not op_events or read == op_events:
        return None
    cpu = device_groups.height and set(device_groups["device_type"].to_list()) == {"CPU"}
    why = ("each interpreted Pallas kernel invocation is one row, as on an accelerator (--expand-kernels "
           "shows the ops inside)" if cpu and kernels.height and read > op_events
           else "the others are left out by --filter / --device")
    return f"{op_events:,} op events below, of the {read:,} read: {why}"


def file_rows(prof) -> list[dict]:
    """Per trace file read: path, host, format, events (all events), op_events."""
    return [{"path": str(t.path), "host": t.host, "format": t.format, "events": t.n_events,
             "op_events": t.table.height} for t in prof.traces]


def device_groups(devices: pl.DataFrame) -> pl.DataFrame:
    """Devices grouped by (kind, device_type) in order of appearance: n, device (names),
    op_time_ps, ops (sums), peak_flops, peak_bw (the first device's)."""
    return devices.group_by(["kind", "device_type"], maintain_order=True).agg(
        pl.len().alias("n"), pl.col("device"), pl.col("op_time_ps").sum(), pl.col("ops").sum(),
        pl.col("peak_flops").first(), pl.col("peak_bw").first())


def split_names(by_shape: pl.DataFrame) -> pl.DataFrame:
    """The op names of a :func:`~traceview.analysis.ops.aggregate.by_shape` table that have
    several shape populations: op_name, n, and per population (lists, in the table's order)
    shape, occurrences, mean_ps, self_ps, share, modules; t (their total self time, ps).
    Sorted by t, descending, then op_name."""
    return (by_shape.group_by("op_name").agg(
        pl.len().alias("n"), pl.col("shape"), pl.col("occurrences"), pl.col("mean_ps"), pl.col("self_ps"),
        pl.col("share"), pl.col("modules"), pl.col("self_ps").sum().alias("t"))
        .filter(pl.col("n") > 1).sort(["t", "op_name"], descending=[True, False]))  # (a tie by name: a group_by's
    # order varies from run to run)


def step_chart(anat: StepAnatomy, max_steps: int = CHART_STEPS) -> StepChart:
    """The :class:`StepChart` of an anatomy (its first ``max_steps`` steps)."""
    st = anat.steps
    if st.height == 0:
        return StepChart(0, 0)
    order = anat.families["family"].to_list() if anat.families.height else []
    n_steps = int(st["step"].n_unique())
    shown = min(n_steps, max_steps)
    series: list = []
    # the rows of the steps shown, before any grouping (a trace may hold 100,000s of steps)
    step_of = (st.with_row_index("step_row").filter(pl.col("step") < shown)
               .select(pl.col("step_row").cast(pl.Int64), "step", "idle_ps"))
    by_step = anat.family_time_by_step(step_of["step_row"].to_numpy())
    if by_step.height:
        ndev = step_of.group_by("step").agg(pl.len().alias("ndev"))
        per = (by_step.join(step_of.select("step_row", "step"), on="step_row")
               .group_by("step", "family").agg(pl.col("self_ps").sum())
               .join(ndev, on="step").with_columns(pl.col("self_ps") / pl.col("ndev")))
        acc = {f: [0.0] * shown for f in order}
        for s, f, t, _ in per.iter_rows():
            acc.setdefault(f, [0.0] * shown)[s] += float(t or 0)
        # the families the anatomy's table leaves out after its own, longest first (by name on a
        # tie): the group_by's row order varies from run to run, and with it the stacking
        extra = sorted(((f, v) for f, v in acc.items() if f not in order and sum(v) > 0),
                       key=lambda fv: (-sum(fv[1]), fv[0]))
        series = [(f, acc[f]) for f in order if sum(acc[f]) > 0] + extra
    idle = step_of.group_by("step").agg(pl.col("idle_ps").mean()).sort("step")
    idle_vals = [0.0] * shown
    for s, v in idle.iter_rows():
        idle_vals[s] = max(0.0, float(v or 0))
    return StepChart(n_steps, shown, series, idle_vals)


def source_kinds(files: pl.DataFrame) -> pl.DataFrame:
    """Share of op self time per origin (project, site-packages, unknown) of a
    :func:`~traceview.analysis.ops.sources.by_file` table: kind, share; by share, descending."""
    return (files.select(pl.col("origin").fill_null("").replace("", "unknown").alias("kind"), pl.col("share"))
            .group_by("kind").agg(pl.col("share").sum()).sort("share", descending=True))


def op_table_key(by: str) -> str:
    """``by`` when it is one of :data:`OP_TABLE_KEYS`; raises UsageError naming them otherwise."""
    from traceview.errors import UsageError

    if by not in OP_TABLE_KEYS:
        raise UsageError(f"unknown op table key {by!r}: expected {', '.join(OP_TABLE_KEYS[:-1])} or {OP_TABLE_KEYS[-1]}")
    return by


def build_report(prof, *, by: str = "shape", peaks: Peaks | None = None, steps: int | None = None,
                 expect_batch: int | None = None, rules=None, step_module: str | None = None,
                 step_extent: str = "span", source_frame: str = "direct", html: bool = False,
                 step_window: str = "steady", findings: bool = True, finding_thresholds=None,
                 tokens_per_step: int | None = None, on_section=None, release=None,
                 window_option: str = "step_window", beside: bool = False, on_roofline=None) -> Report:
    """Every section of :class:`Report` for ``prof`` (a
    :class:`~traceview.model.profiledata.ProfileData`).

    ``by``: the op table's key ("shape", "name", "program", "kind": :func:`~traceview.analysis.ops.kinds.by_kind`); ``peaks``: default
    :func:`~traceview.analysis.hardware.peaks.profile_peaks`; ``steps`` / ``expect_batch``: the
    occurrence checks (none when both are None); ``rules`` (family rules), ``step_module``,
    ``step_extent``, ``step_window``: the step anatomy; ``tokens_per_step``: for the phases'
    tokens/s (:func:`~traceview.analysis.steps.phases.phases`); ``source_frame``: "direct" or "user"; ``html``: also
    the HTML-only sections; ``findings`` / ``finding_thresholds``: the findings section
    (:func:`traceview.analysis.findings.find`; thresholds as
    :func:`~traceview.analysis.findings.thresholds_of`). Raises :class:`~traceview.errors.UsageError` on a bad option
    (rule, module, extent, window, frame, steps), before any other work for ``by``.
    ``on_section``: called with the report as it fills, once the roofline and the step
    anatomy are in (with ``html``, the step chart and strip too) and once the memory is: a
    caller can start on what those sections feed (the report's charts) meanwhile.
    ``on_roofline``: called with the roofline's rows as the report shows them (the layer
    copies folded, else per (name, shape): :attr:`Report.roofline_layers`) and the peaks as
    soon as they are computed, before the step anatomy (the roofline chart).
    ``release``: called with no argument after each section that frees large temporaries
    (the populations, the step anatomy, communication, overlap and stragglers, the phases,
    the findings, the HTML sections), so a caller can hand the freed memory back before the
    next one (the command line: :func:`traceview.cli.process.heap_releaser`).
    ``beside``: the populations and the communication section are computed on a thread of
    their own while this one computes the roofline and the step anatomy, and the memory and
    phases sections while it computes the stragglers (C passes and polars' work leave the GIL
    free); their errors are raised where each section is filled, as without.
    """
    op_table_key(by)
    from traceview.analysis.findings import evaluate, thresholds_of

    th = thresholds_of(finding_thresholds) if findings else None
    release = release if release is not None else (lambda: None)
    comm = None
    if beside:  # the populations, then the communication, beside the roofline and the step anatomy
        peaks = peaks if peaks is not None else profile_peaks(prof)
        shape_of, comm = _beside(lambda: aggregate.by_shape_and_regimes(prof.table, prof.runs),
                                 lambda: derived.communication(prof, peaks))
    else:
        by_shape, examined = aggregate.by_shape_and_regimes(prof.table, prof.runs)
        release()
    table = None if beside and by == "shape" else {
        "shape": lambda: by_shape, "name": lambda: aggregate.by_name(prof.table),
        "program": lambda: aggregate.by_program_op(prof.table),
        "program-shape": lambda: aggregate.by_program_shape(prof.table, prof.runs),
        "kind": lambda: _by_kind(prof, rules=rules, tagged=derived.tagged(prof, rules))}[by]()
    peaks = peaks if peaks is not None else profile_peaks(prof)
    roof = roofline(prof.table, peaks)
    roof_layers = layer_copies(roof, peaks)
    if on_roofline is not None:
        on_roofline(roof if roof_layers is None else roof_layers, peaks)
    checks = None
    if steps is not None or expect_batch is not None:  # 0 is refused by the checks, not ignored
        checks = aggregate.occurrence_checks(prof.table, prof.runs, steps=steps, expect_batch=expect_batch)
    from traceview.analysis.steps.stepstats import parse_window, window_holds_steps

    parse_window(step_window)  # a bad window fails before any other work
    anat = derived.step_anatomy(prof, rules, module=step_module, extent=step_extent, window=step_window)
    release()
    window_holds_steps(None if anat is None else anat.steps, step_window, window_option, prof=prof)
    if beside:
        by_shape, examined = shape_of()
        table = by_shape if by == "shape" else table
    kern = _kernels(prof.table)
    files = _sources.by_file(prof.table, frame=source_frame)
    devices = prof.device_summary()
    rep = Report(discovery=prof.discovery, files=file_rows(prof), warnings=list(prof.warnings),
                 has_shapes=prof.has_shapes, devices=devices, device_groups=device_groups(devices),
                 op_events=prof.op_events, op_time_ps=prof.op_time_ps, by=by, table=table, by_shape=by_shape,
                 split=split_names(by_shape), checks=checks, checks_summary=aggregate.check_summary(checks),
                 peaks=peaks, roofline=roof,
                 roofline_summary=predicted_vs_measured(roof), kernels=kern, sources=files,
                 source_frame=source_frame, steps=anat)
    rep.events_note = events_note(rep.files, rep.op_events, rep.device_groups, kern)
    rep.ops_note = getattr(prof, "ops_note", None)
    rep.roofline_layers = roof_layers
    if html:
        rep.step_chart = step_chart(rep.steps)
        rep.step_strip = step_strip(rep.steps)
    if on_section is not None:
        on_section(rep)
    fleet = getattr(prof.discovery, "fleet", None)
    if fleet and prof.table.height:  # hosts captured in their own run folders: their clocks
        from traceview.analysis.communication.stragglers import host_clock_line

        rep.warnings.append(host_clock_line(prof.table, f"{len(fleet)} run folders read as one capture"))
    if rules is not None and prof.table.height:  # rules that match no op: say so, not a silent "other"
        from traceview.analysis.ops.families import unmatched_rules

        what = unmatched_rules(rules, derived.tagged(prof, rules).rows["family"].unique().to_list())
        if what:
            rep.warnings.append(f"no op matched {what}: the families shown are the built-in ones or the rules' "
                                "catch-all; the rules search op names, HLO text, framework ops and source files")
    rep.communication = comm() if beside else derived.communication(prof, peaks)
    release()
    rep.program_splits = aggregate.program_splits(by_shape)
    rep.population_regimes = population_regimes(by_shape, examined)
    if beside:  # the memory and the phases beside the stragglers, once the overlap (the peak) is done
        derived.overlap(prof, rules, module=step_module, extent=step_extent, window=step_window)
        release()
        mem_of, phases_of = _beside(lambda: profile_memory(prof, anat),
                                    lambda: _phases(prof, anat, peaks, tokens_per_step=tokens_per_step))
    rep.overlap, rep.stragglers = communication_sections(prof, rules, module=step_module, extent=step_extent,
                                                         window=step_window, release=release)
    release()
    rep.family_roofline = _family_roofline(anat, peaks)
    rep.family_roofline_summary = _family_summary(rep.family_roofline)
    rep.memory = mem_of() if beside else profile_memory(prof, anat)
    if on_section is not None:
        on_section(rep)
    rep.kernel_inside = _kernel_inside(prof, kern)
    rep.hlo = _hlo_detect(prof)
    rep.phases = phases_of() if beside else _phases(prof, anat, peaks, tokens_per_step=tokens_per_step)
    release()
    rep.phase = getattr(prof, "phase", None)
    if findings:  # last: the rules read every section above
        ev = evaluate(rep, thresholds=th)
        rep.findings, rep.findings_not_evaluated = ev.findings, ev.not_evaluated
        release()
    from traceview.analysis.export import attach_export_commands

    attach_export_commands(rep)
    if html:
        add_html_sections(rep, prof, rules)
        release()
    return rep


def _beside(*makes) -> list:
    """One getter per callable of ``makes``, returning what it returned (raising what it
    raised); the callables run one after the other on a daemon thread started now, or each
    at its getter's call when no thread can be started."""
    import threading

    outcomes: list = [(False, RuntimeError("the section's thread ended early"))] * len(makes)
    done = [threading.Event() for _ in makes]

    def work() -> None:
        try:
            for i, make in enumerate(makes):
                try:
                    outcomes[i] = (True, make())
                except BaseException as exc:  # noqa: BLE001 - raised by the getter; a BaseException
                    # (a panic of polars' while the command is interrupted, SystemExit) too, which
                    # would otherwise reach threading's hook and print a traceback beside
                    # "traceview: interrupted"
                    outcomes[i] = (False, exc)
                    if not isinstance(exc, Exception):
                        break
                done[i].set()
        finally:  # the thread itself stopped: no getter waits for ever
            for ev in done:
                ev.set()

    try:
        threading.Thread(target=work, name="traceview-section", daemon=True).start()
    except RuntimeError:
        return list(makes)

    def getter(i: int):
        def get():
            done[i].wait()
            ok, value = outcomes[i]
            if not ok:
                raise value
            return value
        return get
    return [getter(i) for i in range(len(makes))]


def population_regimes(by_shape: pl.DataFrame, examined: pl.DataFrame | None) -> pl.DataFrame:
    """The :func:`~traceview.analysis.ops.distributions.regimes` figures of the ``by_shape``
    populations flagged with a regime (keys op_name, shape, module), by self time, read from
    ``examined`` (what :func:`~traceview.analysis.ops.aggregate.by_shape_and_regimes` computed with
    ``by_shape``; None for an empty table)."""
    from traceview.analysis.ops import distributions as dist

    keys = ["op_name", "shape", "module"]
    flagged = by_shape.filter(pl.col("regimes").is_not_null())
    reg = (examined if examined is not None
           else pl.DataFrame(schema={**{k: pl.Utf8 for k in keys}, **dist.REGIME_SCHEMA}))
    return flagged.select(*keys, "occurrences", "self_ps", "p50_ps", "p90_ps", "max_ps", "cv").join(
        reg, on=keys, how="left", nulls_equal=True)


def communication_sections(prof, rules=None, *, module: str | None = None, extent: str = "span",
                           window: str = "steady", release=None) -> tuple:
    """(Overlap or None, Stragglers or None) of ``prof`` within the step windows of its step
    anatomy with these parameters (:mod:`traceview.analysis.derived`: computed once per
    profile): None where the trace has nothing for the section (no collective or async copy;
    fewer than two devices at a matched collective). ``release``: as :func:`build_report`'s,
    called between the two."""
    ov = derived.overlap(prof, rules, module=module, extent=extent, window=window)
    if ov.n_ops == 0:
        return None, None
    if release is not None:
        release()
    st = derived.stragglers(prof, rules, module=module, extent=extent, window=window)
    return ov, (st if st.summary.get("straggler") else None)


def add_html_sections(rep: Report, prof, rules=None) -> Report:
    """Fill the HTML-only fields of ``rep`` (for ``prof``, the profile it was built from;
    ``rules``: the family rules it was built with)."""
    from traceview.analysis.ops.kinds import layer_groups
    from traceview.analysis.overview import overview

    direct = rep.sources if rep.source_frame == "direct" else _sources.by_file(prof.table, frame="direct")
    rep.html_sources = direct
    rep.source_kinds = source_kinds(direct)
    rep.populations_per_name = dict(rep.by_shape.group_by("op_name").agg(pl.len().alias("n")).iter_rows())
    if rep.step_chart is None:
        rep.step_chart = step_chart(rep.steps)
    if rep.step_strip is None:
        rep.step_strip = step_strip(rep.steps)
    rep.op_groups = layer_groups(prof, rules=rules, tagged=derived.tagged(prof, rules))
    rep.overview = overview(rep, getattr(prof, "step_markers", None))
    return rep


@dataclass
class Summary:
    """What the notebook summary of a profile shows (``Profile._repr_html_``): ``files``,
    ``hosts`` (sorted), ``device_groups``, ``op_events``, ``op_time_ps``, ``peaks``,
    ``warnings``, ``by_shape`` and ``populations_per_name`` ({op_name: populations})."""

    files: list
    hosts: list
    device_groups: pl.DataFrame
    op_events: int
    op_time_ps: int
    peaks: Peaks
    warnings: list
    by_shape: pl.DataFrame
    populations_per_name: dict
    findings: list | None = None


def build_summary(prof, *, findings: bool = True) -> Summary:
    """The :class:`Summary` of a profile (no step anatomy, no roofline unless ``findings``:
    the findings need both, :func:`build_report`)."""
    by_shape = aggregate.by_shape(prof.table)
    return Summary(files=file_rows(prof), hosts=sorted({t.host for t in prof.traces}),
                   device_groups=device_groups(prof.device_summary()), op_events=prof.op_events,
                   op_time_ps=prof.op_time_ps, peaks=profile_peaks(prof), warnings=list(prof.warnings),
                   by_shape=by_shape,
                   populations_per_name=dict(by_shape.group_by("op_name").agg(pl.len().alias("n")).iter_rows()),
                   findings=build_report(prof).findings if findings and prof.table.height else None)
