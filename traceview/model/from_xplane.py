"""Read an XProf ``.xplane.pb`` (a serialized XSpace) into the op-event table.

Where op identity comes from, per platform:

* **TPU** — plane ``/device:TPU:<n>``, line ``XLA Ops``. Each XEventMetadata's ``name`` is
  the HLO text with shapes (``display_name`` the short op name) and its stats carry
  ``program_id``, ``hlo_category``, ``flops``, ``model_flops``, ``bytes_accessed``,
  ``source``, ``source_stack`` and ``tf_op``. Line ``XLA Modules`` holds one event per program
  execution, named ``<module>(<program_id>)``.
* **GPU** — plane ``/device:GPU:<n>``, lines ``Stream #<id>(...)``. Kernel events carry
  per-event stats ``hlo_op``, ``hlo_module``, ``program_id``; shapes, opcode and source come
  from the HLO protos in ``/host:metadata`` joined on (program_id, hlo_op). A kernel run in a
  command buffer (a CUDA graph) carries the buffer's thunk as ``hlo_op``: it is the fusion it
  is named after (:func:`_kernel_namesake`), else the instruction its graph node and the
  module's schedule place it at (:mod:`traceview.model.command_buffers`).
* **CPU** — plane ``/host:CPU``, XLA:CPU thunk-executor threads; events with ``hlo_op`` /
  ``hlo_module`` / ``program_id`` stats, joined to the HLO protos the same way; the
  ``end: <op>`` marker events are skipped. Used only when no device plane has HLO ops (on
  GPU hosts the host threads carry launch events, not op executions). Virtual CPU devices
  (``--xla_force_host_platform_device_count``) are told apart by each op event's
  ``device_ordinal`` stat (:mod:`traceview.model.cpu_devices`).

Event start = ``XLine.timestamp_ns * 1000 + XEvent.offset_ps`` (ps since session start, the
exporter's post-processing shifts timestamps); stats = XEventMetadata stats then XEvent
stats (the later wins); ``ref_value`` stats are resolved through the plane's
XStatMetadata names.

Every line is decoded into integer columns by the C decoder
(:mod:`traceview.read.xplane.wire`); strings, HLO text, shapes, sources and costs are worked
out once per op description (a TPU XEventMetadata; a GPU/CPU line's distinct (metadata id,
naming stats)) and joined to the events by integer id, never per event.
"""

from __future__ import annotations

import operator
import os
import re
from itertools import chain
from pathlib import Path

import numpy as np
import polars as pl

from traceview.errors import TraceUnreadable
from traceview.model import command_buffers
from traceview.model.hlo import HloIndex, HloOp
from traceview.model.schema import MODULE_RUNS_SCHEMA, OPS_SCHEMA, STEP_MARKERS_SCHEMA, DeviceInfo, TraceData, frame
from traceview.model.shapes import canonical_shape_text, instruction_signature
from traceview.model.timeline import self_times
from traceview.model.naming import as_float as _as_float
from traceview.model.hlo_graph import protos_frame
from traceview.model.kernel_lines import read_kernel_lines
from traceview.model.memory_events import has_memory_events, read_memory_events
from traceview.model.naming import as_uint64 as _as_int
from traceview.model.naming import EXPORT_STEPS_LINE, printable, split_module_name, split_source
from traceview.model.optable import ATTR_COLUMNS, OpTable
from traceview.model.ranks import is_device_plane, plane_ranks
from traceview.model.runtable import KEY_SCHEMA, RunTable
from traceview.model.tpu_plane import plane_arrays
from traceview.model.annotated_plane import KEY_STATS, consume, iter_lines
from traceview.read import hugearrays
from traceview.read.batch import threads_available
from traceview.read.xplane import wire
from traceview.read.xplane.wire import _full_line, _line_base_ps, count_events, decode_line, read_xspace_bytes

# polars resolves its lazy numpy proxy on first use, and not thread-safely: two plane threads
# making their first numpy-backed Series at once can both import it, and the second fails
# ("'module' object does not support item assignment"). Resolve it here, in the importing thread.
pl.Series(np.zeros(1, dtype=np.int64))

try:  # optional C accelerator (setup.py builds it when a compiler is available)
    from traceview.model import _passes as _fast
except ImportError:  # pragma: no cover - exercised when the extension is absent
    _fast = None

#: default cap on file size read into memory (bytes); over it raises LimitExceeded
MAX_FILE_BYTES = 8 << 30

#: at most this many threads read TPU planes at once (bounded by the cores)
PLANE_THREADS = 4
#: TPU line bytes above which planes are read one at a time (memory over speed)
PARALLEL_MAX_BYTES = 256 << 20
#: mean TPU line bytes per plane below which planes are read one at a time (no thread pool)
PARALLEL_MIN_PLANE_BYTES = 1 << 20


def _stat_value(stat, names: dict[int, str]):
    kind = stat.WhichOneof("value")
    if kind is None:
        return None
    if kind == "ref_value":
        return names.get(stat.ref_value, "")
    return getattr(stat, kind)


def _stats(stats, names: dict[int, str], stat_names: dict[int, str], into: dict | None = None) -> dict:
    out = {} if into is None else into
    for s in stats:
        out[stat_names.get(s.metadata_id, f"#{s.metadata_id}")] = _stat_value(s, names)
    return out


def _device_info(plane, kind: str, names, stat_names, host: str = "") -> DeviceInfo:
    st = _stats(plane.stats, names, stat_names)
    st = {k: (f"<{len(v)} bytes>" if isinstance(v, bytes) else v) for k, v in st.items()}
    info = DeviceInfo(name=plane.name, kind=kind, stats=st, host=host)
    if kind == "TPU":
        info.device_type = str(st.get("device_type_string", "TPU"))
        tf = _as_float(st.get("peak_teraflops_per_second"))
        bw = _as_float(st.get("peak_hbm_bw_gigabytes_per_second"))
        info.peak_flops = tf * 1e12 if tf else None
        info.peak_bw = bw * 1e9 if bw else None
    elif kind == "GPU":
        vendor = st.get("device_vendor", "")
        info.device_type = f"{vendor} GPU".strip() if vendor else "GPU"
        if st.get("gpu_device_name"):
            info.device_type = str(st["gpu_device_name"])
        bw = _as_float(st.get("memory_bandwidth"))
        info.peak_bw = bw if bw else None
    else:
        info.device_type = "CPU"
    return info


#: Device planes any file may hold (a merged multi-rank profile holds one per rank). Past
#: them, a file must carry at least :data:`MIN_PLANE_BYTES` per device plane: a real plane
#: holds its metadata and lines, while a hostile file can declare millions of empty planes.
PLANES_ALWAYS = 4096
#: serialized bytes per device plane below which a file past :data:`PLANES_ALWAYS` is refused
MIN_PLANE_BYTES = 1024


def _head(p: Path) -> bytes:
    """The file's first bytes (empty when it cannot be read: the reader reports that)."""
    try:
        with open(p, "rb") as fh:
            return fh.read(8)
    except OSError:
        return b""


def read_xplane(path: str | os.PathLike, *, host: str | None = None, run: str = "", max_bytes: int = MAX_FILE_BYTES,
                prefetch=None, memory: bool = True) -> TraceData:
    """Read one ``.xplane.pb`` into a :class:`~traceview.model.schema.TraceData`.

    ``host`` defaults to the file stem (the profiler names files after the host), else the
    XSpace's first hostname. ``run`` is stored in every row. Times are integer ps. Raises
    :class:`TraceUnreadable` if the file cannot be read or is not an XSpace,
    :class:`~traceview.errors.LimitExceeded` if it is larger than ``max_bytes``. A file that
    decodes but holds no HLO op yields an empty ``ops`` frame (the caller decides whether
    that is an error).

    With the C accelerator the file is memory-mapped and read in place: only the planes'
    small fields are parsed by protobuf, each XLine is decoded from the mapping in pieces
    and its pages are released behind the decoder, so memory stays near the size of the
    decoded arrays however large the file (:func:`map_xspace`). A file the in-place scan
    finds malformed is diagnosed from the mapping (:func:`~traceview.read.xplane.wire.mapped_fault`);
    only when its top level looks sound is it read again the classic way, which names the fault. ``prefetch``: a
    :class:`traceview.read.prefetch.Prefetch` of this file (its TPU planes decoded on a thread
    meanwhile), or None. ``memory``: False leaves the allocator events unread (``memory`` None).
    """
    from traceview.errors import LimitExceeded

    p = Path(path)
    try:
        size = p.stat().st_size
        if size > max_bytes:
            raise LimitExceeded(f"file is {size:,} bytes, over the {max_bytes:,}-byte read limit (raise it with "
                                "--max-bytes or TRACEVIEW_MAX_BYTES; the library's max_bytes)", str(p))
    except OSError as exc:
        raise TraceUnreadable(f"cannot read file ({exc.strerror or exc})", str(p)) from None
    space = None
    arrays = None
    space_bytes = size  # the serialized XSpace's size (inflated when gzipped)
    head = _head(p)
    gzipped = head[:2] == b"\x1f\x8b"

    def not_xspace(why: str) -> TraceUnreadable:
        # a <host>.xplane.pb.gz holding no gzip stream (read as is, in case it was inflated
        # but kept its name) says so, as a .trace.json.gz does
        if p.name.endswith(".gz") and not gzipped:
            from traceview.read.inflate import not_gzip

            return not_gzip(head, str(p), "a gzip-compressed XSpace")
        return TraceUnreadable(why, str(p))

    if gzipped:  # a published <host>.xplane.pb.gz: inflated (within max_bytes) and parsed whole
        from traceview.read.inflate import gunzip

        try:
            data = p.read_bytes()
        except OSError as exc:
            raise TraceUnreadable(f"cannot read file ({exc.strerror or exc})", str(p)) from None
        try:
            data = gunzip(data, str(p), max_bytes, what="XSpace")
        except LimitExceeded as exc:
            raise LimitExceeded(f"{exc.fault} (raise it with --max-bytes or TRACEVIEW_MAX_BYTES; the library's "
                                "max_bytes)", str(p)) from None
        space_bytes = len(data)
        space = read_xspace_bytes(bytes(data), str(p))
        del data
    elif wire.has_decoder() and size > 0:
        pre = prefetch.take() if prefetch is not None and prefetch.matches(p) else None
        if pre is not None:
            space, arrays = pre
        else:
            space = wire.map_xspace(p)
            if space is None:
                why = wire.mapped_fault(p)
                if why:
                    raise not_xspace(f"not a valid XSpace protobuf: {why}")
    if space is None:
        why = wire.mapped_fault(p) if not wire.has_decoder() else None  # (with the decoder: done above)
        if why:  # named from the mapping, before reading a garbage file of gigabytes whole
            raise not_xspace(f"not a valid XSpace protobuf: {why}")
        try:
            with open(p, "rb") as fh:
                data = fh.read()
        except OSError as exc:
            raise TraceUnreadable(f"cannot read file ({exc.strerror or exc})", str(p)) from None
        if not data:
            raise TraceUnreadable("file is empty", str(p))
        try:
            space = read_xspace_bytes(data, str(p))
        except TraceUnreadable as exc:
            raise not_xspace(exc.fault) from None
        del data
    if not space.planes:
        raise not_xspace("XSpace has no planes (not an XProf trace?)")
    n_dev = sum(1 for pl_ in space.planes if is_device_plane(pl_.name))
    if n_dev > PLANES_ALWAYS and n_dev * MIN_PLANE_BYTES > space_bytes:
        raise TraceUnreadable(f"it holds {n_dev:,} device planes in {space_bytes:,} bytes (past {PLANES_ALWAYS:,} "
                              f"planes, each needs {MIN_PLANE_BYTES:,} bytes of metadata and events): the trace is "
                              "corrupt or synthetic", str(p))
    if not any(pl_.name for pl_ in space.planes):
        raise not_xspace("a protobuf whose planes have no names: not an XProf trace")
    stem = p.name.split(".xplane")[0] if ".xplane" in p.name else p.name.removesuffix(".gz").rsplit(".", 1)[0]
    host = printable(host or stem or (space.hostnames[0] if space.hostnames else ""))
    return convert_xspace(space, printable(str(p)), host, printable(run), decoded=arrays, memory=memory)


