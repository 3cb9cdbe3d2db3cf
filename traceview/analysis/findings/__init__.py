"""Findings: the study's lessons as diagnoses, each with its evidence, read off one profile's
analyses (:class:`~traceview.analysis.report.Report`) and, for two rules, a diff.

One rule per finding, each a pure function ``rule(ctx, th) -> Finding | NotEvaluated | None``
of the analysis results it needs (:class:`Inputs`: by-shape populations, steps, roofline,
kernels, warnings, a diff): a Finding when the trace holds the evidence, None when the rule
ran and found none, :class:`NotEvaluated` (with the missing input) when it could not run
(a ``--phase`` filter, too few steps, no shapes in a trace.json, no allocator events, ...).
:func:`evaluate` keeps both outcomes apart (``Report.findings_not_evaluated``): a verdict on a
finding whose rule did not run is unknown. Thresholds are the fields of :class:`Thresholds`
(documented defaults; ``--finding-threshold ID=VALUE`` sets the primary threshold of finding
ID, :data:`PRIMARY`). The rules are in
:mod:`~traceview.analysis.findings.decode` (decode-engine patterns),
:mod:`~traceview.analysis.findings.quality` (trace quality, costs, communication, diffs) and
:mod:`~traceview.analysis.findings.memory` (device memory).

Each finding's ``why`` stands alone: the lesson in one sentence with the measurement that
taught it; ``doc`` links the page that tells each finding's story once
(:data:`DOC_PAGE`, one section per id).
Errors: :func:`parse_threshold` raises :class:`~traceview.errors.UsageError`.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields, replace

from traceview.errors import UsageError

#: severities, most urgent first
SEVERITIES = ("high", "medium", "info")
#: the page with one section (anchor = finding id) per finding: the lesson, the measurement, what to do
DOC_PAGE = "docs/findings.md"


@dataclass
class Finding:
    """One diagnosis. ``id``: stable, kebab-case; ``severity``: one of :data:`SEVERITIES`;
    ``statement``: one line with figures; ``evidence``: the populations, shapes, steps and
    numbers it rests on (a JSON-able dict; times in ps); ``why``: the lesson in one sentence
    with the measurement that taught it; ``next_step``: what to try; ``verify_hint``: how to
    check the step took effect (a ``traceview verify`` check where one exists); ``doc``: the
    finding's section of :data:`DOC_PAGE` (``docs/findings.md#<id>``, set from ``id``)."""

    id: str
    severity: str
    statement: str
    evidence: dict = field(default_factory=dict)
    why: str = ""
    next_step: str = ""
    verify_hint: str = ""
    doc: str = ""
    #: what the change is worth (:func:`traceview.analysis.findings.impact.impact_of`), set by :func:`find`
    impact: dict | None = None
    #: the ``traceview export`` command of the step it cites, else of the median step
    #: (:func:`traceview.analysis.export.attach_export_commands`); "" without steps
    export_command: str = ""

    def __post_init__(self):
        if not self.doc:
            self.doc = f"{DOC_PAGE}#{self.id}"

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class NotEvaluated:
    """A rule that could not judge the trace: ``id`` the finding it decides, ``reason`` the
    missing input (one phrase, e.g. "one step: the rule needs two or more")."""

    id: str
    reason: str


