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
