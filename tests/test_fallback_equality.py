"""Without a compiler the analysis is the same (issue 23, item 1).

Every module that imports one of traceview's C extensions (``_passes``, ``_decode``) binds it
at module level and takes a numpy/polars path when that name is None. Here:

* the analysis of every shared xplane (the corrupt one aside), the vLLM trace JSON folder and
  every fixture profile, as ``traceview analyze --format json --all-rows`` and as the terminal
  table print it, is byte-identical with every C extension on and with every one of those
  names set to None (found by reading the package's sources, so a new module cannot be left
  out); a trace the command refuses (no HLO ops) is refused the same way, and its report,
  read with ``require_ops=False``, is identical too;
* :func:`traceview.analysis.ops.distributions.spread` gives bit-identical p50, p90 and cv with
  and without its C pass on random events (large durations, one-event groups, ties).
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import importlib.machinery
import io
import sys
import time
import types
import warnings
from pathlib import Path

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import traceview

PACKAGE = Path(traceview.__file__).resolve().parent
ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "fixtures"
SHARED = ROOT.parent / "shared" / "traces"


def _extensions() -> set[str]:
    """Dotted names of the C extensions built inside the package."""
    names = set()
    for p in PACKAGE.rglob("*"):
        suffix = next((s for s in importlib.machinery.EXTENSION_SUFFIXES if p.name.endswith(s)), None)
        if suffix is not None and p.is_file():
            names.add(".".join(p.relative_to(PACKAGE.parent).parts)[: -len(suffix)])
    return names


def _bindings(extensions: set[str]) -> list[tuple[str, str]]:
    """(module, name) of every import of an extension in the package's sources. Fails on one
    that the switch below could not reach: not at module level (inside a function, bound at
    each call), or ``import a.b._passes`` (bound as ``a``)."""
    out, bad = [], []
    for py in sorted(PACKAGE.rglob("*.py")):
        parts = py.relative_to(PACKAGE.parent).with_suffix("").parts
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        tree = ast.parse(py.read_text(encoding="utf-8"))
        top = {id(n) for stmt in tree.body for n in ([stmt] + (stmt.body if isinstance(stmt, ast.Try) else []))}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for a in node.names:
                    if f"{node.module}.{a.name}" in extensions:
                        (out if id(node) in top else bad).append((module, a.asname or a.name))
            elif isinstance(node, ast.Import) and any(a.name in extensions for a in node.names):
                bad.append((module, node.names[0].name))
    assert not bad, f"extension imports no test can switch off (import them at module level, as _fast): {bad}"
    return out


EXTENSIONS = _extensions()
pytestmark = pytest.mark.skipif(len(EXTENSIONS) < 3, reason="the C extensions are not built")


@contextlib.contextmanager
def _pure_python(monkeypatch):
    """Every binding of a C extension in the package None inside the block: the fallbacks run.
    Checks that no loaded traceview module still holds an extension afterwards."""
    binds = _bindings(EXTENSIONS)
    assert {m for m, _ in binds} >= {"traceview.read.xplane.wire", "traceview.analysis.ops.distributions"}
    with monkeypatch.context() as mp:
        for module, name in binds:
            mod = importlib.import_module(module)
            assert getattr(mod, name) is not None, f"{module}.{name} is None with the extensions built"
            mp.setattr(mod, name, None)
        yield
        ext = [sys.modules[e] for e in EXTENSIONS if e in sys.modules]
        left = [(m, k) for m, mod in list(sys.modules.items()) if m.startswith("traceview.")
                for k, v in vars(mod).items()
                if f"{m}.{k}" not in EXTENSIONS and any(v is e for e in ext)]  # a package holds its own
        assert not left, f"C extensions still bound while switched off: {left}"


def _inputs() -> list[str]:
    """Every shared xplane but the corrupt one, the vLLM trace JSON folder, every fixture
    profile folder; paths relative to the shared traces or (``fixtures/...``) the checkout."""
    shared = sorted(p.name for p in SHARED.glob("*.xplane.pb") if not p.name.startswith("corrupt"))
    if (SHARED / "vllm_tpu_qwen").is_dir():
        shared.append("vllm_tpu_qwen")
    fixtures = sorted(f"fixtures/{p.name}" for p in FIXTURES.iterdir() if (p / "plugins" / "profile").is_dir())
    return (shared or ["(../shared/traces missing)"]) + fixtures


def _analysis(path: Path, tmp: Path) -> dict:
    """What the command line gives for ``path``: exit code, stderr, the JSON of
    ``analyze --format json --all-rows`` and the terminal table of ``--all-rows``; for a trace
    it refuses, the library's report of it read with ``require_ops=False``, both ways."""
    from traceview.cli import main

    out = {}
    for fmt, suffix in (("json", "json"), ("table", "txt")):
        dest = tmp / f"out.{suffix}"
        dest.unlink(missing_ok=True)
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            rc = main(["analyze", str(path), "--format", fmt, "--all-rows", "--no-cache", "--width", "200",
                       "-o", str(dest)])
        out[fmt] = (rc, err.getvalue().replace(str(dest), "OUT"), dest.read_bytes() if dest.exists() else None)
    if out["json"][0] != 0:
        from traceview.analysis.report import build_report
        from traceview.cli.args import MAX_COUNT
        from traceview.cli.outputs import file_console
        from traceview.render.json import analysis_json
        from traceview.render.terminal import render_report

        with warnings.catch_warnings():  # the pure-Python decoder's "many times slower"
            warnings.filterwarnings("ignore", "traceview at .* has no compiled C decoder", RuntimeWarning)
            rep = build_report(traceview.load(path, require_ops=False, cache=False))
        buf = io.StringIO()
        render_report(file_console(buf, 200), rep, top=MAX_COUNT)
        out["report"] = (analysis_json(rep, top=None, version="test", all_rows=True), buf.getvalue())
    return out


