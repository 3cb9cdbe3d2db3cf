"""Snapshot every table traceview computes on every shared trace and fixture, and compare two
snapshots: the "no figure changes" check of a refactor (issue 23).

``snapshot`` runs ``traceview.load`` + ``build_report(html=True)`` on each input and writes
every table of the report (:func:`traceview.analysis.sql.report_tables`: populations,
roofline, steps, families, communication, overlap, stragglers, findings, ...) plus the
profile's ``module_runs`` and a per-input digest of the op-event table (rows, sum of
duration and self time per device) as Parquet under ``OUT/<input>/``. ``compare`` reads two
snapshot folders and prints, per input and table, whether the frames are equal (rows sorted
on every column, floats compared to 1e-9 relative), and the first differing rows otherwise.

Run it with the Python of the tree to snapshot (``PYTHONPATH=TREE``)::

    PYTHONPATH=/path/to/tree python benchmarks/snapshot.py snapshot OUT
    python benchmarks/snapshot.py compare OUT_BEFORE OUT_AFTER [--ignore findings,...]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SHARED = HERE.parent.parent / "shared" / "traces"
FIXTURES = HERE.parent / "fixtures"


def inputs() -> dict[str, Path]:
    """Every shared trace (the corrupt one and the TF-only one excluded: nothing to table)
    and every recorded fixture, by a short name."""
    out = {}
    for p in sorted(SHARED.glob("*.xplane.pb")):
        if "corrupt" in p.name:
            continue
        out[p.name.split(".")[0]] = p
    out["vllm_tpu_qwen"] = SHARED / "vllm_tpu_qwen"
    for d in sorted(FIXTURES.iterdir()):
        if d.is_dir() and (d / "plugins").exists():
            out["fx_" + d.name] = d
    return out


def snapshot(out: Path, only: list[str] | None = None) -> None:
    import polars as pl

    import traceview
    from traceview.analysis.report import add_html_sections, build_report
    from traceview.analysis.sql import report_tables

    out.mkdir(parents=True, exist_ok=True)
    for name, path in inputs().items():
        if only and name not in only:
            continue
        d = out / name
        d.mkdir(exist_ok=True)
        try:
            prof = traceview.load(str(path), cache=False) if _takes_cache() else traceview.load(str(path))
            rep = build_report(prof, html=True)
            try:
                add_html_sections(rep, prof)
            except Exception:
                pass
        except Exception as e:  # an input that fails is a figure too
            (d / "ERROR.txt").write_text(f"{type(e).__name__}: {e}\n")
            print(f"{name}: {type(e).__name__}: {e}")
            continue
        tables = dict(report_tables(rep))
        tables["module_runs"] = prof.module_runs
        t = prof.ops
        keys = [c for c in ("device",) if c in t.columns]
        digest = t.group_by(keys).agg(pl.len().alias("events"),
                                      *[pl.col(c).cast(pl.Int64).sum().alias(c) for c in ("duration_ps", "self_ps")
                                        if c in t.columns]) if keys else t.select(pl.len().alias("events"))
        tables["op_digest"] = digest
        for tname, frame in tables.items():
            frame = _plain(frame)
            frame.write_parquet(d / f"{tname}.parquet")
        print(f"{name}: {len(tables)} tables, {t.height} op events")


def _takes_cache() -> bool:
    import inspect

    import traceview

    return "cache" in inspect.signature(traceview.load).parameters


def _plain(frame):
    """Object / nested columns as JSON text, so any frame writes to Parquet and compares."""
    import json

    import polars as pl

    cols = []
    for c, dt in frame.schema.items():
        if dt == pl.Object or isinstance(dt, (pl.Struct, pl.List, pl.Array)):
            cols.append(pl.col(c).map_elements(lambda v: json.dumps(v if not hasattr(v, "to_list") else v.to_list(),
                                                                    default=str, sort_keys=True),
                                               return_dtype=pl.Utf8).alias(c))
        else:
            cols.append(pl.col(c))
    return frame.select(cols) if cols else frame


def _canon(frame):
    import polars as pl

    if frame.width == 0 or frame.height == 0:
        return frame
    sortable = [c for c, dt in frame.schema.items() if dt != pl.Null]
    return frame.sort(sortable, nulls_last=True)


def compare(a: Path, b: Path, ignore: set[str]) -> int:
    import polars as pl
    from polars.testing import assert_frame_equal

    bad = 0
    for da in sorted(p for p in a.iterdir() if p.is_dir()):
        db = b / da.name
        if not db.exists():
            print(f"{da.name}: missing in {b}")
            bad += 1
            continue
        names = sorted({p.stem for p in da.glob("*.parquet")} | {p.stem for p in db.glob("*.parquet")})
        diffs = []
        for n in names:
            if n in ignore:
                continue
            pa_, pb_ = da / f"{n}.parquet", db / f"{n}.parquet"
            if not pa_.exists() or not pb_.exists():
                diffs.append(f"  {n}: only in {'after' if pb_.exists() else 'before'}")
                continue
            fa, fb = pl.read_parquet(pa_), pl.read_parquet(pb_)
            common = [c for c in fa.columns if c in fb.columns]
            extra = sorted(set(fa.columns) ^ set(fb.columns))
            try:
                assert_frame_equal(_canon(fa.select(common)), _canon(fb.select(common)), check_dtypes=False,
                                   rel_tol=1e-9, abs_tol=0)
                if extra:
                    diffs.append(f"  {n}: equal on common columns; columns only on one side: {extra}")
            except AssertionError as e:
                diffs.append(f"  {n}: DIFFERS ({fa.height} vs {fb.height} rows): {str(e).splitlines()[0][:300]}")
        errs = [p.read_text().strip() for p in (da / "ERROR.txt", db / "ERROR.txt") if p.exists()]
        if len(errs) == 2 and errs[0] == errs[1]:
            errs = []  # the same refusal before and after
        status = "equal" if not diffs and not errs else "differs"
        print(f"{da.name}: {status}")
        for line in diffs:
            print(line)
        for e in errs:
            print(f"  error: {e}")
        bad += status != "equal" and any("DIFFERS" in x or "only in" in x for x in diffs) or bool(errs)
    return 1 if bad else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("snapshot")
    s.add_argument("out", type=Path)
    s.add_argument("--only", nargs="*")
    c = sub.add_parser("compare")
    c.add_argument("before", type=Path)
    c.add_argument("after", type=Path)
    c.add_argument("--ignore", default="", help="comma-separated table names to skip")
    a = ap.parse_args(argv)
    if a.cmd == "snapshot":
        snapshot(a.out, a.only)
        return 0
    return compare(a.before, a.after, {x for x in a.ignore.split(",") if x})


if __name__ == "__main__":
    sys.exit(main())
