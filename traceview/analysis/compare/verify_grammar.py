"""The grammar of ``traceview verify`` checks: one line of text to a :class:`Check`.

A treatment is only a treatment once the trace shows it took effect: the kernel's name
carries the new block size, the sampler's ops are gone, the transplanted kernel's ops come
from the new file. Each check below is one line and comes out PASS, FAIL or UNKNOWN (the trace
lacks what the check needs: :mod:`traceview.analysis.compare.verify`); ``traceview verify``
exits 0 when every check passes and 1 (:data:`traceview.errors.EXIT_CHECK_FAILED`) otherwise,
printing one reason per failed or unknown check that names the op, its shape, the measured
figure and the bound. A check that does not parse raises :class:`~traceview.errors.UsageError`
(exit 2) with a one-line message.

Grammar
-------
Keywords are case-insensitive; ``[...]`` is optional; ``RX`` is a Python regular expression
(``re.search``), ``GLOB`` a shell pattern on the full kernel name (``fnmatch``, case
sensitive), ``PATH`` a path or path prefix. A token with spaces can be quoted with ``"`` or
``'`` (no escapes inside quotes, so ``\\d`` stays as written). A word starting with ``#``
outside quotes starts a comment to the end of the line (``op matching x present  # note``;
quote a regex that starts with ``#``); blank lines and comment lines are skipped.

Single-profile checks (on the treatment when two profiles are given; prefix ``base:`` to
check the base instead)::

    no op [matching] RX                 no op's name, framework op (JAX name stack), kernel name or
                                        HLO text without instruction names matches RX
    op [matching] RX present|absent
    no op from file [matching] RX       no op's source file or any frame of its stack matches RX
                                        (unknown when no op has a recorded source)
    op from file [matching] RX present|absent
    op [matching] RX count CMP N [per execution]
                                        occurrences of the matching ops (summed), or with
                                        "per execution" every matching (op, shape) population's
                                        occurrences per execution of its program
    family NAME share CMP PCT           NAME: a default family of traceview.analysis.steps.anatomy (a unique
                                        prefix such as "attention" is enough) or a user family
    family matching RX share CMP PCT    ad-hoc family: ops whose name, HLO text, framework op,
                                        kernel name or source file matches RX
    kernel GLOB present|absent
    kernel GLOB has KEY VALUE           every kernel named like GLOB has KEY = VALUE (read off
                                        its name: see traceview.model.kernelname.kernel_config)
    source of kernel GLOB under PATH    every op of those kernels with a source comes from PATH
    source of op [matching] RX under PATH
    source PATH present|absent          some op's source file or stack frame is under PATH
    collective KIND bytes|sent|group CMP N
                                        every collective population of KIND (all-reduce, all-gather,
                                        reduce-scatter, all-to-all, collective-permute, ...; async
                                        halves count as their kind) has its data size S ("bytes",
                                        the nccl-tests size), bytes each participant sends ("sent")
                                        or group size CMP N (traceview.analysis.communication.collectives); none
                                        of KIND fails
    exposed communication share CMP PCT exposed communication over step time, summed over the
                                        steps and devices (traceview.analysis.communication.overlap; a synchronous
                                        collective counts exposed)
    straggler lead CMP PCT              the largest per-step lead of the slowest device's busy time
                                        over the median device's (traceview.analysis.communication.stragglers);
                                        not a share: PCT may exceed 100% (``straggler lead < 200%``);
                                        unknown when no collective was matched across devices
    memory peak CMP BYTES               the largest peak in use of any allocator (heap + stack,
                                        traceview.analysis.memory.allocators); BYTES: 12GiB, "12 GiB", 500MB,
                                        or a number of bytes (never negative); unknown without
                                        allocator events
    memory growth per step CMP PCT      the largest growth per steady step of bytes in use at the
                                        steps' ends over their mean; unknown when no allocator
                                        has it
    no finding ID                       the findings (traceview.analysis.findings) do not include ID;
                                        unknown when ID's rule could not run on the trace
                                        (``Report.findings_not_evaluated``)
    finding ID [present|absent]         ... include it (ID: one of traceview.analysis.findings.IDS)
    finding ID impact CMP PCT           the share of the step the finding's change could recover
                                        (traceview.analysis.findings.impact): < and <= compare the
                                        range's upper end, > and >= its lower end; 0 when the finding
                                        does not fire; unknown when its impact is unknown

Diff checks (two profiles, BASE then TREATMENT)::

    op [matching] RX vanished|appeared  present in the base and absent in the treatment, or
                                        the reverse
    op from file [matching] RX vanished|appeared
    kernel GLOB changed KEY [A -> B]    the KEY of the kernels named like GLOB differs between
                                        the sides (and is A in the base, B in the treatment)
    source of kernel GLOB changed       the kernels' ops come from other source files
    all matched [except RX]             every population of either side has its counterpart
                                        (traceview.analysis.compare.diff), except those whose op names, kernel
                                        names, stem or modules match RX

``CMP`` is one of ``< <= > >= == !=``; ``PCT`` is a percentage (``30%``) or a fraction
(``0.3``; a bare number above 1, ``30``, is refused); ``N`` and ``BYTES`` are never negative; ``VALUE`` is a number (compared with the first number of a ``key_N_M`` part: the
block size), ``N_M`` / ``N,M`` for the whole tuple, or a word (``phase decode``).

Definitions: *share* is the family's self time over the self time of all ops of the profile
(all devices); ops of a named kernel count in ``attention/custom kernels``. *Under PATH*: the
source path equals PATH, starts with it, or contains it after a ``/`` (``my_kernels/`` matches
``/home/me/proj/my_kernels/kernel.py``). The checks that read sources (``op from file``,
``source ...``) are unknown when no op they read has a recorded source (a file or a stack),
in either profile for the diff checks.
"""

