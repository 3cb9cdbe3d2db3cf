"""gzip -> bytes for the trace JSON reader, with ISA-L where it is installed.

:func:`gunzip` inflates a (possibly multi-member) gzip file into at most ``limit`` bytes.
python-isal's ``isal_zlib`` (the same API as zlib, Intel ISA-L underneath) inflates several
times faster than zlib (``benchmarks/RESULTS.md``). ISA-L is only trusted with the common case: when
it finishes cleanly (every member ends, CRC and length match, nothing but zero padding
after) the bytes are the same as zlib's. Anything else — a corrupt, truncated or over-limit
stream, trailing garbage, or a gzip header with reserved flag bits (which zlib rejects and
ISA-L does not) — is inflated again with zlib, whose outcome and messages are the reader's
documented ones. Without python-isal, zlib does everything.
"""

from __future__ import annotations

import zlib

from traceview.errors import LimitExceeded, TraceUnreadable

try:  # optional: manylinux wheels exist, but an exotic platform may lack it
    from isal import isal_zlib as _isal_zlib
except ImportError:  # pragma: no cover - depends on the environment
    _isal_zlib = None

GZIP_MAGIC = b"\x1f\x8b"
_IN_CHUNK = 1 << 20  # compressed bytes fed to the inflater per call
_FRESERVED = 0xE0  # gzip FLG bits 5-7: zlib fails on them, ISA-L ignores them


class _OverLimit(Exception):
    """ISA-L produced more than the limit: :func:`gunzip` raises LimitExceeded."""


def over_limit(limit: int, path: str, what: str = "JSON") -> LimitExceeded:
    """The error for decompressed ``what`` over ``limit`` bytes."""
    return LimitExceeded(f"decompressed {what} exceeds the {limit:,}-byte limit", path)


def not_gzip(head: bytes, path: str, expected: str) -> TraceUnreadable:
    """The error for a ``.gz`` file that holds no gzip stream (nor, read as is, ``expected``)."""
    return TraceUnreadable(f"not gzip-compressed (starts with {bytes(head[:8])!r}); expected {expected}", path)


def gunzip(data: bytes, path: str, limit: int, what: str = "JSON") -> bytes | bytearray:
    """Decompress (possibly multi-member) gzip ``data`` into at most ``limit`` bytes.

    Raises :class:`TraceUnreadable` (corrupt or truncated stream, trailing garbage) or
    :class:`LimitExceeded` (more than ``limit`` bytes), with zlib's wording.
    """
    if _isal_zlib is not None:
        try:
            out = _clean_inflate(_isal_zlib, data, limit)
        except _OverLimit:
            raise over_limit(limit, path, what) from None
        if out is not None:
            return out
    return _gunzip_zlib(data, path, limit, what)


def _clean_inflate(mod, data: bytes, limit: int) -> bytes | None:
    """Inflate with ``mod`` (a zlib-compatible module); None unless every member ends
    cleanly within ``limit`` bytes and only zero padding follows the last one.

    Each member is inflated in one call (output capped at ``limit + 1`` bytes), not fed in
    pieces into a growing buffer, whose copies cost more than the inflate itself."""
    parts = []
    size = 0
    view = memoryview(data)
    pos = 0
    n = len(data)
    try:
        while True:
            if n - pos < 4 or data[pos + 3] & _FRESERVED:
                return None
            d = mod.decompressobj(wbits=31)
            got = d.decompress(view[pos:], limit - size + 1)
            size += len(got)
            if size > limit:
                # over the limit: the same outcome zlib would reach (it stops at the limit too,
                # before any fault further in), said now instead of inflating it all again
                del got, parts
                raise _OverLimit
            parts.append(got)
            if not d.eof:  # truncated
                return None
            pos = n - len(d.unused_data)
            if pos >= n:
                break
            rest = view[pos:]
            if bytes(rest[:2]) != GZIP_MAGIC:
                if any(rest):
                    return None  # trailing garbage
                break  # zero padding after the last member
    except _OverLimit:
        raise
    except Exception:  # isal_zlib.error and anything unexpected: zlib decides
        return None
    return parts[0] if len(parts) == 1 else b"".join(parts)


