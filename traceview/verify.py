"""Declarative checks on a profile or a diff (``traceview verify``), for scripts and CI.

A treatment is only a treatment once the trace shows it took effect: the kernel's name
carries the new block size, the sampler's ops are gone, the transplanted kernel's ops come
from the new file. Each check below is one line; ``traceview verify`` exits 0 when every check
passes and 1 (:data:`traceview.errors.EXIT_CHECK_FAILED`) otherwise, printing one reason per
failed check that names the op, its shape, the measured figure and the bound. A check that
does not parse raises :class:`~traceview.errors.UsageError` (exit 2) with a one-line message.

Grammar
-------
Keywords are case-insensitive; ``[...]`` is optional; ``RX`` is a Python regular expression
(``re.search``), ``GLOB`` a shell pattern on the full kernel name (``fnmatch``, case
sensitive), ``PATH`` a path or path prefix. A token with spaces can be quoted with ``"`` or
``'`` (no escapes inside quotes, so ``\\d`` stays as written). In a checks file, blank lines
and lines starting with ``#`` are skipped.

Single-profile checks (on the treatment when two profiles are given; prefix ``base:`` to
check the base instead)::

    no op [matching] RX                 no op's name, framework op (JAX name stack), kernel name or
                                        HLO text without instruction names matches RX
    op [matching] RX present|absent
    no op from file [matching] RX       no op's source file or any frame of its stack matches RX
    op from file [matching] RX present|absent
    op [matching] RX count CMP N [per execution]
                                        occurrences of the matching ops (summed), or with
                                        "per execution" every matching (op, shape) population's
                                        occurrences per execution of its program
    family NAME share CMP PCT           NAME: a default family of traceview.steps (a unique
                                        prefix such as "attention" is enough) or a user family
    family matching RX share CMP PCT    ad-hoc family: ops whose name, HLO text, framework op,
                                        kernel name or source file matches RX
    kernel GLOB present|absent
    kernel GLOB has KEY VALUE           every kernel named like GLOB has KEY = VALUE (read off
                                        its name: see traceview.diff.kernel_config)
    source of kernel GLOB under PATH    every op of those kernels with a source comes from PATH
    source of op [matching] RX under PATH
    source PATH present|absent          some op's source file or stack frame is under PATH

Diff checks (two profiles, BASE then TREATMENT)::

    op [matching] RX vanished|appeared  present in the base and absent in the treatment, or
                                        the reverse
    op from file [matching] RX vanished|appeared
    kernel GLOB changed KEY [A -> B]    the KEY of the kernels named like GLOB differs between
                                        the sides (and is A in the base, B in the treatment)
    source of kernel GLOB changed       the kernels' ops come from other source files
    all matched [except RX]             every population of either side has its counterpart
                                        (traceview.diff), except those whose op names, kernel
                                        names, stem or modules match RX

``CMP`` is one of ``< <= > >= == !=``; ``PCT`` is a percentage (``30%``) or a fraction
(``0.3``); ``VALUE`` is a number (compared with the first number of a ``key_N_M`` part: the
block size), ``N_M`` / ``N,M`` for the whole tuple, or a word (``phase decode``).

Definitions: *share* is the family's self time over the self time of all ops of the profile
(all devices); ops of a named kernel count in ``attention/custom kernels``. *Under PATH*: the
source path equals PATH, starts with it, or contains it after a ``/`` (``my_kernels/`` matches
``/home/me/proj/my_kernels/kernel.py``).
"""

from __future__ import annotations

import fnmatch
import json
import operator
import re
from dataclasses import dataclass, field

import polars as pl

from .errors import UsageError

CMPS = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge, "==": operator.eq, "!=": operator.ne}
_TOKEN = re.compile(r'"([^"]*)"|\'([^\']*)\'|(\S+)')


@dataclass
class CheckResult:
    """Outcome of one check: ``ok``, the check's text and a one-paragraph ``message``
    (the reason when failed; what was measured when passed)."""

    check: str
    ok: bool
    message: str

    def line(self) -> str:
        return f"{'PASS' if self.ok else 'FAIL'}  {self.check}" + ("" if self.ok else f"\n      {self.message}")

    def to_dict(self) -> dict:
        return {"check": self.check, "ok": self.ok, "message": self.message}


