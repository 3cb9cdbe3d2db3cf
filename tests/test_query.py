"""``traceview query`` and ``Profile.sql``: three questions a user asks in SQL, each equal to
the polars expression that computes the same, on the shared v6e and vLLM-on-TPU traces; the
output formats; bad SQL and unknown tables as usage errors (exit 2)."""

from __future__ import annotations

import os
import json

import polars as pl
import pytest
from polars.testing import assert_frame_equal

import traceview
from traceview.cli import main
from traceview.errors import UsageError


@pytest.fixture(scope="module")
def v6e(shared_traces):
    return traceview.load(shared_traces / "tpu_v6e_4chip_psum.xplane.pb")


@pytest.fixture(scope="module")
def vllm(shared_traces):
    return traceview.load(shared_traces / "vllm_tpu_qwen")


def test_top_populations_of_a_module_by_self_time(vllm):
    got = vllm.sql("SELECT op_name, shape, occurrences, self_ps FROM populations "
                   "WHERE array_contains(modules, 'jit_step_fun') ORDER BY self_ps DESC, op_name, shape LIMIT 5")
    want = (vllm.by_shape().filter(pl.col("modules").list.contains("jit_step_fun"))
            .sort(["self_ps", "op_name", "shape"], descending=[True, False, False])
            .select("op_name", "shape", "occurrences", "self_ps").head(5))
    assert got.height == 5
    assert_frame_equal(got, want)
    # the same question over the op events: self time summed per (name, shape) in that module
    ev = vllm.sql("SELECT op_name, shape, sum(self_ps) AS self_ps FROM ops WHERE module = 'jit_step_fun' "
                  "GROUP BY op_name, shape ORDER BY self_ps DESC, op_name, shape LIMIT 5")
    ev_want = (vllm.ops.filter(pl.col("module") == "jit_step_fun").group_by("op_name", "shape")
               .agg(pl.col("self_ps").sum()).sort(["self_ps", "op_name", "shape"], descending=[True, False, False])
               .head(5))
    assert_frame_equal(ev, ev_want)


@pytest.mark.parametrize("factor,expected", [(2.0, set()), (1.3, {"copy-start.1", "copy-start.3", "copy-start.5"})])
def test_ops_whose_mean_exceeds_their_median(v6e, factor, expected):
    """No population of the v6e trace has a mean over twice its median; at 1.3x three of the
    host-offload copy-starts do (their medians 1.25 ns, a few slow issues pull the means up)."""
    got = v6e.sql(f"SELECT op_name, shape, mean_ps, median_ps FROM populations WHERE mean_ps > {factor} * median_ps "
                  "ORDER BY op_name")
    want = (v6e.by_shape().filter(pl.col("mean_ps") > factor * pl.col("median_ps"))
            .select("op_name", "shape", "mean_ps", "median_ps").sort("op_name"))
    assert_frame_equal(got, want)
    assert set(got["op_name"]) == expected


def test_collectives_by_bytes(v6e, vllm):
    q = ("SELECT op_kind, shape, sum(count) AS events, sum(bytes_accessed * count) AS bytes FROM ops "
         "WHERE op_kind LIKE 'all-%' GROUP BY op_kind, shape ORDER BY bytes DESC, op_kind, shape")
    for prof in (v6e, vllm):
        got = prof.sql(q)
        want = (prof.ops.filter(pl.col("op_kind").str.starts_with("all-")).group_by("op_kind", "shape")
                .agg(pl.col("count").sum().alias("events"), (pl.col("bytes_accessed") * pl.col("count")).sum()
                     .alias("bytes"))
                .sort(["bytes", "op_kind", "shape"], descending=[True, False, False]))
        assert_frame_equal(got, want)
    got = v6e.sql(q)
    # the psum: 12 all-reduce events of f32[5,1024,1024,256], each reading and writing the array
    assert got.rows() == [("all-reduce", "f32[5,1024,1024,256] <- f32[5,1024,1024,256]", 12,
                           12 * 2 * 4 * 5 * 1024 * 1024 * 256)]
    assert set(vllm.sql(q)["op_kind"]) == {"all-reduce", "all-gather"}


