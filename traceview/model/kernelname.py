"""The kernel-name grammar: names that carry a kernel's configuration (``RPAd-p_16-bq_1_1-bkv_256_256``).

Production Pallas kernels are named after their configuration (tpu-inference's ragged paged
attention names its kernels this way), and the name becomes a scope in
every HLO op the kernel emits (``op_name`` = ``jit(step)/RPAd-.../while/body/...``; on TPU
the kernel is one custom-call carrying it, also as the Mosaic ``kernel_name``). Reading the
configuration off the trace is the study's independent check that a block-size flag took
effect. This module is the one place that reads and writes such names; the bundled kernels
(``traceview.kernels.naming``) build theirs with :func:`format_kernel_name`.

Grammar: a word followed by two or more ``-key_N[_N...]`` parts, optionally ending in ``-``::

    NAME   := WORD ( "-" KEY "_" NUMS ){2,} [ "-" ]
    WORD   := [A-Za-z][A-Za-z0-9]*        KEY := [A-Za-z]+        NUMS := \\d+ ( "_" \\d+ )*

e.g. ``RPAd-p_16-bq_1_1-bkv_256_256`` or the legacy ``RPA-bq_32-bkvp_64-p_64-``. The name
must not follow a letter, digit or ``_`` (:data:`KERNEL_NAME_RE`).

Ragged paged attention names (``RPA{phase}-p_{page}-bq_{bq}_{bq_c}-bkv_{bkv}_{bkv_c}[-sw_{w}]``,
phase ``d``/``p``/``m`` for decode/prefill/mixed, sizes in tokens; the legacy
``RPA-bq_{bq}-bkvp_{pages}-p_{page}`` counts KV blocks in pages) also have canonical fields
(:func:`rpa_config`).
"""

from __future__ import annotations

import re
from functools import lru_cache

#: a configuration-carrying name (grammar in the module doc); group 1 is the name
KERNEL_NAME_RE = re.compile(r"(?<![A-Za-z0-9_])([A-Za-z][A-Za-z0-9]*(?:-[A-Za-z]+_\d+(?:_\d+)*){2,}-?)")
#: the same grammar for polars (Rust regex has no look-behind): the name is group 1
POLARS_KERNEL_NAME = r"(?:^|[^A-Za-z0-9_])([A-Za-z][A-Za-z0-9]*(?:-[A-Za-z]+_\d+(?:_\d+)*){2,}-?)"
_CONFIG_PART = re.compile(r"-([A-Za-z]+)_(\d+(?:_\d+)*)")
_HLO_KERNEL_ATTR = re.compile(r"kernel_name\W{1,4}([A-Za-z][\w\-]*)")
_NUMBER = re.compile(r"\d+")

#: ragged paged attention phases, by the letter after ``RPA``
RPA_PHASES = {"d": "decode", "p": "prefill", "m": "mixed"}
_RPA_V3 = re.compile(
    r"RPA(?P<phase>[dpm])-p_(?P<page>\d+)-bq_(?P<bq0>\d+)_(?P<bq1>\d+)-bkv_(?P<bkv0>\d+)_(?P<bkv1>\d+)(?:-sw_(?P<sw>\d+))?")
_RPA_LEGACY = re.compile(r"RPA-bq_(?P<bq>\d+)-bkvp_(?P<pages>\d+)-p_(?P<page>\d+)")


def find_kernel_name(text: str | None) -> str | None:
    """The first configuration-carrying kernel name in ``text``, or None.
    ``"jit(f)/RPAd-p_16-bq_1_1-bkv_256_256/while"`` -> ``"RPAd-p_16-bq_1_1-bkv_256_256"``.
    Never raises."""
    if not text:
        return None
    m = KERNEL_NAME_RE.search(text)
    return m.group(1) if m else None


@lru_cache(maxsize=65536)
def kernel_in_scope(framework_op: str | None) -> tuple[str | None, int | None]:
    """(kernel name, depth) of the first kernel name in a framework-op path (the JAX name
    stack): depth counts the ``/`` after the name (0: the op is the kernel's own scope).
    ``(None, None)`` without one."""
    m = KERNEL_NAME_RE.search(framework_op or "")
    if not m:
        return None, None
    return m.group(1), framework_op[m.end():].count("/")


@lru_cache(maxsize=65536)
def kernel_in_hlo(hlo_text: str | None) -> str | None:
    """The kernel name of an HLO instruction's ``kernel_name`` attribute (the Mosaic
    ``tpu_custom_call`` carries it in its backend config), or None."""
    if not hlo_text or "kernel_name" not in hlo_text:
        return None
    for m in _HLO_KERNEL_ATTR.finditer(hlo_text):
        k = find_kernel_name(m.group(1))
        if k:
            return k
    return None


def parse_config(name: str) -> dict[str, tuple[int, ...]]:
    """Only the literal ``-key_N[_N...]`` parts of a name:
    ``"RPAd-p_16-bq_1_1-bkv_256_256"`` -> ``{"p": (16,), "bq": (1, 1), "bkv": (256, 256)}``."""
    return {m.group(1): tuple(int(x) for x in m.group(2).split("_")) for m in _CONFIG_PART.finditer(name or "")}