def convert_xspace(space, path: str, host: str, run: str, decoded: dict | None = None, memory: bool = True) -> TraceData:
    """Turn a parsed (lazy) XSpace into a :class:`TraceData` (see the module docstring).
    ``decoded``: ``{id(plane): result}`` for planes of ``space.planes`` decoded already
    (:mod:`traceview.read.prefetch`, :func:`traceview.model.annotated_plane.prefetch_plan`):
    a TPU plane's :class:`~traceview.model.tpu_plane.PlaneArrays`, another plane's
    :func:`~traceview.model.annotated_plane.decode_lines`, or the exception its decoding
    raised (raised where the plane is read); an annotated plane's entry leaves ``decoded`` as
    it is read (its lines freed one by one); planes not in it are decoded here. An XSpace holding several ranks'
    planes (:mod:`traceview.model.ranks`) keeps every plane: each rank's rows, devices, module
    runs, markers, memory and kernel lines are read under the host ``<host>/<rank label>``,
    and a note says so. ``memory``: False leaves the allocator events unread."""
    read_memory = memory
    cols: list[pl.DataFrame] = []
    runs: list[pl.DataFrame] = []
    devices: list[DeviceInfo] = []
    notes: list[str] = []
    hlo = HloIndex()
    start_ns = stop_ns = None
    n_events = 0
    host_planes = []
    gpu_counts: dict = {}  # GPU planes, and events on their decoded lines (_read_annotated_plane's counts)
    memory = None
    kernel_parts: list = []
    markers: list[tuple] = []  # (host, device, name, step_num, start_ps, duration_ps): host step annotations
    dev_markers: list[tuple] = []  # the same of the TPU Steps lines

    # the ranks' planes of a merged XSpace: a plane named '<rank>: <plane>' or '<plane> <rank>'
    # is read as its own name; each plane's host names its rank when there are several
    planes = list(space.planes)  # one wrapper per plane for the whole conversion (planes are keyed by id)
    ranks = plane_ranks(planes, getattr(space, "hostnames", ()))
    host_of = {}
    for i, plane in enumerate(planes):
        if ranks.names[i] != plane.name:
            plane.name = ranks.names[i]  # in memory only: the file is never written
        host_of[id(plane)] = printable(ranks.host(i, host))
    several = ranks.n > 1
    rank_note = ranks.note(path, host)
    if rank_note:
        notes.append(printable(rank_note))

    # pass 1: metadata and environment planes
    names_of = {}  # id(plane) -> its stat names (id -> name), read once
    for plane in planes:
        stat_names = names_of[id(plane)] = {k: v.name for k, v in plane.stat_metadata.items()}
        if plane.name == "/host:metadata":
            for md in plane.event_metadata.values():
                st = {}
                proto = None
                for s in md.stats:
                    nm = stat_names.get(s.metadata_id, "")
                    if nm == "Hlo Proto":
                        proto = s.bytes_value
                    else:
                        st[nm] = _stat_value(s, stat_names)
                if proto is None:
                    continue
                mod_name, pid = split_module_name(md.name)
                if st.get("program_id") is not None:
                    pid = _as_int(st.get("program_id"))
                if pid is not None:
                    hlo.add(pid, mod_name, proto)
        elif plane.name == "Task Environment":  # one per rank in a merged XSpace: the earliest start, latest stop
            st = _stats(plane.stats, stat_names, stat_names)
            a, b = _as_int(st.get("profile_start_time")), _as_int(st.get("profile_stop_time"))
            start_ns = a if start_ns is None or (a is not None and a < start_ns) else start_ns
            stop_ns = b if stop_ns is None or (b is not None and b > stop_ns) else stop_ns

    # pass 2: device planes, then the host plane when no device ran HLO ops. TPU planes are
    # independent and mostly C/numpy work that releases the GIL: read them on threads.
    tpu = [p_ for p_ in planes if p_.name.startswith("/device:TPU:")]
    tpu_out = {}
    if tpu:
        pre = {id(p_): decoded[id(p_)] for p_ in tpu} if decoded and all(id(p_) in decoded for p_ in tpu) else {}
        for got in pre.values():
            if isinstance(got, BaseException):
                raise got

        # Every plane decoded already (prefetch), none pre-aggregated: the planes write their
        # events straight into the file's arrays, each its own slice, on the plane threads,
        # instead of a serial concatenation afterwards (_merge_parts).
        dest = {}
        if pre and all(v.occ is None for v in pre.values()):
            sizes = [len(pre[id(p_)].mids) if pre[id(p_)].mids is not None else 0 for p_ in tpu]
            ops_out = _OpArrays(sum(sizes))
            bounds = np.cumsum([0] + sizes).tolist()
            dest = {id(p_): (ops_out, a, b) for p_, a, b in zip(tpu, bounds[:-1], bounds[1:])}

        parsed: dict = {}  # HLO text patterns parsed, shared by the planes (instruction_signature)

        def one(plane):
            sn = names_of[id(plane)]
            c_, r_, m_ = [], [], []
            return _read_tpu_plane(plane, sn, c_, r_, host_of[id(plane)], run, path, arrays=pre.get(id(plane)),
                                   dest=dest.get(id(plane)), markers=m_, parsed=parsed), c_, r_, m_

        workers = min(len(tpu), threads_available(), PLANE_THREADS)
        line_bytes = sum(len(ln) for p_ in tpu for ln in p_.lines)
        if line_bytes > PARALLEL_MAX_BYTES:
            workers = 1  # each thread holds a plane's decoding temporaries: one at a time on big files
        elif line_bytes < len(tpu) * PARALLEL_MIN_PLANE_BYTES:
            workers = 1  # small planes (a merged profile of thousands): a thread costs more than a plane
        if workers > 1 and wire.has_decoder():
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(max_workers=workers) as ex:
                results = list(ex.map(one, tpu))
        else:
            results = [one(p_) for p_ in tpu]
        tpu_out = {id(p_): r for p_, r in zip(tpu, results)}
    for plane in planes:
        name = plane.name
        stat_names = names_of[id(plane)]
        h = host_of[id(plane)]
        if name.startswith("/device:TPU:"):
            devices.append(_device_info(plane, "TPU", stat_names, stat_names, h if several else ""))
            kl = read_kernel_lines(plane, stat_names, path, h)
            if kl is not None:
                kernel_parts.append(kl)
            k, c_, r_, m_ = tpu_out[id(plane)]
            n_events += k
            cols.extend(c_)
            runs.extend(r_)
            dev_markers.extend((h,) + m for m in m_)
        elif name.startswith("/device:GPU:") or name.startswith("/device:CUSTOM:"):
            devices.append(_device_info(plane, "GPU" if "GPU" in name else "CUSTOM", stat_names, stat_names,
                                        h if several else ""))
            dev_markers.extend((h,) + m for m in _export_step_markers(plane, stat_names, path))
            gpu_counts["planes"] = gpu_counts.get("planes", 0) + 1
            n_events += _read_annotated_plane(plane, stat_names, cols, hlo, h, run, path, device_lines=True,
                                              decoded=(decoded or {}).pop(id(plane), None), notes=notes,
                                              counts=gpu_counts)
        elif name == "/host:CPU":
            host_planes.append((plane, stat_names))
            if read_memory and has_memory_events(plane):
                got = read_memory_events(plane, stat_names, path, h)
                memory = got if memory is None else pl.concat([memory, got], how="vertical")
    have_device_ops = any(c.height for c in cols)  # OpTables (TPU) and frames (GPU) both have height
    # GPU events none of which names an HLO op: the host's hlo_op events are read (a CPU program in
    # a process that also used a GPU), said to be the host's (on an XLA:GPU trace, the launches)
    unnamed = not have_device_ops and "planes" in gpu_counts
    for plane, stat_names in host_planes:
        if have_device_ops:
            n_events += sum(count_events(raw, path) for raw in plane.lines)
            continue
        names: list[str] = []
        got: list[tuple] = []
        h = host_of[id(plane)]
        n_events += _read_annotated_plane(plane, stat_names, cols, hlo, h, run, path, device_lines=False,
                                          markers=got, devices=names, decoded=(decoded or {}).pop(id(plane), None),
                                          notes=notes)
        markers.extend((h, "") + tuple(m) for m in got)
        devices.extend(DeviceInfo(name=nm, kind="CPU", device_type="CPU", host=h if several else "") for nm in names)
    if unnamed:
        ev = gpu_counts.get("line_events", 0)
        notes.append(f"{path}: the {gpu_counts['planes']} GPU plane(s) "
                     + (f"hold {ev:,} event(s), none of them named by an HLO op (no hlo_op stat, or one the plane "
                        "cannot resolve)" if ev else "hold no event")
                     + (": the ops shown are the host's hlo_op events (on an XLA:GPU trace, the kernels' launches, "
                        "on the host's clock, not the kernels)" if any(c.height for c in cols) else ""))


    tpu_parts = [c for c in cols if isinstance(c, _TpuParts)]
    ops = OpTable.concat(([_merge_parts(tpu_parts)] if tpu_parts else [])
                         + [c for c in cols if not isinstance(c, _TpuParts)])
    del tpu_parts
    cols.clear()
    module_runs = _module_runs_frame(runs)
    if module_runs.height == 0 and ops.height:
        module_runs = _derive_module_runs(ops)
    notes.extend(hlo.errors)
    has_shapes = bool(ops.height) and bool((ops.collapse()["shape"] != "").any())
    if ops.height and not has_shapes:
        notes.append(f"{path}: no HLO shapes could be resolved (no HLO protos in /host:metadata?)")
    markers += dev_markers
    step_markers = frame({
        "host": [m[0] for m in markers], "device": [m[1] for m in markers],
        "name": [m[2] for m in markers], "step_num": [m[3] for m in markers],
        "start_ps": [m[4] for m in markers], "duration_ps": [m[5] for m in markers]}, STEP_MARKERS_SCHEMA)
    return TraceData(path=path, host=host, format="xplane", ops=ops, module_runs=module_runs,
                     devices=devices, notes=notes, has_shapes=has_shapes, n_events=n_events,
                     profile_start_ns=start_ns, profile_stop_ns=stop_ns,
                     step_markers=step_markers.sort("start_ps"), memory=memory,
                     kernel_lines=pl.concat(kernel_parts, how="vertical") if kernel_parts else None,
                     hlo_protos=protos_frame(hlo.raw, host))


