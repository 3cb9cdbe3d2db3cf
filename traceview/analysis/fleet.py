"""Fleet mode: each host's file is read and aggregated where it is read (this process, a local
process pool or a Dask worker); only partial aggregates travel to the client, which merges them.
The client never holds every event.

Per host, :func:`host_partial` returns a :class:`HostPartial`:

* ``col`` — the host's op descriptions with their sums (:meth:`OpTable.collapse
  <traceview.model.optable.OpTable.collapse>`: occurrences, total and self ps, events, min/max
  per occurrence, first start), without HLO text and source stacks. Every figure of the op
  table but its quantiles and regimes is a sum, count, extreme, distinct set or row-weighted
  mode over these rows (:func:`traceview.analysis.ops.aggregate.by_shape_rows`), so the merged
  figures equal the single-process ones exactly.
* ``moments`` — per description, events n, mean and M2 (sum of squared deviations) of the
  per-occurrence duration, merged with Chan et al.'s pairwise update (``cv``; float).
* ``sketch`` — per description, a log-bucket histogram of per-occurrence durations:
  bucket ``i = ceil(log_γ v)`` holds values in (γ^(i-1), γ^i], γ = (1+α)/(1-α), and stands
  for 2γ^i/(γ+1), which is within a relative error α of every value in it (DDSketch,
  Masson, Rim & Lee, VLDB 2019); zero durations have their own exact bucket. Buckets merge
  by adding counts. ``values``: the durations themselves for descriptions with at most
  :data:`EXACT_MAX` events on the host.
* ``steps`` — the step rows of :func:`traceview.analysis.steps.anatomy` on the host's devices
  (steps are found per device; the dominant module is the host's, checked against the
  fleet's at the merge), op self time and occurrences per (step, family) (integer arrays: step
  row, family code into ``family_names``), the overlap rows (without the columns the step
  rows repeat when they are the step rows' windows, in their order)
  per (device, step) (:func:`traceview.analysis.communication.overlap.overlap` over every step window) and
  the collective events (host, device, module, op name, kind, start, duration): the
  arrivals :func:`traceview.analysis.communication.stragglers.stragglers` matches across hosts. None of
  these with ``FleetOptions(steps=False)``: the partial is then per op description only.

:func:`merge` gives a :class:`Fleet`. Quantiles (p50_ps, p90_ps = linear interpolation between
the two nearest ranks, as :func:`traceview.analysis.ops.distributions.spread`): exact when every
host shipped the population's values; otherwise each of the two order statistics is read off
the merged sketch, so p50/p90 are within a relative error α (:data:`ALPHA`) of the exact
figures (a convex combination of two estimates each within α), then clamped into the
population's exact [min_ps, max_ps]. ``quantiles`` says which. The roofline and kernels tables
read only the descriptions' sums and costs: :meth:`Fleet.roofline`, :meth:`Fleet.kernels`.

Sections that need the events themselves are not computed in fleet mode (:data:`NOT_COMPUTED`).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

import numpy as np
import polars as pl

#: relative error of a sketch quantile (bucket width: γ = (1+α)/(1-α))
ALPHA = 0.01
#: a description with at most this many events on a host ships its durations as they are
EXACT_MAX = 64
#: the sketch bucket of a zero duration (exact)
ZERO_BUCKET = -(1 << 31)

#: report sections a fleet-mode result does not have, and why
NOT_COMPUTED = {
    "regimes": "the regime examination reads each wide population's events in execution order",
    "sources": "not computed in fleet mode (source stacks stay on the hosts)",
    "communication": "collective and host-transfer pairing reads every async start and done",
    "findings": "the rules read sections fleet mode does not compute",
    "step reasons": "an outlier step's reason names its op mix and first executions, read off the events "
                    "(fleet mode gives the ratio to the median only)",
    "families.n_populations": "distinct populations per family within the step window need the events",
    "html": "not computed in fleet mode",
    "memory": "not computed in fleet mode (the allocator events stay on the hosts; analyze one host's file)",
    "phases": "not computed in fleet mode (labelling a step reads its programs' executions)",
    "kernel_inside": "not computed in fleet mode (the kernel-profiling lines stay on the hosts)",
}

_DROP = ["hlo_text", "source_stack"]


def _gamma(alpha: float) -> float:
    return (1 + alpha) / (1 - alpha)


def buckets(values: np.ndarray, alpha: float = ALPHA) -> np.ndarray:
    """Sketch bucket (int32) of each value (ps, >= 0): ceil(log_γ v), :data:`ZERO_BUCKET` for 0."""
    v = np.asarray(values, dtype=np.float64)
    pos = v > 0
    every = bool(pos.all())
    r = np.log(v if every else np.where(pos, v, 1.0))
    r /= math.log(_gamma(alpha))
    out = np.ceil(r, out=r).astype(np.int32)  # (|log_γ v| is far inside int32 for any int64 duration)
    if not every:
        out[~pos] = ZERO_BUCKET
    return out


def bucket_value(b: np.ndarray, alpha: float = ALPHA) -> np.ndarray:
    """The value (ps, float64) bucket ``b`` stands for: 2γ^b/(γ+1); 0 for :data:`ZERO_BUCKET`."""
    g = _gamma(alpha)
    b = np.asarray(b, dtype=np.int64)
    return np.where(b == ZERO_BUCKET, 0.0, 2.0 * np.power(g, np.where(b == ZERO_BUCKET, 0, b)) / (g + 1.0))


@dataclass
class FleetOptions:
    """What a host computes besides its op table: the step anatomy's options
    (:func:`traceview.analysis.steps.anatomy.profile_anatomy`); ``alpha``: the sketch's relative error."""

    rules: object = None
    step_module: str | None = None
    step_extent: str = "span"
    step_window: str = "steady"
    alpha: float = ALPHA
    expand_kernels: bool = False
    #: False: the op table and devices only (no step rows, overlap rows or collective events:
    #: a host's partial is then per op description, whatever its events and steps)
    steps: bool = True


