"""Finding trace files: which run, which hosts, which files, and why.

``discover(path)`` accepts whatever a user is likely to type: a log dir (the folder given to
``jax.profiler.trace``), its ``plugins/profile`` folder, one run folder, one trace file, or any
folder above them (``.`` included). It walks the tree (stat only: no file is opened, nothing
is written), groups what it finds into *runs* and *hosts*, picks what to read and explains the
choice in :attr:`Discovery.reasons`, and lists the traps it noticed in
:attr:`Discovery.warnings`.

On-disk layout written by the profiler::

    <log_dir>/plugins/profile/<YYYY_MM_DD_HH_MM_SS>/<host>.xplane.pb
                                                   /<host>.trace.json.gz
                                                   /perfetto_trace.json.gz   (optional copy)

The traps this module guards against:

* **stale trace** — a log dir accumulates one run folder per profiling session; tools that
  read "whatever is there" silently show an old run. We read the newest run, say so, list the
  others with their ages, and warn when there are several or when the chosen one is old.
* **same-second collision** — two sessions started in the same second share one run folder
  and the second overwrites the first, possibly only partly: a host whose ``.xplane.pb`` and
  ``.trace.json.gz`` were written far apart gets a warning.
* **``None/``** — ``jax.profiler.start_trace(None)`` writes to ``./None/plugins/profile/``.
* **stray files** — trace files lying loose next to each other (not in a run folder) are read
  as the hosts of one run, with a warning.
* **a fleet captured host by host** — each host of a multi-host capture may write its own run
  folder, named by its own clock seconds apart. The newest run, when it holds one host, is
  read together with the older run folders beside it (same ``plugins/profile``) dated within
  :data:`HOST_GROUP_WINDOW_S` of it that hold one host each, none a host already taken; the
  first folder that breaks a rule ends the group (a host seen again is an earlier session).
  A reason names the folders and the window; :attr:`Discovery.fleet` lists them. Not with a
  run named or all runs (``group_hosts=False``: never). Their clocks differ: the straggler
  analysis estimates the offsets (:mod:`traceview.analysis.communication.stragglers`).
"""

from __future__ import annotations

import errno
import os
import re
import stat as _stat
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from traceview.errors import NoTraceFound, TraceUnreadable, UsageError

#: File-name patterns searched for, as shown to users.
PATTERNS: tuple[str, ...] = ("*.xplane.pb", "*.xplane.pb.gz", "*.trace.json.gz", "*.trace.json", "perfetto_trace.json.gz")

#: kind -> preference when a host has several files (lower is preferred).
_KIND_RANK = {"xplane": 0, "trace_json": 1, "perfetto": 2}

#: Run folder names written by the profiler (local time, 1-second resolution).
RUN_NAME_RE = re.compile(r"^(\d{4})_(\d{2})_(\d{2})_(\d{2})_(\d{2})_(\d{2})$")

#: Folders never descended into below the starting folder (they hold no profiles, and
#: package folders can be huge or ship test traces of their own).
PRUNED_DIRS = frozenset({
    ".git", ".hg", ".svn", "__pycache__", "node_modules", ".venv", "venv", "site-packages",
    ".tox", ".nox", ".mypy_cache", ".pytest_cache", ".ruff_cache", ".ipynb_checkpoints",
})

#: Seconds a run may be dated after now before it is taken as dated in the future (clock
#: skew): run folder names have 1-second resolution and a copy's mtime may lag a little.
FUTURE_SLACK_S = 60.0

#: Skipped paths named in the provenance (the rest are counted; all are in ``Discovery.skipped``).
SKIPPED_NAMED = 3

#: File systems that hold no traces and whose walk is endless or harmful (process folders,
#: devices, kernel state): a folder on one is not entered unless it is the path given.
PSEUDO_FILESYSTEMS = frozenset({
    "proc", "sysfs", "devtmpfs", "devpts", "cgroup", "cgroup2", "securityfs", "debugfs", "tracefs", "pstore",
    "bpf", "mqueue", "hugetlbfs", "configfs", "fusectl", "binfmt_misc", "efivarfs", "selinuxfs", "rpc_pipefs",
    "nsfs", "autofs",
})


def pseudo_mounts(mounts: str = "/proc/self/mounts") -> frozenset[str]:
    """Mount points of :data:`PSEUDO_FILESYSTEMS` (Linux ``/proc/self/mounts``; elsewhere, and
    when it cannot be read, ``/proc``, ``/sys`` and ``/dev``)."""
    try:
        with open(mounts, encoding="utf-8", errors="replace") as fh:
            points = {f[1].replace("\\040", " ") for f in (line.split() for line in fh)
                      if len(f) > 2 and f[2] in PSEUDO_FILESYSTEMS}
    except OSError:
        points = {"/proc", "/sys", "/dev"}
    return frozenset(points)


