"""Finding rules on device memory (``Report.memory``,
:class:`~traceview.analysis.memory.allocators.MemoryReport`): a peak near the allocator's capacity, and
memory that grows step after step. Both stay silent when the trace has no allocator events
or the figure they need is unknown: :class:`~traceview.analysis.findings.NotEvaluated`. Each rule:
``(Inputs, Thresholds) -> Finding | NotEvaluated | None``."""

from __future__ import annotations

from traceview.analysis.findings import Finding, NotEvaluated
from traceview.analysis.findings._context import pct, unevaluable
from traceview.model.units import fmt_bytes


def _allocators(ctx) -> list:
    mem = getattr(ctx.report, "memory", None)
    return list(getattr(mem, "allocators", None) or [])


def _no_allocators(ctx) -> str:
    """Why there is no allocator: the memory section's own reason when the trace had events (a
    device filter kept none, :attr:`MemoryReport.absent`), else that it has no allocator events."""
    return getattr(getattr(ctx.report, "memory", None), "absent", None) or "no allocator events in the trace"


def near_capacity(ctx, th) -> Finding | None:
    """The allocator whose peak in use is the largest share of its capacity, when that share is
    at least ``memory_share``."""
    allocs = _allocators(ctx)
    if not allocs:
        return NotEvaluated("memory-near-capacity", _no_allocators(ctx))
    if all(a.peak_share is None for a in allocs):
        return NotEvaluated("memory-near-capacity", "no allocator's capacity is known")
    cands = [a for a in allocs if a.peak_share is not None and a.peak_share >= th.memory_share]
    if not cands:
        return None
    a = max(cands, key=lambda x: x.peak_share)
    top = a.alive.head(3).to_dicts() if a.alive.height else []
    return Finding(
        "memory-near-capacity", "high" if a.peak_share >= 0.98 else "medium",
        f"allocator {a.allocator} on {a.host} peaks at {fmt_bytes(a.peak_in_use)} of its {fmt_bytes(a.capacity)} "
        f"({pct(a.peak_share)}); {fmt_bytes(a.capacity - a.peak_in_use)} left"
        + (f" (fragmentation {a.fragmentation:.2f} at the peak)" if a.fragmentation is not None else ""),
        {"host": a.host, "allocator": a.allocator, "peak_in_use_bytes": a.peak_in_use,
         "capacity_bytes": a.capacity, "share": a.peak_share, "fragmentation": a.fragmentation,
         "peak_step": a.peak_step, "alive_at_peak": top},
        "what fits decides speed as much as time does: in the raw-JAX decode engine a KV cache that was not "
        "donated held a second copy at every decode step, so a non-donated step measured exactly half the usable "
        "capacity, and donation nearly doubled the resident KV tokens",
        "look at the largest allocations alive at the peak: donate buffers the step replaces (donate_argnums), "
        "keep the KV cache in int8, shrink the batch or the KV pool, or shard what does not fit",
        f"traceview verify AFTER --check 'memory peak < {fmt_bytes(a.capacity * th.memory_share)}'")


def grows_per_step(ctx, th) -> Finding | None:
    """Bytes in use at the end of each steady step growing by at least ``memory_growth`` of
    their mean per step, without a step that gives memory back, on a repeated step loop."""
    allocs = _allocators(ctx)
    if not allocs:
        return NotEvaluated("memory-grows-per-step", _no_allocators(ctx))
    why = unevaluable(ctx, th.step_repeats)
    if why:
        return NotEvaluated("memory-grows-per-step", why)
    if all(a.growth_pct is None for a in allocs):
        return NotEvaluated("memory-grows-per-step", "no allocator has per-step figures")
    best = None
    for a in allocs:
        if a.growth_pct is None or a.steps is None or a.growth_pct / 100 < th.memory_growth:
            continue
        ends = a.steps.filter(a.steps["steady"])["end_in_use"].to_list()
        if any(b < x for x, b in zip(ends, ends[1:])):
            continue  # memory given back within the window: not a steady growth
        if best is None or a.growth_pct > best.growth_pct:
            best = a
    if best is None:
        return None
    a = best
    ends = a.steps.filter(a.steps["steady"])["end_in_use"].to_list()
    return Finding(
        "memory-grows-per-step", "high",
        f"allocator {a.allocator} on {a.host} grows by {fmt_bytes(a.growth_per_step)} per step ({a.growth_pct:+.2f}% per "
        f"step, from {fmt_bytes(ends[0])} to {fmt_bytes(ends[-1])} over {len(ends)} steady steps), never giving "
        "memory back",
        {"host": a.host, "allocator": a.allocator, "growth_per_step_bytes": a.growth_per_step,
         "growth_pct": a.growth_pct, "steps": len(ends), "first_end_bytes": ends[0], "last_end_bytes": ends[-1],
         "step_source": a.step_source},
        "memory that grows at every step of a loop that should be steady is held across steps (a leak, a cache "
        "without a bound, an output kept alive by the host): it ends the run when it meets the capacity",
        "find what each step leaves alive (the allocations alive at the peak, by op and shape): outputs kept by "
        "the host loop, a growing cache, buffers not donated",
        f"traceview verify AFTER --check 'memory growth per step < {100 * th.memory_growth:g}%'")


RULES = (near_capacity, grows_per_step)
