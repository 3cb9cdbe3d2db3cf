"""SQL over a profile's tables: the named tables of ``traceview query`` and ``Profile.sql``,
built from a :class:`~traceview.analysis.report.Report` (every polars frame it holds) and the
profile's op and module tables, executed by polars' SQL engine (``pl.SQLContext``).

The tables are generic: every DataFrame field of the Report is a table, named by
:data:`NAMES` (a field not listed there keeps its own name, so a section added to the
Report is queryable without an edit here); an object field holding frames (the step
anatomy, a communication section) gives one table per frame, a list of dataclasses (findings)
one row per item. Column docs: :data:`traceview.model.schema.TABLE_DOCS`. Errors (bad SQL,
an unknown table or column) raise :class:`~traceview.errors.UsageError` with polars' first
line.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import re
from typing import Callable

import polars as pl

from traceview.model.naming import printable

from traceview.errors import LimitExceeded, UsageError

#: table name of each Report field (None: not a table; ``table`` is the populations table
#: keyed by ``--by``, already ``populations``); (field, attribute) for frames inside an object
NAMES: dict = {
    "table": None, "by_shape": "populations", "split": "split_names", "checks": "occurrence_checks",
    "device_groups": "device_groups", "html_sources": None, "source_kinds": None,
    ("steps", "steps"): "steps", ("steps", "families"): "families", ("steps", "attr_family"): None,
    ("communication", "collectives"): "communication", ("communication", "host_transfers"): "host_transfers",
    ("phases", "steps"): "phases_steps", ("phases", "summary"): "phases", ("phases", "families"): "phases_families",
    ("phases", "programs"): "phases_programs", ("phases", "executions"): None,
    ("kernel_inside", "invocations"): "kernel_invocations", ("kernel_inside", "stages"): "kernel_stages",
    ("kernel_inside", "counters"): "kernel_counters",
    ("hlo", "instructions"): "hlo", ("hlo", "detections"): "hlo_detections", ("hlo", "patterns"): "hlo_patterns",
    ("hlo", "edges"): "hlo_edges",
    ("hlo", "flop_provenance"): "flop_provenance",
    ("memory", "summary"): "memory", ("memory", "alive"): "memory_alive_at_peak", ("memory", "steps"): "memory_steps",
}

#: the columns of a list section when it is empty (the findings branch's ``Finding`` fields)
EMPTY: dict = {"findings": ("id", "severity", "statement", "evidence", "why", "next_step", "verify_hint", "doc")}

#: tables read off the profile itself rather than the Report
PROFILE_TABLES = ("ops", "module_runs", "programs", "step_markers", "memory_events", "kernel_lines")


def profile_table_names() -> set[str]:
    """The table names :data:`NAMES` and :data:`PROFILE_TABLES` give, known without reading a
    profile: those :data:`~traceview.model.schema.TABLE_DOCS` leaves out (``hlo_edges``,
    ``hlo``, ...) have columns only a profile's tables say."""
    return set(PROFILE_TABLES) | {v for v in NAMES.values() if v is not None}


def _rows_frame(items: list) -> pl.DataFrame:
    """A list of dataclasses (or dicts) as a frame: one row per item; values that are not
    scalars (lists of mixed types, dicts) as JSON text; text as valid Unicode (a path's
    undecodable bytes as ``\xff``: :func:`~traceview.model.naming.printable`)."""
    rows = []
    for it in items:
        d = dataclasses.asdict(it) if dataclasses.is_dataclass(it) else dict(it)
        rows.append({k: printable(v) if isinstance(v, str) else v if v is None or isinstance(v, (int, float, bool))
                     else printable(json.dumps(v, default=str, sort_keys=True)) for k, v in d.items()})
    return pl.DataFrame(rows, infer_schema_length=None)


def _object_frames(name: str, obj) -> dict[str, pl.DataFrame]:
    """The frames held by an object field (its attributes), by table name."""
    attrs = {k: v for k, v in getattr(obj, "__dict__", {}).items()
             if isinstance(v, pl.DataFrame) and not k.startswith("_")}
    for k in getattr(obj, "LAZY_FRAMES", ()):  # frames an object builds on first use (Overlap.ops)
        attrs[k] = getattr(obj, k)
    out = {}
    for k, v in attrs.items():
        table = NAMES.get((name, k), name if len(attrs) == 1 else f"{name}_{k}")
        if table is not None:
            out[table] = v
    return out


