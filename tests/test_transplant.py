"""Transplant shim: anchored source patches, module injection, and the demonstration on the
bundled engine (copy of the stock kernel with a block-size override, probed and traced)."""

from __future__ import annotations

import logging
import sys
import textwrap

import pytest

from traceview.engine_shim.transplant import AnchorError, copy_module_source, inject, load_module_copy, patch_source


# ---------------------------------------------------------------------------- anchored patches
def _tmp_module_file(tmp_path, text, name="mod.py", newline="\n"):
    p = tmp_path / name
    p.write_bytes(text.replace("\n", newline).encode("utf-8"))
    return p


def test_patch_applies_once_and_reverts_byte_identical(tmp_path):
    # CRLF line endings and non-ASCII text: the revert must give back the exact bytes.
    p = _tmp_module_file(tmp_path, "# café\ndef f():\n    return 1\n\ndef g():\n    return 2\n", newline="\r\n")
    before = p.read_bytes()
    with patch_source(p, [("return 1", "return 10"), ("def g():\r\n    return 2", "def g():\r\n    return 20")]) as patch:
        assert patch.applied
        assert b"return 10" in p.read_bytes() and b"return 20" in p.read_bytes()
        assert "-    return 1" in patch.diff and "+    return 10" in patch.diff
    assert p.read_bytes() == before


def test_patch_dry_run_returns_diff_and_writes_nothing(tmp_path):
    p = _tmp_module_file(tmp_path, "X = 1\nY = 2\n")
    before = p.read_bytes()
    patch = patch_source(p, {"Y = 2": "Y = 3"}, dry_run=True)
    assert not patch.applied and p.read_bytes() == before
    assert "-Y = 2" in patch.diff and "+Y = 3" in patch.diff
    patch.revert()  # no-op for a dry run
    assert p.read_bytes() == before


@pytest.mark.parametrize("anchor,count", [("Z = 9", 0), ("= 1", 2)])
def test_patch_anchor_must_match_exactly_once(tmp_path, anchor, count):
    p = _tmp_module_file(tmp_path, "X = 1\nW = 1\nY = 2\n")
    before = p.read_bytes()
    with pytest.raises(AnchorError, match=f"matched {count} times"):
        # The first edit is valid; the failing second one must leave the file untouched.
        patch_source(p, [("Y = 2", "Y = 5"), (anchor, "Q")])
    assert p.read_bytes() == before


def test_patch_on_a_copy_of_an_installed_module(tmp_path):
    import traceview.kernels.block_sizes as stock

    copy = copy_module_source(stock, tmp_path / "my_kernels", filename="block_sizes.py")
    stock_bytes = open(stock.__file__, "rb").read()
    patch = patch_source(copy, [("TARGET_BLOCK_BYTES = 16 * 1024 * 1024", "TARGET_BLOCK_BYTES = 4 * 1024 * 1024")])
    mod = load_module_copy(copy, "my_kernels_test_patch.block_sizes")
    try:
        assert mod.TARGET_BLOCK_BYTES == 4 * 1024 * 1024
    finally:
        sys.modules.pop("my_kernels_test_patch.block_sizes", None)
    patch.revert()
    assert copy.read_bytes() == stock_bytes
    assert open(stock.__file__, "rb").read() == stock_bytes  # the installed file was never touched


# ---------------------------------------------------------------------------- injection
def _make_pkg(tmp_path, pkg):
    d = tmp_path / pkg
    d.mkdir()
    (d / "__init__.py").write_text("")
    (d / "stock.py").write_text(textwrap.dedent("""
        def entry(x):
            return _body(x) + 1

        def _body(x):
            return x * 2

        class Helper:
            pass

        CONST = 3
    """))
    (d / "user.py").write_text(f"from {pkg}.stock import entry\n\ndef run(x):\n    return entry(x)\n")
    (d / "copy_of_stock.py").write_text(textwrap.dedent("""
        def entry(x):
            return _body(x) + 100

        def _body(x):
            return x * 3

        class Helper:
            pass
    """))
    return d


def test_inject_replaces_rebinds_probes_and_reverts(tmp_path, monkeypatch, caplog):
    pkg = "tv_transplant_pkg"
    d = _make_pkg(tmp_path, pkg)
    monkeypatch.syspath_prepend(str(tmp_path))
    import importlib

    stock = importlib.import_module(f"{pkg}.stock")
    user = importlib.import_module(f"{pkg}.user")
    orig_entry, orig_body = stock.entry, stock._body
    assert user.run(1) == 3
    hits = []
    with caplog.at_level(logging.INFO, logger="traceview.engine_shim.transplant"):
        with inject(stock, d / "copy_of_stock.py", rebind_prefixes=(pkg,), on_probe=lambda n, r: hits.append(n)) as rep:
            copy = sys.modules[rep.copy_module]
            assert sorted(rep.replaced) == ["Helper", "_body", "entry"]
            assert rep.wrapped == ["entry"] and sorted(rep.unwrapped) == ["Helper", "_body"]
            assert rep.rebound == [(f"{pkg}.user", "entry")]
            assert stock._body is copy._body  # kernel bodies go in unwrapped
            assert stock.entry.__name__ == "entry" and stock.entry.__wrapped__ is copy.entry
            assert not rep.fired("entry")
            assert user.run(1) == 103 and stock.entry(2) == 106  # the copy's code runs
            assert rep.fired("entry") and rep.probe_hits["entry"] == 2
            assert hits == ["entry"]  # reported once
    assert sum("transplant probe" in r.getMessage() for r in caplog.records) == 1
    assert rep.reverted
    assert stock.entry is orig_entry and stock._body is orig_body and user.entry is orig_entry
    assert user.run(1) == 3
    for m in [m for m in sys.modules if m.startswith(pkg) or m.startswith("tv_transplant")]:
        sys.modules.pop(m, None)


