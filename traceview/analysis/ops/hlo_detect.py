"""What the HLO says: detectors for compiled patterns that cost time, each joined to the measured
time of the ops it names, and where each op's FLOPs come from.

Input: the instruction table of the profile's HLO protos
(:func:`traceview.model.hlo_graph.instructions`) and the op table (measured self time per
(host, program_id, op name); an instruction inside a fusion is timed by its fusion). A trace
JSON carries each op's HLO text but no module: there the detectors read the op table's top-level
ops alone and say that their users are unknown.

Detectors (``detector`` column):

- ``widening-convert``: a ``convert`` to f32/f64 from a narrower float or integer type of a
  result of at least :data:`MIN_BYTES` that is written out (top level, or a fusion's root: a
  convert fused into a reduction never writes the wide tensor and is the right way to
  accumulate), whose users are only copies, reductions, transposes, reshapes or the program's
  outputs (the study's Strategy 6: the ``[batch, vocabulary]`` float32
  logits conversion and its copy, second and third in its op table);
- ``layout-copy``: a top-level ``copy`` whose result has its operand's dimensions in another
  layout, and a top-level ``transpose`` (a layout change XLA did not fold into a fusion);
- ``unfused-convert`` / ``unfused-reshape``: a ``convert`` / ``reshape`` left as a top-level op
  with its own events (its own pass over memory);
- ``dus-not-donated``: a ``dynamic-update-slice`` or ``scatter`` (top level or fused: its
  buffer followed through the fusion's operands, tuple elements, bitcasts and copies) whose
  buffer is an entry parameter not aliased with an output: the update cannot be in place, the
  program copies the buffer first (the second seed's donation: decode 1.62x faster when donated).
"""

from __future__ import annotations

import numpy as np
import polars as pl

try:  # optional C accelerator
    from traceview.analysis import _passes as _fast
except ImportError:  # pragma: no cover - exercised when the extension is absent
    _fast = None

#: the smallest result a widening convert is reported for (bytes)
MIN_BYTES = 1 << 20
_WIDE = ("f32", "f64")
_NARROW = ("bf16", "f16", "f8e4m3fn", "f8e5m2", "f8e4m3fnuz", "f8e5m2fnuz", "s8", "u8", "s4", "u4")
_SINK = {"copy", "reduce", "reduce-window", "transpose", "reshape", "bitcast", "tuple", "get-tuple-element",
         "copy-start", "all-reduce"}
DETECTIONS_SCHEMA = {"detector": pl.Utf8, "host": pl.Utf8, "module": pl.Utf8, "program_id": pl.UInt64,
                     "instruction": pl.Utf8, "opcode": pl.Utf8, "shape": pl.Utf8, "operand_shape": pl.Utf8,
                     "fusion": pl.Utf8, "time_ps": pl.Int64, "occurrences": pl.Int64, "why": pl.Utf8}