#: Two files of one host written further apart than this (seconds) get a warning.
MTIME_MISMATCH_S = 60.0

#: Run folders of one host each, dated (by their names) at most this many seconds before the
#: newest run, are read with it as one capture (module doc). A host exports its trace when
#: the capture stops, so its folder is named within seconds of the others'; 60 s also spans
#: a large trace's export, while sessions repeated minutes apart stay apart.
HOST_GROUP_WINDOW_S = 60.0
#: A folder beyond the window whose distance from the newest is a whole number of quarter
#: hours within the window, from half an hour to 26 hours (the offsets between time zones),
#: gets a warning: folder names are local time.
ZONE_STEP_S = 900.0
ZONE_MIN_S, ZONE_MAX_S = 1800.0, 26 * 3600.0

PERFETTO_NAME = "perfetto_trace.json.gz"
_PERFETTO_HOST = "perfetto_trace"


def classify(name: str) -> tuple[str, str] | None:
    """Classify a file name: ``(kind, host)`` or None when it is not a trace file.

    kind is ``"xplane"`` (``<host>.xplane.pb``, or gzipped ``<host>.xplane.pb.gz`` as projects
    publish them), ``"trace_json"`` (``<host>.trace.json.gz``
    or ``<host>.trace.json``) or ``"perfetto"`` (``perfetto_trace.json.gz``, whose host is
    not in its name: ``"perfetto_trace"`` is returned).
    """
    if name == PERFETTO_NAME:
        return "perfetto", _PERFETTO_HOST
    for suffix, kind in ((".xplane.pb", "xplane"), (".xplane.pb.gz", "xplane"), (".trace.json.gz", "trace_json"),
                         (".trace.json", "trace_json")):
        if name.endswith(suffix) and len(name) > len(suffix):
            return kind, name[: -len(suffix)]
    return None


def host_from_filename(path: str | os.PathLike) -> str:
    """The host name a trace file's name implies (its stem before ``.xplane.pb`` /
    ``.trace.json[.gz]``), or the whole file name when it follows no known pattern."""
    name = os.path.basename(os.fspath(path))
    c = classify(name)
    return c[1] if c else name


def parse_run_timestamp(name: str) -> datetime | None:
    """Parse a run folder name ``YYYY_MM_DD_HH_MM_SS`` (local time); None if it is not one."""
    m = RUN_NAME_RE.match(name)
    if not m:
        return None
    try:
        return datetime(*(int(g) for g in m.groups()))
    except ValueError:
        return None


@dataclass(frozen=True)
class TraceFile:
    """One trace file found on disk (from ``stat``; never opened by discovery).

    ``size`` is in bytes, ``mtime`` in seconds since the epoch. ``run`` is the name of the
    :class:`Run` the file belongs to ("" for a single file outside any run folder).
    """

    path: Path
    host: str
    kind: str  # "xplane" | "trace_json" | "perfetto"
    size: int
    mtime: float
    run: str


@dataclass
class Run:
    """The trace files of one profiling session: one folder.

    ``name`` is the run folder name (``YYYY_MM_DD_HH_MM_SS``), or the parent folder's name for
    trace files lying outside a run folder, or "" for a single file given directly.
    ``timestamp`` is parsed from the folder name (local time), None when it is not a run name.
    """

    name: str
    directory: Path
    files: list[TraceFile]
    timestamp: datetime | None

    @property
    def hosts(self) -> list[str]:
        """Host names in this run, sorted."""
        return sorted({f.host for f in self.files})

    @property
    def time(self) -> float:
        """When the run was captured, seconds since the epoch: the folder's timestamp, else
        the newest file mtime."""
        if self.timestamp is not None:
            return self.timestamp.timestamp()
        return max((f.mtime for f in self.files), default=0.0)

    def age(self, now: float | None = None) -> float:
        """Seconds between :attr:`time` and ``now`` (default: the current time)."""
        return (time.time() if now is None else now) - self.time

    @property
    def under_none(self) -> bool:
        """True when the run sits under ``None/plugins/profile`` (``start_trace(None)``)."""
        parts = self.directory.parts
        for i in range(len(parts) - 2):
            if parts[i] == "None" and parts[i + 1] == "plugins" and parts[i + 2] == "profile":
                return True
        return False

    def files_for(self, host: str) -> list[TraceFile]:
        """This host's files, preferred first (xplane, then trace.json[.gz], then perfetto)."""
        return sorted((f for f in self.files if f.host == host), key=_file_pref)


