"""Assertion helpers for tests over recorded traces (``import traceview.testing``).

Every helper takes a :class:`traceview.Profile` (or a path for :func:`traceview.load`) and
raises :class:`AssertionError` with a message that names the failing op, its shape, the
measured figure and the bound, e.g.::

    kernel 'RPAd*' has bkv 256: RPAd-p_16-bq_1_1-bkv_2048_2048 has bkv 2048_2048, expected 256
    (4 invocations in jit_decode_b2_bkv2048)

They are thin wrappers over the checks of :mod:`traceview.analysis.compare.verify` (same definitions:
*share* = self time over all ops' self time; ops of a named kernel count in
``attention/custom kernels``), so a CI script's ``traceview verify --check ...`` and a
pytest test assert the same thing. :func:`check` returns the result instead of raising.

Golden summaries: :func:`golden_summary` is a JSON-ready, stably ordered summary of a
profile keyed by population (kind, stem, shape, HLO fingerprint — see
:mod:`traceview.analysis.compare.populations`);
:func:`compare_summaries` lists the differences (structure exactly, times within
tolerances); :func:`assert_matches_golden` compares against a stored file and rewrites it
when ``update=True`` (the pytest plugin's ``--traceview-update-golden``).

Times are ps; shares and tolerances on shares are fractions (0.3 = 30%).
"""

from __future__ import annotations

import json
import os
from pathlib import Path


from traceview.analysis.compare.verify import CheckResult, Verifier
from traceview.analysis.compare.verify_grammar import CMPS, Check, parse_check

__all__ = ["check", "assert_check", "assert_op_absent", "assert_op_present", "assert_ops_from_file_absent",
           "assert_ops_from_file_present", "assert_family_share", "assert_occurrences", "assert_kernel_config",
           "assert_kernel_present", "assert_source_present", "assert_source_under", "assert_vanished",
           "assert_appeared", "assert_kernel_changed", "assert_all_matched", "golden_summary", "compare_summaries",
           "assert_matches_golden", "GOLDEN_VERSION", "assert_no_finding", "assert_finding"]

GOLDEN_VERSION = 1


def _q(token: str) -> str:
    """Quote a token for the check text shown in messages."""
    return f"'{token}'" if (" " in token or not token) else token


def _run(profile, c: Check, base=None, rules=None) -> CheckResult:
    return Verifier(_profile(profile), _profile(base) if base is not None else None, rules=rules).check(c)


def _assert(res: CheckResult) -> CheckResult:
    """``res`` when it passed; AssertionError when it failed or is unknown (never a pass)."""
    if not res.ok:
        raise AssertionError(f"{res.check}: {'' if res.status == 'fail' else 'UNKNOWN: '}{res.message}")
    return res


def check(profile, text: str, *, base=None, rules=None) -> CheckResult:
    """Evaluate one check written in the :mod:`traceview.analysis.compare.verify` grammar; never raises on a
    failed or unknown check (see ``result.status``: pass, fail or unknown; ``result.ok``). Raises
    UsageError on an invalid check."""
    return _run(profile, parse_check(text), base, rules)


def assert_check(profile, text: str, *, base=None, rules=None) -> CheckResult:
    """:func:`check`, raising AssertionError with the reason when it fails or is unknown (the
    trace lacks what the check needs)."""
    return _assert(check(profile, text, base=base, rules=rules))


def assert_op_absent(profile, regex: str) -> CheckResult:
    """No op's name, framework op (JAX name stack), kernel name or HLO text (instruction names
    removed) matches ``regex``. The message lists the matching populations with shape,
    occurrences, module, self time and share."""
    return _assert(_run(profile, Check(f"no op matching {_q(regex)}", "op", {"rx": regex, "want": "absent"})))


def assert_op_present(profile, regex: str) -> CheckResult:
    """At least one op matches ``regex`` (fields as :func:`assert_op_absent`)."""
    return _assert(_run(profile, Check(f"op matching {_q(regex)} present", "op", {"rx": regex, "want": "present"})))