class HloReport:
    """``detections`` (:data:`DETECTIONS_SCHEMA`, by measured time), ``patterns`` (the detections
    grouped by detector, module and shapes: instructions, time, occurrences, an example),
    ``edges`` (one row per producer and user: module, producer, producer_opcode, producer_shape,
    producer_fusion, consumer, consumer_opcode, consumer_fusion), ``instructions`` (the
    instruction table with ``time_ps`` / ``occurrences`` measured per top-level instruction, the
    ``hlo`` query table), ``flop_provenance`` (per program and source: op time share, the FLOPs'
    source ``trace`` / ``derived`` / ``unknown``), ``source`` ("protos", "op text" or "none"),
    ``notes``. ``instructions`` may be given as a function that builds it: it and ``edges`` are
    then built on first use (only ``query`` reads them)."""

    #: frames built on first use that ``query`` lists as tables (:func:`traceview.analysis.sql.report_tables`)
    LAZY_FRAMES = ("instructions", "edges")

    def __init__(self, detections: pl.DataFrame, instructions, flop_provenance: pl.DataFrame,
                 source: str = "none", notes: list | None = None) -> None:
        self.detections = detections
        self._instructions = instructions
        self.flop_provenance = flop_provenance
        self.source = source
        self.notes = [] if notes is None else notes
        self._edges = None
        # one row per (detector, module, shape, operand shape): the copies of one op across layers
        d = self.detections
        self.patterns = (d.group_by("detector", "module", "shape", "operand_shape", maintain_order=True)
                         .agg(pl.len().alias("instructions"), pl.col("time_ps").sum(), pl.col("occurrences").sum(),
                              pl.col("instruction").first().alias("example"), pl.col("why").first())
                         .sort("time_ps", descending=True, nulls_last=True)) if d.height else pl.DataFrame(
            schema={"detector": pl.Utf8, "module": pl.Utf8, "shape": pl.Utf8, "operand_shape": pl.Utf8,
                    "instructions": pl.UInt32, "time_ps": pl.Int64, "occurrences": pl.Int64, "example": pl.Utf8,
                    "why": pl.Utf8})

    @property
    def instructions(self) -> pl.DataFrame:
        if callable(self._instructions):
            self._instructions = self._instructions()
        return self._instructions

    @property
    def edges(self) -> pl.DataFrame:
        if self._edges is None:
            # one row per (producer, user) pair, for SQL over the graph ("which converts feed a copy")
            i = self.instructions
            if i.height:
                op_of = i.select("host", "program_id", pl.col("name").alias("consumer"),
                                 pl.col("opcode").alias("consumer_opcode"), pl.col("fusion").alias("consumer_fusion"))
                self._edges = (i.select("host", "module", "program_id", pl.col("name").alias("producer"),
                                        pl.col("opcode").alias("producer_opcode"),
                                        pl.col("shape").alias("producer_shape"),
                                        pl.col("fusion").alias("producer_fusion"), pl.col("users").alias("consumer"))
                               .explode("consumer").filter(pl.col("consumer").is_not_null())
                               .join(op_of, on=["host", "program_id", "consumer"], how="left"))
            else:
                self._edges = pl.DataFrame()
        return self._edges


def _measured(table) -> pl.DataFrame:
    """Self time and occurrences per (host, program_id, op_name) of an op table."""
    from traceview.analysis.eventstats import float_attr_sums

    t, c = float_attr_sums(table)
    idx = table.attrs["attr"].to_numpy().astype(np.int64)
    return (table.attrs.select("host", "program_id", "op_name", "module", "op_kind", "shape", "hlo_text",
                               "cost_source")
            .with_columns(pl.Series("time_ps", t[idx]).cast(pl.Int64), pl.Series("occurrences", c[idx]).cast(pl.Int64)))


def flop_provenance(table, measured: pl.DataFrame | None = None) -> pl.DataFrame:
    """Per program (module, program_id) and FLOP source (``cost_source``: trace, derived,
    unknown): op self time and its share of the program's op time, ops (descriptions); by
    module, then time (longest first), program_id and source, so ties keep one order.
    ``measured``: :func:`_measured` of ``table`` when the caller has it."""
    m = _measured(table) if measured is None else measured
    if m.height == 0:
        return pl.DataFrame(schema={"module": pl.Utf8, "program_id": pl.UInt64, "source": pl.Utf8,
                                    "time_ps": pl.Int64, "share": pl.Float64, "ops": pl.UInt32})
    g = (m.group_by("module", "program_id", pl.col("cost_source").fill_null("unknown").alias("source"))
         .agg(pl.col("time_ps").sum(), pl.len().alias("ops")))
    return (g.with_columns((pl.col("time_ps") / pl.col("time_ps").sum().over("module", "program_id")).alias("share"))
            .select("module", "program_id", "source", "time_ps", "share", "ops")
            .sort(["module", "time_ps", "program_id", "source"], descending=[False, True, False, False],
                  nulls_last=True))


def detect(prof) -> HloReport:
    """The :class:`HloReport` of a profile (its ``hlo_protos`` and op table). The detectors read
    the instruction columns; the instruction table (with measured time) is built on first use."""
    from traceview.model.hlo_graph import columns_frame, instruction_columns

    table = prof.table
    meas = _measured(table)
    prov = flop_provenance(table, meas)
    cols, notes = instruction_columns(getattr(prof, "hlo_protos", None), _fast)
    if not cols["name"]:
        det = _from_op_text(meas)
        src = "op text" if meas.height and (meas["hlo_text"] != "").any() else "none"
        if src == "op text":
            notes.append("no HLO protos in this trace (a trace JSON): detectors read each op's HLO text; "
                         "the users of an op are unknown")
        return HloReport(det, pl.DataFrame(), prov, src, notes)
    m = meas.group_by("host", "program_id", "op_name").agg(pl.col("time_ps").sum(), pl.col("occurrences").sum())

    def table_of() -> pl.DataFrame:
        ins = columns_frame(cols)
        return (ins.join(m, left_on=["host", "program_id", "name"], right_on=["host", "program_id", "op_name"],
                         how="left")
                .join(m.rename({"time_ps": "fusion_time_ps", "occurrences": "fusion_occurrences"}),
                      left_on=["host", "program_id", "fusion"], right_on=["host", "program_id", "op_name"], how="left")
                .drop("fusion_time_ps", "fusion_occurrences"))

    return HloReport(_detections(cols, m), table_of, prov, "protos", notes)


