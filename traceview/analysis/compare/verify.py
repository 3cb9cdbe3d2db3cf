"""Evaluating ``traceview verify`` checks on a profile or a base/treatment pair.

A treatment is only a treatment once the trace shows it took effect: the kernel's name
carries the new block size, the sampler's ops are gone, the transplanted kernel's ops come
from the new file. :class:`Verifier` evaluates the checks of :mod:`traceview.analysis.compare.verify_grammar`
(grammar and definitions there) and gives one :class:`CheckResult` per check, whose message
names the op, its shape, the measured figure and the bound. A check is PASS, FAIL or UNKNOWN:
unknown when the trace lacks what it needs (no recorded sources, no allocator events, no
collective across devices, a finding whose rule could not run), never a pass. The checks run on
:func:`traceview.analysis.ops.tagged.tag`'s rows (one per op description), never on a per-event
table. Times in messages use :func:`traceview.model.units.fmt_time_ps`.
"""

from __future__ import annotations

import fnmatch
import re
from types import SimpleNamespace
from dataclasses import dataclass, field

import polars as pl

from traceview.analysis import derived
from traceview.analysis.ops import aggregate
from traceview.analysis.ops.families import FAMILIES, rules_of
from traceview.analysis.compare.populations import kernel_table
from traceview.analysis.ops.tagged import TaggedOps
from traceview.analysis.compare.verify_grammar import CMPS, Check, parse_check
from traceview.errors import TraceviewError, UsageError
from traceview.analysis.ops.sources import frames
from traceview.model.kernelname import config_value, config_value_matches, format_config_value, kernel_config
from traceview.model.schema import OPS_SCHEMA
from traceview.model.units import fmt_time_ps


#: the outcomes of a check
STATUSES = ("pass", "fail", "unknown")


@dataclass
class CheckResult:
    """Outcome of one check: the check's text, ``status`` (one of :data:`STATUSES`; True,
    False and None are taken as pass, fail and unknown) and a one-paragraph ``message`` (the
    reason when failed or unknown; what was measured when passed). ``ok``: status is pass."""

    check: str
    status: str
    message: str
    #: a caveat shown even under a pass (e.g. a share of ops no op matched: a mistyped regex)
    note: str = ""

    def __post_init__(self):
        if not isinstance(self.status, str):
            self.status = "unknown" if self.status is None else "pass" if self.status else "fail"
        if self.status not in STATUSES:
            raise ValueError(f"check status {self.status!r}: expected one of {', '.join(STATUSES)}")

    @property
    def ok(self) -> bool:
        return self.status == "pass"

    def to_dict(self) -> dict:
        return {"check": self.check, "status": self.status, "ok": self.ok, "message": self.message,
                **({"note": self.note} if self.note else {})}


@dataclass
class VerifyReport:
    """All results; ``ok`` when every check passed (a failed or unknown one makes it False)."""

    results: list[CheckResult] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.results)

    @property
    def passed(self) -> list[CheckResult]:
        return [r for r in self.results if r.status == "pass"]

    @property
    def failed(self) -> list[CheckResult]:
        return [r for r in self.results if r.status == "fail"]

    @property
    def unknown(self) -> list[CheckResult]:
        return [r for r in self.results if r.status == "unknown"]

    def to_dict(self) -> dict:
        return {"ok": self.ok, "passed": len(self.passed), "failed": len(self.failed), "unknown": len(self.unknown),
                "results": [r.to_dict() for r in self.results]}


def _fmt_t(ps) -> str:
    return fmt_time_ps(ps)


def _events(rows: pl.DataFrame) -> int:
    """Op events the tagged rows stand for."""
    return int(rows["rows"].sum() or 0) if rows.height else 0


#: the op-table columns of the tagged rows (for the analyses that take an op table)
_OP_COLUMNS = [c for c in OPS_SCHEMA if c not in ("start_ps",)]


def _short(shape: str | None, n: int = 120) -> str:
    s = shape or "?"
    return s if len(s) <= n else s[: n - 1] + "…"


def _sourced(df: pl.DataFrame) -> pl.DataFrame:
    """The rows with a recorded source (a source file or a stack)."""
    return df.filter((pl.col("src_file").fill_null("") != "") | (pl.col("source_file").fill_null("") != "")
                     | (pl.col("source_stack").fill_null("") != ""))


def _no_sources(df: pl.DataFrame) -> str:
    return f"none of the {_events(df):,} op events has a recorded source (source file or stack)"


def _source_note(df: pl.DataFrame) -> str:
    """``" (N of M op events have no recorded source)"``, "" when every one has."""
    n, have = _events(df), _events(_sourced(df))
    return f" ({n - have:,} of {n:,} op events have no recorded source)" if have < n else ""