def _module_runs_frame(runs: list) -> RunTable:
    """The module runs (a :class:`~traceview.model.runtable.RunTable`) of the TPU planes'
    ``XLA Modules`` executions (:func:`_read_tpu_plane`'s ``runs``), built once for every
    plane: one key per (plane, distinct (module, program_id))."""
    if not runs:
        return RunTable.empty()
    uniq = [u for r in runs for u in r[0]]
    offsets = np.cumsum([0] + [len(r[0]) for r in runs])[:-1]
    u = np.concatenate([r[1] + o for r, o in zip(runs, offsets)]).astype(np.uint32)
    keys = pl.DataFrame({
        "key": pl.Series(np.arange(len(uniq), dtype=np.uint32)),
        "host": pl.Series([r[5] for r in runs for _ in r[0]], dtype=pl.Utf8),
        "device": pl.Series([r[4] for r in runs for _ in r[0]], dtype=pl.Utf8),
        "module": pl.Series([m for m, _ in uniq], dtype=pl.Utf8),
        "program_id": pl.Series([p for _, p in uniq], dtype=pl.UInt64),
    })
    return RunTable(pl.DataFrame({
        "key": pl.Series(u, dtype=pl.UInt32),
        "start_ps": pl.Series(np.concatenate([r[2] for r in runs]), dtype=pl.Int64),
        "duration_ps": pl.Series(np.concatenate([r[3] for r in runs]), dtype=pl.Int64),
    }), keys.cast(KEY_SCHEMA))


#: the XEventMetadata stats of a TPU op that its description uses
_TPU_OP_STATS = frozenset({"program_id", "hlo_category", "flops", "model_flops", "bytes_accessed", "source",
                           "source_stack", "tf_op", "shape_with_layout"})


def _tpu_metadata(plane, names, stat_names, used=None, parsed: dict | None = None, raw=False) -> dict[str, list]:
    """Column lists (:data:`_META_COLUMNS`), one row per XEventMetadata id (those in ``used``,
    the ids the plane's op events carry, when given: a plane may declare a million entries and
    use a few): the op fields TPU records once per op. ``parsed``: the cache of
    :func:`~traceview.model.shapes.instruction_signature`, shared by the planes of a file,
    which also holds the rows per distinct metadata bytes (:data:`SHARED_METADATA_BYTES`).
    Stats are read as :func:`_stats` reads them (the later of two same-named stats wins),
    only those in :data:`_TPU_OP_STATS`. ``raw``: the plane's :func:`~traceview.read.xplane.wire.metadata_bytes`
    when read already."""
    parsed = {} if parsed is None else parsed
    if raw is False:
        raw = wire.metadata_bytes(plane, SHARED_METADATA_BYTES)
    if raw is None:
        return _tpu_metadata_read(plane, names, stat_names, used, parsed)
    # a plane whose metadata bytes, ids used and stat names were read before (a merged
    # profile's ranks): the same rows (read-only lists)
    key = ("plane metadata", raw, None if used is None else tuple(used), tuple(stat_names.items()))
    hit = parsed.get(key)
    if hit is None:
        hit = parsed[key] = _tpu_metadata_read(plane, names, stat_names, used, parsed)
    return hit


#: event_metadata bytes up to which a TPU plane's metadata rows are shared with the planes of
#: the file that have the same bytes (:func:`_tpu_metadata`)
SHARED_METADATA_BYTES = 1 << 20


def _tpu_metadata_read(plane, names, stat_names, used, parsed: dict) -> dict[str, list]:
    """:func:`_tpu_metadata` read off ``plane``."""
    if used is not None and len(used) >= COLUMNS_MIN_DESCRIPTIONS:
        cols = _tpu_metadata_columns(plane, names, stat_names, used, parsed)
        if cols is not None:
            return cols
    table = plane.event_metadata
    items = table.items() if used is None else ((m, table[m]) for m in used if m in table)
    wanted = {k: v for k, v in stat_names.items() if v in _TPU_OP_STATS}
    c_mid, c_op, c_kind, c_cat, c_shape, c_text, c_pid, c_sf, c_sl, c_ss, c_fw, c_fl, c_mf, c_by, c_cs = (
        [] for _ in range(15))
    for mid, md in items:
        st = {}
        if wanted:
            for s_ in md.stats:
                nm = wanted.get(s_.metadata_id)
                if nm is not None:
                    st[nm] = _stat_value(s_, names)
        text = md.name
        ins = instruction_signature(text, parsed)
        if ins is not None:
            ins_name, kind, shape = ins
            c_op.append(md.display_name or ins_name)
            c_text.append(text)
        else:
            c_op.append(md.display_name or text)
            shape = canonical_shape_text(str(st.get("shape_with_layout", ""))) if st.get("shape_with_layout") else ""
            kind = ""
            c_text.append("")
        src = st.get("source")
        src_file, src_line = split_source(str(src)) if src else ("", None)
        fl, by = st.get("flops"), st.get("bytes_accessed")
        c_mid.append(mid)
        c_kind.append(kind)
        c_cat.append(str(st.get("hlo_category", "") or kind))
        c_shape.append(shape)
        c_pid.append(_as_int(st.get("program_id")))
        c_sf.append(src_file)
        c_sl.append(src_line)
        c_ss.append(str(st.get("source_stack", "") or "").rstrip("\n"))
        c_fw.append(str(st.get("tf_op", "") or "").rstrip(":"))
        c_fl.append(_as_float(fl))
        c_mf.append(_as_float(st.get("model_flops")))
        c_by.append(_as_float(by))
        c_cs.append("trace" if fl is not None or by is not None else "unknown")
    return dict(zip(_META_COLUMNS, (c_mid, c_op, c_kind, c_cat, c_shape, c_text, c_pid, c_sf, c_sl, c_ss, c_fw,
                                    c_fl, c_mf, c_by, c_cs)))


#: descriptions a TPU plane uses from which its metadata are read as columns from its bytes
#: (:func:`_tpu_metadata_columns`; fewer are cheaper through the parsed messages)
COLUMNS_MIN_DESCRIPTIONS = 2048

_TPU_SLOTS = ("program_id", "hlo_category", "flops", "model_flops", "bytes_accessed", "source", "source_stack",
              "tf_op", "shape_with_layout")


def _objects(values: list) -> np.ndarray:
    """``values`` as a 1-d object array (tuples stay elements)."""
    out = np.empty(len(values), dtype=object)
    for i, v in enumerate(values):
        out[i] = v
    return out


def _slot_column(kinds: np.ndarray, vals: np.ndarray, value, fn) -> np.ndarray:
    """Per row, ``fn`` of the stat value (kind, value) (None where absent or valueless),
    ``fn`` called once per distinct value."""
    out = np.empty(len(kinds), dtype=object)
    for k in np.unique(kinds).tolist():
        sel = np.flatnonzero(kinds == k)
        if k in (wire.KIND_ABSENT, wire.KIND_NONE):
            out[sel] = _objects([fn(None)])[np.zeros(len(sel), dtype=np.int64)]
            continue
        uniq, inv = np.unique(vals[sel], return_inverse=True)
        out[sel] = _objects([fn(value(k, v)) for v in uniq.tolist()])[inv.reshape(-1)]
    return out