@dataclass
class HostPartial:
    """One host's partial aggregates (module doc). ``n_events``: all events of the file;
    ``op_events``: op event rows."""

    path: str
    host: str | None
    format: str
    n_events: int
    op_events: int
    has_shapes: bool
    notes: list
    devices: list
    col: pl.DataFrame
    moments: pl.DataFrame
    sketch: pl.DataFrame
    values: pl.DataFrame
    steps: pl.DataFrame
    step_method: str
    step_module: str | None
    step_notes: list
    step_families: pl.DataFrame
    module_self: pl.DataFrame
    overlap_steps: pl.DataFrame
    collectives: pl.DataFrame
    #: the names of ``step_families``' family codes
    family_names: list = field(default_factory=list)
    #: the step window ``steps`` were annotated for here (:func:`traceview.analysis.steps.stepstats.annotate`:
    #: its columns after the step rows'), None when not annotated; ``steps_alone``: every
    #: device's (program's) steps here are enough to judge them alone (no pooling across
    #: hosts), so the fleet's annotation of these rows is this one
    step_window: str | None = None
    steps_alone: bool = False

    def __getstate__(self):
        """Pickled (to the client) with its large frames as compressed Arrow IPC
        (:class:`_Packed`): the per-step frames are mostly repeats and small integers."""
        state = {k: _Packed(v) if isinstance(v, pl.DataFrame) and v.estimated_size() >= PACK_MIN_BYTES else v
                 for k, v in self.__dict__.items() if k not in ("_packed", "_prepared")}
        state.update(self.__dict__.get("_packed", {}))  # (still packed here: sent on as they came)
        return state

    def __setstate__(self, state):
        """Unpickled, the packed frames stay packed until used (:meth:`frame`; reading the
        attribute unpacks and keeps it): the client holds every host's partial until the merge."""
        self.__dict__["_packed"] = {k: v for k, v in state.items() if isinstance(v, _Packed)}
        self.__dict__.update({k: v for k, v in state.items() if not isinstance(v, _Packed)})

    def __getattr__(self, name):  # a packed frame read as an attribute: unpacked, kept
        packed = self.__dict__.get("_packed")
        if packed is None or name not in packed:
            raise AttributeError(name)
        v = self.__dict__[name] = packed.pop(name).frame()
        return v

    def frame(self, name: str, drop: bool = False) -> pl.DataFrame:
        """Frame ``name``, unpacked when it came packed (not kept unpacked: the caller holds
        it); ``drop``: the partial lets go of it (None after)."""
        packed = self.__dict__.get("_packed") or {}
        v = packed.get(name)
        v = v.frame() if v is not None else self.__dict__[name]
        if drop:
            self.drop(name)
        return v

    def drop(self, *names: str) -> None:
        """Lets go of frames ``names`` (None after)."""
        packed = self.__dict__.get("_packed") or {}
        for name in names:
            packed.pop(name, None)
            self.__dict__[name] = None

    def rows(self, name: str) -> int:
        """Rows of frame ``name``, packed or not (0 when dropped)."""
        v = (self.__dict__.get("_packed") or {}).get(name)
        v = v if v is not None else self.__dict__[name]
        return v.height if v is not None else 0

    def columns(self, name: str) -> list:
        """Column names of frame ``name``, packed or not."""
        v = (self.__dict__.get("_packed") or {}).get(name)
        return list(v.columns if v is not None else self.__dict__[name].columns)


#: a partial's frames of at least this many bytes (``estimated_size``) travel compressed
PACK_MIN_BYTES = 64 << 10


class _Packed:
    """A frame as zstd-compressed Arrow IPC bytes; :meth:`frame` gives it back (same columns,
    types and values)."""

    def __init__(self, df: pl.DataFrame):
        import io

        buf = io.BytesIO()
        df.write_ipc(buf, compression="zstd")
        self.data = buf.getvalue()
        self.height, self.columns = df.height, df.columns

    def frame(self) -> pl.DataFrame:
        import io

        return pl.read_ipc(io.BytesIO(self.data))


def _distribution_parts(table, alpha: float) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """(moments, sketch, values) of an OpTable's per-occurrence durations per attr."""
    ev = table.events
    attr = ev["attr"].to_numpy().astype(np.int64)
    dur = ev["duration_ps"].to_numpy()
    cnt = ev["count"].to_numpy()
    one = not ev.height or int(cnt.max()) <= 1
    per = dur.astype(np.float64) if one else dur / np.maximum(cnt, 1)
    na = table.attrs.height
    n = np.bincount(attr, minlength=na)
    s = np.bincount(attr, weights=per, minlength=na)
    mean = np.divide(s, n, out=np.zeros(na), where=n > 0)
    dev = mean[attr]  # each event's squared deviation from its mean, in one array
    np.subtract(per, dev, out=dev)
    np.multiply(dev, dev, out=dev)
    m2 = np.bincount(attr, weights=dev, minlength=na)
    del dev
    have = np.flatnonzero(n)
    moments = pl.DataFrame({"attr": pl.Series(have, dtype=pl.UInt32), "n": n[have].astype(np.int64),
                            "mean": mean[have], "m2": m2[have]})
    sk = _sketch_rows(attr, buckets(per, alpha), na)
    small = n <= EXACT_MAX  # per attr; a gather over the events only when some attr is small
    if small[have].any():
        small = small[attr]
        values = pl.DataFrame({"attr": pl.Series(attr[small], dtype=pl.UInt32), "value": per[small]})
    else:
        values = pl.DataFrame(schema={"attr": pl.UInt32, "value": pl.Float64})
    return moments, sk, values


#: most (attr, bucket) bins counted by one ``np.bincount`` (else a sort)
_BINS_MAX = 1 << 22


def _sketch_rows(attr: np.ndarray, b: np.ndarray, na: int) -> pl.DataFrame:
    """The sketch rows (attr UInt32, bucket Int32, n Int64; one per (attr, bucket) with
    events, in no particular order) of per-event attr ids ``attr`` (int64, < ``na``) and
    buckets ``b``: counted over dense bins when attr x bucket span is small, else sorted."""
    schema = {"attr": pl.UInt32, "bucket": pl.Int32, "n": pl.Int64}
    if not len(b):
        return pl.DataFrame(schema=schema)
    zero = b == ZERO_BUCKET
    some_zero = bool(zero.any())
    key = b.astype(np.int64)
    if not some_zero:
        lo = int(key.min()) - 1
    else:  # a zero's bin: below the smallest other bucket
        lo = int(key[~zero].min()) - 1 if not zero.all() else 0
        key[zero] = lo
    span = int(key.max()) - lo + 1
    key -= lo
    key += attr * span
    if na * span <= _BINS_MAX:
        c = np.bincount(key, minlength=na * span)
        k = np.flatnonzero(c)
        c = c[k]
    else:
        k, c = np.unique(key, return_counts=True)
    a, bb = k // span, k % span + lo
    if some_zero:
        bb[bb == lo] = ZERO_BUCKET
    return pl.DataFrame({"attr": a, "bucket": bb, "n": c.astype(np.int64)}, schema=schema)


