"""``traceview mcp``: one server subprocess for the module, spoken to with the MCP SDK's own
client (``mcp.client.stdio``), over the shared traces. Each tool's JSON must equal what the
command line prints for the same arguments; paths outside the roots, a symbolic link
escaping them and a missing file get one-line MCP tool errors; nothing is written under the
roots. Every answer takes at most 32 KB; paging through a section returns each row once."""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from pathlib import Path

import anyio
import pytest
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, get_default_environment, stdio_client

from badinputs import dangling_hlo_refs

V6E = "tpu_v6e_4chip_psum.xplane.pb"
GEMM = "mi300x_jax_gemm_sweep.xplane.pb"
CONV = "mi300x_jax_conv3d.xplane.pb"
ATTN = "mi300x_jax_attention.xplane.pb"
VLLM = "vllm_tpu_qwen"
SQL = "SELECT op_name, shape, occurrences, self_ps FROM populations ORDER BY self_ps DESC, op_name, shape"
ROOT = Path(__file__).resolve().parent.parent
CHECKS = ["op matching all-reduce present", "op matching no_such_op present"]
CHECKS_Q = ("SELECT op_name, shape, occurrences, per_device_max, steps, steps_ok, has_batch FROM occurrence_checks "
            "ORDER BY op_name, shape")
CROSS4 = "FROM ops a CROSS JOIN ops b CROSS JOIN ops c CROSS JOIN ops d"  # 198**4 rows of the conv3d trace

#: (name, tool, arguments): every call the module makes, in one session
CALLS = [
    ("analyze_v6e", "analyze", {"path": V6E, "top": 3, "steps": 100}),  # fits MAX_BYTES whole
    ("analyze_vllm_ops", "analyze", {"path": VLLM, "section": "ops", "top": 4}),
    ("analyze_bad_section", "analyze", {"path": V6E, "section": "nope"}),
    ("diff_mi300x", "diff", {"base": GEMM, "treatment": CONV, "top": 5}),
    ("verify_v6e", "verify", {"path": V6E, "checks": CHECKS}),
    ("diff_dangling", "diff", {"base": "SCRATCH/dangling", "treatment": ATTN, "top": 5}),
    ("verify_dangling", "verify", {"path": "SCRATCH/dangling", "checks": ["op matching fusion present"]}),
    ("query_vllm", "query", {"path": VLLM, "sql": SQL, "limit": 7}),
    ("query_bad", "query", {"path": V6E, "sql": "SELECT * FROM nope"}),
    ("find_vllm", "find_traces", {"path": VLLM}),
    ("find_escaping", "find_traces", {"path": "SCRATCH/profiles"}),
    ("schema", "describe_schema", {}),
    ("schema_v6e", "describe_schema", {"path": V6E}),
    ("outside", "analyze", {"path": "/etc"}),
    ("dotdot", "query", {"path": "../../../etc/passwd", "sql": "SELECT 1"}),
    ("symlink_file", "analyze", {"path": "SCRATCH/escape.xplane.pb"}),
    ("symlink_inside_folder", "analyze", {"path": "SCRATCH/profiles"}),
    ("missing", "analyze", {"path": "SCRATCH/no_such.xplane.pb"}),
    ("bad_arg", "analyze", {"path": V6E, "top": 0}),
    ("diff_empty_window", "diff", {"base": V6E, "treatment": V6E, "step_window": "1000:2000"}),
    ("sql_reads_file", "query", {"path": V6E, "sql": "SELECT * FROM read_csv('/etc/passwd', has_header => false)"}),
    ("sql_drop", "query", {"path": V6E, "sql": "DROP TABLE ops"}),
    ("analyze_vllm_default", "analyze", {"path": VLLM}),
    ("analyze_v6e_steps", "analyze", {"path": V6E, "section": "steps"}),
    ("offset_without_section", "analyze", {"path": V6E, "offset": 3}),
    ("analyze_v6e_default", "analyze", {"path": V6E}),
    ("analyze_v6e_top5", "analyze", {"path": V6E, "top": 5}),
    ("analyze_gemm_default", "analyze", {"path": GEMM}),
    ("analyze_greedy_default", "analyze", {"path": "FIXTURES/greedy_b4"}),
    ("query_v6e_id", "query", {"path": V6E, "sql": "SELECT program_id, module FROM programs WHERE module = 'jit_f'"}),
    # a query whose work nothing bounds: the server (--query-memory 0.5) answers one line and goes on
    ("query_huge", "query", {"path": CONV, "sql": f"SELECT a.op_name {CROSS4} ORDER BY a.self_ps + d.self_ps"}),
    ("query_after_huge", "query", {"path": CONV, "sql": "SELECT count(*) AS n FROM ops"}),
    ("query_cross_plain", "query", {"path": CONV, "sql": f"SELECT a.op_name {CROSS4}", "limit": 2}),
    ("query_checks", "query", {"path": V6E, "sql": CHECKS_Q, "steps": 100, "expect_batch": 5}),
    ("query_checks_bad", "query", {"path": V6E, "sql": CHECKS_Q, "steps": 0}),
    # every --by of the command line; a value it does not take, an argument no tool declares
    ("analyze_v6e_by_kind", "analyze", {"path": V6E, "by": "kind", "top": 3}),
    ("analyze_v6e_by_program_shape", "analyze", {"path": V6E, "by": "program-shape", "section": "ops"}),
    ("analyze_bad_by", "analyze", {"path": V6E, "by": "nosuch"}),
    ("analyze_unknown_arg", "analyze", {"path": V6E, "unknown_arg": 1}),
    # values a tool's schema does not take: refused in traceview's words, not pydantic's
    ("analyze_top_negative", "analyze", {"path": V6E, "top": -1}),
    ("analyze_top_over", "analyze", {"path": V6E, "top": 1001}),
    ("analyze_top_text", "analyze", {"path": V6E, "top": "abc"}),
    ("analyze_offset_negative", "analyze", {"path": V6E, "section": "ops", "offset": -3}),
    ("analyze_expect_batch_half", "analyze", {"path": V6E, "expect_batch": 2.5}),
    ("analyze_no_path", "analyze", {"top": 3}),
    ("query_limit_zero", "query", {"path": V6E, "sql": "SELECT 1", "limit": 0}),
    ("query_empty_sql", "query", {"path": V6E, "sql": ""}),
    ("query_limit_text_number", "query", {"path": V6E, "sql": "SELECT 1 AS n", "limit": "2"}),
    ("verify_no_checks", "verify", {"path": V6E, "checks": []}),
    ("verify_check_not_text", "verify", {"path": V6E, "checks": [3]}),
    ("diff_long_window", "diff", {"base": V6E, "treatment": V6E, "step_window": "1" * 65}),
    ("find_bad_flag", "find_traces", {"path": VLLM, "all_runs": "maybe"}),
    ("diff_unknown_arg", "diff", {"base": V6E, "treatment": V6E, "by": "name"}),
    ("verify_unknown_arg", "verify", {"path": V6E, "checks": CHECKS, "check": "x"}),
    ("query_unknown_arg", "query", {"path": V6E, "sql": "SELECT 1", "top": 3}),
    ("find_unknown_arg", "find_traces", {"path": VLLM, "paths": VLLM}),
    ("schema_unknown_arg", "describe_schema", {"tables": "ops"}),
    ("schema_table", "describe_schema", {"table": "steps"}),
    ("schema_v6e_table", "describe_schema", {"path": V6E, "table": "hlo_edges"}),
    ("schema_bad_table", "describe_schema", {"table": "nosuch"}),
    ("schema_memory_no_path", "describe_schema", {"table": "memory"}),
    ("schema_hlo_edges_no_path", "describe_schema", {"table": "hlo_edges"}),
    ("schema_v6e_bad_table", "describe_schema", {"path": V6E, "table": "nosuch"}),
    ("schema_v6e_memory", "describe_schema", {"path": V6E, "table": "memory"}),
    ("schema_v6e_memory_events", "describe_schema", {"path": V6E, "table": "memory_events"}),
]

