"""``traceview engine transplant|patch`` and the ``--kernel-dir`` flag of ``bench``/``profile``:
the command-line face of :mod:`traceview.engine_shim.transplant`.

* ``transplant DIR [--force]`` copies the stock sources of the engine's kernel modules
  (``paged_attention.py`` and the ``traceview.kernels`` modules it imports) into ``DIR``.
* ``bench|profile --kernel-dir DIR`` injects those copies before the engine is built; each
  probed function reports its first call on standard error, through the callback given here
  (the library itself never prints).
* ``patch MODULE_OR_FILE --anchor TEXT --replace TEXT [--anchor ... --replace ...]`` edits a
  source file at anchors that must occur exactly once, keeping the original bytes in a backup
  folder (:func:`~traceview.engine_shim.transplant.default_backup_dir`, or ``--backup-dir``)
  so that ``patch MODULE_OR_FILE --revert`` restores them byte for byte; a file already
  patched is refused until reverted.

Exit codes: 0 ok, 2 usage or state error (anchor count, existing files, already patched,
nothing to revert, a copy that does not import), 4 an I/O failure writing files.
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path


def add_subcommands(sub) -> None:
    """Add ``transplant`` and ``patch`` to the engine CLI's subparsers."""
    t = sub.add_parser("transplant", help="copy the stock kernel sources into DIR, to edit and run with --kernel-dir",
                       description="Copy the stock sources of the engine's kernel modules (paged_attention.py and "
                                   "the traceview.kernels modules it imports) into DIR; then edit them and run "
                                   "`traceview engine bench|profile --kernel-dir DIR`.")
    t.add_argument("dir", metavar="DIR", help="folder to copy into (created if missing)")
    t.add_argument("--force", action="store_true", help="overwrite copies already in DIR")
    p = sub.add_parser("patch", help="edit an installed module's source at exact anchors; --revert restores it",
                       description="Replace anchor texts (each must occur exactly once) in a module's source file, "
                                   "keeping the original bytes in a backup folder; --revert restores them byte for "
                                   "byte. A file is patched once until reverted. Multi-line anchors: bash $'a\\nb'.")
    p.add_argument("target", metavar="MODULE_OR_FILE", help="a source file, or a module name (traceview.kernels.block_sizes)")
    p.add_argument("--anchor", action="append", default=[], metavar="TEXT", help="exact text to replace; repeat with --replace")
    p.add_argument("--replace", action="append", default=[], metavar="TEXT", help="its replacement (one per --anchor, in order)")
    p.add_argument("--revert", action="store_true", help="restore the original bytes kept at patch time")
    p.add_argument("--dry-run", action="store_true", help="print the diff, write nothing")
    p.add_argument("--force", action="store_true", help="with --revert: restore even if the file changed since the patch")
    p.add_argument("--backup-dir", default=None, metavar="DIR",
                   help="where originals are kept [default $XDG_STATE_HOME/traceview/patches or ~/.local/state/traceview/patches]")


def add_kernel_dir(parser) -> None:
    """Add ``--kernel-dir DIR`` to a ``bench``/``profile`` parser."""
    parser.add_argument("--kernel-dir", metavar="DIR", default=None,
                        help="inject the kernel copies in DIR (from `traceview engine transplant DIR`) before the engine is built")


def _err(msg: str) -> None:
    print(f"traceview engine: error: {msg}", file=sys.stderr)


def run(args) -> int:
    """Run ``transplant`` or ``patch``; returns the exit code."""
    from .transplant import AnchorError, TransplantError

    try:
        return _transplant(args) if args.command == "transplant" else _patch(args)
    except (AnchorError, TransplantError, ValueError) as e:  # ValueError: empty anchor, non-UTF-8 target
        _err(str(e))
        return 2
    except (FileNotFoundError, FileExistsError, NotADirectoryError, IsADirectoryError) as e:  # a path given wrong
        _err(f"{e.filename or ''}: {e.strerror or e}" if getattr(e, "filename", None) else str(e))
        return 2
    except OSError as e:
        _err(f"{type(e).__name__}: {e}")
        return 4


