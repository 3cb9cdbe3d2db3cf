"""Findings (:mod:`traceview.analysis.findings`) as terminal lines and as template rows;
every string is escaped for its target (terminal: :func:`~traceview.render.terminal.escape`;
HTML: the template's autoescape)."""

from __future__ import annotations

from traceview.analysis.findings.impact import impact_line


#: rows of a list shown in an evidence table (the rest counted), items of a scalar list
EVIDENCE_ROWS = 12


def evidence_value(key: str, v) -> str:
    """One evidence value as text, by its key's unit: ``*_ps`` a time, ``*share*`` /
    ``*_frac*`` a percentage, ``*bytes*`` bytes, ``*_bw`` B/s, ``peak_flops`` /
    ``achieved_flops`` FLOP/s, other floats to 4 significant digits; a list
    of scalars joined (the first :data:`EVIDENCE_ROWS`, the rest counted); a dict as
    ``key: value`` pairs."""
    from traceview.model.units import fmt_bytes, fmt_pct, fmt_rate, fmt_time_ps

    k = str(key).lower()
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, (int, float)):
        if k.endswith("_ps") or k == "ps":
            return fmt_time_ps(v)
        if "share" in k or "frac" in k:
            return fmt_pct(v)
        if "bytes" in k:
            return fmt_bytes(v)
        if k.endswith("_bw") or k == "bw":
            return fmt_rate(v, "B/s")
        if k in ("peak_flops", "achieved_flops", "flops_per_s"):
            return fmt_rate(v, "FLOP/s")
        return f"{v:,}" if isinstance(v, int) else f"{v:.4g}"
    if isinstance(v, dict):
        return "; ".join(f"{kk}: {evidence_value(kk, vv)}" for kk, vv in v.items())
    if isinstance(v, (list, tuple)):
        items = [evidence_value(key, x) for x in v[:EVIDENCE_ROWS]]
        return ", ".join(items) + (f", … +{len(v) - EVIDENCE_ROWS} more" if len(v) > EVIDENCE_ROWS else "")
    return str(v)


#: evidence key endings shown as words (the value's unit is in its formatting already)
_KEY_ENDINGS = (("_ps", ""), ("_bw", " bandwidth"), ("_frac", " fraction"))


def evidence_label(key: str) -> str:
    """An evidence key (a JSON field: ``share_of_op_time``, ``self_ps``, ``p50_ps``) as a
    header in words (``share of op time``, ``self``, ``p50``): a unit ending dropped or
    spelt out (:data:`_KEY_ENDINGS`), underscores as spaces. The JSON keeps the key."""
    k = str(key)
    for end, word in _KEY_ENDINGS:
        if k.endswith(end) and len(k) > len(end):
            k = k[: -len(end)] + word
            break
    return k.replace("_", " ").strip() or str(key)


def evidence_table(evidence) -> list[dict]:
    """A finding's evidence as table rows: ``{"key", "label", "value"}`` for a scalar (text by
    :func:`evidence_value`), ``{"key", "label", "columns", "labels", "rows", "more"}`` for a
    list of dicts (a nested table of its first :data:`EVIDENCE_ROWS` rows, ``more`` the rest);
    ``label`` / ``labels``: the keys in words (:func:`evidence_label`)."""
    out = []
    for key, v in (evidence or {}).items():
        if isinstance(v, (list, tuple)) and v and all(isinstance(x, dict) for x in v):
            cols = list(dict.fromkeys(c for x in v for c in x))
            out.append({"key": str(key), "label": evidence_label(key), "columns": cols,
                        "labels": [evidence_label(c) for c in cols],
                        "rows": [[evidence_value(c, x.get(c)) for c in cols] for x in v[:EVIDENCE_ROWS]],
                        "more": max(0, len(v) - EVIDENCE_ROWS)})
        else:
            out.append({"key": str(key), "label": evidence_label(key), "value": evidence_value(key, v)})
    return out


def finding_rows(findings) -> list[dict]:
    """Template rows: id, severity, statement, why, next_step, verify_hint, doc, impact (its
    line), share_high (the impact's upper share, None when unknown), evidence
    (:func:`evidence_table`), export_command (the command that exports the finding's step,
    when the finding carries one; "" otherwise)."""
    out = []
    for f in findings or []:
        imp = getattr(f, "impact", None) or {}
        out.append({"id": f.id, "severity": f.severity, "statement": f.statement, "why": f.why,
                    "next_step": f.next_step, "verify_hint": f.verify_hint,
                    "doc": getattr(f, "doc", ""), "impact": impact_line(getattr(f, "impact", None)),
                    "share_high": imp.get("share_high"), "method": imp.get("method") or "unknown",
                    "evidence": evidence_table(f.evidence),
                    "export_command": getattr(f, "export_command", "") or ""})
    return out


def not_evaluated_line(skipped: dict | None) -> str:
    """``id, id (reason); id (reason)``: the rules that could not run, grouped by reason; ""
    when none."""
    by: dict = {}
    for fid, why in (skipped or {}).items():
        by.setdefault(why, []).append(fid)
    return "; ".join(f"{', '.join(ids)} ({why})" for why, ids in by.items())


def none_line(not_evaluated) -> str:
    """What "no finding" means: no rule found its evidence, or which rules could not run."""
    skipped = not_evaluated_line(not_evaluated)
    if not skipped:
        return "none (no rule found its evidence in this trace)"
    return f"none among the rules that could run; not evaluated: {skipped}"


def render_findings(console, findings, not_evaluated=None) -> None:
    """Print the findings section (nothing when ``findings`` is None: --no-findings), with one
    line naming the rules that could not run (``not_evaluated``: {id: reason})."""
    from traceview.render.terminal import escape

    if findings is None:
        return
    console.print()
    if not findings:
        console.print(f"[bold]findings[/bold]: {escape(none_line(not_evaluated))}")
        return
    console.print(f"[bold]findings[/bold] ({len(findings)}, ranked by the step time a change could recover; ids for "
                  "`traceview verify --check 'no finding ID'`):")
    colour = {"high": "red", "medium": "yellow", "info": "cyan"}
    for f in findings:
        console.print(f"  [{colour.get(f.severity, 'white')}]{f.severity}[/] [bold]{escape(f.id)}[/bold]: "
                      f"{escape(f.statement)}")
        imp = impact_line(getattr(f, "impact", None))
        if imp:
            console.print(f"      impact: {escape(imp)}")
        console.print(f"      why: {escape(f.why)}")
        console.print(f"      next: {escape(f.next_step)}")
        if f.verify_hint:
            console.print(f"      verify: {escape(f.verify_hint)}")
        if getattr(f, "export_command", ""):
            console.print(f"      timeline: {escape(f.export_command)}")
        if getattr(f, "doc", ""):
            console.print(f"      more: {escape(f.doc)}")
    skipped = not_evaluated_line(not_evaluated)
    if skipped:
        console.print(f"  [dim]not evaluated: {escape(skipped)}[/dim]")
