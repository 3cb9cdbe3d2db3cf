"""Kernel transplant shim: inject an edited copy of a kernel module into a live engine, and
patch module source files by exact anchors — both reversible.

The mechanism reproduces the study's "Pallas kernel transplant" (Strategy 4):

* :func:`copy_module_source` copies a stock module's file into an importable project folder
  (e.g. ``my_kernels/kernel.py``); :func:`patch_source` edits it by anchored replacement;
  :func:`load_module_copy` imports it from its path.
* :func:`inject` then, for every callable *defined* in the stock module (``obj.__module__ ==
  stock.__name__``), installs the copy's object of the same name with ``setattr`` on the
  stock module, and rebinds direct references (``from stock import f``) held by other loaded
  modules whose names start with the given prefixes. Public functions are wrapped in a
  probe (``functools.wraps``, so name and ``__wrapped__`` survive) that logs once on first
  call and counts calls; underscore-named functions (kernel bodies, which ``pallas_call``
  inspects) and classes are installed unwrapped.
* Import order is the mechanism: inject *before* constructing the engine, so the injected
  functions are what gets traced and compiled. Already-compiled functions are not affected.
* JAX caches traced sub-jaxprs (e.g. ``jnp.where``'s inner ``jit(_where)``) together with the
  source location of their *first* caller. If the stock kernel was traced earlier in the
  process, a few ops of the copy's kernel would keep the stock file as ``source_file``.
  :func:`inject` and ``revert()`` therefore call ``jax.clear_caches()`` (when jax is loaded)
  unless ``clear_jax_caches=False``.

Everything returns a report object with ``revert()``; both the report of :func:`inject` and
the patch of :func:`patch_source` are context managers that revert on exit. Nothing here
prints; probe hits are logged on ``traceview.engine_shim.transplant`` and may also be sent to
an ``on_probe`` callback.
"""

from __future__ import annotations

import difflib
import functools
import importlib
import importlib.util
import inspect
import logging
import os
import shutil
import sys
import threading
import types
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)


class AnchorError(ValueError):
    """An anchor did not match exactly once; the file was left unchanged."""


# ---------------------------------------------------------------------------- module copies
def copy_module_source(module: types.ModuleType | str, dest_dir: str | os.PathLike, *, filename: str = "kernel.py",
                       init: bool = True) -> Path:
    """Copy ``module``'s source file to ``dest_dir/filename`` (and an empty ``__init__.py``).

    Returns the path of the copy. Raises ValueError if the module has no ``.py`` source file.
    """
    mod = importlib.import_module(module) if isinstance(module, str) else module
    src = getattr(mod, "__file__", None)
    if not src or not src.endswith(".py"):
        raise ValueError(f"module {mod.__name__!r} has no .py source file (got {src!r})")
    dest = Path(dest_dir)
    dest.mkdir(parents=True, exist_ok=True)
    if init and not (dest / "__init__.py").exists():
        (dest / "__init__.py").write_text("")
    out = dest / filename
    shutil.copyfile(src, out)
    return out


def load_module_copy(path: str | os.PathLike, module_name: str | None = None) -> types.ModuleType:
    """Import a module from a file path and register it in ``sys.modules``.

    ``module_name`` defaults to ``<parent folder>.<stem>`` (``my_kernels.kernel``). The copy
    must use absolute imports. Functions defined in it carry the copy's path as
    ``co_filename``, which is what JAX records as the HLO ``source_file``.
    """
    path = Path(path).resolve()
    name = module_name or f"{path.parent.name}.{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ValueError(f"cannot import a module from {path}")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    try:
        spec.loader.exec_module(mod)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return mod