def test_tables_and_errors(v6e):
    from traceview.analysis.sql import describe, tables

    rep = v6e.analyze()
    t = tables(rep, v6e)
    names = set(t.names)
    assert {"ops", "module_runs", "programs", "populations", "roofline", "kernels", "sources", "steps",
            "families", "devices"} <= names
    assert "table" not in names  # the --by table is populations, not a second copy
    d = {x["table"]: x for x in describe(t)}
    assert d["populations"]["rows"] == rep.by_shape.height == 17
    assert {c["name"] for c in d["ops"]["columns"]} == set(v6e.ops.columns)
    assert next(c for c in d["roofline"]["columns"] if c["name"] == "intensity")["doc"].endswith("FLOP/byte")
    assert v6e.sql("SELECT count(*) AS n FROM steps").item() == rep.steps.steps.height == 400
    with pytest.raises(UsageError, match="unknown table 'nope'.*populations"):
        v6e.sql("SELECT * FROM nope")
    with pytest.raises(UsageError, match=r"^SQL error: unable to find column \"zz\""):
        v6e.sql("SELECT zz FROM populations")
    with pytest.raises(UsageError, match="only SELECT"):
        v6e.sql("SELEC 1")
    with pytest.raises(UsageError, match="SQL error: sql parser error"):
        v6e.sql("SELECT FROM WHERE 1")
    # FROM inside an expression is not a table
    assert v6e.sql("SELECT TRIM(LEADING 'copy-' FROM op_name) AS t FROM populations LIMIT 1").item() == "done.4"


def test_generic_tables_take_new_report_sections(v6e):
    """Report sections are tables without an edit to the names: the communication section's
    collectives frame is the ``communication`` table (the v6e trace's 12 all-reduces), and a
    list of dataclasses (a section added to the Report) is one row per item, an empty list an
    empty table with the item's fields."""
    import dataclasses

    from traceview.analysis.sql import report_tables

    @dataclasses.dataclass
    class F:
        id: str
        severity: str
        evidence: dict

    rep = v6e.analyze()
    got = report_tables(rep)
    comm = got["communication"]
    assert comm.equals(rep.communication.collectives)
    ar = comm.filter(pl.col("kind") == "all-reduce")
    assert ar.height == 1 and ar["executions"].to_list() == [12] and ar["group_size"].to_list() == [2]
    Rep2 = dataclasses.make_dataclass("Rep2", [("extra_items", list, dataclasses.field(default=None))],
                                      bases=(type(rep),))
    rep2 = Rep2(**{f.name: getattr(rep, f.name) for f in dataclasses.fields(rep)},
                extra_items=[F("x1", "warn", {"a": 1}), F("x2", "info", {})])
    got = report_tables(rep2)
    assert got["extra_items"]["id"].to_list() == ["x1", "x2"]
    assert got["extra_items"]["evidence"].to_list() == ['{"a": 1}', "{}"]


