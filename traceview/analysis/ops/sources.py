"""Source attribution: which Python file and line emitted each HLO op, and roll-ups by file.

Where the source comes from (already in the op-event table, see :mod:`traceview.model.schema`):
``source_file`` / ``source_line`` (TPU ``source`` stat, GPU/CPU HLO ``metadata``) and
``source_stack`` (newline-separated ``file:line[:col]`` frames). JAX drops its own frames,
so the *direct* source is the innermost non-JAX frame — often a framework file such as
``torch/nn/modules/module.py`` or ``torchax/ops/jaten.py`` rather than the model.

Stack orientation: the schema says innermost first, and vLLM/TPU and MI300X traces write it
that way; older libtpu traces write it outermost first. :func:`frames` detects the order per
op by where the direct source sits (first or last frame) and always returns innermost first.

Origin (:func:`classify_path`)
------------------------------
``"site-packages"``: installed or interpreter code — a path with a ``site-packages`` or
``dist-packages`` directory, the Python standard library (a path through ``lib/pythonX[.Y]/``
or ``pythonXY.zip``, or ``PythonXY/Lib/`` on Windows), a vendored tree ``third_party/py/``
(Google's monorepo equivalent of site-packages), or an interpreter pseudo-file
``<frozen ...>`` / ``<embedded module ...>``.
``"project"``: every other non-empty path — the user's own code, including editable
installs, notebook cells (``<ipython-input-...>``, ``/tmp/ipykernel_*/...``) and copies of
library code moved into the project (a transplanted kernel ``my_kernels/kernel.py`` reads
``project`` where the installed ``.../site-packages/tpu_inference/kernels/...`` reads
``site-packages``; that is how a transplant shows at a glance).
``""``: no source recorded.

The *user frame* of an op is the innermost frame of its stack whose origin is ``project``
(so an op emitted inside ``torch/nn/modules/module.py`` is attributed to the model file that
called the module). When no frame is project code, the user frame is the direct source.

Roll-ups (:func:`by_file`, :func:`by_line`, :func:`by_file_and_population`) take
``frame="direct"`` (default) or ``frame="user"``. Direct is the default because it is what the
trace records (the same file:line XProf shows, no heuristic involved) and because it is the
frame that names the code that built the op — the one that changes when a kernel is
transplanted; the user frame answers "which line of *my* code is responsible" and folds every
library call into its caller, which hides exactly that distinction.

Times are integer ps. ``share`` is an op group's self time over the self time of all ops in
the input (self time, as in :mod:`traceview.analysis.ops.aggregate`, so ops nested on one line are not
counted twice); rows with no source are kept (file ``""``) so shares sum to 1. No function
raises on an empty frame; an unknown ``frame`` value raises
:class:`~traceview.errors.UsageError`.
"""

from __future__ import annotations

import re
from functools import lru_cache

import polars as pl

from traceview.errors import UsageError

PROJECT = "project"
SITE_PACKAGES = "site-packages"
UNKNOWN = ""

_SITE = re.compile(
    r"(^|/)(site-packages|dist-packages)/"
    r"|(^|/)lib/python\d+(\.\d+)?t?/"
    r"|(^|/)python\d+\.zip(/|$)"
    r"|(^|/)python\d+/lib/"
    r"|(^|/)third_party/py/",
    re.IGNORECASE,
)
_INTERPRETER = re.compile(r"^<(frozen|embedded module)\b")
_FRAME = re.compile(r"^(.*?):(\d+)(?::(\d+))?$")

#: columns :func:`attribute` adds to the op-event table
ATTRIBUTE_COLUMNS = ["src_file", "src_line", "src_origin", "user_file", "user_line", "user_origin"]


@lru_cache(maxsize=65536)
def classify_path(path: str | None) -> str:
    """``"site-packages"``, ``"project"`` or ``""`` for a source path (rule in the module doc).

    Backslashes are read as ``/``. Never raises.
    """
    if not path:
        return UNKNOWN
    p = str(path).strip().replace("\\", "/")
    if not p:
        return UNKNOWN
    if _INTERPRETER.match(p) or _SITE.search(p):
        return SITE_PACKAGES
    return PROJECT


def parse_frame(frame: str) -> tuple[str, int | None]:
    """``"path/f.py:12:7"`` or ``"path/f.py:12"`` -> ("path/f.py", 12); no line -> (frame, None)."""
    frame = frame.strip()
    m = _FRAME.match(frame)
    if not m:
        return frame, None
    return m.group(1), int(m.group(2))