def host_partial(task, options: FleetOptions | None = None):
    """Read one file (a :class:`traceview.read.batch.ReadTask`) and return its
    :class:`HostPartial`, or a :class:`traceview.read.batch.Failed` for a TraceviewError
    (runs in a worker: a module-level function, pickled by name)."""
    from traceview.analysis.communication.overlap import overlap
    from traceview.analysis.steps.anatomy import profile_anatomy
    from traceview.analysis.communication.stragglers import _KINDS
    from traceview.errors import TraceviewError, UsageError
    from traceview.model.files import read_task
    from traceview.model.profiledata import ProfileData
    from traceview.read.batch import Failed

    opts = options or FleetOptions()
    td = read_task(task, memory=False)  # fleet mode reads no allocator events
    if isinstance(td, Failed):
        return td
    try:
        prof = ProfileData.from_traces([td], expand_kernels=opts.expand_kernels)
        table = prof.table
        col = table.collapse().drop(_DROP) if table.height else None
        if col is None:
            from traceview.model.optable import ATTR_SCHEMA

            col = pl.DataFrame(schema={k: v for k, v in ATTR_SCHEMA.items() if k not in _DROP}).with_columns(
                *(pl.lit(None, dtype=t).alias(c) for c, t in {
                    "count": pl.Int64, "duration_ps": pl.Int64, "self_ps": pl.Int64, "rows": pl.UInt32,
                    "min_ps": pl.Int64, "max_ps": pl.Int64, "first_ps": pl.Int64}.items()))
        moments, sketch, values = _distribution_parts(table, opts.alpha)
        if not opts.steps:
            return _partial(td, prof, col, moments, sketch, values)
        try:
            anat = profile_anatomy(prof, opts.rules, module=opts.step_module, extent=opts.step_extent,
                                   window="all", reasons=False, rows_only=True)  # the merge annotates the
            # fleet's steps
        except UsageError as exc:  # e.g. the step module has no execution on this host
            part = _partial(td, prof, col, moments, sketch, values)
            part.step_method, part.step_notes = "error", [f"{td.host}: {exc.fault}"]
            return part
        from traceview.analysis.steps import stepstats
        from traceview.analysis.steps.anatomy import STEPS_SCHEMA

        steps = anat.steps.select(list(STEPS_SCHEMA)) if anat.steps.height else pl.DataFrame(schema=STEPS_SCHEMA)
        fam, fam_names = _families_by_step(anat)
        rt = prof.runs  # the modules that ran: their programs' rows (not the wide runs frame)
        have = (set(rt.keys["module"].gather(rt.runs["key"].unique()).drop_nulls().to_list()) - {""}
                if rt.runs.height and rt.keys.height else set())
        module_self = (col.filter(pl.col("module").is_in(sorted(have))).group_by("module")
                       .agg(pl.col("self_ps").sum()) if col.height else pl.DataFrame(
                           schema={"module": pl.Utf8, "self_ps": pl.Int64}))
        ov_steps = _overlap_columns(overlap(table, steps if steps.height else None, steps_only=True).steps, steps)
        # judged alone: every device's (program's) steps numerous enough not to be pooled with
        # other hosts' (stepstats.POOL_BELOW)
        alone = bool(steps.height) and int(steps.group_by("host", "device", "program_id").len()["len"].min()) \
            >= stepstats.POOL_BELOW
        if alone:
            kind = stepstats.parse_window(opts.step_window)[0]
            if kind in ("steady", "all"):  # the anatomy's own annotation (window all, reasons the ratio
                # alone) but for the window: steady keeps the steps not flagged
                steps = anat.steps.select(list(STEPS_SCHEMA) + list(stepstats.RECORD_SCHEMA))
                if kind == "steady":
                    steps = steps.with_columns((~pl.col("outlier")).alias("in_window"))
            else:
                steps = stepstats.annotate(steps, window=opts.step_window)
        steps = steps.with_columns(pl.col(c).cast(pl.Categorical) for c in _STEP_TEXT)  # a few names, many rows
        cols = ["host", "device", "module", "op_name", "op_kind", "start_ps", "duration_ps"]
        coll = table.filter(pl.col("op_kind").is_in(_KINDS)).frame(cols) if table.height else pl.DataFrame(
            schema={c: pl.Utf8 for c in cols[:5]} | {"start_ps": pl.Int64, "duration_ps": pl.Int64})
        return HostPartial(path=str(td.path), host=td.host, format=td.format, n_events=td.n_events,
                           op_events=table.height, has_shapes=bool(td.has_shapes and table.height),
                           notes=list(prof.warnings), devices=list(prof.devices), col=col, moments=moments,
                           sketch=sketch, values=values, steps=steps, step_method=anat.method,
                           step_module=anat.module, step_notes=list(anat.notes), step_families=fam,
                           module_self=module_self, overlap_steps=ov_steps, collectives=coll,
                           family_names=fam_names, step_window=opts.step_window if alone else None,
                           steps_alone=alone)
    except TraceviewError as exc:
        return Failed(exc)


def _partial(td, prof, col, moments, sketch, values) -> HostPartial:
    """A partial without steps (``FleetOptions.steps`` False)."""
    from traceview.analysis.communication.overlap import STEPS_SCHEMA as OV_SCHEMA
    from traceview.analysis.steps.anatomy import STEPS_SCHEMA

    return HostPartial(path=str(td.path), host=td.host, format=td.format, n_events=td.n_events,
                       op_events=prof.table.height, has_shapes=bool(td.has_shapes and prof.table.height),
                       notes=list(prof.warnings), devices=list(prof.devices), col=col, moments=moments,
                       sketch=sketch, values=values, steps=pl.DataFrame(schema=STEPS_SCHEMA), step_method="off",
                       step_module=None, step_notes=[], step_families=pl.DataFrame(schema=_FAM_SCHEMA),
                       module_self=pl.DataFrame(schema={"module": pl.Utf8, "self_ps": pl.Int64}),
                       overlap_steps=pl.DataFrame(schema=OV_SCHEMA), collectives=pl.DataFrame(
                           schema={c: pl.Utf8 for c in ("host", "device", "module", "op_name", "op_kind")}
                           | {"start_ps": pl.Int64, "duration_ps": pl.Int64}))


#: the step rows' text columns, sent as categoricals (a few distinct names over many rows)
_STEP_TEXT = ("host", "device", "module")


def _text(steps: pl.DataFrame) -> pl.DataFrame:
    """A partial's step rows with :data:`_STEP_TEXT` as text again (:func:`_cat_text`)."""
    return steps.with_columns(_cat_text(steps[c]) for c in _STEP_TEXT if steps.schema.get(c) == pl.Categorical)