#: the opcodes a detector looks at
_CANDIDATES = frozenset({"convert", "copy", "transpose", "reshape", "dynamic-update-slice", "scatter"})


def _detections(cols: dict, m: pl.DataFrame) -> pl.DataFrame:
    """The detections over the instruction columns ``cols`` (:func:`~traceview.model.hlo_graph.instruction_columns`),
    timed by ``m`` (time_ps and occurrences per host, program_id, op_name): an instruction at
    top level by its own op, a fused one by its fusion's."""
    timed = {(h, p, n): (t, c) for h, p, n, t, c in m.iter_rows() if h is not None and p is not None and n is not None}
    hosts, pids, names, opcodes = cols["host"], cols["program_id"], cols["name"], cols["opcode"]
    lookups: dict = {}

    def lookup(what: str) -> dict:  # a map by (host, program_id, name), built on first use (few candidates need one)
        if what not in lookups:
            if "keys" not in lookups:
                lookups["keys"] = list(zip(hosts, pids, names))
            keys = lookups["keys"]
            if what == "opcode_of":
                lookups[what] = dict(zip(keys, opcodes))
            elif what == "params":
                lookups[what] = {k: (a, num) for k, a, num in zip(keys, cols["aliased"], cols["parameter"])
                                 if num is not None}
            elif what == "users_of":
                lookups[what] = dict(zip(keys, cols["users"]))
            else:
                lookups[what] = dict(zip(keys, zip(opcodes, cols["operands"], cols["fusion"], cols["param_index"])))
        return lookups[what]

    rows = []
    none = (None, None)

    def add(r, det, why, operand_shape=""):
        rows.append({"detector": det, "host": r["host"], "module": r["module"], "program_id": r["program_id"],
                     "instruction": r["name"], "opcode": r["opcode"], "shape": r["shape"],
                     "operand_shape": operand_shape, "fusion": r["fusion"],
                     "time_ps": None if r["_t"] is None else int(r["_t"]),
                     "occurrences": None if r["_n"] is None else int(r["_n"]), "why": why})

    wanted = ("host", "module", "program_id", "name", "opcode", "shape", "bytes", "element", "layout", "operands",
              "operand_shapes", "operand_layouts", "users", "fusion")
    for i in [i for i, op in enumerate(opcodes) if op in _CANDIDATES]:
        r = {k: cols[k][i] for k in wanted}
        key = (r["host"], r["program_id"])
        r["time_ps"], r["occurrences"] = timed.get((*key, r["name"]), none)
        fused = timed.get((*key, r["fusion"]), none) if r["fusion"] else None
        r["_t"], r["_n"] = (r["time_ps"], r["occurrences"]) if fused is None else fused
        op_shapes = r["operand_shapes"] or []
        if r["opcode"] == "convert" and op_shapes:
            src_el = op_shapes[0].split("[", 1)[0]
            # a convert fused into its users (a bf16 input reduced in f32) never writes the wide
            # tensor: only a top-level convert or a fusion's root materializes it
            materialized = not r["fusion"] or not r["users"]
            if r["element"] in _WIDE and src_el in _NARROW and r["bytes"] >= MIN_BYTES and materialized:
                users = r["users"]
                if not users and r["fusion"]:  # a fusion's root: its users are the fusion's
                    users = lookup("users_of").get((*key, r["fusion"]), [])
                opcode_of = lookup("opcode_of")
                uses = [opcode_of.get((*key, u), "?") for u in users]
                if all(u in _SINK for u in uses):
                    what = ", ".join(sorted(set(uses))) or "the program's output"
                    add(r, "widening-convert", f"widens {op_shapes[0]} to {r['shape']} ({r['bytes']:,} bytes) for "
                        f"{what} only", op_shapes[0])
        if r["fusion"] == "" and r["opcode"] == "copy" and op_shapes and op_shapes[0] == r["shape"] \
                and (r["operand_layouts"] or [""])[0] != r["layout"] and r["layout"] and r["operand_layouts"][0]:
            add(r, "layout-copy", f"copies {r['shape']} from layout {{{r['operand_layouts'][0]}}} to "
                f"{{{r['layout']}}}", op_shapes[0])
        if r["fusion"] == "" and r["opcode"] == "transpose":
            add(r, "layout-copy", f"a top-level transpose of {op_shapes[0] if op_shapes else '?'} (not fused)",
                op_shapes[0] if op_shapes else "")
        if r["fusion"] == "" and r["opcode"] in ("convert", "reshape") and (r["time_ps"] or 0) > 0:
            add(r, f"unfused-{r['opcode']}", f"a top-level {r['opcode']} with its own events "
                f"({r['occurrences']:,}): its own pass over {r['shape']}", op_shapes[0] if op_shapes else "")
        if r["opcode"] in ("dynamic-update-slice", "scatter") and r["operands"]:
            name, seen = r["operands"][0], 0
            params, by_name = lookup("params"), lookup("by_name")
            while seen < 16:  # through gte / bitcast / copy / fusion parameter to an entry parameter
                seen += 1
                if (*key, name) in params:
                    aliased, num = params[(*key, name)]
                    if aliased is False:
                        add(r, "dus-not-donated", f"updates entry parameter {num} ({name}), which is not aliased "
                            "with an output: not donated, so the buffer is copied before the update",
                            op_shapes[0] if op_shapes else "")
                    break
                op, ops, fus, k = by_name.get((*key, name), (None, [], "", None))
                if op == "parameter" and fus and k is not None:  # a fused computation's parameter: the
                    outer = by_name.get((*key, fus), (None, [], "", None))[1]  # fusion's k-th operand
                    if k >= len(outer):
                        break
                    name = outer[k]
                    continue
                if op not in ("get-tuple-element", "bitcast", "copy") or not ops:
                    break
                name = ops[0]
    out = pl.DataFrame(rows, schema=DETECTIONS_SCHEMA) if rows else pl.DataFrame(schema=DETECTIONS_SCHEMA)
    # a pattern costs time only where its program ran: compiled and never executed, it is not reported
    return out.filter(pl.col("time_ps") > 0).sort("time_ps", descending=True, nulls_last=True)


