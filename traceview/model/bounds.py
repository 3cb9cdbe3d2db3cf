"""What a corrupt or hostile trace can put into the tables that no analysis can hold, bounded
where the tables are built, each bound said in a note: times that no sum can wrap, and strings
of megabytes.

Strings (:func:`cut_strings`): an op description's text columns are cut to
:data:`MAX_TEXT_CHARS` characters (``hlo_text`` to :data:`MAX_HLO_CHARS`). Real names, scopes and
stacks are a few hundred characters and HLO texts tens of kilobytes; a 50 MB op name would
otherwise cost every group-by, family rule and table cell seconds.

Times:

polars sums Int64 modulo 2**64, so one op event lasting 2**63 - 1 ps turns a table's total
negative while a line summed another way says something else. traceview clamps once, as the
tables are built, so every table and every line agrees afterwards:

* per file (:func:`clamp_file`): a negative duration becomes 0; a duration over
  :data:`MAX_EVENT_PS` becomes :data:`MAX_EVENT_PS`; a start that is negative, or whose end
  passes the int64 range, becomes null (the event keeps its duration but is not placed on
  the timeline); a self time is kept within [0, duration]; module runs likewise, except that
  a run's start is moved into range (runs are counted and laid out, so each keeps a place).
* per profile (:func:`clamp_profile`): when the durations or occurrence counts of all files
  together sum past :data:`SUM_LIMIT` (no real profile comes near: 2**62 ps is 53 days of
  op time), each is clamped to ``SUM_LIMIT // n`` over the n events, so every sum over any
  subset of events fits in int64.
"""

from __future__ import annotations

import polars as pl

from traceview.model.optable import OpTable

#: Op events longer than this (ps; 2**60 ps is 13.3 days) are impossible and clamped to it.
MAX_EVENT_PS = 1 << 60
#: Sums over a profile's events (ps, or occurrences) are kept at or below this.
SUM_LIMIT = 1 << 62
_I64 = (1 << 63) - 1


#: Most characters kept of an op description's text columns (hlo_text: :data:`MAX_HLO_CHARS`).
MAX_TEXT_CHARS = 1 << 16
MAX_HLO_CHARS = 1 << 20
_TEXT_COLUMNS = ("op_name", "op_kind", "category", "shape", "kernel", "module", "source_file", "source_stack",
                 "framework_op", "hlo_text", "device", "line")


#: characters a cut string keeps free for its marker "…[cut: N more characters]", so that a
#: cut string is within its limit (and is not cut again)
_MARK = 48


def cut_text(text: str, limit: int) -> str:
    """``text`` when it is at most ``limit`` characters, else its start and the marker
    "…[cut: N more characters]", ``limit`` characters at most."""
    if len(text) <= limit:
        return text
    keep = limit - _MARK
    return f"{text[:keep]}…[cut: {len(text) - keep} more characters]"


def cut_strings(table: OpTable, path: str) -> tuple[OpTable, list[str]]:
    """``(table, notes)`` with every text column of the op descriptions cut to its limit
    (:data:`MAX_TEXT_CHARS`, :data:`MAX_HLO_CHARS`); the input itself when nothing is over."""
    attrs = table.attrs
    cols = [c for c in _TEXT_COLUMNS if c in attrs.columns and attrs.schema[c] == pl.Utf8]
    if not attrs.height or not cols:
        return table, []
    longest = attrs.select([pl.col(c).str.len_bytes().max().alias(c) for c in cols]).row(0, named=True)
    limit = {c: MAX_HLO_CHARS if c == "hlo_text" else MAX_TEXT_CHARS for c in cols}
    over = [c for c in cols if (longest[c] or 0) > limit[c]]
    if not over:
        return table, []
    counts = attrs.select([(pl.col(c).str.len_chars() > limit[c]).sum().alias(c) for c in over]).row(0, named=True)
    over = [c for c in over if counts[c]]
    if not over:  # long in bytes, within the limit in characters
        return table, []
    cut = attrs.with_columns([
        pl.when(pl.col(c).str.len_chars() > limit[c])
        .then(pl.col(c).str.slice(0, limit[c] - _MARK) + pl.lit("…[cut: ")
              + (pl.col(c).str.len_chars() - (limit[c] - _MARK)).cast(pl.Utf8) + pl.lit(" more characters]"))
        .otherwise(pl.col(c)).alias(c) for c in over])
    what = ", ".join(f"{counts[c]} {c}" for c in over)
    return OpTable(table.events, cut), [
        f"{path}: op descriptions with strings of megabytes ({what}, up to {max(longest[c] for c in over):,} bytes): "
        f"cut to {MAX_TEXT_CHARS:,} characters ({MAX_HLO_CHARS:,} for hlo_text) so that no analysis is slowed "
        "by them; the trace is corrupt or hostile"]


