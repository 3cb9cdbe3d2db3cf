"""Interpreted Pallas kernels as one op row per invocation, as on an accelerator.

On TPU a Pallas kernel is one custom-call per invocation. On CPU (``interpret=True``) the
Pallas interpreter (``jax._src.pallas.hlo_interpreter.pallas_call_hlo_interpret``) lowers
the kernel to XLA ops instead: a ``while`` loop over the grid whose body slices the blocks,
runs the kernel's ops and writes the blocks back, plus the scalar bookkeeping XLA adds
(``copy s32[]`` of the loop state, ``cond``, ``wrapped_add``). A 30-call profile holds
~10^5 such events; this pass folds each invocation back into one event.

**Identification, from the trace only.** ``pallas_call(name=...)`` opens a named scope
around the interpreted call, so every op of the kernel has ``<path>/<name>/while...`` in its
``framework_op`` (the HLO ``op_name`` metadata): the name, then the interpreter's grid loop.
A *kernel scope* is such a ``<path>/<name>`` (``name`` a user scope: not ``jit(...)`` or
another transform, not ``while`` / ``body`` / ``cond`` / ...) where either ``name`` is a
configuration-carrying kernel name (:mod:`traceview.model.kernelname`), or no op of the
module has ``<path>/<name>`` in its path without the grid loop right after it (a named scope
that merely contains a ``lax.while_loop`` besides other ops, like ``topp_binary_search``,
is not a kernel). Limits: a ``pallas_call`` without ``name=`` leaves no scope (its loop reads
``jit(f)/while``, like any ``lax.while_loop``) and stays expanded; a user scope holding only
a ``while_loop`` is taken for a kernel; a CPU ``.trace.json.gz`` read alone carries no
``op_name`` metadata, so nothing in it is folded (the ``.xplane.pb`` beside it is preferred).

**Invocations, from the timeline.** An invocation starts with its outermost grid loop event
(``<scope>/while``, opcode ``while``) and holds every event of the device carrying the scope
from there to the next invocation's loop, on any thread: the XLA:CPU runtime runs later
iterations on other threads (``tf_XLAEigen/...``), after the loop event itself has ended.
Events without ``op_name`` (the loop-state copies XLA emits) belong to it when they run on
the loop's thread inside the loop event, nested in one of its ops, or between two of its
events on one thread. Where XLA removed the loop (a one-step grid), each
maximal run of consecutive kernel-scope events on a line is one invocation.

**The row.** ``op_name`` = the kernel's name, ``op_kind`` / ``category`` = ``custom-call``
(what the TPU trace shows), ``framework_op`` = the scope path, source = the grid loop's
(the ``pallas_call`` site); ``shape``: the grid loop's carry without its leading ``s32[]``
loop counters (the kernel's inputs, outputs, scratch buffers and scalar-prefetch operands,
e.g. ``(f32[4,1,8,64], f32[1,33,16,64], ...)``), or the longest op's shape without a loop;
``start_ps`` = the first event's start; ``duration_ps`` = ``self_ps`` = the sum of its events'
self times (the loop's wall time when the loop encloses everything). ``flops``: the mean over
the row's invocations of the sum of its scoped ops' FLOPs (per occurrence x occurrences): the
arithmetic the interpreter executed for the blocks it visited; ``bytes_accessed``: null, as
the interpreter's ops move whole carried arrays (its dynamic-update-slices copy the KV
scratch), not the kernel's memory traffic; ``cost_source`` ``derived`` (``unknown`` without
FLOPs). The ``pl.CostEstimate`` of a ``pallas_call`` does not reach a CPU trace: the
interpreter drops it (``del ... cost_estimate``) and no op, HLO text or stat carries it.
"""

from __future__ import annotations

import re

import numpy as np
import polars as pl

from traceview.model.kernelname import find_kernel_name
from traceview.model.optable import OpTable

try:  # optional C accelerator
    from traceview.model import _passes as _fast
except ImportError:  # pragma: no cover - exercised when the extension is absent
    _fast = None

#: name-stack components that are JAX transforms or control flow, never a kernel's name
_STRUCTURAL = frozenset({"while", "body", "cond", "closed_call", "core_call", "remat", "checkpoint", "shard_map",
                         "scan", "pallas_call", "custom_jvp_call", "custom_vjp_call", "jvp", "transpose",
                         "vmap", "pjit", "xla_call", "named_call"})