def rpa_config(text: str) -> dict | None:
    """The canonical fields of the first ragged paged attention name in ``text``:
    ``{"phase": "decode"|"prefill"|"mixed", "page": int, "bq": (bq, bq_c), "bkv": (bkv, bkv_c)}``
    in tokens, plus ``"sliding_window"`` when present; a legacy ``RPA-bq_{bq}-bkvp_{pages}-p_{page}``
    name gives ``bkv = pages * page`` and phase ``"mixed"``. None when there is none."""
    m = _RPA_V3.search(text)
    if m:
        out = {"phase": RPA_PHASES[m["phase"]], "page": int(m["page"]),
               "bq": (int(m["bq0"]), int(m["bq1"])), "bkv": (int(m["bkv0"]), int(m["bkv1"]))}
        if m["sw"] is not None:
            out["sliding_window"] = int(m["sw"])
        return out
    m = _RPA_LEGACY.search(text)
    if m:
        page, pages = int(m["page"]), int(m["pages"])
        return {"phase": "mixed", "page": page, "bq": (int(m["bq"]), int(m["bq"])), "bkv": (pages * page, pages * page)}
    return None


@lru_cache(maxsize=4096)
def _kernel_config(name: str) -> tuple:
    out: dict = dict(parse_config(name))
    canon = rpa_config(name)
    if canon:
        for k, v in canon.items():
            out[k] = v if isinstance(v, str) else (tuple(v) if isinstance(v, (tuple, list)) else (int(v),))
    return tuple(sorted(out.items()))


def kernel_config(name: str) -> dict:
    """The configuration read off a kernel name: every ``-key_N[_N...]`` part gives
    ``key: (N, ...)``; ragged paged attention names also get the canonical fields of
    :func:`rpa_config` (``phase`` as a string, ``page``, ``bq``, ``bkv`` as tuples, in
    tokens; legacy ``bkvp`` pages converted to ``bkv`` tokens). ``{}`` when nothing is found.
    ``kernel_config("RPAd-p_16-bq_1_1-bkv_256_256")["bkv"] == (256, 256)``."""
    return dict(_kernel_config(name))


def kernel_id(name: str) -> str:
    """A kernel's identity without its configuration: numbers replaced by ``*``
    (``RPAd-p_16-bq_1_1-bkv_256_256`` -> ``RPAd-p_*-bq_*_*-bkv_*_*``)."""
    return _NUMBER.sub("*", name)


def identities(text: str) -> str:
    """``text`` with every kernel name in it replaced by its :func:`kernel_id`."""
    return KERNEL_NAME_RE.sub(lambda m: kernel_id(m.group(1)), text)


def format_config_value(v) -> str:
    """``(256, 256)`` -> ``"256_256"``, ``(16,)`` -> ``"16"``, ``"decode"`` -> ``"decode"``."""
    if isinstance(v, (tuple, list)):
        return "_".join(str(x) for x in v)
    return str(v)


def config_value(name: str, key: str):
    """The value of ``key`` as a table shows it: the name's literal ``-key_N[_N]`` part when it
    has one (``RPA-bq_32-...`` -> ``(32,)``), else the canonical field of :func:`kernel_config`
    (``bkv`` of a legacy name, ``phase``); None when the name has neither."""
    literal = parse_config(name)
    return literal[key] if key in literal else kernel_config(name).get(key)


def _canonical(v) -> tuple:
    """A configuration value with a repeated size written once: ``(32, 32)`` -> ``(32,)``
    (``bq_32`` and ``bq_32_32`` name the same block: the second number repeats the first
    for the compute block), ``(1, 2)`` unchanged."""
    v = tuple(v)
    return v[:1] if v and all(x == v[0] for x in v) else v


def config_value_matches(name: str, key: str, expected: str) -> bool:
    """Whether ``key`` of kernel ``name`` is ``expected`` (text from a check: ``32``,
    ``32_32``, ``256,256``, ``decode``). Sizes compare with a repeated size written once
    (``32`` == ``32_32``), against the literal part and the canonical field alike, so
    ``bq 32`` and ``bq 32_32`` mean the same on ``RPA-bq_32-...`` and ``RPAd-...-bq_32_32-...``."""
    values = [v for v in (parse_config(name).get(key), kernel_config(name).get(key)) if v is not None]
    for v in values:
        if isinstance(v, str):
            if v.lower() == expected.strip().lower():
                return True
            continue
        try:
            want = tuple(int(x) for x in re.split(r"[_,x]", expected.strip()) if x != "")
        except ValueError:
            return False
        if want and _canonical(v) == _canonical(want):
            return True
    return False


def config_text(name: str) -> str:
    """The literal configuration parts of a name as ``key=v[_v]`` joined by ``, ``:
    ``"p=16, bq=1_1, bkv=256_256"``."""
    return ", ".join(f"{a}={format_config_value(b)}" for a, b in parse_config(name).items())


def config_changes(base_name: str, treatment_name: str) -> dict:
    """``{key: (base value, treatment value)}`` for the configuration keys that differ
    between two kernel names (keys present on one side only included, the other None)."""
    a, b = kernel_config(base_name), kernel_config(treatment_name)
    return {k: (a.get(k), b.get(k)) for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)}


def format_kernel_name(word: str, parts: list[tuple[str, tuple[int, ...]]]) -> str:
    """Build a name of this grammar: ``format_kernel_name("RPAd", [("p", (16,)), ("bq", (1, 1)),
    ("bkv", (256, 256))])`` -> ``"RPAd-p_16-bq_1_1-bkv_256_256"``. Raises ValueError when the
    result is not a name of the grammar (a bad word or key, fewer than two parts, a negative
    number)."""
    name = word + "".join(f"-{k}_{'_'.join(str(int(v)) for v in vals)}" for k, vals in parts)
    if find_kernel_name(name) != name:
        raise ValueError(f"{name!r} is not a configuration-carrying kernel name")
    return name
