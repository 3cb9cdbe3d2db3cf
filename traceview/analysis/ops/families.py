"""Op families: which kind of work each HLO op is (attention kernels, matmuls, collectives...).

Families (:func:`family_of`, :func:`classify`), first match wins, user rules first:

==========================  ======================================================================
family                      ops
==========================  ======================================================================
user rules                  ``name=regex`` rules (:func:`parse_rules`), searched in op_name,
                            hlo_text, framework_op and source_file; ``name=FIELD:regex``
                            searches one field only (:data:`RULE_FIELDS`); built-in rule sets
                            by name (:data:`RULE_SETS`, e.g. ``study``)
attention/custom kernels    custom-calls that are not a GEMM/convolution library call nor a
                            layout-only call (``ConcatBitcast``, ``MoveToHost/Device``) — Pallas /
                            Mosaic (``tpu_custom_call``), Triton and other hand-written kernels;
                            fusion/custom-call ops whose name, GPU kernel name or
                            custom_call_target matches RPA|ragged|paged|attention|attn|flash|mosaic|
                            pallas|tpu_custom_call|triton; and every op inside a Pallas kernel run
                            in interpret mode (CPU): a framework-op path component other than
                            ``jit(...)`` matching RPA|pallas|mosaic|paged|ragged|flash (so the
                            wrapper's pads and slices under ``jit(ragged_paged_attention)`` are not)
matmul/convolution          opcodes dot / convolution; GEMM/conv library calls (``__cublas$gemm``,
                            cuBLASLt, hipBLAS(Lt), rocBLAS, ``__cudnn$conv*``, MIOpen, oneDNN);
                            names like ``gemm_fusion*``, ``cublas*``; XLA:CPU's XNNPACK/YNNPACK
                            library fusions (``xnn_fusion``, ``ynn_fusion``); TPU categories
                            ``convolution``, ``convolution fusion``; ``output fusion`` / ``custom
                            fusion`` whose framework op is a dot_general / conv_general / einsum /
                            matmul
collectives                 all-reduce, all-gather, reduce-scatter, all-to-all, ragged-all-to-all,
                            collective-permute, collective-broadcast, send, recv (and their
                            ``-start``/``-done`` halves), by opcode, category or op name
copies and conversions      copy, copy-start/done, convert, bitcast, bitcast-convert, transpose,
                            reshape, slice, dynamic-slice, dynamic-update-slice, concatenate, pad,
                            gather; TPU category ``data formatting``; layout-only custom-calls;
                            ``wrapped_<one of these>`` fusions; TPU-style fusion names made only of
                            these words (``copy_bitcast_fusion``); ``custom fusion`` ops whose
                            framework op is one of these (TPU gather fusions)
sampling                    source file, stack or framework op mentions sample/sampler/sampling,
                            top_k/top_p/topk, binary_search, argmax/argmin/argsort or sort; opcode
                            sort
elementwise fusions         every other fusion (loop, input, output, ...) and elementwise, reduce,
                            broadcast, iota, select, compare, clamp opcodes
other                       the rest (while/call/conditional bodies' self time, scatter, rng,
                            infeed/outfeed, async wrappers of unknown ops, unknown opcodes)
==========================  ======================================================================

Decisions: the category ``custom fusion`` is XLA's own kCustom fusion kind (GPU GEMM/cuDNN
fusions, TPU gather fusions, XLA:CPU XNNPACK fusions), not a hand-written kernel, so it is
classified by what it wraps (dot -> matmul, gather/slice -> copies, else elementwise) and is not
an attention/custom kernel unless its name says so. XNNPACK/YNNPACK fusions are counted as
matmul because XLA:CPU hands them the dot-containing fusions; their element-wise epilogues come
along. dynamic-update-slice and gather are data movement without arithmetic (the KV-cache
write and embedding lookups), so they are copies; scatter may combine values and stays in
other. XLA:GPU names fusions after their *root* only (``loop_convert_fusion`` may compute an
exp and then convert), so a ``loop_``/``input_`` fusion is never classified by its name
(elementwise); TPU names list the fused opcodes, so a TPU fusion named only with data-movement
words is a copy. Sampling comes after copies (the family order): a convert inside the sampler
counts as a copy. A ``sort`` or ``top_k`` used outside a sampler (MoE routing) lands in sampling;
add a user rule to move it.

Errors: bad rules raise :class:`~traceview.errors.UsageError` with a one-line message.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Iterable

import polars as pl

from traceview.errors import UsageError
from traceview.model.kernelname import find_kernel_name
from traceview.model.profiledata import check_regex
from traceview.model.naming import SUFFIX as _SUFFIX

ATTENTION = "attention/custom kernels"
MATMUL = "matmul/convolution"
COLLECTIVES = "collectives"
COPIES = "copies and conversions"
SAMPLING = "sampling"
ELEMENTWISE = "elementwise fusions"
OTHER = "other"

#: default families in matching order
FAMILIES = (ATTENTION, MATMUL, COLLECTIVES, COPIES, SAMPLING, ELEMENTWISE, OTHER)


_TARGET = re.compile(r'custom_call_target="([^"]*)"')
_KERNEL_NAME = re.compile(r"(^|[^A-Za-z])RPA|ragged|paged|attention|attn|flash|mosaic|pallas|tpu_custom_call|triton",
                          re.IGNORECASE)
_KERNEL_SCOPE = re.compile(r"(^|[^A-Za-z])RPA|pallas|mosaic|paged|ragged|flash", re.IGNORECASE)
_GEMM_TARGET = re.compile(r"cublas|hipblas|rocblas|gemm|matmul|cudnn\$conv|cudnn.*conv|miopen|onednn.*(matmul|conv)",
                          re.IGNORECASE)
_GEMM_NAME = re.compile(r"gemm|cublas|hipblas|rocblas|matmul|cudnn-conv|(^|[_.])dot([_.]|$)|(^|_)convolution|"
                        r"^(ynn|xnn)_fusion|onednn",
                        re.IGNORECASE)
_LAYOUT_TARGETS = re.compile(r"^(ConcatBitcast|MoveToHost|MoveToDevice)$")
_DOT_FRAMEWORK = re.compile(r"dot_general|conv_general|einsum|matmul|(^|/)dot(/|:|$)", re.IGNORECASE)
_COLLECTIVE = re.compile(r"^(all-reduce|all-gather|reduce-scatter|all-to-all|ragged-all-to-all|collective-permute|"
                         r"collective-broadcast|send|recv)(-start|-done)?(\.\d+)?$")
_COLLECTIVE_NAME = re.compile(r"^(all-reduce|all-gather|reduce-scatter|all-to-all|ragged-all-to-all|"
                              r"collective-permute|collective-broadcast)")
_MOVE_OPS = frozenset({"copy", "copy-start", "copy-done", "convert", "bitcast", "bitcast-convert", "transpose",
                       "reshape", "slice", "dynamic-slice", "dynamic-update-slice", "concatenate", "pad", "gather"})
_MOVE_FRAMEWORK = re.compile(r"(^|/)(gather|dynamic_slice|dynamic_update_slice|slice|concatenate|pad|transpose|"
                             r"reshape|copy|convert_element_type)(:|$)")
_MOVE_WORDS = frozenset({"copy", "start", "done", "convert", "bitcast", "transpose", "reshape", "slice", "dynamic",
                         "update", "concatenate", "pad", "gather"})
_SAMPLING = re.compile(r"(?<![a-z])sampl(e|er|ers|ing)(?![a-z])|(?<![a-z])top_?[kp](?![a-z])|binary_search|"
                       r"(?<![a-z])arg(max|min|sort)(?![a-z])|(?<![a-z])sort(?![a-z])", re.IGNORECASE)
#: words every :data:`_SAMPLING` match holds (lower case): ASCII text without any has none
_SAMPLING_WORDS = ("sampl", "top", "nary_search", "arg", "sort")
_ELEMENTWISE = frozenset("""abs add and atan2 cbrt ceil clamp compare complex cos cosine divide erf exp
    exponential exponential-minus-one expm1 floor imag is-finite log log-plus-one log1p logistic maximum minimum
    multiply negate not or popcnt power real remainder round-nearest-afz round-nearest-even rsqrt select
    shift-left shift-right-arithmetic shift-right-logical sign sin sine sqrt subtract tan tanh xor
    reduce reduce-window reduce-precision broadcast iota map constant clz""".split())


#: the fields a rule may name (``NAME=FIELD:REGEX``) and the text each searches: ``op`` the HLO
#: op name, ``kind`` the opcode, ``hlo`` the HLO text, ``scope`` the framework op (the JAX name
#: stack / TF op path, ``jit(f)/attention/dot_general``: ``jax.named_scope`` names land here),
#: ``file`` the direct source file, ``line`` the direct ``file:line`` followed by the source stack's
#: frames (``file:line[:col]``), one per line, searched in multi-line mode (``^``/``$`` anchor
#: each frame: ``line:model\.py:95$``), ``stack`` the stack alone. Without a field a rule searches op, hlo, scope and file.
RULE_FIELDS = {"op": "op_name", "kind": "op_kind", "hlo": "hlo_text", "scope": "framework_op",
               "file": "source_file", "line": "_line", "stack": "source_stack"}
_DEFAULT_FIELDS = ("op_name", "hlo_text", "framework_op", "source_file")
_FIELD_PREFIX = re.compile(r"^(" + "|".join(RULE_FIELDS) + r"):")
#: a rule's regex that starts like a field prefix (a bare word and one colon: not ``std::``)
_LIKE_FIELD = re.compile(r"^([A-Za-z_]+):(?!:)")

#: built-in rule sets, selected by name where a rules file is expected (``--families study``):
#: ``study`` splits the bundled engine's decode step by the named scopes its model emits
#: (:data:`traceview.engine_shim.model.SCOPES`) into the study's blocks; what no scope covers
#: (embedding, unscoped copies) is ``other``
RULE_SETS = {
    "study": ("attention=scope:(^|[/;])attention(/|;|$)", "gate-up=scope:(^|[/;])mlp_gate_up(/|;|$)",
              "down=scope:(^|[/;])mlp_down(/|;|$)", "logits=scope:(^|[/;])logits(/|;|$)",
              "sampler=scope:(^|[/;])sampler(/|;|$)", "other=op:.*"),
}


@dataclass(frozen=True)
class FamilyRule:
    """A user family: ops whose op_name, hlo_text, framework_op or source_file matches
    ``pattern`` (a search, in polars' regex engine: Rust ``regex``, linear time in the text's
    length, no look-around or back-references) belong to family ``name``; with ``field`` (a
    key of :data:`RULE_FIELDS`) only that field is searched."""

    name: str
    pattern: str
    field: str = ""

    def matches(self, op_name: str, hlo_text: str, framework_op: str, source_file: str, *, op_kind: str = "",
                source_line: int | None = None, source_stack: str = "") -> bool:
        row = {"op_name": op_name, "hlo_text": hlo_text, "framework_op": framework_op, "source_file": source_file,
               "op_kind": op_kind, "source_stack": source_stack,
               "_line": line_text(source_file, source_line, source_stack)}
        cols = (RULE_FIELDS[self.field],) if self.field else _DEFAULT_FIELDS
        return bool(pl.Series([row[c] for c in cols], dtype=pl.Utf8).str.contains(self._rx()).any())

    def _rx(self) -> str:
        return "(?m)" + self.pattern if self.field == "line" else self.pattern

    def expr(self) -> pl.Expr:
        """True where the row's fields (op_name, hlo_text, framework_op, source_file, or the
        one ``field``; ``_line`` for ``line``) match."""
        cols = (RULE_FIELDS[self.field],) if self.field else _DEFAULT_FIELDS
        return pl.any_horizontal([pl.col(c).str.contains(self._rx()) for c in cols])


def line_text(source_file: str, source_line, source_stack: str) -> str:
    """What a ``line:`` rule searches: ``file:line`` of the direct source ("" when unknown), then
    the stack's frames, newline-separated."""
    head = f"{source_file}:{source_line}" if source_file and source_line is not None else ""
    return "\n".join(x for x in (head, source_stack or "") if x)


