"""Every instruction of a profile's HLO modules as one frame (:data:`HLO_SCHEMA`): the graph the
detectors of :mod:`traceview.analysis.ops.hlo_detect` read and ``traceview query`` serves as ``hlo``.

Source: the ``xla.HloProto`` of each program in the ``/host:metadata`` plane
(:class:`traceview.model.hlo.HloIndex` keeps their bytes), decoded whole here, once per program
(field numbers: OpenXLA ``xla/service/hlo.proto``); given the analysis' C passes, the fields the
columns need are then read from the bytes by ``hlo_scan`` (the same columns). A proto that does
not decode costs its module a note, never the rest.

==================  =========  ==============================================================
column              dtype      meaning
==================  =========  ==============================================================
host                Utf8       host name
module              Utf8       hlo_module name
program_id          UInt64     program id
computation         Utf8       the computation holding the instruction
entry               Boolean    the computation is the module's entry computation
fusion              Utf8       the fusion instruction whose computation holds it ("" if none)
name                Utf8       instruction name
opcode              Utf8       HLO opcode
shape               Utf8       result shape (no layout), e.g. ``f32[8,256000]``
bytes               Int64      result bytes
element             Utf8       result element type ("" for a tuple)
layout              Utf8       result minor-to-major layout, e.g. ``1,0`` ("" if none)
operands            List(Utf8) operand instruction names, in order
operand_shapes      List(Utf8) their shapes
operand_layouts     List(Utf8) their layouts
users               List(Utf8) instructions that use its result
parameter           Int64      ``parameter_number`` of an entry parameter (null otherwise)
aliased             Boolean    an entry parameter aliased with an output (donated); null else
param_index         Int64      ``parameter_number`` of any parameter (a fused computation's too)
==================  =========  ==============================================================
"""

from __future__ import annotations

import polars as pl

from traceview.model.shapes import shape_from_proto

HLO_SCHEMA: dict[str, pl.DataType] = {
    "host": pl.Utf8, "module": pl.Utf8, "program_id": pl.UInt64, "computation": pl.Utf8, "entry": pl.Boolean,
    "fusion": pl.Utf8, "name": pl.Utf8, "opcode": pl.Utf8, "shape": pl.Utf8, "bytes": pl.Int64,
    "element": pl.Utf8, "layout": pl.Utf8, "operands": pl.List(pl.Utf8), "operand_shapes": pl.List(pl.Utf8),
    "operand_layouts": pl.List(pl.Utf8), "users": pl.List(pl.Utf8), "parameter": pl.Int64,
    "aliased": pl.Boolean, "param_index": pl.Int64,
}
PROTOS_SCHEMA: dict[str, pl.DataType] = {"host": pl.Utf8, "module": pl.Utf8, "program_id": pl.UInt64,
                                         "proto": pl.Binary}


def protos_frame(raw: dict, host: str) -> pl.DataFrame | None:
    """:data:`PROTOS_SCHEMA` rows of an :class:`~traceview.model.hlo.HloIndex`'s ``raw``
    ({program_id: (module, bytes)}); None when empty."""
    if not raw:
        return None
    return pl.DataFrame({"host": [host] * len(raw), "module": [m for m, _ in raw.values()],
                         "program_id": list(raw.keys()), "proto": [b for _, b in raw.values()]},
                        schema=PROTOS_SCHEMA)


def instructions(protos: pl.DataFrame | None) -> tuple[pl.DataFrame, list[str]]:
    """(:data:`HLO_SCHEMA` frame of every instruction of ``protos``, notes for the modules
    that did not decode)."""
    cols, notes = instruction_columns(protos)
    return columns_frame(cols), notes


