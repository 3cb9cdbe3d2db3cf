"""The allocators' events of an XSpace host plane as one frame (:data:`MEMORY_SCHEMA`).

TPU and GPU runtimes record every device buffer allocation and deallocation as a
``MemoryAllocation`` / ``MemoryDeallocation`` XEvent on the ``/host:CPU`` plane, each carrying
the allocator's state after the event. Stat names and meanings are OpenXLA's
(``xla/tsl/profiler/utils/xplane_schema.cc``) as XProf's ``memory_profile`` tool reads them
(``xprof/convert/xplane_to_memory_profile.cc``): ``bytes_allocated`` (heap bytes in use),
``bytes_reserved`` (stack bytes reserved), ``bytes_available`` (free bytes), ``peak_bytes_in_use``
(the allocator's lifetime peak so far), ``fragmentation``, ``requested_bytes``,
``allocation_bytes``, ``addr``, ``tf_op``, ``group_id`` (step), ``region_type``, ``data_type``,
``shape`` / ``tensor_shapes``; the allocator is named by ``allocator_name`` (GPU BFC allocators,
e.g. ``GPU_0_bfc``) or by the device index (``index_on_host`` / ``device_ordinal``, TPU), as
XProf's memory ids are. XLA:CPU records none.

==================  =========  ==============================================================
column              dtype      meaning
==================  =========  ==============================================================
host                Utf8       host name (as the op table's)
allocator           Utf8       XProf's memory id: ``allocator_name``, else the device index
time_ps             Int64      event time, ps on the host plane's clock (line timestamp +
                               offset; XProf keys its snapshots by the offset alone)
alloc               Boolean    True for an allocation, False for a deallocation
address             Int64      ``addr`` (null if absent)
requested_bytes     Int64      bytes the caller asked for (allocations; null if absent)
allocation_bytes    Int64      bytes the allocator handed out (null if absent)
heap_bytes          Int64      heap bytes in use after the event (``bytes_allocated``)
stack_bytes         Int64      stack bytes reserved after the event (``bytes_reserved``)
free_bytes          Int64      free bytes after the event (``bytes_available``)
lifetime_peak_bytes Int64      the allocator's peak bytes in use so far (``peak_bytes_in_use``)
fragmentation       Float64    the allocator's fragmentation after the event (0-1)
op                  Utf8       op that allocated (``tf_op``; "" if absent)
region              Utf8       ``region_type`` ("" if absent)
data_type           Utf8       ``data_type`` (TensorFlow DataType names, "" when invalid)
shape               Utf8       tensor shape as recorded ("" if absent)
step_id             Int64      ``group_id`` (the step the runtime grouped it in; null if none)
==================  =========  ==============================================================
"""

from __future__ import annotations

import numpy as np
import polars as pl

from traceview.read.xplane import wire

MEMORY_SCHEMA: dict[str, pl.DataType] = {
    "host": pl.Utf8,
    "allocator": pl.Utf8,
    "time_ps": pl.Int64,
    "alloc": pl.Boolean,
    "address": pl.Int64,
    "requested_bytes": pl.Int64,
    "allocation_bytes": pl.Int64,
    "heap_bytes": pl.Int64,
    "stack_bytes": pl.Int64,
    "free_bytes": pl.Int64,
    "lifetime_peak_bytes": pl.Int64,
    "fragmentation": pl.Float64,
    "op": pl.Utf8,
    "region": pl.Utf8,
    "data_type": pl.Utf8,
    "shape": pl.Utf8,
    "step_id": pl.Int64,
}

EVENT_NAMES = {"MemoryAllocation": True, "MemoryDeallocation": False}

# slot -> the stat names that fill it (a later name in an event wins, as in XProf's switch)
_SLOTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("allocator_name", ("allocator_name",)),
    ("device_index", ("index_on_host", "device_ordinal")),
    ("stack_bytes", ("bytes_reserved",)),
    ("heap_bytes", ("bytes_allocated",)),
    ("free_bytes", ("bytes_available",)),
    ("fragmentation", ("fragmentation",)),
    ("lifetime_peak_bytes", ("peak_bytes_in_use",)),
    ("requested_bytes", ("requested_bytes",)),
    ("allocation_bytes", ("allocation_bytes",)),
    ("address", ("addr",)),
    ("op", ("tf_op",)),
    ("step_id", ("group_id",)),
    ("region", ("region_type",)),
    ("data_type", ("data_type",)),
    ("shape", ("shape", "tensor_shapes")),
)
_SLOT = {name: i for i, (name, _) in enumerate(_SLOTS)}
_INT_SLOTS = ("stack_bytes", "heap_bytes", "free_bytes", "lifetime_peak_bytes", "requested_bytes",
              "allocation_bytes", "address", "step_id", "device_index")
