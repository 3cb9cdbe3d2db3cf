"""Which traceview the benchmarks' child processes import, and whether its C extensions load.

The benchmarks time traceview in child processes started as ``python -P ...`` (``-P``: the
working directory never lands on ``sys.path``, so running from a checkout does not put that
checkout's ``traceview/`` in front of the one meant). The package they import is:

* ``tree`` given (a checkout, its C extensions built in place): that checkout, first on
  ``PYTHONPATH``;
* ``tree`` None: the traceview installed in this interpreter's environment (or on the
  ``PYTHONPATH`` already set).

:func:`probe` asks a child started exactly that way which package it imported and whether
each of :data:`EXTENSIONS` loads; :func:`refusal` says why a run should not go ahead: without
them traceview runs its pure-Python fallback, whose timings are not representative.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

#: the C extensions the timed paths use; each has a slower pure-Python fallback
EXTENSIONS = ("traceview.read.xplane._decode", "traceview.model._passes", "traceview.analysis._passes")

_PROBE = r"""
import importlib, json, os, sys
try:
    import traceview
except Exception as exc:
    print(json.dumps({"error": f"{type(exc).__name__}: {exc}"}))
    sys.exit(0)
out = {"path": os.path.dirname(os.path.abspath(traceview.__file__)),
       "version": getattr(traceview, "__version__", "?"), "missing": {}}
for name in sys.argv[1:]:
    try:
        importlib.import_module(name)
    except Exception as exc:
        out["missing"][name] = f"{type(exc).__name__}: {exc}"
print(json.dumps(out))
"""


def python_argv() -> list[str]:
    """The interpreter and flags every child that imports traceview is started with."""
    return [sys.executable, "-P"]


def child_env(tree: Path | None, base: dict | None = None) -> dict:
    """The environment of the children: ``base`` (default this process's) with ``tree`` first
    on ``PYTHONPATH`` when given."""
    env = dict(os.environ if base is None else base)
    if tree is not None:
        env["PYTHONPATH"] = str(tree) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def probe(tree: Path | None, env: dict | None = None) -> dict:
    """What a child started as the benchmarks start theirs imports: ``{"path": the traceview
    package folder, "version", "missing": {extension: why it did not load}}``, or ``{"error":
    why traceview itself did not import}``."""
    p = subprocess.run(python_argv() + ["-c", _PROBE, *EXTENSIONS], capture_output=True, text=True,
                       env=child_env(tree, env), timeout=300)
    try:
        return json.loads(p.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"error": (p.stderr.strip().splitlines() or [f"the probe exited {p.returncode}"])[-1]}


def built(info: dict) -> bool:
    """Whether the probed traceview loads every C extension."""
    return not info.get("error") and not info["missing"]


def describe(info: dict) -> str:
    """One line: the package timed and whether its C extensions load."""
    if info.get("error"):
        return f"traceview does not import: {info['error']}"
    if built(info):
        return f"traceview {info['version']} at {info['path']}: C decoder built"
    return (f"traceview {info['version']} at {info['path']}: pure-Python fallback (not built: "
            f"{', '.join(sorted(info['missing']))}): timings are not representative")


def refusal(tree: Path | None, info: dict, env: dict | None = None) -> str | None:
    """Why the benchmark should not run on the probed traceview ``info`` (one line), or None.

    A package without its C extensions is refused; the line says how to build them, and names
    the installed traceview (``--installed``) when ``tree`` was given and that one is built."""
    if info.get("error"):
        return f"the benchmark's child processes cannot import traceview: {info['error']}"
    if built(info):
        return None
    msg = (f"{info['path']} has no built C extensions ({', '.join(sorted(info['missing']))}), so its timings would "
           f"be of the pure-Python fallback; build them (`python setup.py build_ext --inplace` or `pip install -e .` "
           f"in the checkout)")
    if tree is not None:
        other = probe(None, env)
        if built(other) and other["path"] != info["path"]:
            msg += f", or pass --installed to time the installed traceview at {other['path']} (C decoder built)"
    return msg + ", or pass --allow-fallback to time the fallback anyway"


def add_options(ap, default_tree: Path) -> None:
    """``--tree PATH`` (default ``default_tree``) or ``--installed``, and ``--allow-fallback``."""
    which = ap.add_mutually_exclusive_group()
    which.add_argument("--tree", type=Path, default=default_tree,
                       help="the traceview checkout to time, its C extensions built in place (first on PYTHONPATH; "
                            "default: this one)")
    which.add_argument("--installed", action="store_true",
                       help="time the traceview installed in this interpreter's environment instead of a checkout")
    ap.add_argument("--allow-fallback", action="store_true",
                    help="time a traceview whose C extensions do not load (its pure-Python fallback)")


def compile_bytecode(tree: Path) -> str | None:
    """Compile ``tree``'s ``traceview`` package to ``__pycache__`` as ``pip install`` does at
    install time, so the children time what a user runs, not the compiler (with
    ``PYTHONDONTWRITEBYTECODE`` set, as some shells do, every child would recompile every
    module: 0.2-0.4 s of CPU a command). Returns why it failed, or None."""
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    p = subprocess.run([sys.executable, "-m", "compileall", "-q", str(tree / "traceview")],
                       capture_output=True, text=True, env=env, timeout=600)
    return None if p.returncode == 0 else (p.stderr.strip() or p.stdout.strip() or f"exit {p.returncode}")[-300:]


def choose(args, prog: str) -> tuple[Path | None, dict] | None:
    """(tree, probe) of the traceview :func:`add_options`' ``args`` name, its bytecode compiled
    (:func:`compile_bytecode`), or None after printing ``prog``'s one-line refusal to standard
    error."""
    tree = None if args.installed else args.tree.resolve()
    if tree is not None and not (tree / "traceview" / "cli").is_dir():  # the children would time an installed copy
        print(f"{prog}: {tree} is not a traceview checkout (give --tree CHECKOUT, or --installed)", file=sys.stderr)
        return None
    if tree is not None and (why := compile_bytecode(tree)):
        print(f"{prog}: could not compile {tree / 'traceview'} to bytecode: {why}", file=sys.stderr)
        return None
    info = probe(tree)
    if tree is not None and not info.get("error") and info.get("path") \
            and Path(info["path"]).resolve() != (tree / "traceview").resolve():
        print(f"{prog}: the children import traceview from {info['path']}, not from --tree {tree}", file=sys.stderr)
        return None
    if info.get("error") or (not built(info) and not args.allow_fallback):
        print(f"{prog}: {refusal(tree, info)}", file=sys.stderr)
        return None
    return tree, info
