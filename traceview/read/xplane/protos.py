"""Protobuf schemas for XSpace and the HLO subset traceview reads, built at import time.

The messages are declared field by field, encoded as descriptor.proto's
``FileDescriptorProto`` (a few lines of wire format here) and added to a private
``DescriptorPool``, so traceview needs neither TensorFlow, XProf nor ``protoc`` and never
clashes with another copy of ``tensorflow.profiler.XSpace`` loaded in the same process.

Field numbers are public facts taken from:

* OpenXLA's profiler schema ``xplane.proto``: XSpace, XPlane, XLine, XEvent,
  XStat, XEventMetadata, XStatMetadata.
* OpenXLA's ``hlo.proto`` and ``xla_data.proto``: HloProto,
  HloModuleProto, HloComputationProto, HloInstructionProto, ShapeProto, LayoutProto,
  OpMetadata, StackFrameIndexProto, HloScheduleProto, DotDimensionNumbers, ConvolutionDimensionNumbers, Window.

Only the fields traceview uses are declared; unknown fields are skipped by the parser.
"""

from __future__ import annotations

from google.protobuf import descriptor_pool, message_factory

# descriptor.proto's numbers (FieldDescriptorProto.Type and .Label): the files are handed to
# the pool serialized (AddSerializedFile), not built with descriptor_pb2, whose import costs
# more than the rest of this module does
_T = {"double": 1, "float": 2, "int64": 3, "uint64": 4, "int32": 5, "bool": 8, "string": 9, "bytes": 12}
_TYPE_MESSAGE = 11
_LABEL_OPTIONAL, _LABEL_REPEATED = 1, 3


def _varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _num(field: int, n: int) -> bytes:
    return _varint(field << 3) + _varint(n)


def _len(field: int, payload: bytes | str) -> bytes:
    if isinstance(payload, str):
        payload = payload.encode()
    return _varint(field << 3 | 2) + _varint(len(payload)) + payload


class _Desc:
    """A message type as descriptor.proto's DescriptorProto: its name, fields (name, number,
    label, type, type name or "", oneof index or None), nested types, oneofs, map entry flag."""

    def __init__(self, name: str):
        self.name, self.field, self.nested, self.oneofs, self.map_entry = name, [], [], [], False

    def encode(self) -> bytes:
        out = _len(1, self.name)  # DescriptorProto: name 1, field 2, nested_type 3, options 7, oneof_decl 8
        for name, number, label, ftype, type_name, oneof in self.field:
            f = _len(1, name) + _num(3, number) + _num(4, label) + _num(5, ftype)
            if type_name:
                f += _len(6, type_name)
            if oneof is not None:
                f += _num(9, oneof)
            out += _len(2, f)
        for n in self.nested:
            out += _len(3, n.encode())
        if self.map_entry:
            out += _len(7, _num(7, 1))  # MessageOptions.map_entry
        for o in self.oneofs:
            out += _len(8, _len(1, o))
        return out


class _File:
    """A proto3 file as descriptor.proto's FileDescriptorProto: name, package, message types."""

    def __init__(self, name: str, package: str):
        self.name, self.package, self.messages = name, package, []

    def encode(self) -> bytes:
        # FileDescriptorProto: name 1, package 2, message_type 4, syntax 12
        return (_len(1, self.name) + _len(2, self.package) + b"".join(_len(4, m.encode()) for m in self.messages)
                + _len(12, "proto3"))


def _message(file_proto, name, fields, nested=()):
    msg = _Desc(name)
    file_proto.messages.append(msg)
    _fill(msg, fields, file_proto.package)
    msg.nested.extend(nested)
    return msg


def _fill(msg, fields, package):
    for fname, number, ftype, label in fields:
        lab = _LABEL_REPEATED if label == "repeated" else _LABEL_OPTIONAL
        if ftype in _T:
            msg.field.append([fname, number, lab, _T[ftype], "", None])
        else:
            msg.field.append([fname, number, lab, _TYPE_MESSAGE,
                              ftype if ftype.startswith(".") else f".{package}.{ftype}", None])


