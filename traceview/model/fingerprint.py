"""HLO text fingerprints that survive recompilation: the same computation gets the same text.

XLA renumbers instruction names at every compilation (``fusion.12`` becomes ``fusion.40``) and
tuning changes compiler payloads, not the computation. A *population fingerprint* is an op's
HLO text with those removed, so ops can be matched across two profiles.
"""

from __future__ import annotations

import re
from functools import lru_cache

from traceview.model.kernelname import identities
from traceview.model.shapes import fingerprint_text

#: attributes dropped from a fingerprint: compiler payloads and layouts
DROPPED_ATTRS = ("backend_config", "metadata", "frontend_attributes", "operand_layout_constraints", "statistics")


def drop_attr(text: str, name: str) -> str:
    """Remove ``, name=VALUE`` where VALUE is a balanced {...}, a quoted string or a word."""
    out = text
    while True:
        m = re.search(r",?\s*\b" + re.escape(name) + r"=", out)
        if not m:
            return out
        i = m.end()
        n = len(out)
        if i < n and out[i] == "{":
            depth = 0
            j = i
            while j < n:
                c = out[j]
                if c == "{":
                    depth += 1
                elif c == "}":
                    depth -= 1
                    if depth == 0:
                        j += 1
                        break
                elif c == '"':
                    k = out.find('"', j + 1)
                    while k > 0 and out[k - 1] == "\\":
                        k = out.find('"', k + 1)
                    j = n if k < 0 else k
                j += 1
        elif i < n and out[i] == '"':
            k = out.find('"', i + 1)
            while k > 0 and out[k - 1] == "\\":
                k = out.find('"', k + 1)
            j = n if k < 0 else k + 1
        else:
            j = i
            while j < n and out[j] not in ", ":
                j += 1
        out = out[:m.start()] + out[j:]


@lru_cache(maxsize=65536)
def population_fingerprint(hlo_text: str | None) -> str:
    """Fingerprint of one op's HLO text for matching across compilations.

    :func:`traceview.model.shapes.fingerprint_text` (instruction and operand names removed,
    layouts stripped), then the :data:`DROPPED_ATTRS` removed (compiler payloads and layouts,
    which change with tuning but not with the computation) and kernel names replaced by
    their identity (:func:`traceview.model.kernelname.kernel_id`). ``""`` for empty text.
    Never raises.
    """
    if not hlo_text:
        return ""
    fp = fingerprint_text(hlo_text)
    for a in DROPPED_ATTRS:
        if a + "=" in fp:
            fp = drop_attr(fp, a)
    return identities(fp).strip().rstrip(",")
