"""traceview: shape-keyed analysis of JAX/XProf profiles.

Quick start::

    import traceview
    prof = traceview.load("./profile")      # finds the newest run under ./profile
    prof.by_shape()                         # polars DataFrame: one row per (op, shape)
    prof.populations("fusion")              # the shape populations behind one op name
    rep = prof.analyze()                    # a Report: every section `traceview analyze` shows
    traceview.diff("./before", "./after")   # population-matched diff (a DiffReport)
    traceview.verify("./after", ["op matching topp_binary_search absent"])

The package's layers, imports running one way: ``read`` (finding files, decoding bytes) ->
``model`` (the op table) -> ``analysis`` (results, gathered in a ``Report``) -> ``render``
(text, JSON, HTML) -> ``cli`` (the ``traceview`` command). ``api`` holds the entry points
above; ``testing`` and ``pytest_plugin`` serve test suites.
"""

from traceview.errors import (LimitExceeded, NoOpsFound, NoTraceFound, RemoteUnreadable, TraceUnreadable, TraceviewError,
                              UsageError)

__version__ = "0.1.0"

_LAZY = {"load": "traceview.api", "Profile": "traceview.api", "diff": "traceview.api", "verify": "traceview.api",
         "Report": "traceview.analysis.report"}
_LAZY["ladder"] = "traceview.api"


def __getattr__(name: str):
    # the entry points import polars and numpy when used: loaded on first use, so
    # that ``import traceview.cli`` stays cheap (a stored result is printed without them)
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'traceview' has no attribute {name!r}")


def __dir__() -> list[str]:  # the lazy entry points too, for tab completion
    return sorted(set(globals()) | set(_LAZY))


__all__ = ["load", "Profile", "Report", "diff", "verify", "ladder", "TraceviewError", "NoTraceFound", "TraceUnreadable",
           "NoOpsFound", "UsageError", "LimitExceeded", "RemoteUnreadable", "__version__"]