def frames(stack: str | None, source_file: str = "", source_line: int | None = None) -> list[tuple[str, int | None]]:
    """The frames of a ``source_stack``, innermost first, as (file, line) pairs.

    When the direct source (``source_file``/``source_line``) matches the last frame and not the
    first, the stack was written outermost first and is reversed. Empty lines are skipped.
    """
    out = [parse_frame(f) for f in (stack or "").splitlines() if f.strip()]
    if len(out) > 1 and source_file:
        def same(fr):
            return fr[0] == source_file and (source_line is None or fr[1] == source_line)
        if same(out[-1]) and not same(out[0]):
            out.reverse()
    return out


@lru_cache(maxsize=65536)
def _attribute_one(source_file: str, source_line: int | None, stack: str) -> tuple:
    fr = frames(stack, source_file, source_line)
    if source_file:
        src = (source_file, source_line)
    elif fr:
        src = fr[0]
    else:
        src = ("", None)
    user = next((f for f in fr if classify_path(f[0]) == PROJECT), None)
    if user is None:
        user = src
    return src[0], src[1], classify_path(src[0]), user[0], user[1], classify_path(user[0])


def attribute(ops: pl.DataFrame) -> pl.DataFrame:
    """The op-event table with :data:`ATTRIBUTE_COLUMNS` added.

    ``src_file``/``src_line``: the direct source (``source_file``/``source_line``; the
    innermost stack frame when those are empty). ``src_origin``: :func:`classify_path` of it.
    ``user_file``/``user_line``/``user_origin``: the user frame (innermost project frame,
    else the direct source). Lines are Int32, null when unknown; files ``""`` when unknown.
    """
    keys = ops.select(
        pl.col("source_file").fill_null("").alias("source_file"),
        pl.col("source_line").cast(pl.Int32).alias("source_line"),
        pl.col("source_stack").fill_null("").alias("source_stack"),
    ) if ops.height else None
    schema = {"src_file": pl.Utf8, "src_line": pl.Int32, "src_origin": pl.Utf8,
              "user_file": pl.Utf8, "user_line": pl.Int32, "user_origin": pl.Utf8}
    if keys is None:
        return ops.with_columns([pl.lit(None, dtype=t).alias(c) for c, t in schema.items()]).clear()
    # one attribution per distinct (file, line, stack), found through a 64-bit hash
    h = keys.select(pl.struct(keys.columns).hash(seed=7).alias("_h"))["_h"]
    first = h.to_frame().with_row_index("_i").unique("_h", keep="first", maintain_order=True)
    codes = {hv: j for j, hv in enumerate(first["_h"].to_list())}
    rows = [_attribute_one(*keys.row(i)) for i in first["_i"].to_list()]
    table = pl.DataFrame(rows, schema=list(schema.items()), orient="row")
    idx = h.replace_strict(codes, return_dtype=pl.UInt32)
    return ops.drop([c for c in schema if c in ops.columns]).with_columns(
        [table[c].gather(idx).alias(c) for c in schema])


def _frame_cols(frame: str) -> tuple[str, str, str]:
    if frame == "direct":
        return "src_file", "src_line", "src_origin"
    if frame == "user":
        return "user_file", "user_line", "user_origin"
    raise UsageError(f"unknown source frame {frame!r}: expected 'direct' or 'user'")


def _prepared(ops, frame: str) -> tuple[pl.DataFrame, int]:
    from traceview.model.optable import OpTable

    f, l, o = _frame_cols(frame)
    if isinstance(ops, OpTable):  # every roll-up here is a sum: one row per op description will do
        ops = ops.collapse()
    if not all(c in ops.columns for c in ATTRIBUTE_COLUMNS):
        ops = attribute(ops)
    df = ops.select(
        pl.col(f).alias("file"), pl.col(l).alias("line"), pl.col(o).alias("origin"),
        "op_name", "shape", "count", "self_ps", "duration_ps")
    total = int(df["self_ps"].sum() or 0) if df.height else 0
    return df, total


def _share(total: int) -> pl.Expr:
    return (pl.col("self_ps") / total if total else pl.lit(0.0)).alias("share")


