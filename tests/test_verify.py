"""``traceview verify``: declarative checks on a profile or a base/treatment pair.

The must-show case: on the engine's top-p and greedy profiles (``fixtures/topp_b4`` and
``fixtures/greedy_b4``, same workload, same engine), the sampler's binary-search ops are
present under top-p and gone under greedy decoding — proved from the trace, independently
of the flag that asked for greedy.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from traceview.cli import main
from traceview.errors import UsageError
from traceview.analysis.compare import verify as _verify
from traceview.analysis.compare.verify_grammar import parse_check, parse_checks, read_checks, tokenize
from traceview.api import load, verify
from traceview.render.verify import verify_text


def Verifier(treatment, base=None, **options):  # noqa: N802 - the analysis class, over paths
    return _verify.Verifier(load(treatment), load(base) if base is not None else None, **options)

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
TOPP = str(FIXTURES / "topp_b4")
GREEDY = str(FIXTURES / "greedy_b4")


def test_binary_search_gone_under_greedy_cli(capsys):
    rc = main(["verify", TOPP, GREEDY,
               "--check", "op matching topp_binary_search vanished",
               "--check", "base: op matching binary_search present",
               "--check", "no op matching binary_search",
               "--check", "base: family sampling share > 5%",
               "--check", "family sampling share < 1%",
               "--check", "kernel RPAd* has bkv 128",
               "--check", "all matched except sample"])
    out = capsys.readouterr().out
    # "all matched except sample": every population outside the jit_sample_* programs has its
    # counterpart, except the greedy argmax ops that replace the sampler (appeared)
    assert rc == 1, out
    lines = out.splitlines()
    for check in ("op matching topp_binary_search vanished", "base: op matching binary_search present",
                  "no op matching binary_search", "base: family sampling share > 5%",
                  "family sampling share < 1%", "kernel RPAd* has bkv 128"):
        assert f"PASS  {check}" in lines, out
    assert "FAIL  all matched except sample" in lines
    assert "appeared: iota_reduce_fusion" in out  # argmax of jit_greedy_*: new under greedy
    assert "7 check(s): 6 passed, 1 failed" in out

    # the same proof without the failing check: exit 0
    assert main(["verify", TOPP, GREEDY, "-c", "op matching topp_binary_search vanished",
                 "-c", "all matched except sample|greedy"]) == 0


def test_binary_search_figures(capsys):
    v = Verifier(GREEDY, base=TOPP)
    r = v.check("op matching topp_binary_search vanished")
    assert r.ok
    # 1,134 traced events of the 32-iteration search in the top-p trace, none under greedy
    assert r.message.startswith("1,134 op event(s) match /topp_binary_search/ in the base")
    assert v.check("base: op matching topp_binary_search/while/body/add count == 32 per execution").ok

    # on the top-p profile alone the check fails, naming the ops, their shapes and figures
    r = Verifier(TOPP).check("no op matching binary_search")
    assert not r.ok
    assert "1,134 op event(s) match /binary_search/" in r.message
    assert "while.28 (s32[], f32[1], f32[1], f32[1,512], f32[1])" in r.message and "in jit_sample_b1" in r.message
    assert "expected none" in r.message
    assert main(["verify", TOPP, "-c", "no op matching binary_search"]) == 1
    assert "FAIL  no op matching binary_search" in capsys.readouterr().out


def test_single_profile_checks_pass_and_fail_with_reasons():
    rep = verify(GREEDY, [
        "kernel RPAd* has bkv 128", "kernel RPAd* has bkv 128_128", "kernel RPAd* has phase decode",
        "kernel 'RPAd-p_16-*' present", "no kernel RPAp*",
        "source of kernel RPAd* under kernels/", "source engine_shim/ present", "source my_kernels/ absent",
        "op matching iota_reduce_fusion count == 1 per execution", "op matching topp_binary_search count == 0",
        "family attention share < 50%", "family matching ynn_fusion share > 10%",
        "op from file matching sampling present",
    ])
    assert rep.ok, verify_text(rep)

    rep = verify(GREEDY, ["kernel RPAd* has bkv 256", "source of kernel RPAd* under my_kernels/",
                          "family matmul share < 10%", "op matching iota_reduce_fusion count == 2 per execution",
                          "kernel XYZ* present"])
    assert [r.ok for r in rep.results] == [False] * 5
    msgs = [r.message for r in rep.results]
    assert msgs[0] == "RPAd-p_16-bq_1_1-bkv_128_128 has bkv 128_128, expected 256 (6 invocations in jit_decode_b4_bkv128)"
    assert "from /work/main/kernels/paged_attention.py" in msgs[1] and "bound: under my_kernels/" in msgs[1]
    assert msgs[2].startswith("family 'matmul/convolution' is ") and "bound < 10%" in msgs[2]
    assert "= 1 per execution, bound == 2" in msgs[3]
    assert msgs[4].startswith("no kernel named like 'XYZ*'; kernels found: RPAd-p_16-bq_1_1-bkv_128_128")
    assert "5 check(s): 0 passed, 5 failed" in verify_text(rep)


def test_diff_checks_on_batch_sizes():
    rep = verify(str(FIXTURES / "greedy_b8"), ["kernel RPAd* changed bkv", "kernel RPAd* has bkv 128",
                                              "op matching jit_decode_b8 appeared"], base=GREEDY)
    assert [r.ok for r in rep.results] == [False, True, False]
    assert rep.results[0].message.startswith("bkv unchanged: bkv 128_128 -> 128_128")


def test_checks_file_and_json(tmp_path, capsys):
    f = tmp_path / "checks.txt"
    f.write_text("# the greedy treatment took effect\n\nop matching topp_binary_search vanished\n"
                 "kernel RPAd* has bkv 128\n", encoding="utf-8")
    assert len(read_checks(f)) == 2
    assert main(["verify", TOPP, GREEDY, "--checks", str(f), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["ok"] is True and [r["check"] for r in doc["results"]] == [
        "op matching topp_binary_search vanished", "kernel RPAd* has bkv 128"]


@pytest.mark.parametrize("bad, fault", [
    ("kernal RPAd* has bkv 256", "unknown check"),
    ("family attention share << 30%", "unknown comparison '<<'"),
    ("family attention share < lots", "expected a percentage"),
    ("no op matching (", "invalid regular expression '('"),
    ("op matching x frobbed", "expected present, absent, vanished, appeared or count"),
    ("kernel RPAd* has bkv", "missing value"),
    ("kernel RPAd* changed bkv 2048 256", "expected '->'"),
    ("source of kernel RPAd*", "expected 'under'"),
    ("no op matching x y", "unexpected 'y'"),
    ("exposed communication < 5%", "expected 'share' after 'exposed communication'"),
    ("straggler < 5%", "expected 'lead' after 'straggler'"),
    ("memory < 2 GiB", "expected 'peak' or 'growth per step' after 'memory'"),
    # a bare share above 1 would never hold (30 = 3000%): say what to write
    ("family attention share < 30", "'30' is not a share: write 30% for a percentage, or 0.3 as a fraction (0 to 1)"),
    ("straggler lead > 20", "'20' is ambiguous: write 20% for a percentage, or 0.2 as a fraction (a lead over "
     "100% is written with its %)"),
    ("straggler lead < -5%", "a lead is a finite percentage, 0% or more (it may exceed 100%), got '-5%'"),
    # sizes and counts are never negative: a bound below 0 is a typo, not a check that never holds
    ("memory peak < -1GiB", "byte count '-1GiB' is negative: it is 0 or more"),
    ("memory peak < -2 GiB", "byte count '-2' is negative: it is 0 or more"),
    ("collective all-reduce bytes >= -4096", "byte count '-4096' is negative: it is 0 or more"),
    ("collective all-reduce group > -1", "group size '-1' is negative"),
    ("op matching fusion count > -1", "occurrence count '-1' is negative"),
])
def test_invalid_checks_are_usage_errors(bad, fault, capsys):
    with pytest.raises(UsageError) as ei:
        parse_check(bad)
    assert fault in str(ei.value) and "\n" not in str(ei.value)
    assert main(["verify", GREEDY, "-c", bad]) == 2
    err = capsys.readouterr().err
    assert err.startswith("traceview: error: check 1: invalid check") and err.count("\n") == 1


@pytest.mark.parametrize("checks, err", [
    ([""], "check 1 is empty"),
    (["   "], "check 1 is empty"),
    (["no op matching x", ""], "check 2 is empty"),
    (["all matched", "# later"], "check 2 is empty (only a # comment)"),
])
def test_an_empty_check_is_refused_naming_it(checks, err, capsys):
    """A --check given empty (or only a comment) is a mistake to name, not one to skip: alone it
    read 'no checks given', beside another check it was dropped and the gate ran without it."""
    with pytest.raises(UsageError, match=f"^{re.escape(err)}$"):
        parse_checks(checks)
    assert main(["verify", GREEDY, "--no-cache", *(a for c in checks for a in ("-c", c))]) == 2
    cap = capsys.readouterr()
    assert cap.err == f"traceview: error: {err}\n" and cap.out == ""


@pytest.mark.parametrize("checks, two, err", [
    (["family sampling share < 3%", "family bogus share < 3%"], False,
     "check 2: unknown family 'bogus': known families are attention/custom kernels, matmul/convolution, collectives, "
     "copies and conversions, sampling, elementwise fusions, other (or use 'family matching REGEX share ...')"),
    (["family co share < 3%"], False, "check 1: family 'co' is ambiguous: collectives, copies and conversions"),
    (["family sampling share < 3%", "op matching x vanished"], False,
     "check 2: 'op matching x vanished' needs two profiles (BASE and TREATMENT)"),
    (["base: no op matching x"], False, "check 1: 'base: no op matching x' needs two profiles (BASE and TREATMENT)"),
    (["all matched", "no finding host-bound-steps"], True,  # with --no-findings
     "check 2: 'no finding host-bound-steps' needs the findings; drop --no-findings"),
])
def test_refusals_at_evaluation_name_the_check(checks, two, err, capsys):
    """The refusals found before evaluating (an unknown or ambiguous family, a diff check with one
    profile, a finding check with --no-findings) name the check's position, as the grammar's do,
    in the analysis layer's verify and so the CLI's."""
    prof = load(GREEDY)
    with pytest.raises(UsageError) as ei:
        _verify.verify(prof, checks, base=prof if two else None, findings=not two)
    assert str(ei.value) == err
    paths, opts = ([GREEDY, GREEDY], ["--no-findings"]) if two else ([GREEDY], [])
    assert main(["verify", *paths, *opts, *(a for c in checks for a in ("-c", c)), "--no-cache"]) == 2
    cap = capsys.readouterr()
    assert cap.err == f"traceview: error: {err}\n" and cap.out == ""


def test_usage_errors_at_evaluation(tmp_path, capsys):
    assert main(["verify", GREEDY, "-c", "op matching x vanished"]) == 2  # diff check, one profile
    assert "needs two profiles" in capsys.readouterr().err
    assert main(["verify", GREEDY, "-c", "kernel RPAd* has bkv 128", "-c", "family bogus share < 3%"]) == 2
    cap = capsys.readouterr()
    assert "unknown family 'bogus'" in cap.err and cap.out == ""  # nothing evaluated
    assert main(["verify", GREEDY]) == 2  # no checks
    assert main(["verify", GREEDY, GREEDY, GREEDY, "-c", "all matched"]) == 2
    bad = tmp_path / "checks.txt"
    bad.write_text("kernel RPAd* has bkv 128\nnot a check\n", encoding="utf-8")
    assert main(["verify", GREEDY, "--checks", str(bad)]) == 2
    assert f"{bad}:2: invalid check 'not a check'" in capsys.readouterr().err
    assert main(["verify", str(tmp_path / "none"), "-c", "no op matching x"]) == 3


def test_user_family_rules():
    rep = verify(GREEDY, ["family norms share < 50%", "family norms share > 0%"],
                 rules=["norms=rsqrt|reduce-window"])
    assert rep.ok, verify_text(rep)
    assert "family 'norms' is " in rep.results[0].message
    assert main(["verify", GREEDY, "--family", "norms=rsqrt", "-c", "family norms share < 50%"]) == 0


def test_tokenizer_and_parser():
    assert tokenize("no op matching 'a b' \"\\d+\"") == ["no", "op", "matching", "a b", "\\d+"]
    c = parse_check("base: op from file matching sampling\\.py present")
    assert c.side == "base" and c.kind == "op_file" and c.args == {"rx": "sampling\\.py", "want": "present"}
    assert parse_check("kernel RPAd* changed bkv 2048 -> 256").args == {"glob": "RPAd*", "key": "bkv", "a": "2048",
                                                                       "b": "256"}
    assert parse_check("FAMILY Attention SHARE <= 0.3").args["bound"] == pytest.approx(0.3)
    assert [c.kind for c in parse_checks(["all matched", "source x/ present  # c"])] == ["all_matched",
                                                                                        "source_present"]


def test_kernel_configuration_is_read_one_way(shared_traces, capsys):
    """A legacy name (``RPA-bq_32-bkvp_64-p_64-``): a size written once or repeated means the
    same (``bq 32`` == ``bq 32_32``), and a failure shows the value as the kernels table does."""
    qwen = str(shared_traces / "vllm_tpu_qwen")
    rep = verify(qwen, ["kernel RPA-* has bq 32", "kernel RPA-* has bq 32_32", "kernel RPA-* has bkvp 64",
                        "kernel RPA-* has bkvp 64_64", "kernel RPA-* has bkv 4096", "kernel RPA-* has page 64",
                        "kernel RPA-* has bq 64", "kernel RPA-* has bkvp 32_64", "kernel RPA-* has bq 32_64"])
    assert [r.ok for r in rep.results] == [True] * 6 + [False] * 3
    assert [r.message.split(", expected")[0] for r in rep.failed] == ["RPA-bq_32-bkvp_64-p_64- has bq 32",
                                                                      "RPA-bq_32-bkvp_64-p_64- has bkvp 64",
                                                                      "RPA-bq_32-bkvp_64-p_64- has bq 32"]
    assert main(["analyze", qwen, "--format", "json", "--no-cache"]) == 0
    kernels = json.loads(capsys.readouterr().out)["kernels"]
    assert [k["config"] for k in kernels if k["kernel"] == "RPA-bq_32-bkvp_64-p_64-"] == ["bq=32, bkvp=64, p=64"]


def test_an_unknown_collective_kind_is_an_invalid_check():
    """``collective KIND ...`` takes XLA's collective opcodes (async halves included); any other
    word is a usage error (exit 2), not a check that fails."""
    from traceview.analysis.compare.verify_grammar import parse_check

    for ok in ("collective all-reduce bytes == 4096", "collective all-gather-start sent > 0",
               "collective collective-permute group == 2"):
        parse_check(ok)
    with pytest.raises(UsageError, match="unknown collective kind 'nosuch'.*all-reduce"):
        parse_check("collective nosuch bytes > 0")


def test_a_device_filter_that_matches_nothing_is_not_a_pass(shared_traces, capsys):
    """'no op matching X' holds of zero ops: with a --device that matches no device the check
    must not pass (a typo would turn a CI gate green); it is a usage error naming the file."""
    gemm = str(shared_traces / "mi300x_jax_gemm_sweep.xplane.pb")
    assert main(["verify", gemm, "--device", "zzz", "-c", "no op matching custom-call", "--no-cache"]) == 2
    err = capsys.readouterr().err
    assert "--device 'zzz' leaves no op of" in err and "mi300x_jax_gemm_sweep" in err
    assert main(["verify", gemm, "--device", "GPU", "-c", "op matching . present", "--no-cache"]) == 0


GEMM = "mi300x_jax_gemm_sweep.xplane.pb"
#: why no step rule can judge the GEMM sweep (jit_dot at several sizes: not one repeated step)
SWEEP = ("the steps are not one repeated step: the commonest op mix runs 3 time(s) per device, in 3 of 13 step(s), "
         "and the rule needs 3 and half the steps")


def test_a_finding_whose_rule_could_not_run_is_unknown_never_pass(shared_traces, capsys):
    """``no finding host-bound-steps`` on a trace where the rule cannot run (the GEMM sweep has
    no repeated step) is UNKNOWN, not PASS; the rules that ran still pass or fail."""
    gemm = str(shared_traces / GEMM)
    rep = verify(gemm, ["no finding host-bound-steps", "finding warmup-in-window present",
                        "finding host-bound-steps impact < 5%", "no finding costs-unknown",
                        "finding costs-unknown present", "no finding profiling-overhead"])
    assert [r.status for r in rep.results] == ["unknown", "unknown", "unknown", "pass", "fail", "unknown"]
    assert not rep.ok and len(rep.passed) == 1 and len(rep.failed) == 1 and len(rep.unknown) == 4
    assert rep.results[0].message == f"the rule of host-bound-steps could not run: {SWEEP}"
    assert rep.results[2].message == f"the rule of host-bound-steps could not run: {SWEEP}"
    assert rep.results[3].message == "no finding costs-unknown (findings: none)"
    assert rep.results[4].message == "no finding costs-unknown; expected one (findings: none)"
    assert rep.results[5].message.startswith("the rule of profiling-overhead could not run: a finding of a diff")
    # vLLM's trace.json: no allocator events, so neither memory rule nor the memory check can judge it
    qwen = verify(str(shared_traces / "vllm_tpu_qwen"), ["no finding memory-near-capacity", "memory peak < 1GiB"])
    assert [r.status for r in qwen.results] == ["unknown", "unknown"]
    assert qwen.results[0].message == "the rule of memory-near-capacity could not run: no allocator events in the trace"
    assert qwen.results[1].message.startswith("memory peak unknown: no allocator events in this trace")

    # the CLI: UNKNOWN with its reason, the count, exit 1 although nothing failed
    assert main(["verify", gemm, "--no-cache", "-c", "no finding host-bound-steps", "-c", "no finding costs-unknown"]) == 1
    out = capsys.readouterr().out
    assert out.splitlines() == ["UNKNOWN  no finding host-bound-steps",
                                f"      the rule of host-bound-steps could not run: {SWEEP}",
                                "PASS  no finding costs-unknown",
                                "2 check(s): 1 passed, 0 failed, 1 unknown"]
    assert main(["verify", gemm, "--no-cache", "--format", "json", "-c", "no finding host-bound-steps",
                 "-c", "no finding costs-unknown", "-c", "finding costs-unknown present"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert (doc["ok"], doc["passed"], doc["failed"], doc["unknown"]) == (False, 1, 1, 1)
    assert [(r["status"], r["ok"]) for r in doc["results"]] == [("unknown", False), ("pass", True), ("fail", False)]
    assert doc["results"][0]["message"] == f"the rule of host-bound-steps could not run: {SWEEP}"
    # the pytest helpers raise on an unknown too
    from traceview import testing as tvt

    with pytest.raises(AssertionError, match="UNKNOWN: the rule of host-bound-steps could not run"):
        tvt.assert_no_finding(gemm, "host-bound-steps")
    assert tvt.check(gemm, "no finding host-bound-steps").status == "unknown"


def test_finding_checks_read_the_step_window(shared_traces, capsys):
    """The report a finding check reads has analyze's ``--step-window``: conv3d's 43 ms first
    step is left out of the steady window (no warm-up finding) and kept by ``all``; the Pallas
    matmul's host-bound finding needs 3 steps, and ``1:`` leaves 2 (unknown)."""
    conv = str(shared_traces / "mi300x_jax_conv3d.xplane.pb")
    assert main(["verify", conv, "--no-cache", "-c", "finding warmup-in-window absent"]) == 0
    assert "PASS  finding warmup-in-window absent" in capsys.readouterr().out
    assert main(["verify", conv, "--no-cache", "--step-window", "all", "-c", "finding warmup-in-window absent"]) == 1
    out = capsys.readouterr().out
    assert "FAIL  finding warmup-in-window absent" in out
    assert ("/device:GPU:0 step 0 took 43.133 ms against a steady median of 999.98 µs; the mean over the window's "
            "steps is 3.381 ms") in out
    pallas = str(shared_traces / "tpu_v6e_pallas_matmul_llo.xplane.pb")
    steady = verify(pallas, ["no finding host-bound-steps"])
    assert steady.results[0].status == "fail"
    assert "the device idles 189.87 µs of each 265.63 µs from one step's start to the next" in steady.results[0].message
    cut = verify(pallas, ["no finding host-bound-steps"], step_window="1:")
    assert cut.results[0].status == "unknown"
    assert cut.results[0].message == ("the rule of host-bound-steps could not run: 2 step(s) per device: the rule "
                                      "needs a step repeated 3 times")