#: (name, tool, arguments, section): tables read page by page, following next_offset
PAGED = [
    ("pages_v6e_records", "analyze", {"path": V6E, "section": "steps.records"}, "steps.records"),
    ("pages_v6e_overlap", "analyze", {"path": V6E, "section": "overlap.steps", "top": 150}, "overlap.steps"),
    ("pages_vllm_query", "query", {"path": VLLM, "sql": SQL + " LIMIT 1000", "limit": 10000}, "result"),
]

#: bytes an answer may take
MAX_BYTES = 32 * 1024

#: the checkout under test
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def cli(capsys):
    """The command line in this process, caches off (so it computes what the server did):
    (exit code, stdout)."""
    from traceview.cli import main

    def run(*argv):
        rc = main([*argv, "--no-cache"])
        return rc, capsys.readouterr().out
    return run


@pytest.fixture(scope="module")
def session(shared_traces, tmp_path_factory):
    """Every call of :data:`CALLS`, made over one server subprocess: {name: (is_error,
    text)}, plus the tool list and the scratch folders."""
    scratch = tmp_path_factory.mktemp("mcp_root")
    outside = tmp_path_factory.mktemp("mcp_outside")
    shutil.copy(shared_traces / GEMM, outside / "copy.xplane.pb")
    os.symlink(outside / "copy.xplane.pb", scratch / "escape.xplane.pb")  # a link out of the roots
    (scratch / "profiles").mkdir()
    os.symlink(outside / "copy.xplane.pb", scratch / "profiles" / "h.xplane.pb")  # found by discovery
    dangling_hlo_refs(scratch / "dangling")  # read with a warning
    before = sorted((p, p.stat().st_mtime_ns) for p in scratch.rglob("*"))
    # the SDK passes the server a few environment variables only: PYTHONPATH makes it import
    # this checkout, not whichever traceview the interpreter has installed
    env = {**get_default_environment(),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    params = StdioServerParameters(command=sys.executable, args=["-m", "traceview.cli", "mcp", "--root",
                                                                 str(shared_traces), "--root", str(scratch),
                                                                 "--root", str(ROOT / "fixtures"), "--query-memory", "0.5"],
                                   cwd=str(scratch), env=env)

    async def talk():
        out = {}
        async with stdio_client(params) as streams:
            async with ClientSession(*streams) as s:
                await s.initialize()
                out["_tools"] = (await s.list_tools()).tools
                for name, tool, args in CALLS:
                    args = {k: v.replace("SCRATCH", str(scratch)).replace("FIXTURES", str(ROOT / "fixtures"))
                            if isinstance(v, str) else v for k, v in args.items()}
                    r = await s.call_tool(tool, args, read_timeout_seconds=300)
                    out[name] = (r.is_error, "".join(c.text for c in r.content if getattr(c, "type", "") == "text"))
                for name, tool, args, section in PAGED:
                    pages, offset = [], 0
                    while offset is not None and len(pages) < 100:
                        r = await s.call_tool(tool, {**args, "offset": offset}, read_timeout_seconds=300)
                        text = "".join(c.text for c in r.content if getattr(c, "type", "") == "text")
                        assert not r.is_error, text
                        pages.append(text)
                        got = json.loads(text)
                        offset = (got["rows"]["result"] if section == "result" else got["rows"])["next_offset"]
                    out[name] = pages
        return out

    res = anyio.run(talk)
    res["_written"] = sorted((p, p.stat().st_mtime_ns) for p in scratch.rglob("*")) != before
    res["_scratch"] = scratch
    return res


def _ok(session, name) -> dict:
    err, text = session[name]
    assert not err, text
    return json.loads(text)


def test_tools_listed_with_schemas(session):
    tools = {t.name: t for t in session["_tools"]}
    assert set(tools) == {"find_traces", "analyze", "diff", "verify", "query", "describe_schema"}
    a = tools["analyze"].input_schema
    assert a["required"] == ["path"]
    assert [t.get("maximum") for t in a["properties"]["top"]["anyOf"]] == [1000, None]
    assert a["properties"]["offset"]["minimum"] == 0 and "section" in a["properties"]
    assert tools["verify"].input_schema["properties"]["checks"]["type"] == "array"
    assert all("step_window" in tools[n].input_schema["properties"] for n in ("diff", "verify"))
    assert all(t.description for t in tools.values())
    assert all(t.input_schema["additionalProperties"] is False for t in tools.values())


def test_choices_are_the_command_lines(session):
    """A tool argument that is a choice on the command line lists exactly the choices of the
    command's own parser as its enum (analyze's by: all five of analyze --by)."""
    from traceview.cli import build_parser

    tools = {t.name: t for t in session["_tools"]}
    assert tools["analyze"].input_schema["properties"]["by"]["enum"] == ["shape", "name", "program", "program-shape",
                                                                         "kind"]
    command = {"find_traces": None, "analyze": "analyze", "diff": "diff", "verify": "verify", "query": "query",
               "describe_schema": "query"}
    assert set(command) == set(tools)
    checked = []
    for name, cmd in command.items():
        if cmd is None:
            continue
        actions = {a.dest: a for a in build_parser(only=cmd).commands[cmd]._actions}
        for arg, sch in tools[name].input_schema["properties"].items():
            if arg in actions and actions[arg].choices:
                assert sch.get("enum") == list(actions[arg].choices), (name, arg)
                checked.append((name, arg))
    assert checked == [("analyze", "by")]


def test_by_takes_every_cli_choice(session, shared_traces, cli):
    rc, out = cli("analyze", str(shared_traces / V6E), "--format", "json", "--top", "3", "--by", "kind")
    assert rc == 0
    got = _ok(session, "analyze_v6e_by_kind")
    assert _without_age(got) == _without_age(json.loads(out))
    assert got["rows"]["ops"] == {"shown": 3, "total": 5}
    rc, out = cli("analyze", str(shared_traces / V6E), "--format", "json", "--by", "program-shape")
    want = json.loads(out)["ops"]
    got = _ok(session, "analyze_v6e_by_program_shape")
    assert got["ops"] == want and got["rows"]["total"] == len(want) == 17
    # a value the command line does not take: refused in the library's words (build_report's), not pydantic's
    from traceview.analysis.report import OP_TABLE_KEYS
    from traceview.cli.mcp_server import cli_option

    assert list(OP_TABLE_KEYS) == cli_option("analyze", "by").choices
    err, text = session["analyze_bad_by"]
    assert err and text.endswith("unknown op table key 'nosuch': expected shape, name, program, program-shape or kind")
    assert "Input should be" not in text and "\n" not in text


@pytest.mark.parametrize("name,msg", [
    ("analyze_unknown_arg", "analyze: unknown argument 'unknown_arg'; analyze takes path, section, offset, top, by, "
                            "run, device, filter, steps, expect_batch"),
    ("diff_unknown_arg", "diff: unknown argument 'by'; diff takes base, treatment, top, section, offset, step_window"),
    ("verify_unknown_arg", "verify: unknown argument 'check'; verify takes path, checks, base, section, offset, "
                           "step_window"),
    ("query_unknown_arg", "query: unknown argument 'top'; query takes path, sql, limit, offset, steps, expect_batch"),
    ("find_unknown_arg", "find_traces: unknown argument 'paths'; find_traces takes path, run, all_runs, section, "
                         "offset"),
    ("schema_unknown_arg", "describe_schema: unknown argument 'tables'; describe_schema takes path, table, section, "
                           "offset"),
])
def test_unknown_arguments_are_refused(session, name, msg):
    err, text = session[name]
    assert err and text == msg


def test_describe_schema_one_table(session, shared_traces, cli):
    got = _ok(session, "schema_table")
    assert [t["table"] for t in got["tables"]] == ["steps"]
    assert got["tables"][0]["columns"][0] == {"name": "run_ps", "doc": "program run time, ps"}
    rc, out = cli("query", str(shared_traces / V6E), "--tables", "--format", "json")
    want = json.loads(out)
    assert _ok(session, "schema_v6e_table") == {**want, "tables": [t for t in want["tables"] if t["table"] == "hlo_edges"]}
    assert _ok(session, "schema_v6e_table")["tables"][0]["rows"] == 35
    err, text = session["schema_bad_table"]
    assert err and "unknown table 'nosuch'; tables: ops, module_runs, programs, step_markers, populations" in text
    assert "\n" not in text
    # without a path, a table only a profile has is named as such (its columns are the profile's), not unknown
    err, text = session["schema_hlo_edges_no_path"]
    assert err and text.endswith("the columns of 'hlo_edges' depend on the profile: give path=")
    assert "hlo_edges" in [t["table"] for t in want["tables"]]
    # the memory tables are documented: without a path their columns and meanings, as with one
    got = _ok(session, "schema_memory_no_path")["tables"]
    assert [t["table"] for t in got] == ["memory"] and got[0]["doc"].startswith("one device memory allocator")
    documented = {c["name"]: c["doc"] for c in got[0]["columns"]}
    assert documented["peak_in_use_bytes"] == "max over the events of heap + stack bytes (peakBytesInUse)"
    err, text = session["schema_v6e_bad_table"]  # a profile's own tables: memory_events, hlo_edges, ...
    names = ", ".join(t["table"] for t in want["tables"])
    assert err and text.endswith(f"unknown table 'nosuch'; tables: {names}") and "hlo_edges" in names


def test_memory_tables_have_column_docs(session, shared_traces, cli):
    """describe_schema of the v6e trace's memory tables: every column has its meaning, as the
    other tables' columns do (memory's 18 columns were all "")."""
    got = _ok(session, "schema_v6e_memory")["tables"][0]
    assert got["table"] == "memory" and got["rows"] == 4 and len(got["columns"]) == 18
    assert all(c["doc"] for c in got["columns"]), [c["name"] for c in got["columns"] if not c["doc"]]
    cols = {c["name"]: c for c in got["columns"]}
    assert cols["capacity_bytes"] == {"name": "capacity_bytes", "dtype": "Int64",
                                      "doc": "heap + stack + free bytes at the peak (memoryCapacity; null: unknown)"}
    events = _ok(session, "schema_v6e_memory_events")["tables"][0]
    assert len(events["columns"]) == 17 and all(c["doc"] for c in events["columns"])
    assert {c["name"]: c["doc"] for c in events["columns"]}["lifetime_peak_bytes"] == (
        "the allocator's peak bytes in use so far (peak_bytes_in_use)")
    # the command line lists the same, every memory table documented
    rc, out = cli("query", str(shared_traces / V6E), "--tables", "--format", "json")
    tables = {t["table"]: t for t in json.loads(out)["tables"]}
    for name in ("memory", "memory_alive_at_peak", "memory_steps", "memory_events"):
        assert tables[name]["doc"] and all(c["doc"] for c in tables[name]["columns"]), name


_AGE = re.compile(r"\d+ (s|min|h|days) old")


def _without_age(doc: dict) -> dict:
    lines = doc["provenance"]["lines"]
    assert any(_AGE.search(line) for line in lines)  # the age is there to be masked
    return {**doc, "provenance": {**doc["provenance"], "lines": [_AGE.sub("AGE old", x) for x in lines]}}


def test_analyze_equals_cli_json(session, shared_traces, cli):
    rc, out = cli("analyze", str(shared_traces / V6E), "--format", "json", "--top", "3", "--steps", "100")
    assert rc == 0
    got = _ok(session, "analyze_v6e")
    assert "truncated" not in got
    # the provenance line says how old the file is ("3 min old"); the two calls can straddle
    # a minute, so the age alone is compared loosely
    assert _without_age(got) == _without_age(json.loads(out))
    assert got["rows"]["ops"] == {"shown": 3, "total": 17}
    assert got["ops"][0]["op_name"] == "copy-done.4"
    assert got["occurrence_checks_summary"] == json.loads(out)["occurrence_checks_summary"] is not None


def test_analyze_section_equals_cli_section(session, shared_traces, cli):
    rc, out = cli("analyze", str(shared_traces / VLLM), "--format", "json", "--top", "4")
    cli = json.loads(out)
    got = _ok(session, "analyze_vllm_ops")
    assert got == {"section": "ops", "rows": {"offset": 0, "shown": 4, "total": 3454, "remaining": 3450,
                                              "next_offset": 4}, "ops": cli["ops"]}
    assert cli["rows"]["ops"] == {"shown": 4, "total": 3454}
    err, text = session["analyze_bad_section"]
    assert err and "unknown section 'nope'; sections: traceview, top, provenance, warnings" in text
    assert "steps.records" in text and "\n" not in text
    err, text = session["offset_without_section"]
    assert err and "offset pages through a section: give section=NAME too" in text


def test_diff_equals_cli_json(session, shared_traces, cli):
    rc, out = cli("diff", str(shared_traces / GEMM), str(shared_traces / CONV), "--format", "json", "--top", "5")
    assert rc == 0
    got = _ok(session, "diff_mi300x")
    assert got == json.loads(out)
    assert got["rows"]["populations"]["shown"] == 5


def test_verify_equals_cli_json(session, shared_traces, cli):
    rc, out = cli("verify", str(shared_traces / V6E), "--format", "json", *[a for c in CHECKS for a in ("-c", c)])
    assert rc == 1  # one check fails: a result, not a tool error
    got = _ok(session, "verify_v6e")
    assert got == json.loads(out)
    assert [r["ok"] for r in got["results"]] == [True, False]


def test_diff_and_verify_answers_carry_the_reading_warnings(session, shared_traces, cli):
    """The diff and verify tools' answers had no ``warnings`` (analyze's had): a profile read
    with a warning said it in the server's log only."""
    dangling = str(session["_scratch"] / "dangling")
    rc, out = cli("diff", dangling, str(shared_traces / ATTN), "--format", "json", "--top", "5")
    assert rc == 0
    got = _ok(session, "diff_dangling")
    assert got == json.loads(out)
    rc, out = cli("verify", dangling, "--format", "json", "-c", "op matching fusion present")
    assert rc == 0
    checked = _ok(session, "verify_dangling")
    assert checked == json.loads(out)
    for answer in (got, checked):
        (w,) = answer["warnings"]
        assert w.startswith(dangling) and "/device:GPU:0: 5 event(s)" in w and "dangling ref_value" in w, w


def test_query_equals_cli_json(session, shared_traces, cli):
    rc, out = cli("query", str(shared_traces / VLLM), SQL, "--format", "json", "--top", "7")
    assert rc == 0
    got = _ok(session, "query_vllm")
    want = json.loads(out)
    assert want["rows"] == {"result": {"shown": 7, "total": 3454}}
    assert got["rows"] == {"result": {"offset": 0, "shown": 7, "total": 3454, "remaining": 3447, "next_offset": 7}}
    assert {**got, "rows": None} == {**want, "rows": None}
    err, text = session["query_bad"]
    assert err and "unknown table 'nope'" in text and "\n" not in text


def test_query_past_its_memory_limit_is_a_tool_error_and_the_server_goes_on(session, shared_traces):
    """The ORDER BY over a 4-way cross join aborted the server (polars' failed allocation); it
    runs in a child under --query-memory: one line, and the next call is answered. A plain
    SELECT over the same join yields its page and the exact total (the rows shown only)."""
    err, text = session["query_huge"]
    assert err and text == (f"Error executing tool query: {shared_traces / CONV}: the query exceeded its memory limit (0.5 GiB above the "
                            "tables; --query-memory raises it)")
    assert _ok(session, "query_after_huge")["result"] == [{"n": 198}]
    got = _ok(session, "query_cross_plain")
    first = __import__("traceview").load(shared_traces / CONV).ops["op_name"][0]
    assert got["result"] == [{"op_name": first}] * 2
    assert got["rows"]["result"] == {"offset": 0, "shown": 2, "total": 198 ** 4, "remaining": 198 ** 4 - 2,
                                     "next_offset": 2}


def test_query_takes_the_occurrence_check_options(session, shared_traces):
    """steps / expect_batch reach the occurrence_checks table, as Profile.sql(q, steps=...,
    expect_batch=...) computes it; a bad value is a one-line tool error."""
    import traceview

    want = traceview.load(shared_traces / V6E).sql(CHECKS_Q, steps=100, expect_batch=5)
    got = _ok(session, "query_checks")
    assert got["result"] == want.to_dicts() and got["rows"]["result"]["total"] == 17
    assert [(r["op_name"], r["per_device_max"]) for r in got["result"] if not r["steps_ok"]] == [
        ("all-reduce", 3), ("broadcast.2", 1)]
    err, text = session["query_checks_bad"]
    assert err and text == "query: argument 'steps': expected a positive integer, got 0"


@pytest.mark.parametrize("name,msg", [
    ("analyze_top_negative", "analyze: argument 'top': expected an integer from 1 to 1000, got -1"),
    ("analyze_top_over", "analyze: argument 'top': expected an integer from 1 to 1000, got 1001"),
    ("analyze_top_text", "analyze: argument 'top': expected an integer from 1 to 1000, got 'abc'"),
    ("bad_arg", "analyze: argument 'top': expected an integer from 1 to 1000, got 0"),
    ("analyze_offset_negative", "analyze: argument 'offset': expected a non-negative integer, got -3"),
    ("analyze_expect_batch_half", "analyze: argument 'expect_batch': expected a positive integer, got 2.5"),
    ("analyze_no_path", "analyze: missing argument 'path'"),
    ("query_limit_zero", "query: argument 'limit': expected an integer from 1 to 10000, got 0"),
    ("query_empty_sql", "query: argument 'sql': expected a non-empty string"),
    ("verify_no_checks", "verify: argument 'checks': expected at least 1 item, got 0"),
    ("verify_check_not_text", "verify: argument 'checks': item 0: expected a string, got 3"),
    ("diff_long_window", "diff: argument 'step_window': expected at most 64 characters, got 65"),
    ("find_bad_flag", "find_traces: argument 'all_runs': expected true or false, got 'maybe'"),
])
def test_bad_values_refused_in_traceviews_words(session, name, msg):
    """Every tool's integer, string, list and boolean arguments: a value the schema does not
    take is one line in traceview's words (as the command line's 'expected a positive
    integer'), never pydantic's validation text."""
    err, text = session[name]
    assert err and text == msg
    assert "validation error" not in text and "Input should be" not in text


def test_values_the_sdk_converts_still_pass(session):
    """A number sent as text is taken as the SDK takes it (limit "2": two rows)."""
    got = _ok(session, "query_limit_text_number")
    assert got["result"] == [{"n": 1}] and got["top"] == 2


def test_find_traces_and_schema(session, shared_traces, cli):
    f = _ok(session, "find_vllm")
    assert [x["format"] for x in f["files"]] == ["trace_json"]
    assert f["provenance"]["runs"] == ["2026_01_11_21_26_41"]
    # a folder reaching outside the roots through a symbolic link is refused whole: no listing
    err, text = session["find_escaping"]
    assert err and "h.xplane.pb: resolves outside the server's roots" in text and "\n" not in text
    s = {t["table"]: t for t in _ok(session, "schema")["tables"]}
    assert {"ops", "populations", "steps", "roofline"} <= set(s)
    assert any(c["name"] == "self_ps" and c["doc"] for c in s["ops"]["columns"])
    rc, out = cli("query", str(shared_traces / V6E), "--tables", "--format", "json")
    assert _ok(session, "schema_v6e") == json.loads(out)


@pytest.mark.parametrize("name,msg", [
    ("outside", "/etc: outside the server's roots"),
    ("dotdot", "../../../etc/passwd: outside the server's roots"),
    ("symlink_file", "escape.xplane.pb: outside the server's roots"),
    ("symlink_inside_folder", "h.xplane.pb: resolves outside the server's roots"),
    ("missing", "no_such.xplane.pb: no such file or folder"),
    ("bad_arg", "top"),
    ("diff_empty_window", "--step-window 1000:2000 holds none of the trace's"),
    ("sql_reads_file", "SQL table functions that read files (read_csv) are refused"),
    ("sql_drop", "only SELECT"),
])
def test_refusals_are_one_line_tool_errors(session, name, msg):
    err, text = session[name]
    assert err
    assert msg in text
    assert "\n" not in text and "Traceback" not in text


def test_every_answer_fits_32_kb(session):
    sizes = {name: len(session[name][1].encode("utf-8")) for name, _, _ in CALLS}
    sizes |= {f"{name}[{i}]": len(p.encode("utf-8")) for name, *_ in PAGED for i, p in enumerate(session[name])}
    assert max(sizes.values()) <= MAX_BYTES, sizes


def _at(payload: dict, dotted: str):
    node = payload
    for part in dotted.split("."):
        node = node[part]
    return node


def _holds_what_rows_say(got: dict) -> None:
    """``rows`` states the rows each list of the answer holds; ``paging.cut`` names each list
    holding part of its table, with the same counts."""
    for path, n in got["rows"].items():
        assert len(_at(got, path)) == n["shown"], path
    for path, c in got["paging"]["cut"].items():
        assert len(_at(got, path)) == c["shown"] < c["total"] == c["shown"] + c["remaining"], path
        if path in got["rows"]:
            assert got["rows"][path] == {"shown": c["shown"], "total": c["total"]}, path


def test_default_analyze_is_cut_to_fit_and_says_so(session, shared_traces, cli):
    got = _ok(session, "analyze_vllm_default")
    _holds_what_rows_say(got)
    cut = got["paging"]["cut"]
    # the command's 20 rows of the op table did not fit: fewer shown, the real total stated
    assert cut["ops"]["total"] == 3454 == cut["ops"]["shown"] + cut["ops"]["remaining"]
    assert len(got["ops"]) == cut["ops"]["shown"] < 20
    assert got["paging"]["max_bytes"] == MAX_BYTES and "section=" in got["paging"]["more"]
    rc, out = cli("analyze", str(shared_traces / VLLM), "--format", "json", "--top", "20")
    want = json.loads(out)
    assert got["ops"] == want["ops"][:len(got["ops"])]
    assert got["peaks"] == want["peaks"]
    assert {p: n["total"] for p, n in got["rows"].items()} == {p: n["total"] for p, n in want["rows"].items()}
    # the lead tables keep the most rows; every other list keeps at least one
    assert len(got["ops"]) > max(len(_at(got, p)) for p in cut if p not in ("ops", "provenance.lines"))
    assert all(len(_at(got, p)) >= 1 for p in cut)
    steps = _ok(session, "analyze_v6e_steps")  # a section that is an object: its lists cut to fit
    assert steps["section"] == "steps" and steps["steps"]["method"]
    assert steps["paging"]["cut"]["steps.records"]["total"] == 400
    assert steps["steps"]["records_rows"] == {"shown": len(steps["steps"]["records"]), "total": 400}


def test_default_analyze_fills_its_budget(session):
    """The v6e overview holds all 4 devices and all 17 ops within 32 KB (only the per-step
    tables are cut); an explicit top is honoured for the lead tables; on the GEMM sweep and
    greedy_b4 ``rows`` states the rows the answer holds."""
    got = _ok(session, "analyze_v6e_default")
    _holds_what_rows_say(got)
    assert len(session["analyze_v6e_default"][1].encode()) <= MAX_BYTES
    assert len(got["devices"]) == 4 and len(got["ops"]) == 17 and got["ops"][0]["op_name"] == "copy-done.4"
    assert got["rows"]["ops"] == {"shown": 17, "total": 17} and "ops" not in got["paging"]["cut"]
    assert got["paging"]["cut"]["steps.records"] == {"shown": len(got["steps"]["records"]), "total": 400,
                                                     "remaining": 400 - len(got["steps"]["records"])}
    assert got["steps"]["records"][0]["program_id"] == "12190760917235803885"
    top5 = _ok(session, "analyze_v6e_top5")
    _holds_what_rows_say(top5)
    assert len(top5["ops"]) == 5 and top5["rows"]["ops"] == {"shown": 5, "total": 17}
    assert top5["paging"]["cut"]["ops"] == {"shown": 5, "total": 17, "remaining": 12}
    gemm = _ok(session, "analyze_gemm_default")
    _holds_what_rows_say(gemm)
    assert gemm["rows"]["ops"] == {"shown": 16, "total": 16} and len(gemm["ops"]) == 16
    greedy = _ok(session, "analyze_greedy_default")
    _holds_what_rows_say(greedy)
    assert greedy["rows"]["ops"] == {"shown": len(greedy["ops"]), "total": 216}
    assert greedy["paging"]["cut"]["roofline"]["total"] == 210


def test_query_answer_keeps_ids_exact(session):
    """A JavaScript client parses numbers as doubles: the 64-bit id arrives as a string."""
    err, text = session["query_v6e_id"]
    assert not err, text
    got = json.loads(text, parse_int=float)
    assert got["result"] == [{"program_id": "12190760917235803885", "module": "jit_f"}]


@pytest.mark.parametrize("name", [p[0] for p in PAGED])
def test_paging_returns_every_row_once(session, shared_traces, cli, name):
    _, tool, args, section = next(p for p in PAGED if p[0] == name)
    pages = [json.loads(t) for t in session[name]]
    if tool == "query":
        rc, out = cli("query", str(shared_traces / args["path"]), args["sql"], "--format", "json")
        want = json.loads(out)["result"]
        counts = [p["rows"]["result"] for p in pages]
        rows = [r for p in pages for r in p["result"]]
    else:
        rc, out = cli("analyze", str(shared_traces / args["path"]), "--format", "json", "--all-rows")
        node = json.loads(out)
        for part in section.split("."):
            node = node[part]
        want = node
        counts = [p["rows"] for p in pages]
        rows = [r for p in pages for r in p[section]]
    assert rc == 0 and len(pages) > 1  # more than one page: the table does not fit in one answer
    assert rows == want  # every row once, in order
    assert [c["offset"] for c in counts] == [0] + [c["next_offset"] for c in counts[:-1]]
    assert all(c["total"] == len(want) == c["offset"] + c["shown"] + c["remaining"] for c in counts)
    assert counts[-1]["remaining"] == 0 and counts[-1]["next_offset"] is None
    if "top" in args:
        assert max(c["shown"] for c in counts) <= args["top"]


def test_fit_and_page_bound_any_payload():
    from traceview.cli.mcp_server import fit, page

    size = lambda o: len(json.dumps(o, separators=(",", ":"), ensure_ascii=False).encode())
    payload = {"rows": {"t": {"shown": 300, "total": 900}}, "t": [{"x": "y" * 100, "i": i} for i in range(300)],
               "s": {"u": list(range(5000))}, "big": "z" * 9000}
    got = fit(payload, max_bytes=4000)
    assert size(got) <= 4000
    assert got["paging"]["cut"]["t"] == {"shown": len(got["t"]), "total": 900, "remaining": 900 - len(got["t"])}
    assert got["paging"]["omitted"] == {"big": 9002} and got["big"] is None
    seen, offset = [], 0
    while offset is not None:
        p = page(payload["t"][offset:], offset=offset, total=300, max_bytes=2000,
                 wrap=lambda rows, counts: {"rows": counts, "t": rows})
        assert size(p) <= 2000
        seen += [r["i"] for r in p["t"]]
        offset = p["rows"]["next_offset"]
    assert seen == list(range(300))


def test_nothing_written_under_the_roots(session):
    assert session["_written"] is False


def test_bound_cuts_and_states_totals():
    from traceview.cli.mcp_server import bound

    got, cuts = bound({"a": list(range(10)), "s": "x" * 50, "n": {"t": "ok"}}, max_items=3, max_chars=8)
    assert got == {"a": [0, 1, 2], "s": "x" * 8 + "…", "n": {"t": "ok"}}
    assert cuts == {"$.a": 10, "$.s": 50}


def test_roots_confinement(tmp_path):
    from traceview.cli.mcp_server import PathRefused, Roots

    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "t.xplane.pb").write_bytes(b"")
    (tmp_path / "rx").mkdir()  # a sibling whose name extends the root's: not inside it
    (tmp_path / "rx" / "t.xplane.pb").write_bytes(b"")
    roots = Roots([str(tmp_path / "r")])
    assert roots.resolve("t.xplane.pb") == str(Path(os.path.realpath(tmp_path / "r" / "t.xplane.pb")))
    with pytest.raises(PathRefused, match="outside"):
        roots.resolve(str(tmp_path / "rx" / "t.xplane.pb"))
    with pytest.raises(PathRefused, match="outside"):
        roots.resolve("../rx/t.xplane.pb")


