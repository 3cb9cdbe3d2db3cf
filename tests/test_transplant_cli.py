"""``traceview engine transplant|patch`` and ``--kernel-dir``: the transplant done from the
command line alone (copy, patch the copy, profile with it injected, verify the trace's
kernel source is the copy), and anchored patches of an installed module with an exact revert."""

from __future__ import annotations

import hashlib
import importlib
import json
import sys
from pathlib import Path

import pytest

from traceview.engine_shim.cli import main as engine
from traceview.engine_shim.transplant import engine_kernel_modules

OVERRIDE_ANCHOR = "    bkv, _source = resolve_kv_block_size(\n"
OVERRIDE = "    kv_block_size = 32 if kv_block_size is None else kv_block_size  # transplant: override\n" + OVERRIDE_ANCHOR


def _sha(p) -> str:
    return hashlib.sha256(Path(p).read_bytes()).hexdigest()


def _stock_dir() -> Path:
    import traceview.kernels

    return Path(traceview.kernels.__file__).resolve().parent


# ---------------------------------------------------------------------------- transplant, profile, verify
@pytest.fixture(scope="module")
def transplanted(tmp_path_factory):
    """CLI only: transplant into a folder, patch the copy's block size to 32 with `patch`,
    profile the tiny engine with `--kernel-dir`. Returns what each step returned/printed."""
    capture = pytest.MonkeyPatch()
    tmp = tmp_path_factory.mktemp("cli_transplant")
    kdir, backups, log_dir = tmp / "my_kernels", tmp / "backups", tmp / "profile"
    out = {"kdir": kdir, "backups": backups, "log_dir": log_dir}
    import io

    def run(argv):
        so, se = io.StringIO(), io.StringIO()
        capture.setattr(sys, "stdout", so)
        capture.setattr(sys, "stderr", se)
        try:
            rc = engine(argv)
        finally:
            capture.undo()
        return rc, so.getvalue(), se.getvalue()

    out["transplant"] = run(["transplant", str(kdir)])
    out["again"] = run(["transplant", str(kdir)])
    out["patch"] = run(["patch", str(kdir / "paged_attention.py"), "--anchor", OVERRIDE_ANCHOR, "--replace", OVERRIDE,
                        "--backup-dir", str(backups)])
    import traceview.engine_shim.model as model_mod
    import traceview.kernels.paged_attention as stock

    out["stock_paged_decode"] = stock.paged_decode
    out["profile"] = run(["profile", "--kernel-dir", str(kdir), "--log-dir", str(log_dir), "--no-precompile",
                          "--max-tokens", "3", "--max-num-seqs", "4", "--time-tolerance", "1", "--format", "json"])
    out["after"] = (stock.paged_decode, model_mod.paged_decode)
    out["revert"] = run(["patch", str(kdir / "paged_attention.py"), "--revert", "--backup-dir", str(backups)])
    return out


def test_transplant_copies_the_engine_kernel_modules(transplanted):
    kdir, stock = transplanted["kdir"], _stock_dir()
    rc, stdout, _ = transplanted["transplant"]
    assert rc == 0
    names = engine_kernel_modules()
    assert "paged_attention" in names  # dependencies first: each module after what it imports
    assert all(names.index(d) < names.index("paged_attention") for d in ("block_sizes", "naming", "quant"))
    assert sorted(p.name for p in kdir.iterdir()) == sorted(f"{n}.py" for n in names)
    assert transplanted["revert"][0] == 0  # paged_attention.py was patched, then reverted byte for byte
    for n in names:
        assert _sha(kdir / f"{n}.py") == _sha(stock / f"{n}.py")
    assert f"--kernel-dir {kdir}" in stdout
    rc, _, err = transplanted["again"]  # existing copies are not overwritten without --force
    assert rc == 2 and "already exist" in err and "--force" in err and len(err.strip().splitlines()) == 1


