"""The device run behind ``benchmarks/device/run.sh``: engine profiles on one GPU, then traceview
and XProf on each of them. ``DRY_RUN=1`` runs the same steps on the CPU at toy sizes.

Steps (each one a record ``$OUT/steps/NN_<name>.json``: command, environment overrides, exit
code, wall seconds, stdout/stderr files, ``ok``):

1. ``env``: a subprocess reports Python, JAX, the backend and its devices (the driver itself
   never starts a JAX backend: it would hold the GPU's memory while the runs need it).
   ``kernel_check``: the GPU decode kernel against the reference, compiled (interpreted in a
   dry run), with a per-call time on the GPU (``kernel_check.py``; ``kernel_check.json``).
2. ``profile_<run>``: ``traceview engine profile`` per configuration of :data:`RUNS`, each in its
   own process (``XLA_FLAGS`` must be set before the backend starts): tiny and study presets,
   bf16; KV block 128 against 2048; donated against ``--no-donate``; int8 KV; XLA command
   buffers at XLA's default against off (``--xla_gpu_enable_command_buffer=``, the empty list).
3. ``analyze_<run>``: ``traceview analyze DIR --format json --steps MODULE=N`` (N: the decode
   steps the engine says it profiled).
4. ``verify_<run>``: the kernel ran and carries the KV block asked for (its name).
5. ``diff_<a>__<b>`` and ``verify_<a>__<b>``: the pairs of :data:`PAIRS`.
6. ``oracle_<run>``: XProf 2.24.2's ``hlo_stats`` (``tests/oracle.py``) against traceview's
   (program_id, op) table: keys, occurrences, total time (``|ours - xprof| <=
   max(1e-6 xprof, 1 ns)``). XProf's table is empty for XLA:CPU profiles, so every profile is
   also checked against the raw HLO-op XEvents of its device planes (the second oracle of
   ``tests/oracle.py``), keys and occurrences.

Everything lands under ``$OUT``: ``env.json``, ``kernel_check.json``, ``profiles/<run>/`` (the
trace files, ``engine.json``), ``analyze/``, ``verify/``, ``diff/``, ``oracle/``, ``steps/``, ``summary.json``, ``summary.md``.
Trace files over ``TRACE_MAX_MB`` (default 48) are moved to ``$WORK`` and listed.

Exit: 0 every step ran and every check held; 1 a step failed or a check did not hold (all
outputs written all the same); 3 no GPU without ``DRY_RUN=1``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PY = sys.executable

#: the command buffers off: an empty list of command types (XLA DebugOptions
#: ``xla_gpu_enable_command_buffer``, a repeated enum; the default holds FUSION, CUBLAS, ...)
CMDBUF_OFF = "--xla_gpu_enable_command_buffer="

#: name -> (preset, extra engine arguments, XLA_FLAGS addition). Device sizes; DRY_RUN maps
#: them with :func:`_toy`.
RUNS = {
    "tiny_bf16": ("tiny", ["--max-model-len", "512", "--kv-block", "128"], ""),
    "tiny_bf16_cmdbuf_off": ("tiny", ["--max-model-len", "512", "--kv-block", "128"], CMDBUF_OFF),
    "study_bf16_bkv128": ("study", ["--max-model-len", "2048", "--kv-block", "128"], ""),
    "study_bf16_bkv2048": ("study", ["--max-model-len", "2048", "--kv-block", "2048"], ""),
    "study_bf16_bkv128_nodonate": ("study", ["--max-model-len", "2048", "--kv-block", "128", "--no-donate"], ""),
    "study_int8_bkv128": ("study", ["--max-model-len", "2048", "--kv-block", "128", "--kv-dtype", "int8"], ""),
}
#: (base, treatment) pairs diffed and verified
PAIRS = [
    ("study_bf16_bkv2048", "study_bf16_bkv128"),
    ("study_bf16_bkv128", "study_bf16_bkv128_nodonate"),
    ("study_bf16_bkv128", "study_int8_bkv128"),
    ("tiny_bf16", "tiny_bf16_cmdbuf_off"),
]
#: toy KV blocks standing for 128 and 2048 in a dry run (tiny preset, 64-token context)
TOY_BLOCK = {"128": "16", "2048": "64"}
#: head dim and page of each preset (to name the kernel a run must show)
PRESET_SHAPE = {"tiny": (64, 16), "study": (256, 128)}


def _toy(preset: str, args: list[str]) -> tuple[str, list[str]]:
    """A dry run's stand-in: the tiny preset at a 64-token context, the KV blocks mapped."""
    out, it = [], iter(args)
    for a in it:
        if a == "--max-model-len":
            out += [a, "64"]
            next(it)
        elif a == "--kv-block":
            out += [a, TOY_BLOCK[next(it)]]
        else:
            out.append(a)
    return "tiny", out