@dataclass
class Discovery:
    """What :func:`discover` found and chose.

    ``runs`` are all runs found, newest first; ``selected`` the runs to read; ``files`` the
    files to read: one per (selected run, host), ``.xplane.pb`` preferred. ``reasons`` are
    human-readable lines saying what is read and why; ``warnings`` one line per trap noticed;
    ``skipped`` the (path, why) of folders and files that could not be looked at. ``fleet``:
    the run folders of one capture written host by host, read as one run (newest first;
    empty when none were grouped): they are all in ``selected``.
    """

    root: Path
    runs: list[Run]
    selected: list[Run]
    files: list[TraceFile]
    reasons: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    skipped: list[tuple[Path, str]] = field(default_factory=list)
    fleet: list[Run] = field(default_factory=list)

    def timeline(self, run: str) -> str:
        """The run whose timeline run ``run``'s files are on: the newest folder of the
        :attr:`fleet` for its members, else ``run`` itself."""
        return self.fleet[0].name if self.fleet and any(r.name == run for r in self.fleet) else run

    def siblings(self, tf: TraceFile) -> list[TraceFile]:
        """The other files of ``tf``'s run and host (e.g. the ``.trace.json.gz`` next to a
        chosen ``.xplane.pb``), preferred first."""
        return json_siblings(self, tf, kinds=None)


def json_siblings(discovery: Discovery, tf: TraceFile, kinds: tuple[str, ...] | None = ("trace_json", "perfetto")) -> list[TraceFile]:
    """Files of the same run and host as ``tf`` (other than ``tf``) whose kind is in
    ``kinds`` (default: the Chrome-trace JSON copies), preferred first. Lets a reader compare
    the xplane's event counts with the JSON's (e.g. to show the JSON was truncated)."""
    for r in discovery.runs:
        if r.directory == tf.path.parent and r.name == tf.run:
            return [f for f in r.files_for(tf.host) if f.path != tf.path and (kinds is None or f.kind in kinds)]
    return []


def _file_pref(f: TraceFile):
    # xplane first; among JSON, .gz before plain; then newest
    return (_KIND_RANK.get(f.kind, 9), 0 if f.path.name.endswith(".gz") else 1, -f.mtime, f.path.name)


def _fmt_age(seconds: float) -> str:
    """'3 min', '5 h', '12 days' for an age in seconds (negative: 'in the future')."""
    if seconds < 0:
        return "in the future (clock skew?)"
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    if seconds < 48 * 3600:
        return f"{seconds / 3600:.0f} h"
    return f"{seconds / 86400:.0f} days"


def _age_phrase(seconds: float) -> str:
    """'29 min old', or 'dated in the future (clock skew?)' for a negative age."""
    return "dated in the future (clock skew?)" if seconds < 0 else f"{_fmt_age(seconds)} old"


