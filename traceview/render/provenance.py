"""What was read and why, as plain-text lines (shared by the terminal, JSON and HTML outputs)."""

from __future__ import annotations


def provenance_lines(discovery, files: list[dict]) -> list[str]:
    """One plain-text line each: the discovery's reasons (run, hosts, files and why), else
    one "read" line per file; then per file its host, path, format, events and op events.
    ``files``: :func:`traceview.analysis.report.file_rows`."""
    lines = []
    if discovery is not None:
        lines.extend(discovery.reasons)
    else:
        for f in files:
            lines.append(f"read {f['path']} (host {f['host']})")
    for f in files:
        lines.append(f"  {f['host']}: {f['path']} [{f['format']}, {f['events']:,} events, {f['op_events']:,} op events]")
    return lines


def run_names(discovery) -> list[str]:
    """The names of the runs read (none without a discovery)."""
    return [r.name for r in discovery.selected] if discovery is not None else []