_STR_SLOTS = ("allocator_name", "op", "region", "data_type", "shape")

#: TensorFlow ``DataType`` enum values (``tensorflow/core/framework/types.proto``), as the
#: runtimes record ``data_type``; 0 (``DT_INVALID``) and unknown values read as "".
_TF_DTYPES = {1: "float", 2: "double", 3: "int32", 4: "uint8", 5: "int16", 6: "int8", 7: "string",
              8: "complex64", 9: "int64", 10: "bool", 11: "qint8", 12: "quint8", 13: "qint32",
              14: "bfloat16", 15: "qint16", 16: "quint16", 17: "uint16", 18: "complex128", 19: "half",
              20: "resource", 21: "variant", 22: "uint32", 23: "uint64", 24: "float8_e5m2",
              25: "float8_e4m3fn", 29: "int4", 30: "uint4"}
_TF_DTYPE_NAMES = np.array([_TF_DTYPES.get(c, "") for c in range(max(_TF_DTYPES) + 1)], dtype=object)


def empty_memory() -> pl.DataFrame:
    """An empty frame of :data:`MEMORY_SCHEMA`."""
    return pl.DataFrame(schema=MEMORY_SCHEMA)


_EVENT_NAME_BYTES = tuple(nm.encode() for nm in EVENT_NAMES)


def has_memory_events(plane) -> bool:
    """Whether ``plane``'s event metadata names an allocator event (no event is decoded)."""
    return any(nm in EVENT_NAMES for _, nm in wire.metadata_names(plane, containing=_EVENT_NAME_BYTES))


def read_memory_events(plane, stat_names: dict[int, str], path: str, host: str) -> pl.DataFrame:
    """The allocator events of one host plane (lazy or mapped XPlane) as a
    :data:`MEMORY_SCHEMA` frame sorted by time; empty when the plane has none. Each XLine is
    decoded by :func:`traceview.read.xplane.wire.decode_annotated` (the C decoder when built)
    and the events of the two allocator metadata ids kept: no Python work per event. Raises
    :class:`~traceview.errors.TraceUnreadable` naming ``path`` on malformed line bytes."""
    kinds_of = {mid: EVENT_NAMES[nm] for mid, nm in wire.metadata_names(plane) if nm in EVENT_NAMES}
    if not kinds_of:
        return empty_memory()
    ids, slots = [], []
    for sid, nm in stat_names.items():
        for slot, (_, names) in enumerate(_SLOTS):
            if nm in names:
                ids.append(sid)
                slots.append(slot)
    ref_names = np.array([""] + list(stat_names.values()), dtype=object)
    ref_keys = np.array([-1] + list(stat_names.keys()), dtype=np.int64)
    order = np.argsort(ref_keys, kind="stable")
    ref_keys, ref_names = ref_keys[order], ref_names[order]
    # the kept events of every line gathered first, their columns built once (a host plane has
    # one line per thread: a frame per line cost more than the events, ms per plane)
    times, allocs, kinds_l, vals_l, strs = [], [], [], [], []
    n_str = 0
    nslot = len(_SLOTS)
    for raw in plane.lines:
        line = wire.decode_annotated(raw, path, ids, slots, 0, nslot)
        if not len(line):
            continue
        mem_combo = np.fromiter((m in kinds_of for m in line.combo_mids.tolist()), dtype=bool,
                                count=len(line.combo_mids))  # a line's few distinct (metadata, stats)
        if not mem_combo.any():
            continue
        keep = np.flatnonzero(mem_combo[line.combo])
        alloc_combo = np.fromiter((bool(kinds_of.get(m)) for m in line.combo_mids.tolist()), dtype=bool,
                                  count=len(line.combo_mids))
        kinds = line.extra_kinds[keep]
        vals = line.extra_values[keep]
        if n_str:  # a line's string stats index its own strings: shift them past the earlier lines'
            vals = np.where((kinds == wire.KIND_STR) & (vals >= 0), vals + n_str, vals)
        line_strs = list(line.strings)
        strs.extend(line_strs)
        n_str += len(line_strs)
        times.append(line.starts[keep])
        allocs.append(alloc_combo[line.combo[keep]])
        kinds_l.append(kinds)
        vals_l.append(vals)
    if not times:
        return empty_memory()
    kinds, vals = np.concatenate(kinds_l), np.concatenate(vals_l)
    strings = np.array(strs + [""], dtype=object)
    cols = {"time_ps": np.concatenate(times), "alloc": np.concatenate(allocs)}
    for name in _INT_SLOTS:
        cols[name] = _ints(kinds[:, _SLOT[name]], vals[:, _SLOT[name]])
    k, v = kinds[:, _SLOT["fragmentation"]], vals[:, _SLOT["fragmentation"]]
    frag = np.where(k == wire.KIND_DOUBLE, v.view(np.float64), v.astype(np.float64))
    cols["fragmentation"] = pl.Series(frag).set(pl.Series(k == wire.KIND_ABSENT), None)
    for name in _STR_SLOTS:
        cols[name] = _strings(kinds[:, _SLOT[name]], vals[:, _SLOT[name]], strings, ref_keys, ref_names)
    df = pl.DataFrame(cols)
    dtype = df["data_type"]
    df = df.with_columns(
        pl.lit(host, dtype=pl.Utf8).alias("host"),
        pl.when(pl.col("allocator_name") != "").then(pl.col("allocator_name"))
        .otherwise(pl.col("device_index").cast(pl.Utf8).fill_null("")).alias("allocator"),
        dtype.alias("data_type"),
    )
    return df.select(list(MEMORY_SCHEMA)).cast(MEMORY_SCHEMA).sort("time_ps", maintain_order=True)