#: the largest categorical code :func:`_cat_text` maps through a table (else it casts)
_LUT_MAX = 1 << 20


def _cat_text(s: pl.Series) -> pl.Series:
    """A categorical series as text: its distinct values as text, gathered per row, so the
    rows' string views share one buffer of the few names (a cast writes every row's string
    again); a cast when it holds nulls or its codes span more than :data:`_LUT_MAX`."""
    if s.null_count() or not len(s):
        return s.cast(pl.Utf8)
    codes = s.to_physical()
    names = s.unique()
    at = names.to_physical().to_numpy().astype(np.int64)
    if int(at.max()) >= _LUT_MAX:
        return s.cast(pl.Utf8)
    lut = np.zeros(int(at.max()) + 1, dtype=np.uint32)
    lut[at] = np.arange(len(at), dtype=np.uint32)
    return names.cast(pl.Utf8).gather(lut[codes.to_numpy()]).alias(s.name)


#: the overlap columns a step row gives (overlap's name: the step rows' name)
_OV_KEYS = {"host": "host", "device": "device", "step": "step", "start_ps": "start_ps", "step_ps": "duration_ps"}


def _overlap_columns(ov: pl.DataFrame, steps: pl.DataFrame) -> pl.DataFrame:
    """``ov`` (overlap rows) without :data:`_OV_KEYS` when its rows are the step rows'
    windows in their order (the merge takes those columns from the step rows), else as is."""
    if ov.height and ov.height == steps.height and ov.select(list(_OV_KEYS)).equals(
            steps.select([pl.col(v).alias(k) for k, v in _OV_KEYS.items()])):
        return ov.drop(list(_OV_KEYS))
    return ov


#: a partial's op self time and occurrences per (step row, family code)
_FAM_SCHEMA = {"step_row": pl.Int32, "family": pl.UInt16, "self_ps": pl.Int64, "count": pl.Int64}


def _families_by_step(anat) -> tuple[pl.DataFrame, list]:
    """(:data:`_FAM_SCHEMA` rows, one per (step row, family) with events inside that step, by
    step row then family; the family names, sorted, the codes' order) from one pass over the
    events inside steps (exact int64 sums)."""
    from traceview.model.optable import int_bincount

    rows = anat.step_rows
    if anat.table is None or rows is None or not (rows >= 0).any():
        return pl.DataFrame(schema=_FAM_SCHEMA), []
    fam = anat.attr_family
    names = sorted(set(fam["family"].to_list()))
    code = np.zeros(anat.table.attrs.height, dtype=np.int64)
    code[fam["attr"].to_numpy().astype(np.int64)] = fam["family"].replace_strict(
        {f: i for i, f in enumerate(names)}, return_dtype=pl.Int64).to_numpy()
    ev = anat.table.events
    nf = max(len(names), 1)
    # one key per event, (step row, family); an event outside every step in an extra last bin
    key = rows.astype(np.int64)
    outside = key < 0
    n = (int(key.max()) + 1) * nf
    key *= nf
    key += code[ev["attr"].to_numpy()]
    key[outside] = n
    events = np.bincount(key, minlength=n + 1)[:n]
    cnt = ev["count"].to_numpy()
    self_ps = int_bincount(key, ev["self_ps"].to_numpy(), n + 1)[:n]
    # events of one occurrence each (the common case): the occurrences are the events
    count = events if len(cnt) and int(cnt.min()) == int(cnt.max()) == 1 else int_bincount(key, cnt, n + 1)[:n]
    have = np.flatnonzero(events)
    return pl.DataFrame({"step_row": have // nf, "family": have % nf, "self_ps": self_ps[have],
                         "count": count[have]}, schema=_FAM_SCHEMA), names


# -- the merge -----------------------------------------------------------------------------

@dataclass
class Fleet:
    """The merged result of a fleet-mode read.

    ``files`` (per file: path, host, format, events, op_events), ``hosts``, ``warnings``,
    ``has_shapes``, ``devices`` (:meth:`ProfileData.device_summary
    <traceview.model.profiledata.ProfileData.device_summary>`'s columns), ``op_events``
    (occurrences), ``op_time_ps`` (self, ps), ``by_shape`` (the columns of
    :func:`traceview.analysis.ops.aggregate.by_shape`; ``regimes`` null), ``quantiles``
    ({"exact": populations, "sketch": populations, "alpha": α, "bound": the sentence}),
    ``steps`` (:class:`traceview.analysis.steps.anatomy.StepAnatomy` with the step rows, families,
    coverage and distribution; no op table) or None with the reason in ``notes``,
    ``overlap_steps`` (overlap rows of the window's steps), ``stragglers``
    (:class:`traceview.analysis.communication.stragglers.Stragglers` or None), ``not_computed``
    ({section: why}), ``notes``."""

    files: list
    hosts: list
    warnings: list
    has_shapes: bool
    devices: pl.DataFrame
    op_events: int
    op_time_ps: int
    by_shape: pl.DataFrame
    quantiles: dict
    steps: object
    overlap_steps: pl.DataFrame
    stragglers: object
    not_computed: dict = field(default_factory=lambda: dict(NOT_COMPUTED))
    notes: list = field(default_factory=list)
    #: the merged op descriptions (:meth:`OpTable.collapse` rows of every host, attr ids kept
    #: apart) as an OpTable of one pre-aggregated row per description: what
    #: :func:`traceview.analysis.ops.roofline.roofline` and :func:`traceview.analysis.ops.kernels.kernels`
    #: read (``collapse()`` gives the exact merged rows)
    descriptions: object = None
    device_infos: list = field(default_factory=list)

    def used_devices(self) -> list:
        """The :class:`~traceview.model.schema.DeviceInfo` of the devices that ran ops (as
        :meth:`ProfileData.used_devices <traceview.model.profiledata.ProfileData.used_devices>`)."""
        used = set(self.devices.select("host", "device").iter_rows()) if self.devices.height else set()
        return [d for d in self.device_infos if (d.host, d.name) in used] or self.device_infos

    def roofline(self, peaks=None):
        """(peaks, :func:`traceview.analysis.ops.roofline.roofline` rows, its
        :func:`~traceview.analysis.ops.roofline.predicted_vs_measured` summary) over the merged
        descriptions; ``peaks`` default :func:`traceview.analysis.hardware.peaks.profile_peaks`."""
        from traceview.analysis.hardware.peaks import profile_peaks
        from traceview.analysis.ops.roofline import predicted_vs_measured, roofline

        peaks = peaks if peaks is not None else profile_peaks(self)
        roof = roofline(self.descriptions, peaks)
        return peaks, roof, predicted_vs_measured(roof)

    def kernels(self):
        """:func:`traceview.analysis.ops.kernels.kernels` over the merged descriptions."""
        from traceview.analysis.ops.kernels import kernels

        return kernels(self.descriptions)