class Runner:
    def __init__(self, out: Path, work: Path, dry: bool, budget_s: float, step_timeout_s: float):
        self.out, self.work, self.dry = out, work, dry
        self.budget_s, self.step_timeout_s = budget_s, step_timeout_s
        self.t0 = time.monotonic()
        self.steps: list[dict] = []
        self.lock = threading.Lock()
        self._n = 0
        for sub in ("steps", "logs", "profiles", "analyze", "verify", "diff", "oracle"):
            (out / sub).mkdir(parents=True, exist_ok=True)

    def next_index(self) -> int:
        self._n += 1
        return self._n - 1

    def reserve(self) -> int:
        """A step number in submission order (steps may then run in parallel)."""
        with self.lock:
            return self.next_index()

    def left_s(self) -> float:
        return self.budget_s - (time.monotonic() - self.t0)

    def record(self, rec: dict, index: int | None = None) -> dict:
        with self.lock:
            rec["index"] = self.next_index() if index is None else index
        path = self.out / "steps" / f"{rec['index']:02d}_{rec['step']}.json"
        path.write_text(json.dumps(rec, indent=2) + "\n")
        with self.lock:
            self.steps.append(rec)
            self.steps.sort(key=lambda x: x["index"])
        status = "ok" if rec["ok"] else ("SKIPPED" if rec.get("skipped") else "FAILED")
        print(f"[{time.monotonic() - self.t0:6.1f} s] {rec['step']}: {status} ({rec.get('wall_s', 0):.1f} s)"
              f"{' - ' + rec['note'] if rec.get('note') else ''}", flush=True)
        return rec

    def run(self, step: str, cmd: list[str], *, env: dict | None = None, ok_codes=(0,), timeout_s=None,
            stdout_to: Path | None = None, index: int | None = None) -> dict:
        if self.left_s() <= 0:
            return self.record({"step": step, "cmd": cmd, "ok": False, "skipped": True, "note": "time budget spent"}, index)
        timeout = min(timeout_s or self.step_timeout_s, max(5.0, self.left_s()))
        out_path = stdout_to or self.out / "logs" / f"{step}.out"
        err_path = self.out / "logs" / f"{step}.err"
        full_env = {**os.environ, **(env or {})}
        t = time.monotonic()
        with open(out_path, "wb") as so, open(err_path, "wb") as se:
            try:
                rc = subprocess.run(cmd, stdout=so, stderr=se, env=full_env, timeout=timeout, cwd=self.work).returncode
                note = ""
            except subprocess.TimeoutExpired:
                rc, note = 124, f"timed out after {timeout:.0f} s"
        rec = {"step": step, "cmd": cmd, "env": env or {}, "rc": rc, "ok": rc in ok_codes, "wall_s": round(time.monotonic() - t, 3),
               "stdout": str(out_path.relative_to(self.out)), "stderr": str(err_path.relative_to(self.out))}
        if note:
            rec["note"] = note
        elif not rec["ok"]:
            tail = err_path.read_text(errors="replace").strip().splitlines()[-1:]
            rec["note"] = tail[0][:300] if tail else f"exit {rc}"
        return self.record(rec, index)

    def parallel(self, jobs: list, workers: int) -> list:
        """Run ``jobs`` (``(step, cmd, kwargs)``) with ``workers`` at a time; records in submission order."""
        jobs = [(step, cmd, {**kw, "index": self.reserve()}) for step, cmd, kw in jobs]
        with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
            return list(pool.map(lambda j: self.run(j[0], j[1], **j[2]), jobs))


def _tv(*args) -> list[str]:
    return [PY, "-m", "traceview.cli", *args]


def _profile_dir(log_dir: Path) -> Path | None:
    runs = sorted(log_dir.glob("plugins/profile/*/"))
    return runs[-1] if runs else None


