"""The Model Context Protocol server of ``traceview mcp``: traceview's commands as MCP tools
over stdio, built on the official ``mcp`` SDK (``pip install 'traceview[mcp]'``). It is in the
cli layer because it runs the CLI's subcommands.

Tools: ``find_traces`` (what would be read under a path and why), ``analyze`` (``traceview
analyze --format json``, whole or one section), ``diff``, ``verify``, ``query`` (SQL) and
``describe_schema``. Each runs the CLI's own subcommand (:func:`traceview.cli.build_parser`
and the subcommand's ``run``) with JSON output captured, so a tool's result is the JSON the
command line prints for the same arguments: no second implementation.

Confinement: every path (relative ones against the first root) is resolved with
``os.path.realpath`` (symbolic links followed) and must lie under a root given at start-up
(:class:`Roots`); so must every trace file discovery picks under it. Nothing is written
anywhere but the caches (``$TRACEVIEW_CACHE_DIR``, outside any profile folder; none with
``no_cache``). Output is bounded: strings cut at ``max_chars`` (each cut listed under
``"truncated"`` with the full length), and an answer takes at most ``max_bytes`` (an agent's
context): an overview that does not fit keeps its lead tables (:data:`LEAD`) longest and cuts
the other lists first, ``rows`` and ``"paging"`` stating what each holds; ``section=PATH``
with ``offset`` pages through one list, each page stating ``offset``, ``shown``, ``total``,
``remaining`` and ``next_offset`` (:func:`fit`, :func:`page`). Ids (64-bit program ids) are
decimal strings, as in the commands' JSON.
Errors are MCP tool errors carrying one line (traceview's message, or the exception's type and
first line), never a traceback. A tool takes exactly its listed arguments (its input schema says
``additionalProperties: false``): an unknown one is refused, naming it and the tool's arguments;
an argument that is a choice on the command line (``analyze``'s ``by``) takes the choices the
command's own parser declares (:func:`cli_option`), listed as the schema's ``enum``; another
value is refused in traceview's words (as the library refuses it), not the SDK's. So is an
argument that does not fit its schema (a missing one, an integer out of its bounds, an empty
``sql``, no ``checks``: :func:`argument_faults`).
"""

# no "from __future__ import annotations": the SDK reads the tools' annotations, some local to build_server

import bisect
import contextlib
import importlib
import io
import json
import os
import sys
import threading
from typing import Annotated

from traceview.errors import EXIT_CHECK_FAILED, EXIT_OK, TraceviewError, UsageError
from traceview.model.naming import safe_line

#: list items and string characters a tool result keeps (see :func:`bound`)
MAX_ITEMS = 500
MAX_CHARS = 4000

#: bytes of a tool's answer (UTF-8 JSON): what an agent's context takes in one read
MAX_BYTES = 32 * 1024

#: rows of each table the overview asks the command for when ``top`` is not given
OVERVIEW_ROWS = 20

#: one CLI command at a time: standard output is captured per call
_LOCK = threading.Lock()


class PathRefused(UsageError):
    """A tool's path is outside the server's roots, or does not exist."""


class Roots:
    """The folders a server may read: each given folder's real path (symlinks resolved)."""

    def __init__(self, roots: list[str]):
        if not roots:
            raise UsageError("no --root given")
        from traceview.read.remote import is_url, local_path

        self.dirs = []
        self.urls = []  # object-store roots (gs://bucket/logs): a tool's URL must lie under one
        for r in roots:
            if is_url(r) and local_path(r) is None:
                self.urls.append(r.rstrip("/"))
                continue
            r = local_path(r) or r
            real = os.path.realpath(os.path.expanduser(r))
            if not os.path.isdir(real):
                raise UsageError(f"--root {r}: not a folder")
            self.dirs.append(real)

    def inside(self, real: str) -> bool:
        """Whether the real path ``real`` is one of the roots or below one."""
        return any(real == d or real.startswith(d.rstrip(os.sep) + os.sep) for d in self.dirs)

    def resolve(self, path: str) -> str:
        """The real path of ``path`` (relative: to the first root); PathRefused when it is
        outside every root (after resolving symlinks) or does not exist."""
        if not isinstance(path, str) or not path or "\x00" in path:
            raise PathRefused(f"invalid path {path!r}")
        from traceview.read.remote import is_url, local_path

        if (is_url(path) and local_path(path) is None) or not self.dirs:
            return self._resolve_url(path)
        joined = os.path.join(self.dirs[0], os.path.expanduser(local_path(path) or path))
        real = os.path.realpath(joined)
        if not self.inside(real):
            raise PathRefused(f"{path}: outside the server's roots ({', '.join(self.dirs)}); refused")
        if not os.path.exists(real):
            raise PathRefused(f"{path}: no such file or folder")
        return real

    def _resolve_url(self, path: str) -> str:
        """``path`` when it is a URL under a URL root (a relative path: under the first URL root
        when no folder is a root); PathRefused otherwise, and for ``.``/``..`` segments (an
        object store takes them literally; a reader might not)."""
        from traceview.read.remote import is_url

        relative = not is_url(path) and not os.path.isabs(path) and self.urls
        url = path.rstrip("/") if is_url(path) else (self.urls[0] + "/" + path.strip("/") if relative else path)
        if not is_url(url):
            raise PathRefused(f"{path}: outside the server's roots ({', '.join(self.dirs + self.urls)}); refused")
        if any(seg in (".", "..") for seg in url.split("://", 1)[1].split("/")):
            raise PathRefused(f"{path}: '.' and '..' are not allowed in a URL; refused")
        if not any(url == u or url.startswith(u + "/") for u in self.urls):
            raise PathRefused(f"{path}: outside the server's roots ({', '.join(self.dirs + self.urls)}); refused")
        return url

    def check_discovered(self, path: str, run: str | None = None, all_runs: bool = False) -> None:
        """PathRefused when a trace file discovery would read under ``path`` resolves
        outside the roots (a symbolic link inside a root pointing out)."""
        from traceview.read.discover import discover
        from traceview.read.remote import is_url

        if is_url(path):  # confined by resolve(): every object read lies under the URL
            return
        disc = discover(path, run=run, all_runs=all_runs, stale_after_s=None)
        for tf in disc.files:
            if not self.inside(os.path.realpath(tf.path)):
                raise PathRefused(f"{tf.path}: resolves outside the server's roots; refused")