@dataclass
class VerifyReport:
    """All results; ``ok`` when every check passed."""

    results: list[CheckResult] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.results)

    @property
    def failed(self) -> list[CheckResult]:
        return [r for r in self.results if not r.ok]

    def text(self) -> str:
        n = len(self.results)
        lines = [r.line() for r in self.results]
        lines.append(f"{n} check(s): {n - len(self.failed)} passed, {len(self.failed)} failed")
        return "\n".join(lines)

    def to_dict(self) -> dict:
        return {"ok": self.ok, "results": [r.to_dict() for r in self.results]}


@dataclass
class Check:
    """A parsed check: ``kind`` names the evaluator, ``args`` its arguments, ``side``
    "treatment" or "base" for single-profile checks, ``needs_base`` for diff checks."""

    text: str
    kind: str
    args: dict
    side: str = "treatment"
    needs_base: bool = False


# -- parsing --------------------------------------------------------------------------------

def tokenize(text: str) -> list[str]:
    """Split a check into tokens: whitespace-separated, ``"..."``/``'...'`` quoted (kept verbatim)."""
    out = []
    for m in _TOKEN.finditer(text):
        out.append(next(g for g in m.groups() if g is not None))
    return out


class _P:
    def __init__(self, text: str, toks: list[str]):
        self.text, self.t, self.i = text, toks, 0

    def err(self, why: str):
        raise UsageError(f"invalid check {self.text.strip()!r}: {why}")

    def peek(self, k: int = 0) -> str | None:
        j = self.i + k
        return self.t[j] if j < len(self.t) else None

    def kw(self, *words: str) -> bool:
        """Consume the keywords if they come next (case-insensitive)."""
        for k, w in enumerate(words):
            p = self.peek(k)
            if p is None or p.lower() != w:
                return False
        self.i += len(words)
        return True

    def need(self, *words: str) -> None:
        if not self.kw(*words):
            self.err(f"expected {' '.join(words)!r} after {' '.join(self.t[:self.i]) or 'the start'!r}")

    def word(self, what: str) -> str:
        p = self.peek()
        if p is None:
            self.err(f"missing {what}")
        self.i += 1
        return p

    def end(self) -> None:
        if self.i < len(self.t):
            self.err(f"unexpected {' '.join(self.t[self.i:])!r}")


def _regex(p: _P, what: str = "regular expression") -> str:
    """A regex word, checked in polars' engine (the one the checks run in)."""
    from .errors import UsageError
    from .profile import check_regex

    rx = p.word(what)
    try:
        check_regex(rx)
    except UsageError as exc:
        p.err(exc.fault)
    return rx


def _cmp(p: _P) -> str:
    c = p.word("comparison (< <= > >= == !=)")
    if c not in CMPS:
        p.err(f"unknown comparison {c!r}: use one of < <= > >= == !=")
    return c


def _pct(p: _P) -> float:
    s = p.word("percentage")
    try:
        return float(s[:-1]) / 100 if s.endswith("%") else float(s)
    except ValueError:
        p.err(f"expected a percentage such as 30% or 0.3, got {s!r}")


def _int(p: _P) -> float:
    s = p.word("number")
    try:
        return float(s)
    except ValueError:
        p.err(f"expected a number, got {s!r}")


def parse_check(text: str) -> Check:
    """Parse one check (grammar in the module doc). Raises UsageError with a one-line message."""
    toks = tokenize(text)
    p = _P(text, toks)
    if not toks:
        p.err("empty check")
    side = "treatment"
    if toks[0].lower() in ("base:", "treatment:"):
        side = toks[0].lower()[:-1]
        p.i = 1
    c = _parse_body(p)
    p.end()
    c.text, c.side = text.strip(), side
    if c.needs_base and side == "base" and p.t[0].lower() == "base:":
        p.err("a diff check compares base and treatment; drop the 'base:' prefix")
    return c