def _fmt_size(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"  # pragma: no cover


def _walk(root: Path, skipped: list[tuple[Path, str]]) -> list[tuple[Path, str, str, int, float]]:
    """Depth-first walk of ``root`` following directory symlinks, each real folder once.

    Returns (path, kind, host, size, mtime) for each trace file. Folders that cannot be
    listed and files that cannot be stat'ed go to ``skipped``; folders on a pseudo file system
    (:func:`pseudo_mounts`: /proc, /sys...) are not entered. Nothing is opened but folders.
    """
    found = []
    visited: set[tuple[int, int]] = set()
    stack = [(root, True)]
    pseudo = pseudo_mounts()
    real = os.path.realpath(root)
    on = next((m for m in pseudo if real == m or real.startswith(m.rstrip("/") + "/")), None)
    if on is not None and on != "/":
        skipped.append((root, f"on a pseudo file system ({on}): not entered, its links lead into every "
                              "process's folders"))
        return found
    while stack:
        d, is_root = stack.pop()
        try:
            st = os.stat(d)
        except OSError as exc:
            skipped.append((d, f"cannot stat folder: {exc.strerror or exc}"))
            continue
        key = (st.st_dev, st.st_ino)
        if key in visited:
            skipped.append((d, "already visited (symlink loop or duplicate link); not followed again"))
            continue
        visited.add(key)
        try:
            with os.scandir(d) as it:
                entries = list(it)
        except OSError as exc:
            skipped.append((d, f"cannot list folder: {exc.strerror or exc}"))
            continue
        subdirs = []
        for e in entries:
            name = e.name
            try:
                is_dir = e.is_dir(follow_symlinks=True)
            except OSError:
                is_dir = False
            if is_dir:
                if name not in PRUNED_DIRS and not (pseudo and os.path.realpath(e.path) in pseudo):
                    subdirs.append(Path(e.path))
                continue
            c = classify(name)
            if c is None:
                continue
            p = Path(e.path)
            try:
                fst = e.stat(follow_symlinks=True)
            except OSError as exc:
                why = (("symbolic link in a loop of links" if exc.errno == errno.ELOOP else "broken symlink")
                       if e.is_symlink() else f"cannot stat: {exc.strerror or exc}")
                skipped.append((p, why))
                continue
            if not _stat.S_ISREG(fst.st_mode):
                skipped.append((p, "not a regular file"))
                continue
            if fst.st_size == 0:
                skipped.append((p, "empty file (0 bytes): an interrupted profiler export?"))
                continue
            found.append((p, c[0], c[1], fst.st_size, fst.st_mtime))
        # sorted push so that the walk order (and thus all output) is deterministic
        for sd in sorted(subdirs, reverse=True):
            stack.append((sd, False))
    return found


def _group(found, root: Path, single_file: bool) -> list[Run]:
    by_dir: dict[Path, list] = {}
    for item in found:
        by_dir.setdefault(item[0].parent, []).append(item)
    runs: list[Run] = []
    for d, items in by_dir.items():
        ts = parse_run_timestamp(d.name)
        if single_file and ts is None:
            name = ""
        else:
            name = d.name
        # the perfetto copy carries no host in its name: give it the folder's only host
        hosts = {h for (_, k, h, _, _) in items if k != "perfetto"}
        files = []
        for p, kind, host, size, mtime in items:
            if kind == "perfetto" and len(hosts) == 1:
                host = next(iter(hosts))
            files.append((p, kind, host, size, mtime))
        runs.append(Run(name=name, directory=d, files=[], timestamp=ts))
        runs[-1].files = [TraceFile(p, h, k, s, m, name) for (p, k, h, s, m) in sorted(files)]
    # disambiguate equal names (e.g. two log dirs holding runs of the same second)
    counts: dict[str, int] = {}
    for r in runs:
        counts[r.name] = counts.get(r.name, 0) + 1
    for r in runs:
        if counts[r.name] > 1:
            try:
                rel = r.directory.relative_to(root)
                new = rel.as_posix() if rel.parts else r.name
            except ValueError:
                new = str(r.directory)
            if new != r.name:
                r.files = [TraceFile(f.path, f.host, f.kind, f.size, f.mtime, new) for f in r.files]
                r.name = new
    runs.sort(key=lambda r: (-r.time, r.name))
    return runs


def _select_files(r: Run, reasons: list[str], warnings: list[str], skipped: dict | None = None) -> list[TraceFile]:
    """One file per host of ``r``, the reason for each choice appended to ``reasons``;
    ``skipped``: path -> why, of the files the walk skipped (an empty .xplane.pb)."""
    chosen = []
    for host in r.hosts:
        fs = r.files_for(host)
        best = fs[0]
        chosen.append(best)
        others = fs[1:]
        gone = [(n, skipped[r.directory / n]) for n in (f"{host}.xplane.pb", f"{host}.xplane.pb.gz")
                if skipped and r.directory / n in skipped] if best.kind != "xplane" and not others else []
        if gone:
            reasons.append(f"host {host}: reading {best.path.name} ({_fmt_size(best.size)}): its {gone[0][0]} is "
                           f"skipped ({gone[0][1]}); the Chrome-trace JSON carries fewer details (TPU: shapes from "
                           "HLO text; CPU/GPU: no shapes, no program ids)")
            continue
        if not others:
            why = {
                "xplane": "the only file for this host",
                "trace_json": "no .xplane.pb for this host: the Chrome-trace JSON carries fewer details "
                              "(TPU: shapes from HLO text; CPU/GPU: no shapes, no program ids)",
                "perfetto": "the only file for this host (a Perfetto copy of the trace JSON)",
            }[best.kind]
            reasons.append(f"host {host}: reading {best.path.name} ({_fmt_size(best.size)}): {why}")
            continue
        if best.kind == "xplane":
            reasons.append(
                f"host {host}: reading {best.path.name} ({_fmt_size(best.size)}), preferred over "
                f"{', '.join(o.path.name for o in others)}: the .xplane.pb is complete (the JSON export drops "
                "program ids and FLOPs and is capped at 1M-5M events)"
            )
        else:
            reasons.append(
                f"host {host}: reading {best.path.name} ({_fmt_size(best.size)}); not read: "
                f"{', '.join(o.path.name for o in others)} (copies of the same trace)"
            )
        # same host, files written far apart: they may come from different sessions
        xp = [f for f in fs if f.kind == "xplane"]
        js = [f for f in fs if f.kind == "trace_json"]
        for a in xp:
            for b in js:
                gap = abs(a.mtime - b.mtime)
                if gap > MTIME_MISMATCH_S:
                    warnings.append(
                        f"run {r.name or r.directory}: host {host}: {a.path.name} and {b.path.name} were written "
                        f"{gap:.0f} s apart; they may come from different profiling sessions (sessions started "
                        f"in the same second share one run folder and overwrite each other's files)"
                    )
    return chosen


def _describe_run(r: Run, now: float) -> str:
    when = r.timestamp.strftime("%Y-%m-%d %H:%M:%S") if r.timestamp else "newest file " + datetime.fromtimestamp(r.time).strftime("%Y-%m-%d %H:%M:%S")
    hosts = r.hosts
    return f"{r.name or r.directory.name or str(r.directory)} ({when}, {_age_phrase(r.age(now))}, {len(hosts)} host{'s' if len(hosts) != 1 else ''})"


def _missing(root: Path) -> int | None:
    """None when ``root`` exists, else why not (``ENOENT``, ``ENOTDIR``, ``ELOOP``: a loop of
    links). Raises :class:`TraceUnreadable` naming ``root`` when it cannot even be looked at
    (a folder on its way without search permission, a name too long): not "does not exist"."""
    try:
        os.stat(root)
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP):
            return exc.errno
        raise TraceUnreadable(f"cannot be looked at ({exc.strerror or exc})", root) from None
    return None


