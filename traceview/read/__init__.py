"""The read layer: finding trace files and turning their bytes into decoded records.

Discovery (which run, hosts and files, and why), the XSpace wire layer and protobuf schemas
(``read.xplane``), trace.json documents, gzip, diagnoses of unreadable files, the file
caches kept outside profile folders, reading many files at once, and decoding on a thread
while the caller starts up. Nothing here knows the op table: :mod:`traceview.model` builds
it from what this layer decodes.
"""