# ---------------------------------------------------------------------------- injection
@dataclass
class TransplantReport:
    """What :func:`inject` did. ``probe_hits`` maps public names to call counts."""

    stock_module: str
    copy_module: str
    copy_file: str | None
    replaced: list[str] = field(default_factory=list)
    wrapped: list[str] = field(default_factory=list)
    unwrapped: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    rebound: list[tuple[str, str]] = field(default_factory=list)
    probe_hits: dict[str, int] = field(default_factory=dict)
    reverted: bool = False
    clear_jax_caches: bool = True
    _undo: list = field(default_factory=list, repr=False)

    def fired(self, name: str | None = None) -> bool:
        """True if the probe of ``name`` (or of any public entry point) was called."""
        if name is None:
            return any(self.probe_hits.values())
        return self.probe_hits.get(name, 0) > 0

    def revert(self) -> None:
        """Restore every replaced attribute and rebound reference (idempotent).

        A rebound reference that something else has changed since is left alone."""
        if self.reverted:
            return
        for target, attr, original, installed in reversed(self._undo):
            if getattr(target, attr, None) is installed:
                setattr(target, attr, original)
            else:
                log.warning("transplant revert: %s.%s changed since injection; left as is", target.__name__, attr)
        self._undo.clear()
        self.reverted = True
        if self.clear_jax_caches:
            _clear_jax_caches()

    def __enter__(self) -> "TransplantReport":
        return self

    def __exit__(self, *exc) -> None:
        self.revert()

    def summary(self) -> str:
        return (f"transplant {self.copy_module} ({self.copy_file}) -> {self.stock_module}: "
                f"{len(self.replaced)} replaced ({len(self.wrapped)} probed, {len(self.unwrapped)} unwrapped), "
                f"{len(self.rebound)} references rebound, missing in copy: {self.missing or 'none'}")


def _clear_jax_caches() -> None:
    jax = sys.modules.get("jax")
    if jax is not None and hasattr(jax, "clear_caches"):
        jax.clear_caches()


def _probe(fn, name: str, report: TransplantReport, on_probe):
    lock = threading.Lock()

    @functools.wraps(fn)
    def probe(*args, **kwargs):
        with lock:
            first = report.probe_hits.get(name, 0) == 0
            report.probe_hits[name] = report.probe_hits.get(name, 0) + 1
        if first:
            log.info("transplant probe: %s.%s called (from %s)", report.copy_module, name, report.copy_file)
            if on_probe is not None:
                on_probe(name, report)
        return fn(*args, **kwargs)

    return probe


def inject(stock: types.ModuleType | str, copy: types.ModuleType | str | os.PathLike, *,
           rebind_prefixes: tuple[str, ...] = ("traceview.",), probe: bool = True, on_probe=None,
           clear_jax_caches: bool = True) -> TransplantReport:
    """Install the callables of ``copy`` in place of those defined in ``stock``.

    Args:
      stock: the live module (or its import name), e.g. ``traceview.kernels.paged_attention``.
      copy: the edited module, or a path to its file (loaded with :func:`load_module_copy`).
      rebind_prefixes: modules whose names start with one of these get their direct
        references to replaced stock objects rebound (the stock and copy modules excluded).
      probe: wrap public functions in a once-reporting probe.
      on_probe: optional ``callback(name, report)`` on each probe's first call.
      clear_jax_caches: call ``jax.clear_caches()`` after injecting and after reverting, so
        no trace cached from the other version leaks its source locations.

    Returns: a :class:`TransplantReport` (``revert()`` or use as a context manager).
    """
    stock_mod = importlib.import_module(stock) if isinstance(stock, str) else stock
    copy_mod = copy if isinstance(copy, types.ModuleType) else load_module_copy(copy)
    report = TransplantReport(stock_mod.__name__, copy_mod.__name__, getattr(copy_mod, "__file__", None),
                              clear_jax_caches=clear_jax_caches)
    replacements: dict[int, tuple[object, object]] = {}  # id(stock obj) -> (stock obj, installed obj)
    for name, obj in list(vars(stock_mod).items()):
        if not callable(obj) or getattr(obj, "__module__", None) != stock_mod.__name__:
            continue
        new = getattr(copy_mod, name, None)
        if new is None or not callable(new):
            report.missing.append(name)
            continue
        if probe and inspect.isfunction(new) and not name.startswith("_"):
            installed = _probe(new, name, report, on_probe)
            report.wrapped.append(name)
            report.probe_hits[name] = 0
        else:
            installed = new
            report.unwrapped.append(name)
        setattr(stock_mod, name, installed)
        report._undo.append((stock_mod, name, obj, installed))
        report.replaced.append(name)
        replacements[id(obj)] = (obj, installed)
    for mod_name, mod in list(sys.modules.items()):
        if mod is None or mod is stock_mod or mod is copy_mod or not mod_name.startswith(tuple(rebind_prefixes)):
            continue
        try:
            items = list(vars(mod).items())
        except TypeError:  # pragma: no cover - exotic module objects
            continue
        for attr, val in items:
            hit = replacements.get(id(val))
            if hit is not None and hit[0] is val:
                setattr(mod, attr, hit[1])
                report._undo.append((mod, attr, val, hit[1]))
                report.rebound.append((mod_name, attr))
    if clear_jax_caches:
        _clear_jax_caches()
    log.info("%s", report.summary())
    return report


