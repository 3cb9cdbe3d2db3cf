"""Several ranks' planes in one XSpace: which plane is which, and which rank it belongs to.

Data-parallel serving writes one XSpace per rank and merges them into one file (tpu-inference's
``scripts/merge_xprof.py``; ``benchmarks/merge_ranks.py`` writes the same layouts). Every rank
numbers its devices from 0, so a merged file holds several ``/device:TPU:0`` planes unless
the merge renamed them. Three layouts are recognised, plane by plane, in file order:

* **prefixed** (``--prefix-planes``): ``<label>: /device:TPU:0`` — the rank is the label, the
  plane is what follows ``": "``.
* **renumbered** (``merge_xprof.py`` since tpu-inference PR #2738): device planes renumbered
  over the ranks (``/device:TPU:0..7`` for two ranks of four), the host planes numbered by rank
  (``/host:CPU 1``, ``/host:metadata 1``, ``Task Environment 1``). A host plane's number is its
  rank within its host group; a device plane belongs to the rank of the next numbered host
  plane in the file (each rank's planes are written together, and a profiler XSpace ends with
  its host planes), else of the last one. A number lower than the previous one starts the next
  host group (``rank<g>.<k>``).
* **concatenated** (the plain concatenation that script did before, names and plane ids
  colliding): within the planes of one rank (all of them when the file says nothing else), a
  plane whose name was already seen starts the next rank — the k-th ``/device:TPU:0`` is rank
  k's. This also parts planes that collide in every field: they are kept apart by their order.

A rank's label is the prefix, else ``rank<k>`` — or, when every rank's device planes name one
host of their own (the ``hostname`` of the TPU ``core_details`` stat) or the XSpace lists one
distinct hostname per rank (a concatenation keeps each input's), that host name. A file of one
rank reads as before: nothing renamed, no label.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: host planes a renumbering merge numbers by rank
HOST_PLANES = ("/host:CPU", "/host:metadata", "Task Environment")
_PREFIXED = re.compile(r"^([^/\s:][^:]{0,199}): (/device:.*|/host:.*|Task Environment.*)$", re.S)
_NUMBERED = re.compile(r"^(/host:CPU|/host:metadata|Task Environment) (\d{1,9})$")
#: labels shown in a rank note before "and N more"
NOTE_LABELS = 4


@dataclass
class Ranks:
    """:func:`plane_ranks` of one XSpace. ``names``: per plane (file order), its name with a
    rank prefix or rank number removed; ``rank``: per plane, its index into ``labels``;
    ``labels``: one per rank (``[""]`` for a file of one rank); ``how``: how the ranks were
    told apart ("" for one rank); ``ids_collide``: whether planes of one name share their
    plane id too."""

    names: list
    rank: list
    labels: list
    how: str = ""
    ids_collide: bool = False

    @property
    def n(self) -> int:
        return len(self.labels)

    def host(self, i: int, host: str) -> str:
        """The host of plane ``i`` for a file of host ``host``: ``host/<label>`` when the file
        holds several ranks, else ``host``."""
        return host if len(self.labels) == 1 else f"{host}/{self.labels[self.rank[i]]}" if host else self.labels[self.rank[i]]

    def note(self, path: str, host: str) -> str | None:
        """The one line that says the file holds several ranks and how they were told apart; None for one rank."""
        if len(self.labels) < 2:
            return None
        shown = ", ".join(f"{host}/{lb}" if host else lb for lb in self.labels[:NOTE_LABELS])
        more = f" and {len(self.labels) - NOTE_LABELS} more" if len(self.labels) > NOTE_LABELS else ""
        ids = "; their plane ids collide too, so only their order in the file tells them apart" if self.ids_collide else ""
        return (f"{path}: one XSpace holds {len(self.labels)} ranks' planes ({self.how}{ids}): every plane is kept "
                f"and each rank's devices read under their own host ({shown}{more})")


def split_name(name: str) -> tuple[str | None, str, int | None]:
    """(prefix label or None, the plane's own name, rank number or None) of a plane name."""
    m = _PREFIXED.match(name)
    label = None
    if m:
        label, name = m.group(1), m.group(2)
    m = _NUMBERED.match(name)
    if m:
        return label, m.group(1), int(m.group(2))
    return label, name, None


def is_device_plane(name: str) -> bool:
    """Whether a plane name (optionally ``<label>: ``-prefixed) names a device plane."""
    return split_name(name)[1].startswith("/device:")


def _core_hostname(plane) -> str | None:
    """The ``hostname`` (field 1) of a TPU plane's ``core_details`` stat (OpenXLA's
    ``CoreDetails`` message: hostname 1, device_ordinal 2, ...), None when absent."""
    sid = next((k for k, v in plane.stat_metadata.items() if v.name == "core_details"), None)
    if sid is None:
        return None
    for s in plane.stats:
        if s.metadata_id == sid and s.WhichOneof("value") == "bytes_value":
            b = s.bytes_value
            i = 0
            while i < len(b):  # top-level fields only; stop at anything unexpected
                key, i = _varint(b, i)
                if key is None:
                    return None
                if key >> 3 == 1 and key & 7 == 2:
                    n, i = _varint(b, i)
                    if n is None or i + n > len(b):
                        return None
                    return b[i:i + n].decode("utf-8", "replace") or None
                if key & 7 == 0:
                    _, i = _varint(b, i)
                elif key & 7 == 2:
                    n, i = _varint(b, i)
                    if n is None:
                        return None
                    i += n
                else:
                    return None
                if i is None:
                    return None
    return None


def _varint(b: bytes, i: int) -> tuple[int | None, int | None]:
    v = shift = 0
    while i < len(b) and shift < 64:
        c = b[i]
        i += 1
        v |= (c & 0x7F) << shift
        if not c & 0x80:
            return v, i
        shift += 7
    return None, None


def plane_ranks(planes, hostnames=()) -> Ranks:
    """The :class:`Ranks` of an XSpace's ``planes`` (parsed or mapped XPlanes) and its
    ``hostnames`` (module doc). Reads names, ids and the TPU ``core_details`` stat only; linear
    in the planes."""
    split = [split_name(p.name) for p in planes]
    names = [s[1] for s in split]
    recognised = [n.startswith("/device:") or n in HOST_PLANES for n in names]
    # coarse key: the prefix label, else the (host group, rank number) of the renumbering
    coarse: list = [s[0] for s in split]
    how = "planes named '<rank>: <plane>'" if any(c is not None for c in coarse) else ""
    groups = 1
    numbered = [i for i, s in enumerate(split) if s[0] is None and s[2] is not None]
    if numbered:
        group, prev, keys = 0, None, {}
        for i in numbered:
            k = split[i][2]
            if prev is not None and k < prev:
                group += 1
            prev = k
            keys[i] = (group, k)
        nxt = None
        for i in range(len(planes) - 1, -1, -1):  # a device plane: the next numbered plane's rank
            if i in keys:
                nxt = keys[i]
            elif coarse[i] is None and recognised[i]:
                coarse[i] = nxt
        last = None
        for i in range(len(planes)):  # after the last numbered plane: the last one's rank
            if i in keys:
                last = keys[i]
                coarse[i] = last
            elif coarse[i] is None and recognised[i]:
                coarse[i] = last
        groups = group + 1
        how = (how + "; " if how else "") + ("rank numbers on the host planes (/host:CPU <k>), each device plane "
                                             "read with the rank of the host planes written after it")
    # within each coarse key, a name seen again starts the next rank (a concatenation)
    seen: dict = {}  # coarse -> (segment index, names seen in it)
    seg = [0] * len(planes)
    split_by_repeat = False
    for i, nm in enumerate(names):
        if not recognised[i]:
            continue
        j, names_in = seen.get(coarse[i], (0, set()))
        if nm in names_in:
            j, names_in = j + 1, set()
            split_by_repeat = True
        names_in.add(nm)
        seen[coarse[i]] = (j, names_in)
        seg[i] = j
    if split_by_repeat:
        how = (how + "; " if how else "") + "plane names repeated (a concatenation): the k-th plane of a name is rank k's"
    keys_in_order: dict = {}
    for i in range(len(planes)):
        if recognised[i]:
            keys_in_order.setdefault((coarse[i], seg[i]), len(keys_in_order))
    if len(keys_in_order) < 2:
        return Ranks(names=names, rank=[0] * len(planes), labels=[""])
    labels = []
    for c, j in keys_in_order:
        if isinstance(c, str):
            base = c
        elif isinstance(c, tuple):
            base = f"rank{c[1]}" if groups == 1 else f"rank{c[0]}.{c[1]}"
        else:
            base = f"rank{j}"
            j = 0
        labels.append(base if j == 0 else f"{base}#{j}")
    rank = [keys_in_order.get((coarse[i], seg[i]), 0) for i in range(len(planes))]
    if not any(isinstance(c, str) for c, _ in keys_in_order):
        labels = _host_labels(planes, rank, names, labels, list(hostnames))
    ids_collide = False
    if split_by_repeat:
        by_name: dict = {}
        for i, nm in enumerate(names):
            if recognised[i]:
                by_name.setdefault((coarse[i], nm), set()).add(getattr(planes[i], "id", 0))
        counts: dict = {}
        for i, nm in enumerate(names):
            if recognised[i]:
                counts[(coarse[i], nm)] = counts.get((coarse[i], nm), 0) + 1
        ids_collide = any(counts[k] > 1 and len(v) == 1 for k, v in by_name.items())
    return Ranks(names=names, rank=rank, labels=labels, how=how, ids_collide=ids_collide)


def _host_labels(planes, rank: list, names: list, labels: list, hostnames: list) -> list:
    """``labels`` replaced by host names when each rank has one of its own: the
    ``core_details`` hostname its TPU planes agree on, else the XSpace's hostnames when there
    is one per rank, all distinct."""
    per: dict = {}
    for i, p in enumerate(planes):
        if names[i].startswith("/device:TPU:"):
            per.setdefault(rank[i], set()).add(_core_hostname(p))
    hosts = [next(iter(per[r])) if len(per.get(r, ())) == 1 else None for r in range(len(labels))]
    if all(hosts) and len(set(hosts)) == len(labels):
        return [str(h) for h in hosts]
    if len(hostnames) == len(labels) and len(set(hostnames)) == len(labels) and all(hostnames):
        return [str(h) for h in hostnames]
    return labels