def _under(path: str, prefix: str) -> bool:
    if not path:
        return False
    path = path.replace("\\", "/")
    pre = prefix.replace("\\", "/")
    if path == pre or path.startswith(pre):
        return True
    return ("/" + pre.lstrip("/")) in path


class Verifier:
    """Evaluates checks against a treatment profile and, for diff checks, a base profile.

    ``treatment`` / ``base``: profiles (anything with ``table``, ``module_runs`` and
    ``traces``, as :class:`traceview.Profile`). ``rules``: user op families
    (``["name=regex"]`` or a rules file), usable by name in ``family`` checks. Raises
    UsageError for bad rules. Each side is tagged once (:func:`traceview.analysis.ops.tagged.tag`).
    """

    def __init__(self, treatment, base=None, *, rules=None, step_window: str = "steady", finding_thresholds=None,
                 findings: bool = True, peaks=None):
        self.treatment = treatment
        self.peaks = peaks
        self.step_window = step_window
        self.base = base
        self.rules = rules
        self.finding_thresholds = finding_thresholds
        self.findings_on = findings
        self._reports: dict = {}
        self.user_families = [r.name for r in rules_of(rules)]
        self._diff = None

    # -- helpers --------------------------------------------------------------------------
    def _prof(self, side: str):
        return self.base if side == "base" else self.treatment

    def _tag(self, prof) -> TaggedOps:
        return derived.tagged(prof, self.rules)

    def _df(self, prof) -> pl.DataFrame:
        return self._tag(prof).rows

    def _diff_result(self):
        from traceview.analysis.compare.diff import diff

        if self._diff is None:
            self._diff = diff(self.base, self.treatment, rules=self.rules, labels=("base", "treatment"),
                              tagged=(self._tag(self.base), self._tag(self.treatment)), step_window=self.step_window)
        return self._diff

    @staticmethod
    def _op_mask(rx: str) -> pl.Expr:
        # the HLO text without instruction/operand names: an operand called %fusion.3 is no match
        return (pl.col("op_name").fill_null("").str.contains(rx) | pl.col("fingerprint").fill_null("").str.contains(rx)
                | pl.col("framework_op").fill_null("").str.contains(rx) | pl.col("kname").fill_null("").str.contains(rx)
                | pl.col("kernel").fill_null("").str.contains(rx))

    @staticmethod
    def _file_mask(rx: str) -> pl.Expr:
        return (pl.col("source_file").fill_null("").str.contains(rx) | pl.col("source_stack").fill_null("").str.contains(rx)
                | pl.col("src_file").fill_null("").str.contains(rx))

    @staticmethod
    def _describe(ops: pl.DataFrame, total_self: int, n: int = 4) -> str:
        """``name shape ×occ in module (time, share)`` for the biggest (op, shape) populations."""
        if ops.height == 0:
            return ""
        g = ops.group_by(["op_name", "shape"]).agg(
            pl.col("count").sum().alias("occ"), pl.col("self_ps").sum().alias("t"),
            pl.col("module").unique().sort().alias("mods")).sort(["t", "op_name", "shape"],
                                                                 descending=[True, False, False])
        parts = []
        for r in g.head(n).iter_rows(named=True):
            share = f", {100 * r['t'] / total_self:.1f}% of op time" if total_self else ""
            mods = ", ".join(m for m in r["mods"] if m)
            parts.append(f"{r['op_name']} {_short(r['shape'])} ×{r['occ']:,}" + (f" in {mods}" if mods else "")
                         + f" ({_fmt_t(r['t'])}{share})")
        more = f"; +{g.height - n} more populations" if g.height > n else ""
        return "; ".join(parts) + more

    def _kernels(self, prof, glob: str) -> pl.DataFrame:
        kt = kernel_table(prof, tagged=self._tag(prof))
        return kt.filter(pl.col("kernel").map_elements(lambda k: fnmatch.fnmatchcase(k, glob), return_dtype=pl.Boolean))

    def _kernel_list(self, prof) -> str:
        names = kernel_table(prof, tagged=self._tag(prof))["kernel"].to_list()
        return ", ".join(names[:6]) + (f" +{len(names) - 6}" if len(names) > 6 else "") if names else "none"

    # -- evaluation -----------------------------------------------------------------------
    def check(self, check: Check | str) -> CheckResult:
        """Evaluate one check (text or parsed). Raises UsageError for a diff check without a
        base profile or an unknown family name."""
        c = parse_check(check) if isinstance(check, str) else check
        if (c.needs_base or c.side == "base") and self.base is None:
            raise UsageError(f"check {c.text!r} needs two profiles (BASE and TREATMENT)")
        fn = getattr(self, f"_c_{c.kind}")
        got = fn(c, self._prof(c.side)) if not c.needs_base else fn(c)
        return CheckResult(c.text, *got)

    def run(self, checks) -> VerifyReport:
        """Evaluate every check (strings or :class:`Check`) in order; returns a :class:`VerifyReport`."""
        parsed = [parse_check(x) if isinstance(x, str) else x for x in checks]
        return VerifyReport([self.check(c) for c in parsed])

    # single-profile checks: (check, profile) -> (ok, message[, note]), ok None when unknown
    def _presence(self, c: Check, prof, mask: pl.Expr, what: str, one: str, sources: bool = False) -> tuple:
        """``what``: plural verb phrase ("match"), ``one``: singular ("matches"); ``sources``: the
        mask reads sources, so a trace without any is unknown."""
        df = self._df(prof)
        if sources and _sourced(df).height == 0:
            return None, _no_sources(df)
        hit = df.filter(mask)
        total = int(df["self_ps"].sum() or 0)
        if c.args["want"] == "absent":
            if hit.height == 0:  # the absence is the claim: said even under the pass, so that a mistyped regex is seen
                msg = f"no op {one} /{c.args['rx']}/ among {_events(df):,} op events" + (_source_note(df) if sources else "")
                return True, msg, msg
            return False, (f"{hit['count'].sum():,} op event(s) {what} /{c.args['rx']}/ "
                           f"({_fmt_t(hit['self_ps'].sum())}, {100 * (hit['self_ps'].sum() or 0) / total:.1f}% of op "
                           f"time); expected none. {self._describe(hit, total)}" if total else
                           f"{hit['count'].sum():,} op event(s) {what} /{c.args['rx']}/. {self._describe(hit, total)}")
        if hit.height:
            return True, f"{hit['count'].sum():,} op event(s) {what} /{c.args['rx']}/: {self._describe(hit, total, 2)}"
        return False, f"no op {one} /{c.args['rx']}/ among {_events(df):,} op events; expected at least one"

    def _report(self, prof):
        """The :func:`traceview.analysis.report.build_report` of ``prof`` as analyze builds it:
        the same step window, family rules, finding thresholds and peaks (the phase is the profile's)."""
        from traceview.analysis.report import build_report

        got = self._reports.get(id(prof))
        if got is None:
            peaks = self.peaks(prof) if callable(self.peaks) else self.peaks
            got = self._reports[id(prof)] = build_report(prof, rules=self.rules, step_window=self.step_window,
                                                         finding_thresholds=self.finding_thresholds, peaks=peaks)
        return got

    def _not_evaluated(self, rep, fid: str) -> str | None:
        """Why finding ``fid``'s rule did not run on ``rep``, None when it did."""
        from traceview.analysis.findings import DIFF_IDS

        if fid in DIFF_IDS:
            return "a finding of a diff (traceview diff BASE TREATMENT); verify evaluates the findings of one profile"
        return (getattr(rep, "findings_not_evaluated", None) or {}).get(fid)

    def _c_finding(self, c, prof):
        """``no finding ID`` / ``finding ID present|absent``: the findings of
        :func:`traceview.analysis.report.build_report` on ``prof`` (:meth:`_report`); unknown
        when the rule could not run."""
        if not self.findings_on:
            raise UsageError(f"check {c.text!r} needs the findings; drop --no-findings")
        rep = self._report(prof)
        got = rep.findings or []
        fid = c.args["id"]
        hit = [f for f in got if f.id == fid]
        others = ", ".join(sorted({f.id for f in got})) or "none"
        if hit:
            return c.args["want"] == "present", f"finding {fid} ({hit[0].severity}): {hit[0].statement}"
        why = self._not_evaluated(rep, fid)
        if why:
            return None, f"the rule of {fid} could not run: {why}"
        if c.args["want"] == "absent":
            return True, f"no finding {fid} (findings: {others})"
        return False, f"no finding {fid}; expected one (findings: {others})"

    def _c_finding_impact(self, c, prof):
        """``finding ID impact CMP PCT`` (grammar in :mod:`traceview.analysis.compare.verify_grammar`)."""
        from traceview.analysis.findings.impact import impact_line

        if not self.findings_on:
            raise UsageError(f"check {c.text!r} needs the findings; drop --no-findings")
        rep = self._report(prof)
        cmp_, bound, fid = c.args["cmp"], c.args["bound"], c.args["id"]
        hit = [f for f in rep.findings or [] if f.id == fid]
        if not hit:
            why = self._not_evaluated(rep, fid)
            if why:
                return None, f"the rule of {fid} could not run: {why}"
            return CMPS[cmp_](0.0, bound), f"no finding {fid}: impact taken as 0, bound {cmp_} {100 * bound:g}%"
        imp = hit[0].impact or {}
        lo, hi = imp.get("share_low"), imp.get("share_high")
        if imp.get("method") == "unknown" or hi is None:
            return None, f"finding {fid} impact unknown: {imp.get('basis', '')}"
        v = lo if cmp_ in (">", ">=") else hi
        return CMPS[cmp_](v, bound), f"finding {fid} impact {impact_line(imp)}; bound {cmp_} {100 * bound:g}%"

    def _c_op(self, c, prof):
        return self._presence(c, prof, self._op_mask(c.args["rx"]), "match", "matches")

    def _c_op_file(self, c, prof):
        return self._presence(c, prof, self._file_mask(c.args["rx"]), "come from a file matching",
                              "comes from a file matching", sources=True)

    def _c_count(self, c, prof):
        df = self._df(prof).filter(self._op_mask(c.args["rx"]))
        cmp_, n = c.args["cmp"], c.args["n"]
        f = CMPS[cmp_]
        if df.height == 0:
            if f(0, n):  # a count of nothing: said under the pass too, so that a mistyped regex is seen
                msg = f"no op matches /{c.args['rx']}/: occurrences 0 {cmp_} {n:g}"
                return True, msg, f"no op matches /{c.args['rx']}/ among {_events(self._df(prof)):,} op events"
            return False, f"no op matches /{c.args['rx']}/: occurrences 0, bound {cmp_} {n:g}"
        if not c.args["per_execution"]:
            occ = int(df["count"].sum())
            if f(occ, n):
                return True, f"{occ:,} occurrences {cmp_} {n:g}"
            return False, f"{occ:,} occurrences of ops matching /{c.args['rx']}/, bound {cmp_} {n:g}: " \
                          f"{self._describe(df, int(self._df(prof)['self_ps'].sum() or 0))}"
        # each row stands for its events: their occurrences summed in ``count``
        chk = aggregate.occurrence_checks(df.select(_OP_COLUMNS), prof.module_runs)
        bad, unknown = [], []
        for r in chk.iter_rows(named=True):
            pe = r["per_execution"]
            if pe is None:
                unknown.append(r)
            elif not f(pe, n):
                bad.append(r)
        if not bad and not unknown:
            vals = sorted({round(r["per_execution"], 3) for r in chk.iter_rows(named=True)})
            return True, f"{chk.height} population(s), per execution {', '.join(f'{v:g}' for v in vals)} {cmp_} {n:g}"
        parts = [f"{r['op_name']} {_short(r['shape'])}: {r['occurrences']:,} occurrences in {r['executions']:,} "
                 f"executions = {r['per_execution']:.3g} per execution, bound {cmp_} {n:g}" for r in bad[:5]]
        parts += [f"{r['op_name']} {_short(r['shape'])}: {r['occurrences']:,} occurrences, executions of its program "
                  f"unknown (no module runs)" for r in unknown[:3]]
        # a population out of bounds fails; otherwise the ones without executions leave it unknown
        return (False if bad else None), "; ".join(parts) + (f"; +{len(bad) - 5} more" if len(bad) > 5 else "")

    def _resolve_family(self, name: str) -> str:
        names = list(dict.fromkeys(list(self.user_families) + list(FAMILIES)))
        low = name.lower()
        for pick in (lambda f: f.lower() == low, lambda f: f.lower().startswith(low), lambda f: low in f.lower()):
            hit = [f for f in names if pick(f)]
            if len(hit) == 1:
                return hit[0]
            if len(hit) > 1:
                raise UsageError(f"family {name!r} is ambiguous: {', '.join(hit)}")
        raise UsageError(f"unknown family {name!r}: known families are {', '.join(names)} "
                         f"(or use 'family matching REGEX share ...')")

    def _c_family_share(self, c, prof):
        df = self._df(prof)
        total = int(df["self_ps"].sum() or 0)
        if c.args["name"] is not None:
            fam = self._resolve_family(c.args["name"])
            sel = df.filter(pl.col("family") == fam)
            label = f"family {fam!r}"
        else:
            rx = c.args["rx"]
            sel = df.filter(self._op_mask(rx) | self._file_mask(rx))
            label = f"ops matching /{rx}/"
        t = int(sel["self_ps"].sum() or 0) if sel.height else 0
        share = t / total if total else 0.0
        cmp_, bound = c.args["cmp"], c.args["bound"]
        msg = f"{label} is {100 * share:.1f}% of op time ({_fmt_t(t)} of {_fmt_t(total)}), bound {cmp_} {100 * bound:g}%"
        note = ""
        if sel.height == 0:  # a share of nothing: said even under a pass, so that a mistyped regex is seen
            note = (f"no op matches /{c.args['rx']}/ (op name, HLO text, framework op, source file) among "
                    f"{_events(df):,} op events" if c.args["name"] is None else
                    f"no op is in {label} among {_events(df):,} op events")
            msg = f"{note}: {msg}"
        if CMPS[cmp_](share, bound):
            return True, msg, note
        return False, msg + (f"; largest: {self._describe(self._kernel_aware(sel), total, 3)}" if sel.height else "")

    @staticmethod
    def _kernel_aware(sel: pl.DataFrame) -> pl.DataFrame:
        """Ops of a named kernel shown under the kernel's name (its many inner ops are one thing)."""
        return sel.with_columns(
            pl.when(pl.col("kname").is_not_null()).then(pl.col("kname")).otherwise(pl.col("op_name")).alias("op_name"),
            pl.when(pl.col("kname").is_not_null()).then(pl.lit("(kernel)")).otherwise(pl.col("shape")).alias("shape"))

    def _comm(self, prof):
        """(Overlap, Stragglers) of ``prof`` within its default step anatomy (cached)."""
        return derived.overlap(prof), derived.stragglers(prof)

    def _c_exposed_share(self, c, prof):
        ov, _ = self._comm(prof)
        s = ov.summary
        share = s["exposed_share"]
        cmp_, bound = c.args["cmp"], c.args["bound"]
        if share is None:  # the overlap has no step of its own: nothing communicates, or no steps
            anat = derived.step_anatomy(prof)
            cov = getattr(anat, "coverage", None)
            if ov.n_ops == 0 and cov is not None and cov.n_steps and cov.step_ps:  # a real 0 over measured steps
                return CMPS[cmp_](0.0, bound), (f"exposed communication is 0.0% of step time: no collective or async "
                                                f"copy in the trace ({cov.n_steps} step(s), {_fmt_t(cov.step_ps)}), "
                                                f"bound {cmp_} {100 * bound:g}%")
            return None, "exposed communication share unknown: no step time measured"
        msg = (f"exposed communication is {100 * share:.1f}% of step time ({_fmt_t(s['exposed_ps'])} of "
               f"{_fmt_t(s['step_ps'])} over {s['n_steps']} step(s) on {s['n_devices']} device(s)), bound {cmp_} "
               f"{100 * bound:g}%")
        if not s["collectives"]:
            msg += "; no collective in the trace"
        return CMPS[cmp_](share, bound), msg

    def _c_straggler_lead(self, c, prof):
        _, st = self._comm(prof)
        s = st.summary
        cmp_, bound = c.args["cmp"], c.args["bound"]
        if not s.get("straggler"):
            return None, "straggler lead unknown: no collective execution was matched across two or more devices"
        lead = s["lead_max"]
        worst = st.steps.sort("lead", descending=True).row(0, named=True)
        waits = ("no collective of the step matched across devices, so no wait attributed"
                 if worst["last_to_arrive"] is None else
                 f"others' waits attributed to {worst['last_to_arrive']}: {_fmt_t(worst['attributed_wait_ps'])}")
        msg = (f"straggler lead is {100 * lead:.1f}% (step {worst['step']}: {worst['slowest']} busy "
               f"{_fmt_t(worst['busy_max_ps'])} against the median {_fmt_t(worst['busy_median_ps'])}; {waits}), "
               f"bound {cmp_} {100 * bound:g}%")
        return CMPS[cmp_](lead, bound), msg

    def _memory(self, prof):
        """The :class:`~traceview.analysis.memory.allocators.MemoryReport` of ``prof`` (its default steps)."""
        from traceview.analysis.memory.allocators import profile_memory

        return prof.derived(("memory",), lambda: profile_memory(prof, derived.step_anatomy(prof))) \
            if hasattr(prof, "derived") else profile_memory(prof, derived.step_anatomy(prof))

    def _c_memory_peak(self, c, prof):
        from traceview.model.units import fmt_bytes

        mem = self._memory(prof)
        cmp_, bound = c.args["cmp"], c.args["bound"]
        if not mem.known:
            return None, "memory peak unknown: " + "; ".join(mem.notes)
        a = mem.allocators[0]
        msg = (f"memory peak is {fmt_bytes(a.peak_in_use)} ({a.allocator} on {a.host}, "
               f"{'-' if a.peak_share is None else f'{100 * a.peak_share:.1f}%'} of its {fmt_bytes(a.capacity)}), "
               f"bound {cmp_} {fmt_bytes(bound)}")
        return CMPS[cmp_](a.peak_in_use, bound), msg

    def _c_memory_growth(self, c, prof):
        from traceview.model.units import fmt_bytes

        mem = self._memory(prof)
        cmp_, bound = c.args["cmp"], c.args["bound"]
        from traceview.analysis.findings import Inputs
        from traceview.analysis.findings._context import step_loop

        loop = step_loop(Inputs(SimpleNamespace(steps=derived.step_anatomy(prof))))
        if mem.known and not loop["repeated"]:
            return None, ("memory growth per step unknown: the steps are not one repeated step "
                           f"({loop['mixes']} op mixes, the commonest in {loop['mix_steps']} of {loop['steps']} steps: "
                           "a sweep grows and shrinks by design)")
        known = [a for a in mem.allocators if a.growth_pct is not None]
        if not known:
            why = "; ".join(dict.fromkeys([n for a in mem.allocators for n in a.notes] + list(mem.notes)))
            return None, "memory growth per step unknown: " + (why or "no allocator has per-step figures")
        a = max(known, key=lambda x: x.growth_pct)
        g = a.growth_pct / 100
        msg = (f"memory grows {100 * g:+.2f}% per step ({fmt_bytes(a.growth_per_step)} per step, {a.allocator} on "
               f"{a.host}, from {a.step_source}), bound {cmp_} {100 * bound:g}%")
        return CMPS[cmp_](g, bound), msg

    def _c_kernel_present(self, c, prof):
        k = self._kernels(prof, c.args["glob"])
        if c.args["want"] == "present":
            if k.height:
                return True, f"kernel(s) {', '.join(k['kernel'].to_list())} ({int(k['invocations'].sum()):,} invocations)"
            return False, f"no kernel named like {c.args['glob']!r}; kernels found: {self._kernel_list(prof)}"
        if k.height == 0:  # the absence is the claim: said under the pass too (a mistyped name)
            msg = f"no kernel named like {c.args['glob']!r}; kernels found: {self._kernel_list(prof)}"
            return True, msg, msg
        return False, "; ".join(f"{r['kernel']} ran {r['invocations']:,} times in {', '.join(r['modules'])} "
                                f"({_fmt_t(r['self_ps'])})" for r in k.iter_rows(named=True)) + "; bound: absent"

    def _c_kernel_has(self, c, prof):
        k = self._kernels(prof, c.args["glob"])
        if k.height == 0:
            return False, f"no kernel named like {c.args['glob']!r}; kernels found: {self._kernel_list(prof)}"
        key, want = c.args["key"], c.args["value"]
        bad, good = [], []
        for r in k.iter_rows(named=True):
            cfg = kernel_config(r["kernel"])
            where = f"{r['invocations']:,} invocations in {', '.join(r['modules']) or '?'}"
            if key not in cfg:
                bad.append(f"{r['kernel']} has no {key!r} in its name (keys: {', '.join(sorted(cfg)) or 'none'}; {where})")
            elif not config_value_matches(r["kernel"], key, want):  # the value as the kernels table shows it
                bad.append(f"{r['kernel']} has {key} {format_config_value(config_value(r['kernel'], key))}, "
                           f"expected {want} ({where})")
            else:
                good.append(f"{r['kernel']} ({where})")
        if bad:
            return False, "; ".join(bad)
        return True, f"{key} {want} in " + "; ".join(good)

    def _ops_of(self, prof, glob: str | None, rx: str | None) -> pl.DataFrame:
        df = self._df(prof)
        if glob is not None:
            names = set(self._kernels(prof, glob)["kernel"].to_list())
            return df.filter(pl.col("kname").is_in(list(names)))
        return df.filter(self._op_mask(rx))

    def _c_source_under(self, c, prof):
        sel = self._ops_of(prof, c.args["glob"], c.args["rx"])
        what = f"kernel {c.args['glob']!r}" if c.args["glob"] is not None else f"ops matching /{c.args['rx']}/"
        if sel.height == 0:
            extra = f"; kernels found: {self._kernel_list(prof)}" if c.args["glob"] is not None else ""
            return False, f"no op of {what} in the profile{extra}"
        with_src = sel.filter(pl.col("src_file") != "")
        if with_src.height == 0:
            return None, (f"{what}: {_events(sel):,} op event(s), none with a recorded source; bound: under "
                          f"{c.args['path']}")
        files = with_src.group_by("src_file").agg(pl.col("count").sum().alias("n"), pl.col("op_name").first(),
                                                  pl.col("shape").first()).sort(["n", "src_file"],
                                                                                descending=[True, False])
        outside = [r for r in files.iter_rows(named=True) if not _under(r["src_file"], c.args["path"])]
        if outside:
            return False, f"{what}: " + "; ".join(
                f"{r['n']:,} op event(s) from {r['src_file']} (e.g. {r['op_name']} {_short(r['shape'])})"
                for r in outside[:4]) + f"; bound: under {c.args['path']}"
        return True, f"{what}: {int(with_src['count'].sum()):,} op event(s) from " + ", ".join(files["src_file"].to_list()[:3])

    def _c_source_present(self, c, prof):
        df = self._df(prof)
        if _sourced(df).height == 0:
            return None, _no_sources(df)
        path = c.args["path"]
        files = set(df["src_file"].unique().to_list())
        for st in df["source_stack"].fill_null("").unique().to_list():
            files.update(f for f, _ in frames(st))
        hit = sorted(f for f in files if _under(f, path))
        if c.args["want"] == "present":
            if hit:
                return True, f"source under {path}: {', '.join(hit[:3])}"
            return False, f"no op's source file or stack frame is under {path} ({len(files)} source files seen)"
        if not hit:  # the absence is the claim: said under the pass too (a mistyped path)
            msg = f"no source under {path}{_source_note(df)}"
            return True, msg, msg
        return False, f"ops come from {', '.join(hit[:4])} (under {path}); bound: absent"

    # diff checks: (check) -> (ok, message)
    def _c_collective(self, c, prof):

        a = c.args
        col = {"bytes": "data_bytes", "sent": "bytes_sent", "group": "group_size"}[a["what"]]
        rows = derived.communication(prof).collectives.filter(pl.col("kind") == a["kind"])
        if rows.height == 0:
            return False, f"no {a['kind']} collective in this profile"
        f = CMPS[a["cmp"]]
        bad = [r for r in rows.iter_rows(named=True) if r[col] is not None and not f(r[col], a["n"])]
        unknown = [r for r in rows.iter_rows(named=True) if r[col] is None]
        desc = "; ".join(f"{r['kind']} {_short(r['shape'])} groups {r['groups'] or '?'}: {a['what']} "
                         f"{'unknown' if r[col] is None else f'{r[col]:,.0f}'}"
                         for r in (bad or unknown or rows.to_dicts())[:4])
        if bad:
            return False, f"{len(bad)} of {rows.height} {a['kind']} population(s) fail {a['what']} {a['cmp']} {a['n']:,.0f}: {desc}"
        if unknown:
            return None, (f"{len(unknown)} of {rows.height} {a['kind']} population(s) have no {a['what']} "
                          f"figure: {desc}")
        return True, f"{rows.height} {a['kind']} population(s), {a['what']} {a['cmp']} {a['n']:,.0f}: {desc}"

    def _c_op_diff(self, c, mask=None, what="match", one="matches"):
        rx = c.args["rx"]
        if mask is not None:  # sources: a side without any says nothing
            for side, prof in (("base", self.base), ("treatment", self.treatment)):
                if _sourced(self._df(prof)).height == 0:
                    return None, f"{side}: " + _no_sources(self._df(prof))
        mask = mask if mask is not None else self._op_mask(rx)
        b = self._df(self.base).filter(mask)
        t = self._df(self.treatment).filter(mask)
        tb = int(self._df(self.base)["self_ps"].sum() or 0)
        tt = int(self._df(self.treatment)["self_ps"].sum() or 0)
        nb, nt = int(b["count"].sum() or 0) if b.height else 0, int(t["count"].sum() or 0) if t.height else 0
        if c.args["want"] == "vanished":
            if nb and not nt:
                return True, f"{nb:,} op event(s) {what} /{rx}/ in the base ({_fmt_t(b['self_ps'].sum())}), none in the treatment"
            if not nb:
                return False, f"no op {one} /{rx}/ in the base: nothing to vanish"
            return False, (f"{nt:,} op event(s) {what} /{rx}/ in the treatment (base: {nb:,}); bound: 0. "
                           f"{self._describe(t, tt)}")
        if nt and not nb:
            return True, f"{nt:,} op event(s) {what} /{rx}/ in the treatment ({_fmt_t(t['self_ps'].sum())}), none in the base"
        if not nt:
            return False, f"no op {one} /{rx}/ in the treatment"
        return False, f"{nb:,} op event(s) {what} /{rx}/ already in the base; bound: 0. {self._describe(b, tb)}"

    def _c_op_file_diff(self, c):
        return self._c_op_diff(c, self._file_mask(c.args["rx"]), "from a file matching", "comes from a file matching")

    def _c_kernel_changed(self, c):
        glob, key = c.args["glob"], c.args["key"]
        kb, kt = self._kernels(self.base, glob), self._kernels(self.treatment, glob)
        if kb.height == 0 or kt.height == 0:
            return False, (f"kernel named like {glob!r} missing in the {'base' if kb.height == 0 else 'treatment'}; "
                           f"base kernels: {self._kernel_list(self.base)}; treatment kernels: "
                           f"{self._kernel_list(self.treatment)}")
        vb = {format_config_value(config_value(k, key) or "-") for k in kb["kernel"].to_list()}
        vt = {format_config_value(config_value(k, key) or "-") for k in kt["kernel"].to_list()}
        desc = f"{key} {', '.join(sorted(vb))} -> {', '.join(sorted(vt))} ({', '.join(kb['kernel'])} -> {', '.join(kt['kernel'])})"
        if vb == vt:
            return False, f"{key} unchanged: {desc}"
        a, b = c.args["a"], c.args["b"]
        if a is not None:
            okb = all(config_value_matches(k, key, a) for k in kb["kernel"].to_list())
            okt = all(config_value_matches(k, key, b) for k in kt["kernel"].to_list())
            if not (okb and okt):
                return False, f"{desc}; expected {key} {a} -> {b}"
        return True, desc

    def _c_kernel_source_changed(self, c):
        glob = c.args["glob"]
        fb = sorted(set(self._ops_of(self.base, glob, None)["src_file"].to_list()) - {""})
        ft = sorted(set(self._ops_of(self.treatment, glob, None)["src_file"].to_list()) - {""})
        if not fb or not ft:
            if self._kernels(self.base if not fb else self.treatment, glob).height == 0:
                return False, f"no kernel named like {glob!r} in the {'base' if not fb else 'treatment'}"
            return None, f"kernel {glob!r}: no source recorded in the {'base' if not fb else 'treatment'}"
        if fb == ft:
            return False, f"kernel {glob!r} source unchanged: {', '.join(fb)}"
        return True, f"kernel {glob!r} source {', '.join(fb)} -> {', '.join(ft)}"

    def _c_all_matched(self, c):
        d = self._diff_result()
        rows = d.populations.filter(pl.col("status") != "matched")
        rx = c.args["rx"]
        if rx is not None:
            def excepted(r):
                texts = (r["op_names_base"] or []) + (r["op_names_treatment"] or []) + (r["kernels_base"] or []) \
                        + (r["kernels_treatment"] or []) + (r["modules_base"] or []) + (r["modules_treatment"] or []) \
                        + [r["stem"] or ""]
                return any(re.search(rx, x) for x in texts)
            rows = pl.DataFrame([r for r in rows.iter_rows(named=True) if not excepted(r)], schema=rows.schema)
        n = d.populations.filter(pl.col("status") == "matched").height
        if rows.height == 0:
            return True, f"{n} populations matched"
        parts = []
        for r in rows.head(5).iter_rows(named=True):
            side = "treatment" if r["status"] == "appeared" else "base"
            names = ", ".join((r[f"op_names_{side}"] or [])[:2]) or r["stem"]
            parts.append(f"{r['status']}: {names} {_short(r['shape'])} ×{r[f'occurrences_{side}']:,} "
                         f"({_fmt_t(r[f'self_ps_{side}'])})")
        return False, f"{rows.height} population(s) unmatched ({n} matched): " + "; ".join(parts)


