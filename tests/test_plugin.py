"""The pytest plugin as a user's project sees it: a fresh project (``pytester``) with no
conftest, only ``traceview`` installed, whose tests use the plugin's fixtures and
``traceview.testing`` on traceview's recorded engine traces and the shared real traces."""

from __future__ import annotations

import json
import shutil
import textwrap
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"

USER_TESTS = '''
import pytest
from traceview import testing as tvt

SHARED = {shared!r}


def test_greedy_decoding_drops_the_sampler_search(recorded_trace):
    greedy, topp = recorded_trace("greedy_b4"), recorded_trace("topp_b4")
    tvt.assert_op_present(topp, "topp_binary_search")
    tvt.assert_op_absent(greedy, "topp_binary_search")
    tvt.assert_vanished(topp, greedy, "binary_search")
    tvt.assert_all_matched(topp, greedy, except_regex="sample|greedy")


def test_kv_block_read_off_the_kernel_name(recorded_trace):
    tvt.assert_kernel_present(recorded_trace("greedy_b8"), "RPAd*")
    tvt.assert_kernel_config(recorded_trace("greedy_b8"), "RPAd*", bkv=128, page=16, phase="decode")
    tvt.assert_kernel_config(recorded_trace("greedy_b4"), "RPAd*", bkv=(128, 128))


def test_family_budgets(recorded_trace):
    tvt.assert_family_share(recorded_trace("greedy_b4"), "sampling", below=0.05)
    tvt.assert_family_share(recorded_trace("topp_b4"), "sampling", above=0.05)
    tvt.assert_family_share(recorded_trace("greedy_b4"), "attention", below=0.6, above=0.01)


def test_occurrences_per_execution(recorded_trace):
    # the top-p search loop body runs 32 times per sampler call
    tvt.assert_occurrences(recorded_trace("topp_b4"), "topp_binary_search/while/body/add", 32, per_execution=True)
    tvt.assert_occurrences(recorded_trace("greedy_b4"), "iota_reduce_fusion", 1, per_execution=True)


def test_source_attribution(recorded_trace):
    prof = recorded_trace("greedy_b4")
    tvt.assert_source_present(prof, "engine_shim/model.py")
    tvt.assert_source_under(prof, "kernels/", kernel="RPAd*")
    tvt.assert_ops_from_file_present(recorded_trace("topp_b4"), "sampling[.]py")


def test_profile_from_ini(traceview_profile):
    assert traceview_profile.ops.height > 0
    tvt.assert_op_present(traceview_profile, "all-reduce")


@pytest.mark.traceview(SHARED + "/mi300x_jax_attention.xplane.pb")
def test_profile_from_marker_path(traceview_profile):
    tvt.assert_op_absent(traceview_profile, "RPA")
    assert "mi300x_jax_attention" in traceview_profile.traces[0].path


@pytest.mark.traceview(recorded="greedy_b8")
def test_profile_from_marker_recorded(traceview_profile):
    tvt.assert_check(traceview_profile, "op matching iota_reduce_fusion count == 1 per execution")


@pytest.fixture(scope="session")
def conv_trace():
    return SHARED + "/mi300x_jax_conv3d.xplane.pb"


@pytest.mark.traceview(fixture="conv_trace")
def test_profile_from_fixture_name(traceview_profile):
    tvt.assert_op_present(traceview_profile, "cudnn-conv")
    tvt.assert_family_share(traceview_profile, "matmul", above=0.4, below=0.5)  # 45.5% of op time


@pytest.mark.parametrize("traceview_profile", [SHARED + "/mi300x_jax_gemm_sweep.xplane.pb",
                                               SHARED + "/vllm_tpu_qwen"], indirect=True)
def test_profile_parametrized(traceview_profile):
    tvt.assert_op_present(traceview_profile, "custom-call")


def test_own_recorded_traces(recorded_trace, traceview_fixtures_dir):
    assert traceview_fixtures_dir.name == "{fixtures_name}"
    tvt.assert_op_present(recorded_trace("psum_run"), "all-reduce")


def test_golden_summary(recorded_trace, traceview_golden):
    summary = traceview_golden(recorded_trace("greedy_b4"), "greedy_b4")
    assert summary["kernels"]["RPAd-p_16-bq_1_1-bkv_128_128"]["config"]["bkv"] == [128, 128]
'''

