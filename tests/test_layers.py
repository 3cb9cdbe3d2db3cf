"""The package's layers, read -> model -> analysis -> render -> cli: imports run one way.

Every module under ``traceview/`` is parsed (no import is executed) and each of its imports,
at module level or inside a function, is checked:

* a module of a layer imports only its own layer, the layers below it, ``traceview.errors``
  and ``traceview.__version__``; never ``traceview.api``, ``traceview.testing`` or
  ``traceview.pytest_plugin`` (the entry points above the layers);
* nothing but ``traceview.cli`` imports ``traceview.engine_shim``, and no layer imports
  ``traceview.kernels`` (both stay top level; the analysis core never needs them).
"""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "traceview"
LAYERS = ("read", "model", "analysis", "render", "cli")


def _imports(path: Path, module: str):
    """(line, imported module) for every import in the file at ``path`` (its dotted name
    ``module``), relative imports resolved."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield node.lineno, a.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if node.module is None or target == "traceview":  # from . import x / from traceview import x
                for a in node.names:
                    yield node.lineno, f"{target}.{a.name}"
            else:
                yield node.lineno, target


def violations(root: Path = PACKAGE) -> list[str]:
    """One line per import that runs against the layers (module doc), ``file:line: ...``."""
    out = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root.parent)
        module = ".".join(rel.with_suffix("").parts).removesuffix(".__init__")
        parts = module.split(".")
        layer = parts[1] if len(parts) > 1 and parts[1] in LAYERS else None
        for line, name in _imports(path, module):
            seg = name.split(".")
            if seg[0] != "traceview" or len(seg) < 2:
                continue
            where = f"{rel}:{line}: {module} imports {name}"
            if seg[1] == "engine_shim" and layer != "cli":
                out.append(f"{where} (only the cli may import the engine)")
            elif layer is None:
                continue
            elif seg[1] == "kernels":
                out.append(f"{where} (the layers never import the bundled kernels)")
            elif seg[1] in LAYERS:
                if LAYERS.index(seg[1]) > LAYERS.index(layer):
                    out.append(f"{where} ({layer} is below {seg[1]})")
            elif seg[1] not in ("errors", "__version__", "engine_shim"):
                out.append(f"{where} (a layer imports only layers at or below it and traceview.errors)")
    return out


def test_imports_run_one_way():
    assert violations() == []


def test_every_module_sits_in_a_layer_or_is_an_entry_point():
    """The top level holds only the entry points and the shared errors."""
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert top == ["__init__.py", "api.py", "errors.py", "pytest_plugin.py", "testing.py"], top
    folders = sorted(p.name for p in PACKAGE.iterdir() if p.is_dir() and not p.name.startswith((".", "_")))
    assert folders == sorted(LAYERS), folders


def test_a_forbidden_import_is_caught(tmp_path):
    """The check fails on a copy of the package with imports that run upwards added: a reader
    importing an analysis (lazily, inside a function), an analysis importing a renderer
    (relatively), the model importing the engine, and a renderer importing the entry points."""
    copy = tmp_path / "traceview"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    with open(copy / "read" / "discover.py", "a", encoding="utf-8") as fh:
        fh.write("\n\ndef _sneaky():\n    from traceview.analysis import aggregate  # noqa\n")
    with open(copy / "analysis" / "ops" / "roofline.py", "a", encoding="utf-8") as fh:
        fh.write("\nfrom ...render import terminal  # noqa\n")
    with open(copy / "model" / "schema.py", "a", encoding="utf-8") as fh:
        fh.write("\nimport traceview.engine_shim.engine  # noqa\n")
    with open(copy / "render" / "json.py", "a", encoding="utf-8") as fh:
        fh.write("\nfrom traceview import api  # noqa\n")
    found = violations(copy)
    assert len(found) == 4, found
    assert any("traceview.read.discover imports traceview.analysis (read is below analysis)" in v
               for v in found)
    assert any("traceview.analysis.ops.roofline imports traceview.render" in v for v in found)
    assert any("only the cli may import the engine" in v for v in found)
    assert any("traceview.render.json imports traceview.api" in v for v in found)


def test_every_package_folder_is_installed():
    """A non-editable install (the README's first command) ships only the packages
    ``pyproject.toml`` lists: every folder of the source tree with an ``__init__.py`` must be
    there (``traceview.analysis.findings`` was missing, and ``analyze`` died on its import)."""
    import tomllib

    root = Path(__file__).resolve().parents[1]
    listed = set(tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {".".join(("traceview",) + p.parent.relative_to(root / "traceview").parts)
             for p in (root / "traceview").rglob("__init__.py")}
    found |= {"traceview.kernels", "traceview.engine_shim"}
    assert found <= listed, sorted(found - listed)
