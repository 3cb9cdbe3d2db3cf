"""Pallas kernels bundled with traceview (installed as ``traceview.kernels``).

* :mod:`.paged_attention` — ragged paged attention, decode phase (the Pallas kernel).
* :mod:`.reference` — plain ``jax.numpy`` reference used for parity tests.
* :mod:`.block_sizes` — KV block size heuristic, ``TRACEVIEW_KV_BLOCK_SIZE`` override, validation.
* :mod:`.naming` — kernel names carrying the block configuration, and ``parse_kernel_config``.

Importing this package does not import jax; the submodules that need it do.
"""

from .naming import kernel_name, match_kernel_config, parse_kernel_config

__all__ = ["kernel_name", "match_kernel_config", "parse_kernel_config"]
