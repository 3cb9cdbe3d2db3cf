"""FLOPs and bytes of one HLO op, derived from the HLO when the trace does not record them.

TPU traces carry ``flops`` / ``bytes_accessed`` per op (libtpu's cost model); GPU and CPU
traces carry none, and XProf reports 0 FLOPs for library GEMM/convolution custom-calls. We
derive, per occurrence:

* **dot**: ``2 · prod(result dims) · prod(lhs contracting dim sizes)`` — each output
  element is a K-long multiply-add (2 FLOPs per MAC), the convention of XLA's
  ``HloCostAnalysis::HandleDot`` and of vendor peak FLOP/s figures.
* **convolution**: ``2 · prod(result dims) · (kernel input features) · prod(kernel spatial
  dims)`` — per output element one MAC per kernel tap and input feature of its group
  (``HloCostAnalysis::HandleConvolution``; the kernel's input-feature dimension is already
  per feature group).
* **GEMM / convolution custom-calls** (``__cublas$gemm``, ``__cublas$lt$matmul``,
  hipBLASLt, ``__cudnn$conv*``, MIOpen): the same formulas from their operand and result
  shapes, with the dot dimension numbers from ``gemm_backend_config`` when present (else
  the last lhs dimension is contracted with the first non-batch rhs dimension) and the
  convolution dimension numbers of the instruction.
* **fusion**: the sum over the instructions of the fused computation (recursively).
* **elementwise** ops: one FLOP per result element (transcendentals counted as one FLOP,
  as XLA's ``flop_count``); **reduce** / **reduce-window**: one FLOP per input element.
  Data movement (copy, broadcast, transpose, reshape, slice, convert, ...) is 0 FLOPs.
* **bytes**: sum of operand sizes plus result size (the workspace member of a custom-call
  tuple result is dropped), i.e. each buffer read or written once — the lower bound HBM
  traffic that ``HloCostAnalysis`` reports as ``bytes accessed`` for a top-level op.
"""

from __future__ import annotations

import json
import re

from traceview.model.shapes import Shape, shape_from_proto, strip_workspace

ELEMENTWISE = frozenset({
    "add", "subtract", "multiply", "divide", "remainder", "maximum", "minimum", "power", "atan2",
    "negate", "abs", "sign", "exponential", "exponential-minus-one", "log", "log-plus-one",
    "tanh", "logistic", "sqrt", "rsqrt", "cbrt", "sine", "cosine", "tan", "erf", "floor", "ceil",
    "round-nearest-afz", "round-nearest-even", "compare", "select", "clamp", "and", "or", "xor",
    "not", "shift-left", "shift-right-arithmetic", "shift-right-logical", "is-finite", "popcnt",
    "count-leading-zeros", "real", "imag", "complex", "reduce-precision", "stochastic-convert",
})
REDUCTIONS = frozenset({"reduce", "reduce-window", "all-reduce", "reduce-scatter", "all-reduce-start"})
#: the opcodes :meth:`ModuleCosts.instruction_flops` counts from shapes (every other one: 0, or its
#: called computations)
_COSTED = ELEMENTWISE | REDUCTIONS | {"dot", "convolution", "custom-call"}
GEMM_TARGETS = re.compile(r"gemm|matmul|cublas|hipblas|rocblas", re.I)
CONV_TARGETS = re.compile(r"conv|miopen", re.I)


def _prod(xs) -> int:
    n = 1
    for x in xs:
        n *= int(x)
    return n


def dot_flops(result: Shape, lhs: Shape, lhs_contracting: list[int]) -> int:
    """2 · prod(result dims) · prod(lhs[d] for d in lhs_contracting)."""
    k = _prod(lhs.dims[d] for d in lhs_contracting if 0 <= d < len(lhs.dims))
    return 2 * result.elements * k


def gemm_flops_from_shapes(result: Shape, lhs: Shape, rhs: Shape, lhs_contracting: list[int] | None = None) -> int:
    """FLOPs of a GEMM from operand/result shapes (2·M·N·K for rank 2).

    With ``lhs_contracting`` unknown, K is the last lhs dimension (row-major ``A[M,K]·B[K,N]``,
    batch dims leading), which is what JAX emits for ``jnp.dot``/``einsum`` lowered to
    library GEMMs. Example: bf16[8192,4096] x bf16[4096,8192] -> 2·8192·8192·4096.
    """
    if lhs_contracting is None:
        lhs_contracting = [len(lhs.dims) - 1] if lhs.dims else []
    return dot_flops(result, lhs, lhs_contracting)


