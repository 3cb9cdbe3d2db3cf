"""MkDocs hook: the docstrings' Sphinx cross-reference roles (``:class:`~x.Y```) read as code.

mkdocstrings renders ``:func:`traceview.x``` as ``:func:<code>traceview.x</code>``; this keeps
the code and drops the role (and a leading ``~``)."""

import re

_ROLE = re.compile(r":(?:class|func|meth|mod|data|attr|exc|obj):(<code>)~?")


def on_page_content(html, **kwargs):
    return _ROLE.sub(r"\1", html)