def test_inject_reports_callables_missing_from_copy(tmp_path, monkeypatch):
    pkg = "tv_transplant_pkg2"
    d = _make_pkg(tmp_path, pkg)
    (d / "partial_copy.py").write_text("def entry(x):\n    return -1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import importlib

    stock = importlib.import_module(f"{pkg}.stock")
    rep = inject(stock, d / "partial_copy.py", rebind_prefixes=(pkg,))
    try:
        assert rep.replaced == ["entry"] and sorted(rep.missing) == ["Helper", "_body"]
    finally:
        rep.revert()
    assert stock.entry(1) == 3
    for m in [m for m in sys.modules if m.startswith(pkg) or m.startswith(d.name)]:
        sys.modules.pop(m, None)


# ---------------------------------------------------------------------------- the demonstration
PROMPTS = ["Hello, my name is", "The president of the United States is", "The capital of France is",
           "The future of AI is"]
OVERRIDE_ANCHOR = "    bkv, _source = resolve_kv_block_size(\n"
OVERRIDE = ("    kv_block_size = 32 if kv_block_size is None else kv_block_size  # transplant: block-size override\n"
            + OVERRIDE_ANCHOR)


def test_transplanted_kernel_copy_runs_in_engine_and_shows_in_trace(tmp_path):
    """Copy of the stock kernel module with only a block-size override: identical greedy
    generations, probe fired, and a profile whose kernel ops carry the copy's source path and
    the overridden block size in the kernel name."""
    import polars as pl

    import traceview
    import traceview.engine_shim.engine as engine_mod
    import traceview.engine_shim.model as model_mod
    import traceview.kernels.paged_attention as stock
    from traceview.engine_shim.engine import LLM
    from traceview.engine_shim.sampling import SamplingParams
    from traceview.kernels import parse_kernel_config

    greedy = SamplingParams(max_tokens=20, temperature=0.0, ignore_eos=True)
    kw = dict(max_num_seqs=4, max_model_len=128, min_request_bucket=4, precompile=False)

    stock_llm = LLM("tiny", **kw)
    assert stock_llm.kv_block_size == 128  # heuristic: 16 MiB target capped at the 128-token context
    expected = [o.outputs[0].token_ids for o in stock_llm.generate(PROMPTS, greedy)]
    assert len({tuple(t) for t in expected}) > 1  # outputs depend on the prompt

    copy_path = copy_module_source(stock, tmp_path / "my_kernels", filename="kernel.py")
    patch = patch_source(copy_path, [(OVERRIDE_ANCHOR, OVERRIDE)])
    added = [ln for ln in patch.diff.splitlines() if ln.startswith("+") and not ln.startswith("+++")]
    removed = [ln for ln in patch.diff.splitlines() if ln.startswith("-") and not ln.startswith("---")]
    assert len(added) == 1 and "transplant: block-size override" in added[0] and not removed

    stock_paged_decode = stock.paged_decode
    with inject(stock, copy_path, rebind_prefixes=("traceview.engine_shim",)) as rep:
        assert ("traceview.engine_shim.model", "paged_decode") in rep.rebound
        assert ("traceview.engine_shim.engine", "decode_block_size") in rep.rebound
        assert "_paged_decode_kernel" in rep.unwrapped and "paged_decode" in rep.wrapped
        llm = LLM("tiny", **kw)
        assert llm.kv_block_size == 32
        got = [o.outputs[0].token_ids for o in llm.generate(PROMPTS, greedy)]
        assert got == expected
        assert rep.fired("paged_decode") and rep.fired("decode_block_size")

        llm.start_profile(tmp_path / "profile")
        llm.generate(PROMPTS, SamplingParams(max_tokens=3, temperature=0.0, ignore_eos=True))
        run = llm.stop_profile()
    assert run is not None and run.parent == tmp_path / "profile" / "plugins" / "profile"
    assert stock.paged_decode is stock_paged_decode and model_mod.paged_decode is stock_paged_decode
    assert engine_mod.decode_block_size is stock.decode_block_size

    ops = traceview.load(str(run)).by_shape()
    kernel_ops = ops.filter(pl.col("framework_op").fill_null("").str.contains("RPAd-", literal=True))
    assert kernel_ops.height > 0
    names = set(kernel_ops["framework_op"].to_list())
    assert {parse_kernel_config(n)["bkv"] for n in names} == {(32, 32)}
    assert all("jit_decode_b4_bkv32" in m for m in kernel_ops["modules"].to_list())
    sources = set(kernel_ops["source"].drop_nulls().to_list())
    assert sources and all("my_kernels/kernel.py" in s for s in sources), [s for s in sources if "my_kernels" not in s]