def assert_ops_from_file_absent(profile, regex: str) -> CheckResult:
    """No op's source file or source stack frame matches ``regex``."""
    return _assert(_run(profile, Check(f"no op from file matching {_q(regex)}", "op_file",
                                       {"rx": regex, "want": "absent"})))


def assert_ops_from_file_present(profile, regex: str) -> CheckResult:
    """Some op's source file or source stack frame matches ``regex``."""
    return _assert(_run(profile, Check(f"op from file matching {_q(regex)} present", "op_file",
                                       {"rx": regex, "want": "present"})))


def assert_family_share(profile, family: str, *, below: float | None = None, above: float | None = None,
                        rules=None, regex: bool = False) -> CheckResult:
    """The family's share of op time is ``< below`` and/or ``> above`` (fractions).

    ``family``: a default family of :mod:`traceview.analysis.steps.anatomy` (a unique prefix such as
    ``"attention"`` is enough) or a name from ``rules`` (``["name=regex", ...]``); with
    ``regex=True`` an ad-hoc family of ops whose name, HLO text, framework op, kernel name or
    source file matches ``family``. Raises ValueError when neither bound is given and
    UsageError for an unknown family name.
    """
    if below is None and above is None:
        raise ValueError("assert_family_share needs below= and/or above=")
    res = None
    for cmp_, bound in (("<", below), (">", above)):
        if bound is None:
            continue
        what = f"family matching {_q(family)}" if regex else f"family {family}"
        c = Check(f"{what} share {cmp_} {100 * bound:g}%", "family_share",
                  {"name": None if regex else family, "rx": family if regex else None, "cmp": cmp_, "bound": bound})
        res = _assert(_run(profile, c, rules=rules))
    return res


def assert_occurrences(profile, regex: str, expected: float, *, cmp: str = "==",
                       per_execution: bool = False) -> CheckResult:
    """Occurrences of the ops matching ``regex`` compare to ``expected`` with ``cmp``
    (``== != < <= > >=``): their total, or with ``per_execution=True`` each (op, shape)
    population's occurrences per execution of its program (e.g. 18 per decode step for a
    per-layer op of an 18-layer model). Raises ValueError for an unknown ``cmp``."""

    if cmp not in CMPS:
        raise ValueError(f"cmp must be one of {', '.join(CMPS)}, got {cmp!r}")
    text = f"op matching {_q(regex)} count {cmp} {expected:g}" + (" per execution" if per_execution else "")
    return _assert(_run(profile, Check(text, "count", {"rx": regex, "cmp": cmp, "n": float(expected),
                                                       "per_execution": per_execution})))


def assert_kernel_present(profile, pattern: str) -> CheckResult:
    """Some kernel's configuration-carrying name matches the shell pattern ``pattern``."""
    return _assert(_run(profile, Check(f"kernel {pattern} present", "kernel_present",
                                       {"glob": pattern, "want": "present"})))


def assert_kernel_config(profile, pattern: str, **expected) -> CheckResult:
    """Every kernel named like ``pattern`` (shell pattern, e.g. ``"RPAd*"``) carries each
    ``key=value`` read off its name (:func:`traceview.model.kernelname.kernel_config`): an int compares
    with the first number (``bkv=256`` for ``bkv_256_256``), a tuple or ``"256_256"`` with
    all of them, a string with a word field (``phase="decode"``). Raises ValueError when no
    expectation is given."""
    if not expected:
        raise ValueError("assert_kernel_config needs at least one key=value")
    res = None
    for key, value in expected.items():
        v = "_".join(str(x) for x in value) if isinstance(value, (tuple, list)) else str(value)
        res = _assert(_run(profile, Check(f"kernel {pattern} has {key} {v}", "kernel_has",
                                          {"glob": pattern, "key": key, "value": v})))
    return res


def assert_source_present(profile, path: str) -> CheckResult:
    """Some op's source file or stack frame is under ``path`` (equal, prefix, or after a
    ``/``: ``"my_kernels/"`` matches ``/home/me/proj/my_kernels/kernel.py``)."""
    return _assert(_run(profile, Check(f"source {path} present", "source_present", {"path": path, "want": "present"})))