_TRANSFORM = re.compile(r"^[\w.]*\(.*\)$|^branch_\d+_fun$")
#: ops the interpreter may emit inside the named scope but outside the grid loop (padding
#: of ragged blocks, the output's initial value, the unpadded result)
_PROLOGUE = frozenset({"pad", "slice", "broadcast_in_dim", "copy", "copy_p", "convert_element_type",
                       "dynamic_slice", "concatenate", "iota"})
_LEAD_COUNTER = "s32[]"


def _user_scope(comp: str) -> bool:
    return bool(comp) and comp not in _STRUCTURAL and not _TRANSFORM.match(comp)


def _paths(framework_op: str | None) -> list[list[str]]:
    return [p.split("/") for p in (framework_op or "").split(";") if p]


def _split_top(text: str) -> list[str]:
    """``"a[1,2], (b, c), d"`` -> ``["a[1,2]", "(b, c)", "d"]`` (commas outside brackets)."""
    out, depth, cur = [], 0, []
    for ch in text:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == "," and depth == 0:
            out.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    if "".join(cur).strip():
        out.append("".join(cur).strip())
    return out


def _strip_counters(side: str) -> str:
    side = side.strip()
    if not (side.startswith("(") and side.endswith(")")):
        return side
    parts = _split_top(side[1:-1])
    i = 0
    while i < len(parts) - 1 and parts[i] == _LEAD_COUNTER:
        i += 1
    return "(" + ", ".join(parts[i:]) + ")"


def loop_shape(shape: str | None) -> str:
    """The grid loop's carry without its leading ``s32[]`` loop counters, as a result-only
    signature (a ``while`` returns its operand's shape):
    ``"(s32[], s32[], f32[4,8], s32[4]) <- (s32[], s32[], f32[4,8], s32[4])"`` ->
    ``"(f32[4,8], s32[4])"``. Text without ``<-`` is stripped the same way."""
    if not shape:
        return ""
    return _strip_counters(shape.split(" <- ")[0])


def _by_start_longest_first(start: np.ndarray, dur: np.ndarray) -> np.ndarray:
    """The order of ``np.lexsort((-dur, start))`` (by start, then longest first, then by
    position), as one stable sort by start and a sort of the equal-start runs only."""
    order = np.argsort(start, kind="stable")
    s = start[order]
    tie = s[1:] == s[:-1]
    if not tie.any():
        return order
    in_run = np.zeros(len(s), dtype=bool)
    in_run[1:] |= tie
    in_run[:-1] |= tie
    pos = np.flatnonzero(in_run)
    run = np.cumsum(np.r_[True, ~tie])[pos]  # equal-start run id of each tied position
    sub = order[pos]
    order[pos] = sub[np.lexsort((-dur[sub], run))]
    return order


def _ints(col: pl.Series, fill: int) -> np.ndarray:
    """An integer column as int64 numpy, nulls as ``fill`` (no copy when it has none)."""
    if col.null_count():
        col = col.fill_null(fill)
    return col.to_numpy().astype(np.int64, copy=False)


def _small(ids: np.ndarray, n: int) -> np.ndarray:
    """``ids`` (values in ``[0, n)``) in the smallest unsigned dtype that holds them: numpy's
    stable sort of 8- and 16-bit integers is a radix sort."""
    return ids.astype(np.uint8 if n <= 1 << 8 else np.uint16 if n <= 1 << 16 else np.int64, copy=False)