def _tpu_metadata_columns(plane, names, stat_names, used, parsed: dict) -> dict[str, list] | None:
    """:func:`_tpu_metadata` from the plane's bytes (:func:`~traceview.read.xplane.wire.decode_metadata`):
    stat values resolved and converted once per distinct value, only the HLO text parsed per
    description (once per name-blanked pattern). None when the plane is not read in place."""
    slot_of = {nm: i for i, nm in enumerate(_TPU_SLOTS)}
    pairs = [(k, slot_of[v]) for k, v in stat_names.items() if v in slot_of]
    md = wire.decode_metadata(plane, np.array([k for k, _ in pairs], dtype=np.int64),
                              np.array([j for _, j in pairs], dtype=np.int64), len(_TPU_SLOTS))
    if md is None:
        return None
    # the last entry of each id (protobuf's map), rows in the order of ``used``
    n = len(md.mids)
    u_ids, rev = np.unique(md.mids[::-1], return_index=True)
    last = n - 1 - rev
    want = np.asarray(used, dtype=np.int64)
    pos = np.clip(np.searchsorted(u_ids, want), 0, max(len(u_ids) - 1, 0))
    ok = (u_ids[pos] == want) if len(u_ids) else np.zeros(len(want), dtype=bool)
    rows = last[pos[ok]]
    value = _resolver(names, md.strings)

    def col(name: str, fn=lambda v: v) -> list:
        j = slot_of[name]
        return _slot_column(md.kinds[rows, j], md.values[rows, j], value, fn).tolist()

    raw_cat = col("hlo_category")
    swl = col("shape_with_layout", lambda v: canonical_shape_text(str(v)) if v else "")
    src = col("source", lambda v: split_source(str(v)) if v else ("", None))
    fl_raw, by_raw = col("flops", lambda v: v is not None), col("bytes_accessed", lambda v: v is not None)
    texts = [md.names[r] for r in rows.tolist()]
    dnames = [md.display_names[r] for r in rows.tolist()]
    c_op, c_kind, c_shape, c_text = [], [], [], []
    for text, dn, sw in zip(texts, dnames, swl):
        ins = instruction_signature(text, parsed)
        if ins is not None:
            c_op.append(dn or ins[0])
            c_kind.append(ins[1])
            c_shape.append(ins[2])
            c_text.append(text)
        else:
            c_op.append(dn or text)
            c_kind.append("")
            c_shape.append(sw)
            c_text.append("")
    return {
        "metadata_id": want[ok].tolist(), "op_name": c_op, "op_kind": c_kind,
        "category": [str(c or k) for c, k in zip(raw_cat, c_kind)], "shape": c_shape, "hlo_text": c_text,
        "program_id": col("program_id", _as_int), "source_file": [a for a, _ in src], "source_line": [b for _, b in src],
        "source_stack": col("source_stack", lambda v: str(v or "").rstrip("\n")),
        "framework_op": col("tf_op", lambda v: str(v or "").rstrip(":")),
        "flops": col("flops", _as_float), "model_flops": col("model_flops", _as_float),
        "bytes_accessed": col("bytes_accessed", _as_float),
        "cost_source": ["trace" if a or b else "unknown" for a, b in zip(fl_raw, by_raw)],
    }


_META_COLUMNS = ["metadata_id", "op_name", "op_kind", "category", "shape", "hlo_text", "program_id",
                 "source_file", "source_line", "source_stack", "framework_op", "flops", "model_flops",
                 "bytes_accessed", "cost_source"]


def _read_tpu_plane(plane, stat_names, cols: list, runs: list, host, run, path, arrays=None, dest=None,
                    markers: list | None = None, parsed: dict | None = None) -> int:
    """Append one TPU plane's module runs (to ``runs``: (distinct (module, program_id),
    execution index into them, starts, durations, device, host), for :func:`_module_runs_frame`), op parts (to ``cols``) and ``Steps``
    line events (to ``markers``: (device, "Steps", step number, start_ps, duration_ps), the
    step number read off the event's name, else its index on the line); returns its event
    count. ``arrays``: its :class:`~traceview.model.tpu_plane.PlaneArrays` when already
    decoded (:mod:`traceview.read.prefetch`), else decoded here. ``dest``: (:class:`_OpArrays`,
    lo, hi), the slice of the file's event arrays its ops are written to, or None."""

    pa = arrays if arrays is not None else plane_arrays(plane, path, stat_names)
    if markers is not None and pa.step_mids is not None and len(pa.step_mids):
        # the step number named by each distinct metadata, else the event's index on the line
        table = plane.event_metadata
        umids, inv = np.unique(pa.step_mids, return_inverse=True)
        nms = [(table[m].name if m in table else "").strip() for m in umids.tolist()]
        num = np.array([int(nm) if nm.isdigit() and len(nm) < 18 else -1 for nm in nms], dtype=np.int64)
        step = num[inv.reshape(-1)]
        step = np.where(step >= 0, step, np.arange(len(step), dtype=np.int64))
        markers.extend(zip([plane.name] * len(step), ["Steps"] * len(step), step.tolist(),
                           np.asarray(pa.step_starts, dtype=np.int64).tolist(),
                           np.asarray(pa.step_durs, dtype=np.int64).tolist()))
    parsed = {} if parsed is None else parsed
    raw = wire.metadata_bytes(plane, SHARED_METADATA_BYTES)
    mods = parsed.get(("module names",))
    if mods is None:
        mods = parsed[("module names",)] = _ModuleNames.empty()  # read-only
    if pa.mod_mids is not None:
        mods = _module_names(plane, pa.mod_mids, raw, parsed)
        runs.append((mods.uniq, mods.exec_u, pa.mod_starts, pa.mod_durs, plane.name, host))
    if pa.mids is None:
        return pa.n_events
    shared = None
    if raw is not None and pa.occ is None and len(pa.mids) <= SHARED_KEYS_EVENTS:
        # the op events' description ids depend on the metadata, the module names and the
        # events' metadata ids and enclosing executions only: planes alike in all of these
        # (a merged profile's ranks) share them, and their descriptions
        shared = ("op keys", raw, tuple(stat_names.items()), mods, pa.mids.tobytes(),
                  np.ascontiguousarray(pa.enc, dtype=np.int64).tobytes())
    got = parsed.get(shared) if shared is not None else None
    if got is None:
        meta = _tpu_metadata(plane, stat_names, stat_names, used=np.unique(pa.mids).tolist(), parsed=parsed,
                             raw=raw)
        got = _tpu_keys(meta, pa.mids, pa.enc, mods,
                        out=dest[0].attr[dest[1]:dest[2]] if dest is not None and shared is None else None)
        if shared is not None:
            parsed[shared] = got
    cols.append(_tpu_op_table(got, pa.starts, pa.durs, pa.selfs, pa.occ,
                              {"host": host, "run": run, "file": path, "device": plane.name, "line": "XLA Ops",
                               "kernel": ""}, dest=dest))
    return pa.n_events


_I64_MAX, _I64_MIN = (1 << 63) - 1, -(1 << 63)

#: op events on a plane up to which its description ids are shared with the planes alike
#: (:func:`_read_tpu_plane`)
SHARED_KEYS_EVENTS = 1 << 16


def _module_names(plane, exec_mids: np.ndarray, raw: bytes | None, parsed: dict) -> "_ModuleNames":
    """:class:`_ModuleNames` of ``plane``, shared (read-only) by the planes whose metadata
    bytes ``raw`` and executions are equal."""
    if raw is None or len(exec_mids) > SHARED_KEYS_EVENTS:
        return _ModuleNames(plane, exec_mids)
    key = ("module names", raw, exec_mids.tobytes())
    hit = parsed.get(key)
    if hit is None:
        hit = parsed[key] = _ModuleNames(plane, exec_mids)
    return hit


class _ModuleNames:
    """The ``XLA Modules`` executions of one TPU plane, named: ``uniq`` the distinct
    (module, program_id) pairs in order of first execution, ``exec_u`` (int64) each
    execution's index into ``uniq``, ``program_to_module`` program_id -> module (the latest
    execution's name). Built per distinct metadata id, never per execution in Python."""

    def __init__(self, plane=None, exec_mids: np.ndarray | None = None):
        self.uniq: list[tuple[str, int | None]] = []
        self.exec_u = np.zeros(0, dtype=np.int64)
        self.program_to_module: dict = {}
        if plane is None or exec_mids is None or len(exec_mids) == 0:
            return
        umids, first, inv = np.unique(exec_mids, return_index=True, return_inverse=True)
        last = len(exec_mids) - 1 - np.unique(exec_mids[::-1], return_index=True)[1]
        md = plane.event_metadata
        names = [split_module_name(md[m].name if m in md else "") for m in umids.tolist()]
        u_of: dict = {}
        for j in np.argsort(first, kind="stable").tolist():  # first-execution order
            u_of.setdefault(names[j], len(u_of))
        self.uniq = list(u_of)
        self.exec_u = np.array([u_of[nm] for nm in names], dtype=np.int64)[inv.reshape(-1)]
        for j in np.argsort(last, kind="stable").tolist():  # the latest execution wins
            m, p = names[j]
            if p is not None:
                self.program_to_module[p] = m

    @classmethod
    def empty(cls) -> "_ModuleNames":
        return cls()