def test_cli_formats_and_exit_codes(v6e, shared_traces, tmp_path, capsys):
    path = str(shared_traces / "tpu_v6e_4chip_psum.xplane.pb")
    q = "SELECT op_name, shape, modules, self_ps FROM populations ORDER BY self_ps DESC, op_name"
    want = v6e.sql(q)
    assert main(["query", path, q, "--format", "json", "--top", "3"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["rows"] == {"result": {"shown": 3, "total": want.height}}
    assert out["result"] == want.head(3).to_dicts()
    assert out["columns"]["modules"] == "List(String)"
    assert main(["query", path, q, "-o", str(tmp_path / "r.csv")]) == 0
    csv = pl.read_csv(tmp_path / "r.csv")
    assert csv["op_name"].to_list() == want["op_name"].to_list()
    assert csv["modules"].to_list() == [";".join(m) for m in want["modules"]]
    assert main(["query", path, q, "-o", str(tmp_path / "r.parquet")]) == 0
    assert_frame_equal(pl.read_parquet(tmp_path / "r.parquet"), want)
    assert main(["query", path, q, "--top", "2"]) == 0
    text = capsys.readouterr().out
    assert "copy-done.4" in text and "2 of 17 rows" in text
    assert main(["query", path, "SELECT step, device FROM steps"]) == 0
    assert capsys.readouterr().out.endswith("\n25 of 400 rows\n")  # table output: 25 rows unless --top
    assert main(["query", path, "--tables"]) == 0
    assert "populations" in capsys.readouterr().out
    (tmp_path / "plugins" / "profile").mkdir(parents=True)
    for argv, msg in ((["query", path, "SELECT * FROM nope"], "unknown table 'nope'"),
                      (["query", path, "SELECT zz FROM ops"], "SQL error"),
                      (["query", path], "no SQL query given"),
                      (["query", path, q, "--format", "parquet"], "needs -o FILE"),
                      (["query", path, q, "-o", str(tmp_path / "plugins" / "profile" / "out.csv")],
                       "never writes into a profile folder")):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert msg in err and err.count("\n") == 1 and "Traceback" not in err


def test_queries_read_only_traceview_tables(v6e, tmp_path, capsys):
    """polars' SQL can read files (``read_csv``, ``read_parquet``): refused, in any spelling,
    as are statements other than SELECT/WITH and several statements; a function name inside a
    string literal is only text."""
    secret = tmp_path / "secret.csv"
    secret.write_text("a,b\n1,2\n")
    for q in (f"SELECT * FROM read_csv('{secret}')", f'SELECT * FROM "read_csv"(\'{secret}\')',
              f"select * from READ_PARQUET ('{secret}')", f"SELECT * FROM /* c */ read_json('{secret}')",
              "DROP TABLE ops", "SELECT 1 AS a; SELECT 2 AS b"):
        with pytest.raises(UsageError):
            v6e.sql(q)
    assert v6e.sql("SELECT 'read_csv(x)' AS t FROM populations LIMIT 1")["t"].to_list() == ["read_csv(x)"]
    capsys.readouterr()
    assert main(["query", str(v6e.discovery.root), f"SELECT * FROM read_csv('{secret}')", "--no-cache"]) == 2
    err = capsys.readouterr().err
    assert "read_csv" in err and "refused" in err and "1,2" not in err


def test_list_columns_of_any_type_print_as_table_and_csv(shared_traces, capsys):
    """A list column that is not of strings (an integer list, an empty result's list column)
    prints as ``;``-joined text in the table and the CSV, with exit 0 (it raised a polars
    error with a traceback)."""
    path = str(shared_traces / "tpu_v6e_4chip_psum.xplane.pb")
    for fmt in ("table", "csv"):
        assert main(["query", path, "SELECT [1, 2] AS x FROM ops LIMIT 2", "--format", fmt, "--no-cache"]) == 0
        out = capsys.readouterr().out
        assert out.count("1;2") == 2
        assert main(["query", path, "SELECT * FROM split_names", "--format", fmt, "--no-cache"]) == 0
        capsys.readouterr()


#: jit_f's 64-bit program id on the v6e trace (a double rounds it to 12190760917235804000)
JIT_F_ID = "12190760917235803885"


def test_ids_are_exact_decimal_strings_in_json(shared_traces, capsys):
    """A 64-bit program id goes into the JSON as a decimal string, exact for a reader that holds
    numbers as doubles (JavaScript, jq: ``parse_int=float``); pasted unquoted into SQL it
    selects its row. ``*_id`` columns are strings too (the all-reduce's channel 1); other
    integers stay numbers."""
    path = str(shared_traces / "tpu_v6e_4chip_psum.xplane.pb")
    assert main(["query", path, "SELECT program_id, module FROM programs WHERE module = 'jit_f'", "--format", "json",
                 "--no-cache"]) == 0
    out = json.loads(capsys.readouterr().out, parse_int=float)
    assert out["result"] == [{"program_id": JIT_F_ID, "module": "jit_f"}]
    assert out["columns"]["program_id"] == "UInt64"  # the SQL column's type: an integer
    assert main(["query", path, f"SELECT module, program_id, count(*) AS n FROM ops WHERE program_id = {JIT_F_ID} "
                 "GROUP BY module, program_id", "--format", "json", "--no-cache"]) == 0
    assert json.loads(capsys.readouterr().out)["result"] == [{"module": "jit_f", "program_id": JIT_F_ID, "n": 6000}]
    assert main(["query", path, "SELECT kind, channel_id, executions FROM communication", "--format", "json", "--no-cache"]) == 0
    assert json.loads(capsys.readouterr().out)["result"] == [{"kind": "all-reduce", "channel_id": "1", "executions": 12}]
    # the id quoted as in the JSON: a usage error that says to write it unquoted
    assert main(["query", path, f"SELECT * FROM programs WHERE program_id = '{JIT_F_ID}'", "--no-cache"]) == 2
    assert "write them unquoted" in capsys.readouterr().err


#: a 4-way cross join of the conv3d trace's 198 op events: 198**4 = 1,536,953,616 rows
CROSS4 = "FROM ops a CROSS JOIN ops b CROSS JOIN ops c CROSS JOIN ops d"


def _cli(*argv, timeout=120):
    """The real command line (its own process, as a user runs it): (exit code, stdout, stderr)."""
    import subprocess
    import sys
    from pathlib import Path

    p = subprocess.run([sys.executable, "-m", "traceview.cli", *argv], capture_output=True, text=True,
                       timeout=timeout, cwd=Path(__file__).resolve().parent.parent)  # this checkout's traceview
    return p.returncode, p.stdout, p.stderr


def test_displayed_rows_only_are_produced(shared_traces):
    """The displayed-row limit is pushed into the lazy plan: a plain SELECT over a 4-way cross
    join yields its first rows and the exact total, in about a second, not 1.5e9 rows."""
    from traceview.analysis.report import build_report
    from traceview.analysis.sql import execute, execute_head, tables

    conv = traceview.load(shared_traces / "mi300x_jax_conv3d.xplane.pb")
    first = conv.ops["op_name"][0]
    rc, out, err = _cli("query", str(shared_traces / "mi300x_jax_conv3d.xplane.pb"), f"SELECT a.op_name {CROSS4}",
                        "--format", "json", "--top", "3", "--no-cache")
    assert rc == 0, err
    got = json.loads(out)
    assert got["rows"] == {"result": {"shown": 3, "total": 198 ** 4}} and got["result"] == [{"op_name": first}] * 3
    t = tables(build_report(conv), conv)  # ordinary queries: the same rows and count as the whole result
    for q in ("SELECT op_name, self_ps FROM ops ORDER BY self_ps DESC, op_name", "SELECT count(*) AS n FROM ops",
              "SELECT op_kind, sum(self_ps) AS s FROM ops GROUP BY op_kind ORDER BY s DESC"):
        whole = execute(t, q)
        head, total = execute_head(t, q, 5)
        assert_frame_equal(head, whole.head(5))
        assert total == whole.height
    assert execute_head(t, "SELECT count(*) AS n FROM ops", 5)[0]["n"].to_list() == [198]


@pytest.mark.parametrize("how", ["cli", "in-process"])
def test_query_past_its_limits_is_one_line_exit_6(shared_traces, capsys, how):
    """An ORDER BY over the 4-way cross join (memory: polars aborted the process) and a
    DISTINCT count over it (time: 30 s) stop at --query-memory / --query-timeout with one line
    and exit 6, from the command line (the query in a fork) and in-process (a query server's
    fork: polars' pool runs here); the process goes on to answer the next query."""
    path = str(shared_traces / "mi300x_jax_conv3d.xplane.pb")
    cases = ((f"SELECT a.op_name {CROSS4} ORDER BY a.self_ps + d.self_ps", ["--query-memory", "0.5"],
              "the query exceeded its memory limit (0.5 GiB above the tables; --query-memory raises it)"),
             (f"SELECT count(DISTINCT a.self_ps + b.self_ps + c.self_ps + d.self_ps) AS n {CROSS4}",
              ["--query-timeout", "1"], "the query ran past its time limit (1 s; --query-timeout raises it)"))
    for q, limit, msg in cases:
        if how == "cli":
            rc, out, err = _cli("query", path, q, *limit, "--no-cache")
        else:
            rc = main(["query", path, q, *limit, "--no-cache"])
            out, err = capsys.readouterr()
        assert rc == 6 and out == ""
        assert err == f"traceview: error: {path}: {msg}\n"
    assert main(["query", path, "SELECT count(*) AS n FROM ops", "--format", "csv", "--no-cache"]) == 0
    assert capsys.readouterr().out == "n\n198\n"


#: the occurrence checks of the v6e trace (4 devices; the step count 100: each device ran each
#: jit_f population 100 times, the psum 3 times and the broadcast once)
CHECKS_Q = ("SELECT op_name, shape, occurrences, per_device_max, steps, steps_ok, has_batch FROM occurrence_checks "
            "ORDER BY op_name, shape")


def test_occurrence_checks_from_the_command_line(v6e, capsys):
    """``--steps`` / ``--expect-batch`` reach the occurrence_checks table from ``traceview
    query`` as from ``Profile.sql(q, steps=..., expect_batch=...)``, validated as analyze
    validates them (exit 2, one line)."""
    path = str(v6e.discovery.root)
    want = v6e.sql(CHECKS_Q, steps=100, expect_batch=5)
    assert want.height == 17 and want["has_batch"].all()
    assert [r for r in want.rows() if not r[5]] == [
        ("all-reduce", "f32[5,1024,1024,256] <- f32[5,1024,1024,256]", 12, 3, 100, False, True),
        ("broadcast.2", "f32[5,1024,1024,256] <- f32[]", 1, 1, 100, False, True)]
    assert main(["query", path, CHECKS_Q, "--steps", "100", "--expect-batch", "5", "--format", "json",
                 "--no-cache"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["result"] == want.to_dicts() and got["rows"]["result"] == {"shown": 17, "total": 17}
    assert main(["query", path, "SELECT sum(steps_ok::int) AS ok FROM occurrence_checks", "--steps", "jit_f=100",
                 "--format", "csv", "--no-cache"]) == 0
    assert capsys.readouterr().out == "ok\n15\n"
    for argv, msg in ((["--steps", "0"], "argument --steps: expected a positive integer"),
                      (["--steps", "3", "--steps", "4"], "--steps takes either one N"),
                      (["--steps", "nope=3"], "module 'nope' has no ops in this trace"),
                      (["--expect-batch", "x"], "argument --expect-batch")):
        assert main(["query", path, CHECKS_Q, *argv, "--no-cache"]) == 2
        err = capsys.readouterr().err
        assert msg in err and err.count("\n") == 1 and "Traceback" not in err


def test_huge_top_and_a_tiny_memory_limit_are_one_line(shared_traces, capsys):
    """--top past polars' 32-bit row index is held to it; a memory limit too small for polars
    to start a thread is the limit's one line and exit 6, not a panic's traceback."""
    v6e = str(shared_traces / "tpu_v6e_4chip_psum.xplane.pb")
    assert main(["query", v6e, "SELECT count(*) AS n FROM ops", "--top", str(1 << 32), "--format", "json",
                 "--no-cache"]) == 0
    assert json.loads(capsys.readouterr().out)["result"] == [{"n": 6013}]
    conv = str(shared_traces / "mi300x_jax_conv3d.xplane.pb")
    assert main(["query", conv, "SELECT count(*) FROM ops", "--query-memory", "0.001", "--no-cache"]) == 6
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "memory limit" in err and "Traceback" not in err, err


def test_an_empty_scheduler_address_is_a_usage_error(shared_traces, capsys):
    assert main(["analyze", str(shared_traces / "tpu_v6e_4chip_psum.xplane.pb"), "--scheduler", "", "--no-cache"]) == 2
    assert "--scheduler: empty address" in capsys.readouterr().err


@pytest.mark.parametrize("address, fault", [
    ("notaurl", "names no port"), ("tcp://127.0.0.1:9\nevil", "white space or a control character"),
    ("foo://h:1", "unknown scheme 'foo'"), ("TCP://h:1", "unknown scheme 'TCP'"), ("tcp://h:99999", "not a number from 1 to 65535"),
    ("tcp://h:x", "not a number"), ("tcp://:8786", "names no host"), ("tcp://h:8786/p", "more than host and port"),
    ("127.0.0.1:0", "its port 0 is not one from 1 to 65535")])
def test_a_malformed_scheduler_address_is_a_usage_error(shared_traces, capsys, address, fault):
    """One line naming --scheduler and the fault, exit 2, before any connection is tried."""
    assert main(["analyze", str(shared_traces / "tpu_v6e_4chip_psum.xplane.pb"), "--scheduler", address,
                 "--no-cache"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("traceview: error: argument --scheduler: not an address") and fault in err
    assert err.count("\n") == 1 and "cannot reach" not in err


def test_a_port_that_talks_but_not_dask_is_no_scheduler(shared_traces, capsys):
    """A service that sends bytes first (here 64 x 0xff, as a proxy or a database banner might)
    is exit 7 "no Dask scheduler" naming what it sent, not Dask's decoding error (it asked numpy
    for exabytes: "Unable to allocate 3.07 EiB") as a usage error."""
    import socket
    import threading

    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]

    def talk():
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                conn.sendall(b"\xff" * 64)

    threading.Thread(target=talk, daemon=True).start()
    try:
        assert main(["analyze", str(shared_traces / "tpu_v6e_4chip_psum.xplane.pb"), "--scheduler",
                     f"tcp://127.0.0.1:{port}", "--no-cache"]) == 7
    finally:
        server.close()
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert f"no Dask scheduler at tcp://127.0.0.1:{port}: its reply is not Dask's protocol" in err
    assert "the port answers '\\xff" in err


@pytest.mark.parametrize("address", ["tcp://10.0.0.5:8786", "10.0.0.5:8786", "tls://sched.example:8786",
                                     "tcp://[::1]:8786", "ws://h:80"])
def test_scheduler_addresses_dask_reads_are_accepted_with_its_host_and_port(address):
    """The oracle: ``distributed.comm.addressing`` reads each address taken to the same host and port."""
    from distributed.comm.addressing import get_address_host_port

    from traceview.read.batch import _host_port, address_fault

    assert address_fault(address) == ""
    assert get_address_host_port(address) == _host_port(address, tcp_only=False)


def test_occurrence_checks_without_its_options_says_which(shared_traces, capsys):
    path = str(shared_traces / "tpu_v6e_4chip_psum.xplane.pb")
    assert main(["query", path, "SELECT * FROM occurrence_checks", "--no-cache"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "occurrence_checks exists with --steps N or --expect-batch B" in err


def test_query_server_children_take_the_asking_process_environment_and_folder(shared_traces, tmp_path, monkeypatch,
                                                                              capsys):
    """In-process queries run in forks of a query server started once per process: each child
    takes the environment and working directory of the process as they are at the query, not
    as they were when the server started (an object store's credentials set later, a relative
    path after a chdir). Was: test_remote's s3 query failed with NoCredentialsError whenever an
    earlier test in the same worker had started the server."""
    from traceview.cli import sqlguard

    path = shared_traces / "mi300x_jax_conv3d.xplane.pb"
    monkeypatch.setattr(sqlguard, "_fork_safe", lambda: False)  # as in an MCP server: the query server's forks
    assert main(["query", str(path), "SELECT count(*) AS n FROM ops", "--format", "csv", "--no-cache"]) == 0
    assert capsys.readouterr().out == "n\n198\n"
    assert sqlguard._server[0] is not None and sqlguard._server[0].poll() is None  # started, and stays
    server = sqlguard._server[0]
    monkeypatch.setenv("TRACEVIEW_PROBE_VAR", "set after the server started")
    monkeypatch.chdir(tmp_path)
    assert sqlguard.run(os.getenv, "TRACEVIEW_PROBE_VAR", memory=None, seconds=None) == "set after the server started"
    assert sqlguard.run(os.getcwd, memory=None, seconds=None) == str(tmp_path)
    (tmp_path / "here").mkdir()
    (tmp_path / "here" / "t.xplane.pb").symlink_to(path)
    assert main(["query", "here", "SELECT count(*) AS n FROM ops", "--format", "csv", "--no-cache"]) == 0
    assert capsys.readouterr().out == "n\n198\n"
    assert sqlguard._server[0] is server  # every answer came from the one server


def test_a_query_past_polars_row_limit_is_a_limit_not_an_sql_error(shared_traces, capsys):
    """A count over the 6-way cross join of the GEMM sweep's ops (past 2^32 rows on the way) passes
    polars' 2^32-row limit: exit 6 naming it, not exit 2 'SQL error: ... install polars[rt64]'."""
    path = str(shared_traces / "mi300x_jax_gemm_sweep.xplane.pb")
    q = "SELECT count(*) FROM ops a, ops b, ops c, ops d, ops e, ops f"
    assert main(["query", path, q, "--no-cache"]) == 6
    c = capsys.readouterr()
    assert c.out == "" and "pass polars' limit of 2^32 rows" in c.err and c.err.count("\n") == 1, c.err