FAILING_TESTS = '''
import pytest
from traceview import testing as tvt


def test_block_size(recorded_trace):
    tvt.assert_kernel_config(recorded_trace("greedy_b4"), "RPAd*", bkv=256)


def test_sampler_gone(recorded_trace):
    tvt.assert_op_absent(recorded_trace("topp_b4"), "topp_binary_search")


def test_budget(recorded_trace):
    tvt.assert_family_share(recorded_trace("topp_b4"), "sampling", below=0.05)


def test_transplant(recorded_trace):
    tvt.assert_source_under(recorded_trace("greedy_b4"), "my_kernels/", kernel="RPAd*")


def test_count(recorded_trace):
    tvt.assert_occurrences(recorded_trace("topp_b4"), "topp_binary_search/while/body/add", 16, per_execution=True)


def test_unknown_recorded(recorded_trace):
    recorded_trace("nope")


@pytest.mark.traceview()
def test_marker_without_trace(traceview_profile):
    pass
'''


@pytest.fixture(scope="module", autouse=True)
def _modules_imported_before_inner_runs(shared_traces):
    """pytester's in-process runs drop the modules first imported inside them, and numpy
    cannot be imported twice in one process: do every lazy import of the code under test
    here, in the outer session, by running it once."""
    import numpy  # noqa: F401

    import traceview
    from traceview import testing as tvt

    prof = traceview.load(FIXTURES / "greedy_b4")
    tvt.golden_summary(prof)
    tvt.check(prof, "kernel RPAd* has bkv 128", base=prof)
    tvt.check(prof, "all matched", base=prof)


@pytest.fixture
def user_project(pytester, shared_traces, tmp_path):
    """A project with its own traces folder (one run copied from the shared traces) and an
    ini file pointing the plugin at it and at a shared trace."""
    own = tmp_path / "my_traces"
    run = own / "psum_run" / "plugins" / "profile" / "2026_01_01_00_00_00"
    run.mkdir(parents=True)
    shutil.copy(shared_traces / "tpu_v6e_4chip_psum.xplane.pb", run / "host0.xplane.pb")
    for name in ("greedy_b4", "greedy_b8", "topp_b4"):  # the project's own recordings: traceview's fixtures
        (own / name).symlink_to(FIXTURES / name, target_is_directory=True)
    pytester.makeini(textwrap.dedent(f"""
        [pytest]
        traceview_fixtures_dir = {own}
        traceview_path = {shared_traces / "tpu_v6e_4chip_psum.xplane.pb"}
        traceview_golden_dir = golden
    """))
    return pytester, own


def test_user_suite_against_recorded_and_shared_traces(user_project, shared_traces):
    pytester, own = user_project
    pytester.makepyfile(test_user=USER_TESTS.format(shared=str(shared_traces), fixtures_name=own.name))
    # first run writes the golden summary, the second compares against it
    result = pytester.runpytest("-p", "no:cacheprovider", "--traceview-update-golden")
    result.assert_outcomes(passed=13)
    golden = pytester.path / "golden" / "greedy_b4.json"
    doc = json.loads(golden.read_text())
    assert doc["modules"]["jit_decode_b4_bkv128"] == 3 and doc["traceview_golden"] == 1
    assert [p["kind"] for p in doc["populations"]] == sorted(p["kind"] for p in doc["populations"])  # stable order
    result = pytester.runpytest("-p", "no:cacheprovider", "-k", "golden")
    result.assert_outcomes(passed=1)

    # a golden summary that no longer matches: exact counts and times out of tolerance are named
    kernel = next(p for p in doc["populations"] if p["kind"] == "kernel")
    kernel["occurrences"] += 1
    share = kernel["share"]
    kernel["share"] = share / 3  # as if the kernel had taken a third of its share of op time
    kernel["self_ps"] //= 3
    golden.write_text(json.dumps(doc))
    result = pytester.runpytest("-p", "no:cacheprovider", "-k", "golden", "-o", "traceview_golden_time_rtol=0.25",
                                "-o", "traceview_golden_time_share_atol=0.01")
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "profile differs from the golden summary" in out and "--traceview-update-golden" in out
    assert f"RPAd-p_*-bq_*_*-bkv_*_* {kernel['shape'][:40]}" in out
    assert "6 occurrences, golden 7 (exact)" in out
    assert f"{100 * share:.1f}% of op time" in out and f"golden {100 * share / 3:.1f}%" in out
    tol = max(0.01, 0.25 * share / 3)  # the ini tolerances, in points of share
    assert f"bound ±{100 * tol:.1f} points" in out


