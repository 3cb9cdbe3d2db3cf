"""Fleet mode against one process on a many-host run: time, client peak memory, same op table.

Builds (once) a run folder of ``--hosts`` hosts under ``--dir`` (default ``/tmp/fleet``): the
shared ``tpu_v6e_4chip_psum.xplane.pb`` scaled to ``--events`` events
(``benchmarks/scale_trace.py``), hard-linked under one name per host
(``plugins/profile/2026_01_01_00_00_00/hostNN.xplane.pb``; discovery names a host by its
file's stem). Then, each in a fresh child process with the caches off, imports done before
the clock starts (where the client reads no file, ``fleet-pool`` and the Dask fleet modes, the
modules ``analyze --fleet`` loads there: not the xplane reader):

* ``single``: ``traceview.load`` in one process, then the sections fleet mode gives: by_shape,
  device summary, step anatomy, overlap and stragglers;
* ``load-dask``: the same on a Dask ``LocalCluster`` (``--workers`` single-thread worker
  processes) through ``load(executor=client)``: every host's encoded table comes back;
* ``fleet``: :func:`traceview.analysis.fleet.load_fleet` in one process;
* ``fleet-pool``: ``load_fleet`` on a local pool of ``--workers`` processes (their start-up and
  imports inside the time);
* ``fleet-dask``: ``load_fleet`` on the same cluster: partial aggregates come back;
* ``fleet-ops``, ``fleet-ops-dask``: as ``fleet`` / ``fleet-dask`` without steps (``--fleet-ops``),
  against ``single-ops``: ``load`` then by_shape and the device summary only.

Each child (in the environment this script started with) first takes the allocator settings the CLI gives the mode
(:func:`traceview.cli.process.tune_allocator` of the run's size for ``single``, of
:func:`~traceview.cli.process.fleet_client_bytes` for the fleet modes, as ``analyze --fleet``).
The cluster's workers get a plain process's malloc (``--dask-trim off``, default): distributed
sets ``MALLOC_TRIM_THRESHOLD_`` in its workers, which also fixes glibc's mmap threshold at
128 KiB, so every large array is mapped and unmapped again (``--dask-trim dask`` keeps it).

Per mode: wall seconds of the read and merge (the cluster's start-up and the workers' imports
apart), the client's CPU seconds over them (all its threads: on Dask the scheduler's too), the
Dask workers' CPU seconds (their whole processes, as ``client.run`` reads them before and
after; ``-`` for the other modes) and, with ``--task-stream``, from Dask's task stream, how long
each worker computed tasks, when the first began and the last ended (what the client does
after it is the tail), the client's peak RSS up to the end of the read and merge (``ru_maxrss``,
before the op table is written out for the comparison; Dask's scheduler
runs in the client; its workers are other processes) and its RSS when the clock starts
(imports, and the cluster when there is one), and whether the op table's exact columns equal
the single process's (p50/p90 within the sketch's bound). Prints a markdown table and the
projection to ``--project-hosts`` hosts of ``--project-bytes`` each (time and client memory per
host, linear in hosts and in bytes).

Usage::

    .venv/bin/python benchmarks/fleet.py                 # 16 hosts x ~190k events
    .venv/bin/python benchmarks/fleet.py --hosts 4 --modes single,fleet
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SRC = ROOT.parent / "shared" / "traces" / "tpu_v6e_4chip_psum.xplane.pb"
#: the environment the children start from: this process's before polars is imported here (for
#: the tables' comparison), which sets ``_RJEM_MALLOC_CONF`` to its own decay; a later child would
#: inherit that in place of the allocator settings the CLI gives its mode
_ENV = dict(os.environ)

_CHILD = r"""
import json, resource, sys, time
mode, path, workers, out, trim, with_stream = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5], sys.argv[6] == "1"
_READS_NONE = ("fleet-pool", "fleet-dask", "fleet-ops-dask")
from pathlib import Path
from traceview.cli import process  # the allocator settings the CLI gives a read of this size
size = sum(f.stat().st_size for f in Path(path).rglob("*.xplane.pb"))
process.tune_allocator(process.fleet_client_bytes(size) if mode.startswith("fleet") else size)
import polars as pl, traceview  # noqa: E401
from traceview.analysis import fleet
from traceview.analysis.ops import aggregate
if mode in _READS_NONE:  # the client reads no file: the modules `analyze --fleet` loads there
    import traceview.model.load, traceview.model.files, traceview.model.profiledata  # noqa: E401
    import traceview.read.batch, traceview.read.cache, traceview.read.discover  # noqa: E401
    import traceview.analysis.steps.anatomy, traceview.analysis.communication.stragglers  # noqa: E401