def descriptions_table(col: pl.DataFrame):
    """An OpTable of one pre-aggregated event per merged description (count, duration and
    self time the description's sums, start its first) whose ``collapse()`` is ``col`` itself
    (``hlo_text``, ``source_stack`` null)."""
    from traceview.model.optable import ATTR_SCHEMA, OpTable

    col = col.with_columns(*(pl.lit(None, dtype=ATTR_SCHEMA[c]).alias(c) for c in _DROP if c not in col.columns))
    attrs = col.select(list(ATTR_SCHEMA)).cast(ATTR_SCHEMA)
    events = col.select("attr", pl.col("first_ps").alias("start_ps"), "duration_ps", "self_ps", "count")
    t = OpTable(events, attrs)
    t._collapsed = col.select(list(ATTR_SCHEMA) + [c for c in col.columns if c not in ATTR_SCHEMA])
    return t


def _offsets(parts: list[HostPartial]) -> list[int]:
    out, off = [], 0
    for p in parts:
        out.append(off)
        off += int(p.col["attr"].max()) + 1 if p.col.height else 0
    return out


def _stacked(frames: list, offs: list) -> pl.DataFrame:
    """The frames one under the other, each one's ``attr`` shifted by its offset (the
    partials' attr ids kept apart)."""
    out = pl.concat(frames, how="vertical")
    add = np.repeat(np.asarray(offs, dtype=np.int64), [f.height for f in frames])
    return out.with_columns((pl.col("attr").cast(pl.Int64) + pl.Series(add)).cast(pl.UInt32))


def merged_spread(col: pl.DataFrame, keys: list[str], moments: pl.DataFrame, sketch: pl.DataFrame,
                  values: pl.DataFrame, alpha: float = ALPHA) -> tuple[pl.DataFrame, dict]:
    """(``keys`` + p50_ps, p90_ps, cv per ``keys`` group of the merged collapsed rows ``col``,
    {"exact": n, "sketch": n}) from the hosts' moments, sketches and values (attr ids of
    ``col``). Quantiles: exact where every event's value came along, else read off the sketch
    (module doc); cv: pooled moments (ddof 0), null under two events or a zero mean."""
    k = col.select(["attr"] + keys).with_columns(pl.struct(keys).rank("dense").cast(pl.Int64).alias("key") - 1)
    names = k.group_by("key").agg([pl.col(c).first() for c in keys])
    nk = names.height
    lut = np.full(int(col["attr"].max()) + 1 if col.height else 0, -1, dtype=np.int64)
    lut[k["attr"].to_numpy().astype(np.int64)] = k["key"].to_numpy()
    # moments: Chan et al. pooled over the attrs of a key (exact n, float mean and M2)
    m = moments.with_columns(pl.Series("key", lut[moments["attr"].to_numpy().astype(np.int64)]))
    m = m.filter(pl.col("key") >= 0).group_by("key").agg(
        pl.col("n").sum().alias("N"), (pl.col("n") * pl.col("mean")).sum().alias("_s"),
        pl.col("n"), pl.col("mean"), pl.col("m2"))
    cv = {}
    for key, N, s, ns, means, m2s in m.iter_rows():
        mu = s / N if N else 0.0
        M2 = sum(m2s) + sum(n_ * (mu_ - mu) ** 2 for n_, mu_ in zip(ns, means))
        cv[key] = (math.sqrt(M2 / N) / mu) if N >= 2 and mu > 0 else None
    # which keys have all their values
    n_vals = np.bincount(lut[values["attr"].to_numpy().astype(np.int64)], minlength=nk) if values.height else \
        np.zeros(nk, dtype=np.int64)
    n_all = np.zeros(nk, dtype=np.int64)
    for key, N in m.select("key", "N").iter_rows():
        n_all[key] = N
    exact = (n_vals == n_all) & (n_all > 0)
    p50 = np.full(nk, np.nan)
    p90 = np.full(nk, np.nan)
    if values.height and exact.any():
        vk = lut[values["attr"].to_numpy().astype(np.int64)]
        vv = values["value"].to_numpy()
        sel = exact[vk]
        order = np.lexsort((vv[sel], vk[sel]))
        ks, vs = vk[sel][order], vv[sel][order]
        starts = np.searchsorted(ks, np.arange(nk))
        ends = np.searchsorted(ks, np.arange(nk), side="right")
        for key in np.flatnonzero(exact):
            a = vs[starts[key]:ends[key]]
            p50[key], p90[key] = np.quantile(a, [0.5, 0.9], method="linear")
    todo = np.flatnonzero(~exact & (n_all > 0))
    if len(todo):
        sk = sketch.with_columns(pl.Series("key", lut[sketch["attr"].to_numpy().astype(np.int64)]))
        sk = (sk.filter(pl.col("key").is_in(todo.tolist())).group_by("key", "bucket").agg(pl.col("n").sum())
              .sort("key", "bucket"))
        kk, bb, nn = sk["key"].to_numpy(), sk["bucket"].to_numpy(), sk["n"].to_numpy()
        rep = bucket_value(bb, alpha)
        starts = np.searchsorted(kk, todo)
        ends = np.searchsorted(kk, todo, side="right")
        for key, a, b in zip(todo.tolist(), starts.tolist(), ends.tolist()):
            cum = np.cumsum(nn[a:b])
            vals = rep[a:b]
            total = int(cum[-1])

            def order_stat(r: int) -> float:  # the r-th smallest (0-based)
                return float(vals[np.searchsorted(cum, r, side="right")])

            for q, out in ((0.5, p50), (0.9, p90)):
                h = (total - 1) * q
                lo, hi = math.floor(h), math.ceil(h)
                vlo = order_stat(lo)
                out[key] = vlo + (h - lo) * (order_stat(hi) - vlo)
    res = pl.DataFrame({"key": pl.Series(np.arange(nk), dtype=pl.Int64), "p50_ps": p50, "p90_ps": p90,
                        "cv": pl.Series([cv.get(i) for i in range(nk)], dtype=pl.Float64)}).with_columns(
        pl.col("p50_ps").fill_nan(None), pl.col("p90_ps").fill_nan(None))
    out = names.join(res, on="key", how="left").drop("key")
    return out, {"exact": int(exact.sum()), "sketch": int(len(todo))}


