"""``traceview mcp --root DIR ...``: serve traceview's tools to an MCP client over stdio
(:mod:`traceview.cli.mcp_server`; needs ``pip install 'traceview[mcp]'``)."""

from __future__ import annotations

from traceview.cli import args as cargs
from traceview.errors import EXIT_OK


def add_parser(sub) -> None:
    m = sub.add_parser("mcp", help="serve traceview's tools to an MCP client (agents) over stdio",
                       description="A Model Context Protocol server over stdio: tools find_traces, analyze, diff, "
                                   "verify, query and describe_schema, each returning the JSON the command line "
                                   "prints. Paths are confined to the roots (symbolic links resolved first). "
                                   "Needs the mcp extra: pip install 'traceview[mcp]'.",
                       epilog="example: claude mcp add traceview -- traceview mcp --root ~/profiles")
    m.add_argument("--root", action="append", metavar="DIR",
                   help="a folder the tools may read (repeatable; default: the current folder); anything "
                        "outside, after resolving symbolic links, is refused; a URL (gs://bucket/logs, "
                        "s3://...) lets the tools read the objects under it")
    m.add_argument("--no-cache", action="store_true",
                   help="neither read nor write the parsed-table and result caches (they live outside the "
                        "profile folders: $TRACEVIEW_CACHE_DIR, default ~/.cache/traceview)")
    cargs.add_query_limits(m)  # each query tool call: a child process under these limits (traceview.cli.sqlguard)


def run(args) -> int:
    """Serves until the client closes standard input; returns 0. UsageError (exit 2) for a
    root that is not a folder or a missing ``mcp`` SDK."""
    from traceview.cli.mcp_server import serve

    serve(args.root or ["."], no_cache=args.no_cache, query_memory=args.query_memory, query_timeout=args.query_timeout)
    return EXIT_OK
