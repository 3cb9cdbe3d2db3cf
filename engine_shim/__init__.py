"""Bundled toy serving engine (installed as ``traceview.engine_shim``)."""
