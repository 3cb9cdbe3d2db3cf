"""Which virtual XLA:CPU device ran each op event of a ``/host:CPU`` plane.

A CPU process started with ``--xla_force_host_platform_device_count=N`` runs N devices in one
``/host:CPU`` plane. What identifies the device, read off a recorded 8-device trace
(``fixtures/collectives_8dev``): every op event carries the ``device_ordinal`` stat (with
``hlo_op``, ``hlo_module``, ``program_id``, ``run_id``). Thread placement does not: the
``tf_XLAPjRtCpuClient/<id>`` thunk-executor threads are a pool shared by the devices (one
thread ran ordinals 3, 5 and 7 in one step), so a thread is not a device. The HLO's replica
structure gives the count of participants, not which event is whose.

A plane whose op events name one ordinal (or none) stays one device, named after the plane;
a plane with several ordinals becomes one device per ordinal, named ``/device:CPU:<ordinal>``.
"""

from __future__ import annotations

import polars as pl

#: device name given to the ops of virtual CPU device ``n`` (several ordinals in one plane)
CPU_DEVICE = "/device:CPU:{}"


def cpu_device_name(ordinal: int) -> str:
    """``/device:CPU:<ordinal>``."""
    return CPU_DEVICE.format(int(ordinal))


def split_by_ordinal(frames: list[pl.DataFrame], ordinals: list[list], plane: str) -> tuple[list[pl.DataFrame], list[str]]:
    """Frames of one host plane (``ordinals[i]``: the ``device_ordinal`` of each row of
    ``frames[i]``, None where the event has none) with their ``device`` column set per row.

    Returns (frames, device names in ordinal order). With fewer than two distinct ordinals the
    frames are returned unchanged and the one device is ``plane``; rows without an ordinal
    then stay on ``plane`` too (so a plane that mixes ordinal and ordinal-less op events keeps
    the latter as a device of their own)."""
    seen = sorted({int(o) for ords in ordinals for o in ords if o is not None})
    if len(seen) < 2:
        return frames, [plane]
    out = []
    for f, ords in zip(frames, ordinals):
        names = [plane if o is None else cpu_device_name(o) for o in ords]
        out.append(f.with_columns(pl.Series("device", names, dtype=pl.Utf8)))
    names = [cpu_device_name(o) for o in seen]
    if any(o is None for ords in ordinals for o in ords):
        names.append(plane)
    return out, names
