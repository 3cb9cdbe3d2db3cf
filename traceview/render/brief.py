"""``traceview analyze --brief``: one screen of a :class:`~traceview.analysis.report.Report`
(what was read and why, the step time, the top op families, the top three findings by impact)
for the terminal, and the same as a small JSON object (:func:`brief_payload`).

Every line is cut to the console's width (paths and reasons in the middle, prose at the end),
so the summary is at most :data:`MAX_LINES` lines at any width; trace strings are printed as
plain text (:func:`~traceview.render.terminal.plain`), never parsed as markup.
"""

from __future__ import annotations

import re

from rich.cells import cell_len
from rich.text import Text

from traceview.model.units import fmt_pct, fmt_time_ps
from traceview.render.foldtable import _take, cut_end, cut_middle

#: families and findings the summary shows
FAMILIES, FINDINGS = 5, 3

#: the most lines :func:`render_brief` prints
MAX_LINES = 26

_HOW = {"markers": "step markers", "trace": "the whole trace as one step"}
_SEVERITY = {"high": "red", "medium": "yellow", "info": "cyan"}
_BAR = 20  # cells of a family's share bar at 100%


_PATH = re.compile(r"(?<![\w.])/[^\s:,;()\[\]]+/([^\s:,;()\[\]/]+)")


def _short_paths(text: str) -> str:
    """``text`` with each absolute path written as "…/" and its last part."""
    return _PATH.sub(lambda m: "…/" + m.group(1), text)


def _step_how(anat) -> str:
    return f"executions of {anat.module}" if anat.method == "module" else _HOW.get(anat.method, anat.method)


def selection_reasons(discovery, hosts: int = 1) -> list[str]:
    """The discovery's lines saying which run and file were chosen and why: the run's (or the
    file given) and the first ``hosts`` hosts' file choices."""
    if discovery is None:
        return []
    run = [r for r in discovery.reasons if r.startswith("reading ")][:1]
    host = [r for r in discovery.reasons if r.startswith("host ") and not r.endswith(": the only file for this host")]
    return run + host[:hosts] + ([f"… {len(host) - hosts} more hosts"] if len(host) > hosts else [])


def brief_lines(rep, *, families: int = FAMILIES, findings: int = FINDINGS) -> list[list[tuple[str, str | None]]]:
    """The summary as lines of (plain text, rich style or None) parts, uncut: the last part of a
    line is the one :func:`render_brief` cuts to the width (a part styled "cut-middle" is cut in
    the middle). Trace strings are :func:`~traceview.render.terminal.plain`."""
    from traceview.render.terminal import plain

    out = [[("traceview — brief", "bold"), (" (every section and table: traceview analyze without --brief)", "dim")]]
    files = rep.files or []
    if len(files) == 1:
        f = files[0]
        name = plain(f["path"]).rpartition("/")[2]
        out.append([("  read     ", "bold"), (f"{name} [{f['format']}, {f['events']:,} events, {f['op_events']:,} op "
                                             f"events]", "cut-middle")])
    else:
        n_ev = sum(f["op_events"] for f in files)
        names = ", ".join(plain(f["path"].rsplit("/", 1)[-1]) for f in files)
        out.append([("  read     ", "bold"), (f"{len(files)} files, {n_ev:,} op events: ", None), (names, "cut-middle")])
    for i, r in enumerate(selection_reasons(rep.discovery)):
        out.append([("  why      " if i == 0 else "           ", "bold"), (_short_paths(plain(r)), "wrap")])
    groups = []
    for g in rep.device_groups.iter_rows(named=True):
        names = [plain(n) for n in g["device"] or []]
        shown = ", ".join(names) if len(names) <= 2 else f"{names[0]} … {names[-1]}"
        groups.append(f"{plain(g['device_type'])} ×{g['n']}: {g['ops']:,} op events, op time "
                      f"{fmt_time_ps(g['op_time_ps'])} ({shown})")
    out.append([("  devices  ", "bold"), ("; ".join(groups) if groups else "no device with ops", "cut-middle")])
    if getattr(rep, "events_note", None):  # why fewer op events than read: as the full output says
        out.append([("           ", None), (plain(rep.events_note), None)])
    if rep.warnings:
        more = f" (+{len(rep.warnings) - 1} more)" if len(rep.warnings) > 1 else ""
        out.append([("  warning  ", "yellow"), (_short_paths(plain(rep.warnings[0])) + more, "cut-middle")])

    out.append([])
    anat = rep.steps
    dist = (anat.distribution or {}) if anat is not None else {}
    if dist.get("median_ps") is not None:
        ms = 1e-9
        out.append([("step time ", "bold"),
                    (f"median {dist['median_ps'] * ms:.3f} ms, p10–p90 {dist['p10_ps'] * ms:.3f}–"
                     f"{dist['p90_ps'] * ms:.3f} ms, {dist['n_window']:,} of {dist['n']:,} device-steps (window "
                     f"{plain(dist.get('window') or anat.window)}); steps are {plain(_step_how(anat))}", "wrap")])
    else:
        none = (f"unknown: {plain(rep.ops_note)}" if getattr(rep, "ops_note", None) else "unknown: no steps found")
        out.append([("step time ", "bold"), (none if anat is None or anat.steps.height == 0
                                             else f"unknown: no steps in window {plain(anat.window)}", None)])

    fams = anat.families if anat is not None else None
    if fams is not None and fams.height:
        out.append([])
        out.append([("top families", "bold"), (f" (time per step, share of the step; {fams.height} in all)", None)])
        shown = fams.head(families)
        width = max(len(plain(f)) for f in shown["family"])
        for r in shown.iter_rows(named=True):
            share = r["share"] or 0.0
            bar = "█" * max(0, min(_BAR, round(share * _BAR)))
            out.append([(f"  {plain(r['family']).ljust(width)}  {fmt_time_ps(r['self_ps']):>10}  "
                         f"{fmt_pct(r['share']):>6}  ", None), (bar, "cyan")])

    out.append([])
    found = getattr(rep, "findings", None)
    if found is None:
        out.append([("findings", "bold"), (": not computed (--no-findings)", None)])
    elif not found:
        from traceview.render.findings import none_line

        out.append([("findings", "bold"), (": " + plain(none_line(getattr(rep, "findings_not_evaluated", None))), None)])
    else:
        out.append([("findings", "bold"),
                    (f" — top {min(findings, len(found))} of {len(found)} by the step time a change could recover", None)])
        from traceview.analysis.findings.impact import impact_line

        for i, f in enumerate(found[:findings], 1):
            out.append([(f"  {i}. ", None), (f.severity, _SEVERITY.get(f.severity)), (" ", None),
                        (plain(f.id), "bold"), (": " + plain(f.statement), None)])
            imp = getattr(f, "impact", None)
            line = impact_line({**imp, "inputs": {}}) if imp else "unknown"
            out.append([("     impact: ", "dim"), (plain(line), "dim")])
    return out