def test_profile_with_kernel_dir_runs_the_copy_and_prints_probes_once(transplanted):
    kdir = transplanted["kdir"]
    rc, stdout, err = transplanted["profile"]
    assert rc == 0, err
    result = json.loads(stdout)
    assert result["config"]["kv_block_size"] == 32  # the patched copy's override took effect
    line = f"transplant: traceview.kernels.paged_attention.paged_decode → {kdir}/paged_attention.py, first call"
    assert err.splitlines().count(line) == 1
    probes = [ln for ln in err.splitlines() if ln.endswith(", first call")]
    assert len(probes) == len(set(probes))  # each probe reports once
    assert "never called" not in err
    rec = {m["stock"]: m for m in result["transplant"]["modules"]}
    pa = rec["traceview.kernels.paged_attention"]
    assert pa["copy_file"] == str(kdir / "paged_attention.py") and pa["probe_calls"]["paged_decode"] >= 1
    assert "traceview.engine_shim.model.paged_decode" in pa["rebound"]
    # Reverted after the run: the stock kernel is back everywhere.
    stock_fn = transplanted["stock_paged_decode"]
    assert transplanted["after"] == (stock_fn, stock_fn)


def test_verify_proves_the_kernel_source_is_the_copy(transplanted, capsys):
    from traceview.cli import main as tv

    log_dir, kdir = transplanted["log_dir"], transplanted["kdir"]
    assert tv(["verify", str(log_dir), "--check", f"source of kernel RPAd* under {kdir}",
               "--check", "kernel RPAd* has bkv 32"]) == 0
    assert tv(["verify", str(log_dir), "--check", f"source of kernel RPAd* under {_stock_dir()}"]) == 1
    out = capsys.readouterr().out
    assert f"{kdir}/paged_attention.py" in out  # the failing check names the copy as the source


def test_printed_step_count_is_the_profiled_one(transplanted):
    """The engine's `main_decode_steps` (what it prints for `--steps`) equals the decode
    step markers and the decode program's executions in the profile it wrote."""
    import polars as pl

    import traceview

    result = json.loads(transplanted["profile"][1])
    n = result["main_decode_steps"]
    assert n == 2  # 3 tokens per request: the first from prefill, then 2 decode steps
    prof = traceview.load(result["profile_dir"])
    assert prof.steps().steps.height == n
    decode_runs = prof.module_runs.filter(pl.col("module").str.starts_with("jit_decode_"))
    assert decode_runs.height == n and decode_runs["module"].unique().to_list() == ["jit_decode_b4_bkv32"]
    checks = prof.occurrence_checks(steps={"jit_decode_b4_bkv32": n})["steps_ok"].drop_nulls()
    assert checks.len() > 0 and checks.all()  # every population of the decode program is a multiple of n