def _expected_kernel(preset: str, bkv: int, on_gpu: bool) -> str:
    from traceview.kernels.naming import kernel_name

    d, page = PRESET_SHAPE[preset]
    if on_gpu:
        from traceview.kernels.paged_attention_gpu import gpu_kernel_name

        return gpu_kernel_name(page_size=page, kv_block=bkv, head_dim=d)
    return kernel_name(page_size=page, kv_block=bkv)


def _bkv_text(name: str) -> str:
    from traceview.kernels import parse_kernel_config

    return "_".join(str(x) for x in parse_kernel_config(name)["bkv"])


def oracle_compare(xplane: Path, *, expect_xprof: bool = False) -> dict:
    """traceview's (program_id, op) table against XProf's ``hlo_stats`` and the raw XEvents.

    ``expect_xprof``: XProf must show rows (a GPU profile); an empty table is then a failure.
    Returns a JSON-able dict; ``equal`` is the verdict."""
    sys.path.insert(0, str(REPO / "tests"))
    import polars as pl
    from oracle import raw_hlo_events, xprof_hlo_stats

    import traceview
    from traceview.analysis.ops import aggregate

    def table(expand: bool) -> pl.DataFrame:
        return aggregate.by_program_op(traceview.load(xplane, expand_kernels=expand).ops).select(
            "program_id", pl.col("op_name").alias("hlo_op_name"), "occurrences", "total_ps")

    ours = table(False)  # as `traceview analyze` shows it: an interpreted kernel is one row per invocation
    out: dict = {"xplane": xplane.name, "traceview_rows": ours.height}
    try:
        xp = xprof_hlo_stats(xplane).select("program_id", "hlo_op_name", "occurrences", "total_time_us")
    except ImportError as e:
        out.update(xprof_rows=None, xprof_equal=None, xprof_note=f"xprof not installed ({e})")
    else:
        out["xprof_rows"] = xp.height
        if xp.height == 0:
            out["xprof_equal"] = False if expect_xprof else None
            out["xprof_note"] = ("XProf's hlo_stats is empty on a GPU profile" if expect_xprof
                                 else "XProf's hlo_stats is empty (it ignores XLA:CPU op events)")
        else:
            j = xp.join(ours, on=["program_id", "hlo_op_name"], how="full", coalesce=True, suffix="_tv")
            only_x = j.filter(pl.col("occurrences_tv").is_null())
            only_t = j.filter(pl.col("occurrences").is_null())
            both = j.filter(pl.col("occurrences").is_not_null() & pl.col("occurrences_tv").is_not_null())
            occ_bad = both.filter(pl.col("occurrences") != pl.col("occurrences_tv"))
            dt = (pl.col("total_ps") / 1e6 - pl.col("total_time_us")).abs()
            time_bad = both.filter(dt > pl.max_horizontal(pl.col("total_time_us").abs() * 1e-6, pl.lit(0.001)))
            out.update(xprof_equal=not (only_x.height or only_t.height or occ_bad.height or time_bad.height),
                       only_xprof=only_x.head(20).select("program_id", "hlo_op_name").rows(),
                       only_traceview=only_t.head(20).select("program_id", "hlo_op_name").rows(),
                       occurrences_differ=occ_bad.head(20).select("program_id", "hlo_op_name", "occurrences",
                                                                  "occurrences_tv").rows(),
                       time_differs=time_bad.head(20).select("program_id", "hlo_op_name", "total_time_us", "total_ps").rows())
    raw = raw_hlo_events(xplane)
    on_device = raw.filter(pl.col("device").str.starts_with("/device:"))
    device = on_device if on_device.height else raw  # GPU/TPU: device planes only (GPU host launch events
    #                                                   carry hlo_op too); XLA:CPU: the host plane
    raw_t = (device.filter(pl.col("program_id").is_not_null())
             .group_by("program_id", "hlo_op").agg(pl.len().cast(pl.Int64).alias("occurrences"),
                                                   pl.col("duration_ps").sum().cast(pl.Int64).alias("total_ps"))
             .rename({"hlo_op": "hlo_op_name"}).sort("program_id", "hlo_op_name"))
    # one row per XEvent, the ops inside interpreted (CPU) kernels too
    ours_t = table(True).select("program_id", "hlo_op_name", "occurrences", pl.col("total_ps").cast(pl.Int64)) \
        .sort("program_id", "hlo_op_name")
    out["raw_rows"] = raw_t.height
    out["raw_equal"] = ours_t.equals(raw_t)
    if not out["raw_equal"]:
        j = raw_t.join(ours_t, on=["program_id", "hlo_op_name"], how="full", coalesce=True, suffix="_tv")
        out["raw_differ"] = j.filter(pl.col("occurrences").ne_missing(pl.col("occurrences_tv"))
                                     | pl.col("total_ps").ne_missing(pl.col("total_ps_tv"))).head(20).rows()
    out["equal"] = out["raw_equal"] and out["xprof_equal"] is not False
    return out