# ---------------------------------------------------------------------------- source patches
@dataclass
class SourcePatch:
    """An anchored edit of one source file. ``diff`` is a unified diff of the change."""

    path: Path
    original: bytes
    patched: bytes
    diff: str
    applied: bool = False

    def revert(self) -> None:
        """Write the original bytes back (byte-identical) and drop the stale bytecode cache."""
        if not self.applied:
            return
        self.path.write_bytes(self.original)
        _drop_bytecode(self.path)
        self.applied = False

    def __enter__(self) -> "SourcePatch":
        return self

    def __exit__(self, *exc) -> None:
        self.revert()


def _drop_bytecode(path: Path) -> None:
    try:
        Path(importlib.util.cache_from_source(str(path))).unlink(missing_ok=True)
    except (NotImplementedError, ValueError):  # pragma: no cover - no bytecode cache
        pass
    importlib.invalidate_caches()


def patch_source(target: types.ModuleType | str | os.PathLike, edits, *, dry_run: bool = False) -> SourcePatch:
    """Replace exact anchor strings in a module's source file.

    Args:
      target: a module (its ``__file__`` is patched) or a file path.
      edits: ``[(anchor, replacement), ...]`` or a dict; applied in order, each anchor
        counted in the text as edited so far.
      dry_run: compute and return the patch (with its diff) without writing.

    Returns: a :class:`SourcePatch` (``applied`` False for a dry run); ``revert()`` restores
      the original bytes exactly.
    Raises: AnchorError (a ValueError) naming the anchor and its match count if any anchor
      matches zero or several times — the file is then left untouched; ValueError for an
      empty anchor or a file that is not UTF-8.
    """
    path = Path(target.__file__ if isinstance(target, types.ModuleType) else target)
    original = path.read_bytes()
    try:
        text = original.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"{path} is not UTF-8 text: {e}") from None
    pairs = list(edits.items()) if isinstance(edits, dict) else list(edits)
    new = text
    for i, (anchor, replacement) in enumerate(pairs):
        if not anchor:
            raise ValueError(f"edit {i}: empty anchor")
        n = new.count(anchor)
        if n != 1:
            raise AnchorError(f"{path}: anchor {i} {anchor!r} matched {n} times (must match exactly once); file unchanged")
        new = new.replace(anchor, replacement, 1)
    patched = new.encode("utf-8")
    diff = "".join(difflib.unified_diff(text.splitlines(keepends=True), new.splitlines(keepends=True),
                                        fromfile=f"a/{path.name}", tofile=f"b/{path.name}"))
    patch = SourcePatch(path, original, patched, diff)
    if not dry_run:
        path.write_bytes(patched)
        _drop_bytecode(path)
        patch.applied = True
    return patch


# ---------------------------------------------------------------------------- kernel folders
#: The package whose modules ``traceview engine transplant`` copies.
KERNEL_PACKAGE = "traceview.kernels"


class TransplantError(ValueError):
    """A transplant or patch request that cannot be carried out (a usage or state error:
    existing files, a missing copy, a file already patched, a backup that does not match)."""


def _package_dir(package: str) -> Path:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise TransplantError(f"{package!r} is not an importable package")
    return Path(list(spec.submodule_search_locations)[0])


def _sibling_imports(path: Path, package: str, stems: set[str]) -> list[str]:
    """Stems of ``stems`` that the file at ``path`` imports, absolutely (``package.X``) or
    relatively (``.X``), read off its syntax tree (nothing is imported)."""
    import ast

    tree = ast.parse(path.read_bytes(), filename=str(path))
    found: list[str] = []

    def add(dotted: str) -> None:
        stem = dotted.split(".")[0]
        if stem in stems and stem not in found:
            found.append(stem)

    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            mod = node.module or ""
            if node.level == 1:
                if mod:
                    add(mod)
                else:
                    for a in node.names:
                        add(a.name)
            elif node.level == 0 and (mod == package or mod.startswith(package + ".")):
                rest = mod[len(package) + 1:]
                if rest:
                    add(rest)
                else:
                    for a in node.names:
                        add(a.name)
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith(package + "."):
                    add(a.name[len(package) + 1:])
    return found


