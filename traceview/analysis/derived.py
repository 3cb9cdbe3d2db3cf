"""Derived frames computed once per profile and shared by every section that reads them.

A report's sections, a verify run's checks and a diff side read the same derived results of
one profile: the step anatomy, the overlap and stragglers within its windows, the
communication tables, the tagged op descriptions. Each function here returns the profile's
one copy of its result, kept by :meth:`~traceview.model.profiledata.ProfileData.derived`
under the analysis' name and parameters; a profile without that method (a bare object with
``table`` and ``module_runs``), or parameters that cannot key a cache (rule objects), get a
fresh computation. Results are shared: callers treat them as read-only.
"""

from __future__ import annotations

import os

_NO_KEY = object()


def rules_key(rules):
    """A hashable stand-in for family ``rules`` (None, a rules file path or a list of
    ``NAME=REGEX`` strings); :data:`_NO_KEY` when they cannot key a cache."""
    if rules is None:
        return None
    if isinstance(rules, (str, os.PathLike)):
        return ("file", os.fspath(rules))
    try:
        key = tuple(rules)
        hash(key)
    except TypeError:
        return _NO_KEY
    return ("rules", key) if all(isinstance(r, str) for r in key) else _NO_KEY


def _cached(prof, key: tuple, make):
    if _NO_KEY in key or not hasattr(prof, "derived"):
        return make()
    return prof.derived(key, make)


def step_anatomy(prof, rules=None, *, module: str | None = None, extent: str = "span", window: str = "steady"):
    """:func:`traceview.analysis.steps.anatomy.profile_anatomy` of ``prof`` (markers "auto"), once per
    parameters. Raises what it raises (nothing is kept then)."""
    from traceview.analysis.steps.anatomy import profile_anatomy

    return _cached(prof, ("anatomy", rules_key(rules), module, extent, window),
                   lambda: profile_anatomy(prof, rules, module=module, extent=extent, window=window))


def overlap(prof, rules=None, *, module: str | None = None, extent: str = "span", window: str = "steady"):
    """:func:`traceview.analysis.communication.overlap.overlap` of ``prof`` within the windows of
    :func:`step_anatomy` with the same parameters, once per parameters."""
    from traceview.analysis.communication.overlap import overlap as _overlap

    def make():
        anat = step_anatomy(prof, rules, module=module, extent=extent, window=window)
        return _overlap(prof.table, anat.steps if anat is not None else None)

    return _cached(prof, ("overlap", rules_key(rules), module, extent, window), make)


def stragglers(prof, rules=None, *, module: str | None = None, extent: str = "span", window: str = "steady"):
    """:func:`traceview.analysis.communication.stragglers.stragglers` over the steps of :func:`overlap`
    with the same parameters, once per parameters."""
    from traceview.analysis.communication.stragglers import stragglers as _stragglers

    return _cached(prof, ("stragglers", rules_key(rules), module, extent, window),
                   lambda: _stragglers(prof.table, overlap(prof, rules, module=module, extent=extent,
                                                            window=window).steps))


def communication(prof, peaks=None):
    """:func:`traceview.analysis.communication.collectives.communication` of ``prof``, once per chip (the
    only part of ``peaks`` it reads)."""
    from traceview.analysis.communication.collectives import communication as _communication

    chip = (getattr(peaks, "chip", "") if peaks is not None else "") or None
    return _cached(prof, ("communication", chip), lambda: _communication(prof, peaks))


def tagged(prof, rules=None):
    """:func:`traceview.analysis.ops.tagged.tag` of ``prof.table`` with ``rules``, once per rules.
    Raises UsageError on bad rules."""
    from traceview.analysis.ops.tagged import tag

    return _cached(prof, ("tagged", rules_key(rules)), lambda: tag(prof.table, rules))
