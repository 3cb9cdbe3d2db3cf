"""Every instruction of a profile's HLO modules as one frame (:data:`HLO_SCHEMA`): the graph the
detectors of :mod:`traceview.analysis.ops.hlo_detect` read and ``traceview query`` serves as ``hlo``.

Source: the ``xla.HloProto`` of each program in the ``/host:metadata`` plane
(:class:`traceview.model.hlo.HloIndex` keeps their bytes), decoded whole here, once per program
(field numbers: OpenXLA ``xla/service/hlo.proto``). A proto that does not decode costs its
module a note, never the rest.

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
    from google.protobuf.message import DecodeError

    from traceview.read.xplane.protos import HloProto

    rows: dict[str, list] = {k: [] for k in HLO_SCHEMA}
    notes: list[str] = []
    if protos is None or protos.height == 0:
        return pl.DataFrame(schema=HLO_SCHEMA), notes
    seen = set()
    for host, module, pid, data in protos.iter_rows():
        if (host, pid) in seen:
            continue
        seen.add((host, pid))
        try:
            mod = HloProto.FromString(data).hlo_module
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
    return pl.DataFrame([_list_series(k, rows[k]) if isinstance(t, pl.List) else pl.Series(k, rows[k], dtype=t)
                         for k, t in HLO_SCHEMA.items()]), notes


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


def _module_rows(mod, host: str, module: str, pid: int) -> dict[str, list]:
    """The :data:`HLO_SCHEMA` columns of one decoded module. Raises ValueError on a shape out of
    range (a dimension or a size past int64)."""
    rows: dict[str, list] = {k: [] for k in HLO_SCHEMA}
    aliased = {e.parameter_number for e in mod.input_output_alias.entries}
    comps = {c.id: c for c in mod.computations}
    fusion_of: dict[int, str] = {}  # fused computation id -> the fusion instruction's name
    by_id: dict[int, object] = {}
    users: dict[int, list[str]] = {}
    for c in mod.computations:
        for ins in c.instructions:
            by_id[ins.id] = ins
            if ins.opcode == "fusion":
                for cid in ins.called_computation_ids:
                    fusion_of[cid] = ins.name
    for c in mod.computations:
        for ins in c.instructions:
            for op in ins.operand_ids:
                users.setdefault(op, []).append(ins.name)
    shape_of: dict[int, object] = {}  # instruction id -> result Shape, computed once
    layout_of: dict[int, str] = {}
    name_of: dict[int, str] = {}
    for iid, ins in by_id.items():
        sh = shape_from_proto(ins.shape)
        if sh.elements >= 1 << 62 or any(d < 0 for d in getattr(sh, "dims", ()) or ()):
            raise ValueError(f"instruction {ins.name} has a shape out of range ({sh})")
        shape_of[iid] = sh
        layout_of[iid] = ",".join(map(str, ins.shape.layout.minor_to_major))
        name_of[iid] = ins.name
    text_of = {iid: str(sh) for iid, sh in shape_of.items()}
    for c in comps.values():
        entry = c.id == mod.entry_computation_id
        fusion = fusion_of.get(c.id, "")
        for ins in c.instructions:
            iid = ins.id
            if by_id[iid] is not ins:  # a corrupt proto reusing an id: this row reads its own shape
                sh = shape_from_proto(ins.shape)
                if sh.elements >= 1 << 62 or any(d < 0 for d in getattr(sh, "dims", ()) or ()):
                    raise ValueError(f"instruction {ins.name} has a shape out of range ({sh})")
                own = (ins.name, str(sh), ",".join(map(str, ins.shape.layout.minor_to_major)))
            else:
                sh = shape_of[iid]
                own = (name_of[iid], text_of[iid], layout_of[iid])
            ops = [o for o in ins.operand_ids if o in name_of]
            rows["host"].append(host)
            rows["module"].append(module)
            rows["program_id"].append(pid)
            rows["computation"].append(c.name)
            rows["entry"].append(entry)
            rows["fusion"].append(fusion)
            rows["name"].append(own[0])
            rows["opcode"].append(ins.opcode)
            rows["shape"].append(own[1])
            rows["bytes"].append(sh.bytes)
            rows["element"].append("" if sh.members is not None else sh.dtype)
            rows["layout"].append(own[2])
            rows["operands"].append([name_of[o] for o in ops])
            rows["operand_shapes"].append([text_of[o] for o in ops])
            rows["operand_layouts"].append([layout_of[o] for o in ops])
            rows["users"].append(users.get(iid, []))
            is_param = ins.opcode == "parameter"
            param = ins.parameter_number if entry and is_param else None
            rows["parameter"].append(param)
            rows["aliased"].append((param in aliased) if param is not None else None)
            rows["param_index"].append(ins.parameter_number if is_param else None)
    return rows