def merge(parts: list[HostPartial], *, split_modules: bool = True, window: str = "steady",
          step_module: str | None = None, alpha: float = ALPHA, warnings: list | None = None,
          consume: bool = False) -> Fleet:
    """One :class:`Fleet` of the hosts' partials (in host order). ``consume``: the partials'
    per-step frames are dropped (set to None) once merged, so their memory goes before the
    stragglers' (the partials are of no further use). Raises
    :class:`~traceview.errors.UsageError` on an unknown step window."""
    from traceview.analysis.ops import aggregate
    from traceview.analysis.steps.stepstats import parse_window
    from traceview.model.profiledata import device_rows, devices_and_notes

    parse_window(window)
    offs = _offsets(parts)
    col, moments, sketch, values = (_stacked([getattr(p, name) for p in parts], offs) if parts else None
                                    for name in ("col", "moments", "sketch", "values"))
    devices, warns = devices_and_notes(parts, warnings)
    keys = aggregate.by_shape_keys(split_modules)
    total_self = int(col["self_ps"].sum() or 0) if col is not None and col.height else 0
    if col is None or col.height == 0:
        by_shape = aggregate._empty_by_shape()
        q = {"exact": 0, "sketch": 0}
    else:
        spread, q = merged_spread(col, keys, moments, sketch, values, alpha)
        # a sketch's quantile may fall outside the population's exact extremes: clamped into them
        # (the exact figure lies inside, so the error only shrinks)
        clamp = lambda c: pl.col(c).clip(pl.col("min_ps").cast(pl.Float64), pl.col("max_ps").cast(pl.Float64))  # noqa: E731
        rows = (aggregate.by_shape_rows(col, keys, spread)
                .with_columns(clamp("p50_ps"), clamp("p90_ps"))
                .with_columns(pl.col("p50_ps").alias("median_ps"), pl.lit(None, dtype=pl.Utf8).alias("regimes")))
        by_shape = aggregate.finish_by_shape(rows, total_self)
    q.update(alpha=alpha, bound=(f"p50_ps/p90_ps: exact for {q['exact']} population(s); for {q['sketch']}, read off "
                                 f"a log-bucket sketch, within {alpha:.1%} (relative) of the exact figure"))
    notes: list = []
    anat, ov_steps, strag = _merge_steps(parts, col, window, step_module, notes, consume)
    return Fleet(files=[{"path": p.path, "host": p.host, "format": p.format, "events": p.n_events,
                         "op_events": p.op_events} for p in parts],
                 hosts=sorted({p.host for p in parts if p.host is not None}), warnings=warns,
                 has_shapes=any(p.has_shapes for p in parts),
                 devices=device_rows(col if col is not None and col.height else None, devices),
                 op_events=int(col["count"].sum() or 0) if col is not None and col.height else 0,
                 op_time_ps=total_self, by_shape=by_shape, quantiles=q, steps=anat, overlap_steps=ov_steps,
                 stragglers=strag, notes=notes,
                 descriptions=descriptions_table(col) if col is not None and col.height else None,
                 device_infos=devices)


def _merge_steps(parts, col, window, step_module, notes, consume=False):
    """(StepAnatomy or None, overlap rows, Stragglers or None) from the hosts' step rows."""
    from traceview.analysis.steps import stepstats
    from traceview.analysis.communication.overlap import STEPS_SCHEMA as OV_SCHEMA
    from traceview.analysis.steps.anatomy import FAMILIES_SCHEMA, STEPS_SCHEMA, StepAnatomy, _coverage
    from traceview.analysis.communication.stragglers import stragglers

    empty_ov = pl.DataFrame(schema=OV_SCHEMA)
    with_steps = [p for p in parts if p.rows("steps")]
    failed = [ln for p in parts if p.step_method == "error" for ln in p.step_notes]
    if failed:
        if len(failed) == len(parts):
            from traceview.errors import UsageError

            raise UsageError(f"steps: {failed[0]}")
        notes.append("steps and stragglers not computed in fleet mode: " + "; ".join(failed[:3])
                     + (f"; {len(failed) - 3} more host(s)" if len(failed) > 3 else ""))
        return None, empty_ov, None
    if parts and all(p.step_method == "off" for p in parts):
        notes.append("steps and stragglers not computed: fleet mode without steps (--fleet-ops: op table and devices only)")
        return None, empty_ov, None
    if not with_steps:
        return None, empty_ov, None
    methods = {(p.step_method, p.step_module) for p in with_steps}
    if step_module is None:
        ms = pl.concat([p.module_self for p in parts], how="vertical")
        dom = (ms.group_by("module").agg(pl.col("self_ps").sum()).sort(["self_ps", "module"], descending=[True, False])
               ["module"][0] if ms.height else None)
        if len(methods) > 1 or any(p.step_method == "module" and p.step_module != dom for p in with_steps):
            notes.append("steps not computed in fleet mode: the hosts found steps differently ("
                         + ", ".join(sorted(f"{m} {mod or ''}".strip() for m, mod in methods))
                         + "); name the step module")
            return None, empty_ov, None
    # the hosts' own annotations when each host's steps were judged alone for this window and no
    # two hosts share a name (the fleet's annotation is then theirs, row for row); else here
    # the step rows of every host, one under the other, their text columns as text
    # each host's step rows, their text columns as text (each host cast: a cast of the
    # concatenation copies every column; the categorical rows unpacked one host at a time)
    prep = [p.__dict__.get("_prepared") or _prepared(p) for p in with_steps]  # (_Arrived: done as they came)
    pieces = [d["steps"] for d in prep]
    names = [d["hosts"] for d in prep]
    alone = (all(p.steps_alone and p.step_window == window for p in with_steps)
             and sum(len(h) for h in names) == len(set().union(*names)))
    if consume:
        for p in with_steps:
            p.drop("steps")
    if alone:
        st = pl.concat(pieces, how="vertical")
        # (per row its (host, device) id, the ids' keys: the hosts' own, numbered on; no two
        # hosts share a name, so no two share a key)
        ids, keys, off = [], [], 0
        for d in prep:
            ids.append(d["devices"][0] + off)
            keys += d["devices"][1]
            off += len(d["devices"][1])
        dev_ids = (np.concatenate(ids), keys)
        del ids
    else:
        st = pl.concat([t.select(list(STEPS_SCHEMA)) for t in pieces], how="vertical")
        dev_ids = stepstats._device_ids(st)
        st = stepstats.annotate(st, window=window, devices=dev_ids)
    heights = {id(p): t.height for p, t in zip(with_steps, pieces)}  # each host's step rows
    del pieces, prep
    in_win = st["in_window"].to_numpy().astype(bool)
    n = int(in_win.sum())
    total_self = int(col["self_ps"].sum() or 0)
    outside = total_self - int(st["op_time_ps"].sum() or 0)
    # the numbers the coverage reads, then the window's rows (not a copy of every column); the
    # devices counted off the ids
    win_steps = st.select("duration_ps", "op_time_ps", "busy_ps", "gap_after_ps", "in_window").filter(
        pl.col("in_window"))
    cov = _coverage(win_steps, total_self, outside, excluded=st.height - n,
                    devices=int(np.count_nonzero(np.bincount(dev_ids[0][in_win], minlength=len(dev_ids[1])))))
    del win_steps
    cov_all = _coverage(st, total_self, outside, devices=len(dev_ids[1]))
    del dev_ids
    fam = (_window_families(parts, in_win, n, cov.step_ps, heights, consume, own=alone) if n
           else pl.DataFrame(schema=FAMILIES_SCHEMA))
    dist = stepstats.distribution(st, window)
    p0 = with_steps[0]
    step_notes = [ln for p in parts for ln in p.step_notes]
    anat = StepAnatomy(steps=st, families=fam, coverage=cov, method=p0.step_method, module=p0.step_module,
                       extent="", notes=step_notes, window=dist["window"], distribution=dist, coverage_all=cov_all)
    ov = _window_overlap(parts, st, in_win, empty_ov, heights, consume, own=alone)
    coll = pl.concat([p.collectives for p in parts], how="vertical")
    if consume:
        for p in parts:
            p.drop("step_families", "overlap_steps", "collectives", "steps")
            p.__dict__.pop("_prepared", None)
    strag = None
    if ov.height:
        s = stragglers(coll, ov)
        strag = s if s.summary.get("straggler") else None
    return anat, ov, strag