else:  # the reader too
    import traceview.api, traceview.model.files, traceview.model.from_xplane  # noqa: E401
    from traceview.analysis.report import communication_sections
    from traceview.analysis import derived
cluster = client = None
startup = 0.0
if mode.endswith("dask"):
    import dask, distributed
    if trim == "off":  # distributed sets MALLOC_TRIM_THRESHOLD_ in its workers, which also pins glibc's
        # mmap threshold at 128 KiB: every large array is mapped and unmapped again
        env = dict(dask.config.get("distributed.nanny.pre-spawn-environ"))
        env.pop("MALLOC_TRIM_THRESHOLD_", None)
        dask.config.set({"distributed.nanny.pre-spawn-environ": env})
    t = time.perf_counter()
    cluster = distributed.LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                       dashboard_address=None, silence_logs=40)
    client = distributed.Client(cluster)
    def warm():  # the workers' imports, as the client's are done before the clock
        import traceview.analysis.fleet, traceview.analysis.steps.anatomy, traceview.analysis.communication.overlap  # noqa: E401
        import traceview.model.files, traceview.model.from_xplane, traceview.model.profiledata  # noqa: E401
    client.run(warm)
    startup = time.perf_counter() - t
cpu = lambda: time.process_time()  # noqa: E731
wcpu = (lambda: sum(client.run(time.process_time).values())) if client is not None else (lambda: 0.0)  # noqa: E731
w0 = wcpu()
start_rss = int(open("/proc/self/statm").read().split()[1]) * resource.getpagesize() / 2**20  # imports, cluster
stream = None
if client is not None and with_stream:  # each task's compute interval on its worker (wall clock)
    stream = distributed.get_task_stream(client)
    stream.__enter__()
t0, c0 = time.perf_counter(), cpu()
w_t0 = time.time()
if mode in ("single", "load-dask", "single-ops"):
    prof = traceview.load(path, cache=False, executor=client)
    by_shape = aggregate.by_shape(prof.table, prof.module_runs)
    dev = prof.device_summary()
    steps = 0
    if mode != "single-ops":
        anat = derived.step_anatomy(prof, None)  # computed once, shared with the sections
        ov, st = communication_sections(prof)
        steps = anat.steps.height
    hosts, events = len(prof.traces), prof.table.height
else:
    f = fleet.load_fleet(path, cache=False, executor=client, workers=workers if mode == "fleet-pool" else 0,
                         options=fleet.FleetOptions(steps="ops" not in mode))
    by_shape, dev = f.by_shape, f.devices
    hosts, events = len(f.files), sum(r["op_events"] for r in f.files)
    steps = f.steps.steps.height if f.steps is not None else 0
s, client_cpu = time.perf_counter() - t0, cpu() - c0
workers_cpu = wcpu() - w0
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # the read and merge's (not the table's write below)
tasks = {}
if stream is not None:
    stream.__exit__(None, None, None)
    spans = [(d["worker"], ss["start"] - w_t0, ss["stop"] - w_t0) for d in stream.data for ss in d["startstops"]
             if ss["action"] == "compute"]
    busy = {}
    for w, a, b in spans:
        busy[w] = busy.get(w, 0.0) + b - a
    tasks = {"tasks": len(spans), "busy_s": sorted(busy.values(), reverse=True),
             "first_start_s": min((a for _, a, _ in spans), default=0.0), "last_end_s": max((b for _, _, b in spans), default=0.0)}
by_shape.drop("modules", "programs").write_parquet(out)
if client is not None:
    client.close(); cluster.close()
print(json.dumps({"mode": mode, "hosts": hosts, "op_events": events, "steps": steps, "s": s,
                  "startup_s": startup, "client_cpu_s": client_cpu, "workers_cpu_s": workers_cpu, "client_rss_mib": peak, "client_start_mib": start_rss,
                  **tasks}))