def bound(obj, *, max_items: int = MAX_ITEMS, max_chars: int = MAX_CHARS):
    """(``obj`` with lists cut to ``max_items`` and strings to ``max_chars``, {JSON path:
    full length} of each cut)."""
    cuts: dict = {}

    def walk(o, where):
        if isinstance(o, str):
            if len(o) > max_chars:
                cuts[where] = len(o)
                return o[:max_chars] + "…"
            return o
        if isinstance(o, dict):
            return {k: walk(v, f"{where}.{k}") for k, v in o.items()}
        if isinstance(o, list):
            if len(o) > max_items:
                cuts[where] = len(o)
            return [walk(v, f"{where}[{i}]") for i, v in enumerate(o[:max_items])]
        return o

    return walk(obj, "$"), cuts


def _size(obj) -> int:
    """Bytes of ``obj`` as the answer's JSON."""
    return len(_encode(obj))


def _encode(obj) -> bytes:
    import orjson

    return orjson.dumps(obj)


def _lists(obj, path: tuple = ()):
    """(path, list) of every list reachable from ``obj`` through objects only (the tables and
    lists of a result, not the lists inside their rows)."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            if isinstance(v, list):
                yield path + (k,), v
            elif isinstance(v, dict) and k not in ("rows", "paging", "truncated"):
                yield from _lists(v, path + (k,))


def _total(payload: dict, dotted: str, shown: int) -> int:
    """Rows of the table at ``dotted`` in all: the command's own count (``rows``) when it cut
    the table, else ``shown``."""
    rows = payload.get("rows")
    got = rows.get(dotted) if isinstance(rows, dict) else None
    if isinstance(got, dict) and isinstance(got.get("total"), int):
        return got["total"]
    if dotted == "result" and isinstance(rows, dict) and isinstance(rows.get("result"), dict):
        return rows["result"].get("total", shown)
    return shown


def _with(obj, path: tuple, value):
    """A copy of the objects along ``path`` in ``obj`` with ``value`` at its end."""
    out = dict(obj)
    out[path[0]] = value if len(path) == 1 else _with(obj[path[0]], path[1:], value)
    return out


#: lists each tool's overview keeps longest when it must cut (besides every list of strings:
#: notes, warnings, provenance lines), by dotted path
LEAD = {"analyze": ("devices", "ops", "findings"), "diff": ("populations", "findings")}


def _largest(fits, lo: int, hi: int) -> int:
    """The largest n in [lo, hi] with ``fits(n)`` (``fits(lo)`` holds; ``fits`` is monotone)."""
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


def fit(payload: dict, *, max_bytes: int = MAX_BYTES, tool: str = "analyze", lead=None) -> dict:
    """``payload`` if its JSON takes at most ``max_bytes``; else its lists cut to their first
    rows, no further than needed: every list keeps its first row (none if even that does not
    fit); the lead lists (``lead``, default :data:`LEAD` of ``tool``, and every list of
    strings: notes, warnings) then grow as far as fits, every other list after them, each
    list of a tier up to one common number of bytes (a list smaller than that stays whole).
    ``rows`` states the rows each list now holds; ``"paging"``: per list holding part of its
    table (dotted path) its shown, total and remaining rows, and how to page through the rest.
    If even empty lists do not fit, the largest sections are left out (named under
    ``paging.omitted`` with their size)."""
    if _size(payload) <= max_bytes:
        return payload
    lead = set(LEAD.get(tool, ()) if lead is None else lead)
    lists = []  # (path, items, dotted, lead?, bytes of the first k items for every k)
    for path, items in _lists(payload):
        dotted, sizes = ".".join(path), [2]
        for item in items:
            sizes.append(sizes[-1] + _size(item) + (len(sizes) > 1))
        lists.append((path, items, dotted, dotted in lead or (items and all(isinstance(x, str) for x in items)),
                      sizes))

    def build(cap_lead: int, cap_rest: int, floor: int) -> dict:
        """The payload with each list cut to the most rows whose JSON takes at most its tier's
        cap, and at least ``floor`` rows."""
        cand, cut, rows = payload, {}, payload.get("rows")
        for path, items, dotted, first, sizes in lists:
            n = max(min(len(items), floor), bisect.bisect_right(sizes, cap_lead if first else cap_rest) - 1)
            total = _total(payload, dotted, len(items))
            if n == len(items):
                if total > n:  # cut by the command (its top): pageable all the same
                    cut[dotted] = {"shown": n, "total": total, "remaining": total - n}
                continue
            cand = _with(cand, path, items[:n])
            cut[dotted] = {"shown": n, "total": total, "remaining": total - n}
            if isinstance(rows, dict) and isinstance(rows.get(dotted), dict):  # rows: what the answer holds
                cand = _with(cand, ("rows", dotted), dict(rows[dotted], shown=n, total=total))
            parent = cand
            for k in path[:-1]:
                parent = parent[k]
            if isinstance(parent.get(path[-1] + "_rows"), dict):  # steps.records_rows
                cand = _with(cand, path[:-1] + (path[-1] + "_rows",), {"shown": n, "total": total})
        return dict(cand, paging={
            "max_bytes": max_bytes, "cut": cut,
            "more": f"call {tool} again with section=<one of cut> and offset=<its shown> for the next rows"})

    fits = lambda cand: _size(cand) <= max_bytes
    most = max((sizes[-1] for *_, sizes in lists), default=0)
    for floor in (1, 0):
        if not fits(build(0, 0, floor)):
            continue
        cap_lead = _largest(lambda b: fits(build(b, 0, floor)), 0, most)
        cap_rest = _largest(lambda b: fits(build(cap_lead, b, floor)), 0, most)
        return build(cap_lead, cap_rest, floor)
    cand = build(0, 0, 0)
    omitted = {}
    for k in sorted(cand, key=lambda k: -_size(cand[k])):
        if k in ("paging", "section", "rows") or _size(cand) <= max_bytes:
            continue
        omitted[k] = _size(cand[k])
        cand = {kk: (None if kk == k else v) for kk, v in cand.items()}
        cand["paging"]["omitted"] = omitted
    cand["paging"]["more"] += "; an omitted section: call with section=<its name>"
    return cand


def page(items: list, *, offset: int, total: int, max_bytes: int = MAX_BYTES, wrap) -> dict:
    """The longest run of ``items`` (already starting at ``offset`` of the whole list) whose
    answer ``wrap(rows, counts)`` takes at most ``max_bytes`` (at least one row, so paging
    always advances); counts are offset, shown, total, remaining and next_offset (None at the
    end)."""
    def make(k):
        rest = max(total - offset - k, 0)
        return wrap(items[:k], {"offset": offset, "shown": k, "total": total, "remaining": rest,
                                "next_offset": offset + k if rest else None})

    lo, hi = 1, len(items)
    if hi == 0:
        return make(0)
    if _size(make(hi)) <= max_bytes:
        return make(hi)
    while lo < hi:  # the largest k that fits (k = 1 is taken whatever its size)
        mid = (lo + hi + 1) // 2
        if _size(make(mid)) <= max_bytes:
            lo = mid
        else:
            hi = mid - 1
    return make(lo)


def section_of(payload: dict, section: str):
    """(path, value) of the dotted ``section`` in ``payload``; UsageError naming the sections
    when there is none."""
    node, path = payload, ()
    for part in section.split("."):
        if not isinstance(node, dict) or part not in node:
            names = ", ".join([k for k in payload if k not in ("rows", "paging")]
                              + [".".join(p) for p, _ in _lists(payload) if len(p) > 1])
            raise UsageError(f"unknown section {section!r}; sections: {names}")
        node, path = node[part], path + (part,)
    return path, node


def _bucket(n: int) -> int:
    """Rows to ask the command for to serve a page ending at row ``n``: a power of two from
    1,024, so that the pages of one table share a few cached results."""
    b = 1024
    while b < n:
        b *= 2
    return b


def _one_line(exc: BaseException) -> str:
    """An exception as one printable line."""
    if isinstance(exc, TraceviewError):
        return safe_line(str(exc))
    first = (str(exc).strip().splitlines() or [""])[0]
    return safe_line(f"{type(exc).__name__}: {first}" if first else type(exc).__name__)


def one_line_message(text: str) -> str:
    """A multi-line error message (pydantic's validation errors) as one line: its lines
    joined with "; ", pointers to documentation left out."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and "For further information" not in ln]
    return safe_line("; ".join(lines))


def run_command(argv: list[str], *, ok_codes=(EXIT_OK,)) -> tuple[int, str]:
    """Run the CLI subcommand ``argv`` (``["analyze", PATH, "--format=json", ...]``) in this
    process: parsed by the CLI's parser, run by its module's ``run``, standard output
    captured. Returns (exit code, output); raises UsageError (the parser's message) or the
    command's TraceviewError; an exit code outside ``ok_codes`` raises UsageError."""
    from traceview.cli import COMMANDS, build_parser, parse

    err = io.StringIO()
    out = io.StringIO()
    try:
        with _LOCK, contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            parser = build_parser(only=argv[0])
            try:
                args = parse(parser, argv)
                rc = importlib.import_module(COMMANDS[argv[0]]).run(args)
            except SystemExit as exc:  # the parser's usage error (already written to err)
                lines = [ln for ln in err.getvalue().splitlines() if ln.strip()]
                raise UsageError(lines[-1].removeprefix("traceview: error: ") if lines else
                                 f"traceview {argv[0]} exited {exc.code}") from None
    finally:
        for line in err.getvalue().splitlines():  # the command's notes and warnings: the server's log
            print(line, file=sys.stderr)
    if rc not in ok_codes:
        raise UsageError(f"traceview {argv[0]} exited {rc}")
    return rc, out.getvalue()


def cli_option(command: str, dest: str):
    """The argparse action of option ``dest`` of the CLI subcommand ``command``, from the
    command's own parser: a tool's choices and help are those of the command line."""
    from traceview.cli import build_parser

    sub = build_parser(only=command).commands[command]
    for action in sub._actions:
        if action.dest == dest:
            return action
    raise KeyError(f"traceview {command} has no option {dest!r}")


def unknown_arguments(tool: str, arguments: dict, schema: dict) -> str | None:
    """The one-line refusal of the keys of ``arguments`` that ``tool``'s input ``schema``
    does not declare, or None when there are none."""
    known = list(schema.get("properties", {}))
    extra = [k for k in arguments if k not in known]
    if not extra:
        return None
    return (f"{tool}: unknown argument{'s' if len(extra) > 1 else ''} {', '.join(repr(k) for k in extra)}; "
            f"{tool} takes {', '.join(known)}")


def _expected_integer(spec: dict) -> str:
    """What an integer argument's schema ``spec`` takes, in the command line's words."""
    lo, hi = spec.get("minimum"), spec.get("maximum")
    if lo is not None and hi is not None and hi < (1 << 31):
        return f"an integer from {lo} to {hi}"
    return {1: "a positive integer", 0: "a non-negative integer", None: "an integer"}.get(lo, f"an integer >= {lo}")


#: the strings the SDK (pydantic) takes for a boolean
_BOOL_WORDS = frozenset({"0", "1", "true", "false", "t", "f", "yes", "no", "y", "n", "on", "off"})


def _value_fault(value, spec: dict) -> str | None:
    """Why ``value`` does not fit ``spec`` (one branch of a tool's input schema: an integer,
    boolean, string or array with its bounds), or None when it does or the schema says no
    type; a value the SDK converts (``"3"`` for an integer, ``"true"``, a list sent as JSON
    text) is taken as it takes it."""
    kind = spec.get("type")
    if kind == "integer":
        n = value
        if isinstance(value, str):
            try:
                n = int(value.strip())
            except ValueError:
                n = None
        elif isinstance(value, float) and value.is_integer():
            n = int(value)
        if isinstance(n, bool) or not isinstance(n, int):
            return f"expected {_expected_integer(spec)}, got {value!r}"
        lo, hi = spec.get("minimum"), spec.get("maximum")
        if (lo is not None and n < lo) or (hi is not None and n > hi):
            return f"expected {_expected_integer(spec)}, got {value!r}"
    elif kind == "boolean":
        if not (isinstance(value, bool) or value in (0, 1) or (isinstance(value, str) and value.strip().lower() in _BOOL_WORDS)):
            return f"expected true or false, got {value!r}"
    elif kind == "string":
        if not isinstance(value, str):
            return f"expected a string, got {value!r}"
        if len(value) < spec.get("minLength", 0):
            return "expected a non-empty string" if spec["minLength"] == 1 else \
                f"expected at least {spec['minLength']} characters, got {len(value)}"
        if "maxLength" in spec and len(value) > spec["maxLength"]:
            return f"expected at most {spec['maxLength']:,} characters, got {len(value):,}"
    elif kind == "array":
        if isinstance(value, str):  # a list sent as JSON text: the SDK parses it
            try:
                value = json.loads(value)
            except ValueError:
                pass
        if not isinstance(value, list):
            return f"expected a list, got {value!r}"
        if len(value) < spec.get("minItems", 0):
            return f"expected at least {spec['minItems']} item{'s' if spec['minItems'] > 1 else ''}, got {len(value)}"
        if "maxItems" in spec and len(value) > spec["maxItems"]:
            return f"expected at most {spec['maxItems']} items, got {len(value)}"
        for i, item in enumerate(value):
            if (why := _value_fault(item, spec.get("items", {}))):
                return f"item {i}: {why}"
    return None


def argument_faults(tool: str, arguments: dict, schema: dict) -> str | None:
    """The one-line refusal of the first of ``arguments`` that ``tool``'s input ``schema``
    does not take (a required one missing, an integer out of its bounds or not an integer,
    a string or list of the wrong length), in traceview's words, or None. Values the schema
    leaves to the tool (``analyze``'s ``by``: the library's check) pass."""
    missing = [k for k in schema.get("required", []) if k not in arguments]
    if missing:
        return f"{tool}: missing argument{'s' if len(missing) > 1 else ''} {', '.join(repr(k) for k in missing)}"
    props = schema.get("properties", {})
    for key, value in arguments.items():
        spec = props.get(key, {})
        if value is None and any(b.get("type") == "null" for b in spec.get("anyOf", ())):
            continue
        branch = next((b for b in spec.get("anyOf", ()) if b.get("type") != "null"), spec)
        if (why := _value_fault(value, branch)):
            return f"{tool}: argument {key!r}: {why}"
    return None


def _opt(name: str, value) -> list[str]:
    """``--name=value`` (the ``=`` form, so a value starting with '-' stays a value), or
    nothing for None / False; ``--name`` for True."""
    if value is None or value is False:
        return []
    if value is True:
        return [f"--{name}"]
    return [f"--{name}={value}"]


def build_server(roots: Roots, *, no_cache: bool = False, max_items: int = MAX_ITEMS, max_chars: int = MAX_CHARS,
                 max_bytes: int = MAX_BYTES, query_memory: float | None = None, query_timeout: float | None = None):
    """The :class:`mcp.server.mcpserver.MCPServer` with traceview's tools, confined to
    ``roots``; ``query_memory`` (GiB) and ``query_timeout`` (s) bound each query (0: no limit;
    None: :mod:`traceview.cli.sqlguard`'s defaults). Raises ImportError when the ``mcp`` SDK
    is not installed."""
    from traceview.cli.sqlguard import MEMORY_GIB, TIMEOUT_S

    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError
    from pydantic import Field

    from traceview import __version__

    class _Server(MCPServer):
        """MCPServer whose tool errors are one line (the SDK's argument validation errors
        span several), whose tools refuse arguments they do not declare (the SDK ignores
        them) and refuse values their schema does not take in traceview's words, before the
        SDK's validation."""

        async def list_tools(self):
            tools = await super().list_tools()
            for t in tools:
                t.input_schema = {**t.input_schema, "additionalProperties": False}
            return tools

        async def call_tool(self, name, arguments, context=None):
            schema = next((t.input_schema for t in await self.list_tools() if t.name == name), None)
            if schema is not None and (why := unknown_arguments(name, arguments or {}, schema)
                                       or argument_faults(name, arguments or {}, schema)):
                raise ToolError(why)
            try:
                return await super().call_tool(name, arguments, context)
            except ToolError as exc:
                raise ToolError(one_line_message(str(exc))) from None

    server = _Server(
        name="traceview", version=__version__,
        # the SDK logs each failed tool call at INFO, as a block of lines on stderr; the client
        # has the one-line error already
        log_level="WARNING",
        instructions="traceview reads JAX/XProf profiles (.xplane.pb, .trace.json.gz) and reports HLO ops keyed "
                     "by (name, shape) with occurrences, roofline, steps and sources. Paths are confined to: "
                     + ", ".join(roots.dirs + roots.urls) + ". Start with find_traces, then analyze (section=... for one "
                     "part), query (SQL; describe_schema lists the tables), diff and verify. Answers take at most "
                     f"{max_bytes // 1024} KB: rows states the rows each table holds of its total, paging.cut "
                     "every table cut; section=PATH with offset pages through a table, each page giving "
                     "next_offset. Ids (program_id, *_id) are decimal strings, exact for any JSON reader; in SQL "
                     "they are integers: WHERE program_id = 12190760917235803885, unquoted.")
    cache = ["--no-cache"] if no_cache else []
    query_memory = MEMORY_GIB if query_memory is None else query_memory
    query_timeout = TIMEOUT_S if query_timeout is None else query_timeout
    limits = [f"--query-memory={query_memory:g}", f"--query-timeout={query_timeout:g}"]
    said = {0: "no limit"}

    def load(text: str) -> tuple[dict, dict]:
        """A command's JSON, bounded (:func:`bound`): (payload, string cuts)."""
        return bound(json.loads(text), max_items=max_items, max_chars=max_chars)

    def finish(payload: dict, cuts: dict) -> str:
        if cuts:
            payload = dict(payload, truncated=cuts)
        return _encode(payload).decode("utf-8")

    def room(cuts: dict) -> int:
        """Bytes left for the answer once its ``truncated`` list is added."""
        return max_bytes - (_size({"truncated": cuts}) if cuts else 0)

    def answer(command, *, tool: str, section: str | None, offset: int, top: int | None) -> str:
        """``command(rows)`` (the command's JSON text, each table cut at ``rows``, None: its
        default) served as an overview (``section`` None: :func:`fit`) or as one page of
        ``section`` from ``offset`` (:func:`page`; a section that is no list: :func:`fit`)."""
        if section is None:
            if offset:
                raise UsageError("offset pages through a section: give section=NAME too")
            payload, cuts = load(command(top or OVERVIEW_ROWS))
            return finish(fit(payload, max_bytes=room(cuts), tool=tool), cuts)
        limit = min(top or max_items, max_items)
        payload = json.loads(command(_bucket(offset + limit)))
        path, value = section_of(payload, section)
        if not isinstance(value, list):
            rows = payload.get("rows", {}).get(section) if isinstance(payload.get("rows"), dict) else None
            sub, cuts = bound({"section": section, "rows": rows, section: value}, max_items=max_items,
                              max_chars=max_chars)
            return finish(fit(sub, max_bytes=room(cuts), tool=tool), cuts)
        import re

        total = _total(payload, section, len(value))
        items, cuts = bound(value[offset:offset + limit], max_items=max_items, max_chars=max_chars)
        cuts = {re.sub(r"^\$\[(\d+)\]", lambda m: f"$.{section}[{offset + int(m.group(1))}]", k): v
                for k, v in cuts.items()}
        if path == ("result",):  # a query: its own object, the result paged
            wrap = lambda rows, counts: dict(payload, top=limit, rows={"result": counts}, result=rows)
        else:
            wrap = lambda rows, counts: {"section": section, "rows": counts, section: rows}
        return finish(page(items, offset=offset, total=total, max_bytes=room(cuts), wrap=wrap), cuts)

    def guarded(fn):
        """``fn`` with every error as a ToolError of one line."""
        import functools

        @functools.wraps(fn)
        def wrapper(*a, **k):
            try:
                return fn(*a, **k)
            except ToolError:
                raise
            except Exception as exc:  # noqa: BLE001 - every failure is one line to the client
                raise ToolError(_one_line(exc)) from None
        return wrapper

    PathArg = Annotated[str, Field(description="trace file, run folder or log dir, under a root (relative: to the "
                                               "first root)")]
    TopArg = Annotated[int | None, Field(ge=1, le=1000, description=(
        f"rows of each table (default {OVERVIEW_ROWS}; rows states each total); an answer over 32 KB keeps its "
        f"lead tables longest (analyze: devices, ops, findings; diff: populations, findings) and cuts the others "
        f"first (paging.cut); with section: the most rows of the page (default: as many as fit)"))]
    SectionArg = Annotated[str | None, Field(description=(
        "one section of the answer, a dotted path (ops, steps.records, overlap.steps, ...); a list is served "
        "a page at a time from offset"))]
    OffsetArg = Annotated[int, Field(ge=0, le=(1 << 62), description="first row of the page of section (the "
                                                                     "previous page's next_offset)")]
    by_option = cli_option("analyze", "by")  # the choices of analyze --by: one definition, the parser's
    # listed as the schema's enum, refused by the tool in traceview's words (not pydantic's)
    ByArg = Annotated[str, Field(description=by_option.help, json_schema_extra={"enum": list(by_option.choices)})]

    @server.tool(description="What traceview would read under PATH and why: runs, hosts, files (format, size), "
                             "the reasons for each choice, and warnings (several runs, stale runs, stray files).")
    @guarded
    def find_traces(path: PathArg = ".", run: Annotated[str | None, Field(description="run folder name")] = None,
                    all_runs: bool = False, section: SectionArg = None, offset: OffsetArg = 0) -> str:
        from traceview.read.discover import discover

        real = roots.resolve(path)
        disc = discover(real, run=run, all_runs=all_runs, stale_after_s=7 * 24 * 3600)
        for f in disc.files if "://" not in real else ():  # as analyze: a folder reaching outside the roots
            if not roots.inside(os.path.realpath(f.path)):  # is refused whole, not listed (a URL: resolve() confines it)
                raise PathRefused(f"{f.path}: resolves outside the server's roots; refused")
        files, refused = list(disc.files), []
        from traceview.read.remote import is_remote

        shown = disc.shown if is_remote(disc) else str  # a URL's files: named by their URL, not the local copy
        payload = {"traceview": __version__, "path": real,
                   "provenance": {"lines": list(disc.reasons), "runs": [r.name for r in disc.selected]},
                   "runs": [{"name": r.name, "directory": shown(str(r.directory)), "hosts": r.hosts} for r in disc.runs],
                   "files": [{"path": shown(str(f.path)), "host": f.host, "format": f.kind, "bytes": f.size, "run": f.run}
                             for f in files],
                   "warnings": list(disc.warnings) + [f"{p}: resolves outside the server's roots; refused"
                                                      for p in refused],
                   "skipped": [[shown(str(p)), why] for p, why in disc.skipped]}
        text = json.dumps(payload)
        return answer(lambda rows: text, tool="find_traces", section=section, offset=offset, top=None)

    @server.tool(description="traceview analyze --format json: provenance, warnings, devices and peaks, the HLO "
                             "ops keyed by (name, shape) with occurrences and times (ps), roofline, kernels, "
                             "sources, steps and every other section of the report, each table cut at top rows; "
                             "over 32 KB devices, ops and findings are kept longest and the other tables cut "
                             "first (rows: what each holds of its total; paging.cut: each cut table). "
                             "section=NAME returns one section (an unknown name lists them), a table a page at "
                             "a time from offset. Ids (program_id, channel_id) are decimal strings.")
    @guarded
    def analyze(path: PathArg, section: SectionArg = None, offset: OffsetArg = 0,
                top: TopArg = None, by: ByArg = by_option.default,
                run: str | None = None, device: Annotated[str | None, Field(description="device REGEX")] = None,
                filter: Annotated[str | None, Field(description="op REGEX")] = None,
                steps: Annotated[int | None, Field(ge=1, description="step count: flag populations whose "
                                                                      "executions are not a multiple")] = None,
                expect_batch: Annotated[int | None, Field(ge=1, description="batch size B: which populations "
                                                                             "carry a dimension B")] = None) -> str:
        from traceview.analysis.report import op_table_key

        op_table_key(by)
        real = roots.resolve(path)
        roots.check_discovered(real, run=run)
        argv = ["analyze", *_opt("format", "json"), *_opt("by", by), *_opt("run", run),
                *_opt("device", device), *_opt("filter", filter), *_opt("steps", steps),
                *_opt("expect-batch", expect_batch), *cache]
        return answer(lambda rows: run_command([*argv, *_opt("top", rows), "--", real])[1], tool="analyze",
                      section=section, offset=offset, top=top)

    window_arg = Annotated[str | None, Field(max_length=64, description="steps the step time is over: steady "
                                                                        "(default), all, or A:B (step indices from 0, "
                                                                        "B excluded, negatives from the end)")]

    @server.tool(description="traceview diff --format json: two profiles matched population by population (op "
                             "kind, shape, HLO text without names): time and occurrence deltas, appeared / "
                             "vanished populations, kernel configuration changes, step-time delta; paged as "
                             "analyze.")
    @guarded
    def diff(base: PathArg, treatment: PathArg, top: TopArg = None, section: SectionArg = None,
             offset: OffsetArg = 0, step_window: window_arg = None) -> str:
        b, t = roots.resolve(base), roots.resolve(treatment)
        roots.check_discovered(b)
        roots.check_discovered(t)
        return answer(lambda rows: run_command(["diff", *_opt("format", "json"), *_opt("top", rows),
                                                *_opt("step-window", step_window), *cache, "--", b, t])[1],
                      tool="diff", section=section, offset=offset, top=top)

    @server.tool(description="traceview verify --format json: evaluate checks (the verify grammar, e.g. "
                             "\"kernel 'RPAd*' has bkv 256\", \"op matching all-reduce present\", \"family "
                             "attention share < 30%\") on PATH, or on BASE and PATH for diff checks. Each result's status "
                             "is pass, fail or unknown (the trace lacks what the check needs); ok is false "
                             "when a check fails or is unknown (that is a result, not an error).")
    @guarded
    def verify(path: PathArg, checks: Annotated[list[str], Field(min_length=1, max_length=100)],
               base: Annotated[str | None, Field(description="base profile for diff checks")] = None,
               section: SectionArg = None, offset: OffsetArg = 0, step_window: window_arg = None) -> str:
        paths = ([roots.resolve(base)] if base else []) + [roots.resolve(path)]
        for p in paths:
            roots.check_discovered(p)
        argv = ["verify", *_opt("format", "json"), *[f"--check={c}" for c in checks],
                *_opt("step-window", step_window), *cache, "--", *paths]
        _, text = run_command(argv, ok_codes=(EXIT_OK, EXIT_CHECK_FAILED))
        return answer(lambda rows: text, tool="verify", section=section, offset=offset, top=None)

    @server.tool(description="traceview query --format json: SQL (polars) over the profile's tables: ops (one "
                             "row per HLO op event), populations, roofline, steps, sources, kernels, programs, "
                             "module_runs, ... (describe_schema lists them; occurrence_checks with steps or "
                             "expect_batch). A page of the result from offset: at "
                             "most limit rows and 32 KB; rows.result states offset, shown, total, remaining and "
                             "next_offset. Id columns (program_id UInt64, *_id) come back as decimal strings; in "
                             "the SQL they are integers: WHERE program_id = 12190760917235803885, unquoted. "
                             "Each query runs in a child process under "
                             f"{said.get(query_memory, f'{query_memory:g} GiB')} of memory above the tables and "
                             f"{said.get(query_timeout, f'{query_timeout:g} s')}: past either (an aggregate or "
                             "ORDER BY over a cross join) it is a one-line tool error, and the server goes on.")
    @guarded
    def query(path: PathArg, sql: Annotated[str, Field(min_length=1, max_length=20000)],
              limit: Annotated[int, Field(ge=1, le=10000)] = 100, offset: OffsetArg = 0,
              steps: Annotated[int | None, Field(ge=1, description="step count: the occurrence_checks table "
                                                                    "flags populations whose executions are not "
                                                                    "a multiple")] = None,
              expect_batch: Annotated[int | None, Field(ge=1, description="batch size B: the occurrence_checks "
                                                                           "table says which populations carry a "
                                                                           "dimension B")] = None) -> str:
        real = roots.resolve(path)
        roots.check_discovered(real)
        argv = ["query", *_opt("format", "json"), *_opt("steps", steps), *_opt("expect-batch", expect_batch),
                *cache, *limits]
        got = answer(lambda rows: run_command([*argv, *_opt("top", rows), "--", real, sql])[1],
                     tool="query", section="result", offset=offset, top=min(limit, max_items))
        return got

    @server.tool(description="The tables query runs over, with their columns (dtype, meaning). With a path: the "
                             "tables of that profile (traceview query PATH --tables --format json); without: "
                             "the documented tables. table=NAME: that table alone (an unknown name lists them).")
    @guarded
    def describe_schema(path: Annotated[str | None, Field(description="a profile, for its actual tables")] = None,
                        table: Annotated[str | None, Field(description="one table (ops, populations, steps, ...)")]
                        = None, section: SectionArg = None, offset: OffsetArg = 0) -> str:
        if path is None:
            from traceview.model.schema import OPS_SCHEMA, TABLE_DOCS, column_docs

            tables = [{"table": name, "doc": doc,
                       "columns": [{"name": c, "doc": d} for c, d in column_docs(name).items()]}
                      for name, (doc, _) in TABLE_DOCS.items()]
            tables[0]["columns"] = [{"name": c, "dtype": str(t), "doc": column_docs("ops").get(c, "")}
                                    for c, t in OPS_SCHEMA.items()]
            text = json.dumps({"traceview": __version__, "tables": tables})
        else:
            real = roots.resolve(path)
            roots.check_discovered(real)
            _, text = run_command(["query", "--tables", *_opt("format", "json"), *cache, "--", real])
        if table is not None:
            doc = json.loads(text)
            names = [t["table"] for t in doc["tables"]]
            if table not in names and path is None:
                from traceview.analysis.sql import profile_table_names

                if table in profile_table_names():  # a table only a profile has (memory, hlo_edges, ...)
                    raise UsageError(f"the columns of {table!r} depend on the profile: give path=")
            if table not in names:
                raise UsageError(f"unknown table {table!r}; tables: {', '.join(names)}")
            text = json.dumps({**doc, "tables": [t for t in doc["tables"] if t["table"] == table]})
        return answer(lambda rows: text, tool="describe_schema", section=section, offset=offset, top=None)

    return server


def serve(roots: list[str], *, no_cache: bool = False, query_memory: float | None = None,
          query_timeout: float | None = None) -> None:
    """Serve the tools over stdio until the client closes the connection (``query_memory``,
    ``query_timeout``: as :func:`build_server`). Raises UsageError for a bad root and when the
    ``mcp`` SDK is missing."""
    r = Roots(roots)
    try:
        server = build_server(r, no_cache=no_cache, query_memory=query_memory, query_timeout=query_timeout)
    except ImportError as exc:
        raise UsageError(f"traceview mcp needs the MCP SDK: pip install 'traceview[mcp]' ({_one_line(exc)})") from None
    server.run("stdio")