def assert_source_under(profile, path: str, *, kernel: str | None = None, op: str | None = None) -> CheckResult:
    """Every op of the kernels named like ``kernel`` (shell pattern), or every op matching
    the regex ``op``, that has a recorded source comes from under ``path`` — the transplant
    check (``assert_source_under(prof, "my_kernels/", kernel="RPAd*")``). Raises ValueError
    unless exactly one of ``kernel`` / ``op`` is given."""
    if (kernel is None) == (op is None):
        raise ValueError("assert_source_under needs exactly one of kernel= or op=")
    text = f"source of kernel {kernel} under {path}" if kernel is not None else f"source of op {_q(op)} under {path}"
    return _assert(_run(profile, Check(text, "source_under", {"glob": kernel, "rx": op, "path": path})))


def assert_vanished(base, treatment, regex: str, *, from_file: bool = False) -> CheckResult:
    """Ops matching ``regex`` (source files with ``from_file=True``) are present in ``base``
    and absent from ``treatment``."""
    kind = "op_file_diff" if from_file else "op_diff"
    text = f"op {'from file ' if from_file else ''}matching {_q(regex)} vanished"
    return _assert(_run(treatment, Check(text, kind, {"rx": regex, "want": "vanished"}, needs_base=True), base=base))


def assert_appeared(base, treatment, regex: str, *, from_file: bool = False) -> CheckResult:
    """Ops matching ``regex`` are absent from ``base`` and present in ``treatment``."""
    kind = "op_file_diff" if from_file else "op_diff"
    text = f"op {'from file ' if from_file else ''}matching {_q(regex)} appeared"
    return _assert(_run(treatment, Check(text, kind, {"rx": regex, "want": "appeared"}, needs_base=True), base=base))


def assert_kernel_changed(base, treatment, pattern: str, key: str, before=None, after=None) -> CheckResult:
    """The ``key`` of the kernels named like ``pattern`` differs between the profiles, and
    (when given) is ``before`` in the base and ``after`` in the treatment."""
    a = None if before is None else str(before)
    b = None if after is None else str(after)
    text = f"kernel {pattern} changed {key}" + (f" {a} -> {b}" if a is not None else "")
    return _assert(_run(treatment, Check(text, "kernel_changed", {"glob": pattern, "key": key, "a": a, "b": b},
                                         needs_base=True), base=base))


def assert_all_matched(base, treatment, *, except_regex: str | None = None) -> CheckResult:
    """Every population of either profile has its counterpart in the other
    (:func:`traceview.analysis.compare.diff.diff`), except those whose op names, kernel names, stem or
    modules match ``except_regex``."""
    text = "all matched" + (f" except {_q(except_regex)}" if except_regex else "")
    return _assert(_run(treatment, Check(text, "all_matched", {"rx": except_regex}, needs_base=True), base=base))


def _finding(profile, fid: str, want: str, thresholds) -> CheckResult:
    from traceview.analysis.compare.verify_grammar import _P, _finding_id

    text = f"no finding {fid}" if want == "absent" else f"finding {fid} present"
    _finding_id(_P(text, [fid]))  # UsageError for an unknown id
    v = Verifier(_profile(profile), finding_thresholds=thresholds)
    return _assert(v.check(Check(text, "finding", {"id": fid, "want": want})))


def assert_no_finding(profile, finding_id: str, *, thresholds=None) -> CheckResult:
    """The profile's findings (:mod:`traceview.analysis.findings`) do not include
    ``finding_id`` (``thresholds``: as :func:`traceview.analysis.findings.thresholds_of`);
    the check ``no finding ID``."""
    return _finding(profile, finding_id, "absent", thresholds)


def assert_finding(profile, finding_id: str, *, thresholds=None) -> CheckResult:
    """The profile's findings include ``finding_id``; the check ``finding ID present``."""
    return _finding(profile, finding_id, "present", thresholds)


# -- golden summaries ----------------------------------------------------------------------

def _profile(p):
    from traceview.api import _profile as profile_of

    return profile_of(p)