_COST_COLUMNS = ("flops", "model_flops", "bytes_accessed")


def drop_bad_costs(table: OpTable, path: str) -> tuple[OpTable, list[str]]:
    """``(table, notes)`` with every FLOP or byte count that is not a finite number >= 0 (a
    trace stat of NaN, inf or a negative value) made null (unknown), the cost source of a
    description left with neither made "unknown"; the input itself when all are sound."""
    attrs = table.attrs
    cols = [c for c in _COST_COLUMNS if c in attrs.columns]
    if not attrs.height or not cols:
        return table, []
    bad = {c: (pl.col(c).is_not_null() & (~pl.col(c).is_finite() | (pl.col(c) < 0))) for c in cols}
    counts = attrs.select([e.sum().alias(c) for c, e in bad.items()]).row(0, named=True)
    if not any(counts.values()):
        return table, []
    fixed = attrs.with_columns([pl.when(e).then(None).otherwise(pl.col(c)).alias(c) for c, e in bad.items()])
    if "cost_source" in fixed.columns and "flops" in fixed.columns and "bytes_accessed" in fixed.columns:
        fixed = fixed.with_columns(pl.when(pl.col("flops").is_null() & pl.col("bytes_accessed").is_null())
                                   .then(pl.lit("unknown")).otherwise(pl.col("cost_source")).alias("cost_source"))
    what = ", ".join(f"{n} {c}" for c, n in counts.items() if n)
    return OpTable(table.events, fixed), [
        f"{path}: op descriptions with FLOP or byte counts that are not finite numbers >= 0 ({what}): "
        "treated as unknown; the trace is corrupt"]


def _days(ps: int) -> str:
    return f"{ps / 1e12 / 86400:.1f} days"


def _clamp_events(events: pl.DataFrame, dur_cap: int, count_cap: int | None = None, *,
                  keep_start: bool = False) -> pl.DataFrame:
    d, s = pl.col("duration_ps"), pl.col("start_ps")
    dur = d.clip(0, dur_cap)
    if keep_start:  # module runs: every run keeps a place (they are counted and laid out)
        start = pl.min_horizontal(s.clip(lower_bound=0), pl.lit(_I64) - dur)
    else:
        start = pl.when(s.is_null() | (s < 0) | (s > pl.lit(_I64) - dur)).then(None).otherwise(s)
    cols = [dur.alias("duration_ps"), start.alias("start_ps")]
    if "self_ps" in events.columns:
        cols.append(pl.min_horizontal(pl.col("self_ps").clip(lower_bound=0), dur).alias("self_ps"))
    if count_cap is not None and "count" in events.columns:
        cols.append(pl.col("count").clip(0, count_cap))
    return events.with_columns(cols).select(events.columns)


