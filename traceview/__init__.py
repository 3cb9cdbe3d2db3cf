"""traceview: shape-keyed analysis of JAX/XProf profiles.

Quick start::

    import traceview
    prof = traceview.load("./profile")      # finds the newest run under ./profile
    prof.by_shape()                         # polars DataFrame: one row per (op, shape)
    prof.populations("fusion")              # the shape populations behind one op name

Modules: ``discover`` (find traces), ``xplane`` / ``tracejson`` (readers), ``schema`` (the
op-event table), ``aggregate`` (shape / name / program keys), ``profile`` (the object
above), ``cli`` (the ``traceview`` command).
"""

from .errors import (LimitExceeded, NoOpsFound, NoTraceFound, TraceUnreadable, TraceviewError,
                     UsageError)

__version__ = "0.1.0"


def __getattr__(name: str):
    # Profile, load and read_file import polars and numpy (~0.3 s): loaded on first use, so
    # that ``import traceview.cli`` stays cheap (a cached result is printed without them).
    if name in ("Profile", "load", "read_file"):
        from . import profile

        return getattr(profile, name)
    raise AttributeError(f"module 'traceview' has no attribute {name!r}")

__all__ = ["load", "read_file", "Profile", "TraceviewError", "NoTraceFound", "TraceUnreadable",
           "NoOpsFound", "UsageError", "LimitExceeded", "__version__"]
