"""The library's entry points: :func:`load` a profile, the :class:`Profile` a notebook works
with, and :func:`diff` / :func:`verify` over profiles or paths.

This module sits above the layers, as the CLI does: it composes reading (:mod:`traceview.read`,
:mod:`traceview.model`), the analyses (:mod:`traceview.analysis`) and, for Jupyter and the HTML
report, the renderers (:mod:`traceview.render`). It never prints and never exits; bad input
raises :class:`traceview.errors.TraceviewError` subclasses. It imports polars only when a
function needs it, so :func:`load` can decode while polars is imported.
"""

from __future__ import annotations

import os
from pathlib import Path

from traceview.errors import UsageError
from traceview.model.profiledata import ProfileData


class Profile(ProfileData):
    """One or more trace files read into one op-event table, with the analyses as methods.

    The tables (``table``, ``ops``, ``module_runs``, ``devices``, ``traces``, ``discovery``,
    ``warnings``, ``step_markers``, ``memory``: the allocator events) are those of
    :class:`~traceview.model.profiledata.ProfileData`. Every method returns a polars
    DataFrame or a value object; times are in ps.
    """

    # -- analyses -------------------------------------------------------------------
    def by_shape(self):
        """Shape-keyed populations; see :func:`traceview.analysis.ops.aggregate.by_shape`."""
        from traceview.analysis.ops import aggregate

        return aggregate.by_shape(self.table, self.runs)

    def by_program_shape(self):
        """(module, op, shape) populations program by program; see
        :func:`traceview.analysis.ops.aggregate.by_program_shape`."""
        from traceview.analysis.ops import aggregate

        return aggregate.by_program_shape(self.table, self.runs)

    def population_series(self, op_name: str, shape: str, module: str | None = None):
        """The nth-execution series of one (op_name, shape) population (of ``module`` only
        when given): execution index, occurrence index within it, start_ps, duration_ps,
        self_ps; see :func:`traceview.analysis.ops.distributions.population_series`."""
        from traceview.analysis.ops import distributions

        return distributions.population_series(self.table, self.runs, op_name, shape, module)

    def by_name(self):
        """Name-keyed view (mixes shapes); see :func:`traceview.analysis.ops.aggregate.by_name`."""
        from traceview.analysis.ops import aggregate

        return aggregate.by_name(self.table)

    def by_program_op(self):
        """XProf ``hlo_stats``-style (program_id, op) rows; see
        :func:`traceview.analysis.ops.aggregate.by_program_op`."""
        from traceview.analysis.ops import aggregate

        return aggregate.by_program_op(self.table)

    def populations(self, op_name: str):
        """Shape populations behind one op name; see :func:`traceview.analysis.ops.aggregate.populations`."""
        from traceview.analysis.ops import aggregate

        return aggregate.populations(self.table, op_name)

    def occurrence_checks(self, *, steps: int | None = None, expect_batch: int | None = None):
        """See :func:`traceview.analysis.ops.aggregate.occurrence_checks`."""
        from traceview.analysis.ops import aggregate

        if isinstance(steps, dict):
            steps = {str(k): _count(v, f"steps[{k!r}]") for k, v in steps.items()}
        elif steps is not None:
            steps = _count(steps, "steps")
        expect_batch = None if expect_batch is None else _count(expect_batch, "expect_batch")
        return aggregate.occurrence_checks(self.table, self.runs, steps=steps, expect_batch=expect_batch)

    def modules(self):
        """Program executions per module; see :func:`traceview.analysis.ops.aggregate.module_executions`."""
        from traceview.analysis.ops import aggregate

        return aggregate.module_executions(self.module_runs)

    def peaks(self, *, chip: str | None = None, peak_flops: float | None = None, peak_bw: float | None = None):
        """Peak FLOP/s and bytes/s for this profile's devices, each with its source; see
        :func:`traceview.analysis.hardware.peaks.resolve_peaks`."""
        from traceview.analysis.hardware.peaks import profile_peaks

        return profile_peaks(self, chip=chip, peak_flops=peak_flops, peak_bw=peak_bw)

    def roofline(self, peaks=None, **peak_overrides):
        """Roofline figures per (op, shape) population; see
        :func:`traceview.analysis.ops.roofline.roofline`. ``peaks`` defaults to :meth:`peaks`
        called with ``peak_overrides``."""
        from traceview.analysis.ops.roofline import roofline

        _check_peaks(peaks)
        return roofline(self.table, peaks if peaks is not None else self.peaks(**peak_overrides))

    def sources(self, by: str = "file", frame: str = "direct"):
        """Source attribution roll-up ``by`` "file", "line" or "population" (file × shape
        population), on the ``frame`` "direct" or "user" (see :mod:`traceview.analysis.ops.sources`)."""
        from traceview.analysis.ops import sources

        return sources.of_table(self.table, by, frame)

    def kernels(self):
        """Custom kernels by their configuration-carrying names; see
        :func:`traceview.analysis.ops.kernels.kernels`."""
        from traceview.analysis.ops.kernels import kernels

        return kernels(self.table)

    def steps(self, rules=None, *, module: str | None = None, extent: str = "span", markers="auto",
              window: str = "steady", outlier_z: float = 3.5):
        """Step anatomy: steps, op families and the coverage line; see
        :func:`traceview.analysis.steps.anatomy.profile_anatomy` (``rules``: ``name=regex`` family
        rules; ``module``: the program whose executions are steps, default the one with most
        op time; ``extent``: "span", "period" or "run"; ``markers``: "auto", None or a frame;
        ``window``: the steps analysed, "steady" (outliers left out), "all" or "A:B" (step
        indices, A inclusive, B exclusive); ``outlier_z``: the outlier rule's modified-z cut-off,
        :mod:`traceview.analysis.steps.stepstats`). Raises UsageError for a bad option and, as
        ``analyze --step-window`` does, for an A:B window that holds none of the steps."""
        from traceview.analysis.steps.anatomy import profile_anatomy
        from traceview.analysis.steps.stepstats import window_holds_steps

        anat = profile_anatomy(self, rules, module=module, extent=extent, markers=markers, window=window,
                               outlier_z=outlier_z)
        window_holds_steps(anat.steps, window)
        return anat

    def communication(self, peaks=None):
        """Collectives and host transfers with their bandwidth model; see
        :func:`traceview.analysis.communication.collectives.communication` (``peaks`` names the chip whose
        link peaks apply; default: identified from the devices)."""
        from traceview.analysis.communication.collectives import communication

        return communication(self, peaks if peaks is not None else self.peaks())

    def collectives(self):
        """One row per collective (kind, shape, replica groups, channel): bytes per participant,
        algbw, busbw, % of the interconnect peak; see :mod:`traceview.analysis.communication.collectives`."""
        return self.communication().collectives

    def host_transfers(self):
        """One row per host transfer (direction, mechanism, shape): bytes, time in flight,
        bandwidth; see :mod:`traceview.analysis.communication.collectives`."""
        return self.communication().host_transfers

    def findings(self, *, thresholds=None, **options):
        """The findings of :mod:`traceview.analysis.findings` as a polars DataFrame (id,
        severity, statement, evidence as JSON text, why, next_step, verify_hint, doc), most
        severe first; ``thresholds``: {finding id or threshold name: value}, a list of
        ``ID=VALUE`` or a :class:`~traceview.analysis.findings.Thresholds`; ``options`` as
        :meth:`analyze`. Raises UsageError for a bad threshold or option."""
        from traceview.analysis.findings import to_frame
        from traceview.analysis.report import build_report

        return to_frame(build_report(self, finding_thresholds=thresholds, **options).findings)

    def overlap(self, *, module: str | None = None, extent: str = "span", window: str = "steady"):
        """Communication overlap (per async op in flight / hidden / exposed; per step compute,
        exposed, hidden, host, idle) within the step anatomy's steps (``module``, ``extent``,
        ``window`` as :meth:`steps`); see :mod:`traceview.analysis.communication.overlap`."""
        from traceview.analysis.communication.overlap import overlap

        return overlap(self.table, self.steps(module=module, extent=extent, window=window).steps)

    def stragglers(self, *, module: str | None = None, extent: str = "span", window: str = "steady"):
        """Stragglers and skew per step (busy time per device, the slowest and its lead, the
        collective waits attributed to the last arrival, clock offsets across hosts); see
        :mod:`traceview.analysis.communication.stragglers`."""
        from traceview.analysis.communication.stragglers import stragglers

        return stragglers(self.table, self.overlap(module=module, extent=extent, window=window).steps)

    def memory_report(self, *, module: str | None = None, extent: str = "span", window: str = "steady"):
        """Device memory per allocator (peak in use, capacity, what was alive at the peak, growth
        per step over this step anatomy); see :func:`traceview.analysis.memory.allocators.memory`."""
        from traceview.analysis import derived
        from traceview.analysis.memory.allocators import profile_memory

        return profile_memory(self, derived.step_anatomy(self, module=module, extent=extent, window=window))

    def phases(self, peaks=None, *, tokens_per_step: int | None = None, module: str | None = None,
               extent: str = "span", window: str = "steady", **peak_overrides):
        """Prefill/decode/mixed steps with MFU, MBU and tokens per step and per phase; see
        :func:`traceview.analysis.steps.phases.phases` (``peaks``: :meth:`peaks` with ``peak_overrides``
        when None)."""
        from traceview.analysis import derived
        from traceview.analysis.steps.phases import phases

        pk = peaks if peaks is not None else self.peaks(**peak_overrides)
        return phases(self, derived.step_anatomy(self, module=module, extent=extent, window=window), pk,
                      tokens_per_step=tokens_per_step)

    def by_kind(self, rules=None):
        """Populations across layers: one row per (op kind, HLO text without instruction names,
        shape) with the op names in it counted (``members``); see
        :func:`traceview.analysis.ops.kinds.by_kind`."""
        from traceview.analysis.ops.kinds import by_kind

        return by_kind(self, rules=rules)

    def family_roofline(self, rules=None, *, peaks=None, module: str | None = None, **peak_overrides):
        """Roofline per op family and step (time, share, FLOPs, bytes, intensity, bound by,
        predicted against measured); see :func:`traceview.analysis.steps.family_roofline.family_roofline`.
        ``rules``: family rules (``"study"`` for the engine's named scopes); ``peaks`` defaults
        to :meth:`peaks` called with ``peak_overrides``."""
        from traceview.analysis.steps.family_roofline import family_roofline
        from traceview.analysis.hardware.peaks import Peaks

        if peaks is not None and not isinstance(peaks, Peaks):
            raise UsageError(f"peaks must be a Peaks (from .peaks()), got {type(peaks).__name__}")
        return family_roofline(self.steps(rules, module=module), peaks if peaks is not None else self.peaks(**peak_overrides))

    def analyze(self, **options):
        """Every section ``traceview analyze`` shows, as a :class:`traceview.Report`; options
        as :func:`traceview.analysis.report.build_report` (an option given as None takes its
        default). Raises UsageError for an unknown or bad option."""
        from traceview.analysis.report import build_report

        return build_report(self, **_report_options(options, "analyze"))

    def sql(self, query: str, **options):
        """Run the SQL ``query`` (polars' SQL engine) over this profile's named tables (``ops``,
        ``module_runs``, ``programs``, ``populations``, ``roofline``, ``steps``, ... and every
        other table of :meth:`analyze`'s Report; :mod:`traceview.analysis.sql`) and return the
        result as a polars DataFrame. ``options``: as :meth:`analyze`. Raises UsageError for bad
        SQL, an unknown table or column. Runs in this process with no memory or time limit (the
        library never forks): a query polars cannot bound (an aggregate or ORDER BY over a cross
        join) takes what it needs; ``traceview query`` runs the same SQL in a limited child."""
        from traceview.analysis.report import build_report
        from traceview.analysis.sql import execute, tables

        if not isinstance(query, str):
            raise UsageError(f"sql() takes the query as a string, got {type(query).__name__}")
        return execute(tables(build_report(self, **_report_options(options, "sql")), self), query)

    def report(self, path: str | os.PathLike, *, top: int = 30, title: str | None = None, peaks=None, rules=None,
               step_module: str | None = None, step_extent: str = "span", step_window: str = "steady") -> Path:
        """Write the offline, self-contained HTML report to ``path``; returns the path (see
        :func:`traceview.render.html.render_report`). Raises UsageError on a bad option, on a
        ``path`` inside a profile folder (one it reads, a ``plugins/profile`` tree, a folder
        holding trace files), onto a trace or bearing a trace's name
        (as the CLI refuses them), in a folder that does not exist, or that cannot be written."""
        from traceview.analysis.report import build_report
        from traceview.read.guard import check_writable, refuse_inside_inputs, write_atomic
        from traceview.render.html import render_report

        top = _count(top, "top")
        out = Path(_path(path))
        check_writable(out, "path")
        refuse_inside_inputs(out, "path", self.discovery, trace_paths=[t.path for t in self.traces])
        rep = build_report(self, peaks=peaks, rules=rules, step_module=step_module, step_extent=step_extent,
                           step_window=step_window, html=True)
        write_atomic(out, render_report(rep, top=top, title=title))
        return out

    def _repr_html_(self) -> str:  # pragma: no cover - exercised by the notebook tests
        from traceview.analysis.report import build_summary
        from traceview.render.html import summary_html

        return summary_html(build_summary(self))