def kernel_scopes(attrs: pl.DataFrame) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Per op description (row of ``attrs``, an :class:`OpTable` attrs frame): the id of its
    kernel scope (-1: none) and whether it is the scope's grid loop (the ``while`` at
    ``<scope>/while``); and the scope paths by id (see the module doc for the rule)."""
    n = attrs.height
    scope = np.full(n, -1, dtype=np.int64)
    anchor = np.zeros(n, dtype=bool)
    if n == 0:
        return scope, anchor, []
    fops = attrs["framework_op"].to_list()
    mods = attrs["module"].to_list()
    kinds = attrs["op_kind"].to_list()
    cand: dict[tuple[str, str], str] = {}  # (module, scope path) -> kernel name
    first: dict[int, tuple[str, str, bool]] = {}
    for i, fop in enumerate(fops):
        if not fop or "/while" not in fop:
            continue
        for comps in _paths(fop):
            hit = next((j for j in range(len(comps) - 1) if comps[j + 1] == "while" and _user_scope(comps[j])), None)
            if hit is not None:
                path = "/".join(comps[:hit + 1])
                cand[(mods[i], path)] = comps[hit]
                first[i] = (mods[i], path, len(comps) == hit + 2 and kinds[i] == "while")
                break
    if not cand:
        return scope, anchor, []
    # a scope with ops outside its grid loop is a plain named scope (unless its name is a
    # configuration-carrying kernel name)
    outside = set()
    for i, fop in enumerate(fops):
        if not fop:
            continue
        for comps in _paths(fop):
            for j in range(len(comps)):
                key = (mods[i], "/".join(comps[:j + 1]))
                if key in cand and key not in outside:
                    nxt = comps[j + 1] if j + 1 < len(comps) else ""
                    if nxt != "while" and not (j + 2 == len(comps) and nxt in _PROLOGUE):
                        outside.add(key)
    ids: dict[tuple[str, str], int] = {}
    paths: list[str] = []
    for key, name in cand.items():
        if key in outside and find_kernel_name(name) != name:
            continue
        ids[key] = len(paths)
        paths.append(key[1])
    for i, (mod, path, is_loop) in first.items():
        k = ids.get((mod, path))
        if k is not None:
            scope[i] = k
            anchor[i] = is_loop
    return scope, anchor, paths


def _owners(s: np.ndarray, e: np.ndarray, ln: np.ndarray, sc: np.ndarray, anc: np.ndarray, bare: np.ndarray,
            n_lines: int, n_scopes: int, n_inv: int) -> tuple[np.ndarray, int]:
    """(invocation id of each event, -1 for none; the next free id) of one device's events in
    time order (``s`` ascending; ``e`` their ends, ps): ``ln`` their thread (< ``n_lines``),
    ``sc`` their kernel scope (-1: none; < ``n_scopes``), ``anc`` whether each is its scope's
    grid loop, ``bare`` whether it has no ``op_name``. Ids are numbered from ``n_inv``, scope by
    scope, then thread by thread (the module doc gives the rule). One pass in C
    (``_passes.kernel_owners``) where built, else numpy."""
    if _fast is not None:
        owner = np.full(len(s), -1, dtype=np.int64)
        got = _fast.kernel_owners(np.ascontiguousarray(s, dtype=np.int64), np.ascontiguousarray(e, dtype=np.int64),
                                  np.ascontiguousarray(ln, dtype=np.int64), np.ascontiguousarray(sc, dtype=np.int64),
                                  np.ascontiguousarray(anc, dtype=bool), np.ascontiguousarray(bare, dtype=bool),
                                  n_lines, n_scopes, n_inv, owner)
        if got >= 0:
            return owner, got
    owner = np.full(len(s), -1, dtype=np.int64)
    for scope in np.unique(sc[anc]):
        a_pos = np.nonzero(anc & (sc == scope))[0]
        # outermost grid loops only (a loop inside another one's span belongs to that one)
        keep = np.ones(len(a_pos), dtype=bool)
        keep[1:] = s[a_pos][1:] >= np.maximum.accumulate(e[a_pos])[:-1]
        a_pos = a_pos[keep]
        a_s, a_e, a_ln = s[a_pos], e[a_pos], ln[a_pos]
        k = np.searchsorted(a_s, s, side="right") - 1
        # the kernel's ops, on any thread, from its loop's start to the next invocation's
        # (the loop event itself may end before its last iterations, run on other threads)
        mine = np.flatnonzero((k >= 0) & (sc == scope))
        # events without op_name on the loop's thread, inside the loop event
        cand = np.flatnonzero((k >= 0) & bare & (owner < 0))
        kc = k[cand]
        cand = cand[(ln[cand] == a_ln[kc]) & (s[cand] >= a_s[kc]) & (e[cand] <= a_e[kc])]
        owner[mine] = k[mine] + n_inv
        owner[cand] = k[cand] + n_inv
        n_inv += len(a_pos)
    # each thread's events in time order, found by one stable sort (not a scan per thread)
    by_ln = np.argsort(_small(ln, n_lines), kind="stable")
    bounds = np.concatenate(([0], np.cumsum(np.bincount(ln, minlength=n_lines))))

    def thread(one):
        return by_ln[bounds[one]:bounds[one + 1]]

    # per thread, events without op_name nested in a kernel op or between two events of
    # one invocation (the loop-state copies) belong to it
    for one in np.unique(ln[owner >= 0]):
        on = thread(one)
        own = owner[on]
        taken = on[own >= 0]
        ps, pe = s[taken], e[taken]
        outer = np.ones(len(taken), dtype=bool)
        outer[1:] = ps[1:] >= np.maximum.accumulate(pe)[:-1]
        taken, ps, pe = taken[outer], ps[outer], pe[outer]
        free = on[(own < 0) & bare[on]]
        j = np.searchsorted(ps, s[free], side="right") - 1
        jj = np.maximum(j, 0)
        hit = (j >= 0) & (e[free] <= pe[jj])
        owner[free[hit]] = owner[taken[jj[hit]]]
        own = owner[on]
        mark = np.where(own >= 0, own, np.where(bare[on], -1, -2))
        known = mark != -1
        prev_i = np.maximum.accumulate(np.where(known, np.arange(len(on)), -1))
        nxt_i = np.minimum.accumulate(np.where(known, np.arange(len(on)), len(on))[::-1])[::-1]
        prev = np.where(prev_i >= 0, mark[np.maximum(prev_i, 0)], -2)
        nxt = np.where(nxt_i < len(on), mark[np.minimum(nxt_i, len(on) - 1)], -2)
        sandwich = (mark == -1) & (prev >= 0) & (prev == nxt)
        owner[on[sandwich]] = prev[sandwich]
    # kernel ops no grid loop encloses (XLA removed a one-step loop): runs of consecutive
    # events of one thread
    for one in np.unique(ln[(owner < 0) & (sc >= 0)]):
        on = thread(one)
        f = np.where(owner[on] < 0, sc[on], -1)
        loose = f >= 0
        new_run = loose.copy()
        new_run[1:] &= ~(loose[:-1] & (f[1:] == f[:-1]))
        run_id = np.cumsum(new_run) - 1
        owner[on[loose]] = run_id[loose] + n_inv
        n_inv += int(new_run.sum())
    return owner, n_inv


def _invocations(table: OpTable):
    """(per event its invocation id, -1 for none; the number of invocations; the kernel
    scopes' paths; per description its scope index, -1 for none, and whether it is its
    scope's grid loop) of ``table`` by the module doc's rule, or None when it holds no kernel
    scope."""
    attrs = table.attrs
    if table.height == 0 or attrs.height == 0:
        return None
    scope_of, anchor_of, paths = kernel_scopes(attrs)
    if not paths:
        return None
    ev = table.events
    attr = ev["attr"].to_numpy().astype(np.int64)
    start_s = ev["start_ps"]
    timed_all = start_s.null_count() == 0
    has_start = None if timed_all else start_s.is_not_null().to_numpy()
    start = _ints(start_s, 0)
    dur = _ints(ev["duration_ps"], 0)
    # a thread is (host, run, file, device, line): events of one thread nest; the XLA:CPU
    # runtime runs parts of one loop body on other threads of the device
    line_of = (attrs.select(pl.struct(["host", "run", "file", "device", "line"]).rank("dense"))
               .to_series().to_numpy().astype(np.int64))
    dev_of = (attrs.select(pl.struct(["host", "run", "file", "device"]).rank("dense"))
              .to_series().to_numpy().astype(np.int64))
    n_lines = int(line_of.max()) + 1
    bare_of = (attrs["framework_op"].fill_null("") == "").to_numpy()
    inv = np.full(len(attr), -1, dtype=np.int64)  # invocation id per event
    n_inv = 0
    # the devices with a timed kernel-scope event (per description: which have timed events)
    timed_attr = np.bincount(attr if timed_all else attr[has_start], minlength=attrs.height) > 0
    one_device = len(np.unique(dev_of)) == 1
    ev_dev = None if one_device else dev_of[attr]
    for dv in np.unique(dev_of[(scope_of >= 0) & timed_attr]):
        if one_device and timed_all:
            order = _by_start_longest_first(start, dur)
        else:
            sel = has_start if one_device else (ev_dev == dv) if timed_all else (ev_dev == dv) & has_start
            idx = np.flatnonzero(sel)
            order = idx[_by_start_longest_first(start[idx], dur[idx])]
        a_o = attr[order]
        s = start[order]
        owner, n_inv = _owners(s, s + dur[order], line_of[a_o], scope_of[a_o], anchor_of[a_o], bare_of[a_o],
                               n_lines, len(paths), n_inv)
        inv[order] = owner
    return inv, n_inv, paths, scope_of, anchor_of


def folded_events(table: OpTable) -> dict[str, tuple[int, int]]:
    """Per kernel name (the scope's last component, the folded row's ``op_name``): (its
    invocations, the events :func:`collapse_kernels` folds into them) in ``table``, an
    unfolded op table. {} when nothing would be folded."""
    got = _invocations(table)
    if got is None or got[1] == 0:
        return {}
    inv, n_inv, paths, scope_of, _ = got
    attr = table.events["attr"].to_numpy().astype(np.int64)
    members = np.bincount(inv[inv >= 0], minlength=n_inv)
    inv_scope = np.full(n_inv, -1, dtype=np.int64)
    own = (inv >= 0) & (scope_of[attr] >= 0)
    inv_scope[inv[own]] = scope_of[attr[own]]  # every invocation holds one of its scope's ops
    out: dict[str, list[int]] = {}
    for k, m in zip(inv_scope.tolist(), members.tolist()):
        name = paths[k].rsplit("/", 1)[-1]
        got_k = out.setdefault(name, [0, 0])
        got_k[0] += 1
        got_k[1] += m
    return {k: (v[0], v[1]) for k, v in out.items()}


def collapse_kernels(table: OpTable) -> OpTable:
    """``table`` with the events of every interpreted Pallas kernel invocation folded into
    one event of a new description (the module doc gives the rule and the row's columns).
    Returns ``table`` itself when it holds no kernel scope (every TPU/GPU trace: there the
    kernel is already one custom-call). Pre-aggregated events (no start) are kept as they are."""
    got = _invocations(table)
    if got is None:
        return table
    inv, n_inv, paths, scope_of, anchor_of = got
    attrs = table.attrs
    ev = table.events
    attr = ev["attr"].to_numpy().astype(np.int64)
    start = _ints(ev["start_ps"], 0)
    dur = _ints(ev["duration_ps"], 0)
    selfp = _ints(ev["self_ps"], 0)
    count = _ints(ev["count"], 1)
    n = len(attr)
    if n_inv == 0:
        return table
    # per invocation: its first event, start, self time, FLOPs of the kernel's own ops (not
    # the bare loop-state copies and broadcasts XLA adds), scope, and lead event (the grid
    # loop when there is one, else the longest event; ties: the last in table order)
    flops = np.nan_to_num(attrs["flops"].to_numpy().astype(np.float64), nan=0.0)
    first_pos = np.full(n_inv, n, dtype=np.int64)
    inv_start = np.full(n_inv, np.iinfo(np.int64).max, dtype=np.int64)
    inv_scope = np.full(n_inv, -1, dtype=np.int64)
    lead = np.full(n_inv, -1, dtype=np.int64)
    top = np.full(n_inv, np.iinfo(np.int64).min, dtype=np.int64)
    self_sum, inv_flops = np.zeros(n_inv), np.zeros(n_inv)
    if _fast is None or not _fast.kernel_rows(
            inv, attr, start, dur, selfp, count, np.ascontiguousarray(scope_of, dtype=np.int64),
            np.ascontiguousarray(anchor_of, dtype=bool), flops, first_pos, inv_start, self_sum, inv_flops,
            inv_scope, lead, top):
        first_pos[:], inv_start[:], inv_scope[:], lead[:], top[:] = n, np.iinfo(np.int64).max, -1, -1, \
            np.iinfo(np.int64).min
        members = np.nonzero(inv >= 0)[0]
        mi = inv[members]
        np.minimum.at(first_pos, mi, members)
        np.minimum.at(inv_start, mi, start[members])
        self_sum = np.bincount(mi, weights=selfp[members], minlength=n_inv)
        attr_m = attr[members]
        sc_m = scope_of[attr_m]
        fl = flops[attr_m] * count[members] * (sc_m >= 0)
        inv_flops = np.bincount(mi, weights=fl, minlength=n_inv)
        rank = np.where(anchor_of[attr_m], np.iinfo(np.int64).max, dur[members])
        np.maximum.at(top, mi, rank)
        best = rank == top[mi]
        np.maximum.at(lead, mi[best], members[best])
        has_sc = sc_m >= 0
        inv_scope[mi[has_sc]] = sc_m[has_sc]
    inv_self = self_sum.astype(np.int64)
    lead_attr = attr[lead]
    lead_rows = (pl.DataFrame({"attr": pl.Series(lead_attr, dtype=pl.UInt32)})
                 .join(attrs, on="attr", how="left", maintain_order="left"))
    names = [paths[k].rsplit("/", 1)[-1] for k in inv_scope]
    # per description: the shape of the invocations it leads
    u_attr, u_inv = np.unique(lead_attr, return_inverse=True)
    u_shape = attrs["shape"].gather(pl.Series(u_attr, dtype=pl.UInt32)).to_list()
    u_shapes = [loop_shape(sh) if a else (sh or "") for sh, a in zip(u_shape, anchor_of[u_attr].tolist())]
    shapes = [u_shapes[i] for i in u_inv.tolist()]
    desc = lead_rows.with_columns(
        pl.Series("op_name", names, dtype=pl.Utf8),
        pl.lit("custom-call").alias("op_kind"), pl.lit("custom-call").alias("category"),
        pl.Series("shape", shapes, dtype=pl.Utf8),
        pl.lit("").alias("hlo_text"), pl.lit("").alias("kernel"),
        pl.Series("framework_op", [paths[k] for k in inv_scope], dtype=pl.Utf8),
    ).drop("attr")
    cols = [c for c in desc.columns if c not in ("flops", "model_flops", "bytes_accessed", "cost_source")]
    desc = desc.with_columns(pl.Series("_fl", inv_flops, dtype=pl.Float64))
    groups = desc.with_row_index("_inv").group_by(cols, maintain_order=True).agg(
        pl.col("_inv"), pl.col("_fl").mean().alias("flops"))
    new_id = np.empty(n_inv, dtype=np.int64)
    g_rows = groups["_inv"]
    new_id[g_rows.explode().to_numpy().astype(np.int64)] = np.repeat(
        np.arange(groups.height, dtype=np.int64) + attrs.height, g_rows.list.len().to_numpy())
    new_attrs = groups.drop("_inv").with_columns(
        pl.when(pl.col("flops") > 0).then(pl.col("flops")).otherwise(None).alias("flops"),
        pl.lit(None, dtype=pl.Float64).alias("model_flops"),
        pl.lit(None, dtype=pl.Float64).alias("bytes_accessed"),
        pl.when(pl.col("flops") > 0).then(pl.lit("derived")).otherwise(pl.lit("unknown")).alias("cost_source"),
    ).with_row_index("attr", offset=attrs.height).select(attrs.columns).cast(dict(attrs.schema))
    # each invocation's event in place of its first member, the other members dropped
    new_ev = (("attr", new_id), ("start_ps", inv_start), ("duration_ps", inv_self), ("self_ps", inv_self),
              ("count", np.ones(n_inv, dtype=np.int64)))
    kept = inv < 0
    if any(ev[c].null_count() for c, _ in new_ev):
        pos = np.concatenate([np.nonzero(kept)[0], first_pos])
        out_ev = pl.concat([
            ev.filter(pl.Series(kept)),
            pl.DataFrame({c: pl.Series(v, dtype=ev.schema[c]) for c, v in new_ev}).select(ev.columns),
        ], how="vertical")
        out_ev = out_ev.select(pl.all().gather(pl.Series(np.argsort(pos, kind="stable"))))
    else:
        kept[first_pos] = True
        rows = np.flatnonzero(kept)
        slot = np.searchsorted(rows, first_pos)
        out = {}
        for c, v in new_ev:
            a = ev[c].to_numpy()[rows]
            a[slot] = v
            out[c] = pl.Series(c, a, dtype=ev.schema[c])
        out_ev = pl.DataFrame(out).select(ev.columns)
    return OpTable(out_ev, pl.concat([attrs, new_attrs], how="vertical"))