def parse_rule(text: str, where: str = "") -> FamilyRule:
    """``"name=regex"`` or ``"name=FIELD:regex"`` (FIELD a key of :data:`RULE_FIELDS`) ->
    :class:`FamilyRule`. The name is stripped; the regex is taken as written after the first
    ``=`` (and the field prefix). Raises UsageError (naming ``where``, e.g. ``file:line``)
    when there is no ``=``, the name or regex is empty, the regex starts like a field that is
    none (``name:...``), or the regex does not compile in polars' engine."""
    at = f"{where}: " if where else ""
    if "=" not in text:
        raise UsageError(f"{at}bad family rule {text.strip()!r}: expected NAME=REGEX or NAME=FIELD:REGEX")
    name, rx = text.split("=", 1)
    name = name.strip()
    if not name:
        raise UsageError(f"{at}bad family rule {text.strip()!r}: the family name before '=' is empty")
    rx = rx.strip()
    m = _FIELD_PREFIX.match(rx)
    fld = m.group(1) if m else ""
    if m:
        rx = rx[m.end():].strip()
    elif (w := _LIKE_FIELD.match(rx)) is not None:  # a misspelt field would search every field for its text
        case = " (fields are lowercase)" if w.group(1).lower() in RULE_FIELDS else ""
        raise UsageError(f"{at}bad family rule {text.strip()!r}: unknown field {w.group(1)!r}{case} (fields: "
                         f"{', '.join(RULE_FIELDS)}); to search for the text '{w.group(0)}' write (?:{w.group(1)}):")
    if not rx:
        raise UsageError(f"{at}bad family rule {text.strip()!r}: the regular expression after "
                         f"'{'=' + fld + ':' if fld else '='}' is empty")
    try:
        check_regex(rx)
    except UsageError as exc:
        raise UsageError(f"{at}bad family rule {text.strip()!r}: {exc}") from None
    return FamilyRule(name, rx, fld)


