"""The loading thread's idle work in steps (traceview.cli.process.imports_while_decoding):
take() leaves it once the trace is decoded; no imports beside the report under pytest."""

from __future__ import annotations

import threading
import time

from traceview.cli import process
from traceview.read import prefetch


def test_the_takers_idle_steps_stop_once_every_part_is_decoded(shared_traces):
    """An idle work with ``steps`` (process.imports_while_decoding's) is stepped through only
    while a part is still being decoded: once every part is done, take() leaves the rest (the
    caller's to do later) and hands the planes over."""
    path = shared_traces / "mi300x_jax_gemm_sweep.xplane.pb"
    first = threading.Event()
    taken = []

    def plan(space):
        def slow(plane, p):
            assert first.wait(30)  # decoded once the taker has taken its first step
            return ("decoded", plane.name)
        return [(space.planes[0], slow)]

    def idle():
        raise AssertionError("stepped through, not called")

    def steps():
        for i in range(5):
            taken.append(i)
            if i == 0:
                first.set()
                assert pf.done[0].wait(30)  # the part is decoded before the next step is asked for
            yield i

    idle.steps = steps
    pf = prefetch.start(path, plan, idle)
    assert pf is not None
    for _ in range(3000):  # until the thread has claimed the plane: the taker drains nothing
        with pf.lock:
            if pf.next == 1:
                break
        time.sleep(0.01)
    space, results = pf.take()
    assert taken == [0]
    assert list(results.values()) == [("decoded", space.planes[0].name)]


def test_the_imports_while_decoding_come_in_steps():
    """process.imports_while_decoding's idle imports every module when called, and its steps
    one module each, in order."""
    idle = process.imports_while_decoding("json", "no such part")
    assert list(idle.steps()) == list(process.AFTER_READ_IMPORTS["json"])
    assert idle() is None


def test_no_imports_beside_under_pytests_import_hook():
    """Under pytest (its assertion rewriting parses traceview's modules with ast, not
    thread-safe in CPython 3.11) a command imports nothing on a second thread."""
    assert process.imports_may_race()