def test_source_checks_without_recorded_sources_are_unknown(shared_traces):
    """The MI300X attention trace's add and multiply programs carry no source file or stack:
    on them a source check can neither pass nor fail. On the whole trace (36 of 87 op events
    with a source) they are judged, and a pass says how many events had none."""
    att = load(shared_traces / "mi300x_jax_attention.xplane.pb")
    bare = att.filter(op_regex="add|multiply")
    rep = verify(bare, ["no op from file matching foo", "op from file matching . present", "source x/ absent",
                        "source x/ present", "source of op matching fusion under x/", "no op matching foo"])
    assert [r.status for r in rep.results] == ["unknown"] * 5 + ["pass"]
    none = "none of the 24 op events has a recorded source (source file or stack)"
    assert [r.message for r in rep.results[:4]] == [none] * 4
    assert rep.results[4].message == ("ops matching /fusion/: 24 op event(s), none with a recorded source; bound: "
                                      "under x/")
    rep = verify(att, ["no op from file matching foo", "source x/ absent", "op from file matching generate_attention present",
                       "source of op matching . under x/"])
    assert [r.status for r in rep.results] == ["pass", "pass", "pass", "fail"]
    assert rep.results[0].message == ("no op comes from a file matching /foo/ among 87 op events (51 of 87 op events "
                                      "have no recorded source)")
    assert rep.results[1].message == "no source under x/ (51 of 87 op events have no recorded source)"
    assert rep.results[3].message.startswith("ops matching /./: 36 op event(s) from "
                                             "/workspace/traces/generate_attention_trace.py")
    # a diff check on sources: a side without any says nothing
    rep = verify(att, ["op from file matching generate_attention vanished", "op from file matching generate_attention appeared"],
                 base=bare)
    assert [r.status for r in rep.results] == ["unknown", "unknown"]
    assert rep.results[0].message == f"base: {none}"