def parse_rules(lines: Iterable[str]) -> list[FamilyRule]:
    """Rules from ``name=regex`` strings; blank lines and lines starting with ``#`` are
    skipped. Raises UsageError on the first bad rule (its 1-based position in the message)."""
    if isinstance(lines, (str, bytes)):
        raise UsageError("family rules must be a list of 'NAME=REGEX' strings or a rules file path")
    out = []
    for i, line in enumerate(lines, 1):
        if isinstance(line, FamilyRule):
            out.append(line)
            continue
        s = str(line).strip()
        if not s or s.startswith("#"):
            continue
        out.append(parse_rule(s, where=f"rule {i}"))
    return out


def read_rules(path: str | os.PathLike) -> list[FamilyRule]:
    """Rules from a file, one ``name=regex`` per line, ``#`` comments and blank lines
    ignored; a name of :data:`RULE_SETS` (``study``) is that built-in set (a file of that name
    is ``./study``). Raises UsageError when the file cannot be read or a line is bad (message
    names ``path:line``)."""
    from traceview.analysis.rulefiles import config_lines

    if isinstance(path, str) and path in RULE_SETS:
        return [parse_rule(s, where=f"rule set {path}") for s in RULE_SETS[path]]
    return [parse_rule(s, where=where) for where, s in config_lines(path, "family rules")]