def main() -> int:
    dry = os.environ.get("DRY_RUN", "") not in ("", "0")
    out = Path(os.environ.get("OUT") or (REPO / "benchmarks" / "out" / "device")).resolve()
    work = Path(os.environ.get("WORK") or (out.parent / (out.name + ".work"))).resolve()
    work.mkdir(parents=True, exist_ok=True)
    budget = float(os.environ.get("BUDGET_S", "420" if not dry else "600"))
    r = Runner(out, work, dry, budget, float(os.environ.get("STEP_TIMEOUT_S", "150")))
    os.environ.setdefault("TRACEVIEW_CACHE_DIR", str(work / "cache"))  # never a cache under the traces
    env_probe = ("import json, platform, jax; d = jax.devices(); print(json.dumps({'python': platform.python_version(), "
                 "'jax': jax.__version__, 'backend': jax.default_backend(), 'devices': [x.device_kind for x in d]}))")
    rec = r.run("env", [PY, "-c", env_probe], env={"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}, timeout_s=120)
    env = {}
    if rec["ok"]:
        env = json.loads((out / rec["stdout"]).read_text().strip().splitlines()[-1])
    on_gpu = env.get("backend") == "gpu"
    env["dry_run"] = dry
    try:
        import xprof  # noqa: F401

        env["xprof"] = getattr(__import__("importlib.metadata").metadata, "version")("xprof")
    except Exception:  # noqa: BLE001 - reported, the oracle step says so
        env["xprof"] = None
    (out / "env.json").write_text(json.dumps(env, indent=2) + "\n")
    if not dry and not on_gpu:
        print(f"device_run: no GPU backend (jax says {env.get('backend')!r}); install jax with CUDA "
              "(pip install -U 'jax[cuda12]') or run with DRY_RUN=1", file=sys.stderr)
        _summarize(r, env, {}, {})
        return 3

    # 2. profiles (one at a time on a GPU; PROFILE_PARALLEL in a dry run, default 2). No JAX
    # persistent compilation cache: an executable loaded from it leaves no HLO proto in the
    # profile's /host:metadata (jax 0.10.2 on CPU: no shapes, no kernel names), so the
    # cache is turned off even when the caller's environment sets it.
    cache_env = {"JAX_ENABLE_COMPILATION_CACHE": "false"}
    # the kernel itself first: parity with the reference and a per-call time (compiled on the
    # GPU, interpreted in a dry run). On a GPU where it fails, the profiles still come: with
    # the decode kernel in the Pallas interpreter (--interpret), said in env.json and the summary.
    check = ("kernel_check", [PY, str(Path(__file__).with_name("kernel_check.py"))],
             {"stdout_to": out / "kernel_check.json", "timeout_s": 240})
    fallback = on_gpu and not r.run(check[0], check[1], **check[2])["ok"]  # a dry run: beside the profiles
    env["decode_kernel"] = ("interpreted (the GPU kernel failed kernel_check)" if fallback
                            else "compiled GPU kernel (Pallas Triton)" if on_gpu else "interpreted (CPU)")
    (out / "env.json").write_text(json.dumps(env, indent=2) + "\n")
    jobs, meta = ([] if on_gpu else [check]), {}
    for name, (preset, args, xla) in RUNS.items():
        if dry:
            preset, args = _toy(preset, args)
        log_dir = out / "profiles" / name
        log_dir.mkdir(parents=True, exist_ok=True)
        common = ["--dtype", "bfloat16", "--max-num-seqs", "4" if dry else "8", "--max-tokens", "2" if dry else "16",
                  "--no-precompile", "--seed", "0"] + (["--interpret"] if fallback else [])
        if dry:  # toy steps of a few ms on shared CPUs: the paired time check's 5% is no test of this script
            common += ["--time-tolerance", "1"]
        cmd = _tv("engine", "profile", "--model", preset, *common, *args, "--log-dir", str(log_dir),
                  "--json", str(log_dir / "engine.json"))
        flags = " ".join(x for x in (os.environ.get("XLA_FLAGS", ""), xla) if x)
        jobs.append((f"profile_{name}", cmd, {"env": {**cache_env, **({"XLA_FLAGS": flags} if xla else {})}}))
        meta[name] = (preset, args, log_dir)
    recs = r.parallel(jobs, int(os.environ.get("PROFILE_PARALLEL", "2" if dry else "1")))[0 if on_gpu else 1:]
    profiles: dict[str, dict] = {}
    for rec, (name, (preset, args, log_dir)) in zip(recs, meta.items()):
        pdir = _profile_dir(log_dir)
        if rec["ok"] and pdir is not None:
            res = json.loads((log_dir / "engine.json").read_text())
            bkv = int(args[args.index("--kv-block") + 1])
            profiles[name] = {"dir": pdir, "preset": preset, "bkv": bkv, "result": res,
                              "kernel": _expected_kernel(preset, bkv, on_gpu and not fallback),
                              "xplane": next(iter(sorted(pdir.glob("*.xplane.pb"))), None)}

    # 3-5. analyze and verify each profile, diff and verify the pairs (ANALYSIS_PARALLEL at a time)
    jobs = []
    for name, p in profiles.items():
        steps = [f"{m}={k}" for m, k in p["result"]["profile_run"]["decode_modules"].items() if k > 0]
        jobs.append((f"analyze_{name}", _tv("analyze", str(p["dir"]), "--format", "json",
                                            *sum((["--steps", s] for s in steps), [])),
                     {"stdout_to": out / "analyze" / f"{name}.json"}))
        jobs.append((f"verify_{name}", _tv("verify", str(p["dir"]), "--format", "json", "-c", "kernel 'RPAd*' present",
                                           "-c", f"kernel 'RPAd*' has bkv {_bkv_text(p['kernel'])}"),
                     {"stdout_to": out / "verify" / f"{name}.json"}))
    for a, b in PAIRS:
        if a not in profiles or b not in profiles:
            r.record({"step": f"diff_{a}__{b}", "ok": False, "skipped": True, "note": "a profile of the pair is missing"})
            continue
        pa, pb = profiles[a]["dir"], profiles[b]["dir"]
        jobs.append((f"diff_{a}__{b}", _tv("diff", str(pa), str(pb), "--format", "json"),
                     {"stdout_to": out / "diff" / f"{a}__{b}.json"}))
        checks = ["-c", "kernel 'RPAd*' present", "-c", "base: kernel 'RPAd*' present"]
        ka, kb = profiles[a]["kernel"], profiles[b]["kernel"]
        if ka != kb:
            checks += ["-c", f"kernel 'RPAd*' changed bkv {_bkv_text(ka)} -> {_bkv_text(kb)}"]
        jobs.append((f"verify_{a}__{b}", _tv("verify", str(pa), str(pb), "--format", "json", *checks),
                     {"stdout_to": out / "verify" / f"{a}__{b}.json"}))
    r.parallel(jobs, int(os.environ.get("ANALYSIS_PARALLEL", str(min(4, os.cpu_count() or 1)))))

    # 6. the oracle
    oracle: dict[str, dict] = {}
    for name, p in profiles.items():
        t = time.monotonic()
        try:
            res = oracle_compare(p["xplane"], expect_xprof=on_gpu)
            ok, note = bool(res["equal"]), ("" if res["equal"] else "traceview differs from the oracle")
        except Exception as e:  # noqa: BLE001 - recorded, the other profiles still get theirs
            res, ok, note = {"error": f"{type(e).__name__}: {e}"}, False, f"{type(e).__name__}: {e}"[:300]
        (out / "oracle" / f"{name}.json").write_text(json.dumps(res, indent=2, default=str) + "\n")
        oracle[name] = res
        r.record({"step": f"oracle_{name}", "ok": ok, "wall_s": round(time.monotonic() - t, 3),
                  "result": f"oracle/{name}.json", **({"note": note} if note else {})})

    # traces too large to bring back
    limit = float(os.environ.get("TRACE_MAX_MB", "48")) * 2**20
    moved = []
    for f in sorted((out / "profiles").rglob("*")):
        if f.is_file() and f.stat().st_size > limit:
            dest = work / "large" / f.relative_to(out)
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(str(f), dest)
            moved.append(str(f.relative_to(out)))
    return _summarize(r, env, profiles, oracle, moved)


def _summarize(r: Runner, env: dict, profiles: dict, oracle: dict, moved=()) -> int:
    ok = bool(r.steps) and all(s["ok"] for s in r.steps) and (env.get("dry_run") or env.get("backend") == "gpu")
    summary = {
        "ok": ok, "dry_run": env.get("dry_run"), "env": env, "elapsed_s": round(time.monotonic() - r.t0, 1),
        "steps": [{k: s.get(k) for k in ("index", "step", "ok", "rc", "wall_s", "note") if k in s} for s in r.steps],
        "runs": {n: {"preset": p["preset"], "kv_block": p["bkv"], "kernel": p["kernel"], "profile_dir": str(p["dir"].relative_to(r.out)),
                     "tokens_per_s": p["result"].get("wall_tokens_per_s"), "decode_step_median_s": p["result"].get("decode_step_median_s"),
                     "kv_dtype": p["result"]["config"].get("kv_dtype"), "donate": p["result"]["config"].get("donate")}
                 for n, p in profiles.items()},
        "oracle": {n: {k: o.get(k) for k in ("equal", "xprof_equal", "xprof_rows", "raw_equal", "raw_rows", "traceview_rows", "xprof_note")}
                   for n, o in oracle.items()},
        "left_out": list(moved),
    }
    (r.out / "summary.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
    lines = [f"# device run ({'DRY_RUN on ' + str(env.get('backend')) if env.get('dry_run') else env.get('backend')}): "
             f"{'ok' if ok else 'NOT ok'}, {summary['elapsed_s']} s", "",
             f"python {env.get('python')}, jax {env.get('jax')}, devices {env.get('devices')}, xprof {env.get('xprof')}, "
             f"decode kernel: {env.get('decode_kernel')}", "",
             "| # | step | ok | s | note |", "|---|---|---|---|---|"]
    lines += [f"| {s['index']} | {s['step']} | {'yes' if s['ok'] else 'NO'} | {s.get('wall_s', '')} | {s.get('note', '')} |" for s in r.steps]
    if summary["runs"] and env.get("dry_run"):
        lines += ["", "DRY_RUN: each run keeps its device name but runs the tiny preset at toy sizes (its KV "
                  "blocks are the kernel column's); on the CPU XProf's hlo_stats holds no XLA:CPU rows ('xprof None "
                  "(0 rows)'), so the oracle is the trace's raw op events ('raw')"]
    if summary["runs"]:
        lines += ["", "| run | preset | kernel | kv dtype | donate | tok/s (unprofiled main run) | oracle |", "|---|---|---|---|---|---|---|"]
        for n, v in summary["runs"].items():
            o = summary["oracle"].get(n, {})
            lines.append(f"| {n} | {v['preset']} | {v['kernel']} | {v['kv_dtype']} | {v['donate']} | "
                         f"{v['tokens_per_s'] or 0:.1f} | xprof {o.get('xprof_equal')} ({o.get('xprof_rows')} rows), "
                         f"raw {o.get('raw_equal')} ({o.get('raw_rows')} rows) |")
    try:
        kc = json.loads((r.out / "kernel_check.json").read_text())
    except (OSError, ValueError):
        kc = None
    if kc:
        lines += ["", f"kernel check ({'interpreted' if kc['interpret'] else 'compiled'} on {kc['backend']}): "
                  f"{'ok' if kc['ok'] else 'FAILED'}", "", "| kernel | D | kv dtype | max abs err | median us/call |",
                  "|---|---|---|---|---|"]
        lines += [f"| {c['kernel']} | {c['head_dim']} | {c['kv_dtype']} | {c['max_abs_err']:.3g} | {c['median_us']} |"
                  for c in kc["cases"]]
    (r.out / "summary.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines), flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