def _dependency_order(edges: dict[str, list[str]], roots: list[str]) -> list[str]:
    """``roots`` and everything they reach through ``edges``, each after what it imports."""
    order: list[str] = []
    seen: set[str] = set()

    def visit(stem: str) -> None:
        if stem in seen:
            return
        seen.add(stem)
        for dep in edges.get(stem, []):
            visit(dep)
        order.append(stem)

    for r in roots:
        visit(r)
    return order


def engine_kernel_modules(package: str = KERNEL_PACKAGE, users: str = "traceview.engine_shim") -> list[str]:
    """Stems of the modules of ``package`` that the modules of ``users`` import (e.g.
    ``paged_attention``) and of the package's modules those import in turn, dependencies
    first (``['block_sizes', 'naming', 'paged_attention']`` for the bundled engine). Read off
    the source files' syntax trees; the package's ``__init__`` is not counted."""
    kdir = _package_dir(package)
    stems = {p.stem for p in kdir.glob("*.py") if p.stem != "__init__"}
    edges = {s: _sibling_imports(kdir / f"{s}.py", package, stems) for s in sorted(stems)}
    roots: list[str] = []
    for f in sorted(_package_dir(users).glob("*.py")):
        for s in _sibling_imports(f, package, stems):
            if s not in roots:
                roots.append(s)
    return _dependency_order(edges, roots)


def transplant_kernels(dest: str | os.PathLike, *, force: bool = False, package: str = KERNEL_PACKAGE,
                       modules: list[str] | None = None) -> list[Path]:
    """Copy the stock sources of the engine's kernel modules (:func:`engine_kernel_modules`,
    or ``modules``) into the folder ``dest`` (created if missing), byte for byte, under their
    own names (``dest/paged_attention.py``, ...). Returns the copies' paths.

    Raises: TransplantError naming the files that already exist in ``dest`` (nothing is
    written then) unless ``force``, or a ``dest`` that is not a folder.
    """
    kdir = _package_dir(package)
    stems = modules or engine_kernel_modules(package)
    dest = Path(dest)
    if dest.exists() and not dest.is_dir():
        raise TransplantError(f"{dest} exists and is not a folder")
    targets = [(kdir / f"{s}.py", dest / f"{s}.py") for s in stems]
    for src, _ in targets:
        if not src.is_file():
            raise TransplantError(f"{package}.{src.stem} has no source file at {src}")
    existing = [str(out) for _, out in targets if out.exists()]
    if existing and not force:
        raise TransplantError(f"{', '.join(existing)} already exist(s); pass --force to overwrite")
    dest.mkdir(parents=True, exist_ok=True)
    for src, out in targets:
        shutil.copyfile(src, out)
    return [out for _, out in targets]


@dataclass
class FolderTransplant:
    """What :func:`inject_folder` did: one :class:`TransplantReport` per injected module,
    in injection order (dependencies first). ``revert()`` undoes them in reverse."""

    folder: str
    package: str
    reports: list[TransplantReport] = field(default_factory=list)

    @property
    def reverted(self) -> bool:
        return all(r.reverted for r in self.reports)

    def revert(self) -> None:
        for r in reversed(self.reports):
            r.revert()

    def __enter__(self) -> "FolderTransplant":
        return self

    def __exit__(self, *exc) -> None:
        self.revert()

    def never_called(self) -> list[str]:
        """Dotted names of probed stock functions whose copy was never called."""
        return [f"{r.stock_module}.{n}" for r in self.reports for n, k in r.probe_hits.items() if k == 0]

    def as_dict(self) -> dict:
        """JSON-serialisable record: per module, the copy's file, replaced names, rebound
        references and probe call counts."""
        return {"folder": self.folder, "modules": [
            {"stock": r.stock_module, "copy_file": r.copy_file, "replaced": list(r.replaced),
             "missing": list(r.missing), "rebound": [".".join(x) for x in r.rebound], "probe_calls": dict(r.probe_hits)}
            for r in self.reports]}


