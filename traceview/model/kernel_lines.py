"""The lines TPU kernel profiling adds to a device plane, as one frame (:data:`KERNEL_SCHEMA`).

With ``LIBTPU_INIT_ARGS="--xla_enable_custom_call_region_trace=true
--xla_xprof_register_llo_debug_info=true"`` set before JAX is imported, a TPU plane holds,
beside ``XLA Ops``: ``XLA TraceMe`` (a Pallas kernel's pipeline stages: ``ep_copy_in``,
``ep_wait_in``, ``ep_run_kernel``, ``ep_copy_out``, ``ep_wait_out``, ``ep_initialize_<n>`` and the
kernel's own named scopes), ``_counters_`` (hardware counters over intervals: ``MXU``, ``Vector
ALU``, ``Vector Load``, ... each with one value stat such as ``% util``) and ``Tensor Core`` (one
instant event per executed LLO bundle, ``long_name`` its text). Times are the device clock's
(``device_offset_ps`` / ``device_duration_ps`` where the event has them, as the ``XLA Ops`` line
is read), so stages, counters and ops share one clock.

==================  =========  ==============================================================
column              dtype      meaning
==================  =========  ==============================================================
host                Utf8       host name (as the op table's)
device              Utf8       the plane, e.g. ``/device:TPU:0``
line                Utf8       ``XLA TraceMe``, ``_counters_`` or ``Tensor Core``
name                Utf8       the event's name (stage, counter or ``bundle.<id>``)
start_ps            Int64      start, ps on the device clock
duration_ps         Int64      duration, ps (0 for a bundle)
value               Float64    a counter's value (null elsewhere)
value_name          Utf8       the counter's stat name, e.g. ``% util`` ("" elsewhere)
==================  =========  ==============================================================
"""

from __future__ import annotations

import numpy as np
import polars as pl

from traceview.read.xplane import wire

KERNEL_LINES = ("XLA TraceMe", "_counters_", "Tensor Core")
#: the libtpu flags that make a TPU plane carry :data:`KERNEL_LINES`
CAPTURE_FLAGS = ('LIBTPU_INIT_ARGS="--xla_enable_custom_call_region_trace=true '
                 '--xla_xprof_register_llo_debug_info=true" (set before importing jax)')
KERNEL_SCHEMA: dict[str, pl.DataType] = {
    "host": pl.Utf8, "device": pl.Utf8, "line": pl.Utf8, "name": pl.Utf8, "start_ps": pl.Int64,
    "duration_ps": pl.Int64, "value": pl.Float64, "value_name": pl.Utf8,
}
_TIME_STATS = {"device_offset_ps": 0, "device_duration_ps": 1}


def has_kernel_lines(plane) -> bool:
    """Whether a plane's event metadata names what kernel profiling records (an ``ep_`` pipeline
    stage, an ``MXU`` counter, an LLO ``bundle.``): no line is touched."""
    names = wire.metadata_names(plane, containing=(b"ep_", b"bundle.", b"MXU"))
    return any(nm.startswith(("ep_", "bundle.")) or nm == "MXU" for _, nm in names)


def empty_kernel_lines() -> pl.DataFrame:
    return pl.DataFrame(schema=KERNEL_SCHEMA)


def read_kernel_lines(plane, stat_names: dict[int, str], path: str, host: str) -> pl.DataFrame | None:
    """The :data:`KERNEL_LINES` events of one TPU plane (lazy or mapped XPlane) as a
    :data:`KERNEL_SCHEMA` frame; None when the plane has none of those lines. Lines are decoded
    by :func:`traceview.read.xplane.wire.decode_annotated` (no Python work per event). Raises
    :class:`~traceview.errors.TraceUnreadable` naming ``path`` on malformed line bytes."""
    if not has_kernel_lines(plane):
        return None
    raws = [(raw, wire.line_header(raw, path).name) for raw in plane.lines]
    raws = [(raw, nm) for raw, nm in raws if nm in KERNEL_LINES]
    if not raws:
        return None
    names = dict(wire.metadata_names(plane))
    # slots: 0 device offset, 1 device duration, 2 the counter's value (any other stat)
    ids, slots = [], []
    for sid, nm in stat_names.items():
        ids.append(sid)
        slots.append(_TIME_STATS.get(nm, 2))
    val_name = {sid: nm for sid, nm in stat_names.items() if nm not in _TIME_STATS}
    mid_keys = np.array(sorted(names), dtype=np.int64)
    mid_names = np.array([names[int(m)] for m in mid_keys], dtype=object)
    frames = []
    for raw, line_name in raws:
        ln = wire.decode_annotated(raw, path, ids, slots, 0, 3)
        if not len(ln):
            continue
        k, v = ln.extra_kinds, ln.extra_values
        off_ok = np.isin(k[:, 0], (wire.KIND_INT64, wire.KIND_UINT64))
        dur_ok = np.isin(k[:, 1], (wire.KIND_INT64, wire.KIND_UINT64))
        is_d = k[:, 2] == wire.KIND_DOUBLE
        is_i = np.isin(k[:, 2], (wire.KIND_INT64, wire.KIND_UINT64))
        value = np.where(is_d, v[:, 2].view(np.float64), v[:, 2].astype(np.float64))
        mids = ln.combo_mids[ln.combo]
        pos = np.clip(np.searchsorted(mid_keys, mids), 0, max(len(mid_keys) - 1, 0))
        name = np.where(mid_keys[pos] == mids, mid_names[pos], "") if len(mid_keys) else np.full(len(mids), "")
        counters = line_name == "_counters_"
        vn = _counter_stat_names(raw, path, val_name, names) if counters else {}
        frames.append(pl.DataFrame({
            "line": pl.repeat(line_name, len(ln), dtype=pl.Utf8, eager=True),
            "name": pl.Series(name, dtype=pl.Utf8),
            "start_ps": np.where(off_ok, v[:, 0], ln.starts), "duration_ps": np.where(dur_ok, v[:, 1], ln.durations),
            "value": pl.Series(value).set(pl.Series(~(is_d | is_i) | (not counters)), None),
        }).with_columns(pl.col("name").replace_strict(vn, default="", return_dtype=pl.Utf8).alias("value_name")))
    if not frames:
        return None
    out = pl.concat(frames, how="vertical").with_columns(pl.lit(host).alias("host"),
                                                        pl.lit(plane.name).alias("device"))
    return out.select(list(KERNEL_SCHEMA)).cast(KERNEL_SCHEMA).sort("start_ps", maintain_order=True)


def _counter_stat_names(raw, path: str, val_name: dict[int, str], names: dict[int, str]) -> dict[str, str]:
    """{counter event name: the name of its value stat}, from one C decode of the line per value
    stat id (a counter's events carry one value stat)."""
    out: dict[str, str] = {}
    for sid, nm in val_name.items():
        ln = wire.decode_annotated(raw, path, [sid], [0], 0, 1)
        if not len(ln):
            break
        mids = ln.combo_mids[ln.combo][ln.extra_kinds[:, 0] != wire.KIND_ABSENT]
        for mid in np.unique(mids).tolist():
            out.setdefault(names.get(int(mid), ""), nm)
    return out