def _tpu_keys(meta: dict, mids: np.ndarray, enc: np.ndarray, mods: _ModuleNames, out=None) -> tuple:
    """The description ids of one TPU ``XLA Ops`` line: (``attr``, uint32 per event, read-only;
    ``ukeys``, the distinct keys; ``desc``, the descriptions' column lists without the plane's
    constants, read-only). ``out``: a uint32 array the C accelerator may write ``attr`` into.

    An event's description is its XEventMetadata row plus its module: the op's own
    ``program_id`` names the module (through the ``XLA Modules`` names); an op without one,
    or whose program has no execution on the line, takes the enclosing execution's module and
    program (``enc``: index into the executions of ``mods``, -1 for none). Events are grouped into
    descriptions with integer keys (metadata row x module), never through strings."""

    program_to_module = mods.program_to_module
    # distinct (module, program) of the enclosing executions; index U = "none"
    uniq = mods.uniq
    width = len(uniq) + 1
    ids = np.array(meta["metadata_id"], dtype=np.int64)
    pids = meta["program_id"] + [None]
    # rows whose own program names a module do not depend on the enclosing execution
    fixed = np.array([p is not None and p in program_to_module for p in pids], dtype=bool)
    span = (len(ids) + 1) * width
    top = int(mids.max()) + 1 if len(mids) else 0
    dense_ids = bool(len(ids)) and 0 <= int(ids.min()) and top <= 4 * len(ids) + (1 << 16)
    attr = None
    if dense_ids:
        # metadata ids are small and dense (XProf numbers them from 1): one lookup table
        # (an unknown id gets the extra, empty row at the end)
        mid_row = np.full(top, len(ids), dtype=np.int64)
        ok = ids < top
        mid_row[ids[ok]] = np.flatnonzero(ok)
        if _fast is not None and span < (1 << 31) and mids.dtype == np.uint32:
            # one C pass: the same keys and ids as the numpy below
            attr = out if out is not None else np.empty(len(mids), dtype=np.uint32)
            key_rank = np.zeros(span, dtype=np.int32)
            got = _fast.tpu_attr(mids, np.ascontiguousarray(enc, dtype=np.int64), mid_row, fixed.view(np.uint8),
                                 np.ascontiguousarray(mods.exec_u, dtype=np.int64), width, attr, key_rank)
            if got >= 0:
                ukeys = np.flatnonzero(key_rank >= 0)
            else:
                attr = None
        if attr is None:
            row = mid_row[mids]
    else:
        order = np.argsort(ids, kind="stable")
        sorted_ids = ids[order]
        pos = np.clip(np.searchsorted(sorted_ids, mids), 0, max(len(ids) - 1, 0))
        known = (sorted_ids[pos] == mids) if len(ids) else np.zeros(len(mids), dtype=bool)
        row = np.where(known, order[pos] if len(ids) else 0, len(ids))
    if attr is None:
        enc_u = np.append(mods.exec_u, len(uniq))[np.where(enc < 0, len(mods.exec_u), enc)]
        u = np.where(fixed[row], len(uniq), enc_u)
        key = row.astype(np.int64) * width + u
        if span <= 4 * len(key) + 1024:  # dense keys: a lookup table is O(n)
            seen = np.zeros(span, dtype=bool)
            seen[key] = True
            ukeys = np.flatnonzero(seen)
            lut = np.cumsum(seen) - 1
            attr = lut[key].astype(np.uint32)
        else:
            ukeys, inv = np.unique(key, return_inverse=True)
            attr = inv.astype(np.uint32)
    k_row, k_u = ukeys // width, ukeys % width
    # the descriptions as column lists, one per (metadata row, module); the file's frame is
    # built once from every plane's lists (_finish_parts)
    rows, us, n_meta, n_uniq = k_row.tolist(), k_u.tolist(), len(ids), len(uniq)
    if len(rows) == n_meta and bool((k_row == np.arange(n_meta)).all()):
        # each row once, in order: the metadata's own lists (never changed in place below)
        desc = {c: meta[c] for c in _META_COLUMNS if c != "metadata_id"}
    else:
        desc = {c: [col[r] for r in rows] for c in _META_COLUMNS if c != "metadata_id"
                for col in (meta[c] + [None],)}  # row n_meta: no metadata
    pid = [p if p is not None else (uniq[u][1] if u < n_uniq else None) for p, u in zip(desc["program_id"], us)]
    module = []
    for p, u in zip(pid, us):
        m = program_to_module[p] if p is not None and p in program_to_module else None
        if m is None:
            m = uniq[u][0] if u < n_uniq else None
        module.append("" if m is None else m)
    desc["program_id"], desc["module"] = pid, module
    for c in ("op_name", "op_kind", "category", "shape", "hlo_text", "source_file", "source_stack", "framework_op"):
        if None in desc[c]:  # new lists: the metadata's may be shared by planes (never changed in place)
            desc[c] = ["" if v is None else v for v in desc[c]]
    if None in desc["cost_source"]:
        desc["cost_source"] = ["unknown" if v is None else v for v in desc["cost_source"]]
    return attr, ukeys, desc


def _tpu_op_table(keys: tuple, starts, durs, selfs, occ, constants: dict, dest=None):
    """The :class:`_TpuParts` of one TPU ``XLA Ops`` line whose description ids are ``keys``
    (:func:`_tpu_keys`, left unchanged): the events' times, the descriptions with the plane's
    ``constants`` and, where the C accelerator is built, the per-description aggregates.
    ``dest``: (:class:`_OpArrays`, lo, hi), the slice of the file's event arrays to fill, or None."""

    attr, ukeys, desc = keys
    desc = dict(desc)
    n_rows = len(ukeys)
    for k, v in constants.items():
        desc[k] = _Same(v, n_rows)
    start = starts  # numpy; a Series with nulls where events are pre-aggregated
    if occ is not None and (occ > 0).any():
        start = pl.select(pl.when(pl.Series(occ > 0)).then(None)
                          .otherwise(pl.Series("start_ps", starts, dtype=pl.Int64)).alias("start_ps")).to_series()
        count = np.where(occ > 0, occ, 1)
    elif dest is not None:  # the file's arrays: this plane's slice
        out, lo, hi = dest
        if not np.shares_memory(attr, out.attr):
            out.attr[lo:hi] = attr
        attr = out.attr[lo:hi]
        for arr, src in ((out.start, starts), (out.durs, durs), (out.selfs, selfs)):
            arr[lo:hi] = src
        out.count[lo:hi] = 1
        start, durs, selfs, count = out.start[lo:hi], out.durs[lo:hi], out.selfs[lo:hi], out.count[lo:hi]
    else:
        count = np.ones(len(starts), dtype=np.int64)
    if dest is None or isinstance(start, pl.Series):
        attr = attr.copy()  # the plane's own (keys may be shared by planes)
    stats = None
    if _fast is not None and count is not None and not isinstance(start, pl.Series) and len(ukeys):
        # every event placed and of one occurrence: OpTable.collapse's per-description
        # aggregates in one C pass here, on the plane's thread, instead of a group-by later
        block = np.empty((6, len(ukeys)), dtype=np.int64)  # one allocation, a row per aggregate
        block[:3] = 0
        block[3] = block[5] = _I64_MAX
        block[4] = _I64_MIN
        stats = dict(zip(("rows", "duration_ps", "self_ps", "min_ps", "max_ps", "first_ps"), block))
        if not _fast.attr_stats(attr, np.ascontiguousarray(starts, dtype=np.int64),
                                np.ascontiguousarray(durs, dtype=np.int64), np.ascontiguousarray(selfs, dtype=np.int64),
                                *(stats[c] for c in ("rows", "duration_ps", "self_ps", "min_ps", "max_ps", "first_ps"))):
            stats = None
    parts = _TpuParts(attr, start, durs, selfs, count, desc, stats)
    parts.dest = dest if dest is not None and not isinstance(start, pl.Series) else None
    return parts


class _OpArrays:
    """A file's TPU op events as numpy arrays that the planes fill, each its own slice:
    ``attr`` (uint32, plane-local description ids until :func:`_merge_parts` offsets them),
    ``start``, ``durs``, ``selfs``, ``count`` (int64; ps, ps, ps, occurrences)."""

    __slots__ = ("attr", "start", "durs", "selfs", "count")

    def __init__(self, n: int):
        from traceview.read import hugearrays

        self.attr = hugearrays.empty(n, np.uint32)
        self.start, self.durs, self.selfs, self.count = (hugearrays.empty(n, np.int64) for _ in range(4))


class _TpuParts:
    """One TPU plane's op events before they join the file's OpTable: per-event arrays
    (attr ids local to ``desc``) and the plane's descriptions."""

    __slots__ = ("attr", "start", "durs", "selfs", "count", "desc", "height", "stats", "dest")

    def __init__(self, attr, start, durs, selfs, count, desc, stats=None):
        self.attr, self.start, self.durs, self.selfs, self.count, self.desc = attr, start, durs, selfs, count, desc
        self.height = len(attr)
        self.stats = stats  # per description: rows, duration_ps, self_ps, min_ps, max_ps, first_ps (or None)
        self.dest = None  # (_OpArrays, lo, hi) when the arrays are a slice of the file's


def _merge_parts(parts: list) -> "OpTable":
    """One single-chunk OpTable from the planes' parts, built column by column and freeing
    each plane's array as it goes, so the merge costs one column of extra memory, not a
    second copy of the table (per-plane polars frames concatenated would be several chunks,
    which every ``to_numpy`` would copy again)."""

    offsets = np.cumsum([0] + [len(p.desc["op_name"]) for p in parts])[:-1]
    out = parts[0].dest[0] if parts and parts[0].dest is not None else None
    if out is not None and [(p.dest[0] is out, p.dest[1], p.dest[2]) for p in parts] == [
            (True, a, b) for a, b in zip([0] + [p.dest[2] for p in parts[:-1]], [p.dest[2] for p in parts])] \
            and parts[-1].dest[2] == len(out.attr):
        # the planes filled one set of arrays, slice after slice: only the ids need offsets
        for p, o in zip(parts, offsets):
            if o:
                p.attr += np.uint32(o)
        return _finish_parts(parts, out.attr, out.start, out.durs, out.selfs, out.count)
    attr = _concat_mapped([p.attr.astype(np.uint32) + np.uint32(o) for p, o in zip(parts, offsets)])
    for p in parts:
        p.attr = None
    cols = {}
    for name in ("durs", "selfs", "count"):
        cols[name] = _concat_mapped([getattr(p, name) for p in parts])
        for p in parts:
            setattr(p, name, None)
    starts = [p.start for p in parts]
    if any(isinstance(x, pl.Series) for x in starts):
        start = pl.concat([x if isinstance(x, pl.Series) else pl.Series("start_ps", x, dtype=pl.Int64)
                           for x in starts], rechunk=True)
    else:
        start = _concat_mapped(starts)
    for p in parts:
        p.start = None
    return _finish_parts(parts, attr, start, cols["durs"], cols["selfs"], cols["count"])


def _concat_mapped(arrays: list) -> np.ndarray:
    """``np.concatenate(arrays)`` into :func:`traceview.read.hugearrays.empty` memory, as the
    planes' own :class:`_OpArrays` are: the table's columns live for the whole run, and in
    glibc's heap the analyses' arrays would grow around them."""
    from traceview.read import hugearrays

    out = hugearrays.empty(sum(len(a) for a in arrays), np.result_type(*arrays))
    return np.concatenate(arrays, out=out)


class _Same:
    """A description column of ``n`` rows of one ``value`` (a plane's constants)."""

    __slots__ = ("value", "n")

    def __init__(self, value, n: int):
        self.value, self.n = value, n

    def __len__(self) -> int:
        return self.n

    def tolist(self) -> list:
        return [self.value] * self.n