def _ints(kind: np.ndarray, val: np.ndarray) -> pl.Series:
    """int64 values of a stat slot (a double truncated), null where absent or a string."""
    out = np.where(kind == wire.KIND_DOUBLE, val.view(np.float64).astype(np.int64, copy=False), val)
    bad = ~np.isin(kind, (wire.KIND_INT64, wire.KIND_UINT64, wire.KIND_DOUBLE))
    return pl.Series(out, dtype=pl.Int64).set(pl.Series(bad), None)


def _strings(kind, val, strings, ref_keys, ref_names) -> pl.Series:
    """str values of a stat slot: str stats, ref stats (a stat metadata's name) and integer
    ``data_type`` codes (TensorFlow names); "" where absent."""
    out = np.full(len(kind), "", dtype=object)
    s = kind == wire.KIND_STR
    if s.any():
        out[s] = strings[val[s]]
    r = kind == wire.KIND_REF
    if r.any():
        pos = np.clip(np.searchsorted(ref_keys, val[r]), 0, len(ref_keys) - 1)
        out[r] = np.where(ref_keys[pos] == val[r], ref_names[pos], "")
    i = np.isin(kind, (wire.KIND_INT64, wire.KIND_UINT64))
    if i.any():
        codes = val[i]
        ok = (codes >= 0) & (codes < len(_TF_DTYPE_NAMES))
        out[i] = np.where(ok, _TF_DTYPE_NAMES[np.where(ok, codes, 0)], "")
    return pl.Series(out, dtype=pl.Utf8)


_GPU_BFC = __import__("re").compile(r"^GPU_(\d+)_bfc$")


def allocator_device(allocator: str, device_names) -> str:
    """The device plane an allocator serves: a device index (TPU ``index_on_host``) or
    ``GPU_<n>_bfc`` names the device plane ending in ``:<n>`` (TPU or GPU, the first such);
    "" for a host allocator (``xla_gpu_host_bfc``) or when no plane matches."""
    m = _GPU_BFC.match(allocator or "")
    idx = m.group(1) if m else (allocator if (allocator or "").isdigit() else None)
    if idx is None:
        return ""
    for name in device_names:
        if name.endswith(f":{idx}") and ("TPU" in name or "GPU" in name):
            return name
    return ""
