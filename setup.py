"""Build hook for the optional C accelerator; all metadata lives in pyproject.toml.

``traceview._fastxplane`` decodes XLine events into flat arrays. It is optional: if no C
compiler is available the build skips it and traceview falls back to the pure-Python
decoder (same results, slower).
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("traceview._fastxplane", ["traceview/_fastxplane.c"], optional=True)])