def report_tables(report) -> dict[str, pl.DataFrame]:
    """Every table of ``report`` (a :class:`~traceview.analysis.report.Report`) by name."""
    out: dict[str, pl.DataFrame] = {}
    for f in dataclasses.fields(report):
        v = getattr(report, f.name, None)
        if v is None:
            continue
        if isinstance(v, pl.DataFrame):
            table = NAMES.get(f.name, f.name)
            if table is not None:
                out[table] = v
        elif isinstance(v, list) and all(dataclasses.is_dataclass(x) for x in v) and (v or f.name in EMPTY):
            table = NAMES.get(f.name, f.name)
            if table is not None:
                out[table] = _rows_frame(v) if v else pl.DataFrame(schema={c: pl.Utf8 for c in EMPTY[f.name]})
        elif hasattr(v, "__dict__") and not isinstance(v, type):
            out.update(_object_frames(f.name, v))
    return out


def profile_tables(prof) -> dict[str, Callable[[], pl.DataFrame]]:
    """The profile's own tables, each built on demand: ``ops`` (one row per HLO op event,
    :data:`~traceview.model.schema.OPS_SCHEMA`), ``module_runs`` (one row per program
    execution), ``programs`` (one row per hlo_module / program_id), ``step_markers``,
    ``memory_events`` (the allocators' events, :data:`~traceview.model.memory_events.MEMORY_SCHEMA`)."""
    from traceview.analysis.ops.aggregate import module_executions

    out = {"ops": lambda: prof.ops, "module_runs": lambda: prof.module_runs,
           "programs": lambda: module_executions(prof.module_runs)}
    if getattr(prof, "step_markers", None) is not None:
        out["step_markers"] = lambda: prof.step_markers
    if getattr(prof, "memory", None) is not None:
        out["memory_events"] = lambda: prof.memory
    if getattr(prof, "kernel_lines", None) is not None:
        out["kernel_lines"] = lambda: prof.kernel_lines
    return out


@dataclasses.dataclass
class Tables:
    """The named tables of one profile: ``frames`` (name: frame, from the Report) and
    ``lazy`` (name: a function building the frame, for the profile's large tables)."""

    frames: dict
    lazy: dict
    #: rows of the op table without building it (one per op event), None when unknown
    ops_rows: int | None = None

    @property
    def names(self) -> list[str]:
        """Every table name, profile tables first."""
        return list(self.lazy) + [n for n in self.frames if n not in self.lazy]

    def get(self, name: str) -> pl.DataFrame:
        """The frame of table ``name``; UsageError when there is none."""
        if name in self.lazy:
            return self.lazy[name]()
        if name in self.frames:
            return self.frames[name]
        raise UsageError(f"unknown table {name!r}; tables: {', '.join(self.names)}")

    def schema(self, name: str) -> dict:
        """{column: dtype text} of table ``name`` (the op table's from its schema, unbuilt)."""
        if name == "ops":
            from traceview.model.schema import OPS_SCHEMA

            return {c: str(t) for c, t in OPS_SCHEMA.items()}
        return {c: str(t) for c, t in self.get(name).schema.items()}


def tables(report, prof=None) -> Tables:
    """The :class:`Tables` of ``report`` and (when given) the profile it was built from."""
    return Tables(frames=report_tables(report), lazy=profile_tables(prof) if prof is not None else {},
                  ops_rows=prof.table.height if prof is not None and getattr(prof, "table", None) is not None else None)


_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_MISSING = re.compile(r"relation '([^']*)' was not found")
#: comments and single-quoted literals, blanked before the statement is checked
_INERT = re.compile(r"--[^\n]*|/\*.*?(\*/|$)|'(?:[^']|'')*('|$)", re.S)
#: polars' SQL table functions that read files (read_csv, read_parquet, read_json, read_ipc,
#: ...), with or without quotes around the name
_FILE_FUNCTION = re.compile(r"\b(read|scan)_[a-z0-9_]*\s*\(", re.I)
_FIRST_WORD = re.compile(r"\s*\(*\s*([A-Za-z]+)")


def check_query(query: str) -> None:
    """Refuse what is not one read-only query over traceview's tables: a statement other than
    SELECT / WITH (DROP, CREATE, ...), several statements, and polars' file-reading table
    functions (``read_csv('/etc/passwd')`` would read any file the process can, past an MCP
    server's roots). Comments and string literals are blanked first, so a function name
    inside a literal is harmless and a comment cannot hide one. Raises UsageError."""
    if not isinstance(query, str) or not query.strip():
        raise UsageError("empty SQL query")
    bare = _INERT.sub(" ", query).replace('"', " ").replace("`", " ")
    m = _FIRST_WORD.match(bare)
    if not m or m.group(1).upper() not in ("SELECT", "WITH"):
        raise UsageError("only SELECT (or WITH ... SELECT) queries over traceview's tables are accepted")
    if ";" in bare.rstrip().rstrip(";"):
        raise UsageError("one SQL statement at a time")
    f = _FILE_FUNCTION.search(bare)
    if f:
        raise UsageError(f"SQL table functions that read files ({f.group(0).rstrip('( ').strip()}) are refused: "
                         "queries run over traceview's tables only")