def _from_op_text(meas: pl.DataFrame) -> pl.DataFrame:
    """Detections from the op table alone (a trace JSON: each op's HLO text, no module): widening
    converts of large results, top-level copies with a layout change and transposes, top-level
    converts and reshapes."""
    from traceview.model.shapes import parse_instruction

    rows = []
    cand = (meas.filter(pl.col("op_kind").is_in(["convert", "copy", "transpose", "reshape"]) & (pl.col("hlo_text") != ""))
            .group_by("host", "module", "program_id", "op_name", "op_kind", maintain_order=True)
            .agg(pl.col("hlo_text").first(), pl.col("time_ps").sum(), pl.col("occurrences").sum()))
    for r in cand.iter_rows(named=True):
        ins = parse_instruction(r["hlo_text"])
        if ins is None or ins.result is None:
            continue
        res, src = ins.result, ins.operands[0] if ins.operands else None
        base = {"host": r["host"], "module": r["module"], "program_id": r["program_id"], "instruction": r["op_name"],
                "opcode": r["op_kind"], "shape": str(res), "operand_shape": str(src) if src else "", "fusion": "",
                "time_ps": r["time_ps"], "occurrences": r["occurrences"]}
        if r["op_kind"] == "convert" and src is not None and res.dtype in _WIDE and src.dtype in _NARROW \
                and res.bytes >= MIN_BYTES:
            rows.append({**base, "detector": "widening-convert",
                         "why": f"widens {src} to {res} ({res.bytes:,} bytes); its users are unknown"})
        elif r["op_kind"] == "transpose":
            rows.append({**base, "detector": "layout-copy", "why": f"a top-level transpose of {src} (not fused)"})
        elif r["op_kind"] in ("convert", "reshape") and (r["time_ps"] or 0) > 0:
            rows.append({**base, "detector": f"unfused-{r['op_kind']}",
                         "why": f"a top-level {r['op_kind']} with its own events: its own pass over {res}"})
    return (pl.DataFrame(rows, schema=DETECTIONS_SCHEMA) if rows else pl.DataFrame(schema=DETECTIONS_SCHEMA)).sort(
        "time_ps", descending=True, nulls_last=True)