def test_kernel_dir_errors_are_one_line_exit_2(tmp_path, capsys):
    import traceview.kernels.block_sizes as bs

    stock_resolve = bs.resolve_kv_block_size
    assert engine(["profile", "--kernel-dir", str(tmp_path / "missing")]) == 2
    (tmp_path / "empty").mkdir()
    assert engine(["profile", "--kernel-dir", str(tmp_path / "empty")]) == 2
    bad = tmp_path / "bad"
    assert engine(["transplant", str(bad)]) == 0
    (bad / "paged_attention.py").write_text("def paged_decode(:\n")
    assert engine(["profile", "--kernel-dir", str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and "Traceback" not in "".join(err)
    assert "does not exist" in err[0] and "holds no copy" in err[1]
    assert f"{bad}/paged_attention.py: SyntaxError" in err[2]
    assert bs.resolve_kv_block_size is stock_resolve  # modules injected before the failure were reverted


# ---------------------------------------------------------------------------- patch and revert
@pytest.fixture
def installed(tmp_path, monkeypatch):
    """An importable package `tv_patch_pkg.mod`, and a backup folder apart from it."""
    pkg = tmp_path / "site" / "tv_patch_pkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "mod.py").write_bytes("# café\r\nLIMIT = 16\r\nSCALE = 1\r\nOTHER = 1\r\n".encode())
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    yield pkg / "mod.py", tmp_path / "backups"
    for m in [m for m in sys.modules if m.startswith("tv_patch_pkg")]:
        sys.modules.pop(m, None)


def test_patch_by_module_name_and_revert_byte_identical(installed, capsys):
    path, backups = installed
    before = _sha(path)
    rc = engine(["patch", "tv_patch_pkg.mod", "--anchor", "LIMIT = 16", "--replace", "LIMIT = 4",
                 "--anchor", "SCALE = 1", "--replace", "SCALE = 2", "--backup-dir", str(backups)])
    assert rc == 0
    out = capsys.readouterr().out
    assert "-LIMIT = 16" in out and "+LIMIT = 4" in out and "--revert" in out
    assert importlib.import_module("tv_patch_pkg.mod").LIMIT == 4 and _sha(path) != before
    assert sorted(p.name for p in path.parent.iterdir() if p.is_file()) == ["__init__.py", "mod.py"]  # no backup beside it
    # A second patch before the revert is refused and changes nothing.
    patched = _sha(path)
    assert engine(["patch", str(path), "--anchor", "OTHER = 1", "--replace", "OTHER = 3", "--backup-dir", str(backups)]) == 2
    assert "already patched" in capsys.readouterr().err and _sha(path) == patched
    assert engine(["patch", "tv_patch_pkg.mod", "--revert", "--backup-dir", str(backups)]) == 0
    assert _sha(path) == before
    assert list(backups.iterdir()) == []  # the backup is gone once used
    assert engine(["patch", "tv_patch_pkg.mod", "--revert", "--backup-dir", str(backups)]) == 2
    assert "no patch to revert" in capsys.readouterr().err


@pytest.mark.parametrize("anchor,count", [("MISSING = 0", 0), (" = 1\r\n", 2)])
def test_patch_anchor_count_must_be_one(installed, capsys, anchor, count):
    path, backups = installed
    before = _sha(path)
    assert engine(["patch", str(path), "--anchor", anchor, "--replace", "X", "--backup-dir", str(backups)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"matched {count} times" in err[0]
    assert _sha(path) == before and not backups.exists()


def test_patch_revert_refuses_a_file_edited_since_unless_forced(installed, capsys):
    path, backups = installed
    before = _sha(path)
    assert engine(["patch", str(path), "--anchor", "LIMIT = 16", "--replace", "LIMIT = 8", "--backup-dir", str(backups)]) == 0
    path.write_bytes(path.read_bytes() + b"EXTRA = 1\r\n")
    assert engine(["patch", str(path), "--revert", "--backup-dir", str(backups)]) == 2
    assert "changed since" in capsys.readouterr().err
    assert engine(["patch", str(path), "--revert", "--force", "--backup-dir", str(backups)]) == 0
    assert _sha(path) == before


def test_patch_usage_errors(installed, capsys):
    path, backups = installed
    before = _sha(path)
    assert engine(["patch", str(path), "--anchor", "LIMIT = 16", "--backup-dir", str(backups)]) == 2
    assert engine(["patch", "no_such_module_tv.x", "--anchor", "a", "--replace", "b"]) == 2
    assert engine(["patch", str(path), "--anchor", "LIMIT = 16", "--replace", "LIMIT = 16", "--backup-dir", str(backups)]) == 2
    assert engine(["patch", str(path), "--anchor", "LIMIT = 16", "--replace", "LIMIT = 2", "--dry-run"]) == 0
    cap = capsys.readouterr()
    assert "+LIMIT = 2" in cap.out and _sha(path) == before and not backups.exists()
    err = cap.err.strip().splitlines()
    assert len(err) == 3 and "one --replace per --anchor" in err[0] and "no module of that name" in err[1]
    assert "nothing to patch" in err[2]


def test_transplant_and_patch_bad_targets_are_usage_errors(tmp_path, capsys):
    """An empty folder name, a folder inside a profile tree, an empty anchor and a binary
    target are one-line usage errors (exit 2), never a traceback."""
    from traceview.engine_shim.cli import main

    assert main(["transplant", ""]) == 2
    assert "empty" in capsys.readouterr().err
    prof = tmp_path / "p" / "plugins" / "profile" / "r"
    prof.mkdir(parents=True)
    assert main(["transplant", str(prof / "k")]) == 2
    assert "plugins/profile tree" in capsys.readouterr().err and not (prof / "k").exists()
    target = tmp_path / "m.py"
    target.write_text("x = 1\n")
    assert main(["patch", str(target), "--anchor", "", "--replace", "y", "--backup-dir", str(tmp_path / "b")]) == 2
    assert "empty anchor" in capsys.readouterr().err
    binary = tmp_path / "b.py"
    binary.write_bytes(b"\x8c\x00\xff")
    assert main(["patch", str(binary), "--anchor", "a", "--replace", "b", "--backup-dir", str(tmp_path / "b")]) == 2
    err = capsys.readouterr().err.strip()
    assert "not UTF-8" in err and len(err.splitlines()) == 1
    assert target.read_text() == "x = 1\n" and binary.read_bytes() == b"\x8c\x00\xff"