def file_faults(events: pl.DataFrame, path: str, what: str = "op event") -> list[str]:
    """Notes about ``events`` (``start_ps``, ``duration_ps``, ps) with negative, impossibly
    long or int64-overflowing times, each saying how :func:`clamp_file` treats them."""
    if events.height == 0:
        return []
    dur, st = events["duration_ps"], events["start_ps"]
    d_min, d_max = dur.min(), dur.max()
    s_min, s_max = st.min(), st.max()
    if (d_min is not None and d_min >= 0 and d_max <= MAX_EVENT_PS
            and (s_min is None or (s_min >= 0 and s_max <= _I64 - d_max))):
        return []
    d, s = pl.col("duration_ps"), pl.col("start_ps")
    row = events.select(
        (d < 0).sum().alias("neg"),
        (d > MAX_EVENT_PS).sum().alias("long"),
        (s.is_not_null() & ((s < 0) | (s > pl.lit(_I64) - d.clip(0, MAX_EVENT_PS)))).sum().alias("wrap"),
    ).row(0)
    neg, long_, wrap = (int(x or 0) for x in row)
    notes = []
    if neg:
        notes.append(f"{path}: {neg} {what}(s) have a negative duration: the trace is corrupt; counted as 0 ps")
    if long_:
        notes.append(f"{path}: {long_} {what}(s) last longer than {MAX_EVENT_PS} ps ({_days(MAX_EVENT_PS)}): "
                     f"the trace is corrupt; each is clamped to {_days(MAX_EVENT_PS)}")
    if wrap:
        how = ("their starts are moved into range" if what == "module run"
               else "they are kept without a start time (off the timeline)")
        notes.append(f"{path}: {wrap} {what}(s) start before the session or end past the int64 ps range: "
                     f"the trace is corrupt; {how}")
    return notes


def clamp_file(table: OpTable, module_runs, path: str) -> tuple[OpTable, object, list[str]]:
    """``(table, module_runs, notes)`` with one file's impossible times clamped (see the
    module docstring); the inputs themselves when nothing needed it. ``module_runs``: a
    :class:`~traceview.model.runtable.RunTable`."""
    notes = file_faults(table.events, path)
    if notes:
        table = OpTable(_clamp_events(table.events, MAX_EVENT_PS), table.attrs)
    run_notes = file_faults(module_runs.runs, path, "module run")
    if run_notes:
        module_runs = module_runs.with_runs(_clamp_events(module_runs.runs, MAX_EVENT_PS, keep_start=True))
    return table, module_runs, notes + run_notes


def _below(values: pl.Series) -> bool:
    """Whether ``values`` (integers) cannot sum past :data:`SUM_LIMIT`, summed as float64 or
    not: their count times their largest is at most half of it (far more than float64's
    rounding over any count of values). A pass over the column without the float64 copy
    that summing it takes."""
    top = values.max()
    return top is None or len(values) * max(int(top), 0) <= SUM_LIMIT // 2


def clamp_profile(table: OpTable, module_runs) -> tuple[OpTable, object, list[str]]:
    """``(table, module_runs, notes)`` with every event's duration and occurrence count clamped
    to ``SUM_LIMIT // n`` when their sum over the whole profile would pass :data:`SUM_LIMIT`
    (summed as float64, which cannot wrap); the inputs themselves otherwise. ``module_runs``:
    a :class:`~traceview.model.runtable.RunTable`."""
    notes = []
    ev = table.events
    if ev.height and not (_below(ev["duration_ps"]) and _below(ev["count"])):
        n = ev.height
        tot_d = float(ev["duration_ps"].cast(pl.Float64).sum() or 0.0)
        tot_c = float(ev["count"].cast(pl.Float64).sum() or 0.0)
        if tot_d > SUM_LIMIT or tot_c > SUM_LIMIT:
            cap = max(SUM_LIMIT // n, 1)
            table = OpTable(_clamp_events(ev, cap, cap), table.attrs)
            notes.append(f"the op events' durations sum to {tot_d:.3g} ps and their occurrences to {tot_c:.3g}, "
                         f"past what any profile holds (the trace is corrupt): each event is clamped to {cap} ps "
                         f"and {cap} occurrences so that no total wraps")
    if module_runs.height and not _below(module_runs.runs["duration_ps"]):
        tot = float(module_runs.runs["duration_ps"].cast(pl.Float64).sum() or 0.0)
        if tot > SUM_LIMIT:
            cap = max(SUM_LIMIT // module_runs.height, 1)
            module_runs = module_runs.with_runs(_clamp_events(module_runs.runs, cap, keep_start=True))
            notes.append(f"the module runs' durations sum to {tot:.3g} ps (the trace is corrupt): each is clamped "
                         f"to {cap} ps so that no total wraps")
    return table, module_runs, notes