def _parse_body(p: _P) -> Check:
    if p.kw("no", "op", "from", "file") or p.kw("no", "ops", "from", "file"):
        p.kw("matching")
        return Check("", "op_file", {"rx": _regex(p), "want": "absent"})
    if p.kw("no", "op") or p.kw("no", "ops"):
        p.kw("matching")
        return Check("", "op", {"rx": _regex(p), "want": "absent"})
    if p.kw("no", "kernel"):
        return Check("", "kernel_present", {"glob": p.word("kernel name pattern"), "want": "absent"})
    if p.kw("all", "matched"):
        rx = _regex(p) if p.kw("except") else None
        return Check("", "all_matched", {"rx": rx}, needs_base=True)
    if p.kw("op") or p.kw("ops") or p.kw("some", "op"):
        what = "op_file" if p.kw("from", "file") else "op"
        p.kw("matching")
        rx = _regex(p)
        nxt = (p.peek() or "").lower()
        if nxt in ("present", "absent"):
            p.i += 1
            return Check("", what, {"rx": rx, "want": nxt})
        if nxt in ("vanished", "appeared"):
            p.i += 1
            return Check("", what + "_diff", {"rx": rx, "want": nxt}, needs_base=True)
        if nxt == "count" and what == "op":
            p.i += 1
            cmp_, n = _cmp(p), _int(p)
            per = p.kw("per", "execution")
            return Check("", "count", {"rx": rx, "cmp": cmp_, "n": n, "per_execution": per})
        if nxt == "":
            return Check("", what, {"rx": rx, "want": "present"})
        p.err(f"expected present, absent, vanished, appeared or count after the pattern, got {p.peek()!r}")
    if p.kw("family"):
        if p.kw("matching"):
            rx = _regex(p)
            name = None
        else:
            words = []
            while p.peek() is not None and p.peek().lower() != "share":
                words.append(p.word("family name"))
            if not words:
                p.err("missing family name")
            name, rx = " ".join(words), None
        p.need("share")
        return Check("", "family_share", {"name": name, "rx": rx, "cmp": _cmp(p), "bound": _pct(p)})
    if p.kw("kernel"):
        glob = p.word("kernel name pattern")
        if p.kw("has"):
            key = p.word("configuration key")
            return Check("", "kernel_has", {"glob": glob, "key": key, "value": p.word("value")})
        if p.kw("changed"):
            key = p.word("configuration key")
            a = b = None
            if p.peek() is not None:
                a = p.word("base value")
                p.need("->")
                b = p.word("treatment value")
            return Check("", "kernel_changed", {"glob": glob, "key": key, "a": a, "b": b}, needs_base=True)
        nxt = (p.peek() or "").lower()
        if nxt in ("present", "absent"):
            p.i += 1
            return Check("", "kernel_present", {"glob": glob, "want": nxt})
        p.err(f"expected has, changed, present or absent after the kernel pattern, got {p.peek()!r}")
    if p.kw("source", "of", "kernel"):
        glob = p.word("kernel name pattern")
        if p.kw("changed"):
            return Check("", "kernel_source_changed", {"glob": glob}, needs_base=True)
        p.need("under")
        return Check("", "source_under", {"glob": glob, "rx": None, "path": p.word("path")})
    if p.kw("source", "of", "op") or p.kw("source", "of", "ops"):
        p.kw("matching")
        rx = _regex(p)
        p.need("under")
        return Check("", "source_under", {"glob": None, "rx": rx, "path": p.word("path")})
    if p.kw("source"):
        p.kw("under")
        path = p.word("path")
        want = (p.peek() or "present").lower()
        if want not in ("present", "absent"):
            p.err(f"expected present or absent after the path, got {p.peek()!r}")
        if p.peek() is not None:
            p.i += 1
        return Check("", "source_present", {"path": path, "want": want})
    p.err("unknown check; it should start with 'no op', 'op', 'family', 'kernel', 'source' or 'all matched' "
          "(see traceview verify --help)")


def parse_checks(lines) -> list[Check]:
    """Checks from strings; blank ones and ``#`` comments skipped. Raises UsageError naming
    the check's position on the first bad one."""
    out = []
    for i, line in enumerate(lines, 1):
        s = str(line).strip()
        if not s or s.startswith("#"):
            continue
        try:
            out.append(parse_check(s))
        except UsageError as exc:
            raise UsageError(f"check {i}: {exc.fault}") from None
    return out


def read_checks(path) -> list[Check]:
    """Checks from a file, one per line (``#`` comments, blank lines skipped). Raises
    UsageError when the file cannot be read or a line is bad (message names ``file:line``)."""
    from .textfiles import config_lines

    out = []
    for where, s in config_lines(path, "checks"):
        try:
            out.append(parse_check(s))
        except UsageError as exc:
            raise UsageError(f"{where}: {exc.fault}") from None
    return out