def _family_sums(sf: pl.DataFrame, n_codes: int, keep_rows: np.ndarray) -> tuple:
    """(self_ps, count: exact int64 sums; present: bool) per family code (``n_codes`` of them) of
    a host's per (step row, family) rows ``sf`` whose step row is kept (``keep_rows``: bool per
    step row of the host)."""
    from traceview.model.optable import int_bincount

    if not sf.height:
        return np.zeros(n_codes, dtype=np.int64), np.zeros(n_codes, dtype=np.int64), np.zeros(n_codes, dtype=bool)
    keep = keep_rows[sf["step_row"].to_numpy().astype(np.int64)]
    code = sf["family"].to_numpy()[keep].astype(np.int64)
    return (int_bincount(code, sf["self_ps"].to_numpy()[keep], n_codes),
            int_bincount(code, sf["count"].to_numpy()[keep], n_codes), np.bincount(code, minlength=n_codes) > 0)


def _prepared(p: HostPartial, window: str | None = None) -> dict:
    """What the merge takes from one host with steps, made without the other hosts: "steps",
    its step rows with their names as text (:func:`_text`); "hosts", their host names;
    "devices", their :func:`~traceview.analysis.steps.stepstats._device_ids`; and,
    with ``window`` the step window the host annotated its rows for (``steps_alone``) and its
    overlap rows its step rows' windows, "families" (:func:`_family_sums` over its window's
    steps) and "overlap" (its window's overlap rows, without the keys): the merge's figures of
    this host when every host's steps were judged alone (:func:`_merge_steps`)."""
    from traceview.analysis.steps.stepstats import _device_ids

    piece = _text(p.frame("steps"))
    ids = _device_ids(piece)
    out = {"steps": piece, "hosts": {h for h, _ in ids[1]}, "devices": ids}
    if (window is not None and p.steps_alone and p.step_window == window and "host" not in p.columns("overlap_steps")
            and p.rows("overlap_steps") == piece.height):
        own = piece["in_window"].to_numpy().astype(bool)
        out["families"] = _family_sums(p.frame("step_families"), len(p.family_names), own)
        out["overlap"] = p.frame("overlap_steps").filter(pl.Series(own))
    return out


def _window_families(parts, in_win: np.ndarray, n: int, step_ps, heights: dict, consume: bool = False,
                     own: bool = False) -> pl.DataFrame:
    """The families table (:data:`~traceview.analysis.steps.anatomy.FAMILIES_SCHEMA`, no
    n_populations) of the hosts' per (step row, family) sums over the window's steps (``in_win``
    over the concatenated step rows, ``n`` of them; ``heights``: {id(partial): its step rows}):
    exact int64 sums per family name. ``consume``: each partial's rows dropped once summed.
    ``own``: ``in_win`` is each host's own annotation (the sums :func:`_prepared` made on
    arrival are used)."""
    from traceview.analysis.steps.anatomy import FAMILIES_SCHEMA

    names = sorted({f for p in parts for f in p.family_names})
    ix = {f: i for i, f in enumerate(names)}
    self_ps = np.zeros(len(names), dtype=np.int64)
    count = np.zeros(len(names), dtype=np.int64)
    present = np.zeros(len(names), dtype=bool)
    off = 0
    for p in parts:
        h = heights.get(id(p), 0)
        got = (p.__dict__.get("_prepared") or {}).get("families") if own else None
        if got is None:
            got = _family_sums(p.frame("step_families", drop=consume), len(p.family_names), in_win[off:off + h])
        code = np.array([ix[f] for f in p.family_names], dtype=np.int64)  # (distinct: no two codes alike)
        self_ps[code] += got[0]
        count[code] += got[1]
        present[code] |= got[2]
        off += h
    have = np.flatnonzero(present)
    if not len(have):
        return pl.DataFrame(schema=FAMILIES_SCHEMA)
    return (pl.DataFrame({"family": pl.Series([names[i] for i in have.tolist()], dtype=pl.Utf8),
                          "self_ps": self_ps[have], "occurrences": count[have]})
            .with_columns(pl.col("self_ps") / n)
            .with_columns((pl.col("self_ps") / step_ps if step_ps else pl.lit(0.0)).alias("share"),
                          (pl.col("occurrences") / n).alias("per_step"),
                          pl.lit(None, dtype=pl.UInt32).alias("n_populations"))
            .select(list(FAMILIES_SCHEMA)).cast(FAMILIES_SCHEMA).sort(["self_ps", "family"], descending=[True, False]))


