"""The parsed-table cache: what a reader made of one trace file, kept outside the profile folder.

Reading a multi-million-event trace costs seconds; reading back what the reader made of it
costs a fraction of that. A :class:`TableCache` stores, per file, a small JSON ``meta`` and a
few named polars frames (Arrow IPC files), and gives them back only while the file is
unchanged. It does not know what the frames mean: :mod:`traceview.model.files` turns a
:class:`~traceview.model.schema.TraceData` into frames and back.

Where: ``$TRACEVIEW_CACHE_DIR``, else ``$XDG_CACHE_HOME/traceview``, else
``~/.cache/traceview`` (:func:`default_root`; ``TRACEVIEW_NO_CACHE=1`` gives none). Never
under the input path: an entry is not written when the cache folder would lie inside the
trace file's folder or in any ``plugins/profile`` tree (the profile folder stays untouched
even if it is writable).

One entry per read-argument list ``args`` (the resolved path, the path as given, the reader
kind, host and run: the values that end up in the frames), in
``<root>/v<SCHEMA_VERSION>/<slot>/``: ``meta.json`` (the file identity it was made from,
the arguments and the caller's meta) and one ``<name>.arrow`` per frame.

The identity (:func:`file_identity`) is the resolved path, size (bytes), ``st_mtime_ns``,
``st_ctime_ns``, inode and device number, a BLAKE2b hash of the first and last 64 KiB,
traceview's version with a fingerprint of its code, and :data:`SCHEMA_VERSION`. Any
difference makes the entry stale: the file is read again and the entry replaced. Entries are
written to a temporary folder inside the cache root and moved into place with
``os.replace``, so a reader never sees half an entry; a failed or racing write only loses
the cache, never the result. :meth:`TableCache.prune` keeps the cache under a size budget
(least recently used first). Nothing here raises on a damaged entry: it is a miss.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Callable

#: Bumped whenever the stored layout or the meaning of a stored column changes.
SCHEMA_VERSION = 8  # 2: step_markers.arrow; 3: events.arrow + attrs.arrow (OpTable); 4: meta names its frames; 5: memory.arrow; 6: kernel_lines.arrow; 7: runs.arrow + run_keys.arrow (RunTable); 8: hlo_protos.arrow
#: Bytes hashed at each end of the file for the identity.
EDGE_BYTES = 64 << 10
#: Environment variables: the cache folder, "off" (1/true/yes/on), the size budget (bytes).
ENV_DIR = "TRACEVIEW_CACHE_DIR"
ENV_OFF = "TRACEVIEW_NO_CACHE"
ENV_MAX = "TRACEVIEW_CACHE_MAX_BYTES"
#: Default size budget of the whole cache, bytes (see :meth:`TableCache.prune`).
DEFAULT_MAX_BYTES = 4 << 30
#: Files smaller than this are not cached by default (reading them is as fast), bytes.
MIN_FILE_BYTES = 1 << 20

_OFF_VALUES = {"1", "true", "yes", "on"}


def env_disabled() -> bool:
    """Whether ``$TRACEVIEW_NO_CACHE`` turns the caches off."""
    return os.environ.get(ENV_OFF, "").strip().lower() in _OFF_VALUES


def default_root() -> Path | None:
    """The cache folder the environment names (module doc), or None when
    ``$TRACEVIEW_NO_CACHE`` turns the caches off or there is no usable place for it
    (:func:`unusable_reason`)."""
    if env_disabled():
        return None
    d = os.environ.get(ENV_DIR, "").strip()
    if d:
        return Path(d).expanduser()
    base = _default_base()
    return None if _base_fault(base) else base / "traceview"


def _default_base() -> Path:
    xdg = os.environ.get("XDG_CACHE_HOME", "").strip()
    if xdg:
        return Path(xdg).expanduser()
    try:
        return Path.home() / ".cache"
    except (RuntimeError, KeyError):  # no HOME and no passwd entry
        return Path("/nonexistent/.cache")


def _base_fault(base: Path) -> str | None:
    """Why the default cache would be created in no real place: the folder that holds
    ``base`` (the home folder, or ``$XDG_CACHE_HOME``'s parent) is missing or not writable."""
    holder = base if base.is_dir() else base.parent
    if not holder.is_dir():
        return f"{holder} does not exist"
    if not os.access(holder, os.W_OK | os.X_OK):
        return f"{holder} is not writable"
    return None


def unusable_reason() -> str | None:
    """Why the caches are off for want of a place (``HOME`` names a missing or read-only
    folder, and neither ``$TRACEVIEW_CACHE_DIR`` nor ``$XDG_CACHE_HOME`` gives one), for the
    CLI to say once; None when a cache folder is available or the caches are turned off."""
    if env_disabled() or os.environ.get(ENV_DIR, "").strip():
        return None
    why = _base_fault(_default_base())
    return (f"no cache: {why} (set TRACEVIEW_CACHE_DIR or HOME); reading every file afresh, nothing cached"
            if why else None)


_CODE_ID: list[str] = []  # memo of code_version()'s fingerprint (the code does not change in a process)


def code_files() -> list[Path]:
    """The files of the traceview package whose edits change what it computes or renders:
    Python sources, built extensions and the report templates."""
    here = Path(__file__).resolve().parents[1]
    return sorted(p for pat in ("*.py", "*.so", "*.pyd", "*.j2") for p in here.rglob(pat))


def code_version() -> str:
    """traceview's version plus a fingerprint of its own code and template files (name, size,
    mtime): an edited checkout (editable install) never reuses entries an older build wrote,
    a report template's edit included."""
    from traceview import __version__

    if not _CODE_ID:
        h = hashlib.blake2b(digest_size=8)
        here = Path(__file__).resolve().parents[1]  # the traceview package
        for p in code_files():
            try:
                st = p.stat()
            except OSError:
                continue
            h.update(f"{p.relative_to(here)}:{st.st_size}:{st.st_mtime_ns};".encode())
        _CODE_ID.append(h.hexdigest())
    return f"{__version__}+{_CODE_ID[0]}"


def file_identity(path: str | os.PathLike) -> dict:
    """What a cache checks before trusting an entry for ``path``: resolved path, size
    (bytes), mtime_ns, ctime_ns (which no one can set back: an in-place edit whose mtime was
    restored still changes it), inode, device, BLAKE2b of the first and last
    :data:`EDGE_BYTES`, :func:`code_version` and :data:`SCHEMA_VERSION`. Raises ``OSError``
    when unreadable."""
    resolved = os.path.realpath(path)
    with open(resolved, "rb") as fh:
        st = os.fstat(fh.fileno())
        h = hashlib.blake2b(digest_size=16)
        h.update(fh.read(EDGE_BYTES))
        if st.st_size > EDGE_BYTES:
            fh.seek(max(EDGE_BYTES, st.st_size - EDGE_BYTES))
            h.update(fh.read(EDGE_BYTES))
    return {"resolved": resolved, "size": st.st_size, "mtime_ns": st.st_mtime_ns, "ctime_ns": st.st_ctime_ns,
            "inode": st.st_ino, "device": st.st_dev, "edges_blake2b": h.hexdigest(), "traceview": code_version(),
            "schema": SCHEMA_VERSION}


def inside(child: Path, parent: Path) -> bool:
    """Whether ``child`` is ``parent`` or lies below it (both resolved)."""
    try:
        Path(child).resolve().relative_to(Path(parent).resolve())
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


class TableCache:
    """Parsed tables per trace file under ``root`` (see the module doc).

    ``min_file_bytes``: files smaller than this bypass the cache (:meth:`cached`; default
    :data:`MIN_FILE_BYTES`).
    ``max_bytes``: the size budget kept by :meth:`prune` (default ``$TRACEVIEW_CACHE_MAX_BYTES``,
    else :data:`DEFAULT_MAX_BYTES`). The object holds only these settings: it can be sent to
    worker processes.
    """

    def __init__(self, root: str | os.PathLike, *, min_file_bytes: int | None = None, max_bytes: int | None = None):
        self.root = Path(root).expanduser()
        self.min_file_bytes = int(MIN_FILE_BYTES if min_file_bytes is None else min_file_bytes)
        self.max_bytes = max_bytes

    @classmethod
    def default(cls) -> "TableCache | None":
        """The cache the environment names (:func:`default_root`), or None when it is off."""
        root = default_root()
        return None if root is None else cls(root)

    def __repr__(self) -> str:
        return f"TableCache({str(self.root)!r}, min_file_bytes={self.min_file_bytes})"

    # -- entries ------------------------------------------------------------------------
    def _entry_dir(self, args: list, resolved: str) -> Path:
        key = json.dumps([resolved, *args], ensure_ascii=True)
        return self.root / f"v{SCHEMA_VERSION}" / hashlib.sha256(key.encode()).hexdigest()[:32]

    def _fresh(self, path: str, args: list, identity: dict | None):
        """(entry folder, meta) of a fresh entry for ``args``, else None. Raises whatever
        reading the meta raises."""
        ident = identity or file_identity(path)
        entry = self._entry_dir(args, ident["resolved"])
        meta_path = entry / "meta.json"
        if not meta_path.is_file():
            return None
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        if meta.get("identity") != ident or meta.get("args") != list(args):
            return None
        return entry, meta

    def has_fresh(self, path: str | os.PathLike, args: list) -> bool:
        """Whether :meth:`get` would find a fresh entry (its meta is checked, its frames are
        not read). Never raises."""
        try:
            return self._fresh(str(path), args, None) is not None
        except Exception:
            return False

    def get(self, path: str | os.PathLike, args: list, identity: dict | None = None):
        """``(meta, frames)`` of the fresh entry for ``args`` (the caller's meta, a dict of
        name -> polars DataFrame), or None (no entry, stale, unreadable). Never raises."""
        import polars as pl

        try:
            found = self._fresh(str(path), args, identity)
            if found is None:
                return None
            entry, meta = found
            frames = {f: pl.read_ipc(entry / f"{f}.arrow") for f in meta["frames"]}
            try:
                os.utime(entry / "meta.json")  # recently used: kept by prune
            except OSError:
                pass
            return meta["data"], frames
        except Exception:  # a damaged or foreign entry is a miss, never an error
            return None

    def put(self, path: str | os.PathLike, args: list, data: dict, frames: dict, identity: dict | None = None,
            compression: dict | None = None) -> Path | None:
        """Store ``data`` (JSON-able) and ``frames`` (name -> polars DataFrame, each written
        with ``compression[name]``, default zstd) as the entry for ``args``; returns the entry
        folder, or None when nothing was written (the cache folder inside the trace's folder
        or a profile tree, ``data`` that does not survive JSON, an OS error). Never raises."""
        tmp = None
        path = str(path)
        try:
            ident = identity or file_identity(path)
            root = self.root
            if inside(root, Path(ident["resolved"]).parent) or inside(root, Path(path).parent) or in_profile_tree(root):
                return None  # never write under the input path, nor in any plugins/profile tree
            entry = self._entry_dir(args, ident["resolved"])
            meta = {"identity": ident, "args": list(args), "written": time.time(), "frames": list(frames), "data": data}
            text = json.dumps(meta, allow_nan=True)
            if json.loads(text)["data"] != data:
                return None  # something in the data does not survive JSON: do not cache
            entry.parent.mkdir(parents=True, exist_ok=True)
            tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=entry.parent))
            for name, df in frames.items():
                df.write_ipc(tmp / f"{name}.arrow", compression=(compression or {}).get(name, "zstd"))
            (tmp / "meta.json").write_text(text, encoding="utf-8")
            old = None
            if entry.exists():  # a stale entry: move it aside, then swap the new one in
                old = Path(tempfile.mkdtemp(prefix=".old-", dir=entry.parent))
                os.replace(entry, old / "entry")
            os.replace(tmp, entry)
            tmp = None
            if old is not None:
                shutil.rmtree(old, ignore_errors=True)
            self.prune()
            return entry
        except Exception:
            return None
        finally:
            if tmp is not None:
                shutil.rmtree(tmp, ignore_errors=True)

    def cached(self, path: str | os.PathLike, args: list, read: Callable[[], object],
               encode: Callable[[object], tuple], decode: Callable[[dict, dict], object]):
        """``read()``'s result for ``path``, from a fresh entry when there is one.

        ``encode(result) -> (data, frames[, compression])`` makes an entry of a result;
        ``decode(data, frames)`` makes a result of an entry (None: unusable, read again).
        Errors of ``read`` propagate unchanged (nothing is stored for them). Files under
        ``min_file_bytes`` bypass the cache; the result is stored only if the file did not
        change while it was read."""
        p = str(path)
        try:
            ident = file_identity(p)
        except OSError:
            return read()  # let the reader report the missing or unreadable file
        if ident["size"] < self.min_file_bytes:
            return read()
        hit = self.get(p, args, ident)
        if hit is not None:
            try:
                got = decode(*hit)
            except Exception:
                got = None
            if got is not None:
                return got
        result = read()
        try:
            after = file_identity(p)
        except OSError:
            return result
        if after == ident:
            try:
                parts = encode(result)
            except Exception:
                return result
            self.put(p, args, parts[0], parts[1], ident, parts[2] if len(parts) > 2 else None)
        return result

    # -- housekeeping -------------------------------------------------------------------
    def _entries(self):
        base = self.root / f"v{SCHEMA_VERSION}"
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

    def prune(self, max_bytes: int | None = None) -> int:
        """Delete least recently used entries until the cache holds at most ``max_bytes``
        (default: this cache's ``max_bytes``, else ``$TRACEVIEW_CACHE_MAX_BYTES``, else
        :data:`DEFAULT_MAX_BYTES`). Returns the number of entries removed."""
        if max_bytes is None:
            max_bytes = self.max_bytes
        if max_bytes is None:
            try:
                max_bytes = int(os.environ.get(ENV_MAX, "") or DEFAULT_MAX_BYTES)
            except ValueError:
                max_bytes = DEFAULT_MAX_BYTES
        entries = sorted(self._entries(), key=lambda e: e[0])
        total = sum(e[1] for e in entries)
        removed = 0
        for used, size, d in entries:
            if total <= max_bytes:
                break
            shutil.rmtree(d, ignore_errors=True)
            total -= size
            removed += 1
        return removed

    def clear(self) -> None:
        """Delete every entry of this schema version."""
        shutil.rmtree(self.root / f"v{SCHEMA_VERSION}", ignore_errors=True)