@pytest.mark.parametrize("name", _inputs())
def test_analysis_is_the_same_without_the_c_extensions(name, shared_traces, tmp_path, monkeypatch):
    path = ROOT / name if name.startswith("fixtures/") else shared_traces / name
    assert path.exists(), path
    from traceview.read import discover

    now = time.time()  # the file's age ("9 min old") may not turn over between the two runs
    monkeypatch.setattr(discover, "time", types.SimpleNamespace(time=lambda: now))
    with_c = _analysis(path, tmp_path)
    with _pure_python(monkeypatch):
        without = _analysis(path, tmp_path)
    assert with_c.keys() == without.keys()
    for k in with_c:
        if with_c[k] != without[k]:
            (tmp_path / f"{k}.c").write_bytes(repr(with_c[k]).encode())
            (tmp_path / f"{k}.python").write_bytes(repr(without[k]).encode())
            pytest.fail(f"{name}: the {k} output differs without the C extensions (both under {tmp_path})")
    assert with_c["json"][0] == 0 or "the trace has no HLO ops" in with_c["json"][1], with_c["json"][1]


@st.composite
def _events(draw):
    """Op events of a few (op, module) populations, one occurrence each: durations up to 2**62,
    drawn from a small pool (ties, equal groups) or not; groups of one event."""
    n = draw(st.integers(1, 60))
    top = draw(st.sampled_from([10, 10**6, 10**12, 2**53 + 1, 2**62]))
    pool = draw(st.lists(st.integers(0, top), min_size=1, max_size=3))
    dur = draw(st.lists(st.one_of(st.sampled_from(pool), st.integers(0, top)), min_size=n, max_size=n))
    op = draw(st.lists(st.integers(0, draw(st.integers(0, 8))), min_size=n, max_size=n))
    mod = draw(st.lists(st.sampled_from(["a", "b"]), min_size=n, max_size=n))
    return pl.DataFrame({"host": "h", "device": "d", "module": mod, "op_name": [f"op{x}" for x in op],
                         "shape": "f32[1]", "start_ps": range(n), "duration_ps": dur, "self_ps": dur, "count": 1})


@settings(max_examples=300)
@given(_events(), st.sampled_from([["op_name", "shape", "module"], ["op_name"], ["module"]]))
def test_spread_is_bit_identical_without_its_c_pass(ops, keys):
    from traceview.analysis.ops import distributions as dist
    from traceview.model.optable import OpTable

    assert dist._fast is not None
    table = OpTable.from_frame(ops)
    col = table.collapse()
    with_c = dist.spread(table, col, keys).sort(keys)
    saved, dist._fast = dist._fast, None  # not monkeypatch: a function-scoped fixture under @given
    try:
        without = dist.spread(table, col, keys).sort(keys)
    finally:
        dist._fast = saved
    assert with_c.equals(without, null_equal=True), (with_c, without)
    assert with_c.height == col.select(keys).unique().height
