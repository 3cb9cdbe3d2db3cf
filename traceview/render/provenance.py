"""What was read and why, as plain-text lines (shared by the terminal and JSON outputs)."""

from __future__ import annotations


def provenance_lines(prof) -> list[str]:
    """What was read and why: one plain-text line each (run, hosts, files, reasons)."""
    disc = prof.discovery
    lines = []
    if disc is not None:
        lines.extend(disc.reasons)
    else:
        for t in prof.traces:
            lines.append(f"read {t.path} (host {t.host})")
    for t in prof.traces:
        lines.append(f"  {t.host}: {t.path} [{t.format}, {t.n_events:,} events, {t.table.height:,} op events]")
    return lines
