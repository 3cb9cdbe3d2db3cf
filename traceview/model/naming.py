"""The naming conventions traces follow: ``module(program_id)``, ``file:line``, the ``.N``
suffix that makes XLA instruction names unique, and 64-bit ids stored in int64 fields."""

from __future__ import annotations

import re

#: the largest unsigned 64-bit value (program ids are 64-bit fingerprints on TPU)
U64 = (1 << 64) - 1

_MODULE_NAME = re.compile(r"^(.*)\((\d+)\)$")
_SOURCE = re.compile(r"^(.*):(\d+)$")
#: XLA's uniquifying suffix of an instruction name (``fusion.12``)
SUFFIX = re.compile(r"\.\d+$")


def printable(text: str) -> str:
    """``text`` as valid Unicode: a path's undecodable bytes (Python keeps them as lone
    surrogates, ``\udcff``) written as ``\xff``, any other lone surrogate as ``\ud800``. What
    goes into a polars column, a terminal, JSON or HTML; never used to open a file."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        pass
    try:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:
        return "".join(f"\\u{ord(c):04x}" if "\ud800" <= c <= "\udfff" else c for c in text)


#: What a terminal line or a page must not receive raw: C0 controls (ESC starts ANSI escape
#: sequences, ``\r`` and ``\n`` rewrite or split a line), DEL, C1 controls (``\x9b`` is an 8-bit
#: CSI), the Unicode bidi controls (U+061C, U+200E/F, U+202A-U+202E, U+2066-U+2069) that
#: reorder what follows them on screen ("Trojan Source", CVE-2021-42574), the line and
#: paragraph separators U+2028/U+2029 (a line break to some terminals and viewers), and the
#: invisible format characters that make two names look alike (soft hyphen U+00AD, U+180E,
#: zero-width space and joiners U+200B-U+200D, U+2060-U+2064, the BOM U+FEFF, U+FFF9-U+FFFB).
_UNSAFE_WIDE = "\x80-\x9f\xad\u061c\u180e\u200b-\u200f\u2028-\u202e\u2060-\u2064\u2066-\u2069\ufeff\ufff9-\ufffb"
_UNSAFE = re.compile(f"[\x00-\x1f\x7f{_UNSAFE_WIDE}]")
_NAMED_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
_WIDE = re.compile(f"[{_UNSAFE_WIDE}]")


def json_safe(text: str) -> str:
    """JSON text (from a JSON encoder: its C0 controls already escaped) with the other
    :data:`_UNSAFE` characters, which a JSON encoder passes raw, written as ``\\uXXXX``
    escapes: the same JSON value, safe on a terminal."""
    return _WIDE.sub(lambda m: f"\\u{ord(m.group(0)):04x}", text) if _WIDE.search(text) else text


def _visible(m: re.Match) -> str:
    c = m.group(0)
    return _NAMED_ESCAPES.get(c) or (f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}")


def safe_line(text, *, keep_newlines: bool = False) -> str:
    """``text`` (any trace string) safe on one terminal line or in a page:
    :func:`printable`, then each control, bidi, separator and invisible format character (see
    :data:`_UNSAFE`) written as a visible Python-style escape (``\x1b``, ``\x00``, ``\n``,
    ``\t``, ``\x9b``, ``\u202e``, ``\u200b``, ``\ufeff``).
    Other text, backslashes included, is unchanged; the exact data stays in JSON and files.
    ``keep_newlines``: ``\n`` and ``\t`` pass (a page's ``<pre>`` of HLO text needs them)."""
    text = printable(str(text))
    if not _UNSAFE.search(text):
        return text
    if keep_newlines:
        return _UNSAFE.sub(lambda m: m.group(0) if m.group(0) in "\n\t" else _visible(m), text)
    return _UNSAFE.sub(_visible, text)


def split_module_name(name: str) -> tuple[str, int | None]:
    """``"jit_step_fun(5120112285394406626)"`` -> ("jit_step_fun", 5120112285394406626);
    a name without ``(<digits>)`` -> (name, None). The id is taken modulo 2**64."""
    m = _MODULE_NAME.match(name)
    if not m:
        return name, None
    return m.group(1), int(m.group(2)) & U64


def split_source(src: str) -> tuple[str, int | None]:
    """``"path/file.py:37"`` -> ("path/file.py", 37); no line -> (src, None); "" -> ("", None)."""
    if not src:
        return "", None
    m = _SOURCE.match(src)
    if not m:
        return src, None
    return m.group(1), int(m.group(2))


def name_stem(op_name: str) -> str:
    """An instruction name without XLA's uniquifying suffix: ``fusion.12`` -> ``fusion``."""
    return SUFFIX.sub("", op_name)


#: a module name's trailing copy number: XLA's ``.3`` or a ``(3)``
COPY = re.compile(r"(\.\d+|\(\d+\))$")
#: a bucket or configuration token of a module name: ``_``, up to four letters, digits and the
#: digits' ``_<N>`` continuations (``_b32``, ``_t32``, ``_bkv128_128``; bare: ``_128``)
BUCKET = re.compile(r"_([A-Za-z]{0,4})(\d+(?:_\d+)*)(?=_|$)")


def bucket_tokens(module: str | None) -> list[tuple[str, str]]:
    """The (letters, digits) of every :data:`BUCKET` token of a module name, copy number
    dropped: ``jit_decode_b8_bkv512`` -> [("b", "8"), ("bkv", "512")]; [] for none or no module."""
    return [(t.group(1), t.group(2)) for t in BUCKET.finditer(COPY.sub("", module))] if module else []


def program_stem(module: str | None, *, bare: bool = True) -> str:
    """A module (hlo_module) name without its copy number (:data:`COPY`) and its bucket
    tokens (:data:`BUCKET`): ``jit_decode_b32_bkv512.3`` -> ``jit_decode``; a name without
    them is unchanged, one that is nothing else kept whole; None -> "". ``bare``: a bare
    ``_<N>`` (a shape bucket) goes too (``jit_f_128`` -> ``jit_f``, the diff's population key,
    where another bucket still matches); False keeps it (``jit_f_128``: a run history's step
    program, where another bucket is other work)."""
    if not module:
        return ""
    m = COPY.sub("", module)
    return BUCKET.sub(lambda t: t.group(0) if not (bare or t.group(1)) else "", m) or m


def as_uint64(v) -> int | None:
    """A stat value (int, numeric string) as an unsigned 64-bit id: negative int64 values
    (an id stored in a signed field) wrap to their unsigned value; None for missing,
    unparseable or larger-than-64-bit values."""
    if v is None or v == "":
        return None
    try:
        x = int(v)
    except (TypeError, ValueError, OverflowError):
        return None
    if x > U64:
        return None
    return x & U64 if x < 0 else x


def as_float(v) -> float | None:
    """A stat value as a float; None for missing or unparseable values."""
    if v is None or v == "":
        return None
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


#: device lines (XLines, trace.json threads) that repeat ops derived from other lines: never
#: read as GPU kernel lines
DERIVED_LINES = ("XLA Ops", "XLA Modules", "TensorFlow", "Framework", "Steps", "Source code", "Launch Stats")

#: the XLine ``traceview export`` draws each exported step on (one event per device-step, its
#: ``step`` stat the step's number in the trace it was cut from); a GPU plane's is read back
#: as the plane's step markers
EXPORT_STEPS_LINE = "traceview steps"