def instruction_columns(protos: pl.DataFrame | None, fast=None) -> tuple[dict[str, list], list[str]]:
    """(the :data:`HLO_SCHEMA` columns of every instruction of ``protos`` as Python lists, in
    the order of :func:`instructions`' rows; notes for the modules that did not decode).
    ``fast``: the optional C passes (:mod:`traceview.analysis._passes`: ``hlo_scan`` reads a
    proto's bytes, ``take_lists`` gathers operands); the same columns."""
    from google.protobuf.message import DecodeError

    from traceview.read.xplane.protos import HloProto

    rows: dict[str, list] = {k: [] for k in HLO_SCHEMA}
    notes: list[str] = []
    if protos is None or protos.height == 0:
        return rows, notes
    seen = set()
    shapes: dict[bytes, tuple] = {}  # serialized ShapeProto -> _shape_info
    for host, module, pid, data in protos.iter_rows():
        if (host, pid) in seen:
            continue
        seen.add((host, pid))
        try:
            mod = HloProto.FromString(data).hlo_module
            got = fast.hlo_scan(data) if fast is not None else None
            part = None if got is None else _scanned_rows(got, host, module, pid, shapes, fast.take_lists)
            if part is None:
                part = _module_rows(mod, host, module, pid)
        except (DecodeError, RecursionError, ValueError) as exc:
            from traceview.read.diagnose import protobuf_fault

            notes.append(f"HLO proto of {module}({pid}) is unreadable: {protobuf_fault(exc)}")
            continue
        except Exception as exc:  # noqa: BLE001 - a hostile proto costs its module, not the report
            notes.append(f"HLO proto of {module}({pid}) is unusable ({type(exc).__name__}: {exc})")
            continue
        for k, v in part.items():
            rows[k].extend(v)
    return rows, notes


def columns_frame(cols: dict[str, list]) -> pl.DataFrame:
    """The :data:`HLO_SCHEMA` frame of :func:`instruction_columns`' columns."""
    if not cols["name"]:
        return pl.DataFrame(schema=HLO_SCHEMA)
    return pl.DataFrame([_list_series(k, cols[k]) if isinstance(t, pl.List) else pl.Series(k, cols[k], dtype=t)
                         for k, t in HLO_SCHEMA.items()])


def _list_series(name: str, lists: list[list[str]]) -> pl.Series:
    """A List(Utf8) Series of ``lists``, built from one flat column (polars converts each inner
    Python list on its own otherwise)."""
    n = len(lists)
    row = pl.int_range(n, eager=True, dtype=pl.UInt32).alias("row")
    lens = pl.Series("n", [len(v) for v in lists], dtype=pl.UInt32)
    idx = pl.DataFrame([row, lens]).select(pl.col("row").repeat_by("n").explode()).drop_nulls()["row"]
    flat = pl.DataFrame([idx, pl.Series("v", [x for v in lists for x in v], dtype=pl.Utf8)])
    grouped = flat.group_by("row", maintain_order=True).agg("v")
    out = row.to_frame().join(grouped, on="row", how="left", maintain_order="left")["v"]
    return out.fill_null(pl.lit([], dtype=pl.List(pl.Utf8))).alias(name)


def _shape_info(proto) -> tuple:
    """(Shape, text, layout, bytes or None, element, out of range) of a ``ShapeProto``."""
    sh = shape_from_proto(proto)
    bad = sh.elements >= 1 << 62 or any(d < 0 for d in getattr(sh, "dims", ()) or ())
    return (sh, str(sh), ",".join(map(str, proto.layout.minor_to_major)), None if bad else sh.bytes,
            "" if sh.members is not None else sh.dtype, bad)


def _scanned_rows(got: tuple, host: str, module: str, pid: int, shapes: dict, take) -> dict[str, list] | None:
    """:func:`_module_rows` of a module read by ``hlo_scan`` (``got``), or None when its
    instruction or computation ids repeat (the decoded module is read then). ``shapes``: the
    :func:`_shape_info` of each serialized ``ShapeProto`` seen so far (filled here); ``take``:
    ``take_lists`` (``[[values[k] for k in ks] for ks in keys]``, None on a missing key)."""
    from traceview.read.xplane.protos import ShapeProto

    entry_id, alias, comps, ids, names, opcodes, operands, params, shape_keys, fusions = got
    n = len(ids)
    id_of = dict(zip(ids, range(n)))
    if len(id_of) != n or len({c[0] for c in comps}) != len(comps):
        return None
    distinct = set(shape_keys)
    for key in distinct.difference(shapes):
        shapes[key] = _shape_info(ShapeProto.FromString(key))
    infos = [shapes[k] for k in shape_keys]
    if any(shapes[k][5] for k in distinct):
        k = next(k for k, info in enumerate(infos) if info[5])  # the first in the module's order
        raise ValueError(f"instruction {names[k]} has a shape out of range ({infos[k][0]})")
    if not n:
        return {k: [] for k in HLO_SCHEMA}
    name_of = dict(zip(ids, names))
    op_names = take(operands, name_of)
    if op_names is None:  # an operand id of no instruction: left out
        operands = [[o for o in ops if o in id_of] for ops in operands]
        op_names = take(operands, name_of)
    users: dict[int, list[str]] = {}
    for name, ops in zip(names, operands):
        for o in ops:
            users.setdefault(o, []).append(name)
    fusion_of = dict(fusions)
    aliased = set(alias)
    texts = [i[1] for i in infos]
    layouts = [i[2] for i in infos]
    cname, entry, fusion, param = [], [], [], []
    a = 0
    for cid, name, count in comps:
        is_entry = cid == entry_id
        cname += [name] * count
        entry += [is_entry] * count
        fusion += [fusion_of.get(cid, "")] * count
        param += params[a:a + count] if is_entry else [None] * count
        a += count
    return {"host": [host] * n, "module": [module] * n, "program_id": [pid] * n, "computation": cname,
            "entry": entry, "fusion": fusion, "name": names, "opcode": opcodes, "shape": texts,
            "bytes": [i[3] for i in infos], "element": [i[4] for i in infos], "layout": layouts,
            "operands": op_names, "operand_shapes": take(operands, dict(zip(ids, texts))),
            "operand_layouts": take(operands, dict(zip(ids, layouts))),
            "users": [users.get(i, []) for i in ids], "parameter": param,
            "aliased": [None if p is None else p in aliased for p in param], "param_index": params}


