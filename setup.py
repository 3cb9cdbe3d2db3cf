"""Build hook for the optional C accelerators; all metadata lives in pyproject.toml.

Three extensions, each optional: if no C compiler is available the build skips them and
traceview falls back to its pure-Python / numpy code (same results, slower).

* ``traceview.read.xplane._decode`` decodes XSpace wire bytes (XLines) into flat arrays;
* ``traceview.model._passes`` does the op-table passes (self time, enclosing execution,
  TPU description ids, per-description sums);
* ``traceview.analysis._passes`` does the analyses' passes (step windows, medians).
"""

from setuptools import Extension, setup

setup(ext_modules=[
    Extension("traceview.read.xplane._decode", ["traceview/read/xplane/_decode.c"], optional=True),
    Extension("traceview.model._passes", ["traceview/model/_passes.c"], optional=True),
    Extension("traceview.analysis._passes", ["traceview/analysis/_passes.c"], optional=True),
])
