"""``traceview analyze PATH --fleet``: each host's file aggregated where it is read (this
process, ``--workers N`` local processes or the Dask cluster of ``--scheduler``), the partial
aggregates merged here (:mod:`traceview.analysis.fleet`); table or JSON."""

from __future__ import annotations

import sys

from traceview.errors import EXIT_OK, UsageError

#: what analyze offers that fleet mode does not (option -> why)
_REFUSED = {"html": "--html", "filter": "--filter", "device": "--device", "steps": "--steps",
            "expect_batch": "--expect-batch", "phase": "--phase"}


def run(args, disc, out) -> int:
    """analyze's fleet mode over the discovered run ``disc``; writes to ``out`` or standard
    output. Raises :class:`UsageError` for an option fleet mode does not take (named), and
    what :func:`traceview.analysis.fleet.load_fleet` raises."""
    from traceview.cli import args as cargs
    from traceview.cli.outputs import to_stdout
    from traceview.model.naming import safe_line
    from traceview.read.guard import write_atomic

    for attr, opt in _REFUSED.items():
        if getattr(args, attr, None):
            raise UsageError(f"{opt} is not available with --fleet (fleet mode keeps no events on the client)")
    if args.by != "shape":
        raise UsageError("--fleet gives the op table by shape only (--by shape)")
    if args.format not in ("table", "json"):
        raise UsageError("--fleet writes table or json")
    from traceview.analysis.fleet import FleetOptions, load_fleet

    opts = FleetOptions(rules=cargs.rules_from_args(args), step_module=args.step_module,
                        step_extent=args.step_extent, step_window=args.step_window,
                        expand_kernels=bool(getattr(args, "expand_kernels", False)), steps=args.fleet != "ops")
    ro = cargs.read_options(args)
    f = load_fleet(args.path, discovery=disc, max_bytes=args.max_bytes, cache=ro["cache"], workers=ro["workers"],
                   scheduler=ro["scheduler"], progress=ro["progress"], options=opts)
    roof = kern = None
    if f.descriptions is not None:
        roof = f.roofline(cargs.peaks_from_args(f, args))
        kern = f.kernels()
    if args.format == "json":
        from traceview import __version__
        from traceview.render.fleet import fleet_json

        data = fleet_json(f, top=args.top, version=__version__, roofline=roof, kernels=kern)
    else:
        import io

        from traceview.cli.analyze import TABLE_TOP
        from traceview.cli.outputs import console, file_console
        from traceview.render.fleet import render_fleet

        if out is None:
            render_fleet(console(getattr(args, "width", None)), f, top=args.top or TABLE_TOP, roofline=roof, kernels=kern)
            return EXIT_OK
        buf = io.StringIO()
        render_fleet(file_console(buf, getattr(args, "width", None)), f, top=args.top or TABLE_TOP, roofline=roof, kernels=kern)
        data = buf.getvalue().encode("utf-8")
    if out is not None:
        write_atomic(out, data)
        print(f"wrote {safe_line(str(out))}", file=sys.stderr)
    else:
        to_stdout(data)
    return EXIT_OK