def render_brief(console, rep, *, top: int | None = None) -> None:
    """Print the summary (:func:`brief_lines`; ``top``: families shown, default
    :data:`FAMILIES`), every line cut to ``console.width``: a part styled "cut-middle" in the
    middle, "wrap" onto a second line (indented) before its end is cut, any other at its end."""
    width = console.width
    for parts in brief_lines(rep, families=top or FAMILIES):
        lines = [Text(no_wrap=True, overflow="ignore")]
        used = 0
        for s, style in parts:
            room = width - used
            if style == "wrap" and cell_len(s) > room and room > 10:
                head = s[:room] if s.isascii() else _take(s, room)
                cut = (s[:room + 1] if s.isascii() else head + s[len(head):len(head) + 1]).rfind(" ")
                cut = cut if cut > room // 2 else len(head)
                lines[-1].append(s[:cut])
                lines.append(Text(" " * used + cut_end(s[cut:].lstrip(), room), no_wrap=True, overflow="ignore"))
                used = width
                continue
            if style == "cut-middle":
                s, style = cut_middle(s, room), None
            elif style == "wrap":
                s, style = cut_end(s, room), None
            else:
                s = cut_end(s, room)
            lines[-1].append(s, style=style)
            used += cell_len(s)
        for text in lines:
            console.print(text, soft_wrap=False, highlight=False)


def brief_payload(rep, *, version: str, families: int = FAMILIES, findings: int = FINDINGS) -> dict:
    """``analyze --brief --format json``: traceview (version), brief (true), read (files,
    reasons for the choice, runs), warnings, devices (per kind: n, device names, op events,
    op time in ps), steps (method, module, window, distribution in ps, summary line),
    families (the top ``families`` rows of the step's families; families_total), findings
    (the top ``findings`` by impact, as the full JSON's; findings_total; None with
    --no-findings), findings_not_evaluated ({id: reason} of the rules that could not run)."""
    from traceview.render.provenance import run_names

    anat = rep.steps
    fams = anat.families if anat is not None else None
    found = getattr(rep, "findings", None)
    return {
        "traceview": version, "brief": True,
        "read": {"files": rep.files, "reasons": selection_reasons(rep.discovery, hosts=1 << 30),
                 "runs": run_names(rep.discovery)},
        "warnings": list(rep.warnings),
        "devices": rep.device_groups.select("kind", "device_type", "n", "device", "ops", "op_time_ps"),
        "events_note": getattr(rep, "events_note", None),
        "steps": None if anat is None else {"method": anat.method, "module": anat.module, "window": anat.window,
                                            "distribution": anat.distribution, "summary": anat.summary()},
        "families": None if fams is None else fams.head(families),
        "families_total": 0 if fams is None else fams.height,
        "findings": None if found is None else [f.to_dict() for f in found[:findings]],
        "findings_total": None if found is None else len(found),
        "findings_not_evaluated": None if found is None else dict(getattr(rep, "findings_not_evaluated", None) or {}),
    }


def brief_json(rep, *, version: str) -> bytes:
    """:func:`brief_payload` as indented JSON (UTF-8) with a final newline."""
    from traceview.render.json import dumps_bytes

    return dumps_bytes(brief_payload(rep, version=version))