def _transplant(args) -> int:
    from .transplant import KERNEL_PACKAGE, _package_dir, transplant_kernels

    if not str(args.dir).strip():
        _err("transplant needs a folder name (got an empty one)")
        return 2
    from traceview.errors import UsageError
    from traceview.read.guard import refuse_inside_inputs

    try:  # never into a profile tree (a plugins/profile tree, a run folder)
        refuse_inside_inputs(Path(args.dir) / "paged_attention.py", "DIR")
    except UsageError as e:
        _err(str(e))
        return 2
    copies = transplant_kernels(args.dir, force=args.force)
    stock = _package_dir(KERNEL_PACKAGE)
    dest = Path(args.dir).resolve()
    print(f"copied {len(copies)} kernel modules of {KERNEL_PACKAGE} (from {stock}) to {dest}:")
    for c in copies:
        print(f"  {c.name}")
    print("edit them, then run the engine on the copies and check that the trace shows them:\n"
          f"  traceview engine profile --kernel-dir {dest}\n"
          f"  traceview verify ./profile --check 'source of kernel RPAd* under {dest}'")
    return 0


def _patch(args) -> int:
    from .transplant import apply_kept_patch, default_backup_dir, patch_source, resolve_source, revert_kept_patch

    backup_dir = Path(args.backup_dir) if args.backup_dir else default_backup_dir()
    if args.revert:
        if args.anchor or args.replace or args.dry_run:
            _err("--revert takes no --anchor, --replace or --dry-run")
            return 2
        kept = revert_kept_patch(args.target, backup_dir=backup_dir, force=args.force)
        print(f"reverted {kept.path} to its original bytes (sha256 {kept.original_sha256[:16]}…)")
        return 0
    if args.force:
        _err("--force goes with --revert")
        return 2
    if not args.anchor or len(args.anchor) != len(args.replace):
        _err(f"give one --replace per --anchor (got {len(args.anchor)} --anchor, {len(args.replace)} --replace)")
        return 2
    edits = list(zip(args.anchor, args.replace))
    if args.dry_run:
        sys.stdout.write(patch_source(resolve_source(args.target), edits, dry_run=True).diff)
        return 0
    kept = apply_kept_patch(args.target, edits, backup_dir=backup_dir)
    sys.stdout.write(kept.diff)
    print(f"patched {kept.path} (sha256 {kept.original_sha256[:16]}… -> {kept.patched_sha256[:16]}…); "
          f"original kept under {backup_dir}; undo with:\n  traceview engine patch {kept.path} --revert"
          + (f" --backup-dir {backup_dir}" if args.backup_dir else ""))
    return 0


def print_probe(name: str, report, stream=None) -> None:
    """The ``on_probe`` callback of ``--kernel-dir``: one line on first call of a probed function."""
    print(f"transplant: {report.stock_module}.{name} → {report.copy_file}, first call", file=stream or sys.stderr)


@contextlib.contextmanager
def kernel_dir(folder: str | None, stream=None):
    """Inject the copies in ``folder`` for the duration (yields the
    :class:`~traceview.engine_shim.transplant.FolderTransplant`, or None without a folder).
    Raises TransplantError (a ValueError: exit 2) for a bad folder or copy."""
    if not folder:
        yield None
        return
    from .transplant import inject_folder

    stream = stream or sys.stderr
    tp = inject_folder(folder, on_probe=lambda name, rep: print_probe(name, rep, stream))
    replaced = sum(len(r.replaced) for r in tp.reports)
    rebound = sum(len(r.rebound) for r in tp.reports)
    print(f"transplant: {len(tp.reports)} modules injected from {tp.folder} "
          f"({', '.join(r.stock_module for r in tp.reports)}): {replaced} objects replaced, {rebound} references rebound",
          file=stream)
    try:
        yield tp
    finally:
        tp.revert()
    quiet = [n for n in tp.never_called() if n.endswith(".paged_decode")]
    if quiet:
        print(f"transplant: warning: {', '.join(quiet)} was never called: the engine did not run the copy", file=stream)