def conv_flops(result: Shape, kernel: Shape, kernel_input_feature_dim: int, kernel_spatial_dims: list[int]) -> int:
    """2 · prod(result dims) · kernel[input feature] · prod(kernel spatial dims)."""
    taps = _prod(kernel.dims[d] for d in kernel_spatial_dims if 0 <= d < len(kernel.dims))
    cin = kernel.dims[kernel_input_feature_dim] if 0 <= kernel_input_feature_dim < len(kernel.dims) else 1
    return 2 * result.elements * cin * taps


def io_bytes(result: Shape | None, operands, opcode: str) -> int:
    """Operand bytes + result bytes (custom-call workspace dropped)."""
    res = strip_workspace(result, opcode)
    total = res.bytes if res is not None else 0
    for o in operands:
        if o is not None:
            total += o.bytes
    return total


def _gemm_contracting(ins) -> list[int] | None:
    cfg = bytes(ins.backend_config or b"")
    if not cfg or b"dot_dimension_numbers" not in cfg:
        return None
    try:
        data = json.loads(cfg.decode("utf-8", "replace"))
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    for v in data.values():
        if isinstance(v, dict) and isinstance(v.get("dot_dimension_numbers"), dict):
            dims = v["dot_dimension_numbers"].get("lhs_contracting_dimensions", [])
            try:
                return [int(d) for d in dims]
            except (TypeError, ValueError):
                return None
    return None


class ModuleCosts:
    """FLOPs of the instructions of one decoded ``HloModuleProto``, memoized per computation."""

    def __init__(self, module_proto, by_id: dict | None = None) -> None:
        """``by_id``: the module's instructions by id (the later of a repeated id), when the
        caller has them."""
        self.comps = {comp.id: comp for comp in module_proto.computations}
        if by_id is None:
            by_id = {ins.id: ins for comp in module_proto.computations for ins in comp.instructions}
        self.by_id = by_id
        self._comp_flops: dict[int, int] = {}
        self._shapes: dict[int, Shape | None] = {}

    def shape(self, ins_id) -> Shape | None:
        """The result shape of instruction ``ins_id`` (None for an unknown id), converted once."""
        got = self._shapes.get(ins_id, False)
        if got is False:
            o = self.by_id.get(ins_id)
            got = self._shapes[ins_id] = None if o is None else shape_from_proto(o.shape)
        return got

    _shape = shape

    def computation_flops(self, comp_id: int, depth: int = 0) -> int:
        if comp_id in self._comp_flops:
            return self._comp_flops[comp_id]
        comp = self.comps.get(comp_id)
        if comp is None or depth > 32:
            return 0
        self._comp_flops[comp_id] = 0  # cycle guard
        total = sum(self.instruction_flops(i, depth + 1) for i in comp.instructions)
        self._comp_flops[comp_id] = total
        return total

    def instruction_flops(self, ins, depth: int = 0) -> int:
        """FLOPs of one execution of ``ins`` (see the module docstring for the rules)."""
        op = ins.opcode
        if op in ("fusion", "call", "async-start") and ins.called_computation_ids:
            return sum(self.computation_flops(c, depth) for c in ins.called_computation_ids)
        if op not in _COSTED:  # no FLOPs: its shape is not read
            return 0
        result = shape_from_proto(ins.shape)
        if op == "dot":
            lhs = self._shape(ins.operand_ids[0]) if ins.operand_ids else None
            if lhs is None:
                return 0
            return dot_flops(result, lhs, list(ins.dot_dimension_numbers.lhs_contracting_dimensions))
        if op == "convolution":
            kernel = self._shape(ins.operand_ids[1]) if len(ins.operand_ids) > 1 else None
            if kernel is None:
                return 0
            cdn = ins.convolution_dimension_numbers
            return conv_flops(result, kernel, cdn.kernel_input_feature_dimension, list(cdn.kernel_spatial_dimensions))
        if op == "custom-call":
            target = ins.custom_call_target
            res = strip_workspace(result, op)
            res = res.leaves()[0] if res is not None and res.is_tuple else res
            if GEMM_TARGETS.search(target) and len(ins.operand_ids) >= 2:
                lhs, rhs = self._shape(ins.operand_ids[0]), self._shape(ins.operand_ids[1])
                if lhs is None or rhs is None or res is None:
                    return 0
                return gemm_flops_from_shapes(res, lhs, rhs, _gemm_contracting(ins))
            if CONV_TARGETS.search(target) and len(ins.operand_ids) >= 2:
                kernel = self._shape(ins.operand_ids[1])
                if kernel is None or res is None:
                    return 0
                cdn = ins.convolution_dimension_numbers
                return conv_flops(res, kernel, cdn.kernel_input_feature_dimension, list(cdn.kernel_spatial_dimensions))
            return 0
        if op in ELEMENTWISE:
            return result.elements
        if op in REDUCTIONS:
            src = self._shape(ins.operand_ids[0]) if ins.operand_ids else None
            return src.elements if src is not None else 0
        return 0
