"""Profiles in object stores (traceview.read.remote): ``s3://`` against moto's S3 server and
``gs://`` against gcp-storage-emulator, both real HTTP servers started here on 127.0.0.1
(tests/objectstores.py), filled from ../shared/traces at start-up (never committed copies).

What is checked: the same analysis from s3://, gs:// and from disk (identical JSON apart from
the paths); one paged listing for a bucket of 1,500 runs and nothing fetched but the newest
run, once; nothing written to the remote; a 100 MB object; each fault (unknown scheme,
missing bucket, access denied by IAM, an object cut short mid-read, the server stopped
mid-read) one line naming the URL with its exit code, in bounded time; every command and
``traceview.load`` over URLs.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from pathlib import Path

import pytest

# gcsfs reads this once, at import: its experimental bucket-type lookup (a gRPC call to the
# storage control API) cannot reach an emulator and would wait a minute per bucket
os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")

from objectstores import GCS, S3, CutProxy  # noqa: E402

from traceview.cli import main  # noqa: E402
from traceview.errors import EXIT_NO_TRACE, EXIT_OK, EXIT_REMOTE, EXIT_USAGE  # noqa: E402

V6E = "tpu_v6e_4chip_psum.xplane.pb"
#: the log dir: three runs, the newest a TPU v6e capture (run folder -> (host file, shared trace))
RUNS = {"2024_03_01_10_00_00": ("gpu_host.xplane.pb", "mi300x_jax_gemm_sweep.xplane.pb"),
        "2024_03_02_10_00_00": ("gpu_host.xplane.pb", "mi300x_jax_conv3d.xplane.pb"),
        "2024_03_03_10_00_00": ("tpu_host.xplane.pb", V6E)}
NEWEST = "2024_03_03_10_00_00"
#: runs in the fleet prefix (one object each: more than one listing page of 1,000)
FLEET_RUNS = 1500
BIG_BYTES = 100 << 20
TIMEOUT_S = 4  # $TRACEVIEW_REMOTE_TIMEOUT_S for these tests (default 20 s: a dead server fails faster here)


def _pad(src: Path, dst: Path, pad: int) -> None:
    """``dst``: the XSpace ``src`` plus an unknown length-delimited field (number 1000) of
    ``pad`` zero bytes, which every protobuf reader skips: the same trace, ``pad`` bytes larger."""

    def varint(n):
        out = bytearray()
        while True:
            b, n = n & 0x7F, n >> 7
            out.append(b | (0x80 if n else 0))
            if not n:
                return bytes(out)

    with open(dst, "wb") as fh:
        fh.write(src.read_bytes())
        fh.write(varint((1000 << 3) | 2) + varint(pad))
        fh.write(bytes(pad))


@pytest.fixture(scope="module")
def tree(shared_traces, tmp_path_factory):
    """{key: Path} of every object the servers start with, and the log dir on disk."""
    tmp = tmp_path_factory.mktemp("stores")
    disk = tmp / "disk" / "logdir"
    objects = {}
    for run, (name, src) in RUNS.items():
        key = f"logdir/plugins/profile/{run}/{name}"
        objects[key] = shared_traces / src
        (disk / "plugins" / "profile" / run).mkdir(parents=True)
        shutil.copy(shared_traces / src, disk / "plugins" / "profile" / run / name)
    objects["logdir/events.out.tfevents.1709460000.host"] = b"not a trace"  # listed, never fetched
    for i in range(FLEET_RUNS - 1):  # older runs: one-byte files (never fetched, so never read)
        objects[f"fleet/plugins/profile/2023_01_01_{i // 3600:02d}_{i // 60 % 60:02d}_{i % 60:02d}/h.xplane.pb"] = b"x"
    objects[f"fleet/plugins/profile/{NEWEST}/h.xplane.pb"] = shared_traces / V6E
    objects["mutable/h.xplane.pb"] = shared_traces / V6E  # replaced by test_object_changed_after_listing
    big = tmp / "big.xplane.pb"
    _pad(shared_traces / V6E, big, BIG_BYTES)
    objects[f"big/plugins/profile/{NEWEST}/tpu_host.xplane.pb"] = big
    return {"objects": objects, "disk": disk, "big": big, "tmp": tmp}


@pytest.fixture(scope="module")
def servers(tree):
    """(moto S3 with IAM enforced, GCS emulator), both holding bucket ``profiles``."""
    s3 = S3(tree["tmp"], {"profiles": tree["objects"]})
    try:
        gcs = GCS(tree["tmp"], {"profiles": tree["objects"]})
    except BaseException:
        s3.stop()
        raise
    yield s3, gcs
    s3.stop()
    gcs.stop()


def _fresh_filesystems():
    """Forget fsspec's cached file system objects (they hold the previous test's credentials
    and endpoint)."""
    import gcsfs
    import s3fs

    s3fs.S3FileSystem.clear_instance_cache()
    gcsfs.GCSFileSystem.clear_instance_cache()


@pytest.fixture
def env(servers, tmp_path, monkeypatch):
    """The client environment: the servers' endpoints and the S3 reader's keys (the
    libraries' own variables), a fresh cache folder, the request timeout."""
    s3, gcs = servers

    def use(s3_user="reader", s3_endpoint=None, gcs_endpoint=None):
        for k, v in {**s3.env(s3_user, s3_endpoint), **gcs.env(gcs_endpoint)}.items():
            monkeypatch.setenv(k, v)
        _fresh_filesystems()

    monkeypatch.setenv("TRACEVIEW_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("TRACEVIEW_REMOTE_TIMEOUT_S", str(TIMEOUT_S))
    use()
    yield use
    _fresh_filesystems()


def run_cli(capsys, *argv):
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.fixture(scope="module")
def disk_analysis(tree):
    """The analysis JSON of the log dir on disk."""
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = main(["analyze", str(tree["disk"]), "--format", "json", "--no-cache", "-o", "-"])
    assert rc == EXIT_OK
    return json.loads(out.getvalue())


def _analysis(capsys, path: str) -> dict:
    rc, out, err = run_cli(capsys, "analyze", path, "--format", "json", "--no-cache")
    assert rc == EXIT_OK, err
    return json.loads(out)


def _without_paths(doc: dict, root: str) -> str:
    """The analysis JSON with ``root`` written as ROOT and the line saying what was fetched
    dropped (its only difference from a local read besides the paths)."""
    doc = json.loads(json.dumps(doc))
    doc["provenance"]["lines"] = [ln for ln in doc["provenance"]["lines"]
                                  if not ln.startswith(("fetched ", "read the local copy "))]
    return json.dumps(doc, sort_keys=True).replace(root, "ROOT")


def _writes(srv) -> list[str]:
    """The requests that write (the IAM users made at start-up aside: ``POST /``)."""
    return [r for r in srv.requests(r"^(PUT|POST|DELETE|PATCH) ") if not r.startswith("POST / ")]


def _one_line(err: str, url: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"traceview: error: {url}"), err
    assert "Traceback" not in err
    return lines[0]


# ---------------------------------------------------------------------------------- analysis

def test_same_analysis_from_s3_gs_and_disk(env, tree, servers, disk_analysis, capsys):
    s3, gcs = servers
    disk = disk_analysis
    from_s3 = _analysis(capsys, "s3://profiles/logdir")
    from_gs = _analysis(capsys, "gs://profiles/logdir/")
    # the newest of the three runs, read as from disk: the TPU trace, its ops and findings
    assert disk["provenance"]["runs"] == from_s3["provenance"]["runs"] == from_gs["provenance"]["runs"] == [NEWEST]
    assert {d["device"] for d in disk["devices"]} >= {"/device:TPU:0", "/device:TPU:3"}
    assert len(disk["ops"]) > 10
    # identical apart from the paths (and the line saying what was fetched)
    expect = _without_paths(disk, str(tree["disk"]))
    assert _without_paths(from_s3, "s3://profiles/logdir") == expect
    assert _without_paths(from_gs, "gs://profiles/logdir") == expect
    # the stale-run and several-runs warnings as for a local folder, naming the URL
    assert any("3 runs found; reading the newest 2024_03_03_10_00_00" in w for w in from_s3["warnings"])
    assert any(w.startswith(f"run {NEWEST} is ") and "days old" in w for w in from_gs["warnings"])
    files = [f["path"] for f in from_s3["provenance"]["files"]]
    assert files == [f"s3://profiles/logdir/plugins/profile/{NEWEST}/tpu_host.xplane.pb"]
    assert any(ln.startswith("fetched 862,707 bytes from s3://") for ln in from_s3["provenance"]["lines"])


def test_listing_is_one_paged_request_and_each_file_is_fetched_once(env, servers):
    from traceview.read.discover import discover

    s3, gcs = servers
    writes_before = [_writes(srv) for srv in (s3, gcs)]
    # moto answers in pages of 1,000 keys; the GCS emulator in one page whatever maxResults
    for srv, url, listing, pages, gets in (
            (s3, "s3://profiles/fleet", r"^GET /profiles\?list-type=2&prefix=fleet/", 2, r"^GET /profiles/fleet/"),
            (gcs, "gs://profiles/fleet", r"^GET /storage/v1/b/profiles/o\?.*prefix=fleet", 1,
             r"^GET /download/storage/v1/b/profiles/o/fleet")):
        before_list, before_get, before_all = len(srv.requests(listing)), len(srv.requests(gets)), len(srv.requests())
        d = discover(url)
        assert len(d.runs) == FLEET_RUNS and [r.name for r in d.selected] == [NEWEST]
        assert [str(f.path).endswith(f"{NEWEST}/h.xplane.pb") for f in d.files] == [True]
        # one recursive listing, page after page, no call per folder or file
        assert len(srv.requests(listing)) - before_list == pages, srv.requests(listing)
        fetched = len(srv.requests(gets)) - before_get
        assert fetched == 1  # the newest run's file (862 KB: one ranged read), nothing else
        assert len(srv.requests()) - before_all == pages + fetched  # and nothing else (no HEAD per file)
        # again: listed again, nothing fetched (the local copy has the listed size and version)
        d2 = discover(url)
        assert d2.files[0].path == d.files[0].path
        assert len(srv.requests(gets)) - before_get == fetched
        assert any(r.startswith("read the local copy ") for r in d2.reasons)
    # nothing was written to either server while traceview listed and read
    assert [_writes(srv) for srv in (s3, gcs)] == writes_before


@pytest.mark.parametrize("scheme", ["s3", "gs"])
def test_a_100_mb_object(env, tree, scheme, disk_analysis, capsys):
    url = f"{scheme}://profiles/big"
    doc = _analysis(capsys, url)
    disk = disk_analysis
    size = tree["big"].stat().st_size
    assert size > BIG_BYTES
    assert any(ln.startswith(f"fetched {size:,} bytes from {scheme}://") for ln in doc["provenance"]["lines"])
    # the padding is skipped: the same ops and devices as the unpadded trace
    assert doc["ops"] == disk["ops"] and doc["devices"] == disk["devices"]
    assert doc["provenance"]["files"][0]["path"] == f"{url}/plugins/profile/{NEWEST}/tpu_host.xplane.pb"


# ---------------------------------------------------------------------------------- faults

def test_unknown_scheme(env, capsys):
    rc, out, err = run_cli(capsys, "analyze", "nosuchscheme://bucket/logdir")
    assert rc == EXIT_USAGE
    assert "unknown URL scheme 'nosuchscheme://'" in _one_line(err, "nosuchscheme://bucket/logdir")
    rc, out, err = run_cli(capsys, "analyze", "s3://")
    assert rc == EXIT_USAGE
    assert "give a bucket" in _one_line(err, "s3://")


def test_missing_packages_name_what_to_install(monkeypatch):
    """Without fsspec: s3:// names its extra, another scheme says only local paths are read; with
    fsspec but not a scheme's package (fsspec's ImportError without a module name): fsspec's
    own advice for that scheme."""
    import sys

    import fsspec.core

    from traceview.errors import UsageError
    from traceview.read.remote import _filesystem

    with monkeypatch.context() as m:
        m.setitem(sys.modules, "fsspec", None)
        with pytest.raises(UsageError, match=r"s3://b/x: reading s3:// needs fsspec and s3fs, which are not "
                                             r"installed: pip install 'traceview\[s3\]'"):
            _filesystem("s3://b/x")
        with pytest.raises(UsageError, match=r"foo://x: reading URLs needs fsspec, which is not installed .* "
                                             r"only local paths are read"):
            _filesystem("foo://x")

    def no_aiohttp(url, **kw):
        raise ImportError("HTTPFileSystem requires \"requests\" and \"aiohttp\" to be installed")

    monkeypatch.setattr(fsspec.core, "url_to_fs", no_aiohttp)
    with pytest.raises(UsageError, match=r"http://h/x: reading http:// needs a package that is not installed: "
                                         r"HTTPFileSystem requires \"requests\" and \"aiohttp\""):
        _filesystem("http://h/x")


def test_a_url_as_output_is_refused_before_any_read(shared_traces, tmp_path, capsys):
    """``-o s3://...``: one line naming the URL whole (Path() would fold its '//'), exit 2,
    nothing read or written (the input does not exist)."""
    for cmd in (["analyze", str(tmp_path / "none"), "-o", "s3://prof/out.json"],
                ["report", str(tmp_path / "none"), "-o", "gs://prof/r.html"]):
        rc, out, err = run_cli(capsys, *cmd)
        assert rc == EXIT_USAGE
        assert "writes a local file only" in _one_line(err, cmd[-1])


@pytest.mark.parametrize("scheme", ["s3", "gs"])
def test_missing_bucket(env, scheme, capsys):
    url = f"{scheme}://no-such-bucket/logdir"
    t0 = time.monotonic()
    rc, out, err = run_cli(capsys, "analyze", url)
    assert rc == EXIT_NO_TRACE
    assert "does not exist" in _one_line(err, url)
    assert time.monotonic() - t0 < TIMEOUT_S * 6  # bounded (a loaded machine: slack)


def test_missing_folder_in_a_bucket(env, capsys):
    rc, out, err = run_cli(capsys, "analyze", "s3://profiles/no/such/logdir")
    assert rc == EXIT_NO_TRACE
    assert "nothing is listed under it" in _one_line(err, "s3://profiles/no/such/logdir")


def test_access_denied(env, capsys):
    env(s3_user="nobody")  # an IAM user with no policy: moto denies every request
    url = "s3://profiles/logdir"
    rc, out, err = run_cli(capsys, "analyze", url)
    assert rc == EXIT_REMOTE
    assert "access denied while listing" in _one_line(err, url)


@pytest.mark.parametrize("scheme", ["s3", "gs"])
def test_object_cut_short_mid_read(env, servers, scheme, capsys):
    s3, gcs = servers
    proxy = CutProxy((s3 if scheme == "s3" else gcs).port, limit=256 << 10)  # listings pass, the 862 KB object does not
    try:
        env(s3_endpoint=proxy.endpoint, gcs_endpoint=proxy.endpoint)
        url = f"{scheme}://profiles/logdir"
        t0 = time.monotonic()
        rc, out, err = run_cli(capsys, "analyze", url)
        took = time.monotonic() - t0
    finally:
        proxy.close()
    assert rc == EXIT_REMOTE
    line = _one_line(err, f"{url}/plugins/profile/{NEWEST}/tpu_host.xplane.pb")
    assert proxy.cuts >= 1
    # s3fs gives up after its retries and says the transfer ended early; gcsfs keeps retrying
    # until the request timeout cancels it
    assert ("cut short while reading it" in line) if scheme == "s3" else (f"no answer within {TIMEOUT_S} s" in line)
    assert took < TIMEOUT_S * 6  # bounded (gcsfs waits ~TIMEOUT_S by design; a loaded machine: slack)
    assert not list(Path(os.environ["TRACEVIEW_CACHE_DIR"]).rglob("tpu_host.xplane.pb"))  # no partial copy


@pytest.mark.parametrize("scheme", ["s3", "gs"])
def test_server_stopped_mid_read(env, tree, shared_traces, scheme, capsys):
    """A server of its own, killed once the first MiB of a 40 MB object has reached the reader
    (a proxy in front of it kills it there and cuts the connection: no race with the transfer)."""
    obj = tree["tmp"] / f"forty-{scheme}.xplane.pb"
    _pad(shared_traces / V6E, obj, 40 << 20)
    key = f"logdir/plugins/profile/{NEWEST}/tpu_host.xplane.pb"
    srv = (S3(tree["tmp"], {"doomed": {key: obj}}, auth=False) if scheme == "s3"
           else GCS(tree["tmp"], {"doomed": {key: obj}}))

    def kill():
        if srv.proc.poll() is None:
            srv.proc.kill()
            srv.proc.wait(10)

    proxy = CutProxy(srv.port, limit=1 << 20, on_cut=kill)  # listings pass; the object does not
    try:
        env(s3_user="reader", s3_endpoint=proxy.endpoint, gcs_endpoint=proxy.endpoint)
        if scheme == "s3":  # this server enforces no IAM: any keys
            os.environ["AWS_ACCESS_KEY_ID"] = os.environ["AWS_SECRET_ACCESS_KEY"] = "open"
        url = f"{scheme}://doomed/logdir"
        t0 = time.monotonic()
        rc, out, err = run_cli(capsys, "analyze", url)
        took = time.monotonic() - t0
    finally:
        proxy.close()
        srv.stop()
    assert proxy.cuts >= 1 and srv.proc.poll() is not None
    assert rc == EXIT_REMOTE, err
    line = _one_line(err, f"{url}/plugins/profile/{NEWEST}/tpu_host.xplane.pb")
    assert re.search(r"(no answer within \d+ s|cannot reach the server|cut short) while reading it", line), line
    assert took < TIMEOUT_S * 6  # bounded (a loaded machine: slack)


@pytest.mark.parametrize("scheme", ["s3", "gs"])
def test_object_changed_after_listing(env, servers, tmp_path, scheme):
    """The object is replaced (same size, other bytes) between the listing and the fetch:
    the bytes read do not match the listed MD5, so no copy is kept."""
    from traceview.errors import RemoteUnreadable
    from traceview.read.remote import _filesystem, fetch

    s3, gcs = servers
    url = f"{scheme}://profiles/mutable/h.xplane.pb"
    fs, name = _filesystem(url)
    info = fs.info(name)  # as the listing saw it
    old = fs.cat_file(name)
    (s3 if scheme == "s3" else gcs).put("profiles", {"mutable/h.xplane.pb": old[::-1]})
    local = tmp_path / "copy" / "h.xplane.pb"
    with pytest.raises(RemoteUnreadable, match="changed while read: its bytes do not match the listed MD5") as e:
        fetch(fs, name, info, local, url, timeout=TIMEOUT_S)
    assert str(e.value).startswith(url) and e.value.exit_code == EXIT_REMOTE
    assert not local.exists()
    (s3 if scheme == "s3" else gcs).put("profiles", {"mutable/h.xplane.pb": old})


# ---------------------------------------------------------------------------------- every command

def test_every_command_reads_urls(env, tree, capsys, tmp_path):
    import traceview

    prof = traceview.load("s3://profiles/logdir")
    local = traceview.load(str(tree["disk"]))
    assert prof.table.height == local.table.height > 0
    assert [t.path for t in prof.traces] == [f"s3://profiles/logdir/plugins/profile/{NEWEST}/tpu_host.xplane.pb"]
    # diff: the same run from two stores is the same profile
    rc, out, err = run_cli(capsys, "diff", "s3://profiles/logdir", "gs://profiles/logdir", "--format", "json")
    assert rc == EXIT_OK, err
    # history: every run of the log dir, oldest first
    rc, out, err = run_cli(capsys, "history", "gs://profiles/logdir", "--format", "json")
    assert rc == EXIT_OK, err
    runs = json.loads(out)["runs"]
    assert [r["run"] for r in runs] == sorted(RUNS)
    assert all(r["directory"].startswith("gs://profiles/logdir/plugins/profile/") for r in runs), runs
    # query, report, verify, ladder
    rc, out, err = run_cli(capsys, "query", "s3://profiles/logdir", "select file, count(*) as n from ops group by file",
                           "--format", "json")
    assert rc == EXIT_OK, err
    assert json.loads(out)["result"] == [{"file": prof.traces[0].path, "n": local.table.height}]
    html = tmp_path / "r.html"
    rc, out, err = run_cli(capsys, "report", "gs://profiles/logdir", "-o", str(html))
    assert rc == EXIT_OK and "gs://profiles/logdir" in html.read_text(), err
    rc, out, err = run_cli(capsys, "verify", "s3://profiles/logdir", "-c", "op matching fusion present")
    assert rc == EXIT_OK, err + out
    rc, out, err = run_cli(capsys, "ladder", "s3://profiles/logdir", "gs://profiles/logdir", "--x", "1,2",
                           "--format", "json")
    assert rc == EXIT_OK, err
    rc, out, err = run_cli(capsys, "analyze", "s3://profiles/logdir", "--fleet", "--format", "json", "--no-cache")
    assert rc == EXIT_OK, err
    assert [f["path"] for f in json.loads(out)["files"]] == [t.path for t in prof.traces]
    rc, out, err = run_cli(capsys, "export", "gs://profiles/logdir", "-o", str(tmp_path / "window"))
    assert rc == EXIT_OK, err
    assert (tmp_path / "window.xplane.pb").stat().st_size > 0 and (tmp_path / "window.json").stat().st_size > 0


def test_mcp_tools_read_urls_under_a_url_root(env, capsys):
    """``traceview mcp --root s3://profiles/logdir``: the tools read URLs under the root (and
    paths relative to it), and refuse any other URL or a '..' segment."""
    import asyncio

    from traceview.cli.mcp_server import PathRefused, Roots, build_server

    roots = Roots(["s3://profiles/logdir/"])
    assert roots.resolve(f"plugins/profile/{NEWEST}") == f"s3://profiles/logdir/plugins/profile/{NEWEST}"
    for bad in ("s3://profiles/big", "s3://profiles/logdir/../big", "gs://profiles/logdir", "/etc"):
        with pytest.raises(PathRefused):
            roots.resolve(bad)
    server = build_server(roots, no_cache=True)

    def call(tool, **args):
        got = asyncio.run(server.call_tool(tool, args))
        assert not got.is_error, got.content[0].text
        return json.loads(got.content[0].text)

    found = call("find_traces", path="s3://profiles/logdir")
    assert [f["path"] for f in found["files"]] == [f"s3://profiles/logdir/plugins/profile/{NEWEST}/tpu_host.xplane.pb"]
    assert [r["name"] for r in found["runs"]] == sorted(RUNS, reverse=True)
    ops = call("analyze", path="s3://profiles/logdir", section="ops", top=3)
    assert len(ops["ops"]) == 3
