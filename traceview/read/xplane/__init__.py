"""XSpace (``.xplane.pb``) at the wire level: protobuf schemas, in-place mapping of a file,
XLine decoding into flat arrays, and the optional C decoder."""