def _oneof(msg, name, indices):
    """Put ``msg``'s fields at ``indices`` (positions in its field list) in a new oneof ``name``."""
    for i in indices:
        msg.field[i][5] = len(msg.oneofs)
    msg.oneofs.append(name)


def _map_entry(name, key_type, value_type, package):
    entry = _Desc(name)
    entry.map_entry = True
    _fill(entry, [("key", 1, key_type, ""), ("value", 2, value_type, "")], package)
    return entry


def _build_xplane(pool):
    fp = _File("traceview/xplane.proto", "traceview.xplane")
    pkg = fp.package
    _message(fp, "XSpace", [
        ("planes", 1, "XPlane", "repeated"),
        ("errors", 2, "string", "repeated"),
        ("warnings", 3, "string", "repeated"),
        ("hostnames", 4, "string", "repeated"),
    ])
    plane = _message(fp, "XPlane", [
        ("id", 1, "int64", ""),
        ("name", 2, "string", ""),
        ("lines", 3, "XLine", "repeated"),
        ("event_metadata", 4, ".traceview.xplane.XPlane.EventMetadataEntry", "repeated"),
        ("stat_metadata", 5, ".traceview.xplane.XPlane.StatMetadataEntry", "repeated"),
        ("stats", 6, "XStat", "repeated"),
    ])
    plane.nested.append(_map_entry("EventMetadataEntry", "int64", "XEventMetadata", pkg))
    plane.nested.append(_map_entry("StatMetadataEntry", "int64", "XStatMetadata", pkg))
    _message(fp, "XLine", [
        ("id", 1, "int64", ""),
        ("display_id", 10, "int64", ""),
        ("name", 2, "string", ""),
        ("display_name", 11, "string", ""),
        ("timestamp_ns", 3, "int64", ""),
        ("duration_ps", 9, "int64", ""),
        ("events", 4, "XEvent", "repeated"),
    ])
    ev = _message(fp, "XEvent", [
        ("metadata_id", 1, "int64", ""),
        ("offset_ps", 2, "int64", ""),
        ("num_occurrences", 5, "int64", ""),
        ("duration_ps", 3, "int64", ""),
        ("stats", 4, "XStat", "repeated"),
    ])
    _oneof(ev, "data", (1, 2))
    st = _message(fp, "XStat", [
        ("metadata_id", 1, "int64", ""),
        ("double_value", 2, "double", ""),
        ("uint64_value", 3, "uint64", ""),
        ("int64_value", 4, "int64", ""),
        ("str_value", 5, "string", ""),
        ("bytes_value", 6, "bytes", ""),
        ("ref_value", 7, "uint64", ""),
    ])
    _oneof(st, "value", range(1, 7))
    _message(fp, "XEventMetadata", [
        ("id", 1, "int64", ""),
        ("name", 2, "string", ""),
        ("display_name", 4, "string", ""),
        ("metadata", 3, "bytes", ""),
        ("stats", 5, "XStat", "repeated"),
        ("child_id", 6, "int64", "repeated"),
    ])
    _message(fp, "XStatMetadata", [
        ("id", 1, "int64", ""),
        ("name", 2, "string", ""),
        ("description", 3, "string", ""),
    ])
    # Lazy views of the same wire data: lines kept as raw bytes (decoded on demand, so a
    # 100 MB host line nobody asked for is never materialized), and a line header that
    # skips the events field entirely.
    _message(fp, "XSpaceLazy", [
        ("planes", 1, "XPlaneLazy", "repeated"),
        ("errors", 2, "string", "repeated"),
        ("warnings", 3, "string", "repeated"),
        ("hostnames", 4, "string", "repeated"),
    ])
    lazy = _message(fp, "XPlaneLazy", [
        ("id", 1, "int64", ""),
        ("name", 2, "string", ""),
        ("lines", 3, "bytes", "repeated"),
        ("event_metadata", 4, ".traceview.xplane.XPlaneLazy.EventMetadataEntry", "repeated"),
        ("stat_metadata", 5, ".traceview.xplane.XPlaneLazy.StatMetadataEntry", "repeated"),
        ("stats", 6, "XStat", "repeated"),
    ])
    lazy.nested.append(_map_entry("EventMetadataEntry", "int64", "XEventMetadata", pkg))
    lazy.nested.append(_map_entry("StatMetadataEntry", "int64", "XStatMetadata", pkg))
    # The events of a line as the pure-Python decoder reads them: stats kept as raw bytes
    # (parsed one by one when asked for, as XStatLoose whose str_value is bytes), so what the
    # C decoder does not look at (a malformed or non-UTF-8 stat nobody reads) is tolerated by
    # both decoders alike.
    ev_loose = _message(fp, "XEventLoose", [
        ("metadata_id", 1, "int64", ""),
        ("offset_ps", 2, "int64", ""),
        ("num_occurrences", 5, "int64", ""),
        ("duration_ps", 3, "int64", ""),
        ("stats", 4, "bytes", "repeated"),
    ])
    _oneof(ev_loose, "data", (1, 2))
    st_loose = _message(fp, "XStatLoose", [
        ("metadata_id", 1, "int64", ""),
        ("double_value", 2, "double", ""),
        ("uint64_value", 3, "uint64", ""),
        ("int64_value", 4, "int64", ""),
        ("str_value", 5, "bytes", ""),
        ("bytes_value", 6, "bytes", ""),
        ("ref_value", 7, "uint64", ""),
    ])
    _oneof(st_loose, "value", range(1, 7))
    _message(fp, "XLineEventsLoose", [("events", 4, "XEventLoose", "repeated")])
    _message(fp, "XLineEventsRaw", [("events", 4, "bytes", "repeated")])  # counting only
    _message(fp, "XLineHeader", [
        ("id", 1, "int64", ""),
        ("display_id", 10, "int64", ""),
        ("name", 2, "string", ""),
        ("display_name", 11, "string", ""),
        ("timestamp_ns", 3, "int64", ""),
        ("duration_ps", 9, "int64", ""),
    ])
    pool.AddSerializedFile(fp.encode())