# -- evaluation -----------------------------------------------------------------------------

def _fmt_t(ps) -> str:
    from .render.units import fmt_time_ps

    return fmt_time_ps(ps)


def _short(shape: str | None, n: int = 120) -> str:
    s = shape or "?"
    return s if len(s) <= n else s[: n - 1] + "…"


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

    ``treatment`` / ``base``: :class:`traceview.Profile` objects or paths. ``rules``: user op
    families (``["name=regex"]`` or a rules file), usable by name in ``family`` checks.
    Raises the errors of :func:`traceview.load` for bad paths and UsageError for bad rules.
    """

    def __init__(self, treatment, base=None, *, rules=None):
        from .diff import _as_profile
        from .steps import _rules

        self.treatment = _as_profile(treatment)
        self.base = _as_profile(base) if base is not None else None
        self.rules = rules
        self.user_families = [r.name for r in _rules(rules)]
        self._diff = None

    # -- helpers --------------------------------------------------------------------------
    def _prof(self, side: str):
        return self.base if side == "base" else self.treatment

    def _df(self, prof) -> pl.DataFrame:
        from .diff import prepare

        return prepare(prof, self.rules)

    def _diff_result(self):
        from .diff import diff

        if self._diff is None:
            self._diff = diff(self.base, self.treatment, rules=self.rules, labels=("base", "treatment"))
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
            pl.col("module").unique().sort().alias("mods")).sort(["t", "op_name"], descending=[True, False])
        parts = []
        for r in g.head(n).iter_rows(named=True):
            share = f", {100 * r['t'] / total_self:.1f}% of op time" if total_self else ""
            mods = ", ".join(m for m in r["mods"] if m)
            parts.append(f"{r['op_name']} {_short(r['shape'])} ×{r['occ']:,}" + (f" in {mods}" if mods else "")
                         + f" ({_fmt_t(r['t'])}{share})")
        more = f"; +{g.height - n} more populations" if g.height > n else ""
        return "; ".join(parts) + more

    def _kernels(self, prof, glob: str) -> pl.DataFrame:
        from .diff import kernel_table

        kt = kernel_table(prof)
        return kt.filter(pl.col("kernel").map_elements(lambda k: fnmatch.fnmatchcase(k, glob), return_dtype=pl.Boolean))

    @staticmethod
    def _kernel_list(prof) -> str:
        from .diff import kernel_table

        names = kernel_table(prof)["kernel"].to_list()
        return ", ".join(names[:6]) + (f" +{len(names) - 6}" if len(names) > 6 else "") if names else "none"

    # -- evaluation -----------------------------------------------------------------------
    def check(self, check: Check | str) -> CheckResult:
        """Evaluate one check (text or parsed). Raises UsageError for a diff check without a
        base profile or an unknown family name."""
        c = parse_check(check) if isinstance(check, str) else check
        if (c.needs_base or c.side == "base") and self.base is None:
            raise UsageError(f"check {c.text!r} needs two profiles (BASE and TREATMENT)")
        fn = getattr(self, f"_c_{c.kind}")
        ok, msg = fn(c, self._prof(c.side)) if not c.needs_base else fn(c)
        return CheckResult(c.text, ok, msg)

    def run(self, checks) -> VerifyReport:
        """Evaluate every check (strings or :class:`Check`) in order; returns a :class:`VerifyReport`."""
        parsed = [parse_check(x) if isinstance(x, str) else x for x in checks]
        return VerifyReport([self.check(c) for c in parsed])

    # single-profile checks: (check, profile) -> (ok, message)
    def _presence(self, c: Check, prof, mask: pl.Expr, what: str, one: str) -> tuple[bool, str]:
        """``what``: plural verb phrase ("match"), ``one``: singular ("matches")."""
        df = self._df(prof)
        hit = df.filter(mask)
        total = int(df["self_ps"].sum() or 0)
        if c.args["want"] == "absent":
            if hit.height == 0:
                return True, f"no op {one} /{c.args['rx']}/ among {df.height:,} op events"
            return False, (f"{hit['count'].sum():,} op event(s) {what} /{c.args['rx']}/ "
                           f"({_fmt_t(hit['self_ps'].sum())}, {100 * (hit['self_ps'].sum() or 0) / total:.1f}% of op "
                           f"time); expected none. {self._describe(hit, total)}" if total else
                           f"{hit['count'].sum():,} op event(s) {what} /{c.args['rx']}/. {self._describe(hit, total)}")
        if hit.height:
            return True, f"{hit['count'].sum():,} op event(s) {what} /{c.args['rx']}/: {self._describe(hit, total, 2)}"
        return False, f"no op {one} /{c.args['rx']}/ among {df.height:,} op events; expected at least one"

    def _c_op(self, c, prof):
        return self._presence(c, prof, self._op_mask(c.args["rx"]), "match", "matches")

    def _c_op_file(self, c, prof):
        return self._presence(c, prof, self._file_mask(c.args["rx"]), "come from a file matching",
                              "comes from a file matching")

    def _c_count(self, c, prof):
        from . import aggregate

        df = self._df(prof).filter(self._op_mask(c.args["rx"]))
        cmp_, n = c.args["cmp"], c.args["n"]
        f = CMPS[cmp_]
        if df.height == 0:
            if f(0, n):
                return True, f"no op matches /{c.args['rx']}/: occurrences 0 {cmp_} {n:g}"
            return False, f"no op matches /{c.args['rx']}/: occurrences 0, bound {cmp_} {n:g}"
        if not c.args["per_execution"]:
            occ = int(df["count"].sum())
            if f(occ, n):
                return True, f"{occ:,} occurrences {cmp_} {n:g}"
            return False, f"{occ:,} occurrences of ops matching /{c.args['rx']}/, bound {cmp_} {n:g}: " \
                          f"{self._describe(df, int(self._df(prof)['self_ps'].sum() or 0))}"
        chk = aggregate.occurrence_checks(df.select(list(prof.ops.columns)), prof.module_runs)
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
        return False, "; ".join(parts) + (f"; +{len(bad) - 5} more" if len(bad) > 5 else "")

    def _resolve_family(self, name: str) -> str:
        from .steps import FAMILIES

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
        if CMPS[cmp_](share, bound):
            return True, msg
        return False, msg + (f"; largest: {self._describe(self._kernel_aware(sel), total, 3)}" if sel.height else "")

    @staticmethod
    def _kernel_aware(sel: pl.DataFrame) -> pl.DataFrame:
        """Ops of a named kernel shown under the kernel's name (its many inner ops are one thing)."""
        return sel.with_columns(
            pl.when(pl.col("kname").is_not_null()).then(pl.col("kname")).otherwise(pl.col("op_name")).alias("op_name"),
            pl.when(pl.col("kname").is_not_null()).then(pl.lit("(kernel)")).otherwise(pl.col("shape")).alias("shape"))

    def _c_kernel_present(self, c, prof):
        k = self._kernels(prof, c.args["glob"])
        if c.args["want"] == "present":
            if k.height:
                return True, f"kernel(s) {', '.join(k['kernel'].to_list())} ({int(k['invocations'].sum()):,} invocations)"
            return False, f"no kernel named like {c.args['glob']!r}; kernels found: {self._kernel_list(prof)}"
        if k.height == 0:
            return True, f"no kernel named like {c.args['glob']!r}"
        return False, "; ".join(f"{r['kernel']} ran {r['invocations']:,} times in {', '.join(r['modules'])} "
                                f"({_fmt_t(r['self_ps'])})" for r in k.iter_rows(named=True)) + "; bound: absent"

    @staticmethod
    def _value_ok(actual, expected: str) -> bool:
        if isinstance(actual, str):
            return actual.lower() == expected.lower()
        parts = re.split(r"[_,x]", expected)
        try:
            nums = tuple(int(x) for x in parts if x != "")
        except ValueError:
            return False
        if len(nums) == 1:
            return bool(actual) and actual[0] == nums[0]
        return tuple(actual) == nums

    def _c_kernel_has(self, c, prof):
        from .diff import format_config_value, kernel_config

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
            elif not self._value_ok(cfg[key], want):
                bad.append(f"{r['kernel']} has {key} {format_config_value(cfg[key])}, expected {want} ({where})")
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
            return False, f"{what}: {sel.height:,} op event(s), none with a recorded source; bound: under {c.args['path']}"
        files = with_src.group_by("src_file").agg(pl.col("count").sum().alias("n"), pl.col("op_name").first(),
                                                  pl.col("shape").first()).sort("n", descending=True)
        outside = [r for r in files.iter_rows(named=True) if not _under(r["src_file"], c.args["path"])]
        if outside:
            return False, f"{what}: " + "; ".join(
                f"{r['n']:,} op event(s) from {r['src_file']} (e.g. {r['op_name']} {_short(r['shape'])})"
                for r in outside[:4]) + f"; bound: under {c.args['path']}"
        return True, f"{what}: {int(with_src['count'].sum()):,} op event(s) from " + ", ".join(files["src_file"].to_list()[:3])

    def _c_source_present(self, c, prof):
        df = self._df(prof)
        path = c.args["path"]
        files = set(df["src_file"].unique().to_list())
        for st in df["source_stack"].fill_null("").unique().to_list():
            from .sources import frames

            files.update(f for f, _ in frames(st))
        hit = sorted(f for f in files if _under(f, path))
        if c.args["want"] == "present":
            if hit:
                return True, f"source under {path}: {', '.join(hit[:3])}"
            return False, f"no op's source file or stack frame is under {path} ({len(files)} source files seen)"
        if not hit:
            return True, f"no source under {path}"
        return False, f"ops come from {', '.join(hit[:4])} (under {path}); bound: absent"

    # diff checks: (check) -> (ok, message)
    def _c_op_diff(self, c, mask=None, what="match", one="matches"):
        rx = c.args["rx"]
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
        from .diff import format_config_value, kernel_config

        glob, key = c.args["glob"], c.args["key"]
        kb, kt = self._kernels(self.base, glob), self._kernels(self.treatment, glob)
        if kb.height == 0 or kt.height == 0:
            return False, (f"kernel named like {glob!r} missing in the {'base' if kb.height == 0 else 'treatment'}; "
                           f"base kernels: {self._kernel_list(self.base)}; treatment kernels: "
                           f"{self._kernel_list(self.treatment)}")
        vb = {format_config_value(kernel_config(k).get(key, "-")) for k in kb["kernel"].to_list()}
        vt = {format_config_value(kernel_config(k).get(key, "-")) for k in kt["kernel"].to_list()}
        desc = f"{key} {', '.join(sorted(vb))} -> {', '.join(sorted(vt))} ({', '.join(kb['kernel'])} -> {', '.join(kt['kernel'])})"
        if vb == vt:
            return False, f"{key} unchanged: {desc}"
        a, b = c.args["a"], c.args["b"]
        if a is not None:
            okb = all(self._value_ok(kernel_config(k).get(key, ""), a) for k in kb["kernel"].to_list())
            okt = all(self._value_ok(kernel_config(k).get(key, ""), b) for k in kt["kernel"].to_list())
            if not (okb and okt):
                return False, f"{desc}; expected {key} {a} -> {b}"
        return True, desc

    def _c_kernel_source_changed(self, c):
        glob = c.args["glob"]
        fb = sorted(set(self._ops_of(self.base, glob, None)["src_file"].to_list()) - {""})
        ft = sorted(set(self._ops_of(self.treatment, glob, None)["src_file"].to_list()) - {""})
        if not fb or not ft:
            return False, f"kernel {glob!r}: no source recorded in the {'base' if not fb else 'treatment'}"
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


def verify(treatment, checks, *, base=None, rules=None) -> VerifyReport:
    """Evaluate ``checks`` (strings or :class:`Check`) on ``treatment`` (and ``base`` for diff
    checks). Profiles or paths. Raises UsageError for an invalid check (before evaluating
    any) and the errors of :func:`traceview.load` for bad paths."""
    parsed = [parse_check(x) if isinstance(x, str) else x for x in checks]
    if not parsed:
        raise UsageError("no checks given")
    v = Verifier(treatment, base, rules=rules)
    for c in parsed:  # usage errors before any evaluation
        if (c.needs_base or c.side == "base") and v.base is None:
            raise UsageError(f"check {c.text!r} needs two profiles (BASE and TREATMENT)")
        if c.kind == "family_share" and c.args["name"] is not None:
            v._resolve_family(c.args["name"])
    return v.run(parsed)


def report_json(report: VerifyReport) -> str:
    return json.dumps(report.to_dict(), indent=2)