def test_checks_file_trailing_comments(shared_traces, tmp_path, capsys):
    """``# comment`` after a check is dropped (from the check's text too); a quoted ``#`` is
    part of the regex."""
    gemm = str(shared_traces / GEMM)
    f = tmp_path / "checks.txt"
    f.write_text("# the GEMM sweep\n"
                 "op matching custom-call present   # the hipBLASLt GEMMs\n"
                 "  family matmul share > 50%  # most of the op time\n"
                 "no op matching '#not-an-op'\n", encoding="utf-8")
    checks = read_checks(f)
    assert [c.text for c in checks] == ["op matching custom-call present", "family matmul share > 50%",
                                        "no op matching '#not-an-op'"]
    assert checks[2].args == {"rx": "#not-an-op", "want": "absent"}
    assert main(["verify", gemm, "--no-cache", "--checks", str(f), "-c", "op matching custom-call.1 count == 15 # five sizes"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines() == ["PASS  op matching custom-call.1 count == 15", "PASS  op matching custom-call present",
                                "PASS  family matmul share > 50%", "PASS  no op matching '#not-an-op'",
                                "      note: no op matches /#not-an-op/ among 42 op events",
                                "4 check(s): 4 passed, 0 failed, 0 unknown"]
    with pytest.raises(UsageError, match="empty check"):
        parse_check("   # only a comment")


def test_bad_values_are_usage_errors_on_a_real_trace(shared_traces, capsys):
    """A bare share above 1 and a negative byte count stop before any trace is read (exit 2,
    one line saying what to write); the fraction and percentage forms are the same check."""
    gemm = str(shared_traces / GEMM)
    assert main(["verify", gemm, "--no-cache", "-c", "family matmul share > 50"]) == 2
    assert ("'50' is not a share: write 50% for a percentage, or 0.5 as a fraction (0 to 1)"
            in capsys.readouterr().err)
    assert main(["verify", gemm, "--no-cache", "-c", "memory peak < -512MiB"]) == 2
    assert "byte count '-512MiB' is negative: it is 0 or more" in capsys.readouterr().err
    assert main(["verify", gemm, "--no-cache", "--finding-threshold", "host-bound-steps=30",
                 "-c", "no finding host-bound-steps"]) == 2
    assert "host_share is a share: write 30% for a percentage, or 0.3 as a fraction" in capsys.readouterr().err
    rep = verify(gemm, ["family matmul share > 50%", "family matmul share > 0.5"])
    assert [r.status for r in rep.results] == ["pass", "pass"] and rep.results[0].message == rep.results[1].message


def test_peaks_reach_the_finding_checks(capsys):
    """A CPU profile has no known peaks: far-below-roofline's rule cannot run and its check is
    UNKNOWN (exit 1). With --peak-flops/--peak-bw (or --chip) verify evaluates it on the report
    analyze makes with the same options: the same finding, the same figures."""
    topp = TOPP
    check = "no finding far-below-roofline"
    assert main(["verify", topp, "-c", check, "--no-cache"]) == 1
    out = capsys.readouterr().out
    assert out.startswith("UNKNOWN  no finding far-below-roofline\n") and "give --chip, or --peak-flops and --peak-bw" in out
    assert main(["verify", topp, "-c", check, "--no-cache", "--peak-flops", "1e12", "--peak-bw", "1e11"]) == 1
    out = capsys.readouterr().out
    said = ("matmul/convolution is memory-bound (9.6 FLOP/byte, ridge point 10) yet reaches 2.8% of peak bandwidth "
            "while holding 68.0% of op time")
    assert out.startswith("FAIL  no finding far-below-roofline\n") and said in out
    assert main(["analyze", topp, "--no-cache", "--peak-flops", "1e12", "--peak-bw", "1e11"]) == 0
    assert f"far-below-roofline: {said}" in capsys.readouterr().out
    prof = load(topp, stale_after_s=None)
    res = verify(prof, [check], peaks=prof.peaks(peak_flops=1e12, peak_bw=1e11))
    assert res.results[0].status == "fail" and said in res.results[0].message
    assert verify(prof, [check]).results[0].status == "unknown"


def test_a_share_of_ops_no_op_matches_says_so_even_when_it_passes(capsys):
    """'family matching RX share < B' over ops none of which matches is a pass (a treatment that
    removed them is what the check is for), with the caveat shown even under PASS, so that a
    mistyped regex is seen: the text's note line and JSON's note."""
    rep = verify(GREEDY, ["family matching zzz share < 5%", "family matching ynn_fusion share > 10%"])
    zzz, ynn = rep.results
    assert zzz.status == "pass" and zzz.note == ("no op matches /zzz/ (op name, HLO text, framework op, source "
                                                 "file) among 510 op events")
    assert ynn.status == "pass" and ynn.note == "" and "note" not in ynn.to_dict()
    assert verify_text(rep).splitlines()[:3] == [
        "PASS  family matching zzz share < 5%", f"      note: {zzz.note}", "PASS  family matching ynn_fusion share > 10%"]
    assert main(["verify", GREEDY, "-c", "family matching zzz share < 5%", "--format", "json", "--no-cache"]) == 0
    assert json.loads(capsys.readouterr().out)["results"][0]["note"] == zzz.note


def test_an_absence_that_passes_says_what_it_searched(capsys):
    """'no op matching RX' (and 'op matching RX absent', 'no op from file matching RX') claims
    the absence: its pass shows the message as a note, as a share of no op does, so that a
    mistyped regex is seen in the text (note line) and JSON (note); a failed one keeps no note."""
    rep = verify(GREEDY, ["no op matching zzz", "op matching zzz absent", "no op from file matching zzz",
                          "no op matching ynn_fusion"])
    none, absent, nofile, ynn = rep.results
    assert none.status == absent.status == nofile.status == "pass" and ynn.status == "fail"
    assert none.note == none.message == absent.note == "no op matches /zzz/ among 510 op events"
    assert nofile.note == ("no op comes from a file matching /zzz/ among 510 op events (101 of 510 op events have "
                           "no recorded source)")
    assert ynn.note == "" and "note" not in ynn.to_dict()
    assert verify_text(rep).splitlines()[:2] == ["PASS  no op matching zzz", f"      note: {none.note}"]
    assert main(["verify", GREEDY, "-c", "no op matching zzz", "--format", "json", "--no-cache"]) == 0
    assert json.loads(capsys.readouterr().out)["results"][0]["note"] == none.note


def test_other_passing_absences_say_what_they_searched():
    """A count of no op, a kernel that is absent and a source path under which nothing lies
    also pass with a note saying what was searched (a mistyped regex, name or path is seen);
    a count of matched ops keeps no note."""
    rep = verify(GREEDY, ["op matching zzz count < 3", "kernel zzz* absent", "source zzz/ absent",
                          "op matching dot count > 1"])
    count, kernel, source, real = rep.results
    assert [r.status for r in rep.results] == ["pass"] * 4
    assert count.note == "no op matches /zzz/ among 510 op events"
    assert count.message == "no op matches /zzz/: occurrences 0 < 3"
    assert kernel.note == kernel.message == "no kernel named like 'zzz*'; kernels found: RPAd-p_16-bq_1_1-bkv_128_128"
    assert source.note == source.message == "no source under zzz/ (101 of 510 op events have no recorded source)"
    assert real.note == ""


def test_the_missing_peak_is_named():
    """With only --peak-flops on a CPU profile, far-below-roofline's reason names the peak still missing."""
    prof = load(GREEDY, stale_after_s=None)
    res = verify(prof, ["no finding far-below-roofline"], peaks=prof.peaks(peak_flops=1e12))
    assert res.results[0].status == "unknown"
    assert res.results[0].message.endswith("no peak bandwidth known for the device: give --peak-bw (or --chip)")


def test_a_faulty_side_or_checks_file_is_named(shared_traces, tmp_path, capsys):
    """BASE TREATMENT with a --step-window past one side's steps names that side; a checks
    file of only comments is refused naming the file (a gate of no checks passes anything)."""
    gemm = str(shared_traces / "mi300x_jax_gemm_sweep.xplane.pb")
    assert main(["verify", GREEDY, gemm, "--step-window", "4:8", "-c", "op matching dot present", "--no-cache"]) == 2
    assert capsys.readouterr().err == (f"traceview: error: {GREEDY}: --step-window 4:8 holds none of the trace's 3 "
                                       "steps (0..2; A:B counts from 0, B excluded, negatives from the end)\n")
    empty = tmp_path / "gate.checks"
    empty.write_text("# nothing yet\n\n")
    assert main(["verify", GREEDY, "--checks", str(empty), "--no-cache"]) == 2
    assert capsys.readouterr().err == f"traceview: error: {empty}: holds no check (only blank lines and # comments)\n"


@pytest.mark.parametrize(("src", "lead"), [("tpu_v6e_4chip_psum.xplane.pb", "0.3%"), ("vllm_tpu_qwen", "0.0%"),
                                           ("straggler_8dev", "16066.4%")])
def test_a_straggler_lead_bound_may_exceed_100_percent(shared_traces, src, lead):
    """The lead is the slowest device's busy time over the median device's, less one: not a
    share, any multiple (the 8-device straggler fixture's device is ~161x the median in its
    worst step), so its bound may exceed 100% (it was refused as "a share lies between 0% and
    100%"); the figure is the same under every bound."""
    path = str(FIXTURES / src if src.startswith("straggler") else shared_traces / src)
    rep = verify(path, ["straggler lead < 150%", "straggler lead < 20000%", "straggler lead > 1000%",
                        "straggler lead < 1.5%", "straggler lead < 0.015"])
    big = lead == "16066.4%"
    assert [r.status for r in rep.results] == (["fail", "pass", "pass", "fail", "fail"] if big
                                               else ["pass", "pass", "fail", "pass", "pass"])
    assert {r.message.split(" (")[0] for r in rep.results} == {f"straggler lead is {lead}"}
    assert rep.results[0].message.endswith("bound < 150%") and rep.results[2].message.endswith("bound > 1000%")


def test_straggler_lead_message_names_no_device_when_no_wait_is_attributed(shared_traces):
    """The v6e trace's worst step has no collective matched across devices: its message says
    no wait was attributed, instead of attributing the waits to "None"; the 8-device fixture's
    names the device and its attributed wait."""
    msg = verify(str(shared_traces / "tpu_v6e_4chip_psum.xplane.pb"), ["straggler lead < 150%"]).results[0].message
    assert "None" not in msg
    assert "step 23: /device:TPU:3 busy 24.134 ms against the median 24.054 ms; no collective of the step matched" in msg
    msg = verify(str(FIXTURES / "straggler_8dev"), ["straggler lead < 150%"]).results[0].message
    assert "others' waits attributed to /device:CPU:5: 36.731 ms" in msg


def test_option_files_saved_with_a_byte_order_mark(tmp_path, capsys):
    """A checks file and a family rules file saved as "UTF-8 with BOM" and CRLF (Notepad,
    PowerShell's Out-File) read as the same text without the mark: the first line is a
    comment, the family is named ``mine``, not ``\\ufeffmine``."""
    checks, fams = tmp_path / "checks.txt", tmp_path / "families.txt"
    checks.write_bytes(b"\xef\xbb\xbf# the sampler gate\r\nop matching topp_binary_search present\r\n"
                       b"family mine share > 50%\r\n")
    fams.write_bytes(b"\xef\xbb\xbfmine=fusion\r\n")
    assert main(["verify", TOPP, "--checks", str(checks), "--families", str(fams), "--format", "json",
                 "--no-cache"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [r["check"] for r in doc["results"]] == ["op matching topp_binary_search present", "family mine share > 50%"]
    assert doc["results"][1]["message"] == "family 'mine' is 86.1% of op time (23.874 ms of 27.739 ms), bound > 50%"