def load(path: str | os.PathLike, *, run: str | None = None, all_runs: bool = False, require_ops: bool = True,
         stale_after_s: float | None = 7 * 24 * 3600, max_bytes: int | None = None, cache=None, workers: int = 0,
         executor=None, scheduler: str | None = None, progress=None, discovery=None, prefetch: bool = True,
         expand_kernels: bool = False, group_hosts: bool = True) -> Profile:
    """Find and read the traces under ``path`` (a file, run dir, log dir or any folder above, or
    a ``gs://``, ``s3://`` or other fsspec URL: :mod:`traceview.read.remote`) into a
    :class:`Profile`: the newest run unless ``run`` names one or ``all_runs`` is set;
    arguments and errors as :func:`traceview.model.load.load` (``cache``: a
    :class:`traceview.read.cache.TableCache`, False for none, None for the environment's;
    ``workers`` / ``executor`` / ``scheduler``: where several files are read). Each
    interpreted Pallas kernel invocation of a CPU trace is one op row, named by the kernel,
    unless ``expand_kernels`` (:mod:`traceview.model.interpreted`). The run folders of a
    capture written host by host (one host each, dated within a minute) are read as one run
    unless ``group_hosts`` is False (:func:`traceview.read.discover.discover`). Warns
    (RuntimeWarning, :func:`slow_reader_warning`) when it read an ``.xplane.pb`` without a
    compiled C decoder in this copy of traceview."""
    from traceview.model.load import load as _load
    from traceview.read.cache import TableCache

    path = _path(path)
    if cache is not None and cache is not False and not isinstance(cache, TableCache):
        raise UsageError(f"cache must be a TableCache, False or None, got {type(cache).__name__}")
    prof = _load(path, run=run, all_runs=all_runs, require_ops=require_ops, stale_after_s=stale_after_s,
                 max_bytes=max_bytes, cache=cache, workers=workers, executor=executor, scheduler=scheduler,
                 progress=progress, discovery=discovery, prefetch=prefetch, factory=Profile,
                 expand_kernels=expand_kernels, group_hosts=group_hosts)
    if any(getattr(tr, "format", None) == "xplane" for tr in getattr(prof, "traces", None) or ()):
        slow_reader_warning()
    return prof