def inject_folder(folder: str | os.PathLike, *, package: str = KERNEL_PACKAGE, on_probe=None,
                  rebind_prefixes: tuple[str, ...] = ("traceview.",), clear_jax_caches: bool = True) -> FolderTransplant:
    """Inject every ``folder/X.py`` whose stem names a module of ``package`` in place of
    ``package.X`` (:func:`inject`: ``setattr`` plus rebinding of direct references, public
    functions probed), dependencies first, so that a copy importing a sibling (absolutely,
    ``package.X``, through the injected stock module, or relatively, ``.X``) gets the copy.
    The copies are imported as the submodules of a package made for ``folder``. Other
    ``.py`` files in ``folder`` are left to the copies' relative imports.

    ``on_probe(name, report)`` is called once per probed function, on its first call.
    Call before the engine is built (what is already compiled keeps the stock code).

    Returns: a :class:`FolderTransplant` (``revert()`` or use as a context manager).
    Raises: TransplantError for a missing folder or one holding no module of ``package``,
    or a copy that fails to import (the message names the file and the error; whatever was
    injected before is reverted).
    """
    folder_path = Path(folder).resolve()
    if not folder_path.is_dir():
        raise TransplantError(f"kernel folder {folder} does not exist or is not a folder")
    kdir = _package_dir(package)
    stock_stems = {p.stem for p in kdir.glob("*.py") if p.stem != "__init__"}
    present = sorted(p.stem for p in folder_path.glob("*.py") if p.stem in stock_stems)
    if not present:
        raise TransplantError(f"{folder} holds no copy of a module of {package} "
                              f"(expected e.g. paged_attention.py; make one with `traceview engine transplant {folder}`)")
    edges = {}
    for s in present:
        try:
            edges[s] = _sibling_imports(folder_path / f"{s}.py", package, set(present))
        except (SyntaxError, ValueError) as e:  # ValueError: null bytes
            raise TransplantError(f"cannot import the kernel copy {folder_path / f'{s}.py'}: {type(e).__name__}: {e}") from None
    order = _dependency_order(edges, present)
    import hashlib

    pkg_name = "_traceview_transplant_" + hashlib.sha1(str(folder_path).encode()).hexdigest()[:10]
    pkg = types.ModuleType(pkg_name, f"kernel copies from {folder_path}")
    pkg.__path__ = [str(folder_path)]
    pkg.__package__ = pkg_name
    sys.modules[pkg_name] = pkg
    result = FolderTransplant(str(folder_path), package)
    for stem in order:
        path = folder_path / f"{stem}.py"
        try:
            copy = load_module_copy(path, f"{pkg_name}.{stem}")
        except Exception as e:
            result.revert()
            line = (str(e).strip().splitlines() or [""])[0]
            raise TransplantError(f"cannot import the kernel copy {path}: {type(e).__name__}: {line}") from None
        result.reports.append(inject(f"{package}.{stem}", copy, rebind_prefixes=rebind_prefixes,
                                     on_probe=on_probe, clear_jax_caches=clear_jax_caches))
    return result


# ---------------------------------------------------------------------------- kept patches
def default_backup_dir() -> Path:
    """Where :func:`apply_kept_patch` keeps backups by default:
    ``$XDG_STATE_HOME/traceview/patches``, else ``~/.local/state/traceview/patches`` — state
    to keep until the revert, not a cache (caches get pruned) and not beside the installed
    file (a reinstall would orphan it, a packaging step could ship it)."""
    state = os.environ.get("XDG_STATE_HOME", "").strip()
    base = Path(state).expanduser() if state else Path.home() / ".local" / "state"
    return base / "traceview" / "patches"


def resolve_source(target: str | os.PathLike) -> Path:
    """The source file of ``target``: an existing path, else a module name located with
    ``importlib.util.find_spec`` (parent packages are imported; the module itself is not).

    Raises: TransplantError when it is neither, or the module has no ``.py`` source."""
    p = Path(target)
    if p.is_file():
        return p.resolve()
    name = str(target)
    if name.endswith(".py") or os.sep in name:
        raise TransplantError(f"{target}: no such file")
    try:
        spec = importlib.util.find_spec(name)
    except ModuleNotFoundError:  # a parent package is missing
        spec = None
    except (ImportError, ValueError) as e:
        raise TransplantError(f"{target}: not a file, and not an importable module ({e})") from None
    if spec is None:
        raise TransplantError(f"{target}: not a file, and no module of that name is installed")
    origin = spec.origin or ""
    if not origin.endswith(".py"):
        raise TransplantError(f"module {name} has no .py source file (origin {origin or 'none'})")
    return Path(origin).resolve()


