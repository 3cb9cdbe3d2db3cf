"""Where traceview may write: never into a profile tree (a ``plugins/profile`` tree, a run
folder, the log dir of a run read), onto a trace, or through a hard link onto one; anywhere
else, beside a loose trace included. Outputs are written whole to a temporary file and
renamed into place, so a trace is never altered.

Used by the CLI and by the library (:meth:`traceview.Profile.report`) alike. Errors are
:class:`~traceview.errors.UsageError`, one line naming the output.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
import tempfile
from pathlib import Path

from traceview.errors import UsageError


def inside_inputs(out: Path, discovery) -> bool:
    """True when ``out`` is refused (:func:`why_inside`) for the files ``discovery`` read.
    ``discovery``: a :class:`~traceview.read.discover.Discovery`, or None."""
    return inside_files(out, [f.path for f in discovery.files] if discovery is not None else [])


def inside_files(out: Path, trace_paths) -> bool:
    """:func:`inside_inputs` for the trace files ``trace_paths`` read."""
    return why_inside(out, trace_paths) is not None


def why_inside(out: Path, trace_paths, *, trace_name: bool = False) -> str | None:
    """Why ``out`` is refused, in a few words, or None. What is protected is a profile tree
    and the traces themselves; anywhere else may be written, beside a loose trace included:

    * ``out`` bears a trace file's name (it is one, or would later be taken for one);
    * ``out`` is (a hard link to) a trace file read;
    * ``out`` lies in a ``plugins/profile`` tree (where the profiler writes runs);
    * ``out`` lies in a run folder: a folder with the profiler's run name
      (:data:`~traceview.read.discover.RUN_NAME_RE`) holding trace files, wherever it was copied;
    * ``out`` lies in the log dir of a run read (``LOGDIR`` of ``LOGDIR/plugins/profile/RUN/``:
      the profile as TensorBoard and ``jax.profiler`` see it).

    ``trace_name``: ``out`` is a trace meant to be one (``traceview export``'s ``.xplane.pb``):
    its name is allowed, every other rule holds, and it may not go into a folder holding a
    trace read, nor any folder below it (the next read of that folder, which looks into its
    subfolders, would take it for one of its traces)."""
    from traceview.read.discover import classify

    out = Path(out)
    if classify(out.name) is not None and not trace_name:
        return "it bears a trace file's name"
    given = Path(os.path.abspath(out))  # as named: a linked folder on the way kept
    out = out.resolve()
    forms = [out] if given == out else [out, given]
    dirs = set()
    for f in trace_paths:  # a trace's folder as named and as resolved (a linked run folder or trace file)
        dirs.update((Path(f).resolve().parent, Path(f).parent.resolve(), Path(os.path.abspath(f)).parent))
        try:
            if out.exists() and os.path.samefile(out, f):  # a hard link to a trace elsewhere
                return f"it is the trace file {f}"
        except OSError:
            pass
    if trace_name:
        under = next((d for o in forms for d in sorted(dirs) if d == o.parent or d in o.parents), None)
        if under is not None:  # a folder's read looks into its subfolders too
            return (f"it is a trace written {'into' if under in (o.parent for o in forms) else 'under'} {under}, "
                    "which holds the trace it is cut from (the next read of that folder would take it for one of "
                    "its traces)")
    for o in forms:
        chain = [o, *o.parents]
        if any(p.name == "profile" and p.parent.name == "plugins" for p in chain):
            return "it is inside a plugins/profile tree"
        for p in chain[1:] if _is_regular_target(o) else chain:
            if run_folder(p):
                return f"it is inside the run folder {p}"
    for d in sorted(dirs):  # the log dir of a run read (LOGDIR/plugins/profile/RUN/file): the profile as a whole
        if d.parent.name == "profile" and d.parent.parent.name == "plugins":
            logdir = d.parent.parent.parent
            if any(o == logdir or logdir in o.parents for o in forms):
                return f"it is inside the log dir {logdir} it reads"
    return None


def run_folder(folder: Path) -> bool:
    """Whether ``folder`` is a profiler run folder: its name is a run's
    (:data:`~traceview.read.discover.RUN_NAME_RE`) and it holds a trace file (:func:`holds_traces`)."""
    from traceview.read.discover import RUN_NAME_RE

    return bool(RUN_NAME_RE.match(folder.name)) and holds_traces(folder) is not None


#: Entries of a folder looked at for trace files before an output is written there.
SCAN_ENTRIES = 10_000


def holds_traces(folder: Path) -> str | None:
    """The name of a file named like a trace directly in ``folder`` (among its first
    :data:`SCAN_ENTRIES` entries), or None."""
    from traceview.read.discover import classify

    try:
        with os.scandir(folder) as it:
            for i, entry in enumerate(it):
                if i >= SCAN_ENTRIES:
                    return None
                if classify(entry.name) is not None:
                    return entry.name
    except OSError:
        return None
    return None


def _is_regular_target(path: Path) -> bool:
    """False for an existing device, FIFO or socket (written in place, never replaced)."""
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return True  # to be created: a regular file


def refuse_inside_inputs(out: Path | None, flag: str, *discoveries, trace_paths=(), trace_name: bool = False) -> None:
    """UsageError when ``out`` is inside what any of ``discoveries`` read, or among
    ``trace_paths`` (:func:`inside_inputs`; ``trace_name`` as :func:`why_inside`)."""
    if out is None:
        return
    paths = list(trace_paths) + [f.path for d in discoveries if d is not None for f in d.files]
    why = why_inside(out, paths, trace_name=trace_name)
    if why:
        raise UsageError(f"refusing to write {out}: {why} (traceview never writes into a profile folder); "
                         f"choose another {flag}")


def check_writable(path: Path | None, flag: str) -> None:
    """UsageError unless ``path`` names a file whose folder exists (checked before any work)."""
    if path is None:
        return
    url = re.match(r"([A-Za-z][A-Za-z0-9+.-]+):/", str(path))  # Path("s3://b/k") reads "s3:/b/k"
    if url:
        raise UsageError(f"{url.group(1)}://{str(path)[url.end():].lstrip('/')}: refusing to write there: {flag} "
                         "writes a local file only (traceview never writes to a remote store); give a local path")
    if path.is_dir():
        raise UsageError(f"refusing to write {path}: it is a folder; {flag} needs a file name")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        blocker = next((p for p in (parent, *parent.parents) if os.path.lexists(p)), None)
        if blocker is not None and not blocker.is_dir():
            raise UsageError(f"refusing to write {path}: {blocker} is not a folder"
                             + (" (a broken symbolic link)" if blocker.is_symlink() and not blocker.exists() else ""))
        raise UsageError(f"refusing to write {path}: folder {parent} does not exist")


def append_whole(path: Path, data: bytes | str) -> None:
    """Append ``data`` to ``path`` (created if missing) whole or not at all: a write that fails
    part way (disk full, quota) is cut back to the file's former end, so a JSON-lines file never
    keeps half a line. Raises :class:`UsageError` naming ``path``."""
    raw = data.encode("utf-8") if isinstance(data, str) else data
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
    except OSError as exc:
        raise UsageError(f"cannot append to {path}: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
        end, regular = st.st_size, stat.S_ISREG(st.st_mode)
        view = memoryview(raw)
        try:
            while view:
                view = view[os.write(fd, view):]
            if regular:
                os.fsync(fd)  # some file systems say "no space" only when the data is flushed
        except BaseException as exc:  # an OSError, or an interrupt (Ctrl-C) part way
            try:
                os.ftruncate(fd, end)
            except OSError:
                pass
            if isinstance(exc, OSError):
                raise UsageError(f"cannot append to {path}: {exc.strerror or exc} (the file is as it was)") from None
            raise
    finally:
        os.close(fd)


def write_atomic(path: Path, data: bytes | str) -> None:
    """Write ``data`` to ``path`` through a temporary file in its folder renamed over it, so a
    reader never sees half a file and a hard link to an existing ``path`` (a trace elsewhere)
    keeps its content. A symbolic link is followed (the file it names is replaced, not the
    link); an existing device, FIFO or socket (``/dev/null``, ``/dev/stdout``, a process
    substitution) is written in place, never replaced. Raises :class:`UsageError` naming
    ``path`` when it cannot be written."""
    with written_together() as put:
        put(path, data)


@contextlib.contextmanager
def written_together():
    """A ``put(path, data)`` whose files (each as :func:`write_atomic` writes it) all appear
    when the block ends, or none: each is written to a temporary file beside it, renamed over
    its path only once the block ends without an exception; otherwise (an error, Ctrl-C) every
    temporary file is removed and no path is touched. A device, FIFO or socket path is
    written when put. Raises :class:`UsageError` naming a path that cannot be written."""
    staged: list[tuple[str, Path]] = []

    def put(path: Path, data: bytes | str) -> None:
        path = Path(path)
        raw = data.encode("utf-8") if isinstance(data, str) else data
        if not _is_regular_target(path):
            try:
                with open(path, "wb") as fh:
                    fh.write(raw)
            except OSError as exc:
                raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from None
            return
        if path.is_symlink():
            path = path.resolve()
        folder = path.parent if str(path.parent) else Path(".")
        try:
            fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder)
        except OSError as exc:
            raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from None
        staged.append((tmp, path))
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(raw)
            try:
                mode = os.stat(path).st_mode & 0o7777
            except OSError:
                mode = 0o666 & ~_umask()
            os.chmod(tmp, mode)
        except OSError as exc:
            raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from None

    try:
        yield put
        while staged:
            tmp, path = staged[0]
            try:
                os.replace(tmp, path)
            except OSError as exc:
                raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from None
            staged.pop(0)
    finally:  # an error or an interrupt (Ctrl-C): no temporary file left behind
        for tmp, _ in staged:
            try:
                os.unlink(tmp)
            except OSError:
                pass


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