@dataclass
class Evaluation:
    """What the rules made of a report: ``findings`` (ranked, with impacts) and
    ``not_evaluated`` ({finding id: reason} of the rules that could not run)."""

    findings: list = field(default_factory=list)
    not_evaluated: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Thresholds:
    """Thresholds of the rules (fractions are 0..1; shares are of the mean step's wall time
    unless said otherwise).

    sampler_share (0.03): sort/binary-search/cumsum ops of the sampler per decode step.
    kv_cover (1.0): the KV block covers at least this fraction of the kernel's maximum context.
    state_copy_bytes (64 KiB): the smallest copy counted as a copy of the state.
    logits_share (0.05): converts/copies of [batch, vocabulary] logits per step.
    regime_share (0.05): share of op time an op name's populations must hold (rule 5).
    costs_share (0.05): share of op time held by custom calls/kernels lacking FLOPs or bytes.
    host_share (0.30): device idle inside and between steps, as a share of step plus gap (the
      study's 85 µs of 11.9 ms is 0.7%; CPU profiles idle ~20% between jitted calls, so the
      default sits above them).
    exposed_share (0.10): exposed communication per step; straggler_factor (1.2): a device's
      step time over the median device's.
    roofline_fraction (0.40): achieved share of peak bandwidth below which a memory-bound family
      is far below the roofline; roofline_share (0.20): the family's share of op time.
    warmup_factor (2.0): a first step (or first execution) this many times the median of the
      rest is a warm-up; warmup_min_steps (4).
    step_repeats (3): the step rules judge only a repeated step: one op mix in at least this many
      executions per device and in at least half the analysed steps (a sweep of programs is not
      a step loop).
    host_transfer_share (0.25): transfers to or from host memory, with nothing else running,
      per step.
    overhead_factor (4.0): traced-event ratio of a diff population (as ``diff``'s default).
    memory_share (0.90): an allocator's peak in use over its capacity.
    memory_growth (0.01): bytes in use at the end of each steady step, growth per step over their
      mean (a fraction; with no step giving memory back).
    """

    sampler_share: float = 0.03
    kv_cover: float = 1.0
    state_copy_bytes: float = float(1 << 16)
    logits_share: float = 0.05
    regime_share: float = 0.05
    costs_share: float = 0.05
    host_share: float = 0.30
    exposed_share: float = 0.10
    straggler_factor: float = 1.2
    roofline_fraction: float = 0.40
    roofline_share: float = 0.20
    warmup_factor: float = 2.0
    warmup_min_steps: float = 4
    overhead_factor: float = 4.0
    step_repeats: float = 3
    host_transfer_share: float = 0.25
    memory_share: float = 0.90
    memory_growth: float = 0.01


#: finding id -> the Thresholds field ``--finding-threshold ID=VALUE`` sets
PRIMARY = {
    "sampler-search-dominates": "sampler_share",
    "kv-block-covers-context": "kv_cover",
    "state-copied-every-step": "state_copy_bytes",
    "logits-conversions": "logits_share",
    "one-name-several-regimes": "regime_share",
    "profiling-overhead": "overhead_factor",
    "costs-unknown": "costs_share",
    "host-bound-steps": "host_share",
    "exposed-communication": "exposed_share",
    "host-transfers-dominate": "host_transfer_share",
    "straggler-device": "straggler_factor",
    "far-below-roofline": "roofline_fraction",
    "warmup-in-window": "warmup_factor",
    "memory-near-capacity": "memory_share",
    "memory-grows-per-step": "memory_growth",
}

#: the thresholds that are shares (``10%`` or ``0.1``; a bare number above 1 is refused: 10% or 0.1?)
SHARE_THRESHOLDS = frozenset({"sampler_share", "logits_share", "regime_share", "costs_share", "host_share",
                              "exposed_share", "roofline_fraction", "roofline_share", "host_transfer_share",
                              "memory_share", "memory_growth"})
#: shares that may exceed 100% when written with ``%`` (growth per step)
_OPEN_SHARES = frozenset({"memory_growth"})
#: ratios that may be written either way and exceed 1 (a KV block over the context: 1.5 or 150%)
_RATIOS = frozenset({"kv_cover"})

#: every finding id a rule can emit (trace-quality ids included)
IDS = tuple(PRIMARY) + ("stale-trace", "several-runs", "truncated-trace", "colliding-files", "unreadable-host",
                        "loose-trace-files")
#: the findings only a diff of two profiles can make (never evaluated on one profile)
DIFF_IDS = ("profiling-overhead",)


