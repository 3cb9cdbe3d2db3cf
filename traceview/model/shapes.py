"""HLO shapes: parse HLO instruction text and build canonical shape signatures.

A *shape signature* identifies what an HLO op computed on, independent of where it ran:
``result <- operand, operand, ...`` with each array written ``dtype[d0,d1,...]`` and tuples
as ``(a, b)``. Layouts (``{1,0}``), TPU tiling (``:T(8,128)(2,1)``), memory-space
annotations (``S(1)``), dynamic-size markers and element-size overrides are dropped, so the
same shapes compare equal across devices, runs, chips and compiler versions.

Custom-call results that end in a rank-1 ``s8``/``u8`` array (the cuBLAS / hipBLASLt / cuDNN
workspace, e.g. ``(bf16[8192,8192], s8[79691776])``) drop that member: its size depends on
the library's heuristics, not on the problem.

Grammar followed: XLA's HLO text printer (``xla/hlo/ir/hlo_instruction.cc``,
``xla/shape_util.cc`` ``HumanStringWithLayout``), observed on TPU ``XLA Ops`` metadata names.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: xla.PrimitiveType enum number -> HLO text name (OpenXLA's xla_data.proto).
PRIMITIVE_TYPES: dict[int, str] = {
    1: "pred", 2: "s8", 3: "s16", 4: "s32", 5: "s64", 6: "u8", 7: "u16", 8: "u32", 9: "u64",
    10: "f16", 11: "f32", 12: "f64", 13: "tuple", 14: "opaque", 15: "c64", 16: "bf16",
    17: "token", 18: "c128", 19: "f8e5m2", 20: "f8e4m3fn", 21: "s4", 22: "u4",
    23: "f8e4m3b11fnuz", 24: "f8e5m2fnuz", 25: "f8e4m3fnuz", 26: "s2", 27: "u2",
    28: "f8e4m3", 29: "f8e3m4", 30: "s1", 31: "u1", 32: "f4e2m1fn", 33: "f8e8m0fnu",
    34: "buffer",
}

#: element bit widths (xla/primitive_util.h BitWidth); pred is stored as one byte.
ELEMENT_BITS: dict[str, int] = {
    "pred": 8, "s1": 1, "u1": 1, "s2": 2, "u2": 2, "s4": 4, "u4": 4, "s8": 8, "u8": 8,
    "s16": 16, "u16": 16, "s32": 32, "u32": 32, "s64": 64, "u64": 64, "f16": 16, "bf16": 16,
    "f32": 32, "f64": 64, "c64": 64, "c128": 128, "f8e5m2": 8, "f8e4m3fn": 8, "f8e4m3": 8,
    "f8e3m4": 8, "f8e4m3b11fnuz": 8, "f8e5m2fnuz": 8, "f8e4m3fnuz": 8, "f8e8m0fnu": 8,
    "f4e2m1fn": 4, "token": 0, "opaque": 0,
}


@dataclass(frozen=True)
class Shape:
    """An HLO shape without layout: an array (``dtype``, ``dims``) or a tuple (``members``)."""

    dtype: str
    dims: tuple[int, ...] = ()
    members: tuple["Shape", ...] | None = None

    @property
    def is_tuple(self) -> bool:
        return self.members is not None

    def leaves(self) -> list["Shape"]:
        """Array shapes in order, flattening tuples."""
        if self.members is None:
            return [self]
        out: list[Shape] = []
        for m in self.members:
            out.extend(m.leaves())
        return out

    @property
    def elements(self) -> int:
        """Number of elements (sum over tuple members)."""
        if self.members is not None:
            return sum(m.elements for m in self.members)
        n = 1
        for d in self.dims:
            n *= d
        return n

    @property
    def bytes(self) -> int:
        """Size in bytes, rounding sub-byte element types up per array."""
        if self.members is not None:
            return sum(m.bytes for m in self.members)
        return (self.elements * ELEMENT_BITS.get(self.dtype, 0) + 7) // 8

    def __str__(self) -> str:
        if self.members is not None:
            return "(" + ", ".join(str(m) for m in self.members) + ")"
        return f"{self.dtype}[{','.join(map(str, self.dims))}]"


@dataclass(frozen=True)
class HloInstruction:
    """One parsed HLO instruction: name, opcode, result shape and operand shapes/names."""

    name: str
    opcode: str
    result: Shape | None
    operands: tuple[Shape | None, ...]
    operand_names: tuple[str, ...]
    attributes: str = ""

    def signature(self) -> str:
        """The canonical shape signature (see the module docstring)."""
        return signature(self.result, self.operands, self.opcode)


_ARRAY = re.compile(r"([a-z][a-z0-9]*)\[([^\]]*)\]")
_HEAD = re.compile(r"\s*(?:ROOT\s+)?%?([^\s=]+)\s*=\s*")
_OPCODE = re.compile(r"\s*([A-Za-z][\w\-\.]*)\(")


def _skip_layout(text: str, i: int) -> int:
    """Skip a ``{...}`` layout at text[i] (no nested braces in layouts)."""
    if i < len(text) and text[i] == "{":
        j = text.find("}", i)
        return len(text) if j < 0 else j + 1
    return i


def _parse_dims(body: str) -> tuple[int, ...]:
    dims = []
    for part in body.split(","):
        part = part.strip().lstrip("<=").strip()
        if not part:
            continue
        if part == "?":
            dims.append(-1)
            continue
        try:
            dims.append(int(part))
        except ValueError:
            dims.append(-1)
    return tuple(dims)


#: Deepest tuple nesting parsed; deeper text is not a shape (XLA's shapes nest a few levels).
MAX_TUPLE_DEPTH = 64


def parse_shape(text: str, i: int = 0, _depth: int = 0) -> tuple[Shape | None, int]:
    """Parse one HLO shape starting at ``text[i]``; return (shape, index after it).

    Returns (None, i) when no shape starts there, or when tuples nest deeper than
    :data:`MAX_TUPLE_DEPTH`. Never raises on malformed text.
    """
    n = len(text)
    while i < n and text[i] == " ":
        i += 1
    if i < n and text[i] == "(":
        if _depth >= MAX_TUPLE_DEPTH:
            return None, i
        members = []
        i += 1
        while i < n:
            while i < n and text[i] in " ,":
                i += 1
            if i < n and text[i] == ")":
                i += 1
                break
            m, j = parse_shape(text, i, _depth + 1)
            if m is None or j == i:
                # not a shape list: give up on the tuple
                return None, i
            members.append(m)
            i = j
        i = _skip_layout(text, i)
        return Shape("tuple", (), tuple(members)), i
    m = _ARRAY.match(text, i)
    if not m:
        return None, i
    dtype = m.group(1)
    j = _skip_layout(text, m.end())
    return Shape(dtype, _parse_dims(m.group(2))), j


def _matching_paren(text: str, i: int) -> int:
    """Index of the ')' closing the '(' at text[i] (or len(text))."""
    depth = 0
    n = len(text)
    while i < n:
        c = text[i]
        if c in "({[":
            depth += 1
        elif c in ")}]":
            depth -= 1
            if depth == 0:
                return i
        elif c == '"':
            j = text.find('"', i + 1)
            i = n if j < 0 else j
        i += 1
    return n


def _split_top(text: str) -> list[str]:
    parts, depth, start = [], 0, 0
    for k, c in enumerate(text):
        if c in "({[":
            depth += 1
        elif c in ")}]":
            depth -= 1
        elif c == "," and depth == 0:
            parts.append(text[start:k])
            start = k + 1
    tail = text[start:]
    if tail.strip():
        parts.append(tail)
    return parts


def parse_instruction(text: str) -> HloInstruction | None:
    """Parse HLO instruction text such as TPU ``XLA Ops`` metadata names, e.g.
    ``%fusion.3 = (bf16[8,128]{1,0}, f32[8]{0}) fusion(bf16[8,128]{1,0} %p0), kind=kLoop``.

    Returns None when the text is not an instruction (e.g. a plain op name). Never raises.
    """
    if not text or "=" not in text:
        return None
    m = _HEAD.match(text)
    if not m:
        return None
    name = m.group(1)
    result, i = parse_shape(text, m.end())
    if result is None:
        return None
    om = _OPCODE.match(text, i)
    if not om:
        return None
    opcode = om.group(1)
    open_at = om.end() - 1
    close_at = _matching_paren(text, open_at)
    operands, names = [], []
    for part in _split_top(text[open_at + 1:close_at]):
        shape, j = parse_shape(part.strip(), 0)
        rest = part.strip()[j:].strip()
        if shape is None and not rest.startswith("%"):
            continue  # literal / attribute-like argument (constant, parameter number)
        operands.append(shape)
        names.append(rest.lstrip("%"))
    attrs = text[close_at + 1:].lstrip(", ").strip()
    return HloInstruction(name, opcode, result, tuple(operands), tuple(names), attrs)


def instruction_signature(text: str, cache: dict) -> tuple[str, str, str] | None:
    """(name, opcode, signature) of HLO instruction text, as :func:`parse_instruction` gives
    them (``ins.name``, ``ins.opcode``, ``ins.signature()``); None when it is not one.

    ``cache`` (a dict the caller keeps) holds the parse per text with its instruction names
    (``%name`` tokens) blanked: the opcode and shapes do not depend on them, and the
    descriptions of a profile repeat a few thousand such patterns under millions of names."""
    if not text or "=" not in text:
        return None
    m = _HEAD.match(text)
    if not m:
        return None
    key = _NAME_REF.sub("%_", text[m.end():])
    hit = cache.get(key, cache)
    if hit is cache:
        ins = parse_instruction(text)
        hit = None if ins is None else (ins.opcode, ins.signature())
        cache[key] = hit
    return None if hit is None else (m.group(1), hit[0], hit[1])


def strip_workspace(result: Shape | None, opcode: str) -> Shape | None:
    """Drop a trailing rank-1 s8/u8 workspace member from a custom-call tuple result."""
    if result is None or opcode != "custom-call" or not result.is_tuple or len(result.members) < 2:
        return result
    last = result.members[-1]
    if not last.is_tuple and last.dtype in ("s8", "u8") and len(last.dims) == 1:
        kept = result.members[:-1]
        return kept[0] if len(kept) == 1 else Shape("tuple", (), kept)
    return result


def signature(result: Shape | None, operands, opcode: str = "") -> str:
    """Canonical signature ``result <- op0, op1``; "" when the result shape is unknown."""
    result = strip_workspace(result, opcode)
    if result is None:
        return ""
    ops = ", ".join("?" if o is None else str(o) for o in operands)
    return f"{result} <- {ops}" if ops else str(result)


def canonical_shape_text(text: str) -> str:
    """Strip layouts/tiling/memory spaces from free-form shape text, e.g. the TPU
    ``shape_with_layout`` stat ``f32[5,1024]{1,0:T(8,128)}`` -> ``f32[5,1024]``."""
    shape, _ = parse_shape(text, 0)
    return "" if shape is None else str(shape)


def shape_from_proto(proto) -> Shape:
    """Convert an ``xla.ShapeProto`` message (see :mod:`traceview.read.xplane.protos`) to a :class:`Shape`."""
    et = PRIMITIVE_TYPES.get(proto.element_type, f"type{proto.element_type}")
    if et == "tuple":
        return Shape("tuple", (), tuple(shape_from_proto(m) for m in proto.tuple_shapes))
    return Shape(et, tuple(proto.dimensions))  # repeated int64: Python ints already


_NAME_REF = re.compile(r"%[\w\-\.]+")


def fingerprint_text(text: str) -> str:
    """HLO text with instruction names removed and layouts stripped, for matching the same
    computation across compilations whose instruction names were renumbered."""
    ins = parse_instruction(text)
    if ins is None:
        return _NAME_REF.sub("%_", text)
    attrs = _NAME_REF.sub("%_", ins.attributes)
    # called computations keep their structure but not their numbering
    return f"{ins.opcode} {ins.signature()} {attrs}".strip()