def slow_reader_warning() -> None:
    """A RuntimeWarning (shown once per call site by Python's default filter) when the copy of
    traceview imported has no compiled C decoder, so traces are read by the pure-Python
    fallback, many times slower: typically the source tree of a checkout, imported from its
    own folder, in place of the installed package (whose build compiled the decoder)."""
    from traceview.read.xplane.wire import has_decoder

    if not has_decoder():
        import warnings

        here = Path(__file__).resolve().parent
        warnings.warn(f"traceview at {here} has no compiled C decoder: traces are read by the pure-Python fallback, "
                      "many times slower; import the installed traceview (start Python outside the checkout) or "
                      "build the decoder in place (python setup.py build_ext --inplace)", RuntimeWarning, stacklevel=3)


#: The largest count an argument may give (as the CLI's options are held to).
MAX_COUNT = 1 << 62


#: build_report's options a caller of Profile.analyze / Profile.sql may give (the rest are the
#: command line's: its progress and memory hooks, the option name its errors cite)
_REPORT_OPTIONS = ("by", "peaks", "steps", "expect_batch", "rules", "step_module", "step_extent", "source_frame",
                   "html", "step_window", "findings", "finding_thresholds", "tokens_per_step")


def _report_options(options: dict, method: str) -> dict:
    """``options`` for build_report, those given as None left out (their defaults apply).
    Raises UsageError naming ``method`` for an option build_report does not take, or for a
    value of the wrong kind (``peaks`` not a Peaks, ``tokens_per_step`` not a whole number
    > 0, ``html`` / ``findings`` not a bool; the rest are checked where they are used)."""
    bad = sorted(k for k in options if k not in _REPORT_OPTIONS)
    if bad:
        raise UsageError(f"{method}() got unknown option{'s' if len(bad) > 1 else ''} {', '.join(bad)} "
                         f"(options: {', '.join(_REPORT_OPTIONS)})")
    given = {k: v for k, v in options.items() if v is not None}
    for k in ("html", "findings"):
        if k in given and not isinstance(given[k], bool):
            raise UsageError(f"{method}(): {k} must be True or False, got {given[k]!r}")
    n = given.get("tokens_per_step")
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
        raise UsageError(f"{method}(): tokens_per_step must be a whole number > 0, got {n!r}")
    _check_peaks(given.get("peaks"), f"{method}(): ")
    return given