def parse_threshold(text: str, base: Thresholds | None = None) -> Thresholds:
    """``ID=VALUE`` (a finding id of :data:`PRIMARY`, or a :class:`Thresholds` field name) ->
    ``base`` with that threshold set. A share (:data:`SHARE_THRESHOLDS`) is ``30%`` or ``0.3``;
    other thresholds are plain numbers. Raises UsageError for an unknown id, a bad number, a
    bare share above 1 or a percentage where a plain number is meant."""
    base = base or Thresholds()
    key, sep, val = str(text).partition("=")
    key = key.strip()
    names = {f.name for f in fields(Thresholds)}
    name = PRIMARY.get(key, key if key in names else None)
    if not sep or name is None:
        raise UsageError(f"--finding-threshold {text!r}: expected ID=VALUE with ID one of "
                         f"{', '.join(PRIMARY)} (or a threshold name: {', '.join(sorted(names))})")
    val = val.strip()
    pct = val.endswith("%")
    try:
        v = float(val[:-1] if pct else val) / (100 if pct else 1)
    except ValueError:
        raise UsageError(f"--finding-threshold {text!r}: {val!r} is not a number") from None
    if not v >= 0 or v == float("inf"):
        raise UsageError(f"--finding-threshold {text!r}: expected a finite number >= 0")
    if name in SHARE_THRESHOLDS:
        if not pct and v > 1:
            raise UsageError(f"--finding-threshold {text!r}: {name} is a share: write {val}% for a percentage, "
                             f"or {v / 100:g} as a fraction (0 to 1)")
        if name not in _OPEN_SHARES and v > 1:
            raise UsageError(f"--finding-threshold {text!r}: {name} is a share, at most 100%")
    elif pct and name not in _RATIOS:
        raise UsageError(f"--finding-threshold {text!r}: {name} is not a share: write a plain number")
    return replace(base, **{name: v})


def thresholds_of(values) -> Thresholds:
    """A :class:`Thresholds` from None, a Thresholds, a dict {id or field: value} or a list
    of ``ID=VALUE`` strings. Raises UsageError as :func:`parse_threshold`."""
    if values is None:
        return Thresholds()
    if isinstance(values, Thresholds):
        return values
    if isinstance(values, dict):
        values = [f"{k}={v}" for k, v in values.items()]
    if isinstance(values, str):
        values = [values]
    th = Thresholds()
    for v in values:
        th = parse_threshold(v, th)
    return th


@dataclass
class Inputs:
    """What the rules read: ``report`` (a Report or anything with its fields: by_shape,
    roofline, kernels, steps, peaks, warnings, op_time_ps), ``diff`` (a
    :class:`~traceview.analysis.compare.diff.DiffReport` or None). Built once; derived tables are
    computed on first use (:mod:`._context`)."""

    report: object
    diff: object = None
    cache: dict = field(default_factory=dict)


def evaluate(report=None, *, diff=None, thresholds=None) -> Evaluation:
    """Run every rule on ``report`` (and ``diff``): the findings, each with its ``impact``,
    ranked by impact (:mod:`~traceview.analysis.findings.impact`), and the rules that could
    not run with their reasons. ``thresholds``: as :func:`thresholds_of`."""
    from traceview.analysis.findings import decode, memory, quality

    th = thresholds_of(thresholds)
    ctx = Inputs(report, diff)
    out, skipped = [], {}
    rules = (decode.RULES + quality.RULES + memory.RULES) if report is not None else ()
    rules += quality.DIFF_RULES if diff is not None else ()
    for rule in rules:
        got = rule(ctx, th)
        if got is None:
            continue
        if isinstance(got, NotEvaluated):
            skipped.setdefault(got.id, got.reason)
            continue
        out.extend(got if isinstance(got, list) else [got])
    from traceview.analysis.findings.impact import attach

    return Evaluation(attach(out, report, ctx), skipped)


def find(report=None, *, diff=None, thresholds=None) -> list[Finding]:
    """The findings of :func:`evaluate` (ranked, with impacts)."""
    return evaluate(report, diff=diff, thresholds=thresholds).findings


def to_frame(findings: list[Finding]):
    """Findings as a polars DataFrame: id, severity, statement, evidence (JSON text), why,
    next_step, verify_hint, doc, impact_method, impact_share_low / _high (of the step), impact
    (JSON text) (one row per finding, in the given order)."""
    import polars as pl

    cols = ["id", "severity", "statement", "evidence", "why", "next_step", "verify_hint", "doc"]
    schema = {c: pl.Utf8 for c in cols} | {"impact_method": pl.Utf8, "impact_share_low": pl.Float64,
                                          "impact_share_high": pl.Float64, "impact": pl.Utf8}
    rows = []
    for f in findings or []:
        d = {k: v for k, v in f.to_dict().items() if k in cols}
        imp = f.impact or {}
        rows.append({**d, "evidence": json.dumps(f.evidence, default=str), "impact_method": imp.get("method"),
                     "impact_share_low": imp.get("share_low"), "impact_share_high": imp.get("share_high"),
                     "impact": json.dumps(imp, default=str) if imp else None})
    return pl.DataFrame(rows, schema=schema)
