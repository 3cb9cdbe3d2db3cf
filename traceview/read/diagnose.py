"""Why a trace file could not be read, or what in it is suspect: one-line diagnoses that the
readers put into their error messages and notes.

* :func:`xspace_fault` — when protobuf refuses an ``.xplane.pb``: was the file re-encoded as
  text (every invalid UTF-8 byte replaced by ``EF BF BD``, as the shared
  ``corrupt_utf8_mangled.xplane.pb``), or does it end inside a plane (truncated: an export
  that was killed or is still running)? Walks the top-level wire format only; never raises.
* :func:`protobuf_fault` — protobuf's own error, worded for the reader: which message kind
  (an XSpace, an HLO module) and what was wrong, without the library's internal type names.
* :func:`still_writing_hint` — a file modified in the last :data:`RECENT_WRITE_S` seconds
  may still be being written by the profiler: say so in the error.
"""

from __future__ import annotations

import os
import time

#: UTF-8 encoding of U+FFFD, what a text re-encoding writes for every invalid byte.
REPLACEMENT = b"\xef\xbf\xbd"
#: A re-encoding replaces every byte that is not valid UTF-8, and a binary protobuf is full of
#: them (varint continuation bytes, float data), so a re-encoded file holds the sequence at a
#: density of about one per 5 bytes from its first kilobytes on; a valid trace holds it only
#: inside strings, rarely (a handful in a 100 MB file). The file is called re-encoded when its
#: first :data:`DENSITY_WINDOW` bytes hold at least :data:`MIN_REPLACEMENTS` sequences and
#: one per :data:`DENSITY_BYTES` bytes or more.
DENSITY_WINDOW = 1 << 20
DENSITY_BYTES = 1000
MIN_REPLACEMENTS = 3
#: The zero-byte run around a fault is measured this far at most (a zero-filled file of
#: gigabytes is named without reading it all).
ZERO_SCAN_LIMIT = 64 << 20
#: A file modified less than this many seconds ago may still be being written.
RECENT_WRITE_S = 120.0

_XSPACE_FIELDS = {1: "plane", 2: "error string", 3: "warning string", 4: "hostname"}


def _zero_run(data, at: int, step: int = 1 << 16, limit: int = ZERO_SCAN_LIMIT) -> tuple[int, int]:
    """[start, end) of the run of zero bytes in ``data`` that contains index ``at``, found
    64 KiB at a time and at most ``limit`` bytes to each side (an error path, but files run to
    gigabytes): ``end`` is then ``at + limit``, short of the run's real end."""
    start = at
    while start > 0 and at - start < limit:
        lo = max(0, start - step)
        chunk = bytes(data[lo:start])
        kept = len(chunk.rstrip(b"\0"))
        if kept:
            start = lo + kept
            break
        start = lo
    end, n = at, len(data)
    while end < n and end - at < limit:
        chunk = bytes(data[end:end + step])
        kept = len(chunk) - len(chunk.lstrip(b"\0"))
        end += kept
        if kept < len(chunk):
            break
    return start, end


def _varint(data, i: int) -> tuple[int | None, int]:
    v, shift, n = 0, 0, len(data)
    while i < n and shift < 70:
        c = data[i]
        i += 1
        v |= (c & 0x7F) << shift
        if c < 0x80:
            return v, i
        shift += 7
    return None, i


def reencoded(data) -> str | None:
    """The diagnosis "re-encoded as text" when the start of ``data`` (bytes, or a mapped file)
    holds U+FFFD sequences at the density a re-encoding leaves (:data:`DENSITY_BYTES`), else None."""
    head = bytes(data[:DENSITY_WINDOW])
    bad = head.count(REPLACEMENT)
    if bad >= MIN_REPLACEMENTS and bad * DENSITY_BYTES >= len(head):
        return (f"its first {len(head):,} bytes hold {bad:,} U+FFFD replacement sequences (bytes EF BF BD), "
                f"one per {len(head) // bad} bytes: the binary file was re-encoded as text (a text-mode copy, "
                "an editor save or a string round-trip) and cannot be repaired; copy the original in binary mode")
    return None


def xspace_fault(data) -> str | None:
    """A one-line reason why ``data`` (a serialized XSpace protobuf refuses; bytes or a mapped
    file) is unreadable, or None when the top level looks well formed (the fault is deeper in).
    Reads the first :data:`DENSITY_WINDOW` bytes and the top-level field keys only."""
    return reencoded(data) or walk_fault(data)


