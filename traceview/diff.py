"""Shape-keyed diff of two profiles (``traceview diff BASE TREATMENT``), and kernel names.

The question a treatment raises is "did the change take effect, and what did it do?". XLA's
instruction names cannot answer it: they are renumbered at every compilation (``fusion.12``
becomes ``fusion.40``) and reused across programs. The diff therefore matches *populations*:

Population key
--------------
An op outside any named kernel belongs to the population
``(kind, stem, shape, fingerprint)``:

* ``kind`` — the HLO opcode (``fusion``, ``custom-call``, ...);
* ``stem`` — the op name without XLA's uniquifying suffix (``copy_bitcast_fusion.6`` ->
  ``copy_bitcast_fusion``); XLA:CPU and TPU derive it from the fused opcodes, so it is stable
  across compilations. ``name_stem=False`` leaves it out (for comparisons across compiler
  versions that name fusions differently);
* ``shape`` — the canonical shape signature (:mod:`traceview.shapes`);
* ``fingerprint`` — :func:`population_fingerprint`: the HLO text with instruction names,
  layouts, ``backend_config``/``metadata``/``frontend_attributes``/layout constraints removed
  and kernel names reduced to their identity.

Identical computations at identical shapes (the same fusion in each of 18 layers) form one
population, with their occurrences summed: without names they cannot be told apart, and the
study's key is shape, not name.

Kernels
-------
A *kernel name* carries its configuration, e.g. ``RPAd-p_16-bq_1_1-bkv_256_256`` (see
:func:`find_kernel_name`, :func:`kernel_config`). It is looked for in the op's GPU kernel
name, op name, ``kernel_name`` attribute of the HLO text and framework op (the JAX name
stack: a Pallas kernel's ops carry ``.../RPAd-.../...``). The ops of one kernel in one program
are collapsed into one *kernel population*: its *root ops* are the tagged ops at the shallowest
name-stack depth (the TPU ``tpu_custom_call``; on CPU in interpret mode the kernel's outer
``while``). An op without a name stack (XLA:CPU emits such ops for a Pallas kernel's
reductions and loop state) belongs to kernel K when the nearest earlier and nearest later op
*with* a name stack on the same device (all lines: XLA:CPU runs a loop body on any thread of
its pool, and its ``while`` event does not enclose the body) both belong to K in the same
program. Key:
``("kernel", kernel identity, root shapes)``, the identity being the name with its numbers
replaced by ``*`` (``RPAd-p_*-bq_*_*-bkv_*_*``). ``occurrences`` of a kernel population are
its root ops' occurrences (invocations); ``events`` all the traced op events it holds.

Matching
--------
1. exact key equality;
2. kernel populations left over are paired by kernel identity: first when the modules they
   ran in have the same name after substituting the changed configuration values
   (``jit_decode_b8_bkv2048`` vs ``jit_decode_b8_bkv256`` when bkv went 2048 -> 256), then
   when exactly one unmatched population per side is left (``match`` column says which).

Everything else is ``appeared`` (treatment only) or ``vanished`` (base only).

Reported: per population the occurrence and self-time deltas; populations that appeared or
vanished; populations whose direct source file changed (:mod:`traceview.sources`); kernels
whose configuration changed; op families (:mod:`traceview.steps`); module executions; the
step-time delta (:func:`traceview.steps.anatomy` on the base's dominant module and the
treatment's module of the same name, after configuration substitution; else each side's
dominant module). Profiling-overhead notes: a population whose traced event count differs by
``overhead_factor`` (default 4) or more between the sides gets a note that per-event tracing
overhead may distort the comparison of its timing — throughput is never to be quoted from a
profiled run.

Units: every time is integer (or mean float) picoseconds; shares are fractions of all ops'
self time on that side. Errors: :func:`diff` raises the errors of :func:`traceview.load`
for bad paths and :class:`~traceview.errors.UsageError` for bad arguments.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from functools import lru_cache

import polars as pl

from .errors import UsageError
from .shapes import fingerprint_text

#: default ratio of traced event counts above which a population gets an overhead note
OVERHEAD_FACTOR = 4.0
#: populations with fewer traced events than this on both sides never get the note
OVERHEAD_MIN_EVENTS = 50
#: the study's rule, quoted in every diff that carries an overhead note
THROUGHPUT_RULE = "throughput is never to be quoted from a profiled run"

KEY = ["kind", "stem", "shape", "fingerprint"]

# -- kernel names ---------------------------------------------------------------------------

from .kernelscopes import KERNEL_NAME_RE, find_kernel_name, kernel_config  # noqa: E402 (one grammar)

_HLO_KERNEL_ATTR = re.compile(r"kernel_name\W{1,4}([A-Za-z][\w\-]*)")
_SUFFIX = re.compile(r"\.\d+$")


def kernel_id(name: str) -> str:
    """A kernel's identity without its configuration: numbers replaced by ``*``
    (``RPAd-p_16-bq_1_1-bkv_256_256`` -> ``RPAd-p_*-bq_*_*-bkv_*_*``)."""
    return re.sub(r"\d+", "*", name)


def format_config_value(v) -> str:
    """``(256, 256)`` -> ``"256_256"``, ``(16,)`` -> ``"16"``, ``"decode"`` -> ``"decode"``."""
    if isinstance(v, (tuple, list)):
        return "_".join(str(x) for x in v)
    return str(v)


def config_changes(base_name: str, treatment_name: str) -> dict:
    """``{key: (base value, treatment value)}`` for the configuration keys that differ
    between two kernel names (keys present on one side only included, the other None)."""
    a, b = kernel_config(base_name), kernel_config(treatment_name)
    return {k: (a.get(k), b.get(k)) for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)}


@lru_cache(maxsize=65536)
def _kernel_in_framework(fw: str) -> tuple[str | None, int | None]:
    m = KERNEL_NAME_RE.search(fw or "")
    if not m:
        return None, None
    return m.group(1), fw[m.end():].count("/")


@lru_cache(maxsize=65536)
def _kernel_in_hlo(hlo: str) -> str | None:
    if not hlo or "kernel_name" not in hlo:
        return None
    for m in _HLO_KERNEL_ATTR.finditer(hlo):
        k = find_kernel_name(m.group(1))
        if k:
            return k
    return None


# -- fingerprints ---------------------------------------------------------------------------

_DROP_ATTRS = ("backend_config", "metadata", "frontend_attributes", "operand_layout_constraints", "statistics")


def _drop_attr(text: str, name: str) -> str:
    """Remove ``, name=VALUE`` where VALUE is a balanced {...}, a quoted string or a word."""
    out = text
    while True:
        m = re.search(r",?\s*\b" + re.escape(name) + r"=", out)
        if not m:
            return out
        i = m.end()
        n = len(out)
        if i < n and out[i] == "{":
            depth = 0
            j = i
            while j < n:
                c = out[j]
                if c == "{":
                    depth += 1
                elif c == "}":
                    depth -= 1
                    if depth == 0:
                        j += 1
                        break
                elif c == '"':
                    k = out.find('"', j + 1)
                    while k > 0 and out[k - 1] == "\\":
                        k = out.find('"', k + 1)
                    j = n if k < 0 else k
                j += 1
        elif i < n and out[i] == '"':
            k = out.find('"', i + 1)
            while k > 0 and out[k - 1] == "\\":
                k = out.find('"', k + 1)
            j = n if k < 0 else k + 1
        else:
            j = i
            while j < n and out[j] not in ", ":
                j += 1
        out = out[:m.start()] + out[j:]


@lru_cache(maxsize=65536)
def population_fingerprint(hlo_text: str | None) -> str:
    """Fingerprint of one op's HLO text for matching across compilations.

    :func:`traceview.shapes.fingerprint_text` (instruction and operand names removed,
    layouts stripped), then ``backend_config``, ``metadata``, ``frontend_attributes``,
    ``operand_layout_constraints`` and ``statistics`` removed (compiler payloads and layouts,
    which change with tuning but not with the computation) and kernel names replaced by
    their identity (:func:`kernel_id`). ``""`` for empty text. Never raises.
    """
    if not hlo_text:
        return ""
    fp = fingerprint_text(hlo_text)
    for a in _DROP_ATTRS:
        if a + "=" in fp:
            fp = _drop_attr(fp, a)
    return KERNEL_NAME_RE.sub(lambda m: kernel_id(m.group(1)), fp).strip().rstrip(",")


# -- populations ----------------------------------------------------------------------------

POPULATION_SCHEMA = {
    "kind": pl.Utf8, "stem": pl.Utf8, "shape": pl.Utf8, "fingerprint": pl.Utf8,
    "is_kernel": pl.Boolean, "kernels": pl.List(pl.Utf8), "op_names": pl.List(pl.Utf8),
    "occurrences": pl.Int64, "events": pl.Int64, "total_ps": pl.Int64, "self_ps": pl.Int64,
    "mean_ps": pl.Float64, "share": pl.Float64, "executions": pl.Int64, "per_execution": pl.Float64,
    "modules": pl.List(pl.Utf8), "source": pl.Utf8, "source_files": pl.List(pl.Utf8), "family": pl.Utf8,
    "hlo_text": pl.Utf8,
}


def _map_unique(s: pl.Series, fn, dtype) -> pl.Series:
    vals = s.fill_null("").unique().to_list()
    table = {v: fn(v) for v in vals}
    return s.fill_null("").replace_strict(table, return_dtype=dtype)


def _absorb_sandwiched(df: pl.DataFrame) -> pl.DataFrame:
    """Give ops without a name stack the kernel of the ops around them: when, among the ops
    of the same device ordered by start (all lines), the nearest earlier and the nearest later
    op that *has* a framework op both carry kernel K in the same program, the op ran inside K
    (XLA:CPU emits such ops for a Pallas kernel's reductions and loop state)."""
    meta = pl.col("framework_op").fill_null("") != ""
    placed = df.filter(pl.col("start_ps").is_not_null()).sort(["host", "device", "start_ps", "_row"])
    if placed.height == 0:
        return df
    placed = placed.with_columns(
        pl.when(meta).then(pl.col("kname").fill_null("")).otherwise(None).alias("_m"),
        pl.when(meta).then(pl.col("_prog")).otherwise(None).alias("_p"),
    ).with_columns(
        pl.col("_m").forward_fill().over(["host", "device"]).alias("_m_prev"),
        pl.col("_m").backward_fill().over(["host", "device"]).alias("_m_next"),
        pl.col("_p").forward_fill().over(["host", "device"]).alias("_p_prev"),
        pl.col("_p").backward_fill().over(["host", "device"]).alias("_p_next"),
    )
    hit = placed.filter(~meta & pl.col("kname").is_null() & (pl.col("_m_prev") != "") & (pl.col("_m_prev") == pl.col("_m_next"))
                        & (pl.col("_p_prev") == pl.col("_prog")) & (pl.col("_p_next") == pl.col("_prog")))
    if hit.height == 0:
        return df
    upd = hit.select("_row", pl.col("_m_prev").alias("_kn"))
    return df.join(upd, on="_row", how="left").with_columns(
        pl.coalesce("kname", "_kn").alias("kname"),
        pl.when(pl.col("_kn").is_not_null()).then(pl.lit(1 << 30, dtype=pl.Int64)).otherwise(pl.col("kdepth")).alias("kdepth"),
        pl.when(pl.col("_kn").is_not_null()).then(pl.lit(False)).otherwise(pl.col("kroot")).alias("kroot"),
    ).drop("_kn")


def tag_kernels(ops: pl.DataFrame) -> pl.DataFrame:
    """The op-event table with kernel columns added (see the module doc):

    ``kname`` (Utf8, the kernel name, null for ops outside every named kernel), ``kdepth``
    (Int64, name-stack depth below the kernel's own segment; 0 when the op itself carries the
    name), ``kroot`` (Boolean, a root op of its kernel in its program) and ``kshape`` (Utf8,
    the root shapes of the kernel in that program, sorted, joined by `` | ``). Ops without a
    framework op sandwiched between ops of one kernel get that kernel (module doc).
    Never raises.
    """
    if ops.height == 0:
        return ops.with_columns(pl.lit(None, dtype=pl.Utf8).alias("kname"), pl.lit(None, dtype=pl.Int64).alias("kdepth"),
                                pl.lit(None, dtype=pl.Boolean).alias("kroot"), pl.lit(None, dtype=pl.Utf8).alias("kshape"))
    k_kernel = _map_unique(ops["kernel"], find_kernel_name, pl.Utf8)
    k_name = _map_unique(ops["op_name"], find_kernel_name, pl.Utf8)
    k_hlo = _map_unique(ops["hlo_text"], _kernel_in_hlo, pl.Utf8)
    k_fw = _map_unique(ops["framework_op"], lambda s: _kernel_in_framework(s)[0], pl.Utf8)
    d_fw = _map_unique(ops["framework_op"], lambda s: _kernel_in_framework(s)[1], pl.Int64)
    df = ops.with_row_index("_row").with_columns(
        pl.coalesce(k_kernel, k_name, k_hlo, k_fw).alias("kname"),
        pl.when(k_kernel.is_not_null() | k_name.is_not_null() | k_hlo.is_not_null()).then(pl.lit(0, dtype=pl.Int64))
        .otherwise(d_fw).alias("kdepth"),
        pl.col("module").fill_null(""), pl.col("program_id").fill_null(0).alias("_prog"),
    )
    if df["kname"].null_count() == df.height:
        return df.drop("_row", "_prog").with_columns(pl.lit(None, dtype=pl.Boolean).alias("kroot"),
                                                     pl.lit(None, dtype=pl.Utf8).alias("kshape"))
    grp = ["module", "_prog", "kname"]
    df = df.with_columns((pl.col("kdepth") == pl.col("kdepth").min().over(grp)).alias("kroot"))
    df = _absorb_sandwiched(df)
    shapes = (df.filter(pl.col("kroot").fill_null(False)).group_by(grp)
              .agg(pl.col("shape").fill_null("").unique().sort().str.join(" | ").alias("kshape")))
    df = df.join(shapes, on=grp, how="left")
    return df.sort("_row").drop("_row", "_prog")


_PREPARED: list = []  # [(ops frame, rules key, prepared frame)], most recent last


def _rules_key(rules):
    if rules is None:
        return None
    if isinstance(rules, (str, os.PathLike)):
        return ("path", str(rules))
    return tuple(repr(r) for r in rules)


def prepare(prof, rules=None) -> pl.DataFrame:
    """The op-event table of ``prof`` with the columns every diff/verify analysis needs:
    :func:`tag_kernels`'s (kname, kdepth, kroot, kshape), ``family``
    (:func:`traceview.steps.classify`; ops of a named kernel are always
    ``"attention/custom kernels"``), :func:`traceview.sources.attribute`'s (src_file,
    src_line, src_origin, user_*) and ``fingerprint`` (:func:`population_fingerprint` of the
    op's HLO text). The last few results are cached per ops frame (frames
    are treated as immutable). Raises UsageError on bad ``rules``."""
    from . import sources, steps

    key = _rules_key(rules)
    for ops, k, df in _PREPARED:
        if ops is prof.ops and k == key:
            return df
    df = tag_kernels(prof.ops)
    df = steps.classify(df, rules).with_columns(
        pl.when(pl.col("kname").is_not_null()).then(pl.lit(steps.ATTENTION)).otherwise(pl.col("family")).alias("family"))
    df = sources.attribute(df)
    df = df.with_columns(_map_unique(df["hlo_text"], population_fingerprint, pl.Utf8).alias("fingerprint"))
    _PREPARED.append((prof.ops, key, df))
    del _PREPARED[:-4]
    return df


def populations(prof, *, rules=None, name_stem: bool = True) -> pl.DataFrame:
    """One row per population of one profile (key and columns in the module doc).

    ``prof`` is a :class:`traceview.Profile` (or anything with ``ops`` and ``module_runs``).
    Columns (:data:`POPULATION_SCHEMA`): the key (kind, stem, shape, fingerprint), is_kernel,
    kernels (kernel names seen), op_names (XLA names seen, sorted), occurrences (invocations
    for kernels), events (traced op events), total_ps (wall time of the occurrences),
    self_ps, mean_ps (total_ps / occurrences), share (self_ps over all ops' self time),
    executions (of the programs it ran in, summed over devices; 0 when unknown),
    per_execution (occurrences / executions, null when unknown), modules, source (most
    frequent direct ``file:line``), source_files (sorted), family (most frequent, see
    :func:`traceview.steps.classify`), hlo_text (one example). Sorted by self time.
    Raises UsageError on bad family ``rules``.
    """
    if prof.ops.height == 0:
        return pl.DataFrame(schema=POPULATION_SCHEMA)
    df = prepare(prof, rules)
    stem_expr = (pl.col("op_name").fill_null("").str.replace(r"\.\d+$", "") if name_stem else pl.lit(""))
    is_k = pl.col("kname").is_not_null()
    df = df.with_columns(
        pl.when(is_k).then(pl.lit("kernel")).otherwise(pl.col("op_kind").fill_null("")).alias("kind"),
        pl.when(is_k).then(pl.col("kname").map_elements(kernel_id, return_dtype=pl.Utf8)).otherwise(stem_expr).alias("stem"),
        pl.when(is_k).then(pl.col("kshape")).otherwise(pl.col("shape").fill_null("")).alias("_shape"),
        pl.when(is_k).then(pl.lit("")).otherwise(pl.col("fingerprint")).alias("fingerprint"),
        # an invocation: a root op of a kernel, or any op outside kernels
        pl.when(is_k & ~pl.col("kroot").fill_null(False)).then(0).otherwise(pl.col("count")).alias("_inv"),
        pl.when(is_k & ~pl.col("kroot").fill_null(False)).then(0).otherwise(pl.col("duration_ps")).alias("_wall"),
        pl.when(pl.col("src_file") != "").then(
            pl.col("src_file") + pl.lit(":") + pl.col("src_line").cast(pl.Utf8).fill_null("?")).otherwise(pl.lit(""))
        .alias("_src"),
    ).drop("shape").rename({"_shape": "shape"})
    total_self = int(df["self_ps"].sum() or 0)
    # executions of the programs each population ran in (per device), as aggregate.occurrence_checks
    runs = prof.module_runs
    if runs is not None and runs.height:
        ex = runs.group_by(["device", "program_id"]).agg(pl.len().cast(pl.Int64).alias("_runs"))
        pairs = (df.select(KEY + ["device", "program_id"]).unique()
                 .join(ex, on=["device", "program_id"], how="left")
                 .group_by(KEY).agg(pl.col("_runs").fill_null(0).sum().alias("executions")))
    else:
        pairs = df.select(KEY).unique().with_columns(pl.lit(0, dtype=pl.Int64).alias("executions"))
    out = df.group_by(KEY).agg(
        pl.col("kname").is_not_null().any().alias("is_kernel"),
        pl.col("kname").drop_nulls().unique().sort().alias("kernels"),
        pl.col("op_name").filter(~pl.col("kname").is_not_null() | pl.col("kroot").fill_null(False))
        .unique().sort().alias("op_names"),
        pl.col("_inv").sum().cast(pl.Int64).alias("occurrences"),
        pl.col("count").sum().cast(pl.Int64).alias("events"),
        pl.col("_wall").sum().cast(pl.Int64).alias("total_ps"),
        pl.col("self_ps").sum().cast(pl.Int64).alias("self_ps"),
        pl.col("module").filter(pl.col("module") != "").unique().sort().alias("modules"),
        pl.col("_src").filter(pl.col("_src") != "").mode().sort().first().alias("source"),
        pl.col("src_file").filter(pl.col("src_file") != "").unique().sort().alias("source_files"),
        pl.col("family").mode().sort().first().alias("family"),
        pl.col("hlo_text").filter(pl.col("kroot").fill_null(True)).first().alias("hlo_text"),
    ).join(pairs, on=KEY, how="left").with_columns(
        pl.col("source").fill_null(""), pl.col("hlo_text").fill_null(""),
        pl.col("executions").fill_null(0).cast(pl.Int64),
        (pl.col("total_ps") / pl.col("occurrences")).alias("mean_ps"),
        (pl.col("self_ps") / total_self if total_self else pl.lit(0.0)).alias("share"),
    ).with_columns(
        pl.when(pl.col("executions") > 0).then(pl.col("occurrences") / pl.col("executions")).otherwise(None)
        .alias("per_execution"),
    )
    return out.select(list(POPULATION_SCHEMA)).cast(POPULATION_SCHEMA).sort(["self_ps"] + KEY, descending=[True] + [False] * 4)


def kernel_table(prof) -> pl.DataFrame:
    """One row per kernel name found in a profile.

    Columns: kernel (the full name), kernel_id, config (JSON object text of
    :func:`kernel_config`, tuples as lists), invocations (root-op occurrences), events
    (traced op events inside the kernel), self_ps (sum over its ops, ps), modules (sorted),
    shapes (root shapes, sorted), source_files (direct source files of its ops, sorted).
    Sorted by self time. Empty frame (same columns) when no op carries a kernel name.
    """
    schema = {"kernel": pl.Utf8, "kernel_id": pl.Utf8, "config": pl.Utf8, "invocations": pl.Int64,
              "events": pl.Int64, "self_ps": pl.Int64, "modules": pl.List(pl.Utf8), "shapes": pl.List(pl.Utf8),
              "source_files": pl.List(pl.Utf8)}
    if prof.ops.height == 0:
        return pl.DataFrame(schema=schema)
    df = prepare(prof).filter(pl.col("kname").is_not_null())
    if df.height == 0:
        return pl.DataFrame(schema=schema)
    out = df.group_by("kname").agg(
        pl.col("count").filter(pl.col("kroot").fill_null(False)).sum().cast(pl.Int64).alias("invocations"),
        pl.col("count").sum().cast(pl.Int64).alias("events"),
        pl.col("self_ps").sum().cast(pl.Int64).alias("self_ps"),
        pl.col("module").filter(pl.col("module") != "").unique().sort().alias("modules"),
        pl.col("shape").filter(pl.col("kroot").fill_null(False)).fill_null("").unique().sort().alias("shapes"),
        pl.col("src_file").filter(pl.col("src_file") != "").unique().sort().alias("source_files"),
    ).rename({"kname": "kernel"})
    out = out.with_columns(
        pl.col("kernel").map_elements(kernel_id, return_dtype=pl.Utf8).alias("kernel_id"),
        pl.col("kernel").map_elements(lambda k: json.dumps({a: (list(v) if isinstance(v, tuple) else v)
                                                            for a, v in kernel_config(k).items()}),
                                      return_dtype=pl.Utf8).alias("config"),
    )
    return out.select(list(schema)).cast(schema).sort(["self_ps", "kernel"], descending=[True, False])


# -- the diff -------------------------------------------------------------------------------

@dataclass
class StepDelta:
    """Mean step wall time on each side (:func:`traceview.steps.anatomy`), ps.

    ``module_*``: the module whose executions define the steps (None when the side has no
    module runs: one whole-trace step per device). ``method_*``: anatomy's method
    ("module", "trace", "markers"). ``delta_ps`` = treatment − base; ``ratio`` = treatment /
    base (None when the base step is 0).
    """

    module_base: str | None
    module_treatment: str | None
    steps_base: int
    steps_treatment: int
    step_ps_base: float
    step_ps_treatment: float
    method_base: str = ""
    method_treatment: str = ""

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
                "method_treatment": self.method_treatment}