def rules_of(rules) -> list[FamilyRule]:
    if rules is None:
        return []
    if isinstance(rules, (str, os.PathLike)):
        return read_rules(rules)
    if isinstance(rules, (bytes, dict)) or not hasattr(rules, "__iter__"):
        raise UsageError(f"family rules must be a rules file's path or a list of 'name=regex' strings, "
                         f"got {type(rules).__name__}")
    return parse_rules(rules)


def unmatched_rules(rules, families: Iterable[str]) -> str | None:
    """``"the family rules (N families: a, b, c, d ...)"`` when ``rules`` (as :func:`rules_of`
    takes them) name families of which none is among ``families`` (those the ops fell into;
    a catch-all ``other`` matches everything and is not counted), else None."""
    named = {r.name for r in rules_of(rules)} - {"other"}
    if not named or named & set(families):
        return None
    return f"the family rules ({len(named)} families: {', '.join(sorted(named)[:4])}{' ...' if len(named) > 4 else ''})"


def _fusion_name_is_move(op_name: str) -> bool:
    base = _SUFFIX.sub("", op_name)
    if base.startswith("wrapped_"):
        return base[len("wrapped_"):].replace("_", "-") in _MOVE_OPS
    if base.startswith(("loop_", "input_")) or not base.endswith("_fusion"):
        return False
    words = [w for w in base[: -len("_fusion")].split("_") if w]
    return bool(words) and all(w in _MOVE_WORDS for w in words)