from __future__ import annotations

import math

import operator
import re
from dataclasses import dataclass

from traceview.errors import UsageError
from traceview.model.profiledata import check_regex

CMPS = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge, "==": operator.eq, "!=": operator.ne}
_TOKEN = re.compile(r'"([^"]*)"|\'([^\']*)\'|(\S+)')


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

def strip_comment(text: str) -> str:
    """``text`` up to its comment: the first unquoted word starting with ``#`` and what follows."""
    for m in _TOKEN.finditer(text):
        if m.group(3) is not None and m.group(3).startswith("#"):
            return text[:m.start()].rstrip()
    return text


def tokenize(text: str) -> list[str]:
    """Split a check into tokens: whitespace-separated, ``"..."``/``'...'`` quoted (kept
    verbatim). Raises :class:`UsageError` on a quote that is never closed."""
    out = []
    for m in _TOKEN.finditer(text):
        tok = next(g for g in m.groups() if g is not None)
        if m.group(3) is not None and tok[:1] in ("'", '"'):
            raise UsageError(f"invalid check {text.strip()!r}: the quote {tok[0]} before {tok[1:]!r} is never closed")
        out.append(tok)
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
    """A share: ``30%`` or the fraction ``0.3``, between 0 and 100% (a bare number above 1, such
    as ``10``, is refused: 10% or 0.1?)."""
    s = p.word("percentage")
    try:
        v = float(s[:-1]) / 100 if s.endswith("%") else float(s)
    except ValueError:
        p.err(f"expected a percentage such as 30% or 0.3, got {s!r}")
    if not s.endswith("%") and v > 1:
        p.err(f"{s!r} is not a share: write {s}% for a percentage, or {v / 100:g} as a fraction (0 to 1)")
    if not 0 <= v <= 1:
        p.err(f"a share lies between 0% and 100%, got {s!r}")
    return v