def _build_hlo(pool):
    fp = _File("traceview/hlo.proto", "traceview.hlo")
    _message(fp, "TileProto", [("dimensions", 1, "int64", "repeated")])
    _message(fp, "LayoutProto", [
        ("minor_to_major", 1, "int64", "repeated"),
        ("tiles", 6, "TileProto", "repeated"),
        ("element_size_in_bits", 7, "int64", ""),
        ("memory_space", 8, "int64", ""),
    ])
    _message(fp, "ShapeProto", [
        ("element_type", 2, "int32", ""),
        ("dimensions", 3, "int64", "repeated"),
        ("tuple_shapes", 4, "ShapeProto", "repeated"),
        ("layout", 5, "LayoutProto", ""),
        ("is_dynamic_dimension", 6, "bool", "repeated"),
    ])
    _message(fp, "OpMetadata", [
        ("op_type", 1, "string", ""),
        ("op_name", 2, "string", ""),
        ("source_file", 3, "string", ""),
        ("source_line", 4, "int32", ""),
        ("stack_frame_id", 15, "int32", ""),
    ])
    _message(fp, "DotDimensionNumbers", [
        ("lhs_contracting_dimensions", 1, "int64", "repeated"),
        ("rhs_contracting_dimensions", 2, "int64", "repeated"),
        ("lhs_batch_dimensions", 3, "int64", "repeated"),
        ("rhs_batch_dimensions", 4, "int64", "repeated"),
    ])
    _message(fp, "ConvolutionDimensionNumbers", [
        ("input_batch_dimension", 7, "int64", ""),
        ("input_feature_dimension", 8, "int64", ""),
        ("input_spatial_dimensions", 11, "int64", "repeated"),
        ("kernel_input_feature_dimension", 3, "int64", ""),
        ("kernel_output_feature_dimension", 4, "int64", ""),
        ("kernel_spatial_dimensions", 6, "int64", "repeated"),
        ("output_batch_dimension", 9, "int64", ""),
        ("output_feature_dimension", 10, "int64", ""),
        ("output_spatial_dimensions", 12, "int64", "repeated"),
    ])
    # collective attributes (OpenXLA xla_data.proto / hlo.proto field numbers)
    _message(fp, "ReplicaGroup", [("replica_ids", 1, "int64", "repeated")])
    _message(fp, "SourceTarget", [("source", 1, "int64", ""), ("target", 2, "int64", "")])
    _message(fp, "IotaReplicaGroupListProto", [
        ("num_replica_groups", 1, "int64", ""),
        ("num_devices_per_group", 2, "int64", ""),
        ("iota_reshape_dims", 3, "int64", "repeated"),
        ("iota_transpose_perm", 4, "int32", "repeated"),
    ])
    _message(fp, "CollectiveDeviceListProto", [
        ("replica_groups", 1, "ReplicaGroup", "repeated"),
        ("iota_replica_group_list", 2, "IotaReplicaGroupListProto", ""),
    ])
    _message(fp, "MeshAxisProto", [("name", 1, "string", ""), ("size", 2, "int64", "")])
    _message(fp, "MeshProto", [("axes", 1, "MeshAxisProto", "repeated"), ("device_ids", 2, "int64", "repeated")])
    _message(fp, "SubAxisProto", [("pre_size", 1, "int64", ""), ("size", 2, "int64", "")])
    _message(fp, "AxisRefProto", [("mesh_axis_index", 1, "int64", ""), ("sub_axis_info", 2, "SubAxisProto", "")])
    _message(fp, "MeshAxesReplicaGroupListProto", [
        ("mesh", 1, "MeshProto", ""),
        ("axes", 2, "AxisRefProto", "repeated"),
    ])
    _message(fp, "HloInstructionProto", [
        ("name", 1, "string", ""),
        ("opcode", 2, "string", ""),
        ("shape", 3, "ShapeProto", ""),
        ("metadata", 7, "OpMetadata", ""),
        ("parameter_number", 9, "int64", ""),
        ("fusion_kind", 11, "string", ""),
        ("tuple_index", 13, "int64", ""),
        ("convolution_dimension_numbers", 16, "ConvolutionDimensionNumbers", ""),
        ("feature_group_count", 50, "int64", ""),
        ("batch_group_count", 58, "int64", ""),
        ("custom_call_target", 28, "string", ""),
        ("dot_dimension_numbers", 30, "DotDimensionNumbers", ""),
        ("id", 35, "int64", ""),
        ("operand_ids", 36, "int64", "repeated"),
        ("called_computation_ids", 38, "int64", "repeated"),
        ("backend_config", 43, "bytes", ""),
        ("channel_id", 26, "int64", ""),
        ("is_host_transfer", 47, "bool", ""),
        ("replica_groups", 49, "ReplicaGroup", "repeated"),
        ("source_target_pairs", 52, "SourceTarget", "repeated"),
        ("use_global_device_ids", 71, "bool", ""),
        ("collective_device_list", 87, "CollectiveDeviceListProto", ""),
        ("iota_collective_device_list", 92, "IotaReplicaGroupListProto", ""),
        ("mesh_axes_replica_group_list", 93, "MeshAxesReplicaGroupListProto", ""),
    ])
    _message(fp, "HloComputationProto", [
        ("name", 1, "string", ""),
        ("instructions", 2, "HloInstructionProto", "repeated"),
        ("id", 5, "int64", ""),
        ("root_id", 6, "int64", ""),
        ("is_fusion_computation", 7, "bool", ""),
    ])
    fl = _Desc("FileLocation")
    _fill(fl, [("file_name_id", 1, "int32", ""), ("function_name_id", 2, "int32", ""),
               ("line", 3, "int32", ""), ("column", 4, "int32", "")], fp.package)
    sf = _Desc("StackFrame")
    _fill(sf, [("file_location_id", 1, "int32", ""), ("parent_frame_id", 2, "int32", "")], fp.package)
    _message(fp, "StackFrameIndexProto", [
        ("file_names", 1, "string", "repeated"),
        ("function_names", 2, "string", "repeated"),
        ("file_locations", 3, ".traceview.hlo.StackFrameIndexProto.FileLocation", "repeated"),
        ("stack_frames", 4, ".traceview.hlo.StackFrameIndexProto.StackFrame", "repeated"),
    ], nested=(fl, sf))
    ae = _Desc("AliasEntryProto")
    _fill(ae, [("output_shape_index", 1, "int64", "repeated"), ("parameter_number", 2, "int64", ""),
               ("parameter_shape_index", 3, "int64", "repeated")], fp.package)
    _message(fp, "HloInputOutputAliasProto", [
        ("entries", 1, ".traceview.hlo.HloInputOutputAliasProto.AliasEntryProto", "repeated")], nested=(ae,))
    _message(fp, "InstructionSequence", [("instruction_ids", 1, "int64", "repeated")])
    _message(fp, "HloScheduleProto", [
        ("sequences", 1, ".traceview.hlo.HloScheduleProto.SequencesEntry", "repeated"),
    ], nested=(_map_entry("SequencesEntry", "int64", "InstructionSequence", fp.package),))
    _message(fp, "HloModuleProto", [
        ("input_output_alias", 8, "HloInputOutputAliasProto", ""),
        ("schedule", 7, "HloScheduleProto", ""),
        ("name", 1, "string", ""),
        ("entry_computation_name", 2, "string", ""),
        ("entry_computation_id", 6, "int64", ""),
        ("computations", 3, "HloComputationProto", "repeated"),
        ("id", 5, "int64", ""),
        ("stack_frame_index", 17, "StackFrameIndexProto", ""),
    ])
    _message(fp, "HloProto", [("hlo_module", 1, "HloModuleProto", "")])
    pool.AddSerializedFile(fp.encode())


