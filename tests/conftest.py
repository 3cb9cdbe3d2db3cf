"""Shared fixtures: the real traces in ``../shared/traces`` and a CPU profile recorded live."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import settings as _hypothesis

# Every property test derandomized (the examples follow from the test's code: the same run on
# every machine, no example database carried between runs), without a per-example deadline (a
# loaded 2-core machine is slow, not wrong). HYPOTHESIS_PROFILE=explore searches afresh.
_hypothesis.register_profile("traceview", derandomize=True, database=None, deadline=None)
_hypothesis.register_profile("explore", derandomize=False, deadline=None)
_hypothesis.load_profile(__import__("os").environ.get("HYPOTHESIS_PROFILE", "traceview"))

def pytest_configure(config):
    """Keep traceview's parsed-table cache inside this session's temp area, never ~/.cache
    (tests that exercise the cache set their own TRACEVIEW_CACHE_DIR)."""
    import os
    import tempfile

    if "TRACEVIEW_CACHE_DIR" not in os.environ:
        config._traceview_cache = tempfile.mkdtemp(prefix="traceview-test-cache-")
        os.environ["TRACEVIEW_CACHE_DIR"] = config._traceview_cache


def pytest_unconfigure(config):
    """Remove the session's cache folder (it is ours: made in pytest_configure)."""
    import shutil

    made = getattr(config, "_traceview_cache", None)
    if made:
        shutil.rmtree(made, ignore_errors=True)


# What ``cpu_profile_dir`` records; tests read it through the ``cpu_profile_spec`` fixture.
_CPU_PROFILE_SPEC = {
    "module": "jit_f",  # jax names the compiled program after the function
    "batches": (8, 16),  # one compiled program (program_id) per batch size
    "calls": 3,  # profiled calls per batch size, after one warm-up call each
    "features": 128,  # x: f32[batch, features]
    "hidden": 256,  # w: f32[features, hidden]
}


@pytest.fixture(scope="session")
def shared_traces() -> Path:
    """``../shared/traces`` beside the checkout (real profiler traces; read-only)."""
    # canonical (symlinks resolved): the MCP server resolves its roots, and a checkout whose
    # ../shared is a link must print the same paths through every command
    path = (Path(__file__).resolve().parents[1].parent / "shared" / "traces").resolve()
    if not path.is_dir():
        pytest.fail(
            f"shared traces not found at {path}: the tests need the read-only folder "
            "../shared/traces beside the repository checkout (CI provides it)"
        )
    return path


@pytest.fixture(scope="session")
def cpu_profile_spec() -> dict:
    """What :func:`cpu_profile_dir` ran: module name, batch sizes, calls per batch, dims."""
    return dict(_CPU_PROFILE_SPEC)


@pytest.fixture(scope="session")
def cpu_profile_dir(tmp_path_factory) -> Path:
    """Record a real XLA:CPU profile with ``jax.profiler.trace`` and return its log dir.

    ``jit_f(x, w) = tanh(x @ w).sum(-1)`` is compiled for two batch sizes (8 and 16, so two
    programs with the same HLO op names and different shapes), warmed up, then called
    ``calls`` times per batch size inside the trace. The log dir holds
    ``plugins/profile/<run>/<host>.xplane.pb`` and ``<host>.trace.json.gz``. Inputs are
    placed on the CPU device explicitly so the ops run on XLA:CPU even where an accelerator
    is the default backend. Takes about a second.
    """
    import jax
    import jax.numpy as jnp
    import numpy as np

    spec = _CPU_PROFILE_SPEC
    cpu = jax.devices("cpu")[0]
    rng = np.random.default_rng(0)
    w = jax.device_put(rng.standard_normal((spec["features"], spec["hidden"]), dtype=np.float32), cpu)
    xs = [
        jax.device_put(rng.standard_normal((b, spec["features"]), dtype=np.float32), cpu)
        for b in spec["batches"]
    ]

    def f(x, w):
        return jnp.tanh(x @ w).sum(axis=-1)

    jit_f = jax.jit(f)
    for x in xs:  # compile both programs outside the trace
        jit_f(x, w).block_until_ready()

    logdir = tmp_path_factory.mktemp("cpu_profile")
    with jax.profiler.trace(str(logdir)):
        for x in xs:
            for _ in range(spec["calls"]):
                jit_f(x, w).block_until_ready()

    found = list(logdir.glob("plugins/profile/*/*.xplane.pb"))
    if len(found) != 1:
        pytest.fail(f"jax.profiler.trace wrote {len(found)} xplane files under {logdir}, expected 1")
    return logdir


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    """A fresh, empty cache folder for this test (both caches on, small files cached too)."""
    from traceview.read import cache

    d = tmp_path / "cache"
    monkeypatch.setenv("TRACEVIEW_CACHE_DIR", str(d))
    monkeypatch.delenv("TRACEVIEW_NO_CACHE", raising=False)
    monkeypatch.delenv("TRACEVIEW_MAX_BYTES", raising=False)
    monkeypatch.setattr(cache, "MIN_FILE_BYTES", 0)  # cache the small shared traces too
    return d


def _record_engine(tmp, batch: int):
    from traceview.engine_shim.bench import sampling_params
    from traceview.engine_shim.engine import LLM

    prompts = ["Hello, my name is", "The capital of France is", "The future of AI is", "Once upon a time"] * (batch // 4)
    llm = LLM("tiny", max_num_seqs=batch, max_model_len=128, precompile=False, seed=0)
    params = sampling_params("greedy", 4)
    llm.generate(prompts, params)  # compiles every bucket the traced run uses
    llm.start_profile(tmp / f"b{batch}")
    llm.generate(prompts, params)
    return llm.stop_profile()


@pytest.fixture(scope="session")
def engine_runs(tmp_path_factory):
    """Two live engine profiles, recorded once per session for every test file that needs one
    (test_families_ladder.py, test_steps.py): tiny preset, max_model_len 128, 4 greedy tokens
    (3 decode steps each, the first token from prefill), buckets warmed before the traced
    ``generate``, at batch 8 and 16. Run folders, by batch. Assert structure and exact counts
    on them, never timing (fresh CPU recordings)."""
    tmp = tmp_path_factory.mktemp("engine_runs")
    return {b: _record_engine(tmp, b) for b in (8, 16)}
