"""Profiles in object stores: ``gs://``, ``s3://`` and any other fsspec URL, read as local ones.

``discover("gs://bucket/logdir")`` (:func:`traceview.read.discover.discover` hands every URL
here) lists everything under the URL in **one** recursive, paged listing (fsspec's ``find``
with details: ``list_objects_v2`` pages of 1,000 keys on S3, ``objects.list`` pages on GCS,
never one call per folder), makes the same choices as for a local folder from the listed
names, sizes and modification times (newest run, stale and same-second collision warnings,
``run`` / ``all_runs``), then fetches only the chosen files into a local copy and hands back
a :class:`RemoteDiscovery` whose files are those copies: every reader reads a local file.

Where the copies live: ``<cache root>/remote/<scheme>/<bucket>/<key>`` under the cache folder
of :func:`traceview.read.cache.default_root`, so a run's folders keep their shape; beside each
copy a ``.<name>.remote.json`` records the URL, size (bytes) and version (ETag, generation,
MD5) it was fetched at. A copy whose record matches the listing is used as it is, so a remote
file is fetched once; any difference fetches it again. With the caches off
(``TRACEVIEW_NO_CACHE=1``, no usable cache folder) the copies go to
``$TMPDIR/traceview-remote-<uid>`` and are fetched afresh every time. Copies are pruned least
recently used first to ``$TRACEVIEW_CACHE_MAX_BYTES`` (default 4 GiB). ``--no-cache`` turns off
the parsed-table and result caches only: a remote file is still read from its local copy.
A listing that gives no size (plain http) costs one request per trace file for it; one that
gives no date takes the object as written now (no stale warning without evidence).

A fetch reads the object in ranges of :data:`CHUNK_BYTES` (:data:`CONCURRENCY` at a time),
checks that every range came back whole and that the bytes match the listed size and MD5
(S3's single-part ETag, GCS's ``md5Hash``; else the version is read again after the fetch),
writes to a temporary file and renames it into place. Credentials, endpoints and retries are
the libraries' own (``s3fs``/botocore: ``AWS_*`` variables and config files, e.g.
``AWS_ENDPOINT_URL``; ``gcsfs``/google-auth: application default credentials,
``STORAGE_EMULATOR_HOST``); traceview passes no option of its own. Every request, and every
range, must answer within ``$TRACEVIEW_REMOTE_TIMEOUT_S`` seconds (default
:data:`DEFAULT_TIMEOUT_S`; the whole listing within :data:`LIST_TIMEOUTS` times that), else it
is cancelled (async file systems: s3fs, gcsfs, http). Nothing is ever written to the remote.

Faults are one line naming the URL: unknown scheme or a missing fsspec package
(:class:`~traceview.errors.UsageError`, exit 2), a missing bucket or prefix
(:class:`~traceview.errors.NoTraceFound`, exit 3), access denied, a server that cannot be
reached or stops answering, an object cut short or changed while read
(:class:`~traceview.errors.RemoteUnreadable`, exit 7).
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import os
import re
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from traceview.errors import NoTraceFound, RemoteUnreadable, TraceviewError, UsageError
from traceview.read.discover import PATTERNS, PRUNED_DIRS, Discovery, classify
from traceview.read.discover import discover as discover_local

#: ``scheme://`` at the start of a path: a URL (``file://`` is read as the local path it names)
_URL_RE = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*)://")

#: the fsspec package each scheme needs, and the traceview extra that installs it
EXTRAS = {"gs": ("gcsfs", "gcs"), "gcs": ("gcsfs", "gcs"), "s3": ("s3fs", "s3"), "s3a": ("s3fs", "s3")}

ENV_TIMEOUT = "TRACEVIEW_REMOTE_TIMEOUT_S"
#: seconds a request (a listing page, a range of a file) may take before it is cancelled
DEFAULT_TIMEOUT_S = 20.0
#: the whole listing may take this many request timeouts (a bucket of many pages)
LIST_TIMEOUTS = 3
#: bytes per ranged read of a fetch, and how many ranges are in flight at once
CHUNK_BYTES = 8 << 20
CONCURRENCY = 4
#: characters of a library's error message kept in ours
_MSG_CHARS = 200


def is_url(path) -> bool:
    """Whether ``path`` is a URL (``scheme://...``) rather than a local path."""
    return isinstance(path, str) and _URL_RE.match(path) is not None


def local_path(url: str) -> str | None:
    """The local path a ``file://`` URL names, else None."""
    m = _URL_RE.match(url)
    if m and m.group(1).lower() == "file":
        from urllib.parse import unquote, urlsplit

        return unquote(urlsplit(url).path) or "/"
    return None


def timeout_s() -> float:
    """``$TRACEVIEW_REMOTE_TIMEOUT_S`` (seconds, > 0), else :data:`DEFAULT_TIMEOUT_S`."""
    try:
        v = float(os.environ.get(ENV_TIMEOUT, "") or DEFAULT_TIMEOUT_S)
    except ValueError:
        raise UsageError(f"${ENV_TIMEOUT} must be a number of seconds, got {os.environ.get(ENV_TIMEOUT)!r}") from None
    if not v > 0 or v != v or v == float("inf"):
        raise UsageError(f"${ENV_TIMEOUT} must be a number of seconds > 0, got {os.environ.get(ENV_TIMEOUT)!r}")
    return v


@dataclass
class RemoteDiscovery(Discovery):
    """A :class:`~traceview.read.discover.Discovery` of the URL ``url``: ``root``, the runs'
    folders and the files are the local copies (the folder ``copies`` mirrors ``copies_url``:
    ``url``, or its folder when it names one object); ``reasons`` and ``warnings`` name the
    URLs. ``urls``: each fetched copy's path (str) -> its URL."""

    url: str = ""
    copies: Path | None = None
    copies_url: str = ""
    urls: dict = field(default_factory=dict)

    def shown(self, text):
        """``text`` with the local copies' folder written as its URL (None stays None)."""
        return shown(text, self.copies, self.copies_url)

    def local_copy(self, path: str) -> str:
        """The local copy of the object at the URL ``path`` (a path that is no fetched URL is
        returned as it is): what a reader opens again (``traceview export``)."""
        for local, url in self.urls.items():
            if url == path:
                return local
        return path


def shown(text, copies: Path | None, url: str):
    """``text`` with the folder ``copies`` written as ``url`` (None stays None)."""
    if text is None or copies is None:
        return text
    return str(text).replace(str(copies), url)


def is_remote(disc) -> bool:
    """Whether ``disc`` is the discovery of a URL (its files are local copies)."""
    return isinstance(disc, RemoteDiscovery)


def relabel(results: list, disc) -> list:
    """``results`` of reading ``disc``'s files with every local copy named by its URL: a
    result's ``path`` (TraceData, per-host partials) and its op table's ``file`` column, and a
    TraceviewError's message. The results of a local discovery are returned as they are."""
    if not is_remote(disc):
        return results
    return [_relabel_error(r, disc) if isinstance(r, TraceviewError) else _relabel_result(r, disc) for r in results]


def _relabel_result(r, disc):
    old = getattr(r, "path", None)
    if not isinstance(old, str):
        return r
    try:
        r.path = disc.urls.get(old) or disc.shown(old)
    except (AttributeError, dataclasses.FrozenInstanceError):
        return r
    t = getattr(r, "table", None)  # the op table's ``file`` column (traceview query shows it)
    attrs = getattr(t, "attrs", None)
    if attrs is not None and "file" in getattr(attrs, "columns", ()):
        import polars as pl

        r.table = type(t)(t.events, attrs.with_columns(
            pl.when(pl.col("file") == old).then(pl.lit(r.path)).otherwise(pl.col("file")).alias("file")))
    return r


def _relabel_error(err: TraceviewError, disc) -> TraceviewError:
    try:
        new = type(err)(disc.shown(err.fault), disc.shown(err.path))
    except Exception:  # noqa: BLE001 - an error class of another shape: keep it as it is
        return err
    return new.with_traceback(err.__traceback__)


# ----------------------------------------------------------------------------- the file system

def _filesystem(url: str):
    """(fs, path inside it) for ``url``; UsageError for an unknown scheme or a missing package."""
    scheme = _URL_RE.match(url).group(1).lower()
    try:
        import fsspec
    except ImportError:
        if scheme in EXTRAS:
            raise UsageError(f"{url}: reading {scheme}:// needs fsspec and {EXTRAS[scheme][0]}, which are not "
                             f"installed: pip install 'traceview[{EXTRAS[scheme][1]}]'") from None
        raise UsageError(f"{url}: reading URLs needs fsspec, which is not installed (pip install fsspec, or "
                         "'traceview[s3]' / 'traceview[gcs]' for s3:// and gs://); without it only local paths "
                         "are read") from None
    from fsspec.registry import known_implementations, registry

    if scheme not in registry and scheme not in known_implementations:
        raise UsageError(f"{url}: unknown URL scheme '{scheme}://' (fsspec has no file system for it; "
                         "give a local path, or an s3://, gs:// or other fsspec URL)")
    try:
        fs, path = fsspec.core.url_to_fs(url)
    except ImportError as exc:
        if scheme in EXTRAS:
            pkg, extra = EXTRAS[scheme]
            raise UsageError(f"{url}: reading {scheme}:// needs {pkg}, which is not installed: "
                             f"pip install 'traceview[{extra}]'") from None
        if getattr(exc, "name", None):
            raise UsageError(f"{url}: reading {scheme}:// needs {exc.name}, which is not installed: "
                             f"pip install {exc.name}") from None
        said = (known_implementations.get(scheme) or {}).get("err") or _first_line(exc)  # fsspec's own advice
        raise UsageError(f"{url}: reading {scheme}:// needs a package that is not installed: {said}") from None
    except (ValueError, TypeError) as exc:
        raise UsageError(f"{url}: not a URL fsspec can open: {_first_line(exc)}") from None
    return fs, path


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    line = text[0].strip() if text else type(exc).__name__
    return line if len(line) <= _MSG_CHARS else line[:_MSG_CHARS] + "…"


def _run(fs, make_coro, sync_call, timeout: float):
    """Run ``make_coro()`` on an async file system's loop, cancelled after ``timeout`` s (an
    ``asyncio.TimeoutError`` then); a sync file system runs ``sync_call()`` (no deadline)."""
    if getattr(fs, "async_impl", False) and getattr(fs, "loop", None) is not None:
        import asyncio

        from fsspec.asyn import sync

        async def bounded():
            return await asyncio.wait_for(make_coro(), timeout)

        return sync(fs.loop, bounded)
    return sync_call()


def _fault(exc: BaseException, what: str, timeout: float) -> TraceviewError:
    """The one-line TraceviewError (without its URL) for a library exception."""
    import asyncio

    name = type(exc).__name__
    text = _first_line(exc)
    if isinstance(exc, TraceviewError):
        return exc
    if isinstance(exc, (asyncio.TimeoutError, TimeoutError)) or name in ("FSTimeoutError", "ReadTimeoutError",
                                                                          "ConnectTimeoutError", "ServerTimeoutError"):
        return RemoteUnreadable(f"no answer within {timeout:g} s while {what} (the server stopped or cannot be "
                                f"reached; ${ENV_TIMEOUT} sets the limit)")
    if isinstance(exc, PermissionError) or "AccessDenied" in text or "Forbidden" in text:
        return RemoteUnreadable(f"access denied while {what}: {text} (credentials come from the storage "
                                "library's own chain: AWS_* / GOOGLE_APPLICATION_CREDENTIALS, config files)")
    if isinstance(exc, FileNotFoundError):
        return NoTraceFound(f"does not exist (no such bucket or object: {text})")
    if name in ("ClientPayloadError", "IncompleteRead", "ContentLengthError", "ResponseStreamingError",
                "ChecksumError") or "Not enough data" in text or "payload is not completed" in text:
        return RemoteUnreadable(f"cut short while {what}: the server ended the transfer before the bytes it "
                                f"announced ({name}: {text})")
    if name == "FileExpired" or "PreconditionFailed" in text:
        return RemoteUnreadable(f"changed while {what} (its version no longer matches the listing); run again")
    if (isinstance(exc, ConnectionError) or name in ("EndpointConnectionError", "ClientConnectorError",
                                                     "ServerDisconnectedError", "ClientOSError",
                                                     "ConnectionClosedError")):
        return RemoteUnreadable(f"cannot reach the server while {what}: {text}")
    return RemoteUnreadable(f"failed while {what}: {name}: {text}")


# ----------------------------------------------------------------------------- listing

def _mtime(info: dict) -> float:
    """Seconds since the epoch of a listing entry's modification time (0.0 when it has none)."""
    for k in ("mtime", "LastModified", "last_modified", "updated", "timeCreated", "created"):
        v = info.get(k)
        if v is None:
            continue
        if isinstance(v, datetime):
            return v.timestamp()
        if isinstance(v, (int, float)):
            return float(v)
        if isinstance(v, str):
            try:
                return datetime.fromisoformat(v.replace("Z", "+00:00")).timestamp()
            except ValueError:
                continue
    return 0.0


#: listing fields that name an object's version, in the order they are trusted
_VERSION_KEYS = ("generation", "ETag", "etag", "VersionId", "version_id", "md5Hash", "checksum")


def _version(info: dict) -> dict:
    return {k: str(info[k]) for k in _VERSION_KEYS if info.get(k) is not None}


def _md5_hex(info: dict) -> str | None:
    """The MD5 of an object's bytes the listing states: S3's ETag of a single-part upload (32
    hex digits, no ``-N`` part count), GCS's ``md5Hash`` (base64); else None."""
    m = info.get("md5Hash")
    if isinstance(m, str):
        try:
            return base64.b64decode(m).hex()
        except ValueError:
            return None
    e = info.get("ETag") or info.get("etag")
    if isinstance(e, str):
        e = e.strip('"').lower()
        if re.fullmatch(r"[0-9a-f]{32}", e):
            return e
    return None


def _segments(rel: str) -> list[str]:
    """Path segments of a key, each safe as a local folder or file name."""
    out = []
    for s in rel.split("/"):
        if s in ("", ".", ".."):
            s = {"": "%2F", ".": "%2E", "..": "%2E%2E"}[s]
        if len(s.encode()) > 200:
            s = s[:80] + "-" + hashlib.sha256(s.encode()).hexdigest()[:16]
        out.append(s.replace("\x00", "%00"))
    return out


def copies_root() -> tuple[Path, bool]:
    """(folder holding local copies of remote files, whether a copy found there may be
    reused): ``<cache root>/remote``, else ``$TMPDIR/traceview-remote-<uid>`` (fetched afresh)."""
    from traceview.read.cache import default_root

    root = default_root()
    if root is not None:
        return root / "remote", True
    uid = os.getuid() if hasattr(os, "getuid") else 0
    return Path(tempfile.gettempdir()) / f"traceview-remote-{uid}", False


def _mirror(base: Path, url: str) -> Path:
    from urllib.parse import urlsplit

    u = urlsplit(url)
    return base.joinpath(*_segments(u.scheme.lower()), *_segments(u.netloc or "_"),
                         *(_segments(u.path.strip("/")) if u.path.strip("/") else []))


def _listing(url: str, fs, fpath: str, timeout: float):
    """{name: info} of every object under ``fpath`` (the object itself when it is one), in one
    recursive paged listing."""
    try:
        return _run(fs, lambda: fs._find(fpath, detail=True), lambda: fs.find(fpath, detail=True),
                    timeout * LIST_TIMEOUTS)
    except TraceviewError:
        raise
    except Exception as exc:  # noqa: BLE001 - every library fault becomes one line naming the URL
        err = _fault(exc, "listing", timeout * LIST_TIMEOUTS)
        if isinstance(err, NoTraceFound):
            bucket = fpath.split("/", 1)[0]
            raise NoTraceFound(f"does not exist: no bucket or object '{bucket}' can be listed ({_first_line(exc)})", url) from None
        raise type(err)(err.fault, url) from None


def discover(url: str, *, run=None, all_runs=False, stale_after_s=7 * 24 * 3600, now=None,
             run_hint: str = "pass --run or --all-runs", group_hosts: bool = True):
    """:func:`traceview.read.discover.discover` of a URL (module doc); the chosen files are
    fetched before it returns. Raises UsageError, NoTraceFound, RemoteUnreadable (module doc)
    and discover's own errors, each naming the URL."""
    url = url.rstrip("/") if not url.endswith("://") else url
    timeout = timeout_s()
    fs, fpath = _filesystem(url)
    fpath = fpath.rstrip("/")
    if not fpath:
        raise UsageError(f"{url}: give a bucket (and a folder in it), e.g. {_URL_RE.match(url).group(1)}://bucket/logdir")
    entries = _listing(url, fs, fpath, timeout)
    if not entries:  # a file system whose find lists folders only (http): the URL may name one file
        try:
            info = _run(fs, lambda: fs._info(fpath), lambda: fs.info(fpath), timeout)
            if info.get("type", "file") == "file":
                entries = {fpath: info}
        except Exception:  # noqa: BLE001 - nothing there: said below as for an empty listing
            pass
    base, reuse = copies_root()
    local_root = _mirror(base, url)
    scheme = _URL_RE.match(url).group(1)
    found, infos, skipped = [], {}, []
    single = len(entries) == 1 and next(iter(entries)).rstrip("/") == fpath
    for name, info in sorted(entries.items()):
        if info.get("type", "file") != "file":
            continue
        rel = name[len(fpath):].lstrip("/") if name.startswith(fpath) else name
        parts = rel.split("/") if rel else []
        if any(p in PRUNED_DIRS for p in parts[:-1]):
            continue
        fname = parts[-1] if parts else name.rsplit("/", 1)[-1]
        c = classify(fname)
        if c is None:
            continue
        local = local_root.joinpath(*_segments(rel)) if rel else local_root
        obj_url = f"{url}/{rel}" if rel else url
        if info.get("size") is None:  # a listing without sizes (http links): ask for this trace file's
            try:
                info = {**info, **_run(fs, lambda: fs._info(name), lambda: fs.info(name), timeout)}
            except Exception as exc:  # noqa: BLE001
                err = _fault(exc, "asking for its size", timeout)
                raise type(err)(err.fault, obj_url) from None
        size = int(info.get("size") or 0)
        if size == 0:
            skipped.append((local, "empty file (0 bytes): an interrupted profiler export?"))
            continue
        found.append((local, c[0], c[1], size, _mtime(info) or time.time()))  # no date listed: not stale
        infos[str(local)] = (obj_url, name, info)
    if single and not found:
        c = classify(fpath.rsplit("/", 1)[-1])
        why = ("empty file (0 bytes): an interrupted profiler export?" if c is not None
               else f"not a trace file (expected a name matching {', '.join(PATTERNS)})")
        raise NoTraceFound(why, url)
    if not found:
        n = len(entries)
        extra = f"; {len(skipped)} empty file(s), first: {shown(skipped[0][0], local_root, url)}" if skipped else ""
        raise NoTraceFound(f"no trace files found ({n:,} object(s) listed, none matching {', '.join(PATTERNS)}{extra})"
                           if n else "no such bucket folder or object: nothing is listed under it", url)
    # one object: its folder (the run's) is named too
    copies, copies_url = (local_root.parent, url.rsplit("/", 1)[0]) if single else (local_root, url)
    try:
        disc = discover_local(local_root, run=run, all_runs=all_runs, stale_after_s=stale_after_s, now=now,
                              run_hint=run_hint, group_hosts=group_hosts, listing=(found, single))
    except TraceviewError as exc:
        raise type(exc)(shown(exc.fault, copies, copies_url), shown(exc.path, copies, copies_url)) from None
    disc.skipped.extend(skipped)
    out = RemoteDiscovery(**{f.name: getattr(disc, f.name) for f in dataclasses.fields(disc) if f.init},
                          url=url, copies=copies, copies_url=copies_url)
    out.reasons = [out.shown(r) for r in out.reasons]
    out.warnings = [out.shown(w) for w in out.warnings]
    chosen = {str(tf.path) for tf in out.files}
    _prune(base, keep=chosen)
    t0, fetched = time.monotonic(), 0
    for tf in out.files:
        obj_url, name, info = infos[str(tf.path)]
        fetched += fetch(fs, name, info, tf.path, obj_url, reuse=reuse, timeout=timeout)
        out.urls[str(tf.path)] = obj_url
    if fetched:
        out.reasons.append(f"fetched {fetched:,} bytes from {scheme}:// in {time.monotonic() - t0:.1f} s into the "
                           f"local copy {local_root} (kept for the next run)" if reuse else
                           f"fetched {fetched:,} bytes from {scheme}:// in {time.monotonic() - t0:.1f} s into "
                           f"{local_root} (caches off: fetched afresh every run)")
    elif out.files:
        out.reasons.append(f"read the local copy {local_root} of {len(out.files)} unchanged remote file(s) "
                           "(same size and version as listed)")
    return out


# ----------------------------------------------------------------------------- fetching

def _record_path(local: Path) -> Path:
    return local.with_name(f".{local.name}.remote.json")


def _record(obj_url: str, info: dict) -> dict:
    return {"url": obj_url, "size": int(info.get("size") or 0), "version": _version(info), "mtime": _mtime(info)}


def fetch(fs, name: str, info: dict, local: Path, obj_url: str, *, reuse: bool = True,
          timeout: float | None = None) -> int:
    """Make ``local`` a copy of the object ``name`` of ``fs`` as listed (``info``); returns the
    bytes fetched (0 when a copy of the same URL, size and version was there). Raises
    RemoteUnreadable / NoTraceFound naming ``obj_url``."""
    timeout = timeout_s() if timeout is None else timeout
    want = _record(obj_url, info)
    rec = _record_path(local)
    if reuse:
        try:
            have = json.loads(rec.read_text(encoding="utf-8"))
            if have == want and local.stat().st_size == want["size"]:
                os.utime(rec)  # recently used: kept by the pruning
                return 0
        except (OSError, ValueError):
            pass
    size = want["size"]
    try:
        local.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=local.parent)
    except OSError as exc:
        raise RemoteUnreadable(f"cannot write its local copy under {local.parent}: {exc.strerror or exc}", obj_url) from None
    try:
        with os.fdopen(fd, "wb") as fh:
            digest = _copy(fs, name, size, fh, timeout, obj_url)
        md5 = _md5_hex(info)
        if md5 is not None and digest != md5:
            raise RemoteUnreadable(f"changed while read: its bytes do not match the listed MD5 {md5} (the object "
                                   "was replaced or cut short during the fetch); run again", obj_url)
        if md5 is None:  # no checksum to check: the version must not have moved
            try:
                after = _run(fs, lambda: fs._info(name), lambda: fs.info(name), timeout)
            except Exception as exc:  # noqa: BLE001
                err = _fault(exc, "checking its version after the fetch", timeout)
                raise type(err)(err.fault, obj_url) from None
            if _version(after) != want["version"] or int(after.get("size") or 0) != size:
                raise RemoteUnreadable("changed while read: its version or size moved during the fetch; run again",
                                       obj_url)
        if want["mtime"]:
            os.utime(tmp, (want["mtime"], want["mtime"]))
        os.replace(tmp, local)
        tmp = None
        rtmp = rec.with_name(rec.name + ".tmp")
        rtmp.write_text(json.dumps(want), encoding="utf-8")
        os.replace(rtmp, rec)
    except OSError as exc:  # the library's faults are TraceviewErrors by now: this is the local disk
        raise RemoteUnreadable(f"cannot write its local copy {local}: {exc.strerror or exc}", obj_url) from None
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
    return size