def golden_summary(profile, *, rules=None, min_share: float = 0.0) -> dict:
    """A JSON-ready summary of a profile for golden comparisons, with stable ordering.

    Keys: ``traceview_golden`` (format version), ``op_time_ps``, ``events`` (traced op
    events), ``modules`` ({module: executions}), ``kernels`` ({kernel name: {invocations,
    config}}), ``families`` ({family: {self_ps, share}}), ``populations`` (list sorted by
    key, each with kind, stem, shape, fingerprint, occurrences, self_ps, share, modules,
    kernels). Populations below ``min_share`` of op time are left out (default: none).
    """
    from traceview.analysis.compare.populations import family_shares, kernel_table, populations
    from traceview.analysis.ops.tagged import tag
    from traceview.model.kernelname import kernel_config

    prof = _profile(profile)
    tagged = tag(prof.table, rules)
    # the golden format's key has no program (goldens recorded before it keep comparing)
    pops = populations(prof, tagged=tagged, program_stem_key=False)
    total = tagged.self_ps
    fam = {}
    for r in family_shares(tagged).iter_rows(named=True):
        fam[r["family"]] = {"self_ps": int(r["self_ps"]), "share": round(r["self_ps"] / total, 6) if total else 0.0}
    mods = {}
    runs = prof.module_runs
    if runs is not None and runs.height:
        for m, n in runs.group_by("module").len().iter_rows():
            mods[m] = int(n)
    kern = {}
    for r in kernel_table(prof, tagged=tagged).iter_rows(named=True):
        kern[r["kernel"]] = {"invocations": int(r["invocations"]),
                             "config": {k: (list(v) if isinstance(v, tuple) else v)
                                        for k, v in kernel_config(r["kernel"]).items()}}
    rows = []
    for r in pops.iter_rows(named=True):
        if r["share"] < min_share:
            continue
        rows.append({"kind": r["kind"], "stem": r["stem"], "shape": r["shape"], "fingerprint": r["fingerprint"],
                     "occurrences": int(r["occurrences"]), "self_ps": int(r["self_ps"]),
                     "share": round(float(r["share"]), 6), "modules": list(r["modules"]),
                     "kernels": list(r["kernels"])})
    rows.sort(key=lambda x: (x["kind"], x["stem"], x["shape"], x["fingerprint"]))
    return {"traceview_golden": GOLDEN_VERSION, "op_time_ps": total, "events": tagged.events,
            "modules": dict(sorted(mods.items())), "kernels": dict(sorted(kern.items())),
            "families": dict(sorted(fam.items())), "populations": rows}