@dataclass
class ProfileDiff:
    """Result of :func:`diff`. Frames (times in ps, shares as fractions):

    ``populations`` — one row per population, :data:`DIFF_COLUMNS`: ``status`` ("matched",
    "appeared", "vanished"), ``match`` ("exact", "kernel+module", "kernel", ""), the key of
    the base side (treatment side for appeared rows), ``shape_treatment`` (differs from
    ``shape`` only for kernel populations matched in pass 2), per side (``_base`` /
    ``_treatment``): op_names, kernels, occurrences, events, self_ps, mean_ps, share,
    per_execution, source, source_files, modules; then delta_self_ps, self_ratio,
    occurrence_ratio, events_ratio, source_changed ("file", "line" or ""), kernel_changes
    (text such as ``bkv 2048_2048 -> 256_256``), family, overhead_note. Sorted by
    ``|delta_self_ps|``.
    ``kernels`` — kernel identity, names on each side, configs, ``changes`` text, invocations
    and events per side. ``families`` — family, self_ps and share per side, delta_self_ps.
    ``modules`` — module (base name; treatment names mapped through configuration
    substitution), executions and mean_ps per side. ``steps``: :class:`StepDelta`.
    ``notes``: one line each (overhead, mismatched steps...).
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

    def overhead_notes(self) -> pl.DataFrame:
        return self.populations.filter(pl.col("overhead_note") != "")

    def summary_lines(self) -> list[str]:
        """Plain-text headline lines (what matched, step delta, kernel changes)."""
        from .render.units import fmt_time_ps

        p = self.populations
        n = {s: p.filter(pl.col("status") == s).height for s in ("matched", "appeared", "vanished")}
        lines = [f"base {self.base_label}", f"treatment {self.treatment_label}",
                 f"populations: {n['matched']} matched, {n['appeared']} appeared, {n['vanished']} vanished; "
                 f"op time {fmt_time_ps(self.op_time_ps_base)} -> {fmt_time_ps(self.op_time_ps_treatment)}; "
                 f"traced op events {self.events_base:,} -> {self.events_treatment:,}"]
        s = self.steps
        if s is not None:
            r = f" ({s.ratio:.2f}x)" if s.ratio else ""
            lines.append(f"step time {fmt_time_ps(s.step_ps_base)} -> {fmt_time_ps(s.step_ps_treatment)}{r} "
                         f"[{s.module_base or 'whole trace'} x{s.steps_base} vs "
                         f"{s.module_treatment or 'whole trace'} x{s.steps_treatment}] (profiled run)")
        for r in self.kernel_changes().iter_rows(named=True):
            lines.append(f"kernel {r['kernel_id']}: {r['changes']} "
                         f"({', '.join(r['names_base'])} -> {', '.join(r['names_treatment'])})")
        return lines

    def to_dict(self, top: int | None = None) -> dict:
        """JSON-ready dict: labels, summary, steps, kernels, families, modules, populations
        (``top`` rows by |delta| when given), notes. Times in ps."""
        pops = self.populations if top is None else self.populations.head(top)
        return {
            "base": self.base_label, "treatment": self.treatment_label, "units": "ps",
            "summary": self.summary_lines(),
            "op_time_ps": {"base": self.op_time_ps_base, "treatment": self.op_time_ps_treatment},
            "events": {"base": self.events_base, "treatment": self.events_treatment},
            "steps": self.steps.to_dict() if self.steps else None,
            "counts": {s: self.populations.filter(pl.col("status") == s).height
                       for s in ("matched", "appeared", "vanished")},
            "kernels": self.kernels.to_dicts(), "families": self.families.to_dicts(),
            "modules": self.modules.to_dicts(),
            "populations": pops.drop("hlo_text_base", "hlo_text_treatment", strict=False).to_dicts(),
            "overhead_factor": self.overhead_factor, "notes": list(self.notes),
        }

    def to_json(self, top: int | None = None, **kw) -> str:
        return json.dumps(self.to_dict(top), default=str, **kw)


_SIDE = ["op_names", "kernels", "occurrences", "events", "self_ps", "mean_ps", "share", "per_execution", "source",
         "source_files", "modules", "hlo_text"]

#: columns of :attr:`ProfileDiff.populations`
DIFF_COLUMNS = (["status", "match"] + KEY + ["shape_treatment", "is_kernel", "family"]
                + [f"{c}_base" for c in _SIDE] + [f"{c}_treatment" for c in _SIDE]
                + ["delta_self_ps", "self_ratio", "occurrence_ratio", "events_ratio", "source_changed",
                   "kernel_changes", "overhead_note"])


def _label(prof, given: str | None) -> str:
    if given:
        return given
    files = [str(t.path) for t in getattr(prof, "traces", [])]
    return ", ".join(files) if files else "<profile>"


def _as_profile(x):
    if isinstance(x, (str, os.PathLike)):
        from .profile import load

        return load(x)
    if not hasattr(x, "ops") or not hasattr(x, "module_runs"):
        raise UsageError(f"expected a Profile or a trace path, got {type(x).__name__}")
    return x


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
    if b["kind"] != t["kind"] or b["stem"] != t["stem"]:
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


def diff(base, treatment, *, rules=None, name_stem: bool = True, overhead_factor: float = OVERHEAD_FACTOR,
         overhead_min_events: int = OVERHEAD_MIN_EVENTS, labels: tuple[str, str] | None = None) -> ProfileDiff:
    """Diff two profiles population by population (method in the module doc).

    Args:
      base, treatment: :class:`traceview.Profile` objects or paths for :func:`traceview.load`.
      rules: user op families for :func:`traceview.steps.classify` (``["name=regex", ...]``).
      name_stem: include the op-name stem in the population key (default True).
      overhead_factor: ratio of traced event counts (either way) that earns a population an
        overhead note (default 4.0); must be > 1.
      overhead_min_events: populations with fewer events than this on both sides get no note.
      labels: display names for the two sides (default: their file paths).

    Returns: :class:`ProfileDiff`.
    Raises: UsageError for ``overhead_factor <= 1`` or bad rules; the errors of
      :func:`traceview.load` for bad paths.
    """
    if not overhead_factor > 1:
        raise UsageError(f"overhead factor must be > 1, got {overhead_factor!r}")
    bp, tp = _as_profile(base), _as_profile(treatment)
    b_pop = populations(bp, rules=rules, name_stem=name_stem)
    t_pop = populations(tp, rules=rules, name_stem=name_stem)
    b_label = _label(bp, labels[0] if labels else None)
    t_label = _label(tp, labels[1] if labels else None)

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
    )
    # fill is_kernel/family for appeared rows from the treatment table
    t_meta = t_pop.select(KEY + [pl.col("is_kernel").alias("_ik"), pl.col("family").alias("_fam")])
    joined = joined.join(t_meta, on=KEY, how="left", nulls_equal=True).with_columns(
        pl.coalesce("is_kernel", "_ik").alias("is_kernel"), pl.coalesce("family", "_fam").alias("family")
    ).drop("_ik", "_fam")

    kernels = _kernel_diff(bp, tp)
    changes = [config_changes(a, b) for r in kernels.filter(pl.col("changes") != "").iter_rows(named=True)
               for a in r["names_base"] for b in r["names_treatment"]]
    vmap = _value_map(changes)

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
        if sorted(fb) != sorted(ft):
            return "file"
        if (sb or "") != (st or ""):
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
    joined = joined.with_columns(pl.col("delta_self_ps").abs().alias("_abs")).sort(
        ["_abs", "status", "stem", "shape"], descending=[True, False, False, False]).drop("_abs")
    joined = joined.select(DIFF_COLUMNS)

    families = _family_diff(bp, tp, rules)
    modules = _module_diff(bp, tp, vmap)
    step = _step_delta(bp, tp, vmap)

    notes: list[str] = []
    over = joined.filter(pl.col("overhead_note") != "")
    for r in over.head(5).iter_rows(named=True):
        what = r["stem"] if r["kind"] == "kernel" else f"{r['stem'] or r['kind']} {r['shape']}"
        notes.append(f"{what}: {r['overhead_note']}")
    if over.height > 5:
        notes.append(f"... and {over.height - 5} more populations with a {overhead_factor:g}x change in traced events")
    eb = int(bp.ops["count"].sum() or 0) if bp.ops.height else 0
    et = int(tp.ops["count"].sum() or 0) if tp.ops.height else 0
    if eb and et and max(eb / et, et / eb) >= overhead_factor:
        notes.append(f"traced op events {eb:,} -> {et:,} ({max(eb / et, et / eb):.1f}x): the profiled timings of the "
                     f"two runs carry different tracing overhead; {THROUGHPUT_RULE}")
    if step is not None and step.module_base and step.module_treatment and step.module_base != step.module_treatment \
            and _subst(step.module_treatment, vmap) != step.module_base:
        notes.append(f"steps are executions of {step.module_base} (base) and {step.module_treatment} (treatment): "
                     f"different programs, compare step times with care")
    return ProfileDiff(base_label=b_label, treatment_label=t_label, populations=joined, kernels=kernels,
                       families=families, modules=modules, steps=step, op_time_ps_base=bp.op_time_ps if hasattr(bp, "op_time_ps") else 0,
                       op_time_ps_treatment=tp.op_time_ps if hasattr(tp, "op_time_ps") else 0,
                       events_base=eb, events_treatment=et, overhead_factor=overhead_factor, notes=notes)


def _kernel_diff(bp, tp) -> pl.DataFrame:
    schema = {"kernel_id": pl.Utf8, "names_base": pl.List(pl.Utf8), "names_treatment": pl.List(pl.Utf8),
              "config_base": pl.Utf8, "config_treatment": pl.Utf8, "changes": pl.Utf8,
              "invocations_base": pl.Int64, "invocations_treatment": pl.Int64,
              "events_base": pl.Int64, "events_treatment": pl.Int64,
              "self_ps_base": pl.Int64, "self_ps_treatment": pl.Int64}
    kb, kt = kernel_table(bp), kernel_table(tp)
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


def _family_diff(bp, tp, rules) -> pl.DataFrame:
    def fam(prof):
        if prof.ops.height == 0:
            return pl.DataFrame(schema={"family": pl.Utf8, "self_ps": pl.Int64, "share": pl.Float64})
        df = prepare(prof, rules)
        total = int(df["self_ps"].sum() or 0)
        return df.group_by("family").agg(pl.col("self_ps").sum().cast(pl.Int64)).with_columns(
            (pl.col("self_ps") / total if total else pl.lit(0.0)).alias("share"))

    b, t = fam(bp), fam(tp)
    out = b.join(t, on="family", how="full", coalesce=True, suffix="_treatment").rename(
        {"self_ps": "self_ps_base", "share": "share_base"})
    out = out.with_columns(pl.col("self_ps_base").fill_null(0), pl.col("self_ps_treatment").fill_null(0),
                           pl.col("share_base").fill_null(0.0), pl.col("share_treatment").fill_null(0.0))
    return out.with_columns((pl.col("self_ps_treatment") - pl.col("self_ps_base")).alias("delta_self_ps")).sort(
        ["self_ps_base", "family"], descending=[True, False])


def _module_diff(bp, tp, vmap) -> pl.DataFrame:
    def mods(prof, mapping):
        r = prof.module_runs
        if r is None or r.height == 0:
            return pl.DataFrame(schema={"module": pl.Utf8, "executions": pl.Int64, "mean_ps": pl.Float64})
        return r.with_columns(pl.col("module").map_elements(lambda m: _subst(m, mapping), return_dtype=pl.Utf8)) \
            .group_by("module").agg(pl.len().cast(pl.Int64).alias("executions"),
                                    pl.col("duration_ps").mean().alias("mean_ps"))

    b, t = mods(bp, {}), mods(tp, vmap)
    names_t = {}
    if tp.module_runs is not None and tp.module_runs.height:
        for m in tp.module_runs["module"].unique().to_list():
            names_t.setdefault(_subst(m, vmap), m)
    out = b.join(t, on="module", how="full", coalesce=True, suffix="_treatment").rename(
        {"executions": "executions_base", "mean_ps": "mean_ps_base"})
    out = out.with_columns(pl.col("module").replace_strict(names_t, default=pl.col("module"), return_dtype=pl.Utf8)
                           .alias("module_treatment"))
    return out.select("module", "module_treatment", "executions_base", "executions_treatment", "mean_ps_base",
                      "mean_ps_treatment").sort(["mean_ps_base", "module"], descending=[True, False], nulls_last=True)


def _step_delta(bp, tp, vmap) -> StepDelta | None:
    from . import steps
    from .errors import TraceviewError

    try:
        mb = steps.dominant_module(bp.ops, bp.module_runs)
        ab = steps.anatomy(bp.ops, bp.module_runs, module=mb)
        mt = None
        if mb and tp.module_runs is not None and tp.module_runs.height:
            names = tp.module_runs["module"].unique().to_list()
            if mb in names:
                mt = mb
            else:
                mt = next((m for m in names if _subst(m, vmap) == mb), None)
        if mt is None:
            mt = steps.dominant_module(tp.ops, tp.module_runs)
        at = steps.anatomy(tp.ops, tp.module_runs, module=mt)
    except TraceviewError:
        return None
    return StepDelta(module_base=ab.module, module_treatment=at.module, steps_base=ab.coverage.n_steps,
                     steps_treatment=at.coverage.n_steps, step_ps_base=ab.coverage.step_ps,
                     step_ps_treatment=at.coverage.step_ps, method_base=ab.method, method_treatment=at.method)
