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

#: device name given to the ops of virtual CPU device ``n`` (several ordinals in one plane)
CPU_DEVICE = "/device:CPU:{}"


def cpu_device_name(ordinal: int) -> str:
    """``/device:CPU:<ordinal>``."""
    return CPU_DEVICE.format(int(ordinal))


def device_names(ordinals, plane: str) -> tuple[dict, list[str]]:
    """The devices of one host plane whose op events carry the ``device_ordinal`` values
    ``ordinals`` (a collection; None for an event without one).

    Returns (ordinal -> device name for the ordinals that get a device of their own, device
    names in ordinal order). With fewer than two distinct ordinals the mapping is empty (every
    op stays on ``plane``, the one device); otherwise each ordinal is ``/device:CPU:<n>`` and
    ops without an ordinal stay on ``plane`` (so a plane that mixes ordinal and ordinal-less
    op events keeps the latter as a device of their own, listed last)."""
    seen = sorted({int(o) for o in ordinals if o is not None})
    if len(seen) < 2:
        return {}, [plane]
    names = [cpu_device_name(o) for o in seen]
    if any(o is None for o in ordinals):
        names.append(plane)
    return {o: cpu_device_name(o) for o in seen}, names
