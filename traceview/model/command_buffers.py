"""The instructions of the kernels an XLA:GPU command buffer (a CUDA graph) runs that name none.

Inside a command buffer every kernel event carries the buffer's thunk as ``hlo_op``
(``command_buffer_1``, no instruction of the module). A fusion's kernel is named after the
fusion (:func:`traceview.model.from_xplane._kernel_namesake`); a cuBLAS GEMM (``nvjet_sm90_*``
of a ``__cublas$lt$matmul`` custom-call, say) and the memset it runs first are not. Such a
kernel becomes the op ``<thunk>/<instruction>`` (``command_buffer_1/custom-call.2``), not
``<thunk>/<kernel>``: cuBLAS picks its kernel by heuristics, and GEMMs of different shapes run
kernels of one name. Two facts of the trace place them:

* the per-event stats ``cuda_graph_id`` and ``cuda_graph_node_id`` (CUPTI's graph and node of
  each kernel or memset run by a graph): one node is one command of the buffer, the same in
  every launch of the graph, so the work is per node, not per event;
* the module's schedule (``HloModuleProto.schedule``): XLA:GPU emits one thunk per scheduled
  instruction, in that order, and a command buffer records them as they come, so one launch
  of the graph runs its nodes in the schedule's order.

Rule, per (program, graph) of a line: the nodes in order of their first event (the first
launch); those whose kernel is an instruction (its own ``hlo_op``, or the fusion it is named
after) are anchors and are placed in a scheduled computation's sequence, each after the
previous one: at that instruction, else (a kernel named after a fusion that does not come
again) at the next fusion identical to it, which XLA runs with the first one's kernel. A run of
nameless nodes between two anchors is given the one instruction between them that can launch
work (not a parameter, bitcast, tuple, ...; not an instruction some event names outright).
Nothing is attributed for a graph whose anchors do not all fall in order in one sequence, for
a run with no anchor on one side, none or several candidate instructions, or a node whose
events are of several kernels: a kernel is never given an instruction on absence of evidence.
"""

from __future__ import annotations

import numpy as np

from traceview.model.annotated_plane import EXTRA_STATS
from traceview.model.hlo import HloIndex, HloOp
from traceview.read.xplane import wire

#: columns of :attr:`~traceview.read.xplane.wire.AnnotatedLine.extra_kinds` holding a
#: kernel's CUDA graph and graph node
GRAPH_COL = EXTRA_STATS.index("cuda_graph_id")
NODE_COL = EXTRA_STATS.index("cuda_graph_node_id")

#: the thunk part of an op run in a command buffer (:func:`graph_op`: ``command_buffer_1/``),
#: which no HLO instruction's name holds
IN_GRAPH = r"^command_buffer(?:_\d+)?/"


def graph_op(thunk: str, name: str) -> str:
    """The op name of the instruction or kernel ``name`` run in the command buffer whose thunk
    (the kernels' ``hlo_op``) is ``thunk``: ``command_buffer_1/custom-call.2``."""
    return f"{thunk}/{name}"


#: opcodes of scheduled instructions that launch nothing on the device (no thunk, or one
#: that only aliases buffers)
NO_LAUNCH = frozenset({"parameter", "constant", "bitcast", "get-tuple-element", "tuple", "after-all",
                       "add-dependency", "opt-barrier", "domain"})