def _check_peaks(peaks, where: str = "") -> None:
    """Raises UsageError (prefixed by ``where``) when ``peaks`` is neither None nor a Peaks."""
    from traceview.analysis.hardware.peaks import Peaks

    if peaks is not None and not isinstance(peaks, Peaks):
        raise UsageError(f"{where}peaks must be a Peaks (from .peaks()), got {type(peaks).__name__}")


def _count(v, what: str) -> int:
    """A whole number >= 1, held to :data:`MAX_COUNT`; UsageError otherwise."""
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise UsageError(f"{what} must be a whole number >= 1, got {v!r}")
    return min(v, MAX_COUNT)


def _path(p) -> str | os.PathLike:
    """A path argument: str, os.PathLike or bytes (decoded as the file system does); UsageError otherwise."""
    if isinstance(p, bytes):
        return os.fsdecode(p)
    if not isinstance(p, (str, os.PathLike)):
        raise UsageError(f"expected a trace path (str, bytes or os.PathLike), got {type(p).__name__}")
    return p


def _profile(x):
    """A profile as given, or the one :func:`load` reads at a path."""
    if isinstance(x, (str, bytes, os.PathLike)):
        return load(x)
    if not hasattr(x, "table") or not hasattr(x, "module_runs"):
        raise UsageError(f"expected a Profile or a trace path, got {type(x).__name__}")
    return x


