"""Custom kernels by their configuration-carrying names (``RPAd-p_16-bq_1_1-bkv_256_256``).

Production Pallas kernels are named after their configuration (tpu-inference's ragged paged
attention: ``RPAd-p_<page>-bq_<bq>_<bq_c>-bkv_<bkv>_<bkv_c>``), and the name becomes a
scope in every HLO op the kernel emits (``op_name`` = ``jit(step)/RPAd-.../while/body/...``;
on TPU the kernel is one custom-call carrying it). Reading the configuration off the trace
is the study's independent check that a block-size flag took effect.

A *kernel scope* is a name in ``framework_op`` shaped ``NAME(-key_int[_int...]){2,}``
(:data:`KERNEL_NAME_RE`; also the legacy ``RPA-bq_32-bkvp_64-p_64-``).
Its *invocations* are the events at the top of the scope (ops whose path ends at the scope
or one component below it, e.g. the outer ``while`` of an interpreted kernel or the TPU
custom-call); its time is the self time of every op inside the scope.
"""

from __future__ import annotations

import re
from functools import lru_cache

import polars as pl

#: a name carrying its configuration: a word followed by two or more ``-key_N[_N...]`` parts,
#: e.g. ``RPAd-p_16-bq_1_1-bkv_256_256`` or the legacy ``RPA-bq_32-bkvp_64-p_64-``
KERNEL_NAME_RE = re.compile(r"(?<![A-Za-z0-9_])([A-Za-z][A-Za-z0-9]*(?:-[A-Za-z]+_\d+(?:_\d+)*){2,}-?)")
_CONFIG_PART = re.compile(r"-([A-Za-z]+)_(\d+(?:_\d+)*)")
# the same grammar for polars (Rust regex has no look-behind): the name is group 1
_POLARS_NAME = r"(?:^|[^A-Za-z0-9_])([A-Za-z][A-Za-z0-9]*(?:-[A-Za-z]+_\d+(?:_\d+)*){2,}-?)"


def find_kernel_name(text: str | None) -> str | None:
    """The first configuration-carrying kernel name in ``text`` (see :data:`KERNEL_NAME_RE`),
    or None. ``"jit(f)/RPAd-p_16-bq_1_1-bkv_256_256/while"`` -> ``"RPAd-p_16-bq_1_1-bkv_256_256"``.
    Never raises."""
    if not text:
        return None
    m = KERNEL_NAME_RE.search(text)
    return m.group(1) if m else None


@lru_cache(maxsize=4096)
def _kernel_config(name: str) -> tuple:
    out: dict = {}
    for m in _CONFIG_PART.finditer(name):
        out[m.group(1)] = tuple(int(x) for x in m.group(2).split("_"))
    try:  # canonical fields of the bundled RPA naming (phase, page, bq, bkv)
        from traceview.kernels.naming import match_kernel_config
    except ImportError:  # pragma: no cover - kernels package not installed
        match_kernel_config = None
    canon = match_kernel_config(name) if match_kernel_config else None
    if canon:
        for k, v in canon.items():
            out[k] = v if isinstance(v, str) else (tuple(v) if isinstance(v, (tuple, list)) else (int(v),))
    return tuple(sorted(out.items()))


def kernel_config(name: str) -> dict:
    """The configuration read off a kernel name.

    Every ``-key_N[_N...]`` part gives ``key: (N, ...)`` (a tuple of ints); RPA names also
    get the canonical fields of :func:`traceview.kernels.naming.parse_kernel_config`
    (``phase`` as a string, ``page``, ``bq``, ``bkv`` as tuples, in tokens; legacy
    ``bkvp`` pages are converted to ``bkv`` tokens). ``{}`` when nothing is found.
    Example: ``kernel_config("RPAd-p_16-bq_1_1-bkv_256_256")["bkv"] == (256, 256)``.
    """
    return dict(_kernel_config(name))


def parse_config(name: str) -> dict[str, tuple[int, ...]]:
    """Only the literal ``-key_N[_N...]`` parts of a name:
    ``"RPAd-p_16-bq_1_1-bkv_256_256"`` -> ``{"p": (16,), "bq": (1, 1), "bkv": (256, 256)}``."""
    return {m.group(1): tuple(int(x) for x in m.group(2).split("_")) for m in _CONFIG_PART.finditer(name or "")}


def kernels(ops) -> pl.DataFrame:
    """One row per (kernel name, module): the custom kernels of a profile.

    Columns: kernel, module, config (``key=v,v`` text), invocations (events at the top of the
    scope), ops (events inside the scope), self_ps (ps), share (of all ops' self time),
    shape (the most frequent shape signature among the top events: for an interpreted
    kernel the loop state, which carries the batch; for a TPU custom-call its operands),
    source (most frequent ``file:line`` inside the scope). Sorted by self time. Empty frame
    (same columns) when no op carries a kernel scope.
    """
    schema = {"kernel": pl.Utf8, "module": pl.Utf8, "config": pl.Utf8, "invocations": pl.Int64, "ops": pl.Int64,
              "self_ps": pl.Int64, "share": pl.Float64, "shape": pl.Utf8, "source": pl.Utf8}
    from .optable import as_table, weighted_mode

    table = as_table(ops)
    if table.height == 0:
        return pl.DataFrame(schema=schema)
    total = table.total_self_ps()
    col = table.collapse()
    k = col.with_columns(pl.col("framework_op").str.extract(_POLARS_NAME, 1).alias("kernel"))
    k = k.filter(pl.col("kernel").is_not_null())
    if k.height == 0:
        return pl.DataFrame(schema=schema)
    rest = pl.col("framework_op").str.split(pl.col("kernel")).list.last().str.strip_chars("/")
    k = k.with_columns(
        pl.when(rest == "").then(0).otherwise(rest.str.count_matches("/") + 1).alias("_depth"),
        pl.when(pl.col("source_file") != "")
        .then(pl.col("source_file") + ":" + pl.col("source_line").cast(pl.Utf8).fill_null("?"))
        .otherwise(None).alias("_src"),
    )
    keys = ["kernel", "module"]
    out = k.group_by(keys).agg(
        pl.col("count").filter(pl.col("_depth") <= 1).sum().alias("invocations"),
        pl.col("count").sum().alias("ops"),
        pl.col("self_ps").sum().alias("self_ps"),
    )
    top = k.filter(pl.col("_depth") == pl.col("_depth").min().over(keys))
    out = (out.join(weighted_mode(top, keys, "shape", skip_empty=False), on=keys, how="left", nulls_equal=True)
           .join(weighted_mode(k, keys, "_src").rename({"_src": "source"}), on=keys, how="left", nulls_equal=True))
    out = out.with_columns(
        pl.col("kernel").map_elements(lambda n: ", ".join(f"{a}={'_'.join(map(str, b))}" for a, b in parse_config(n).items()),
                                      return_dtype=pl.Utf8).alias("config"),
        (pl.col("self_ps") / total if total else pl.lit(0.0)).alias("share"),
        pl.col("shape").fill_null(""), pl.col("source").fill_null(""),
    )
    return out.select(list(schema)).sort(["self_ps", "kernel", "module"], descending=[True, False, False])
