"""The model layer: the op table and what describes an HLO op.

The op-event table and its schema (dictionary-encoded), shapes and HLO text, HLO protos and
their costs, the kernel-name grammar, timeline arithmetic (self time, enclosing execution),
units, and the builders that turn what :mod:`traceview.read` decodes into a profile's tables.
"""