def _lead(p: _P) -> float:
    """A straggler lead: ``20%``, ``250%`` or a fraction up to 1 (``0.2``), never negative. Not a
    share: the slowest device's busy time can be any multiple of the median's, so a lead over
    100% is a real figure; a bare number above 1 is refused (``20``: 20% or 2000%?)."""
    s = p.word("percentage")
    try:
        v = float(s[:-1]) / 100 if s.endswith("%") else float(s)
    except ValueError:
        p.err(f"expected a percentage such as 20% or 0.2, got {s!r}")
    if not math.isfinite(v) or v < 0:
        p.err(f"a lead is a finite percentage, 0% or more (it may exceed 100%), got {s!r}")
    if not s.endswith("%") and v > 1:
        p.err(f"{s!r} is ambiguous: write {s}% for a percentage, or {v / 100:g} as a fraction (a lead over 100% "
              "is written with its %)")
    return v


def _growth(p: _P) -> float:
    """A growth per step: ``1%``, ``-0.5%`` or a fraction under 1 in size (``0.01``); a bare number
    of 1 or more is refused (1% or 1.0?); may be negative or over 100% with its ``%``."""
    s = p.word("percentage")
    try:
        v = float(s[:-1]) / 100 if s.endswith("%") else float(s)
    except ValueError:
        p.err(f"expected a growth such as 1% or 0.01, got {s!r}")
    if not math.isfinite(v):
        p.err(f"expected a finite growth, got {s!r}")
    if not s.endswith("%") and abs(v) >= 1:
        p.err(f"{s!r} is ambiguous: write {s}% for a percentage, or a fraction under 1")
    return v


def _int(p: _P, what: str = "number") -> float:
    """A bound: a finite number, not negative (``nan`` and ``inf`` are refused: nothing
    compares with NaN; counts, byte sizes and group sizes are never below 0). ``what`` names
    it in the message."""
    s = p.word(what)
    try:
        v = float(s)
    except ValueError:
        p.err(f"expected a number, got {s!r}")
    if not math.isfinite(v):
        p.err(f"expected a finite number, got {s!r}")
    if v < 0:
        p.err(f"{what} {s!r} is negative: it is 0 or more")
    return v


_UNITS = {"": 1, "b": 1, "kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12, "kib": 1 << 10, "mib": 1 << 20,
          "gib": 1 << 30, "tib": 1 << 40}
_BYTES = re.compile(r"^([0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)\s*([a-z]*)$", re.IGNORECASE)


def _bytes(p: _P) -> float:
    """A byte count: ``12GiB``, ``12 GiB`` (two words), ``500MB`` or a bare number (bytes);
    KB/MB/GB/TB are powers of 1000, KiB/MiB/GiB/TiB of 1024. A negative one is refused."""
    s = p.word("byte count")
    if s.startswith("-"):  # a size is never below 0: "< -1GiB" would hold of nothing
        p.err(f"byte count {s!r} is negative: it is 0 or more (12GiB, 500MB)")
    m = _BYTES.match(s)
    if m and not m.group(2) and (p.peek() or "").lower() in _UNITS and p.peek():
        s += p.word("unit")
        m = _BYTES.match(s)
    if not m or m.group(2).lower() not in _UNITS:
        p.err(f"expected a byte count such as 12GiB or 500MB, got {s!r}")
    v = float(m.group(1)) * _UNITS[m.group(2).lower()]
    if not math.isfinite(v):
        p.err(f"expected a finite byte count, got {s!r}")
    return v


def parse_check(text: str) -> Check:
    """Parse one check (grammar in the module doc; a trailing ``# comment`` dropped, also from
    the check's text). Raises UsageError with a one-line message."""
    text = strip_comment(text)
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


def _finding_id(p: _P) -> str:
    from traceview.analysis.findings import IDS

    fid = p.word("finding id")
    if fid not in IDS:
        p.err(f"unknown finding {fid!r}; findings: {', '.join(IDS)}")
    return fid