def _joined(name: str, cols: list, dtype) -> pl.Series:
    """``pl.Series`` of the column lists ``cols`` (lists or :class:`_Same`) end to end."""
    return pl.Series(name, list(chain.from_iterable(c.tolist() if isinstance(c, _Same) else c for c in cols)),
                     dtype=dtype, strict=False)


def _descriptions(parts: list) -> pl.DataFrame:
    """The planes' descriptions end to end (:data:`ATTR_COLUMNS`), each column as
    ``pl.Series(name, values, dtype, strict=False)`` of its joined lists gives it; the lists
    that planes alike share (:func:`_read_tpu_plane`) and a plane's constants are converted
    once and gathered."""
    schema = {c: OPS_SCHEMA[c] for c in ATTR_COLUMNS}
    if len(parts) < 64:  # few planes: the lists joined
        return pl.DataFrame([_joined(c, [p.desc[c] for p in parts], t) for c, t in schema.items()])
    lens = np.array([len(p.desc["op_name"]) for p in parts], dtype=np.int64)
    first: dict = {}  # planes grouped by their op_name list (alike planes share it; the lists live in parts)
    which = [first.setdefault(id(p.desc["op_name"]), len(first)) for p in parts]
    reps = [None] * len(first)
    for p, w in zip(parts, which):
        if reps[w] is None:
            reps[w] = p
    w_arr = np.array(which, dtype=np.int64)
    d_lens = np.array([len(r.desc["op_name"]) for r in reps], dtype=np.int64)
    gather = np.repeat((np.cumsum(d_lens) - d_lens)[w_arr] - (np.cumsum(lens) - lens), lens) + np.arange(
        int(lens.sum()), dtype=np.int64)
    of_part = np.repeat(np.arange(len(parts), dtype=np.int64), lens)
    out = []
    for c, t in schema.items():
        cols = [p.desc[c] for p in parts]
        if set(map(type, cols)) == {_Same}:
            out.append(pl.Series(c, [x.value for x in cols], dtype=t, strict=False).gather(of_part))
            continue
        rep_cols = [r.desc[c] for r in reps]
        if len(reps) < len(parts) and all(map(operator.is_, cols, [rep_cols[w] for w in which])):
            out.append(_joined(c, rep_cols, t).gather(gather))
        else:
            out.append(_joined(c, cols, t))
    return pl.DataFrame(out)


def _finish_parts(parts: list, attr, start, durs, selfs, count) -> "OpTable":
    """The OpTable of merged per-event arrays, its descriptions and, when every plane
    computed them, its per-description aggregates."""

    desc = _descriptions(parts)
    collapsed = None
    if parts and all(p.stats is not None for p in parts):
        st = {c: np.concatenate([p.stats[c] for p in parts]) for c in parts[0].stats}
        collapsed = pl.DataFrame({
            "attr": pl.Series(np.arange(len(st["rows"]), dtype=np.uint32), dtype=pl.UInt32),
            "count": pl.Series(st["rows"], dtype=pl.Int64),  # one occurrence per event
            "duration_ps": pl.Series(st["duration_ps"], dtype=pl.Int64),
            "self_ps": pl.Series(st["self_ps"], dtype=pl.Int64),
            "rows": pl.Series(st["rows"], dtype=pl.UInt32),
            "min_ps": pl.Series(st["min_ps"], dtype=pl.Int64),
            "max_ps": pl.Series(st["max_ps"], dtype=pl.Int64),
            "first_ps": pl.Series(st["first_ps"], dtype=pl.Int64),
        }).filter(pl.col("rows") > 0)
    return OpTable.from_parts(attr, start, durs, selfs, count, desc, collapsed=collapsed)


#: the stats that name an annotated event's op (one combo per distinct set of values) and
#: the per-event ones (step markers), in slot order
def _resolver(stat_names: dict[int, str], strings: list):
    """(kind, value) of :class:`~traceview.read.xplane.wire.AnnotatedLine` -> the Python value
    :func:`_stat_value` gives the same XStat (``ref_value`` through the stat names)."""
    import struct

    def value(kind: int, v: int):
        if kind == wire.KIND_DOUBLE:
            return struct.unpack("<d", struct.pack("<q", v))[0]
        if kind == wire.KIND_UINT64:
            return v & ((1 << 64) - 1)
        if kind == wire.KIND_INT64:
            return v
        if kind in (wire.KIND_STR, wire.KIND_BYTES):
            return strings[v]
        if kind == wire.KIND_REF:
            return stat_names.get(v & ((1 << 64) - 1), "")
        return None

    return value


def _op_of(st: dict, ev_name: str, hlo: HloIndex) -> tuple[str, HloOp | None, bool]:
    """(op name, instruction, whether that is the event's own ``hlo_op``) of an annotated op
    event whose merged stats are ``st`` and whose XEventMetadata is named ``ev_name``; the
    instruction None when the trace names none."""
    op_name = str(st.get("hlo_op"))
    pid = _as_int(st.get("program_id"))
    info = hlo.op(pid, op_name)
    if info is not None:
        return op_name, info, True
    if ev_name and ev_name != op_name:  # a kernel of a command buffer (a CUDA graph):
        # its hlo_op is the buffer's thunk (command_buffer_1, no instruction of the module); XLA
        # names a fusion's kernel after the fusion, "." written "_" (fusion_89 for fusion.89),
        # and runs identical fusions with one kernel (fusion.77 as fusion_76): the op is the
        # buffer's kernel, with the shape, HLO and costs of the fusion it is named after
        namesake = _kernel_namesake(ev_name, pid, hlo)
        if namesake is not None:
            return command_buffers.graph_op(op_name, ev_name), namesake, False
    return op_name, None, False


def _op_row(st: dict, ev_name: str, hlo: HloIndex, op: tuple | None = None) -> tuple:
    """The description columns (:data:`_ROW_COLUMNS`) of an annotated op event whose merged
    stats are ``st`` and whose XEventMetadata is named ``ev_name``; ``op``: its (op name,
    instruction), default :func:`_op_of`'s."""
    op_name, info = op if op is not None else _op_of(st, ev_name, hlo)[:2]
    pid = _as_int(st.get("program_id"))
    module = str(st.get("hlo_module", "") or "") or hlo.names.get(pid, "")
    fw = str(st.get("tf_op", "") or "")
    if fw in ("", "XlaModule:"):
        fw = str(st.get("name", "") or "")
    kernel = ev_name if ev_name != op_name else ""
    if info is None:
        return (module, pid, op_name, "", "", "", "", kernel, "", None, "", fw, None, None, None, "unknown")
    return (module, pid, op_name, info.opcode, info.category, info.shape, info.hlo_text, kernel, info.source_file,
            info.source_line, info.source_stack, info.framework_op or fw,
            None if info.flops is None else float(info.flops), None,
            None if info.bytes is None else float(info.bytes),
            "unknown" if info.flops is None and info.bytes is None else "derived")


_KERNEL_SUFFIX = re.compile(r"_(\d+)$")


def _kernel_namesake(kernel: str, pid: int | None, hlo: HloIndex) -> HloOp | None:
    """The instruction of module ``pid`` that the kernel named ``kernel`` is named after: its own
    name, else its last ``_<digits>`` written ``.<digits>`` (XLA:GPU names a fusion's kernel
    after the fusion: ``gemm_fusion_dot_8`` for ``gemm_fusion_dot.8``; identical fusions share
    the first one's kernel); None when neither is an instruction (a cuBLAS kernel, a memset)."""
    for name in (kernel, _KERNEL_SUFFIX.sub(r".\1", kernel)):
        info = hlo.op(pid, name)
        if info is not None:
            return info
    return None


_ROW_COLUMNS = ("module", "program_id", "op_name", "op_kind", "category", "shape", "hlo_text", "kernel", "source_file",
                "source_line", "source_stack", "framework_op", "flops", "model_flops", "bytes_accessed", "cost_source")