def _lazy(t: Tables, query: str) -> pl.LazyFrame:
    """The lazy plan of ``query`` over the tables of ``t`` it names (:func:`check_query` first)."""
    check_query(query)
    names = set(t.names)
    used = {w for w in _WORD.findall(query) if w in names}
    ctx = pl.SQLContext({n: t.get(n) for n in sorted(used)})
    with _sql_errors(t):
        return ctx.execute(query, eager=False)


@contextlib.contextmanager
def _sql_errors(t: Tables):
    """polars' errors (planning or collecting a query) as UsageError: an unknown table with the
    list of tables, else polars' first line."""
    try:
        yield
    except (pl.exceptions.PolarsError, ValueError, TypeError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        missing = _MISSING.search(first)
        if missing:
            hint = ("; occurrence_checks exists with --steps N or --expect-batch B (MCP: steps, expect_batch)"
                    if missing.group(1) == "occurrence_checks" else "")
            raise UsageError(f"unknown table {missing.group(1)!r} in the query{hint}; tables: "
                             f"{', '.join(t.names)}") from None
        if "maximum length reached" in first:  # a result past polars' 2^32 rows (a cross join of joins)
            raise LimitExceeded("the query's rows (its result or a step on the way) pass polars' limit of 2^32 rows (a cross join "
                                "of several tables?): narrow it with WHERE or LIMIT") from None
        if "cannot compare string with numeric type" in first:
            first += ("; ids the JSON writes as strings are integers in SQL: write them unquoted "
                      "(WHERE program_id = 12190760917235803885)")
        raise UsageError(f"SQL error: {first}") from None


def execute(t: Tables, query: str) -> pl.DataFrame:
    """Run the SQL ``query`` over the tables of ``t`` (only those whose names appear in it
    are built); returns the result frame. Raises UsageError: a query :func:`check_query`
    refuses (not a SELECT, several statements, a file-reading table function), an unknown
    table (with the list of tables), or polars' error (its first line) for bad SQL or an
    unknown column (a string compared with a number: with how to write an id the JSON gives as
    a string)."""
    lf = _lazy(t, query)
    with _sql_errors(t):
        return lf.collect()


#: most rows a result slice asks polars for (its row index is 32-bit)
MAX_ROWS = (1 << 32) - 1


def execute_head(t: Tables, query: str, rows: int) -> tuple[pl.DataFrame, int]:
    """(the first ``rows`` rows of ``query``'s result, its total row count), as :func:`execute`
    would give them, with the slice pushed into polars' lazy plan: a plain SELECT over a huge
    join produces only those rows, and the count is planned without the result's columns. Work
    the plan cannot bound (an aggregate or ORDER BY over a huge join) is still done in full.
    Raises as :func:`execute`."""
    lf = _lazy(t, query)
    rows = min(int(rows), MAX_ROWS)
    with _sql_errors(t):
        head, count = pl.collect_all([lf.head(rows), lf.select(pl.len())])
    return head, int(count.item())


def describe(t: Tables) -> list[dict]:
    """Per table: name, doc, rows (the op table's counted without building it), and per column its name,
    dtype and doc (:data:`traceview.model.schema.TABLE_DOCS`, "" where none is written)."""
    from traceview.model.schema import TABLE_DOCS, column_docs

    out = []
    for name in t.names:
        doc = TABLE_DOCS.get(name, ("", {}))
        cols = column_docs(name)
        rows = t.ops_rows if name == "ops" else t.get(name).height
        out.append({"table": name, "doc": doc[0], "rows": rows,
                    "columns": [{"name": c, "dtype": d, "doc": cols.get(c, "")} for c, d in t.schema(name).items()]})
    return out


def describe_frame(t: Tables) -> pl.DataFrame:
    """:func:`describe` as one row per (table, column): table, column, dtype, doc."""
    rows = [{"table": d["table"], "column": c["name"], "dtype": c["dtype"], "doc": c["doc"]}
            for d in describe(t) for c in d["columns"]]
    return pl.DataFrame(rows, schema={"table": pl.Utf8, "column": pl.Utf8, "dtype": pl.Utf8, "doc": pl.Utf8})