def test_missing_sdk_is_a_usage_error(tmp_path, monkeypatch):
    from traceview.cli.mcp_server import serve
    from traceview.errors import UsageError

    monkeypatch.setitem(sys.modules, "mcp.server.mcpserver", None)  # import fails as if not installed
    with pytest.raises(UsageError, match=r"needs the MCP SDK: pip install 'traceview\[mcp\]'"):
        serve([str(tmp_path)])
    with pytest.raises(UsageError, match="not a folder"):
        serve([str(tmp_path / "nope")])


def test_the_extra_is_named_where_a_user_meets_mcp(capsys):
    """``traceview mcp --help``, the README's mention and the exit-code table say that the
    server needs the ``mcp`` extra, and what its absence exits with (2, as ``engine``'s)."""
    from traceview.cli import main

    assert main(["mcp", "--help"]) == 0
    assert "pip install 'traceview[mcp]'" in " ".join(capsys.readouterr().out.split())
    root = Path(__file__).resolve().parents[1]
    readme = " ".join((root / "README.md").read_text().split())
    assert "`mcp` (an MCP server; extra `[mcp]`)" in readme
    row2 = next(ln for ln in (root / "docs" / "exit-codes.md").read_text().splitlines() if ln.startswith("| 2 |"))
    assert "`traceview mcp` without `traceview[mcp]`" in row2


def test_a_failed_tool_call_leaves_the_servers_stderr_quiet(shared_traces, tmp_path):
    """A refused call is a one-line tool error for the client; the server's stderr gets no
    block of the SDK's INFO log lines per failure (it did: 'INFO Tool 'analyze' failed: ...'
    over four lines, twice for two calls)."""
    env = {**get_default_environment(),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    params = StdioServerParameters(command=sys.executable, args=["-m", "traceview.cli", "mcp", "--root",
                                                                 str(shared_traces)], cwd=str(tmp_path), env=env)
    log = tmp_path / "stderr.txt"

    async def talk():
        with open(log, "w") as errlog:
            async with stdio_client(params, errlog=errlog) as streams:
                async with ClientSession(*streams) as s:
                    await s.initialize()
                    r = await s.call_tool("analyze", {"path": str(tmp_path / "elsewhere")})
                    return r.is_error, r.content[0].text

    is_error, text = anyio.run(talk)
    assert is_error and "outside the server's roots" in text and len(text.splitlines()) == 1
    assert "failed" not in log.read_text() and "INFO" not in log.read_text(), log.read_text()
