"""Decode the HLO protos a profile stores in its ``/host:metadata`` plane.

JAX records one ``xla.HloProto`` per compiled program (``enable_hlo_proto=True``, the
default since jax 0.4): an XEventMetadata named ``<module>(<program_id>)`` carrying the
stat ``Hlo Proto`` (bytes). GPU and CPU op events only name their op (``hlo_op``) and
program (``program_id``); shapes, opcodes and source lines come from joining on
(program_id, op name) against these protos. Protos are decoded lazily, one per program
actually referenced by an event, and of each only the instructions events name.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from google.protobuf.message import DecodeError

from traceview.read.xplane.protos import HloProto
from traceview.model.collective_hlo import proto_attributes
from traceview.model.costs import ModuleCosts, io_bytes
from traceview.model.shapes import Shape, shape_from_proto, signature

_CONTROL_FLOW = frozenset({"while", "conditional", "call", "async-start", "async-done"})

_FUSION_CATEGORY = {
    "kLoop": "loop fusion",
    "kInput": "input fusion",
    "kOutput": "output fusion",
    "kCustom": "custom fusion",
}


@dataclass
class HloOp:
    """One HLO instruction as needed by the op table (shapes without layouts)."""

    name: str
    opcode: str
    category: str
    result: Shape
    operands: tuple[Shape | None, ...]
    shape: str
    hlo_text: str
    source_file: str = ""
    source_line: int | None = None
    source_stack: str = ""
    framework_op: str = ""
    custom_call_target: str = ""
    flops: int | None = None  # per execution, derived (traceview.model.costs)
    bytes: int | None = None  # operand + result bytes per execution
    # raw proto kept for FLOP derivation (dot/convolution dimension numbers)
    proto: object = None


@dataclass
class HloModule:
    """A decoded HLO module: its name, program id and instructions by name."""

    name: str
    program_id: int
    ops: Mapping[str, HloOp] = field(default_factory=dict)


def _stack(module_proto, frame_id: int, limit: int = 64) -> list[tuple[str, int]]:
    """Resolve a 1-based StackFrameIndexProto frame id to [(file, line), ...] innermost first."""
    idx = module_proto.stack_frame_index
    frames, files, locs = idx.stack_frames, idx.file_names, idx.file_locations
    out: list[tuple[str, int]] = []
    seen = set()
    while 0 < frame_id <= len(frames) and frame_id not in seen and len(out) < limit:
        seen.add(frame_id)
        fr = frames[frame_id - 1]
        loc_id = fr.file_location_id
        if 0 < loc_id <= len(locs):
            loc = locs[loc_id - 1]
            fname = files[loc.file_name_id - 1] if 0 < loc.file_name_id <= len(files) else ""
            out.append((fname, int(loc.line)))
        frame_id = fr.parent_frame_id
    return out


def _decode_op(mod, ins, by_id: dict, costs: ModuleCosts, stacks: dict | None = None) -> HloOp:
    """The :class:`HloOp` of instruction ``ins`` of module proto ``mod`` (``by_id``: its
    instructions by id, the later of a repeated id winning; ``stacks``: the module's resolved
    stack frames by frame id, filled as they are resolved: the ops of one source line share them)."""
    res = shape_from_proto(ins.shape)
    operands = [costs.shape(oid) for oid in ins.operand_ids]  # each operand's shape converted once per module
    operand_names = [by_id[o].name if o in by_id else "?" for o in ins.operand_ids]
    text_ops = ", ".join(
        f"{'?' if s is None else s} %{n}" for s, n in zip(operands, operand_names)
    )
    attrs = []
    if ins.fusion_kind:
        attrs.append(f"kind={ins.fusion_kind}")
    if ins.custom_call_target:
        attrs.append(f'custom_call_target="{ins.custom_call_target}"')
    attrs.extend(proto_attributes(ins))
    hlo_text = f"%{ins.name} = {res} {ins.opcode}({text_ops})" + (
        ", " + ", ".join(attrs) if attrs else ""
    )
    md = ins.metadata
    fid = md.stack_frame_id
    stacks = {} if stacks is None else stacks
    if fid not in stacks:
        frames = _stack(mod, fid) if fid else []
        stacks[fid] = (frames, "\n".join(f"{f}:{ln}" for f, ln in frames))
    frames, stack_text = stacks[fid]
    src_file, src_line = md.source_file, (md.source_line or None)
    if not src_file and frames:
        src_file, src_line = frames[0]
    category = _FUSION_CATEGORY.get(ins.fusion_kind, ins.opcode) if ins.opcode == "fusion" else ins.opcode
    return HloOp(
        name=ins.name,
        opcode=ins.opcode,
        category=category,
        result=res,
        operands=tuple(operands),
        shape=signature(res, operands, ins.opcode),
        hlo_text=hlo_text,
        source_file=src_file,
        source_line=src_line,
        source_stack=stack_text,
        framework_op=md.op_name,
        custom_call_target=ins.custom_call_target,
        # control flow: its body's ops are traced (and costed) on their own
        flops=None if ins.opcode in _CONTROL_FLOW else costs.instruction_flops(ins),
        bytes=None if ins.opcode in _CONTROL_FLOW else io_bytes(res, operands, ins.opcode),
        proto=ins,
    )


class _LazyOps(Mapping):
    """A module's :class:`HloOp` by instruction name (the later of a repeated name winning),
    each decoded on first access: a profile's events name a few of a module's instructions.
    Decoding errors (``ValueError``, ``RecursionError``, ...) are raised by that access."""

    def __init__(self, mod) -> None:
        self._mod = mod
        self._by_id: dict[int, object] = {}
        self._by_name: dict[str, object] = {}
        for comp in mod.computations:
            for ins in comp.instructions:
                self._by_id[ins.id] = ins
                self._by_name[ins.name] = ins
        self._costs: ModuleCosts | None = None
        self._done: dict[str, HloOp] = {}
        self._stacks: dict[int, tuple] = {}

    def __getitem__(self, name: str) -> HloOp:
        op = self._done.get(name)
        if op is None:
            ins = self._by_name[name]
            if self._costs is None:
                self._costs = ModuleCosts(self._mod, self._by_id)
            op = self._done[name] = _decode_op(self._mod, ins, self._by_id, self._costs, self._stacks)
        return op

    def get(self, name, default=None):
        return self[name] if name in self._by_name else default

    def body(self, name: str) -> tuple | None:
        """What instruction ``name`` computes, names aside: its opcode, fusion kind, custom-call
        target, shape and operands' shapes, and the same of every instruction of the
        computations it calls (operands as positions in them). Equal for two fusions XLA runs
        with one kernel; None for an unknown name."""
        ins = self._by_name.get(name)
        if ins is None:
            return None
        comps = getattr(self, "_comps", None)
        if comps is None:
            comps = self._comps = {c.id: c for c in self._mod.computations}

        def shape(sp):
            return shape_from_proto(sp)

        called = []
        for cid in ins.called_computation_ids:
            comp = comps.get(cid)
            if comp is None:
                return None
            pos = {i.id: k for k, i in enumerate(comp.instructions)}
            called.append(tuple((i.opcode, i.fusion_kind, i.custom_call_target, shape(i.shape),
                                 tuple(pos.get(o, -1) for o in i.operand_ids), i.parameter_number, i.tuple_index)
                                for i in comp.instructions))
        operands = tuple(shape(self._by_id[o].shape) if o in self._by_id else None for o in ins.operand_ids)
        return (ins.opcode, ins.fusion_kind, ins.custom_call_target, shape(ins.shape), operands, tuple(called))

    def schedules(self) -> list[tuple[tuple[str, str], ...]]:
        """Per scheduled computation (``HloModuleProto.schedule``: the entry's first, then
        the others', while bodies and the like, in id order), (name, opcode) of its
        instructions in schedule order: the order XLA:GPU emits their thunks, and so launches
        their kernels. [] when the module has no schedule; a sequence naming an instruction
        the module lacks is left out."""
        mod = self._mod
        if not mod.HasField("schedule"):
            return []
        seqs = mod.schedule.sequences
        by_id = self._by_id
        ids = sorted(seqs, key=lambda c: (c != mod.entry_computation_id, c))
        out = []
        for c in ids:
            seq = seqs[c].instruction_ids
            if seq and all(i in by_id for i in seq):
                out.append(tuple((by_id[i].name, by_id[i].opcode) for i in seq))
        return out

    def __contains__(self, name) -> bool:
        return name in self._by_name

    def __iter__(self):
        return iter(self._by_name)

    def __len__(self) -> int:
        return len(self._by_name)


def decode_module(data: bytes, program_id: int) -> HloModule:
    """Decode serialized ``xla.HloProto`` bytes into an :class:`HloModule` whose ``ops``
    decode each instruction on first access (:class:`_LazyOps`).

    Raises ``google.protobuf.message.DecodeError`` on corrupt bytes (callers turn it into a
    warning: a broken proto costs shapes, not the whole trace).
    """
    proto = HloProto()
    proto.ParseFromString(data)
    mod = proto.hlo_module
    return HloModule(mod.name, program_id, _LazyOps(mod))


class HloIndex:
    """Lazily decoded HLO modules of one XSpace, keyed by program id.

    ``raw`` maps program_id -> (module name, serialized HloProto bytes). ``get`` decodes on
    first use and caches; a proto (or, in ``op``, an instruction) that fails to decode is
    remembered in ``errors``.
    """

    def __init__(self) -> None:
        self.raw: dict[int, tuple[str, bytes]] = {}
        self.names: dict[int, str] = {}
        self._decoded: dict[int, HloModule | None] = {}
        self._bad_ops: set[int] = set()  # modules with an instruction that failed to decode
        self.errors: list[str] = []

    def add(self, program_id: int, module_name: str, data: bytes) -> None:
        self.raw[program_id] = (module_name, data)
        self.names[program_id] = module_name

    def get(self, program_id: int | None) -> HloModule | None:
        if program_id is None or program_id not in self.raw:
            return None
        if program_id not in self._decoded:
            try:
                self._decoded[program_id] = decode_module(self.raw[program_id][1], program_id)
            except Exception as exc:  # noqa: BLE001 - a hostile proto costs its shapes, not the trace
                self._fail(program_id, exc)
        return self._decoded[program_id]

    def _fail(self, program_id: int, exc: Exception) -> None:
        """Note why module ``program_id`` cannot be used and drop it (its later ops have no shapes)."""
        name = self.raw[program_id][0]
        if isinstance(exc, (DecodeError, RecursionError, ValueError)):
            from traceview.read.diagnose import protobuf_fault

            self.errors.append(f"HLO proto of {name}({program_id}) is unreadable: {protobuf_fault(exc)}; "
                               "its ops have no shapes")
        else:
            self.errors.append(f"HLO proto of {name}({program_id}) is unusable "
                               f"({type(exc).__name__}: {exc}); its ops have no shapes")
        self._decoded[program_id] = None

    def schedules(self, program_id: int | None) -> list[tuple[tuple[str, str], ...]]:
        """(name, opcode) of module ``program_id``'s scheduled instructions, one sequence per
        scheduled computation (:meth:`_LazyOps.schedules`); [] when the module is unknown,
        unusable or unscheduled."""
        mod = self.get(program_id)
        fn = getattr(mod.ops, "schedules", None) if mod is not None else None
        try:
            return fn() if fn is not None else []
        except Exception:  # noqa: BLE001 - as in op: a hostile proto costs the schedule, not the trace
            return []

    def same_body(self, program_id: int | None, a: str, b: str) -> bool:
        """Whether instructions ``a`` and ``b`` of module ``program_id`` compute the same
        thing, names aside (:meth:`_LazyOps.body`); False when either is unknown."""
        mod = self.get(program_id)
        body = getattr(mod.ops, "body", None) if mod is not None else None
        try:
            x = body(a) if body is not None else None
            return x is not None and x == body(b)
        except Exception:  # noqa: BLE001 - as in op
            return False

    def op(self, program_id: int | None, op_name: str) -> HloOp | None:
        """The instruction ``op_name`` of module ``program_id``, None when either is unknown,
        the module is unusable or the instruction fails to decode (that op alone has no
        shapes; one note per module, naming the first such instruction looked up)."""
        mod = self.get(program_id)
        if mod is None:
            return None
        try:
            return mod.ops.get(op_name)
        except Exception as exc:  # noqa: BLE001 - as in get
            if program_id not in self._bad_ops:
                self._bad_ops.add(program_id)
                self.errors.append(f"HLO proto of {self.raw[program_id][0]}({program_id}): instruction "
                                   f"{op_name} is unreadable ({type(exc).__name__}: {exc}); the ops whose "
                                   "instructions cannot be read have no shapes")
            return None