def _window_overlap(parts, st: pl.DataFrame, in_win: np.ndarray, empty: pl.DataFrame, heights: dict,
                    consume: bool = False, own: bool = False) -> pl.DataFrame:
    """The overlap rows of the window's steps, in the hosts' order: a host's rows that are its
    step rows' windows (:func:`_overlap_columns`) take their keys from ``st`` (the concatenated,
    annotated step rows; ``heights``: {id(partial): its rows there}); other hosts' rows are
    matched to the window's steps by (host, device, step). ``consume``: each partial's rows
    dropped once taken (a host's rows unpacked, filtered and let go one host at a time).
    ``own``: ``in_win`` is each host's own annotation (the rows :func:`_prepared` filtered on
    arrival are used)."""
    from traceview.analysis.communication.overlap import STEPS_SCHEMA as OV_SCHEMA

    hosts = [p.host for p in parts]
    distinct = len(set(hosts)) == len(hosts)
    keyed = [pl.col(v).alias(k) for k, v in _OV_KEYS.items()]
    if distinct and all("host" not in p.columns("overlap_steps") if heights.get(id(p)) else
                        not p.rows("overlap_steps") for p in parts):  # every host's rows its step rows' windows
        ov, off = [], 0
        for p in parts:
            h = heights.get(id(p), 0)
            if h:
                got = (p.__dict__.get("_prepared") or {}).get("overlap") if own else None
                ov.append(got if got is not None else
                          p.frame("overlap_steps", drop=consume).filter(pl.Series(in_win[off:off + h])))
                off += h
        if not ov:
            return empty
        return pl.concat([st.select(keyed).filter(pl.Series(in_win)), pl.concat(ov, how="vertical")],
                         how="horizontal").select(list(OV_SCHEMA))
    win = None
    out, off = [], 0
    for p in parts:
        ov, h = p.frame("overlap_steps", drop=consume), heights.get(id(p), 0)
        if distinct and h and "host" not in ov.columns:
            m = pl.Series(in_win[off:off + h])
            keys = st.slice(off, h).filter(m).select(keyed)
            out.append(pl.concat([keys, ov.filter(m)], how="horizontal").select(list(OV_SCHEMA)))
        elif ov.height:
            if "host" not in ov.columns:  # hosts named alike: the keys (the host's rows of st), then the match
                ov = pl.concat([st.slice(off, h).select(keyed), ov], how="horizontal").select(list(OV_SCHEMA))
            if win is None:
                win = st.select("host", "device", "step", "in_window").filter(pl.col("in_window")).drop("in_window")
            out.append(ov.join(win, on=["host", "device", "step"], how="semi"))
        off += h
    return pl.concat(out, how="vertical") if out else empty


# -- reading a run in fleet mode -----------------------------------------------------------

class _Arrived:
    """What the merge can do with the hosts' partials while other hosts are still being read
    (:func:`traceview.read.batch.read_many`'s ``arrived``): at the first partial, the modules
    the merge uses are imported (numpy's masked arrays too: polars asks for them at its first
    frame from numpy); with ``window`` (the merge's step window), each host with steps gets
    its :func:`_prepared` parts (kept on the partial, not pickled), so that little of the
    merge is left after the last host."""

    def __init__(self, window: str | None = None):
        self.first = True
        self.window = window

    def __call__(self, res):
        if self.window is not None and isinstance(res, HostPartial) and res.rows("steps") and \
                res.step_method not in ("error", "off"):
            res.__dict__["_prepared"] = _prepared(res, self.window)
        if self.first and isinstance(res, HostPartial):
            self.first = False
            import numpy.ma  # noqa: F401

            import traceview.analysis.communication.stragglers  # noqa: F401
            import traceview.analysis.ops.aggregate  # noqa: F401
            import traceview.analysis.steps.anatomy  # noqa: F401
            import traceview.analysis.steps.stepstats  # noqa: F401
            import traceview.model.profiledata  # noqa: F401
        return res


def load_fleet(path, *, run: str | None = None, all_runs: bool = False, max_bytes: int | None = None,
               cache=None, workers: int = 0, executor=None, scheduler: str | None = None, progress=None,
               discovery=None, stale_after_s: float | None = 7 * 24 * 3600, options: FleetOptions | None = None,
               split_modules: bool = True) -> Fleet:
    """Find the run under ``path`` (as :func:`traceview.model.load.load`) and read it in fleet
    mode: each file becomes a :class:`HostPartial` where it is read (this process, up to
    ``workers`` local processes, ``executor`` or the Dask cluster at ``scheduler``:
    :func:`traceview.read.batch.read_many`), merged here by :func:`merge`. Raises as
    ``load``: :class:`~traceview.errors.NoTraceFound`, :class:`~traceview.errors.TraceUnreadable`
    when every file is unreadable (one unreadable host among several is a warning),
    :class:`~traceview.errors.UsageError` on a bad option."""
    from traceview.errors import NoOpsFound, UsageError
    from traceview.model.files import max_bytes_default
    from traceview.model.load import _all_faults, split_results
    from traceview.read.batch import read_many, tasks_for
    from traceview.read.cache import TableCache
    from traceview.read.discover import discover

    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 0:
        raise UsageError(f"workers must be a whole number >= 0, got {workers!r}")
    opts = options or FleetOptions()
    from traceview.analysis.ops.families import rules_of
    from traceview.analysis.steps.stepstats import parse_window

    rules_of(opts.rules)
    parse_window(opts.step_window)
    disc = discovery if discovery is not None else discover(path, run=run, all_runs=all_runs,
                                                             stale_after_s=stale_after_s,
                                                             run_hint="pass run= or all_runs=True")
    store = TableCache.default() if cache is None else (cache or None)
    tasks = tasks_for(disc.files, max_bytes_default(max_bytes), cache=store)
    arrived = _Arrived(opts.step_window if opts.steps else None)
    read = functools.partial(host_partial, options=opts)
    res = read_many(tasks, read, executor=executor, scheduler=scheduler, workers=workers, progress=progress,
                    arrived=arrived)
    warnings = list(disc.warnings)
    if type(disc).__module__ == "traceview.read.remote":  # a URL's local copies are named by their URL
        from traceview.read.remote import relabel

        res = relabel(res, disc)
    else:  # as load() does: a host whose xplane is unreadable from its JSON, one trace under several names
        from traceview.model.load import copy_warnings, json_fallback

        disc = json_fallback(disc, tasks, res, warnings, max_bytes_default(max_bytes), store,
                             read=lambda t: arrived(read(t)))
        warnings.extend(copy_warnings(disc.files))
    parts, errors = split_results(res, warnings)
    if errors and not parts:
        raise _all_faults(errors, disc)
    if not any(p.col.height for p in parts):
        raise _all_faults(errors + [NoOpsFound("the trace has no HLO ops", ", ".join(p.path for p in parts))], disc)
    del res
    return merge(parts, split_modules=split_modules, window=opts.step_window, step_module=opts.step_module,
                 alpha=opts.alpha, warnings=warnings, consume=True)