def _parse_body(p: _P) -> Check:
    if p.kw("no", "finding"):
        return Check("", "finding", {"id": _finding_id(p), "want": "absent"})
    if p.kw("finding"):
        fid = _finding_id(p)
        if p.kw("impact"):
            return Check("", "finding_impact", {"id": fid, "cmp": _cmp(p), "bound": _pct(p)})
        want = (p.peek() or "present").lower()
        if want not in ("present", "absent"):
            p.err(f"expected present, absent or impact after the finding id, got {p.peek()!r}")
        if p.peek() is not None:
            p.i += 1
        return Check("", "finding", {"id": fid, "want": want})
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
            cmp_, n = _cmp(p), _int(p, "occurrence count")
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
    if p.kw("collective"):
        from traceview.model.collective_hlo import COLLECTIVE_KINDS

        kind = p.word("collective kind").lower()
        base = re.sub(r"-(start|done|update)$", "", kind)
        if base not in COLLECTIVE_KINDS:
            p.err(f"unknown collective kind {kind!r}: expected one of {', '.join(COLLECTIVE_KINDS)}")
        what = (p.peek() or "").lower()
        if what not in ("bytes", "sent", "group"):
            p.err(f"expected bytes, sent or group after the collective kind, got {p.peek()!r}")
        p.i += 1
        unit = {"bytes": "byte count", "sent": "byte count", "group": "group size"}[what]
        return Check("", "collective", {"kind": kind, "what": what, "cmp": _cmp(p), "n": _int(p, unit)})
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
    if p.kw("exposed", "communication", "share"):
        return Check("", "exposed_share", {"cmp": _cmp(p), "bound": _pct(p)})
    if p.kw("straggler", "lead"):
        return Check("", "straggler_lead", {"cmp": _cmp(p), "bound": _lead(p)})
    if p.kw("memory", "peak"):
        return Check("", "memory_peak", {"cmp": _cmp(p), "bound": _bytes(p)})
    if p.kw("memory", "growth", "per", "step"):
        return Check("", "memory_growth", {"cmp": _cmp(p), "bound": _growth(p)})
    # a known start without the words that finish it: say which word is missing
    if p.kw("exposed", "communication"):
        p.err("expected 'share' after 'exposed communication' (exposed communication share < 5%)")
    if p.kw("exposed"):
        p.err("expected 'communication share' after 'exposed' (exposed communication share < 5%)")
    if p.kw("straggler"):
        p.err("expected 'lead' after 'straggler' (straggler lead < 10%)")
    if p.kw("memory"):
        p.err("expected 'peak' or 'growth per step' after 'memory' (memory peak < 2 GiB)")
    p.err("unknown check; it should start with 'no op', 'op', 'family', 'kernel', 'source', 'collective', 'finding', "
          "'exposed communication', 'straggler', 'memory' or 'all matched' "
          "(see traceview verify --help)")


def parse_checks(lines) -> list[Check]:
    """Checks from strings, one check each (``--check``). Raises UsageError naming the check's
    position on the first bad one, a blank one or one of only a ``#`` comment included (a
    check given empty is a mistake, not one to skip)."""
    out = []
    for i, line in enumerate(lines, 1):
        s = str(line).strip()
        if not s or not strip_comment(s).strip():
            raise UsageError(f"check {i} is empty" + (" (only a # comment)" if s else ""))
        try:
            out.append(parse_check(s))
        except UsageError as exc:
            raise UsageError(f"check {i}: {exc.fault}") from None
    return out


def read_checks(path) -> list[Check]:
    """Checks from a file, one per line (``#`` comments, blank lines skipped). Raises
    UsageError when the file cannot be read, a line is bad (message names ``file:line``) or
    it holds no check (names the file: a gate of no checks would pass on anything)."""
    from traceview.analysis.rulefiles import config_lines

    out = []
    for where, s in config_lines(path, "checks"):
        try:
            out.append(parse_check(s))
        except UsageError as exc:
            raise UsageError(f"{where}: {exc.fault}") from None
    if not out:
        raise UsageError("holds no check (only blank lines and # comments)", str(path))
    return out