def compare_summaries(actual: dict, golden: dict, *, time_rtol: float = 0.5, time_atol_ps: int = 10_000_000,
                      time_share_atol: float = 0.15, time_min_share: float = 0.02, share_atol: float = 0.25,
                      check_times: bool = True, limit: int = 20) -> list[str]:
    """Differences between two :func:`golden_summary` dicts, one line each (empty: equal).

    Exact: the set of populations (key kind, stem, shape, fingerprint), their occurrences,
    module executions, kernel names and invocations. Within tolerance (``check_times``), on
    shares of op time, so that a machine uniformly slower or faster passes: each population
    whose golden share is at least ``time_min_share`` (2%) keeps its share within
    ``max(time_share_atol, time_rtol × golden share)`` (±15 points or ±50%) or its self time
    within ``time_atol_ps`` (10 µs); each family's share within ``share_atol`` (25 points).
    The defaults pass re-recordings of the project's CPU fixtures of one configuration, whose
    population shares move by up to 12 points and family shares by up to 18 from one
    recording to the next (``benchmarks/RESULTS.md``, "Golden tolerances"); steadier
    accelerator traces can take tighter values. At most
    ``limit`` lines (+ a count).
    """
    from traceview.model.units import fmt_time_ps

    out: list[str] = []
    if actual.get("traceview_golden") != golden.get("traceview_golden"):
        out.append(f"golden format {golden.get('traceview_golden')!r}, actual {actual.get('traceview_golden')!r}")

    def key(p):
        return (p["kind"], p["stem"], p["shape"], p["fingerprint"])

    def name(p):
        return f"{p['stem'] or p['kind']} {p['shape'] or '?'}"

    ga = {key(p): p for p in golden.get("populations", [])}
    aa = {key(p): p for p in actual.get("populations", [])}
    for k in sorted(set(ga) - set(aa)):
        out.append(f"population missing: {name(ga[k])} (golden: {ga[k]['occurrences']} occurrences, "
                   f"{fmt_time_ps(ga[k]['self_ps'])})")
    for k in sorted(set(aa) - set(ga)):
        out.append(f"new population: {name(aa[k])} ({aa[k]['occurrences']} occurrences, {fmt_time_ps(aa[k]['self_ps'])})")
    for k in sorted(set(ga) & set(aa)):
        g, a = ga[k], aa[k]
        if g["occurrences"] != a["occurrences"]:
            out.append(f"{name(a)}: {a['occurrences']} occurrences, golden {g['occurrences']} (exact)")
        if check_times and g["share"] >= time_min_share and abs(a["self_ps"] - g["self_ps"]) > time_atol_ps:
            tol = max(time_share_atol, time_rtol * g["share"])
            if abs(a["share"] - g["share"]) > tol:
                out.append(f"{name(a)}: {100 * a['share']:.1f}% of op time ({fmt_time_ps(a['self_ps'])}), golden "
                           f"{100 * g['share']:.1f}% ({fmt_time_ps(g['self_ps'])}), bound ±{100 * tol:.1f} points")
    gm, am = golden.get("modules", {}), actual.get("modules", {})
    for m in sorted(set(gm) | set(am)):
        if gm.get(m) != am.get(m):
            out.append(f"module {m}: {am.get(m, 0)} executions, golden {gm.get(m, 0)} (exact)")
    gk, ak = golden.get("kernels", {}), actual.get("kernels", {})
    for k in sorted(set(gk) | set(ak)):
        if k not in ak:
            out.append(f"kernel missing: {k} (golden: {gk[k]['invocations']} invocations)")
        elif k not in gk:
            out.append(f"new kernel: {k} ({ak[k]['invocations']} invocations)")
        elif gk[k]["invocations"] != ak[k]["invocations"]:
            out.append(f"kernel {k}: {ak[k]['invocations']} invocations, golden {gk[k]['invocations']} (exact)")
    if check_times:
        gf, af = golden.get("families", {}), actual.get("families", {})
        for f in sorted(set(gf) | set(af)):
            sa, sg = af.get(f, {}).get("share", 0.0), gf.get(f, {}).get("share", 0.0)
            if abs(sa - sg) > share_atol:
                out.append(f"family {f}: share {100 * sa:.1f}%, golden {100 * sg:.1f}%, bound ±{100 * share_atol:g} points")
    if len(out) > limit:
        out = out[:limit] + [f"... and {len(out) - limit} more differences"]
    return out


def assert_matches_golden(profile, path: str | os.PathLike, *, update: bool = False, rules=None,
                          min_share: float = 0.0, **tolerances) -> dict:
    """Compare :func:`golden_summary` of ``profile`` with the JSON file at ``path``.

    ``update=True`` (re)writes the file instead and passes. A missing file fails (it is
    never created silently) with a message telling how to create it. ``tolerances`` are
    :func:`compare_summaries`'s keywords. Returns the summary. Raises AssertionError listing
    the differences.
    """
    summary = golden_summary(profile, rules=rules, min_share=min_share)
    p = Path(path)
    if update:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(json.dumps(summary, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        return summary
    if not p.exists():
        raise AssertionError(f"no golden summary at {p}: run pytest with --traceview-update-golden to write it "
                             f"(or traceview.testing.assert_matches_golden(..., update=True))")
    try:
        golden = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise AssertionError(f"golden summary {p} is unreadable ({exc}); rewrite it with --traceview-update-golden") from None
    diffs = compare_summaries(summary, golden, **tolerances)
    if diffs:
        raise AssertionError(f"profile differs from the golden summary {p} "
                             f"(update with --traceview-update-golden):\n  " + "\n  ".join(diffs))
    return summary