def _read_annotated_plane(plane, stat_names, cols: list, hlo: HloIndex, host, run, path, device_lines: bool,
                          markers: list | None = None, devices: list | None = None, decoded=None,
                          notes: list | None = None, counts: dict | None = None) -> int:
    """GPU stream lines / CPU thunk-executor threads: ops named by per-event stats
    (``hlo_op``, ``hlo_module``, ``program_id``, ``tf_op``, ``name``, ``device_ordinal``),
    merged over their XEventMetadata's stats. Each line is decoded into columns
    (:func:`~traceview.read.xplane.wire.decode_annotated`); the op fields are worked out once
    per distinct (metadata id, stat values), never per event. Appends one
    :class:`~traceview.model.optable.OpTable` (one description per distinct row of a line) to
    ``cols``. On host planes, events carrying a ``step_num`` stat (step annotations) go to
    ``markers`` as (name, step_num, start_ps, duration_ps). ``devices``: when given (host
    planes), the op events are split by ``device_ordinal``
    (:func:`~traceview.model.cpu_devices.device_names`) and the devices' names appended.
    ``decoded``: the plane's :func:`~traceview.model.annotated_plane.decode_lines` (made by a
    prefetch; an exception it raised is raised here; emptied as its lines are read), None to
    decode here line by line. ``notes``: where a line is said of events whose ``hlo_op`` is a
    ``ref_value`` to a stat id the plane does not define (they cannot be named: not ops).
    ``counts``: its ``"line_events"`` grows by the events of the lines decoded here (not the
    derived lines). Returns the plane's event count."""
    if isinstance(decoded, BaseException):
        raise decoded
    n = 0
    dangling = 0  # events whose hlo_op refers to no XStatMetadata of the plane
    md_by_id = plane.event_metadata
    md_cache: dict[int, tuple] = {}
    lines = []  # (line name, op event positions, combo row per op event, starts, durs, occ, rows)
    for le in (iter_lines(plane, path, device_lines) if decoded is None else consume(decoded)):
        if isinstance(le, int):  # a derived line's event count: no ops there
            n += le
            continue
        n += len(le)
        if counts is not None:
            counts["line_events"] = counts.get("line_events", 0) + len(le)
        if not le.has_stats.any():  # no event with per-event stats (hlo_op is one): no ops here
            continue
        value = _resolver(stat_names, le.strings)
        n_combo = len(le.combo_mids)
        is_op = np.zeros(n_combo, dtype=bool)
        step_md = [None] * n_combo  # the metadata's step_num where the event has none
        marker = np.zeros(n_combo, dtype=bool)
        names: list[str] = [""] * n_combo
        rows: list = [None] * n_combo
        # per combo, for the nameless kernels of command buffers (command_buffers.attribute)
        pids: list = [None] * n_combo
        insts: list = [None] * n_combo
        exact: list = [False] * n_combo
        thunks: list = [None] * n_combo
        sts: list = [None] * n_combo
        dang: list = []  # combos whose hlo_op is a dangling ref_value
        for c, mid in enumerate(le.combo_mids.tolist()):  # once per distinct (metadata, stat values)
            if mid not in md_cache:
                md = md_by_id.get(mid)
                md_cache[mid] = ((_stats(md.stats, stat_names, stat_names) if md is not None else {}),
                                 md.name if md is not None else "",
                                 md is not None and any(stat_names.get(x.metadata_id) == "hlo_op"
                                                        and x.WhichOneof("value") == "ref_value"
                                                        and x.ref_value not in stat_names for x in md.stats))
            md_st, ev_name, md_dangling = md_cache[mid]
            st = dict(md_st)
            for j, nm in enumerate(KEY_STATS):
                k = int(le.combo_kinds[c, j])
                if k != wire.KIND_ABSENT:
                    st[nm] = value(k, int(le.combo_values[c, j]))
            names[c] = ev_name
            if not st.get("hlo_op"):
                k0 = int(le.combo_kinds[c, 0])
                if (k0 == wire.KIND_REF and (int(le.combo_values[c, 0]) & ((1 << 64) - 1)) not in stat_names) or \
                        (k0 == wire.KIND_ABSENT and md_dangling):  # (the event's own, else its metadata's)
                    dang.append(c)
                marker[c] = markers is not None
                step_md[c] = md_st.get("step_num")
                continue
            if ev_name.startswith("end: "):
                continue
            is_op[c] = True
            op = _op_of(st, ev_name, hlo)
            rows[c] = (_op_row(st, ev_name, hlo, op[:2]), _as_int(st.get("device_ordinal")))
            pids[c], insts[c], exact[c] = _as_int(st.get("program_id")), op[1], op[2]
            if op[1] is None and ev_name != op[0] and hlo.get(pids[c]) is not None:
                thunks[c], sts[c] = op[0], st
        if dang:
            dangling += int(np.count_nonzero(np.isin(le.combo, dang)))
        if markers is not None and marker.any():
            _annotated_markers(le, marker, step_md, names, value, markers)
        combo = le.combo
        if any(t is not None for t in thunks):  # nameless kernels of a command buffer: placed by the schedule
            placed = command_buffers.attribute(le, pids, insts, exact, thunks, hlo)
            if placed is not None:
                combo, added = placed
                for c, inst in added:
                    rows.append((_op_row(sts[c], names[c], hlo, (command_buffers.graph_op(thunks[c], inst.name), inst)), rows[c][1]))
                is_op = np.concatenate([is_op, np.ones(len(added), dtype=bool)])
        op_ev = is_op[combo]
        if op_ev.all():  # every event an op (GPU streams): the decoded arrays as they are
            lines.append((le.name, combo, le.starts, le.durations, le.occurrences, rows))
        elif op_ev.any():
            pos = np.flatnonzero(op_ev)
            occ = le.occurrences
            occ = np.broadcast_to(np.int64(0), (len(pos),)) if _zeros(occ) else occ[pos]
            lines.append((le.name, combo[pos], le.starts[pos], le.durations[pos], occ, rows))
    if dangling and notes is not None:
        notes.append(printable(f"{path}: {plane.name}: {dangling:,} event(s) name their HLO op through a stat id "
                               "the plane does not define (a dangling ref_value): not counted as ops"))
    if not lines:
        return n
    # the device of each op: the plane, or per device_ordinal on a host plane running several
    dev_of = {}
    if devices is not None:
        from traceview.model.cpu_devices import device_names

        ords = {r[1] for _, combo, _, _, _, rows in lines for r in rows if r is not None}
        dev_of, dev_names = device_names(ords, plane.name)
        devices.extend(dev_names)
    attr_rows: list[tuple] = []
    attrs_parts, start_parts, dur_parts, self_parts, count_parts = [], [], [], [], []
    # a pre-aggregated event anywhere (decode_annotated's zero column for a line without any)
    aggregated = any(not _zeros(ln[4]) and bool((ln[4] != 0).any()) for ln in lines)
    for line_name, combo, starts, durs, occ, rows in lines:
        # descriptions of this line, numbered in order of first appearance (combos are)
        seen: dict[tuple, int] = {}
        lut = np.zeros(len(rows), dtype=np.uint32)
        for c, r in enumerate(rows):
            if r is None:
                continue
            full = (dev_of.get(r[1], plane.name), line_name) + r[0]
            if full not in seen:
                seen[full] = len(attr_rows)
                attr_rows.append(full)
            lut[c] = seen[full]
        attrs_parts.append(lut[combo])
        start_parts.append(starts)
        dur_parts.append(durs)
        self_parts.append(self_times(starts, durs))
        if aggregated:
            count_parts.append(np.where(occ != 0, occ, 1))
    starts = _cat(start_parts)
    start = starts
    if not aggregated:
        count_parts.append(np.ones(len(starts), dtype=np.int64))
    else:
        occ_all = _cat([ln[4] for ln in lines])
        start = pl.select(pl.when(pl.Series(occ_all != 0)).then(None)
                          .otherwise(pl.Series("start_ps", starts, dtype=pl.Int64)).alias("start_ps")).to_series()
    m = len(attr_rows)
    desc = {"host": [host] * m, "run": [run] * m, "file": [path] * m,
            "device": [r[0] for r in attr_rows], "line": [r[1] for r in attr_rows]}
    for j, c in enumerate(_ROW_COLUMNS):
        desc[c] = [r[2 + j] for r in attr_rows]
    attrs = frame(desc, {c: OPS_SCHEMA[c] for c in ATTR_COLUMNS})
    cols.append(OpTable.from_parts(_cat(attrs_parts), start, _cat(dur_parts), _cat(self_parts), _cat(count_parts),
                                   attrs))
    return n


def _export_step_markers(plane, stat_names: dict, path: str) -> list[tuple]:
    """The events of a GPU plane's :data:`~traceview.model.naming.EXPORT_STEPS_LINE` (a
    window ``traceview export`` wrote: one per step of the trace it was cut from) as step
    markers (device, that line's name, its ``step`` stat, start_ps, duration_ps); [] on a
    plane without it (every profiler's trace). A GPU trace's steps are its dominant program's
    executions, derived from the ops of the whole trace (the program, its anchor op, the last
    execution's extent), which the window's ops alone do not give again."""
    out: list[tuple] = []
    sid = next((k for k, v in stat_names.items() if v == "step"), -1)
    for raw in plane.lines:
        if wire.line_name(raw, path) != EXPORT_STEPS_LINE:  # the name only: a line of ops is not paged in again
            continue
        le = decode_line(raw, path, sid)
        timed = np.flatnonzero(le.occurrences == 0)
        steps = [int(v) if v >= 0 else None for v in le.stat_values[timed].tolist()]
        out.extend(zip([plane.name] * len(timed), [EXPORT_STEPS_LINE] * len(timed), steps,
                       le.starts[timed].tolist(), le.durations[timed].tolist()))
    return out


def _zeros(a: np.ndarray) -> bool:
    """Whether ``a`` is a read-only zero column (a broadcast zero:
    :func:`~traceview.read.xplane.wire.decode_annotated`'s occurrences of a line without a
    pre-aggregated event)."""
    return a.ndim == 1 and a.strides == (0,) and not a[:1].any()


def _cat(parts: list) -> np.ndarray:
    """``np.concatenate(parts)``, without a copy of a single part."""
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def _annotated_markers(le, marker: np.ndarray, step_md: list, names: list, value, markers: list) -> None:
    """Append the step annotations of one decoded line to ``markers``: events without an op
    whose ``step_num`` (the event's, else its metadata's) is set, timed (not pre-aggregated).
    The step number is resolved once per distinct stat value (or metadata)."""
    idx = np.flatnonzero(marker[le.combo])  # the marker events first: few, the line's events many
    if not len(idx):
        return
    kinds = le.extra_kinds[idx, 0]  # step_num, the first extra stat
    own = kinds != wire.KIND_ABSENT
    md_has = np.array([x is not None for x in step_md], dtype=bool)
    keep = (le.occurrences[idx] == 0) & np.where(own, kinds != wire.KIND_NONE, md_has[le.combo[idx]])
    idx, kinds, own_i = idx[keep], kinds[keep], own[keep]
    if not len(idx):
        return
    steps = np.empty(len(idx), dtype=object)
    for k in np.unique(kinds[own_i]).tolist():
        sel = np.flatnonzero(own_i & (kinds == k))
        uniq, inv = np.unique(le.extra_values[idx[sel], 0], return_inverse=True)
        steps[sel] = np.array([_as_int(value(k, v)) for v in uniq.tolist()] + [None], dtype=object)[:-1][inv]
    sel = np.flatnonzero(~own_i)
    if len(sel):
        combos, inv = np.unique(le.combo[idx[sel]], return_inverse=True)
        steps[sel] = np.array([_as_int(step_md[c]) for c in combos.tolist()] + [None], dtype=object)[:-1][inv]
    cnames = [names[c] for c in le.combo[idx].tolist()]
    markers.extend(zip(cnames, steps.tolist(), le.starts[idx].tolist(), le.durations[idx].tolist()))


