"""The XSpace and HLO schemas of traceview.read.xplane.protos: encoded by hand as
FileDescriptorProto bytes (no descriptor_pb2 import), they are what descriptor_pb2 makes of them."""

import subprocess
import sys

import pytest
from google.protobuf import descriptor_pb2
from google.protobuf.internal import api_implementation

from traceview.read.xplane import protos


def _files():
    return [protos._POOL.FindFileByName(n) for n in ("traceview/xplane.proto", "traceview/hlo.proto")]


def test_encoded_files_are_canonical_descriptors():
    for fd in _files():
        fp = descriptor_pb2.FileDescriptorProto()
        fd.CopyToProto(fp)
        assert fp.syntax == "proto3"
        assert descriptor_pb2.FileDescriptorProto.FromString(fp.SerializeToString()) == fp
        assert fd.serialized_pb == fp.SerializeToString()  # the pool kept the bytes as encoded here


def test_fields_types_maps_and_oneofs():
    plane = protos.XPlane.DESCRIPTOR
    em = plane.fields_by_name["event_metadata"]
    assert em.message_type.GetOptions().map_entry
    assert em.message_type.fields_by_name["value"].message_type.full_name == "traceview.xplane.XEventMetadata"
    stat = protos.XStat.DESCRIPTOR
    assert [f.name for f in stat.oneofs_by_name["value"].fields] == [
        "double_value", "uint64_value", "int64_value", "str_value", "bytes_value", "ref_value"]
    assert stat.fields_by_name["metadata_id"].containing_oneof is None
    ev = protos.XEvent.DESCRIPTOR
    assert [f.name for f in ev.oneofs_by_name["data"].fields] == ["offset_ps", "num_occurrences"]
    line = protos.XLine.DESCRIPTOR.fields_by_name
    assert (line["display_id"].number, line["events"].number) == (10, 4)
    shape = protos.ShapeProto.DESCRIPTOR.fields_by_name
    assert shape["is_dynamic_dimension"].type == shape["is_dynamic_dimension"].TYPE_BOOL
    assert shape["tuple_shapes"].message_type is protos.ShapeProto.DESCRIPTOR
    sfi = protos.HloModuleProto.DESCRIPTOR.fields_by_name["stack_frame_index"].message_type
    assert sorted(t.name for t in sfi.nested_types) == ["FileLocation", "StackFrame"]


def test_messages_round_trip():
    space = protos.XSpace()
    plane = space.planes.add(id=3, name="/device:TPU:0")
    plane.event_metadata[7].name = "fusion.1"
    plane.stat_metadata[2].name = "hlo_op"
    line = plane.lines.add(id=1, display_id=10, name="XLA Ops", timestamp_ns=5)
    ev = line.events.add(metadata_id=7, offset_ps=11, duration_ps=13)
    ev.stats.add(metadata_id=2, str_value="fusion.1")
    again = protos.XSpace.FromString(space.SerializeToString())
    assert again == space
    assert again.planes[0].event_metadata[7].name == "fusion.1"
    assert again.planes[0].lines[0].events[0].WhichOneof("data") == "offset_ps"
    lazy = protos.XSpaceLazy.FromString(space.SerializeToString())
    assert protos.XLineHeader.FromString(lazy.planes[0].lines[0]).display_id == 10


def test_import_needs_no_descriptor_pb2():
    if api_implementation.Type() == "python":  # its pool parses a serialized file with descriptor_pb2
        pytest.skip("pure-Python protobuf")
    code = "import sys, traceview.read.xplane.protos; print('google.protobuf.descriptor_pb2' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