_AGGS = [pl.col("count").sum().alias("occurrences"), pl.col("self_ps").sum().alias("self_ps"),
         pl.col("op_name").n_unique().alias("n_ops")]


def by_file(ops, frame: str = "direct") -> pl.DataFrame:
    """One row per source file: file, origin, occurrences, self_ps, share, n_ops.

    ``occurrences`` sums ``count``; ``self_ps`` sums self time (ps); ``share`` = self_ps /
    self time of all ops; ``n_ops`` = distinct op names. ``frame`` picks the direct source or
    the user frame (module doc). Sorted by self time, descending. Raises UsageError on an
    unknown ``frame``.
    """
    df, total = _prepared(ops, frame)
    if df.height == 0:
        return pl.DataFrame(schema={"file": pl.Utf8, "origin": pl.Utf8, "occurrences": pl.Int64,
                                    "self_ps": pl.Int64, "share": pl.Float64, "n_ops": pl.UInt32})
    out = df.group_by("file").agg(pl.col("origin").first(), *_AGGS).with_columns(_share(total))
    return out.select(["file", "origin", "occurrences", "self_ps", "share", "n_ops"]).sort(
        ["self_ps", "file"], descending=[True, False])


def by_line(ops, frame: str = "direct") -> pl.DataFrame:
    """One row per (file, line): file, line, origin, occurrences, self_ps, share, n_ops.

    Same definitions as :func:`by_file`; ``line`` is null when the trace names no line.
    """
    df, total = _prepared(ops, frame)
    if df.height == 0:
        return pl.DataFrame(schema={"file": pl.Utf8, "line": pl.Int32, "origin": pl.Utf8,
                                    "occurrences": pl.Int64, "self_ps": pl.Int64, "share": pl.Float64,
                                    "n_ops": pl.UInt32})
    out = df.group_by(["file", "line"]).agg(pl.col("origin").first(), *_AGGS).with_columns(_share(total))
    return out.select(["file", "line", "origin", "occurrences", "self_ps", "share", "n_ops"]).sort(
        ["self_ps", "file", "line"], descending=[True, False, False], nulls_last=True)


def by_file_and_population(ops, frame: str = "direct") -> pl.DataFrame:
    """Which files emitted each (op_name, shape) population, and how much of it.

    Columns: op_name, shape, file, origin, occurrences, self_ps, share (of all ops' self
    time), population_self_ps (self time of the whole population), population_share
    (self_ps / population_self_ps: this file's part of the population; sums to 1 within a
    population). Sorted by population self time, then self time, descending.
    """
    df, total = _prepared(ops, frame)
    if df.height == 0:
        return pl.DataFrame(schema={"op_name": pl.Utf8, "shape": pl.Utf8, "file": pl.Utf8, "origin": pl.Utf8,
                                    "occurrences": pl.Int64, "self_ps": pl.Int64, "share": pl.Float64,
                                    "population_self_ps": pl.Int64, "population_share": pl.Float64})
    out = df.group_by(["op_name", "shape", "file"]).agg(
        pl.col("origin").first(), pl.col("count").sum().alias("occurrences"),
        pl.col("self_ps").sum().alias("self_ps"))
    out = out.with_columns(
        _share(total), pl.col("self_ps").sum().over(["op_name", "shape"]).alias("population_self_ps"))
    out = out.with_columns(
        pl.when(pl.col("population_self_ps") > 0)
        .then(pl.col("self_ps") / pl.col("population_self_ps"))
        .otherwise(1.0 / pl.len().over(["op_name", "shape"])).alias("population_share"))
    return out.select(["op_name", "shape", "file", "origin", "occurrences", "self_ps", "share",
                       "population_self_ps", "population_share"]).sort(
        ["population_self_ps", "op_name", "shape", "self_ps", "file"], descending=[True, False, False, True, False])


def of_table(ops, by: str = "file", frame: str = "direct") -> pl.DataFrame:
    """:func:`by_file`, :func:`by_line` or :func:`by_file_and_population` for ``by`` =
    "file", "line" or "population". Raises UsageError for another ``by`` or ``frame``."""
    if by == "line":
        return by_line(ops, frame=frame)
    if by == "file":
        return by_file(ops, frame=frame)
    if by == "population":
        return by_file_and_population(ops, frame=frame)
    raise UsageError(f"sources(by=...) must be 'file', 'line' or 'population', got {by!r}")