_POOL = descriptor_pool.DescriptorPool()
_build_xplane(_POOL)
_build_hlo(_POOL)


def _cls(full_name):
    return message_factory.GetMessageClass(_POOL.FindMessageTypeByName(full_name))


XSpace = _cls("traceview.xplane.XSpace")
XPlane = _cls("traceview.xplane.XPlane")
XLine = _cls("traceview.xplane.XLine")
XEvent = _cls("traceview.xplane.XEvent")
XStat = _cls("traceview.xplane.XStat")
XEventMetadata = _cls("traceview.xplane.XEventMetadata")
XStatMetadata = _cls("traceview.xplane.XStatMetadata")
XSpaceLazy = _cls("traceview.xplane.XSpaceLazy")
XLineHeader = _cls("traceview.xplane.XLineHeader")
XLineEventsLoose = _cls("traceview.xplane.XLineEventsLoose")
XStatLoose = _cls("traceview.xplane.XStatLoose")
XLineEventsRaw = _cls("traceview.xplane.XLineEventsRaw")
HloProto = _cls("traceview.hlo.HloProto")
HloModuleProto = _cls("traceview.hlo.HloModuleProto")
ShapeProto = _cls("traceview.hlo.ShapeProto")

__all__ = ["XSpace", "XSpaceLazy", "XLineHeader", "XLineEventsLoose", "XStatLoose", "XLineEventsRaw", "XPlane", "XLine", "XEvent", "XStat", "XEventMetadata", "XStatMetadata",
           "HloProto", "HloModuleProto", "ShapeProto"]
