"""A finished command's output, kept to answer the same question again without reading.

The parsed-table cache (:mod:`traceview.read.cache`) spares the read of an unchanged file, but a
second ``traceview analyze`` still imports polars and numpy and runs every analysis again
(most of a cold run's time). This cache stores the bytes a command wrote (the JSON,
CSV, Parquet or table file, or what went to standard output) under a key made of:

* traceview's version and :data:`traceview.read.cache.SCHEMA_VERSION`;
* every option of the command that can change its output (not where it is written);
* the discovery outcome: the identity of every trace file chosen (resolved path, size,
  mtime, inode, device and a hash of its first and last 64 KiB, as
  :func:`traceview.read.cache.file_identity`), the reasons and the warnings (so a run that
  became stale, or a new run folder, is a miss).

* the bytes of files named by options (``--families``) and traceview's code fingerprint.

A hit writes the stored bytes and returns; it needs neither polars nor numpy. Entries live
in ``<cache root>/results/`` beside the table cache, each headed by a BLAKE2b digest of its
bytes; never in a folder being read or a ``plugins/profile`` tree. ``--no-cache`` /
``TRACEVIEW_NO_CACHE=1`` turn both caches off, and a byte limit (``--max-bytes`` /
``TRACEVIEW_MAX_BYTES``) skips them. Nothing here raises: a damaged or unwritable entry is
a miss.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
from pathlib import Path

#: options whose value is a file read by the command (its bytes go into the key)
_FILE_OPTIONS = ("families",)

#: options of ``analyze`` that only say where or how verbosely to write, not what
_NOT_IN_KEY = frozenset({"output", "no_cache", "workers", "scheduler", "progress", "func", "command"})


def _dir(root: Path | None) -> Path | None:
    return None if root is None else Path(root) / "results"


def key(command: str, options: dict, discovery, root: Path | None) -> str | None:
    """The entry key for ``command`` run with ``options`` (argparse values) over
    ``discovery`` (:class:`traceview.read.discover.Discovery`), stored under the cache folder
    ``root`` (None: caches off); None (nothing is cached) when the caches are off, a chosen
    file cannot be identified, or the cache folder lies inside a folder being read."""
    from traceview.read.cache import SCHEMA_VERSION, code_version, file_identity, in_profile_tree, inside

    d = _dir(root)
    if d is None or in_profile_tree(d) or os.environ.get("TRACEVIEW_MAX_BYTES", "").strip():
        return None  # a byte limit is always checked by reading (as for the table cache)
    try:
        files = [file_identity(tf.path) for tf in discovery.files]
    except OSError:
        return None
    # never store under a folder being read (a cache folder pointed into the profile)
    if any(inside(d, Path(f["resolved"]).parent) or inside(d, Path(tf.path).parent)
           for f, tf in zip(files, discovery.files)) or inside(d, Path(discovery.root)):
        return None
    opts = {k: v for k, v in sorted(options.items()) if k not in _NOT_IN_KEY}
    # options naming a file (family rules) count by content, not by name
    contents = {}
    for name in _FILE_OPTIONS:
        value = opts.get(name)
        if value:
            from traceview.analysis.rulefiles import read_option_file
            from traceview.errors import UsageError

            try:
                contents[name] = hashlib.blake2b(read_option_file(value, name), digest_size=16).hexdigest()
            except UsageError:
                return None  # the command will report the unreadable file
    blob = json.dumps({"v": [code_version(), SCHEMA_VERSION], "command": command, "options": opts,
                       "contents": contents, "files": files,
                       "reasons": list(discovery.reasons), "warnings": list(discovery.warnings)},
                      sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


def get(k: str | None, root: Path | None) -> bytes | None:
    """The stored output for key ``k`` under the cache folder ``root``, or None."""
    d = _dir(root)
    if d is None or k is None:
        return None
    try:
        p = d / f"{k}.out"
        blob = p.read_bytes()
        digest, data = blob[:_DIGEST], blob[_DIGEST:]
        if len(digest) < _DIGEST or hashlib.blake2b(data, digest_size=_DIGEST).digest() != digest:
            return None  # damaged or foreign: a miss (the run rewrites it)
        os.utime(p)  # recently used: kept by prune
        return data
    except OSError:
        return None


def put(k: str | None, data: bytes, root: Path | None) -> None:
    """Store ``data`` as the output for key ``k`` under the cache folder ``root``
    (atomically: a temp file renamed)."""
    d = _dir(root)
    if d is None or k is None:
        return
    tmp = None
    try:
        d.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=d)
        with os.fdopen(fd, "wb") as fh:
            fh.write(hashlib.blake2b(data, digest_size=_DIGEST).digest())
            fh.write(data)
        os.replace(tmp, d / f"{k}.out")
        tmp = None
        prune(d)
    except OSError:
        pass
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass


def with_warnings(warnings: list, data: bytes) -> bytes:
    """``data`` stored with the warning lines a replay says on standard error (csv and parquet
    outputs, which cannot hold them): their count of bytes (4, little-endian), the lines as a
    JSON list, then ``data``."""
    head = json.dumps([str(w) for w in warnings]).encode()
    return len(head).to_bytes(4, "little") + head + data


def split_warnings(blob: bytes) -> tuple[list, bytes] | None:
    """(warning lines, output) of a :func:`with_warnings` blob; None when it is not one."""
    try:
        n = int.from_bytes(blob[:4], "little")
        lines = json.loads(blob[4:4 + n])
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(lines, list) or not all(isinstance(x, str) for x in lines):
        return None
    return lines, blob[4 + n:]


#: bytes of the BLAKE2b digest that heads every stored output (checked on read)
_DIGEST = 16

#: at most this many stored outputs (least recently used go first)
MAX_ENTRIES = 200


def prune(d: Path, max_entries: int = MAX_ENTRIES) -> int:
    """Delete the least recently used outputs in the folder ``d`` beyond ``max_entries`` and
    temp files older than an hour; returns the number deleted."""
    if d is None or not d.is_dir():
        return 0
    removed = 0
    entries = []
    for p in d.iterdir():
        try:
            st = p.stat()
        except OSError:
            continue
        if p.name.startswith("."):
            if time.time() - st.st_mtime > 3600:
                p.unlink(missing_ok=True)
                removed += 1
            continue
        entries.append((st.st_mtime, p))
    entries.sort()
    for _, p in entries[: max(0, len(entries) - max_entries)]:
        p.unlink(missing_ok=True)
        removed += 1
    return removed