def discover(
    path: str | os.PathLike,
    *,
    run: str | None = None,
    all_runs: bool = False,
    stale_after_s: float | None = 7 * 24 * 3600,
    now: float | None = None,
    run_hint: str = "pass --run or --all-runs",
    group_hosts: bool = True,
    listing: tuple | None = None,
) -> Discovery:
    """Find the trace files under ``path`` and choose which to read.

    Args:
        path: a trace file, a run folder, a ``plugins/profile`` folder, a log dir, or any
            folder above (``.``). Folders are walked at any depth, following directory
            symlinks once per real folder (loops terminate), skipping folders that cannot be
            listed (recorded in ``skipped``) and :data:`PRUNED_DIRS` below the start.
        run: read this run only: a run name as listed in ``Discovery.runs`` (folder name
            ``YYYY_MM_DD_HH_MM_SS``; a folder path relative to ``path`` when two runs share a
            name).
        all_runs: read every run found (newest first).
        stale_after_s: warn when the chosen run is older than this many seconds (None: never).
        now: the current time, seconds since the epoch (default ``time.time()``); for ages.
        run_hint: how the caller's user chooses a run, for the warnings ("pass --run or
            --all-runs" for analyze; diff has --run-base / --run-treatment).
        group_hosts: read the run folders of a capture written host by host as one run
            (:data:`HOST_GROUP_WINDOW_S`, module doc); False reads the newest folder alone.
        listing: ``(found, single_file)`` listed elsewhere instead of walking ``path``
            (:mod:`traceview.read.remote`: an object store's listing, ``path`` the folder its
            local copies go to): found is [(path, kind, host, size bytes, mtime s)].

    A URL (``gs://``, ``s3://``, any fsspec ``scheme://``) is listed and its chosen files
    fetched by :func:`traceview.read.remote.discover` (a
    :class:`~traceview.read.remote.RemoteDiscovery`; ``file://`` is the local path).

    Returns:
        A :class:`Discovery`. Runs are ordered newest first by their folder timestamp, else
        by their newest file mtime; a run dated more than :data:`FUTURE_SLACK_S` after ``now``
        (clock skew, a copy from another time zone) is not taken as the newest while a run
        not in the future exists (a warning names both). One file is read per (run, host): ``.xplane.pb``, else
        ``.trace.json.gz``, else ``.trace.json``, else ``perfetto_trace.json.gz``.

    Raises:
        NoTraceFound: ``path`` does not exist, is a file that is not a trace, or no trace file
            was found under it.
        UsageError: ``path`` is empty (never read as ``.``), ``run`` names no run found (the
            message lists the runs), or both ``run`` and ``all_runs`` are given.

    Never opens a trace file and never writes anything.
    """
    if not str(os.fspath(path)).strip():
        raise UsageError(f"the path is empty ({os.fspath(path)!r}); give a trace file or folder ('.' for this one)")
    if listing is None and isinstance(path, str) and "://" in path:  # an object store (read/remote.py)
        from traceview.read import remote

        if remote.is_url(path):
            if remote.local_path(path) is None:
                return remote.discover(path, run=run, all_runs=all_runs, stale_after_s=stale_after_s, now=now,
                                       run_hint=run_hint, group_hosts=group_hosts)
            path = remote.local_path(path)
    root = Path(os.fspath(path))
    now = time.time() if now is None else now
    if run is not None and all_runs:
        raise UsageError("give either a run name or all runs, not both")
    missing = _missing(root) if listing is None else None
    if missing is not None:
        if os.path.islink(root):
            if missing == errno.ELOOP:  # links that lead back to themselves
                raise NoTraceFound(f"is a symbolic link that leads back to itself (to {os.readlink(root)}, "
                                   "a loop of links)", root)
            raise NoTraceFound(f"is a broken symbolic link (to {os.readlink(root)}, which does not exist)", root)
        raise NoTraceFound("does not exist", root)
    skipped: list[tuple[Path, str]] = []
    patterns = ", ".join(PATTERNS)
    single_file = not root.is_dir() if listing is None else listing[1]
    if listing is not None:
        found = list(listing[0])
    elif single_file:
        c = classify(root.name)
        if c is None:
            raise NoTraceFound(f"not a trace file (expected a name matching {patterns})", root)
        try:
            st = root.stat()
        except OSError as exc:
            raise NoTraceFound(f"cannot stat: {exc.strerror or exc}", root) from None
        if not _stat.S_ISREG(st.st_mode):
            raise NoTraceFound("not a regular file (a FIFO, socket or device?)", root)
        if st.st_size == 0:
            raise NoTraceFound("empty file (0 bytes): an interrupted profiler export?", root)
        found = [(root, c[0], c[1], st.st_size, st.st_mtime)]
    else:
        found = _walk(root, skipped)
        # named in path order, numbers by value (h2 before h10), not in directory order
        skipped.sort(key=lambda pw: [(0, int(t), "") if t.isdigit() else (1, 0, t)
                                     for t in re.split(r"(\d+)", str(pw[0]))])
    if not found:
        if skipped and skipped[0][0] == root and skipped[0][1].startswith("cannot list folder"):
            # the folder given cannot be read at all: unreadable (4), as one that cannot be looked at
            raise TraceUnreadable(skipped[0][1], root)
        extra = f"; {len(skipped)} path(s) skipped, first: {skipped[0][0]}: {skipped[0][1]}" if skipped else ""
        raise NoTraceFound(f"no trace files found (searched at any depth for {patterns}){extra}", root)

    runs = _group(found, root, single_file)
    reasons: list[str] = []
    warnings: list[str] = []
    n_files = sum(len(r.files) for r in runs)
    if single_file:
        r = runs[0]
        of_run = f", of run {r.name}" if r.timestamp is not None else ""
        reasons.append(f"reading {root}: the file given{of_run} (written "
                       f"{datetime.fromtimestamp(r.files[0].mtime).strftime('%Y-%m-%d %H:%M:%S')}, "
                       f"{_age_phrase(now - r.files[0].mtime)})")
    else:
        reasons.append(
            f"searched {root} for {patterns}: {n_files} file{'s' if n_files != 1 else ''} "
            f"in {len(runs)} run{'s' if len(runs) != 1 else ''}"
        )

    fleet: list[Run] = []
    if all_runs:
        selected = list(runs)
        reasons.append(f"reading all {len(runs)} runs (all runs requested): " + "; ".join(_describe_run(r, now) for r in runs))
    elif run is not None:
        matches = [r for r in runs if r.name == run]
        if not matches:
            matches = [r for r in runs if r.directory.name == run or str(r.directory) == run]
            if not matches:
                try:
                    matches = [r for r in runs if r.directory.relative_to(root).as_posix() == run.strip("/")]
                except ValueError:
                    matches = []
        if not matches and single_file:  # a file is its own run: --run cannot choose another
            of_run = f" of run {runs[0].name}" if runs[0].timestamp is not None else ""
            raise UsageError(f"no run named {run!r}: {root} is one trace file{of_run} (--run chooses among "
                             "the runs of a folder)")
        if not matches:
            avail = ", ".join(r.name or str(r.directory) for r in runs)
            raise UsageError(f"no run named {run!r} under {root}; available runs (newest first): {avail}")
        if len(matches) > 1:
            avail = ", ".join(r.name for r in matches)
            raise UsageError(f"run name {run!r} is ambiguous under {root}: {avail}")
        selected = matches
        reasons.append(f"reading run {_describe_run(selected[0], now)} at {selected[0].directory}: selected by name")
    else:
        # Real runs (YYYY_MM_DD_HH_MM_SS folders) win over loose files: a summary or a copy
        # dropped next to them is newer by mtime but is not the session that was profiled.
        timed = [r for r in runs if r.timestamp is not None]
        pool = timed if timed else runs
        future = [r for r in pool if r.time > now + FUTURE_SLACK_S]
        present = [r for r in pool if r not in future]
        r0 = present[0] if present else pool[0]
        selected = [r0]
        fleet = _host_group(r0, pool, warnings, run_hint) if group_hosts and not single_file else []
        if fleet:
            selected = list(fleet)
        if timed and runs[0] is not r0 and runs[0] not in future:
            loose = [r for r in runs if r.timestamp is None]
            warnings.append(
                f"{sum(len(r.files) for r in loose)} trace file(s) outside any run folder "
                f"({', '.join(str(r.directory) for r in loose)}) are newer than run {r0.name}; reading the run "
                f"folder ({run_hint} to read them)")
        if future:
            names = ", ".join(str(r.name or r.directory) for r in future)
            warnings.append(
                f"{len(future)} run(s) dated in the future (clock skew?): {names}; reading "
                + (f"{r0.name or r0.directory}, the newest run not in the future" if present
                   else f"{r0.name or r0.directory}, the newest of them (no run is dated before now)")
                + f"; {run_hint} to choose")
        basis = "its folder name" if r0.timestamp else "its newest file's mtime (not in a YYYY_MM_DD_HH_MM_SS run folder)"
        if single_file:
            pass  # the file given is named above; its folder is no run
        elif len(runs) > 1:
            reasons.append(f"reading run {_describe_run(r0, now)} at {r0.directory}: the newest of "
                           f"{len(pool)} run(s){' in run folders' if timed else ''}"
                           f"{f' not dated in the future ({len(future)} are)' if future and present else ''}, "
                           f"dated by {basis}")
        else:
            reasons.append(f"reading run {_describe_run(r0, now)} at {r0.directory}: the only run found")
        if fleet:
            hosts = ", ".join(f"{r.hosts[0]} ({r.name})" for r in fleet)
            reasons.append(
                f"read as one run: {len(fleet)} run folders of one host each, dated within "
                f"{fleet[0].time - fleet[-1].time:.0f} s of each other (folders within {HOST_GROUP_WINDOW_S:.0f} s of "
                f"the newest, no host twice, are grouped): {hosts}; each host has its own clock: the straggler "
                "analysis estimates the offsets (--no-group-hosts, or group_hosts=False, reads the newest folder alone)")
        if len(runs) > len(selected):
            what = f"the {len(fleet)} run folders of the newest capture" if fleet else (
                f"{'the newest ' if r0 is runs[0] else 'the newest run folder, ' if not future else ''}"
                f"{r0.name or r0.directory}")
            warnings.append(
                f"{len(runs)} runs found; reading {what}; {run_hint} "
                "to choose (the newest run may not be the session you just profiled if clocks or copies differ)"
            )
    if not all_runs and len(runs) > 1:
        others = [r for r in runs if r not in selected]
        if others:
            reasons.append("other runs, not read: " + "; ".join(_describe_run(r, now) for r in others))

    files: list[TraceFile] = []
    for r in selected:
        if r.under_none:
            reasons.append(
                f"run {r.name} is under {r.directory.parent.parent.parent}: jax.profiler.start_trace(None) "
                "(or a log_dir that is None) writes to ./None/plugins/profile/ in the working directory; "
                "pass a real log dir"
            )
        if r.timestamp is None and len(r.hosts) > 1 and not single_file:
            warnings.append(
                f"{len(r.files)} trace files lie loose in {r.directory} (not in a plugins/profile/"
                f"YYYY_MM_DD_HH_MM_SS run folder); they are read as {len(r.hosts)} hosts of one run: "
                "pass one file to read only that one"
            )
        if all_runs or len(selected) > 1:
            reasons.append(f"run {r.name or r.directory}: hosts {', '.join(r.hosts)}")
        elif r.hosts:
            reasons.append(f"hosts: {', '.join(r.hosts)}")
        files.extend(_select_files(r, reasons, warnings, {p: why for p, why in skipped}))
        # stale: only the newest run read matters (older ones were asked for with all_runs)
        if stale_after_s is not None and r is selected[0] and r.age(now) > stale_after_s:
            when = r.timestamp.strftime("%Y-%m-%d %H:%M:%S") if r.timestamp else datetime.fromtimestamp(r.time).strftime("%Y-%m-%d %H:%M:%S")
            warnings.append(
                f"run {r.name or r.directory} is {_fmt_age(r.age(now))} old (captured {when}): if you just "
                "profiled, the new trace went elsewhere (check the log dir you passed to the profiler)"
            )
    if skipped:
        named = "; ".join(f"{p} ({why})" for p, why in skipped[:SKIPPED_NAMED])
        more = f"; and {len(skipped) - SKIPPED_NAMED} more" if len(skipped) > SKIPPED_NAMED else ""
        reasons.append(f"skipped {len(skipped)} path(s) that could not be read: {named}{more}")
        newest = max((r.time for r in selected), default=None)
        for p, why in skipped:
            if not why.startswith("cannot list folder"):
                continue
            try:
                mtime = os.stat(p).st_mtime
            except OSError:
                mtime = None
            # a run written deep inside leaves the folder's own mtime alone: any unlistable folder may hold one
            changed = (f" and changed after the run read ({_fmt_age(now - mtime)} ago)"
                       if newest is not None and mtime is not None and mtime > newest else "")
            warnings.append(f"folder {p} could not be listed ({why.split(': ', 1)[-1]}){changed}: it may hold a "
                            "newer run, which was not read; fix its permissions or pass it directly")
    return Discovery(root=root, runs=runs, selected=selected, files=files, reasons=reasons, warnings=warnings,
                     skipped=skipped, fleet=fleet)