def attribute(le, pids: list, insts: list, exact: list, thunks: list, hlo: HloIndex):
    """The instructions of a decoded line's (:class:`~traceview.read.xplane.wire.AnnotatedLine`)
    nameless command-buffer kernels (module doc). Per combo ``c`` of the line: ``pids[c]``
    its program id (None: none), ``insts[c]`` the instruction its events are (None: none),
    ``exact[c]`` whether that is the events' own ``hlo_op`` (else the fusion the kernel is
    named after), ``thunks[c]`` the thunk's name for a nameless kernel of a program with an
    HLO module (else None).

    Returns None when nothing is attributed, else (combo per event, added): the line's combo
    ids with each attributed event's replaced by ``len(pids) + k``, and ``added[k]`` =
    (the original combo, the instruction) of the new id ``k``."""
    want = sorted({p for p, t in zip(pids, thunks) if t is not None and p is not None})
    n = len(le.combo)
    if not want or not n or le.extra_kinds.shape[1] <= NODE_COL:
        return None
    kinds = le.extra_kinds
    has = (kinds[:, NODE_COL] != wire.KIND_ABSENT) & (kinds[:, GRAPH_COL] != wire.KIND_ABSENT)
    if not has.any():
        return None
    pid_of = np.array([-1 if p is None else int(p) for p in pids], dtype=np.int64)
    wanted = np.zeros(len(pids), dtype=bool)
    wanted[np.isin(pid_of, np.array(want, dtype=np.int64))] = True
    sel = np.flatnonzero(has & wanted[le.combo])
    if not len(sel):
        return None
    starts = le.starts[sel]
    if len(sel) > 1 and bool((starts[1:] < starts[:-1]).any()):
        sel = sel[np.argsort(starts, kind="stable")]
    cmb = le.combo[sel].astype(np.int64)
    pid = pid_of[cmb]
    graph = le.extra_values[sel, GRAPH_COL]
    node = le.extra_values[sel, NODE_COL]
    # the distinct (program, graph, node), each at its first event (time order kept by the stable sort)
    o = np.lexsort((node, graph, pid))
    sp, sg, sn, sc = pid[o], graph[o], node[o], cmb[o]
    new = np.ones(len(o), dtype=bool)
    new[1:] = (sp[1:] != sp[:-1]) | (sg[1:] != sg[:-1]) | (sn[1:] != sn[:-1])
    heads = np.flatnonzero(new)
    first = o[heads]
    cmin, cmax = np.minimum.reduceat(sc, heads), np.maximum.reduceat(sc, heads)
    node_combo = np.where(cmin == cmax, cmin, -1)  # -1: the node's events are of several kernels
    node_pid, node_graph, node_id = sp[heads], sg[heads], sn[heads]
    named = {}  # program -> the instructions some event of the line names outright
    for c, (p, inst, ex) in enumerate(zip(pids, insts, exact)):
        if inst is not None and ex and p is not None:
            named.setdefault(int(p), set()).add(inst.name)
    got_nodes, got_of = [], []  # attributed node keys (program, graph, node) and their (combo, instruction)
    order = np.lexsort((first, node_graph, node_pid))
    cuts = np.flatnonzero((np.diff(node_pid[order]) != 0) | (np.diff(node_graph[order]) != 0)) + 1
    memo: dict[tuple, dict] = {}  # graphs of one program recorded alike (one per launch, say) are placed once
    for grp in np.split(order, cuts):
        p = int(node_pid[grp[0]])
        seq_combos = node_combo[grp].tolist()
        key = (p, tuple(seq_combos))
        if key not in memo:
            memo[key] = _place(seq_combos, p, insts, exact, thunks, hlo, named.get(p, set()))
        placed = memo[key]
        for k, inst in placed.items():
            got_nodes.append(grp[k])
            got_of.append((seq_combos[k], inst))
    if not got_nodes:
        return None
    # the new combo of each attributed node: one per distinct (combo, instruction)
    ids: dict[tuple, int] = {}
    added = []
    node_new = np.empty(len(got_nodes), dtype=np.int64)
    for i, (c, inst) in enumerate(got_of):
        key = (c, inst.name)
        if key not in ids:
            ids[key] = len(pids) + len(added)
            added.append((c, inst))
        node_new[i] = ids[key]
    # every event of an attributed node: found by its (program, graph, node) among the sorted heads
    mark = np.full(len(heads), -1, dtype=np.int64)
    mark[np.array(got_nodes, dtype=np.int64)] = node_new
    ev_new = mark[np.cumsum(new) - 1]  # per event in the (program, graph, node) order o
    hit = ev_new >= 0
    combo = le.combo.astype(np.int64)
    combo[sel[o[hit]]] = ev_new[hit]
    return combo, added


def _place(seq: list, pid: int, insts: list, exact: list, thunks: list, hlo: HloIndex, named: set) -> dict:
    """{position in ``seq``: instruction} for the nameless nodes of one graph of program
    ``pid``, ``seq`` being its nodes' combos in order of first event (-1: a node of several
    kernels); {} unless the anchors fall in order in exactly one scheduled sequence (module
    doc), or when that placement attributes nothing."""
    first = next((c for c in seq if c >= 0 and insts[c] is not None), None)
    if first is None or not any(c >= 0 and thunks[c] is not None for c in seq):
        return {}
    found = None
    for sched in hlo.schedules(pid):
        if not any(name == insts[first].name for name, _ in sched):
            continue
        got = _align(seq, sched, pid, insts, exact, thunks, hlo, named)
        if got is None:
            continue
        if found is not None and got != found:
            return {}  # two sequences place the anchors, differently
        found = got
    return found or {}


def _align(seq: list, sched: tuple, pid: int, insts: list, exact: list, thunks: list, hlo: HloIndex,
           named: set) -> dict | None:
    """The placement of one graph's nodes in one scheduled sequence (:func:`_place`); None
    when an anchor does not fall after the previous one."""
    out: dict[int, HloOp] = {}
    prev = -1  # the previous anchor's position in sched
    run: list[int] = []  # the nameless nodes since it
    broken = False  # a node of the run is neither nameless nor an anchor
    for k, c in enumerate(seq):
        inst = insts[c] if c >= 0 else None
        if inst is None:
            if c >= 0 and thunks[c] is not None:
                run.append(k)
            else:
                broken = True
            continue
        j = _find(sched, prev, inst, exact[c], pid, hlo)
        if j is None:
            return None
        if run and prev >= 0 and not broken:
            cands = [i for i in range(prev + 1, j) if sched[i][1] not in NO_LAUNCH and sched[i][0] not in named]
            if len(cands) == 1:
                target = hlo.op(pid, sched[cands[0]][0])
                if target is not None:
                    out.update((r, target) for r in run)
        run, broken, prev = [], False, j
    return out


def _find(sched: tuple, prev: int, inst: HloOp, exact: bool, pid: int, hlo: HloIndex) -> int | None:
    """The first position after ``prev`` of ``sched`` that runs ``inst``'s kernel: ``inst``
    itself, else (``exact`` False: a kernel named after a fusion, which XLA also runs for the
    fusions identical to it) the first instruction that computes the same thing, names aside
    (:meth:`~traceview.model.hlo.HloIndex.same_body`)."""
    for i in range(prev + 1, len(sched)):
        if sched[i][0] == inst.name:
            return i
    if exact:
        return None
    for i in range(prev + 1, len(sched)):
        name, opcode = sched[i]
        if opcode == inst.opcode and hlo.same_body(pid, name, inst.name):
            return i
    return None