def _sha256(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()


def _backup_paths(path: Path, backup_dir: Path) -> tuple[Path, Path]:
    key = _sha256(str(path).encode())[:16]
    return backup_dir / f"{key}.json", backup_dir / f"{key}.orig"


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


@dataclass
class KeptPatch:
    """A patch whose original bytes are kept in ``backup_dir`` until :func:`revert_kept_patch`.
    Hashes are SHA-256 of the whole file."""

    path: Path
    original_sha256: str
    patched_sha256: str
    diff: str
    record: Path


def apply_kept_patch(target: str | os.PathLike, edits, *, backup_dir: str | os.PathLike) -> KeptPatch:
    """Patch ``target`` (a file or module name, :func:`resolve_source`) by exact anchors
    (:func:`patch_source`: each anchor must match exactly once) and keep the original bytes
    in ``backup_dir`` (a record ``<key>.json`` and the bytes ``<key>.orig``, ``key`` from the
    file's absolute path) so that :func:`revert_kept_patch` restores them byte for byte.

    Raises: AnchorError (count named; file untouched); TransplantError if the file is
    already patched (a record exists: revert first) or the patch changes nothing.
    """
    import json
    import time

    path = resolve_source(target)
    backup_dir = Path(backup_dir)
    rec_path, orig_path = _backup_paths(path, backup_dir)
    if rec_path.exists():
        raise TransplantError(f"{path} is already patched (backup {rec_path}); revert it first (--revert)")
    patch = patch_source(path, edits, dry_run=True)
    if patch.patched == patch.original:
        raise TransplantError(f"{path}: the replacement equals the anchor; nothing to patch")
    backup_dir.mkdir(parents=True, exist_ok=True)
    _write_atomic(orig_path, patch.original)
    kept = KeptPatch(path, _sha256(patch.original), _sha256(patch.patched), patch.diff, rec_path)
    _write_atomic(rec_path, (json.dumps({"path": str(path), "original_sha256": kept.original_sha256,
                                         "patched_sha256": kept.patched_sha256, "backup": str(orig_path),
                                         "patched_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                                         "diff": patch.diff}, indent=2) + "\n").encode())
    try:
        path.write_bytes(patch.patched)
    except OSError:
        rec_path.unlink(missing_ok=True)
        orig_path.unlink(missing_ok=True)
        raise
    _drop_bytecode(path)
    return kept


def revert_kept_patch(target: str | os.PathLike, *, backup_dir: str | os.PathLike, force: bool = False) -> KeptPatch:
    """Restore the bytes :func:`apply_kept_patch` kept for ``target``, check their SHA-256
    against the record, and delete the backup.

    Raises: TransplantError when no backup exists for the file, when the file is no longer
    the patched version (edited since: ``force`` restores anyway), or when the backup's bytes
    do not hash to the recorded original (nothing is written then).
    """
    import json

    path = resolve_source(target)
    rec_path, orig_path = _backup_paths(path, Path(backup_dir))
    if not rec_path.exists():
        raise TransplantError(f"{path} has no patch to revert (no backup under {backup_dir})")
    rec = json.loads(rec_path.read_text())
    original = orig_path.read_bytes()
    if _sha256(original) != rec["original_sha256"]:
        raise TransplantError(f"backup {orig_path} does not match its record (sha256); file left as is")
    current = path.read_bytes()
    if _sha256(current) != rec["patched_sha256"] and not force:
        raise TransplantError(f"{path} changed since it was patched; not reverting (--force restores the original anyway)")
    path.write_bytes(original)
    _drop_bytecode(path)
    if _sha256(path.read_bytes()) != rec["original_sha256"]:  # pragma: no cover - a failing disk
        raise TransplantError(f"{path}: restored bytes do not hash to the original; backup kept at {orig_path}")
    rec_path.unlink()
    orig_path.unlink()
    return KeptPatch(path, rec["original_sha256"], rec["patched_sha256"], rec.get("diff", ""), rec_path)