def _host_group(r0: Run, pool: list[Run], warnings: list[str], run_hint: str) -> list[Run]:
    """The run folders read with ``r0`` as one capture written host by host (module doc),
    newest first, ``r0`` included; [] when there are none. Appends a warning when the folder
    that ended the group shares no host with it and is dated a whole number of quarter hours
    away (a host whose clock or time zone is hours off: its folder is not grouped)."""
    if r0.timestamp is None or len(r0.hosts) != 1:
        return []
    group, taken = [r0], set(r0.hosts)
    beside = [r for r in pool if r is not r0 and r.timestamp is not None and r.directory.parent == r0.directory.parent
              and r.time <= r0.time]  # pool is newest first
    for r in beside:
        gap = r0.time - r.time
        if gap > HOST_GROUP_WINDOW_S or len(r.hosts) != 1 or r.hosts[0] in taken:
            off = gap % ZONE_STEP_S
            if (ZONE_MIN_S - HOST_GROUP_WINDOW_S <= gap <= ZONE_MAX_S + HOST_GROUP_WINDOW_S and len(r.hosts) == 1
                    and r.hosts[0] not in taken and min(off, ZONE_STEP_S - off) <= HOST_GROUP_WINDOW_S):
                warnings.append(
                    f"run {r.name} (host {r.hosts[0]}) is dated {_fmt_age(gap)} before run {r0.name} and shares no "
                    f"host with the run read: if it is the same capture from a host whose clock or time zone is off "
                    f"by hours, it is not read with it (run folders are grouped within {HOST_GROUP_WINDOW_S:.0f} s); "
                    f"{run_hint} to read it")
            break
        group.append(r)
        taken.add(r.hosts[0])
    return group if len(group) > 1 else []


