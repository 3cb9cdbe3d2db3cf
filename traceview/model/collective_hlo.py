"""Collective and host-transfer attributes read off one HLO instruction's text.

Grammar followed: XLA's HLO text printer (``replica_groups={{0,1},{2,3}}``, the iota form
``replica_groups=[G,S]<=[d0,d1,...]T(p0,p1,...)`` printed by ``IotaReplicaGroupList::ToString``
for the ``IotaReplicaGroupListProto`` of xla_data.proto: an iota over prod(d) device ids,
reshaped to ``d``, transposed by ``p``, read as G groups of S; ``source_target_pairs={{0,1},...}``,
``channel_id=N``, ``use_global_device_ids=true``, ``is_host_transfer=true``) and the layout
memory space ``S(n)``, where n = 5 is XLA's host memory space (``Layout::kHostMemorySpace``).

Nothing here raises on odd text: an attribute that does not parse is None.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from traceview.model.shapes import parse_instruction

#: XLA's host memory space (``Layout::kHostMemorySpace``), written ``S(5)`` in a layout
HOST_MEMORY_SPACE = 5

#: collective opcodes (their async ``-start``/``-done`` halves map onto these)
COLLECTIVE_KINDS = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "ragged-all-to-all",
                    "collective-permute", "collective-broadcast", "send", "recv")

#: host-offload custom-call targets (XLA's host offloader; JAX ``memory_kind="pinned_host"``)
HOST_OFFLOAD_TARGETS = ("MoveToHost", "MoveToDevice", "annotate_device_placement")

#: at most this many device ids are expanded from one iota replica-group list
MAX_IOTA_DEVICES = 1 << 17

_KIND = re.compile(r"^(" + "|".join(re.escape(k) for k in COLLECTIVE_KINDS) + r")(-start|-done|-update)?$")
_IOTA = re.compile(r"\[(\d+),(\d+)\]<=\[([\d,]+)\](?:T\(([\d,]+)\))?")
_CHANNEL = re.compile(r"(?:^|[\s,])channel_id=(\d+)")
_MEMSPACE = re.compile(r"S\((\d+)\)")


def collective_kind(opcode: str, op_name: str = "") -> tuple[str, str] | None:
    """(kind, phase) of a collective opcode, e.g. ``("all-gather", "start")``; phase is
    "sync", "start", "done" or "update". Falls back on ``op_name`` without its ``.N``
    suffix when the opcode is unknown; None for any other op."""
    for text in (opcode or "", re.sub(r"\.\d+$", "", op_name or "")):
        m = _KIND.match(text)
        if m:
            return m.group(1), (m.group(2) or "-sync")[1:]
    return None


def _braced(text: str, key: str) -> str | None:
    """The ``{...}`` value (outer braces included) of ``key=`` in ``text``, or None."""
    at = re.search(r"(?:^|[\s,])" + re.escape(key) + r"=\{", text)
    if not at:
        return None
    i, depth = at.end() - 1, 0
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return text[i:j + 1]
    return None


def _groups_of_braces(body: str) -> list[list[int]] | None:
    """``{{0,1},{2,3}}`` -> [[0, 1], [2, 3]]; ``{}`` -> []; None when it does not parse."""
    inner = body.strip()
    if not (inner.startswith("{") and inner.endswith("}")):
        return None
    inner = inner[1:-1].strip()
    if not inner:
        return []
    groups = []
    for m in re.finditer(r"\{([^{}]*)\}", inner):
        ids = [s.strip() for s in m.group(1).split(",") if s.strip()]
        if not all(s.isdigit() for s in ids):
            return None
        groups.append([int(s) for s in ids])
    if re.sub(r"\{[^{}]*\}", "", inner).replace(",", "").strip():
        return None
    return groups


def iota_groups(num_groups: int, group_size: int, dims: list[int], perm: list[int] | None) -> list[list[int]] | None:
    """The groups of an iota replica-group list: ``iota(prod(dims))`` reshaped to ``dims``,
    transposed by ``perm`` (identity when None), flattened and cut into ``num_groups`` groups
    of ``group_size``. None when the figures are inconsistent or exceed :data:`MAX_IOTA_DEVICES`."""
    n = 1
    for d in dims:
        n *= d
    if not dims or n <= 0 or n > MAX_IOTA_DEVICES or num_groups * group_size != n:
        return None
    perm = list(range(len(dims))) if perm is None else perm
    if sorted(perm) != list(range(len(dims))):
        return None
    strides = [1] * len(dims)
    for k in range(len(dims) - 2, -1, -1):
        strides[k] = strides[k + 1] * dims[k + 1]
    tdims = [dims[p] for p in perm]
    tstrides = [strides[p] for p in perm]
    flat: list[int] = []
    idx = [0] * len(tdims)
    for _ in range(n):
        flat.append(sum(i * s for i, s in zip(idx, tstrides)))
        for k in range(len(tdims) - 1, -1, -1):
            idx[k] += 1
            if idx[k] < tdims[k]:
                break
            idx[k] = 0
    return [flat[g * group_size:(g + 1) * group_size] for g in range(num_groups)]


def parse_replica_groups(text: str) -> list[list[int]] | None:
    """The ``replica_groups`` of an HLO instruction's text, explicit or iota form; [] for
    ``replica_groups={}`` (every replica in one group); None when absent or unparseable."""
    if not text:
        return None
    at = re.search(r"(?:^|[\s,])replica_groups=", text)
    if not at:
        return None
    rest = text[at.end():]
    if rest.startswith("{"):
        body = _braced(text, "replica_groups")
        return None if body is None else _groups_of_braces(body)
    m = _IOTA.match(rest)
    if not m:
        return None
    dims = [int(x) for x in m.group(3).split(",") if x]
    perm = [int(x) for x in m.group(4).split(",") if x] if m.group(4) else None
    return iota_groups(int(m.group(1)), int(m.group(2)), dims, perm)


def parse_source_target_pairs(text: str) -> list[tuple[int, int]] | None:
    """``source_target_pairs={{0,1},{1,2}}`` -> [(0, 1), (1, 2)]; None when absent or bad."""
    body = _braced(text or "", "source_target_pairs")
    groups = None if body is None else _groups_of_braces(body)
    if groups is None or any(len(g) != 2 for g in groups):
        return None
    return [(g[0], g[1]) for g in groups]


@dataclass(frozen=True)
class CollectiveAttrs:
    """A collective's attributes: ``kind`` (opcode without ``-start``/``-done``), ``phase``
    ("sync", "start", "done", "update"), ``groups`` (replica groups, [] = all replicas in one,
    None = not stated), ``pairs`` (source-target pairs of a permute), ``channel_id``,
    ``global_ids`` (``use_global_device_ids``), ``host_transfer`` (send/recv to the host)."""

    kind: str
    phase: str
    groups: list | None
    pairs: list | None
    channel_id: int | None
    global_ids: bool
    host_transfer: bool

    @property
    def group_size(self) -> int | None:
        """Participants per group (the largest group), 2 for a permute or send/recv pair;
        None when the HLO does not say (``replica_groups={}``: every replica, count unknown)."""
        if self.kind in ("collective-permute", "send", "recv"):
            return 2
        if self.groups:
            return max(len(g) for g in self.groups)
        return None

    def groups_text(self) -> str:
        """Canonical text of the groups or pairs: ``{{0,4},{1,5}}``, ``{}`` or ""."""
        if self.pairs is not None:
            return "{" + ",".join(f"{{{a},{b}}}" for a, b in self.pairs) + "}"
        if self.groups is None:
            return ""
        return "{" + ",".join("{" + ",".join(map(str, g)) + "}" for g in self.groups) + "}"


def collective_attrs(opcode: str, hlo_text: str, op_name: str = "") -> CollectiveAttrs | None:
    """The :class:`CollectiveAttrs` of one op (None when it is not a collective)."""
    kp = collective_kind(opcode, op_name)
    if kp is None:
        return None
    text = hlo_text or ""
    m = _CHANNEL.search(text)
    return CollectiveAttrs(
        kind=kp[0], phase=kp[1], groups=parse_replica_groups(text), pairs=parse_source_target_pairs(text),
        channel_id=int(m.group(1)) if m else None,
        global_ids="use_global_device_ids=true" in text, host_transfer="is_host_transfer=true" in text)


def memory_spaces(hlo_text: str) -> tuple[list[int], list[int]]:
    """Memory spaces of (result leaves, operand leaves) of an HLO instruction's text, from the
    ``S(n)`` of each array's layout (0, the default space, when none). Empty lists when the text
    does not parse."""
    ins = parse_instruction(hlo_text or "")
    if ins is None:
        return [], []
    m = re.match(r"\s*(?:ROOT\s+)?%?[^\s=]+\s*=\s*", hlo_text)
    body = hlo_text[m.end():] if m else hlo_text
    op_at = body.find(f" {ins.opcode}(")
    if op_at < 0:
        return [], []
    result_text = body[:op_at]
    close = _close_paren(body, op_at + len(ins.opcode) + 1)
    operand_text = body[op_at + len(ins.opcode) + 2:close]
    return _spaces(result_text), _spaces(operand_text)


def _close_paren(text: str, i: int) -> int:
    depth = 0
    for j in range(i, len(text)):
        if text[j] == "(":
            depth += 1
        elif text[j] == ")":
            depth -= 1
            if depth == 0:
                return j
    return len(text)


def _spaces(text: str) -> list[int]:
    """Memory space of each array ``dtype[dims]{layout}`` in ``text``, in order."""
    out = []
    for m in re.finditer(r"[a-z][a-z0-9]*\[[^\]]*\](\{[^}]*\})?", text):
        lay = m.group(1) or ""
        s = _MEMSPACE.findall(lay)
        out.append(int(s[-1]) if s else 0)
    return out


@dataclass(frozen=True)
class HostTransfer:
    """How an op moves data between device and host memory: ``direction`` ("h2d" or "d2h"),
    ``mechanism`` ("async copy" for ``copy-start``/``copy-done`` across ``S(5)``, "custom call"
    for the host offloader's targets, "send/recv" for ``is_host_transfer``), ``bytes`` moved per
    execution (the array crossing the link; None when unknown)."""

    direction: str
    mechanism: str
    bytes: int | None


def host_transfer(opcode: str, hlo_text: str, custom_call_target: str = "") -> HostTransfer | None:
    """The :class:`HostTransfer` of a ``copy-start`` whose source or destination lies in host
    memory (``S(5)``), of a host-offload custom call, or of a host send/recv; None otherwise.
    Only the ``-start`` half of an async copy is described (its ``-done`` completes it)."""
    text = hlo_text or ""
    ins = parse_instruction(text)
    if opcode == "copy-start" and ins is not None and ins.result is not None and ins.result.is_tuple:
        res, ops = memory_spaces(text)
        dest, src = (res[0] if res else 0), (ops[0] if ops else 0)
        size = ins.result.members[0].bytes if ins.result.members else None
        if src == HOST_MEMORY_SPACE and dest != HOST_MEMORY_SPACE:
            return HostTransfer("h2d", "async copy", size)
        if dest == HOST_MEMORY_SPACE and src != HOST_MEMORY_SPACE:
            return HostTransfer("d2h", "async copy", size)
        return None
    target = custom_call_target or (re.search(r'custom_call_target="([^"]*)"', text) or [None, ""])[1]
    if opcode == "custom-call" and target in HOST_OFFLOAD_TARGETS[:2]:
        size = ins.operands[0].bytes if ins is not None and ins.operands and ins.operands[0] is not None else None
        return HostTransfer("d2h" if target == "MoveToHost" else "h2d", "custom call", size)
    if opcode in ("send", "recv") and "is_host_transfer=true" in text:
        size = None
        if ins is not None:
            arr = ins.operands[0] if opcode == "send" and ins.operands else (
                ins.result.members[0] if ins.result is not None and ins.result.is_tuple and ins.result.members else None)
            size = arr.bytes if arr is not None else None
        return HostTransfer("d2h" if opcode == "send" else "h2d", "send/recv", size)
    return None


def proto_attributes(ins) -> list[str]:
    """The collective attributes of an ``HloInstructionProto`` as XLA's HLO printer writes them
    (``channel_id=``, ``replica_groups=`` explicit or iota, ``use_global_device_ids=true``,
    ``source_target_pairs=``, ``is_host_transfer=true``), for the HLO text built from a proto
    (GPU and CPU traces carry protos, not text). Empty for other ops."""
    if collective_kind(ins.opcode, ins.name) is None:
        return []
    out = []
    if ins.channel_id > 0:
        out.append(f"channel_id={ins.channel_id}")
    cdl = ins.collective_device_list if ins.HasField("collective_device_list") else None
    iota = cdl.iota_replica_group_list if cdl is not None and cdl.HasField("iota_replica_group_list") else None
    if iota is None and ins.HasField("iota_collective_device_list"):
        iota = ins.iota_collective_device_list
    groups = list(cdl.replica_groups) if cdl is not None and len(cdl.replica_groups) else list(ins.replica_groups)
    mesh = mesh_axes_groups(ins.mesh_axes_replica_group_list) if ins.HasField("mesh_axes_replica_group_list") else None
    if mesh is not None:
        out.append("replica_groups={" + ",".join("{" + ",".join(map(str, g)) + "}" for g in mesh) + "}")
    elif ins.HasField("mesh_axes_replica_group_list"):
        pass  # a mesh-axes list this reader cannot expand: no groups rather than wrong ones
    elif iota is not None and iota.num_replica_groups > 0:
        text = (f"[{iota.num_replica_groups},{iota.num_devices_per_group}]<="
                f"[{','.join(str(d) for d in iota.iota_reshape_dims)}]")
        perm = list(iota.iota_transpose_perm)
        if perm and perm != list(range(len(perm))):
            text += f"T({','.join(str(p) for p in perm)})"
        out.append(f"replica_groups={text}")
    elif not ins.opcode.startswith(("collective-permute", "send", "recv")):
        out.append("replica_groups={" + ",".join("{" + ",".join(str(i) for i in g.replica_ids) + "}"
                                                  for g in groups) + "}")
    if ins.use_global_device_ids:
        out.append("use_global_device_ids=true")
    if len(ins.source_target_pairs):
        out.append("source_target_pairs={" + ",".join(f"{{{p.source},{p.target}}}" for p in ins.source_target_pairs) + "}")
    if ins.is_host_transfer:
        out.append("is_host_transfer=true")
    return out


def mesh_axes_groups(proto) -> list[list[int]] | None:
    """The replica groups of a ``MeshAxesReplicaGroupListProto`` (Shardy-partitioned modules):
    the mesh's device ids (``device_ids``, else iota) reshaped to the axis sizes, the grouped
    axes moved last (in the order listed), flattened and cut into groups of the product of the
    grouped sizes (XLA's ``MeshAxesReplicaGroupList::flattened_replica_groups``). A grouped
    axis with ``sub_axis_info`` (pre_size, size) splits its dimension into [pre_size, size,
    rest] and groups the middle; two sub-axes of one dimension are not expanded (None)."""
    sizes = [int(a.size) for a in proto.mesh.axes]
    n = 1
    for d in sizes:
        n *= d
    if not sizes or n <= 0 or n > MAX_IOTA_DEVICES or not len(proto.axes):
        return None
    ids = list(proto.mesh.device_ids) or list(range(n))
    if len(ids) != n:
        return None
    dims: list[int] = []
    grouped: list[int] = []
    by_dim: dict[int, list] = {}
    for a in proto.axes:
        by_dim.setdefault(int(a.mesh_axis_index), []).append(a)
    if any(i < 0 or i >= len(sizes) for i in by_dim) or any(len(v) > 1 for v in by_dim.values()):
        return None
    slot: dict[int, int] = {}
    for i, size in enumerate(sizes):
        ax = by_dim.get(i, [None])[0]
        if ax is None:
            dims.append(size)
        elif ax.HasField("sub_axis_info"):
            pre, sub = int(ax.sub_axis_info.pre_size), int(ax.sub_axis_info.size)
            if pre <= 0 or sub <= 0 or size % (pre * sub):
                return None
            dims.extend([pre, sub, size // (pre * sub)])
            slot[i] = len(dims) - 2
        else:
            dims.append(size)
            slot[i] = len(dims) - 1
    grouped = [slot[int(a.mesh_axis_index)] for a in proto.axes]
    perm = [d for d in range(len(dims)) if d not in grouped] + grouped
    per = 1
    for g in grouped:
        per *= dims[g]
    flat = iota_groups(1, n, dims, perm)
    if flat is None:
        return None
    order = [ids[i] for i in flat[0]]
    return [order[k:k + per] for k in range(0, n, per)]
