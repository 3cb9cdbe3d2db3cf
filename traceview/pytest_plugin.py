"""pytest plugin (entry point ``pytest11: traceview``): fixtures over recorded traces.

Installed with traceview; nothing to import or register. Fixtures:

* ``traceview_profile`` — the :class:`traceview.Profile` a test names, looked up in this
  order: indirect parametrization (``@pytest.mark.parametrize("traceview_profile", [path],
  indirect=True)``); the ``@pytest.mark.traceview(...)`` marker — a path
  (``traceview("traces/run1")``, ``run=`` picks a run folder), a recorded trace
  (``traceview(recorded="greedy_b4")``) or the name of another fixture that returns a path
  or a Profile (``traceview(fixture="my_profile_dir")``, e.g. a session fixture that records
  one); then ``--traceview-path`` / the ``traceview_path`` ini option. Fails the test with a
  message saying so when none is given.
* ``recorded_trace`` — a factory, ``recorded_trace("greedy_b4")``: the Profile of the folder
  ``<fixtures dir>/greedy_b4``. The fixtures dir is ``--traceview-fixtures-dir``, else the
  ``traceview_fixtures_dir`` ini option, else traceview's own ``fixtures/`` (the source
  checkout's engine traces), so a project points the fixtures at its own recorded traces.
* ``traceview_fixtures_dir`` — that folder (a :class:`pathlib.Path`).
* ``traceview_golden`` — ``traceview_golden(profile, name=None, **tolerances)`` compares the
  profile's shape-keyed summary with ``<golden dir>/<name or test name>.json``
  (:func:`traceview.testing.assert_matches_golden`); ``--traceview-update-golden`` writes the
  files instead. The golden dir is the ``traceview_golden_dir`` ini option (default
  ``tests/golden``), relative to the rootdir; ``traceview_golden_time_rtol`` (default 0.5),
  ``traceview_golden_time_share_atol`` (0.15), ``traceview_golden_time_min_share`` (0.02) and
  ``traceview_golden_share_atol`` (0.25) set the tolerances for a project
  (:func:`traceview.testing.compare_summaries`).

Relative paths (options, ini values, marker paths) are resolved against the rootdir.
Profiles are loaded once per session per (path, run) and shared between tests; treat them
as read-only. Assertion helpers for the tests themselves are in :mod:`traceview.testing`.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

_CACHE_KEY = pytest.StashKey[dict]()

_MARKER = ("traceview(path=None, *, run=None, recorded=None, fixture=None): the trace for the "
           "traceview_profile fixture (a path, a recorded trace name, or a fixture returning a path or Profile)")


def pytest_addoption(parser):
    group = parser.getgroup("traceview", "traceview: fixtures over recorded profiler traces")
    group.addoption("--traceview-path", action="store", default=None, metavar="PATH",
                    help="trace file or folder for the traceview_profile fixture")
    group.addoption("--traceview-fixtures-dir", action="store", default=None, metavar="DIR",
                    help="folder of named recorded traces for the recorded_trace fixture")
    group.addoption("--traceview-update-golden", action="store_true", default=False,
                    help="write the golden summaries compared by traceview_golden instead of comparing")
    parser.addini("traceview_path", "trace file or folder for the traceview_profile fixture", default="")
    parser.addini("traceview_fixtures_dir", "folder of named recorded traces for recorded_trace", default="")
    parser.addini("traceview_golden_dir", "folder of golden summaries for traceview_golden", default="tests/golden")
    parser.addini("traceview_golden_time_rtol", "relative tolerance on a population's share of op time in golden "
                  "comparisons (default 0.5)", default="")
    parser.addini("traceview_golden_time_share_atol", "absolute tolerance on a population's share of op time "
                  "in golden comparisons (default 0.15)", default="")
    parser.addini("traceview_golden_time_min_share", "populations below this share of op time are not "
                  "time-checked in golden comparisons (default 0.02)", default="")
    parser.addini("traceview_golden_share_atol", "absolute tolerance on a family's share of op time in golden "
                  "comparisons (default 0.25)", default="")


def pytest_configure(config):
    config.addinivalue_line("markers", _MARKER)
    config.stash[_CACHE_KEY] = {}


def _cache(config) -> dict:
    try:
        return config.stash[_CACHE_KEY]
    except KeyError:  # plugin configured late (pytester in-process runs)
        config.stash[_CACHE_KEY] = {}
        return config.stash[_CACHE_KEY]


def load_cached(path: str | Path, run: str | None = None, config=None):
    """Load (once per session when ``config`` is given) the profile at ``path``; see
    :func:`traceview.load`, whose errors it raises."""
    import traceview

    if config is None:
        return traceview.load(path, run=run)
    cache = _cache(config)
    key = (str(Path(path).resolve()), run)
    if key not in cache:
        cache[key] = traceview.load(path, run=run)
    return cache[key]


def _resolve(config, path: str | Path) -> Path:
    p = Path(path).expanduser()
    return p if p.is_absolute() else Path(str(config.rootpath)) / p


def default_fixtures_dir() -> Path:
    """traceview's own recorded traces: ``fixtures/`` of the source checkout (or a
    ``fixtures`` folder installed inside the package)."""
    here = Path(__file__).resolve().parent
    for cand in (here / "fixtures", here.parent / "fixtures"):
        if cand.is_dir():
            return cand
    return here.parent / "fixtures"


def fixtures_dir(config=None) -> Path:
    """The folder ``recorded_trace`` reads: ``--traceview-fixtures-dir``, else the
    ``traceview_fixtures_dir`` ini option, else :func:`default_fixtures_dir`."""
    if config is not None:
        opt = config.getoption("--traceview-fixtures-dir", default=None) or config.getini("traceview_fixtures_dir")
        if opt:
            return _resolve(config, opt)
    return default_fixtures_dir()


def _available(d: Path) -> list[str]:
    return sorted(x.name for x in d.iterdir() if x.is_dir() and not x.name.startswith((".", "_"))) if d.is_dir() else []


def _recorded(config, name: str):
    d = fixtures_dir(config)
    p = d / name
    if not p.exists():
        avail = _available(d)
        pytest.fail(f"no recorded trace {name!r} in {d}; available: {', '.join(avail) or 'none'} "
                    f"(set --traceview-fixtures-dir or the traceview_fixtures_dir ini option)", pytrace=False)
    return _load_or_fail(config, p, None)


def _load_or_fail(config, path: Path, run):
    from traceview.errors import TraceviewError

    try:
        return load_cached(path, run, config)
    except TraceviewError as exc:
        pytest.fail(f"traceview could not load {path}: {exc}", pytrace=False)


@pytest.fixture
def traceview_profile(request):
    """The Profile named by indirect parametrization, the ``traceview`` marker,
    ``--traceview-path`` or the ``traceview_path`` ini option (in that order)."""
    config = request.config
    if hasattr(request, "param"):
        param = request.param
        if hasattr(param, "ops"):
            return param
        return _load_or_fail(config, _resolve(config, param), None)
    marker = request.node.get_closest_marker("traceview")
    if marker is not None:
        kw = marker.kwargs
        path = marker.args[0] if marker.args else kw.get("path")
        if kw.get("recorded"):
            return _recorded(config, kw["recorded"])
        if kw.get("fixture"):
            value = request.getfixturevalue(kw["fixture"])
            if hasattr(value, "ops"):
                return value
            return _load_or_fail(config, _resolve(config, value), kw.get("run"))
        if path:
            return _load_or_fail(config, _resolve(config, path), kw.get("run"))
        pytest.fail("@pytest.mark.traceview needs a path, recorded=NAME or fixture=NAME", pytrace=False)
    path = config.getoption("--traceview-path") or config.getini("traceview_path")
    if not path:
        pytest.fail("traceview_profile needs a trace: use @pytest.mark.traceview(path), "
                    "@pytest.mark.traceview(recorded=NAME), --traceview-path or the traceview_path ini option",
                    pytrace=False)
    return _load_or_fail(config, _resolve(config, path), None)


@pytest.fixture
def traceview_fixtures_dir(request) -> Path:
    """The folder of named recorded traces (see :func:`fixtures_dir`)."""
    return fixtures_dir(request.config)


@pytest.fixture
def recorded_trace(request):
    """Factory: ``recorded_trace(name)`` -> Profile of ``<fixtures dir>/<name>``; fails the
    test listing the available names when there is no such trace."""

    def _load(name: str):
        return _recorded(request.config, name)

    return _load


def _golden_name(nodeid_name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", nodeid_name).strip("_") or "golden"


@pytest.fixture
def traceview_golden(request):
    """``traceview_golden(profile, name=None, **tolerances)``: compare the profile's golden
    summary with ``<traceview_golden_dir>/<name or the test's name>.json``; with
    ``--traceview-update-golden`` write it. Tolerances: see
    :func:`traceview.testing.compare_summaries`. Returns the summary dict."""
    from traceview.testing import assert_matches_golden

    config = request.config
    update = bool(config.getoption("--traceview-update-golden"))
    gdir = _resolve(config, config.getini("traceview_golden_dir") or "tests/golden")
    defaults: dict = {}

    for key, ini in (("time_rtol", "traceview_golden_time_rtol"), ("share_atol", "traceview_golden_share_atol"),
                     ("time_share_atol", "traceview_golden_time_share_atol"),
                     ("time_min_share", "traceview_golden_time_min_share")):
        raw = config.getini(ini)
        if raw:
            try:
                defaults[key] = float(raw)
            except ValueError:
                raise pytest.UsageError(f"{ini} = {raw!r}: expected a number") from None

    def _check(profile, name: str | None = None, **tolerances):
        tolerances = {**defaults, **tolerances}
        path = gdir / f"{_golden_name(name or request.node.name)}.json"
        return assert_matches_golden(profile, path, update=update, **tolerances)

    return _check
