"""Findings (:mod:`traceview.analysis.findings`) as terminal lines and as template rows;
every string is escaped for its target (terminal: :func:`~traceview.render.terminal.escape`;
HTML: the template's autoescape)."""

from __future__ import annotations

from traceview.analysis.findings.impact import impact_line


def finding_rows(findings) -> list[dict]:
    """Template rows: id, severity, statement, why, next_step, verify_hint, export_command, doc, evidence
    (short JSON text, at most 600 characters)."""
    import json

    out = []
    for f in findings or []:
        ev = json.dumps(f.evidence, default=str)
        out.append({"id": f.id, "severity": f.severity, "statement": f.statement, "why": f.why,
                    "next_step": f.next_step, "verify_hint": f.verify_hint,
                    "export_command": getattr(f, "export_command", ""),  # HTML hook: not shown by the template yet
                    "doc": getattr(f, "doc", ""), "impact": impact_line(getattr(f, "impact", None)),
                    "evidence": ev if len(ev) <= 600 else ev[:600] + "…"})
    return out


def render_findings(console, findings) -> None:
    """Print the findings section (nothing when ``findings`` is None: --no-findings)."""
    from traceview.render.terminal import escape

    if findings is None:
        return
    console.print()
    if not findings:
        console.print("[bold]findings[/bold]: none (no rule found its evidence in this trace)")
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