def _copy(fs, name: str, size: int, fh, timeout: float, obj_url: str) -> str:
    """Write the object's ``size`` bytes to ``fh`` in ranged reads; returns their MD5 (hex).
    Every range must come back whole and within ``timeout`` seconds."""
    md5 = hashlib.md5(usedforsecurity=False)
    ranges = [(a, min(a + CHUNK_BYTES, size)) for a in range(0, size, CHUNK_BYTES)]
    done = 0
    for i in range(0, len(ranges), CONCURRENCY):
        rs = ranges[i:i + CONCURRENCY]
        try:
            got = _read_ranges(fs, name, rs, timeout)
        except TraceviewError:
            raise
        except Exception as exc:  # noqa: BLE001 - every library fault becomes one line naming the URL
            err = _fault(exc, f"reading it ({done:,} of {size:,} bytes read)", timeout)
            raise type(err)(err.fault, obj_url) from None
        for (a, b), data in zip(rs, got):
            _check_range(data, a, b, size, obj_url)
            fh.write(data)
            md5.update(data)
            done = b
    return md5.hexdigest()


def _read_ranges(fs, name: str, rs: list, timeout: float) -> list:
    """The bytes of each (start, end) range of the object, read concurrently on an async file
    system (each cancelled after ``timeout`` s), one after the other on a sync one."""
    if getattr(fs, "async_impl", False) and getattr(fs, "loop", None) is not None:
        import asyncio

        from fsspec.asyn import sync

        async def window():
            return await asyncio.gather(*(asyncio.wait_for(fs._cat_file(name, start=a, end=b), timeout)
                                          for a, b in rs))

        return sync(fs.loop, window)
    return [fs.cat_file(name, start=a, end=b) for a, b in rs]


