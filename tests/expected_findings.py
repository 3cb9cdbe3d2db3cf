"""The finding ids every shared trace (``../shared/traces/*``) and every fixture (``fixtures/*``)
must give, no more and no fewer (``tests/test_findings.py::test_expected_findings_both_ways``).
Each id was decided by reading the trace (its steps, populations, kernels, communication); the
comment says what in the trace makes it fire. Traces are read with ``stale_after_s=None``: whether
a run is stale depends on today's date (``stale-trace`` is tested on its own).

A value that is an exception class name: the trace cannot be analysed (exit code of that error),
so it has no findings at all.
"""

#: shared trace (file or folder name under ../shared/traces) -> expected finding ids or error
SHARED = {
    # a text re-encoding replaced invalid UTF-8 bytes: not an XSpace protobuf
    "corrupt_utf8_mangled.xplane.pb": "TraceUnreadable",
    # TensorFlow without XLA: CUPTI kernels but no HLO op to analyse
    "gpu_v100x8_tf2_bert_no_xla.xplane.pb": "NoOpsFound",
    # matmul/add/multiply jits: 5 op mixes, the commonest in 6 of 18 window steps: no step loop; no
    # kernel without costs, no family far below the roofline
    "mi300x_jax_attention.xplane.pb": set(),
    "mi300x_jax_conv3d.xplane.pb": {
        # cudnn-conv.1: 63 FLOP/byte (ridge 247), 34.9% of 5.3 TB/s, 45.5% of op time
        "far-below-roofline",
        # one jit_forward_3d_conv op mix, 5 executions on each of 8 GPUs; ~23 ms host gap per ~1 ms step
        "host-bound-steps",
    },
    # jit_dot at six sizes: 9 op mixes, the commonest in 3 of 16 steps: a sweep, not a step loop;
    # hipBLASLt GEMMs get costs from their shapes
    "mi300x_jax_gemm_sweep.xplane.pb": set(),
    # copies to/from host memory (S(5)) fill 760 of each 784 ms jit_f step, 100 steps on 4 chips
    "tpu_v6e_4chip_psum.xplane.pb": {"host-transfers-dominate"},
    "tpu_v6e_pallas_matmul_llo.xplane.pb": {
        # the Pallas matmul_optimized kernel carries no FLOPs or bytes: 100% of op time
        "costs-unknown",
        # 3 identical executions of jit_matmul_optimized, 190 µs device idle between 76 µs runs
        "host-bound-steps",
    },
    # RPA-bq_32-bkvp_64-p_64: 25.3% of op time with no FLOPs or bytes; one step per device (no loop);
    # its 4,096-token KV blocks against 32,768 tokens of page table do not cover the context
    "vllm_tpu_qwen": {"costs-unknown"},
}

#: fixture folder name -> expected finding ids
FIXTURES = {
    # the engine fixtures run their Pallas kernel in the interpreter, which drops its cost estimate:
    # no "costs-unknown" on a CPU profile (nothing in the trace says whether the kernel has one)
    # synchronous XLA:CPU collectives: 2.1 ms exposed of each 3.4 ms jit_body step, 3 steps on 8 devices;
    # the slowest device changes from step to step (no straggler)
    "collectives_8dev": {"exposed-communication"},
    "greedy_b4": {
        # bkv 128 = 8 pages of 16, the whole context the page table allows
        "kv-block-covers-context",
        # ynn_fusion.14 in 3 padding buckets (decode f32[4,512] x3, prefill buckets), 7.5% of op time
        "one-name-several-regimes",
    },
    "greedy_b8": {
        # bkv 128 over the same 128-token context
        "kv-block-covers-context",
        # ynn_fusion.14: decode f32[8,512] x3 beside prefill buckets, 7.6% of op time
        "one-name-several-regimes",
    },
    "h200_cmdbuf": {
        # JAX 0.11 on an H200: each step ends in block_until_ready, so the GPU idles ~0.5 ms between
        # the 0.69 ms steps (60% of the step period)
        "host-bound-steps",
        # the softmax and transpose fusions of the attention (25% of op time) at ~27% of 4.8 TB/s
        "far-below-roofline",
        # the same fusions in the 8x512 and the 8x16 programs (gemm_fusion_dot.8: x24 and x8)
        "one-name-several-regimes",
    },
    "h200_nocmdbuf": {
        # the same program with command buffers off: ~0.32 ms idle between the 0.57 ms steps
        "host-bound-steps",
        # the same softmax and transpose fusions, 25.7% of op time at ~27% of 4.8 TB/s
        "far-below-roofline",
        # no one-name-several-regimes: each instruction is its own op (gemm_fusion_dot.8 x12 and
        # x4, 3.3% of op time, under the 5% a name must hold), not one kernel name run by several
    },
    "hostmask_b4": {
        # the host computes a token mask in Python each step: the device idles 75% of the 3 decode steps
        "host-bound-steps",
    },
    "nodonate_b4": {
        # 4 copies f32[1,33,16,64] of the KV pools (updated in place by the same program) every step
        "state-copied-every-step",
        # bkv 128 over the 128-token context
        "kv-block-covers-context",
    },
    "straggler_8dev": {
        # device 5 runs 200 extra matmuls before each psum: slowest in 3 of 3 steps, ~157x the median
        "straggler-device",
        # the others wait for it at the psum: 5.0 ms exposed of each 7.5 ms step
        "exposed-communication",
    },
    "topp_b4": {
        # bkv 128 over the 128-token context
        "kv-block-covers-context",
        # topp_binary_search over the 512-entry vocabulary: 4.8% of each decode step at top_p=1.0
        "sampler-search-dominates",
        # ynn_fusion.14 in 3 padding buckets, 6.5% of op time
        "one-name-several-regimes",
    },
    # bkv 128 over the 128-token context; only 2 decode steps, so the step rules (exposed
    # communication, host-bound) do not judge them
    "tp_decode": {"kv-block-covers-context"},
}