def diff(base, treatment, **options):
    """Diff two profiles (:class:`Profile` objects or paths for :func:`load`) population by
    population: a :class:`traceview.analysis.compare.diff.DiffReport`; options as
    :func:`traceview.analysis.compare.diff.diff`. Raises the errors of :func:`load` for bad paths
    and UsageError for bad options."""
    import inspect

    from traceview.analysis.compare.diff import diff as _diff

    known = set(inspect.signature(_diff).parameters) - {"base", "treatment"}
    unknown = sorted(set(options) - known)
    if unknown:
        raise UsageError(f"diff() got unknown option(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    return _diff(_profile(base), _profile(treatment), **options)


def verify(treatment, checks, *, base=None, rules=None, step_window: str = "steady", finding_thresholds=None,
           peaks=None):
    """Evaluate ``checks`` (strings of the :mod:`traceview.analysis.compare.verify_grammar` grammar)
    on ``treatment`` (and ``base`` for diff checks): :class:`Profile` objects or paths; one
    check may be given as a plain string. Returns
    a :class:`traceview.analysis.compare.verify.VerifyReport` (each result pass, fail or unknown);
    ``step_window``: the steps of the diff's step time and of the report the finding checks read
    ("steady", "all", "A:B"), as ``analyze`` uses them; ``peaks``: the
    :class:`~traceview.analysis.hardware.peaks.Peaks` of the finding checks' reports (e.g.
    ``profile.peaks(chip="v5e")``; None: each profile's own). Raises UsageError for an invalid check or window
    (before evaluating any) and the errors of :func:`load` for bad paths."""
    from traceview.analysis.steps.stepstats import parse_window
    from traceview.analysis.compare.verify import verify as _verify
    from traceview.analysis.compare.verify_grammar import Check, parse_check

    if isinstance(checks, str):
        checks = [checks]
    if not isinstance(checks, (list, tuple)) or not all(isinstance(x, (str, Check)) for x in checks):
        raise UsageError("checks must be a check string or a list of them (the verify grammar)")
    parsed = [parse_check(x) if isinstance(x, str) else x for x in checks]  # usage errors before reading
    parse_window(step_window)
    return _verify(_profile(treatment), parsed, base=_profile(base) if base is not None else None, rules=rules,
                   step_window=step_window, finding_thresholds=finding_thresholds, peaks=peaks)


def ladder(profiles, **options):
    """The family rooflines of a sweep of profiles (:class:`Profile` objects or paths) side by
    side: a :class:`traceview.analysis.compare.ladder.Ladder`; options as
    :func:`traceview.analysis.compare.ladder.ladder` (``xs``, ``labels``, ``rules``, ``peaks``,
    ``step_module``). Raises the errors of :func:`load` and UsageError."""
    from traceview.analysis.compare.ladder import ladder as _ladder

    profiles = list(profiles)
    if "labels" not in options and all(isinstance(p, (str, os.PathLike)) for p in profiles):
        options["labels"] = [str(p) for p in profiles]
    return _ladder([_profile(p) for p in profiles], **options)