def _in_kernel_scope(framework_op: str) -> bool:
    """A framework-op path component (not a ``jit(...)`` wrapper) names a Pallas kernel (a
    configuration-carrying name of :mod:`traceview.model.kernelname`, or a word such as
    ``pallas`` or ``flash``): the ops of a kernel run in interpret mode (XLA:CPU) carry
    ``.../RPAd-p_16-.../while/...``."""
    for comp in framework_op.split("/")[1:]:
        if comp and not comp.startswith(("jit(", "pjit(")) and (_KERNEL_SCOPE.search(comp) or find_kernel_name(comp)):
            return True
    return False


def _sampling_in(text: str) -> bool:
    """Whether :data:`_SAMPLING` matches ``text``; ASCII text without one of its
    :data:`_SAMPLING_WORDS` is not searched (the search tries every position)."""
    if text.isascii():
        low = text.lower()
        if not any(w in low for w in _SAMPLING_WORDS):
            return False
    return _SAMPLING.search(text) is not None


@lru_cache(maxsize=65536)
def family_of(op_name: str, op_kind: str, category: str, hlo_text: str, framework_op: str,
              source_file: str, source_stack: str = "", kernel: str = "") -> str:
    """Default family of one op (table in the module doc). Never raises."""
    kind = (op_kind or "").lower()
    cat = (category or "").lower()
    m = _TARGET.search(hlo_text or "")
    target = m.group(1) if m else ""
    base = _SUFFIX.sub("", op_name or "")
    is_custom_call = kind == "custom-call" or cat == "custom-call"
    gemm_call = bool(_GEMM_TARGET.search(target)) or bool(_GEMM_NAME.search(op_name or "")) or (
        cat == "custom fusion" and bool(_DOT_FRAMEWORK.search(framework_op or "")))
    layout_call = bool(_LAYOUT_TARGETS.match(target))
    # attention / custom kernels
    if is_custom_call and not gemm_call and not layout_call:
        return ATTENTION
    if _in_kernel_scope(framework_op or ""):
        return ATTENTION
    if kind in ("custom-call", "fusion", "") and not gemm_call and not layout_call and (
            _KERNEL_NAME.search(op_name or "") or _KERNEL_NAME.search(target) or _KERNEL_NAME.search(kernel or "")):
        return ATTENTION
    # matmul / convolution
    if kind in ("dot", "convolution") or gemm_call or cat in ("convolution", "convolution fusion") or (
            cat == "output fusion" and _DOT_FRAMEWORK.search(framework_op or "")):
        return MATMUL
    # collectives
    if _COLLECTIVE.match(kind) or _COLLECTIVE.match(cat) or _COLLECTIVE_NAME.match(base):
        return COLLECTIVES
    # copies and conversions
    if (kind in _MOVE_OPS or cat == "data formatting" or layout_call or base in _MOVE_OPS
            or base.removesuffix("-start").removesuffix("-done") in _MOVE_OPS
            or (kind in ("fusion", "") and _fusion_name_is_move(op_name or ""))
            or (cat == "custom fusion" and _MOVE_FRAMEWORK.search(framework_op or ""))):
        return COPIES
    # sampling
    if (kind == "sort" or _sampling_in(source_file or "") or _sampling_in(source_stack or "")
            or _sampling_in(framework_op or "")):
        return SAMPLING
    # elementwise fusions
    if kind == "fusion" or cat.endswith("fusion") or kind in _ELEMENTWISE or cat == "non-fusion elementwise":
        return ELEMENTWISE
    return OTHER