def _gunzip_zlib(data: bytes, path: str, limit: int, what: str = "JSON") -> bytearray:
    out = bytearray()
    view = memoryview(data)
    pos = 0
    n = len(data)
    while True:
        d = zlib.decompressobj(wbits=31)
        try:
            while pos < n and not d.eof:
                chunk = view[pos:pos + _IN_CHUNK]
                pos += len(chunk)
                room = limit - len(out)
                got = d.decompress(chunk, room + 1)
                out += got
                if len(out) > limit or d.unconsumed_tail:
                    raise over_limit(limit, path, what)
                if d.eof:
                    # bytes of this chunk past the member's end belong to the next member
                    pos -= len(d.unused_data)
            if not d.eof:
                tail = d.flush()
                out += tail
                if len(out) > limit:
                    raise over_limit(limit, path, what)
                raise TraceUnreadable(
                    f"truncated gzip stream: the file ends after {n} compressed bytes "
                    f"({len(out)} bytes decompressed) before the gzip trailer", path)
        except zlib.error as exc:
            msg = str(exc)
            if "incorrect data check" in msg or "incorrect length check" in msg:
                raise TraceUnreadable(f"bad gzip data: CRC/length check failed ({msg}): the file is corrupt", path) from None
            raise TraceUnreadable(f"bad gzip data ({msg})", path) from None
        if pos >= n:
            return out
        rest = view[pos:]
        if bytes(rest[:2]) != GZIP_MAGIC:
            if not any(bytes(rest)):
                return out  # zero padding after the last member
            raise TraceUnreadable(f"{n - pos} bytes of trailing garbage after the gzip data", path)


def iter_gunzip(fh, path: str, limit: int, what: str = "JSON", block: int = 4 << 20):
    """Inflate the (possibly multi-member) gzip stream read from the binary file ``fh``, in
    pieces of at most ``block`` output bytes, at most ``limit`` bytes in all.

    ISA-L inflates where it is installed, zlib elsewhere and on a header with reserved flag
    bits. Raises :class:`TraceUnreadable` (corrupt or truncated stream, CRC/length mismatch,
    trailing garbage; zlib's wording) or :class:`LimitExceeded` (over ``limit``), as
    :func:`gunzip` does.
    """
    mod = _isal_zlib or zlib
    errors = (zlib.error,) + ((_isal_zlib.error,) if _isal_zlib is not None else ())
    size = 0
    n_in = 0
    data = fh.read(_IN_CHUNK)
    n_in += len(data)
    d = None
    try:
        while True:
            if d is None:  # a member starts
                if len(data) < 4:
                    more = fh.read(_IN_CHUNK)
                    n_in += len(more)
                    data += more
                use = zlib if len(data) >= 4 and data[3] & _FRESERVED else mod
                d = use.decompressobj(wbits=31)
            if not data:
                data = fh.read(_IN_CHUNK)
                n_in += len(data)
                if not data:
                    raise TraceUnreadable(
                        f"truncated gzip stream: the file ends after {n_in} compressed bytes "
                        f"({size} bytes decompressed) before the gzip trailer", path)
            got = d.decompress(data, block)
            data = d.unconsumed_tail
            if got:
                size += len(got)
                if size > limit:
                    raise over_limit(limit, path, what)
                yield got
            if d.eof:
                rest = d.unused_data + data
                if not rest:
                    rest = fh.read(_IN_CHUNK)
                    n_in += len(rest)
                if not rest:
                    return
                if rest[:2] != GZIP_MAGIC:
                    tail = rest + fh.read()
                    if any(tail):
                        raise TraceUnreadable(f"{len(tail)} bytes of trailing garbage after the gzip data", path)
                    return  # zero padding after the last member
                data = rest
                d = None
    except errors as exc:
        msg = str(exc)
        if "incorrect data check" in msg or "incorrect length check" in msg or "checksum" in msg.lower():
            raise TraceUnreadable(f"bad gzip data: CRC/length check failed ({msg}): the file is corrupt", path) from None
        raise TraceUnreadable(f"bad gzip data ({msg})", path) from None