def _check_range(data, a: int, b: int, size: int, obj_url: str) -> None:
    if len(data) != b - a:
        raise RemoteUnreadable(f"cut short: bytes {a:,}-{b:,} of its {size:,} came back as {len(data):,} bytes "
                               "(the object shrank or the server ended the transfer early)", obj_url)


# ----------------------------------------------------------------------------- pruning

def _prune(base: Path, keep: set[str], max_bytes: int | None = None) -> int:
    """Delete local copies under ``base``, least recently used first, until they hold at most
    ``max_bytes`` (default ``$TRACEVIEW_CACHE_MAX_BYTES``, else 4 GiB); never one in ``keep``
    (paths as str). Returns the number deleted. Never raises."""
    from traceview.read.cache import DEFAULT_MAX_BYTES, ENV_MAX

    if max_bytes is None:
        try:
            max_bytes = int(os.environ.get(ENV_MAX, "") or DEFAULT_MAX_BYTES)
        except ValueError:
            max_bytes = DEFAULT_MAX_BYTES
    entries, total = [], 0
    try:
        for dirpath, _dirs, files in os.walk(base):
            for f in files:
                if not (f.startswith(".") and f.endswith(".remote.json")):
                    if f.startswith(".tmp-"):
                        p = os.path.join(dirpath, f)
                        try:
                            if time.time() - os.stat(p).st_mtime > 3600:  # a fetch that died
                                os.unlink(p)
                        except OSError:
                            pass
                    continue
                local = os.path.join(dirpath, f[1:-len(".remote.json")])
                try:
                    used = os.stat(os.path.join(dirpath, f)).st_mtime
                    size = os.stat(local).st_size
                except OSError:
                    continue
                total += size
                entries.append((used, size, local))
    except OSError:
        return 0
    removed = 0
    for used, size, local in sorted(entries):
        if total <= max_bytes:
            break
        if local in keep:
            continue
        for p in (local, str(_record_path(Path(local)))):
            try:
                os.unlink(p)
            except OSError:
                pass
        total -= size
        removed += 1
    return removed


def clear(base: Path | None = None) -> None:
    """Delete every local copy of remote files (``base``: default :func:`copies_root`)."""
    shutil.rmtree(base or copies_root()[0], ignore_errors=True)