_CLASSIFY_COLS = ["op_name", "op_kind", "category", "hlo_text", "framework_op", "source_file", "source_stack", "kernel"]


def classify(ops: pl.DataFrame, rules=None) -> pl.DataFrame:
    """The op-event table (a wide frame) with a ``family`` column (Utf8) added.

    ``rules``: None, a list of ``"name=regex"`` strings (or :class:`FamilyRule`), or a path
    (str / PathLike) to a rules file. User rules are tried in order before the defaults.
    Raises UsageError on bad rules.
    """
    rs = rules_of(rules)
    if ops.height == 0:
        return ops.with_columns(pl.lit(None, dtype=pl.Utf8).alias("family")).clear()
    keys = ops.select([pl.col(c).cast(pl.Utf8).fill_null("") if c in ops.columns else pl.lit("").alias(c)
                       for c in _CLASSIFY_COLS]
                      + [pl.col("source_line").cast(pl.Int32) if "source_line" in ops.columns
                         else pl.lit(None, dtype=pl.Int32).alias("source_line")])
    # one classification per distinct op description, found through a 64-bit hash of the columns
    h = keys.select(pl.struct(_CLASSIFY_COLS + ["source_line"]).hash(seed=7).alias("_h"))["_h"]
    first = h.to_frame().with_row_index("_i").unique("_h", keep="first", maintain_order=True)
    rows = keys[first["_i"]]
    fams = _families(rs, rows)
    return ops.drop("family", strict=False).with_columns(
        h.replace_strict(dict(zip(first["_h"], fams)), return_dtype=pl.Utf8).alias("family"))


def _families(rs: list[FamilyRule], keys: pl.DataFrame) -> list[str]:
    """The family of each row of ``keys`` (the :data:`_CLASSIFY_COLS` as strings): the first
    user rule that matches (all rules evaluated in polars' linear-time regex engine over every
    row at once), else :func:`family_of`."""
    user = [None] * keys.height
    if rs and keys.height:
        k = keys
        if any(r.field == "line" for r in rs):
            k = keys.with_columns(pl.struct("source_file", "source_line", "source_stack").map_elements(
                lambda d: line_text(d["source_file"], d["source_line"], d["source_stack"]),
                return_dtype=pl.Utf8).alias("_line"))
        user = k.select(pl.coalesce([pl.when(r.expr()).then(pl.lit(r.name)) for r in rs]).alias("f"))["f"].to_list()
    n = len(_CLASSIFY_COLS)
    return [u if u is not None else family_of(*row[:n]) for u, row in zip(user, keys.iter_rows())]


def attr_families(table, rules=None) -> pl.DataFrame:
    """Family of every op description of an :class:`~traceview.model.optable.OpTable` that has
    events: columns attr (UInt32), family (Utf8). Same rules as :func:`classify`."""
    rs = rules_of(rules)
    col = table.collapse()
    keys = col.select([pl.col(c).cast(pl.Utf8).fill_null("") for c in _CLASSIFY_COLS] + [pl.col("source_line")])
    fams = _families(rs, keys)
    return pl.DataFrame({"attr": col["attr"], "family": pl.Series("family", fams, dtype=pl.Utf8)})
