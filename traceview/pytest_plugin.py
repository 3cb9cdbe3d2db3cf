"""pytest plugin (entry point ``pytest11: traceview``): fixtures over recorded traces.

Fixtures:

* ``traceview_profile`` — the :class:`traceview.Profile` named by the test's
  ``@pytest.mark.traceview(path)`` marker, else by ``--traceview-path`` / the
  ``traceview_path`` ini option. Paths are relative to the rootdir.
* ``recorded_trace`` — a factory: ``recorded_trace("greedy_b4")`` loads one of traceview's own
  recorded fixture traces (``fixtures/<name>`` in the source tree).

Profiles are cached per session by resolved path and run, so many tests can share one load.
"""

from __future__ import annotations

from pathlib import Path

import pytest

_CACHE: dict[tuple[str, str | None], object] = {}


def pytest_addoption(parser):
    group = parser.getgroup("traceview")
    group.addoption("--traceview-path", action="store", default=None,
                    help="trace file or folder for the traceview_profile fixture")
    parser.addini("traceview_path", "trace file or folder for the traceview_profile fixture", default="")


def pytest_configure(config):
    config.addinivalue_line("markers", "traceview(path, run=None): trace for the traceview_profile fixture")


def load_cached(path: str | Path, run: str | None = None):
    """Load (once per session) the profile at ``path``; see :func:`traceview.load`."""
    import traceview

    key = (str(Path(path).resolve()), run)
    if key not in _CACHE:
        _CACHE[key] = traceview.load(path, run=run)
    return _CACHE[key]


def fixtures_dir() -> Path:
    """The folder holding traceview's own recorded traces (``fixtures/`` of the source tree)."""
    return Path(__file__).resolve().parent.parent / "fixtures"


@pytest.fixture
def traceview_profile(request):
    """The Profile named by ``@pytest.mark.traceview(path)``, ``--traceview-path`` or the
    ``traceview_path`` ini option (in that order). Fails the test if none is given."""
    marker = request.node.get_closest_marker("traceview")
    run = None
    if marker is not None and marker.args:
        path = marker.args[0]
        run = marker.kwargs.get("run")
    else:
        path = request.config.getoption("--traceview-path") or request.config.getini("traceview_path")
    if not path:
        pytest.fail("traceview_profile needs a trace: use @pytest.mark.traceview(path), "
                    "--traceview-path or the traceview_path ini option")
    p = Path(path)
    if not p.is_absolute():
        p = Path(str(request.config.rootpath)) / p
    return load_cached(p, run)


@pytest.fixture
def recorded_trace():
    """Factory: ``recorded_trace(name)`` -> Profile of ``fixtures/<name>``."""

    def _load(name: str):
        p = fixtures_dir() / name
        if not p.exists():
            available = sorted(x.name for x in fixtures_dir().iterdir() if x.is_dir()) if fixtures_dir().exists() else []
            pytest.fail(f"no recorded trace {name!r}; available: {', '.join(available) or 'none'}")
        return load_cached(p)

    return _load