def test_failure_messages_name_op_shape_figure_and_bound(user_project):
    pytester, _ = user_project
    pytester.makepyfile(test_failing=FAILING_TESTS)
    result = pytester.runpytest("-p", "no:cacheprovider", "-q")
    result.assert_outcomes(failed=6, errors=1)  # the marker without a trace fails in setup
    out = result.stdout.str()
    assert ("kernel RPAd* has bkv 256: RPAd-p_16-bq_1_1-bkv_128_128 has bkv 128_128, expected 256 "
            "(6 invocations in jit_decode_b4_bkv128)") in out
    assert "no op matching topp_binary_search: 1,134 op event(s) match /topp_binary_search/" in out
    assert "while.28 (s32[], f32[1], f32[1], f32[1,512], f32[1]) <- (s32[], f32[1], f32[1], f32[1,512], f32[1]) ×4 in jit_sample_b1" in out
    assert "family sampling share < 5%: family 'sampling' is 7.4% of op time (2.055 ms of 27.739 ms), bound < 5%" in out
    assert "from /work/main/kernels/paged_attention.py" in out and "bound: under my_kernels/" in out
    assert "32 per execution, bound == 16" in out
    assert "no recorded trace 'nope' in" in out and "available: greedy_b4, greedy_b8, psum_run, topp_b4" in out
    assert "@pytest.mark.traceview needs a path, recorded=NAME or fixture=NAME" in out


def test_command_line_options_override_ini(user_project, shared_traces, tmp_path):
    pytester, own = user_project
    other = tmp_path / "other_traces"
    (other / "gemm").mkdir(parents=True)
    shutil.copy(shared_traces / "mi300x_jax_gemm_sweep.xplane.pb", other / "gemm" / "tw003.xplane.pb")
    pytester.makepyfile(test_opts='''
from traceview import testing as tvt

def test_path(traceview_profile):
    tvt.assert_op_present(traceview_profile, "custom-call")
    tvt.assert_op_absent(traceview_profile, "all-reduce")

def test_fixtures_dir(recorded_trace, traceview_fixtures_dir):
    assert traceview_fixtures_dir.name == "other_traces"
    assert recorded_trace("gemm").ops.height > 0
''')
    result = pytester.runpytest("-p", "no:cacheprovider", "--traceview-path",
                                str(shared_traces / "mi300x_jax_gemm_sweep.xplane.pb"),
                                "--traceview-fixtures-dir", str(other))
    result.assert_outcomes(passed=2)


def test_plugin_is_registered_through_the_entry_point(pytester):
    # a fresh interpreter: the installed pytest11 entry point alone brings the plugin in
    result = pytester.runpytest_subprocess("--help")
    out = result.stdout.str()
    assert "--traceview-path" in out and "--traceview-update-golden" in out and "--traceview-fixtures-dir" in out
    result = pytester.runpytest("--markers")
    assert "@pytest.mark.traceview(path=None, *, run=None, recorded=None, fixture=None)" in result.stdout.str()