def verify(treatment, checks, *, base=None, rules=None, step_window: str = "steady", finding_thresholds=None,
           findings: bool = True, peaks=None, window_option: str = "step_window") -> VerifyReport:
    """Evaluate ``checks`` (strings or :class:`Check`) on ``treatment`` (and ``base`` for diff
    checks): profiles as :class:`Verifier` takes them; ``step_window``: the steps of the
    diff's step time and of the report the finding checks read, as analyze's
    (:mod:`traceview.analysis.steps.stepstats`); ``peaks``: the
    :class:`~traceview.analysis.hardware.peaks.Peaks` the finding checks' reports use (or a
    function of a profile giving them; None: each profile's own, as analyze without --chip).
    Raises UsageError for an invalid
    check or step window, or an A:B window holding no step of a profile (before evaluating any)."""
    from traceview.analysis.steps.stepstats import parse_window, window_holds_steps

    if parse_window(step_window)[1] is not None:  # an A:B window must hold steps, as analyze and diff refuse
        for prof in (treatment, base):
            if prof is None:
                continue
            try:
                a = derived.step_anatomy(prof, rules, window=step_window)
            except TraceviewError:  # no steps to hold: the checks that need them say so
                continue
            # naming the profile: BASE and TREATMENT may have different step counts
            window_holds_steps(None if a is None else a.steps, step_window, window_option, prof=prof)
    parsed = [parse_check(x) if isinstance(x, str) else x for x in checks]
    if not parsed:
        raise UsageError("no checks given")
    v = Verifier(treatment, base, rules=rules, step_window=step_window, finding_thresholds=finding_thresholds,
                 findings=findings, peaks=peaks)
    for i, c in enumerate(parsed, 1):  # usage errors before any evaluation, naming the check's position
        if (c.needs_base or c.side == "base") and v.base is None:
            raise UsageError(f"check {i}: {c.text!r} needs two profiles (BASE and TREATMENT)")
        if c.kind == "family_share" and c.args["name"] is not None:
            try:
                v._resolve_family(c.args["name"])
            except UsageError as e:
                raise UsageError(f"check {i}: {e.fault}") from None
        if c.kind in ("finding", "finding_impact") and not findings:
            raise UsageError(f"check {i}: {c.text!r} needs the findings; drop --no-findings")
    return v.run(parsed)