def _derive_module_runs(table: OpTable) -> RunTable:
    """GPU/CPU traces have no ``XLA Modules`` line: derive program executions from the ops
    (an :class:`~traceview.model.optable.OpTable`), as a
    :class:`~traceview.model.runtable.RunTable` (one key per program).

    Per (host, device, program), the number of executions is taken as the smallest occurrence
    count of any of its ops (an op outside loops runs once per execution; ties broken by op
    name, so the same trace always gives the same executions). Execution k starts at that
    anchor op's k-th start and ends at the latest end of the program's ops that start before
    execution k+1 begins (an as-of join), so it spans the whole program, not the anchor op.
    A program without a ``program_id`` gets no executions. Rows are ordered by host, device,
    start_ps, module, program_id. Keys and op names are worked out per description; the
    events are only sorted and reduced as integer arrays (one sort by program then start).
    """
    keys = ["host", "device", "module", "program_id"]
    ev = table.events
    start_s = ev["start_ps"]
    placed = None if start_s.null_count() == 0 else start_s.is_not_null().to_numpy()
    if placed is not None and not placed.any():
        return RunTable.empty()

    def col(name):
        a = ev[name].fill_null(0).to_numpy() if ev[name].null_count() else ev[name].to_numpy()
        return a if placed is None else a[placed]

    attr = col("attr")
    start = col("start_ps")
    count = col("count")
    # per description: its program key (numbered in (host, device, module, program_id)
    # order, nulls first) and its (program key, op name)
    d = table.attrs.select(keys + ["op_name"])
    key_tab = (d.select(keys).unique().sort(keys, nulls_last=False, maintain_order=True)
               .with_row_index("kid"))
    kop_tab = d.unique(maintain_order=True).with_row_index("kop")
    kid_of = d.join(key_tab, on=keys, how="left", nulls_equal=True, maintain_order="left")["kid"].to_numpy()
    kop_of = d.join(kop_tab, on=keys + ["op_name"], how="left", nulls_equal=True, maintain_order="left")["kop"].to_numpy()
    # per (program key, op name): occurrences and first start, summed per description first
    m = d.height
    n_attr = np.zeros(m, dtype=np.int64)
    first_attr = np.full(m, np.iinfo(np.int64).max, dtype=np.int64)
    rows_attr = None
    if placed is None:  # every event placed: the table's collapsed rows hold these sums (cached)
        c = table.collapse()
        ids = c["attr"].to_numpy().astype(np.int64)
        n_attr[ids] = c["count"].to_numpy()
        first_attr[ids] = c["first_ps"].to_numpy()
        rows_attr = np.zeros(m, dtype=np.int64)
        rows_attr[ids] = c["rows"].to_numpy()
        seen = rows_attr > 0
    else:
        np.add.at(n_attr, attr, count)  # int64, wrapping as polars' sum does
        np.minimum.at(first_attr, attr, start)
        seen = np.bincount(attr, minlength=m) > 0
    nk = kop_tab.height
    n_kop = np.zeros(nk, dtype=np.int64)
    np.add.at(n_kop, kop_of[seen], n_attr[seen])
    first_kop = np.full(nk, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(first_kop, kop_of[seen], first_attr[seen])
    seen_kop = np.zeros(nk, dtype=bool)
    seen_kop[kop_of[seen]] = True
    per_op = (kop_tab.with_columns(pl.Series("n", n_kop), pl.Series("first", first_kop)).filter(pl.Series(seen_kop))
              .join(key_tab, on=keys, how="left", nulls_equal=True))
    best = (per_op.sort(["n", "first", "op_name"], maintain_order=True)
            .group_by("kid", maintain_order=True).first().select("kid", "kop"))
    best_kop = np.full(key_tab.height, -1, dtype=np.int64)
    best_kop[best["kid"].to_numpy()] = best["kop"].to_numpy()
    anchor_of = kop_of == best_kop[kid_of]  # per description: an op of its program's anchor
    # as polars' as-of join by keys: a key with a null never matches
    valid = key_tab.select(pl.all_horizontal(pl.col(k).is_not_null() for k in keys)).to_series().to_numpy()
    kdt = np.uint16 if key_tab.height <= 1 << 16 else np.int64  # 16-bit: a radix sort
    kid_ev = kid_of.astype(kdt)[attr]
    anchor_ev = anchor_of[attr]
    dur = col("duration_ps")
    kept = bool(valid.all())
    if not kept:
        idx = np.flatnonzero(valid[kid_ev])
        kid_ev, start, anchor_ev, dur = kid_ev[idx], start[idx], anchor_ev[idx], dur[idx]
    if not len(kid_ev):
        return RunTable.empty()
    nk = key_tab.height
    # rows by host, device, start_ps, module, program_id: keys are numbered in sort order, so
    # the runs in (start, key) order, then a stable sort by (host, device)
    got = _c_program_runs(kid_ev, start, dur, anchor_ev, nk)
    if got is None:
        kend = (np.cumsum(np.bincount(kid_of, weights=rows_attr, minlength=nk).astype(np.int64))
                if kept and rows_attr is not None else None)  # past each program's events
        kid, r_start, r_dur = _program_runs(kid_ev, start, dur, anchor_ev, nk, kend)  # (key, start) order
        o = np.argsort(r_start, kind="stable")
        kid, r_start, r_dur = kid[o], r_start[o], r_dur[o]
    else:
        kid, r_start, r_dur = got
    del kid_ev, start, dur, anchor_ev
    hd = key_tab.select(pl.struct("host", "device").rle_id()).to_series().to_numpy()
    if hd.min() != hd.max():  # programs on several (host, device): which of them ran
        hd_run = hd[kid]
        if hd_run.min() != hd_run.max():
            o = np.argsort(hd_run.astype(kdt), kind="stable")
            kid, r_start, r_dur = kid[o], r_start[o], r_dur[o]
        del hd_run
    runs = pl.DataFrame({"key": pl.Series(kid, dtype=pl.UInt32), "start_ps": pl.Series(r_start, dtype=pl.Int64),
                         "duration_ps": pl.Series(r_dur, dtype=pl.Int64)})
    return RunTable(runs, key_tab.rename({"kid": "key"}).cast(KEY_SCHEMA))


def _c_program_runs(kid_ev: np.ndarray, start: np.ndarray, dur: np.ndarray, anchor_ev: np.ndarray,
                    nk: int) -> tuple | None:
    """:func:`_program_runs`'s executions in (start, key) order (that function's put in it by a
    stable sort by start), in two C passes over the events in time order (``program_runs``:
    count, then fill), without sorting them by program; events out of time order (several
    lines') are put in it first by one stable sort by start, which orders them as that
    function's sort by program then start does. None without the accelerator."""
    if _fast is None or len(start) < 2:
        return None
    if not (start[1:] >= start[:-1]).all():
        order = np.argsort(start, kind="stable")  # a few time-ordered lines: merged runs
        k64, s64, d64 = kid_ev.astype(np.int64)[order], start[order].astype(np.int64), dur[order].astype(np.int64)
        a8 = np.ascontiguousarray(anchor_ev[order], dtype=bool).view(np.uint8)
        del order
    else:
        k64 = hugearrays.empty(len(kid_ev), np.int64)
        k64[:] = kid_ev
        s64 = np.ascontiguousarray(start, dtype=np.int64)
        d64 = np.ascontiguousarray(dur, dtype=np.int64)
        a8 = np.ascontiguousarray(anchor_ev, dtype=bool).view(np.uint8)
    # an execution begins at a group holding an anchor event: at most one per anchor event,
    # so one pass fills arrays of that size (their unwritten tail is never touched)
    cap = int(np.count_nonzero(a8))
    r_key = hugearrays.empty(cap, np.uint32)  # the module runs' columns (huge pages: fewer faults)
    r_start = hugearrays.empty(cap, np.int64)
    r_end = hugearrays.empty(cap, np.int64)
    n = _fast.program_runs(k64, s64, d64, a8, nk, r_key, r_start, r_end, True)
    if not 0 <= n <= cap:  # (none counted without an anchor event)
        return None
    if n < cap:
        r_key, r_start, r_end = r_key[:n], r_start[:n], r_end[:n]
        if n < cap // 2:  # most of the arrays unused: let them go
            r_key, r_start, r_end = r_key.copy(), r_start.copy(), r_end.copy()
    r_end -= r_start  # int64, wrapping as polars does
    return r_key, r_start, r_end


def _program_runs(kid_ev: np.ndarray, start: np.ndarray, dur: np.ndarray, anchor_ev: np.ndarray, nk: int,
                  kend: np.ndarray | None = None) -> tuple:
    """(program key, start, duration) of each execution of :func:`_derive_module_runs`, in
    (key, start) order, from the events' program keys ``kid_ev`` (< ``nk``), starts, durations
    and whether each is of its program's anchor op (numpy: one stable sort of the events by
    program). ``kend``: the cumulative event count per program, when known."""
    # events in (program, start) order: a stable sort by start, then by program
    if (start[1:] >= start[:-1]).all():
        order = np.argsort(kid_ev, kind="stable")
    else:
        order = np.argsort(start, kind="stable")
        order = order[np.argsort(kid_ev[order], kind="stable")]
    if kend is None:
        kend = np.cumsum(np.bincount(kid_ev, minlength=nk))
    key_first = np.unique(np.r_[0, kend[:-1]])  # first position of each program (and the end)
    key_first = key_first[key_first < len(order)]
    s_s = start[order]
    n = len(order)
    # an execution begins at the first event of each (program, start) group holding an anchor
    # event; it takes every later event of its program up to the next execution
    new_start = np.empty(n, dtype=bool)
    new_start[0] = True
    np.not_equal(s_s[1:], s_s[:-1], out=new_start[1:])
    new_start[key_first] = True
    gs = np.flatnonzero(new_start)  # group starts
    del new_start
    has_anchor = np.logical_or.reduceat(anchor_ev[order], gs)
    cut_sel = has_anchor.copy()
    cut_sel[np.searchsorted(gs, key_first)] = True
    at = gs[has_anchor]
    # each program's first group holds an anchor (the usual case): the cuts are the executions
    same = bool((cut_sel == has_anchor).all())
    cuts = at if same else gs[cut_sel]
    del gs
    r_start = s_s[at]
    # the program of each execution: at ascends, so each program's executions are one run
    kid = np.repeat(np.arange(len(kend), dtype=np.uint32),
                    np.diff(np.searchsorted(at, kend, side="left"), prepend=0))
    del at
    end = s_s
    end += dur[order]  # int64, wrapping as polars does
    del order
    r_dur = np.maximum.reduceat(end, cuts) if same else np.maximum.reduceat(end, cuts)[has_anchor[cut_sel]]
    del end, s_s, cuts
    r_dur -= r_start
    return kid, r_start, r_dur