"""

EXACT = ["op_kind", "category", "occurrences", "executions", "total_ps", "self_ps", "mean_ps", "min_ps", "max_ps",
         "share", "n_programs", "devices", "source", "framework_op"]
KEYS = ["op_name", "shape", "module"]


def build(base: Path, hosts: int, events: int) -> Path:
    """The run folder (made once; the scaled file is reused)."""
    sys.path.insert(0, str(HERE))
    import scale_trace

    one = base / f"host_{events}.xplane.pb"
    if not one.exists():
        base.mkdir(parents=True, exist_ok=True)
        per, other = scale_trace.count_device_events(str(SRC))
        reps = max(1, round((events - other) / max(per, 1)))
        scale_trace.scale_xplane(str(SRC), str(one), reps)
    logs = base / f"logs_{hosts}x{events}"
    run = logs / "plugins" / "profile" / "2026_01_01_00_00_00"
    run.mkdir(parents=True, exist_ok=True)
    for i in range(hosts):
        dst = run / f"host{i:02d}.xplane.pb"
        if not dst.exists():
            os.link(one, dst)
    return logs


def partial_bytes(logs: Path) -> dict:
    """Pickled bytes of one host's partial, per part (what a worker sends the client: its
    large frames packed, as ``HostPartial`` pickles them)."""
    import pickle

    from traceview.analysis.fleet import host_partial
    from traceview.read.batch import ReadTask

    f = next(logs.rglob("*.xplane.pb"))
    hp = host_partial(ReadTask(path=str(f), kind="xplane", host=f.name.split(".")[0]))
    state = hp.__getstate__()
    parts = {k: len(pickle.dumps(state[k])) for k in ("col", "moments", "sketch", "values", "steps",
                                                      "step_families", "overlap_steps", "collectives")}
    parts["total"] = len(pickle.dumps(hp))
    from traceview.analysis.fleet import FleetOptions

    parts["ops_only_total"] = len(pickle.dumps(host_partial(ReadTask(path=str(f), kind="xplane", host="h"),
                                                            FleetOptions(steps=False))))
    parts["op_events"] = hp.op_events
    parts["step_rows"] = hp.steps.height
    parts["collective_events"] = hp.collectives.height
    return parts


def measure(mode: str, path: Path, workers: int, out: Path, trim: str = "off", stream: bool = False) -> dict:
    env = dict(_ENV, TRACEVIEW_NO_CACHE="1", PYTHONPATH=str(ROOT))
    p = subprocess.run([sys.executable, "-c", _CHILD, mode, str(path), str(workers), str(out), trim, "1" if stream else "0"],
                       capture_output=True, text=True, env=env)
    if p.returncode:
        raise SystemExit(f"{mode} failed:\n{p.stderr[-3000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def same_table(a: Path, b: Path) -> str:
    """"exact" when every exact column is equal and p50/p90 within the sketch's bound."""
    import polars as pl
    from traceview.analysis.fleet import ALPHA

    x, y = pl.read_parquet(a), pl.read_parquet(b)
    if x.height != y.height or x.select(KEYS + EXACT).sort(KEYS).to_dicts() != y.select(KEYS + EXACT).sort(KEYS).to_dicts():
        return "DIFFERENT"
    j = x.join(y, on=KEYS, nulls_equal=True)
    worst = max(float(j.select(((pl.col(c) - pl.col(c + "_right")).abs() / pl.col(c).abs()).max()).item() or 0.0)
                for c in ("p50_ps", "p90_ps"))
    return f"exact; p50/p90 within {worst:.2%} (bound {ALPHA:.0%})" if worst <= ALPHA * (1 + 1e-9) else "OUT OF BOUND"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", default="/tmp/fleet")
    ap.add_argument("--hosts", type=int, default=16)
    ap.add_argument("--events", type=int, default=190_000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--modes", default="single,load-dask,fleet,fleet-pool,fleet-dask")
    ap.add_argument("--dask-trim", choices=["off", "dask"], default="off",
                    help="off: the workers' malloc as a plain process's [default]; dask: distributed's "
                         "MALLOC_TRIM_THRESHOLD_ kept")
    ap.add_argument("--task-stream", action="store_true",
                    help="Dask modes: also record the task stream (each worker's compute time, the first task's "
                         "start, the last's end; its records add a little to the client's peak)")
    ap.add_argument("--project-hosts", type=int, default=256)
    ap.add_argument("--project-bytes", type=float, default=1e9)
    a = ap.parse_args(argv)
    logs = build(Path(a.dir), a.hosts, a.events)
    size = sum(f.stat().st_size for f in logs.rglob("*.xplane.pb"))
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        for mode in a.modes.split(","):
            rows[mode] = measure(mode, logs, a.workers, Path(tmp) / f"{mode}.parquet", a.dask_trim, a.task_stream)
            ref_mode = "single-ops" if "ops" in mode else "single"
            rows[mode]["table"] = ("reference" if mode == ref_mode else
                                   same_table(Path(tmp) / f"{ref_mode}.parquet", Path(tmp) / f"{mode}.parquet")
                                   if ref_mode in rows else "-")
            print(json.dumps(rows[mode]), file=sys.stderr)
    ref = rows.get("single") or rows.get("single-ops")
    print(f"{a.hosts} hosts, {size / a.hosts / 1e6:.1f} MB and "
          f"{next(iter(rows.values()))['op_events'] // a.hosts:,} op events each; Dask: {a.workers} single-thread "
          f"worker processes\n")
    print("| mode | s | against one process | client CPU s | workers' CPU s | client peak MiB | against one process "
          "| client at the start MiB | cluster start-up s | op table |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for mode, r in rows.items():
        ref = rows.get("single-ops" if "ops" in mode else "single") or rows.get("single") or rows.get("single-ops")
        rs = f"{r['s'] / ref['s']:.2f}x" if ref else "-"
        rm = f"{r['client_rss_mib'] / ref['client_rss_mib']:.2f}x" if ref else "-"
        wc = f"{r['workers_cpu_s']:.2f}" if mode.endswith("dask") else "-"
        print(f"| {mode} | {r['s']:.2f} | {rs} | {r['client_cpu_s']:.2f} | {wc} | {r['client_rss_mib']:,.0f} | {rm} "
              f"| {r['client_start_mib']:,.0f} | {r['startup_s']:.1f} | {r['table']} |")
    for mode, r in rows.items():
        if r.get("tasks"):
            print(f"\n{mode}: {r['tasks']} tasks; the workers computed "
                  + " and ".join(f"{b:.2f}" for b in r["busy_s"]) + f" s of the {r['s']:.2f} s (from {r['first_start_s']:.2f} s "
                  f"to {r['last_end_s']:.2f} s); after the last task, {r['s'] - r['last_end_s']:.2f} s on the client "
                  "(the last results' transfer and the merge)", end="")
    print()
    pb = partial_bytes(logs)
    print(f"\none host's partial: {pb['total']:,} bytes pickled ({pb['op_events']:,} op events, "
          f"{pb['step_rows']:,} step rows, {pb['collective_events']:,} collective events): "
          + ", ".join(f"{k} {v:,}" for k, v in pb.items() if k not in ("total", "op_events", "step_rows",
                                                                         "collective_events", "ops_only_total"))
          + f"; without steps (--fleet-ops) {pb['ops_only_total']:,} bytes")
    # projection: work linear in a host's events; the op-table partial per description (constant),
    # the step, overlap and collective parts linear in device-steps and events (as this trace's)
    factor = a.project_bytes / (size / a.hosts)
    own = rows.get("fleet") or rows.get("fleet-ops")
    if own:
        per_host = own["s"] / a.hosts * factor
        print(f"\nprojection, {a.project_hosts} hosts x {a.project_bytes / 1e9:g} GB ({factor:.1f}x a host here): "
              f"{per_host:,.0f} s of one worker per host ({own['s'] / a.hosts:.2f} s per host measured, mode "
              f"{'fleet' if 'fleet' in rows else 'fleet-ops'}), {per_host * a.project_hosts / 3600:,.1f} worker-hours")
    fixed = pb["col"] + pb["moments"] + pb["sketch"] + pb["values"]
    grows = pb["total"] - fixed
    print(f"partials at the client: with steps {(fixed + grows * factor) / 1e6:,.0f} MB per host, "
          f"{(fixed + grows * factor) * a.project_hosts / 1e9:,.0f} GB for {a.project_hosts} hosts (pickled); "
          f"--fleet-ops {pb['ops_only_total'] / 1e3:,.0f} KB per host, "
          f"{pb['ops_only_total'] * a.project_hosts / 1e6:,.1f} MB for {a.project_hosts} hosts")
    return 0


if __name__ == "__main__":
    sys.exit(main())