def walk_fault(data) -> str | None:
    """The top-level structural fault of serialized XSpace ``data`` (a truncation, a zero run,
    an invalid key), or None when every top-level field is whole."""
    n = len(data)
    i, k = 0, 0
    while i < n:
        at = i
        key, i = _varint(data, i)
        if key is None:
            return f"the file ends inside a field key at byte {at} of {n}: truncated"
        field, wt = key >> 3, key & 7
        if field == 0:  # protobuf has no field 0 (a zero-filled file stops here, not after 1e9 steps)
            if data[at:at + 64].count(0) < 64:
                return f"invalid protobuf field number 0 at byte {at} (zero bytes?): not an XSpace, or corrupt"
            start, end = _zero_run(data, at)  # the walk may land inside the run, not at its start
            where = (f"from byte {start} on" if end >= n else
                     f"from byte {start} to at least byte {end}" if end - at >= ZERO_SCAN_LIMIT else
                     f"from byte {start} to byte {end}")
            return (f"the file holds zero bytes {where} (a preallocated or unwritten file?): "
                    "not an XSpace, or corrupt")
        what = _XSPACE_FIELDS.get(field, f"field {field}")
        if wt == 2:
            length, i = _varint(data, i)
            if length is None:
                return f"the file ends inside the length of {what} #{k} at byte {at} of {n}: truncated"
            if length > n - i:
                return (f"the file ends inside {what} #{k}: it starts at byte {at} and declares {length} bytes, "
                        f"but only {n - i} remain: the file is truncated (a killed or unfinished export?) "
                        "or corrupt")
            i += length
        elif wt == 0:
            v, i = _varint(data, i)
            if v is None:
                return f"the file ends inside {what} at byte {at} of {n}: truncated"
        elif wt in (1, 5):
            i += 8 if wt == 1 else 4
            if i > n:
                return f"the file ends inside {what} at byte {at} of {n}: truncated"
        else:
            return f"invalid protobuf field key {key} at byte {at}: not an XSpace, or corrupt"
        k += 1
    return None


#: Faults that mean "the file ends too early" (what an unfinished write looks like).
INCOMPLETE = ("the file ends inside", "truncated gzip stream", "not valid JSON (unexpected end of data")


#: protobuf's parse errors (python and upb runtimes) -> what they mean for a trace
_PROTOBUF_FAULTS = (
    ("bad utf-8", "a string field (a name, a stat or HLO text) is not valid UTF-8: the bytes were altered, or "
                  "written by a tool that does not check its strings"),
    ("truncated", "the message ends inside a field (truncated)"),
    ("unexpected end-group", "a field's wire type is invalid (the bytes are not this message)"),
    ("invalid wire type", "a field's wire type is invalid (the bytes are not this message)"),
)


def protobuf_fault(exc: BaseException) -> str:
    """One phrase for a protobuf parse error ``exc`` (``DecodeError``, ``RecursionError``,
    ``ValueError``): a known fault in words (:data:`_PROTOBUF_FAULTS`), else the error's
    text without protobuf's ``Error parsing message with type '...'`` prefix, which names
    traceview's internal message types."""
    if isinstance(exc, RecursionError):
        return "messages nested too deeply to be a real trace"
    text = str(exc)
    low = text.lower()
    for key, phrase in _PROTOBUF_FAULTS:
        if key in low:
            return phrase
    head, sep, rest = text.partition("': ")
    if sep and head.startswith("Error parsing message"):
        text = rest
    elif head.startswith("Error parsing message") and sep == "":
        text = "the bytes do not parse as this message"
    return text.strip() or type(exc).__name__


def still_writing_hint(path: str | os.PathLike, fault: str | None = None, now: float | None = None) -> str | None:
    """``"the file was modified 3 s ago: ..."`` when ``path`` changed in the last
    :data:`RECENT_WRITE_S` seconds (the profiler may still be writing it), else None. With
    ``fault``, only when it says the file ends too early (:data:`INCOMPLETE`)."""
    if fault is not None and not any(s in fault for s in INCOMPLETE):
        return None
    try:
        mtime = os.stat(path).st_mtime
    except OSError:
        return None
    age = (time.time() if now is None else now) - mtime
    if -5.0 <= age < RECENT_WRITE_S:
        return (f"the file was modified {max(age, 0.0):.0f} s ago: the profiler may still be writing it; "
                "wait for the export to finish and retry")
    return None