#: bytes compared at a time by :func:`same_bytes`
_COMPARE_CHUNK = 1 << 20


def same_bytes(files: list[TraceFile]) -> list[list[TraceFile]]:
    """Groups of two or more of ``files`` holding the same bytes (one file under two names,
    hard links included): the same trace counted as several hosts. Only files of equal size
    are compared: the names of one file (one inode) without a read, other files read side by
    side only until their bytes differ; a file that cannot be read is in no group."""
    by_size: dict[int, list[TraceFile]] = {}
    for f in files:
        by_size.setdefault(f.size, []).append(f)
    out = []
    for group in by_size.values():
        if len(group) > 1 and group[0].size > 0:
            out.extend(_equal_contents(group))
    return out


def _equal_contents(group: list[TraceFile]) -> list[list[TraceFile]]:
    """The groups of two or more of ``group`` (files of one size) with equal bytes, each in
    ``group``'s order: the names of one file (hard links: one device and inode) are one
    without a read; one name of each file is read (:func:`_equal_bytes`)."""
    inodes: dict = {}
    for f in group:
        try:
            st = os.stat(f.path)
        except OSError:
            continue
        inodes.setdefault((st.st_dev, st.st_ino), []).append(f)
    names = {id(fs[0]): fs for fs in inodes.values()}  # a file's first name: all its names
    out, merged = [], set()
    for same in _equal_bytes([fs[0] for fs in inodes.values()]):
        merged.update(id(f) for f in same)
        out.append([g for f in same for g in names[id(f)]])
    out += [fs for fs in inodes.values() if len(fs) > 1 and id(fs[0]) not in merged]
    pos = {id(f): i for i, f in enumerate(group)}
    return [sorted(g, key=lambda f: pos[id(f)]) for g in out]


def _equal_bytes(group: list[TraceFile]) -> list[list[TraceFile]]:
    """The groups of two or more of ``group`` whose bytes are equal, read a chunk at a time."""
    if len(group) < 2:
        return []
    handles = []
    try:
        for f in group:
            try:
                handles.append((f, open(f.path, "rb")))
            except OSError:
                continue
        pending = [handles]
        done = []
        while pending:
            nxt = []
            for hs in pending:
                parts: dict[bytes, list] = {}
                for f, fh in hs:
                    try:
                        parts.setdefault(fh.read(_COMPARE_CHUNK), []).append((f, fh))
                    except OSError:
                        continue
                for chunk, same in parts.items():
                    if len(same) < 2:
                        continue
                    (done if not chunk else nxt).append(same)
            pending = nxt
        return [[f for f, _ in same] for same in done]
    finally:
        for _, fh in handles:
            fh.close()
