"""A cache of parsed trace files, kept outside the profile folder.

Reading a multi-million-event trace costs seconds (protobuf/JSON decoding, HLO text
parsing, self-time arithmetic); reading it back from this cache costs a fraction of that.
:func:`cached_read` wraps a reader: on a hit it returns the stored
:class:`~traceview.schema.TraceData`, on a miss it calls the reader and stores the result.
Results are identical with and without the cache (same frames, dtypes, row order,
devices, notes and counts).

Where: ``$TRACEVIEW_CACHE_DIR``, else ``$XDG_CACHE_HOME/traceview``, else
``~/.cache/traceview``. Never under the input path: an entry is not written when the cache
folder would lie inside the trace file's folder (the profile folder stays untouched even
if it is writable). ``TRACEVIEW_NO_CACHE=1`` (or ``traceview analyze --no-cache``, or
:func:`disabled`) turns the cache off.

One entry per (resolved path, path as given, reader kind, host, run) — the values that end
up in the frames — in ``<root>/v<SCHEMA_VERSION>/<slot>/``:

* ``meta.json`` — the identity the entry was made from and the small parts of the
  TraceData (devices with their stats, notes, has_shapes, n_events, profile start/stop);
* ``events.arrow`` / ``attrs.arrow`` (the OpTable) / ``module_runs.arrow`` / ``step_markers.arrow`` — the frames as Arrow IPC
  files (events lz4, the rest zstd).

The identity is the resolved path, size (bytes), ``st_mtime_ns``, inode and device number,
a BLAKE2b hash of the first and last 64 KiB, traceview's version and :data:`SCHEMA_VERSION`.
Any difference — the file was rewritten, touched, replaced or traceview was upgraded —
makes the entry stale: the file is read again and the entry replaced. Entries are written
to a temporary folder inside the cache root and moved into place with ``os.replace``, so a
reader never sees half an entry; a failed or racing write only loses the cache, never the
result. :func:`prune` keeps the cache under a size budget (least recently used first).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
from dataclasses import asdict
from contextlib import contextmanager
from pathlib import Path
from typing import Callable

#: Bumped whenever the stored layout or the meaning of a stored column changes.
SCHEMA_VERSION = 3  # 2: step_markers.arrow; 3: events.arrow + attrs.arrow (OpTable)
#: Bytes hashed at each end of the file for the identity.
EDGE_BYTES = 64 << 10
#: Environment variables.
ENV_DIR = "TRACEVIEW_CACHE_DIR"
ENV_OFF = "TRACEVIEW_NO_CACHE"
ENV_MAX = "TRACEVIEW_CACHE_MAX_BYTES"
#: Default size budget of the whole cache, bytes (see :func:`prune`).
DEFAULT_MAX_BYTES = 4 << 30
#: Files smaller than this are not cached (reading them is as fast as the cache), bytes.
MIN_FILE_BYTES = 1 << 20

_OFF_VALUES = {"1", "true", "yes", "on"}
_disabled_here = False


def disabled(flag: bool = True) -> None:
    """Turn the cache off (``flag=True``) or back on for this process (the CLI's
    ``--no-cache``). ``TRACEVIEW_NO_CACHE`` still wins when set."""
    global _disabled_here
    _disabled_here = bool(flag)


@contextmanager
def off():
    """Context manager: the cache is off inside, and back to what it was after."""
    global _disabled_here
    before = _disabled_here
    _disabled_here = True
    try:
        yield
    finally:
        _disabled_here = before


def cache_root() -> Path | None:
    """The cache folder, or None when the cache is off."""
    if _disabled_here or os.environ.get(ENV_OFF, "").strip().lower() in _OFF_VALUES:
        return None
    d = os.environ.get(ENV_DIR, "").strip()
    if d:
        return Path(d).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME", "").strip()
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "traceview"


_CODE_ID: str | None = None


def _version() -> str:
    """traceview's version plus a fingerprint of its own code files (name, size, mtime): an
    edited checkout (editable install) never reuses entries an older build wrote."""
    global _CODE_ID
    from . import __version__

    if _CODE_ID is None:
        h = hashlib.blake2b(digest_size=8)
        here = Path(__file__).resolve().parent
        for p in sorted([*here.rglob("*.py"), *here.glob("*.so"), *here.glob("*.pyd")]):
            try:
                st = p.stat()
            except OSError:
                continue
            h.update(f"{p.relative_to(here)}:{st.st_size}:{st.st_mtime_ns};".encode())
        _CODE_ID = h.hexdigest()
    return f"{__version__}+{_CODE_ID}"


def file_identity(path: str | os.PathLike) -> dict:
    """What the cache checks before trusting an entry for ``path``: resolved path, size
    (bytes), mtime_ns, ctime_ns (which no one can set back: an in-place edit whose mtime was
    restored still changes it), inode, device, BLAKE2b of the first and last
    :data:`EDGE_BYTES`, traceview version and code fingerprint (:func:`_version`) and
    :data:`SCHEMA_VERSION`. Raises ``OSError`` when unreadable."""
    resolved = os.path.realpath(path)
    with open(resolved, "rb") as fh:
        st = os.fstat(fh.fileno())
        h = hashlib.blake2b(digest_size=16)
        h.update(fh.read(EDGE_BYTES))
        if st.st_size > EDGE_BYTES:
            fh.seek(max(EDGE_BYTES, st.st_size - EDGE_BYTES))
            h.update(fh.read(EDGE_BYTES))
    return {"resolved": resolved, "size": st.st_size, "mtime_ns": st.st_mtime_ns, "ctime_ns": st.st_ctime_ns,
            "inode": st.st_ino,
            "device": st.st_dev, "edges_blake2b": h.hexdigest(), "traceview": _version(),
            "schema": SCHEMA_VERSION}


def _slot(path: str, kind: str, host: str | None, run: str, resolved: str) -> str:
    key = json.dumps([resolved, path, kind, host, run], ensure_ascii=True)
    return hashlib.sha256(key.encode()).hexdigest()[:32]


def _inside(child: Path, parent: Path) -> bool:
    try:
        child.resolve().relative_to(parent.resolve())
        return True
    except ValueError:
        return False


def in_profile_tree(folder: Path) -> bool:
    """Whether ``folder`` lies in a ``plugins/profile`` tree (where the profiler writes runs
    and a stray file would later be taken for a trace): no cache is ever written there."""
    try:
        p = Path(folder).resolve()
    except OSError:
        return True
    return any(q.name == "profile" and q.parent.name == "plugins" for q in (p, *p.parents))


def _entry_dir(root: Path, slot: str) -> Path:
    return root / f"v{SCHEMA_VERSION}" / slot


def _fresh(path: str, kind: str, host: str | None, run: str, identity: dict | None):
    """(entry folder, meta) of a fresh entry for these read arguments, else None. Raises
    whatever reading the meta raises."""
    root = cache_root()
    if root is None:
        return None
    ident = identity or file_identity(path)
    entry = _entry_dir(root, _slot(path, kind, host, run, ident["resolved"]))
    meta_path = entry / "meta.json"
    if not meta_path.is_file():
        return None
    meta = json.loads(meta_path.read_text(encoding="utf-8"))
    if meta.get("identity") != ident or meta.get("args") != [path, kind, host, run]:
        return None
    return entry, meta


def has_fresh_entry(path: str, kind: str, host: str | None, run: str) -> bool:
    """Whether :func:`load` would find a fresh entry for these read arguments (the entry's
    meta is checked, its tables are not read). Never raises."""
    try:
        return _fresh(str(path), kind, host, run, None) is not None
    except Exception:
        return False


def load(path: str, kind: str, host: str | None, run: str, identity: dict | None = None):
    """The cached :class:`~traceview.schema.TraceData` for these read arguments, or None
    (cache off, no entry, stale entry, unreadable entry). Never raises."""
    try:
        found = _fresh(path, kind, host, run, identity)
        if found is None:
            return None
        entry, meta = found
        meta_path = entry / "meta.json"
        td = _decode(entry, meta)
        try:
            os.utime(meta_path)  # recently used: kept by prune
        except OSError:
            pass
        return td
    except Exception:  # a damaged or foreign entry is a miss, never an error
        return None


def _decode(entry: Path, meta: dict):
    import polars as pl

    from .optable import ATTR_SCHEMA, EVENT_SCHEMA, OpTable
    from .schema import MODULE_RUNS_SCHEMA, DeviceInfo, TraceData

    events = pl.read_ipc(entry / "events.arrow")
    attrs = pl.read_ipc(entry / "attrs.arrow")
    runs = pl.read_ipc(entry / "module_runs.arrow")
    if (events.schema != pl.Schema(EVENT_SCHEMA) or attrs.schema != pl.Schema(ATTR_SCHEMA)
            or runs.schema != pl.Schema(MODULE_RUNS_SCHEMA)):
        return None  # written by a traceview whose tables differ
    mk_path = entry / "step_markers.arrow"
    markers = pl.read_ipc(mk_path) if mk_path.exists() else None
    t = meta["trace"]
    return TraceData(path=t["path"], host=t["host"], format=t["format"], ops=OpTable(events, attrs),
                     module_runs=runs, devices=[DeviceInfo(**d) for d in t["devices"]], notes=list(t["notes"]),
                     has_shapes=t["has_shapes"], n_events=t["n_events"],
                     profile_start_ns=t["profile_start_ns"], profile_stop_ns=t["profile_stop_ns"],
                     step_markers=markers)


def store(td, path: str, kind: str, host: str | None, run: str, identity: dict | None = None) -> Path | None:
    """Write ``td`` as the entry for these read arguments; returns the entry folder, or
    None when nothing was written (cache off, cache folder inside the trace's folder, a
    non-JSON-able device stat, an OS error). Never raises."""
    root = cache_root()
    if root is None:
        return None
    tmp = None
    try:
        ident = identity or file_identity(path)
        if (_inside(root, Path(ident["resolved"]).parent) or _inside(root, Path(path).parent)
                or in_profile_tree(root)):
            return None  # never write under the input path, nor in any plugins/profile tree
        entry = _entry_dir(root, _slot(path, kind, host, run, ident["resolved"]))
        meta = {"identity": ident, "args": [path, kind, host, run], "written": time.time(),
                "trace": {"path": td.path, "host": td.host, "format": td.format,
                          "devices": [asdict(d) for d in td.devices], "notes": list(td.notes),
                          "has_shapes": td.has_shapes, "n_events": td.n_events,
                          "profile_start_ns": td.profile_start_ns, "profile_stop_ns": td.profile_stop_ns}}
        text = json.dumps(meta, allow_nan=True)
        if json.loads(text)["trace"] != meta["trace"]:
            return None  # something in the device stats does not survive JSON: do not cache
        entry.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=entry.parent))
        # events: lz4 (decodes at GB/s; the cache hit must be cheap), the rest: zstd
        td.table.events.write_ipc(tmp / "events.arrow", compression="lz4")
        td.table.attrs.write_ipc(tmp / "attrs.arrow", compression="zstd")
        td.module_runs.write_ipc(tmp / "module_runs.arrow", compression="zstd")
        if td.step_markers is not None:
            td.step_markers.write_ipc(tmp / "step_markers.arrow", compression="zstd")
        (tmp / "meta.json").write_text(text, encoding="utf-8")
        old = None
        if entry.exists():  # a stale entry: move it aside, then swap the new one in
            old = Path(tempfile.mkdtemp(prefix=".old-", dir=entry.parent))
            os.replace(entry, old / "entry")
        os.replace(tmp, entry)
        tmp = None
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
        prune(root)
        return entry
    except Exception:
        return None
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


def cached_read(path: str | os.PathLike, kind: str, host: str | None, run: str,
                reader: Callable[[], object]):
    """``reader()``'s TraceData for ``path``, from the cache when a fresh entry exists.

    On a miss the reader runs and its result is stored. Errors of the reader propagate
    unchanged (nothing is cached for them). Files under :data:`MIN_FILE_BYTES` bypass the
    cache.
    """
    p = str(path)
    if cache_root() is None:
        return reader()
    try:
        ident = file_identity(p)
    except OSError:
        return reader()  # let the reader report the missing/unreadable file
    if ident["size"] < MIN_FILE_BYTES:
        return reader()
    hit = load(p, kind, host, run, ident)
    if hit is not None:
        return hit
    td = reader()
    try:
        after = file_identity(p)
    except OSError:
        return td
    if after == ident:  # the file did not change while it was read
        store(td, p, kind, host, run, ident)
    return td


def _entries(root: Path):
    base = root / f"v{SCHEMA_VERSION}"
    if not base.is_dir():
        return []
    out = []
    for d in base.iterdir():
        if d.name.startswith("."):
            # temp folders of writes that died; remove them once they are an hour old
            try:
                if time.time() - d.stat().st_mtime > 3600:
                    shutil.rmtree(d, ignore_errors=True)
            except OSError:
                pass
            continue
        try:
            used = (d / "meta.json").stat().st_mtime
            size = sum(f.stat().st_size for f in d.iterdir())
        except OSError:
            continue
        out.append((used, size, d))
    return out


def prune(root: Path | None = None, max_bytes: int | None = None) -> int:
    """Delete least recently used entries until the cache holds at most ``max_bytes``
    (default ``$TRACEVIEW_CACHE_MAX_BYTES``, else :data:`DEFAULT_MAX_BYTES`). Returns the
    number of entries removed."""
    root = root or cache_root()
    if root is None:
        return 0
    if max_bytes is None:
        try:
            max_bytes = int(os.environ.get(ENV_MAX, "") or DEFAULT_MAX_BYTES)
        except ValueError:
            max_bytes = DEFAULT_MAX_BYTES
    entries = sorted(_entries(root), key=lambda e: e[0])
    total = sum(e[1] for e in entries)
    removed = 0
    for used, size, d in entries:
        if total <= max_bytes:
            break
        shutil.rmtree(d, ignore_errors=True)
        total -= size
        removed += 1
    return removed


def clear(root: Path | None = None) -> None:
    """Delete every entry of this schema version."""
    root = root or cache_root()
    if root is not None:
        shutil.rmtree(root / f"v{SCHEMA_VERSION}", ignore_errors=True)