def _module_rows(mod, host: str, module: str, pid: int) -> dict[str, list]:
    """The :data:`HLO_SCHEMA` columns of one decoded module. Raises ValueError on a shape out of
    range (a dimension or a size past int64). Each field of an instruction is read once, and a
    result shape is converted once per distinct ``ShapeProto`` (its serialized bytes)."""
    aliased = {e.parameter_number for e in mod.input_output_alias.entries}
    comps = list(mod.computations)
    flat: list[tuple] = []  # (instruction, id, name, opcode, operand ids), every computation's
    bounds: list[tuple[int, int]] = []  # per computation: its instructions in ``flat``
    last: dict[int, int] = {}  # instruction id -> its last instruction in ``flat`` (ids first seen first)
    fusion_of: dict[int, str] = {}  # fused computation id -> the fusion instruction's name
    users: dict[int, list[str]] = {}
    for c in comps:
        a = len(flat)
        for ins in c.instructions:
            iid, name, opcode = ins.id, ins.name, ins.opcode
            ops = ins.operand_ids
            ops = list(ops) if ops else []
            last[iid] = len(flat)
            flat.append((ins, iid, name, opcode, ops))
            if opcode == "fusion":
                for cid in ins.called_computation_ids:
                    fusion_of[cid] = name
            for op in ops:
                users.setdefault(op, []).append(name)
        bounds.append((a, len(flat)))
    seen: dict[bytes, tuple] = {}  # serialized ShapeProto -> (Shape, text, layout, bytes, element)

    def shape_info(ins) -> tuple:
        proto = ins.shape
        key = proto.SerializeToString()
        got = seen.get(key)
        if got is None:
            sh = shape_from_proto(proto)
            bad = sh.elements >= 1 << 62 or any(d < 0 for d in getattr(sh, "dims", ()) or ())
            got = (sh, str(sh), ",".join(map(str, proto.layout.minor_to_major)), None if bad else sh.bytes,
                   "" if sh.members is not None else sh.dtype, bad)
            seen[key] = got
        if got[5]:
            raise ValueError(f"instruction {ins.name} has a shape out of range ({got[0]})")
        return got

    info_of = {iid: shape_info(flat[k][0]) for iid, k in last.items()}  # the id's (last) instruction
    name_of = {iid: flat[k][2] for iid, k in last.items()}
    out: list[tuple] = []
    for ci in {c.id: ci for ci, c in enumerate(comps)}.values():  # a repeated computation id: its last
        c = comps[ci]
        entry = c.id == mod.entry_computation_id
        fusion = fusion_of.get(c.id, "")
        cname = c.name
        a, b = bounds[ci]
        for k in range(a, b):
            ins, iid, name, opcode, ops = flat[k]
            # a corrupt proto reusing an id: this row reads its own shape
            info = info_of[iid] if last[iid] == k else shape_info(ins)
            ops = [o for o in ops if o in name_of]
            is_param = opcode == "parameter"
            num = ins.parameter_number if is_param else None
            param = num if entry else None
            out.append((host, module, pid, cname, entry, fusion, name, opcode, info[1], info[3], info[4], info[2],
                        [name_of[o] for o in ops], [info_of[o][1] for o in ops], [info_of[o][2] for o in ops],
                        users.get(iid, []), param, (param in aliased) if param is not None else None, num))
    if not out:
        return {k: [] for k in HLO_SCHEMA}
    return {k: list(v) for k, v in zip(HLO_SCHEMA, zip(*out))}
