"""The analysis layer: results computed from the op table, grouped by the question they answer.

* :mod:`~traceview.analysis.ops`: what each HLO op costs (shape-keyed tables, distributions,
  kinds, families, sources, named kernels, the HLO's patterns, the roofline of every op);
* :mod:`~traceview.analysis.hardware`: what the chip can do (peaks and links, each with its source);
* :mod:`~traceview.analysis.steps`: where a step's time goes (anatomy, per-step statistics,
  phases, the roofline per family and step);
* :mod:`~traceview.analysis.communication`: collectives, host transfers, overlap, stragglers;
* :mod:`~traceview.analysis.memory`: device memory from the allocators' events;
* :mod:`~traceview.analysis.compare`: two or more profiles (diff, verify, ladder, history);
* :mod:`~traceview.analysis.findings`: the next change worth making, ranked by impact.

At the top: :class:`~traceview.analysis.report.Report` (what one command shows, gathered
once), :mod:`~traceview.analysis.derived` (the derived frames each computed once per profile),
:mod:`~traceview.analysis.eventstats` (event-column figures several sections read, once per events frame),
the export window, the SQL tables, the report overview and fleet mode. Functions take model
tables and return polars frames or small value objects; none prints or reads a file other
than a rules or checks file named by the caller.
"""
