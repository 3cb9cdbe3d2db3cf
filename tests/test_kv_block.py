"""KV block size: RPA v3 heuristic, argument > env > heuristic precedence, validation, names."""

from __future__ import annotations

import numpy as np
import pytest

from traceview.kernels import kernel_name, match_kernel_config, parse_kernel_config
from traceview.kernels.block_sizes import ENV_VAR, default_kv_block_size, resolve_kv_block_size

BF16 = np.dtype("float16")  # same width as bfloat16: the heuristic only looks at bit width

GEMMA_2B = dict(head_dim=256, num_kv_heads=1, dtype=BF16, page_size=16)
TINY = dict(head_dim=64, num_kv_heads=1, dtype=np.float32, page_size=16)


def test_heuristic_gemma_2b_layer_is_full_context():
    # 1 KiB of K+V per token -> 16 MiB target = 16384 tokens, capped at the 2048 context.
    assert default_kv_block_size(**GEMMA_2B, max_kv=1 << 20) == 16384
    assert default_kv_block_size(**GEMMA_2B, max_kv=2048) == 2048


def test_heuristic_other_geometries():
    # f32, D=64 (lane-padded to 128), 1 KV head: 16 MiB / (4 B * 128 * 2) = 16384 tokens.
    assert default_kv_block_size(**TINY, max_kv=1 << 20) == 16384
    # 8 KV heads, D=128, bf16 (Llama-3-8B-like): 16 MiB / (2 B * 128 * 16) = 4096 tokens.
    assert default_kv_block_size(head_dim=128, num_kv_heads=8, dtype=BF16, page_size=16, max_kv=1 << 20) == 4096
    # Capped at the max context, which is a whole number of pages.
    assert default_kv_block_size(**TINY, max_kv=256) == 256


def test_precedence_argument_over_env_over_heuristic():
    env = {ENV_VAR: "128"}
    assert resolve_kv_block_size(64, **TINY, max_kv=2048, env=env) == (64, "argument")
    assert resolve_kv_block_size(None, **TINY, max_kv=2048, env=env) == (128, "env")
    assert resolve_kv_block_size(None, **TINY, max_kv=2048, env={}) == (2048, "heuristic")
    assert resolve_kv_block_size(None, **TINY, max_kv=2048, env={ENV_VAR: "  "}) == (2048, "heuristic")
    assert resolve_kv_block_size(None, **TINY, max_kv=2048, env={ENV_VAR: " 256 "}) == (256, "env")


def test_reads_process_environment(monkeypatch):
    monkeypatch.setenv(ENV_VAR, "32")
    assert resolve_kv_block_size(None, **TINY, max_kv=2048) == (32, "env")


@pytest.mark.parametrize("bad", ["abc", "0", "-16", "24", "4096", "16.0", ""])
def test_invalid_env_values_name_value_and_rule(bad):
    if bad == "":
        return  # empty means unset (covered above)
    with pytest.raises(ValueError) as e:
        resolve_kv_block_size(None, **TINY, max_kv=2048, env={ENV_VAR: bad})
    msg = str(e.value)
    assert ENV_VAR in msg and repr(bad) in msg
    assert "multiple of the page size (16 tokens)" in msg and "at most the max context (2048 tokens)" in msg


@pytest.mark.parametrize("bad", [0, -16, 24, 4096, 16.5, True, "x"])
def test_invalid_arguments(bad):
    with pytest.raises(ValueError, match=r"kv_block_size=.* multiple of the page size"):
        resolve_kv_block_size(bad, **TINY, max_kv=2048, env={})


def test_kernel_name_round_trip():
    name = kernel_name(page_size=16, kv_block=256)
    assert name == "RPAd-p_16-bq_1_1-bkv_256_256"
    assert parse_kernel_config(name) == {"phase": "decode", "page": 16, "bq": (1, 1), "bkv": (256, 256)}
    sw = kernel_name(page_size=32, kv_block=1024, kv_compute_block=512, q_block=(64, 32), phase="m", sliding_window=4096)
    assert sw == "RPAm-p_32-bq_64_32-bkv_1024_512-sw_4096"
    assert parse_kernel_config(sw) == {"phase": "mixed", "page": 32, "bq": (64, 32), "bkv": (1024, 512), "sliding_window": 4096}


def test_parse_from_op_name_and_legacy_form():
    op = "jit(decode_b8_bkv2048)/jit(main)/RPAd-p_16-bq_1_1-bkv_2048_2048/while/body/dot_general"
    assert parse_kernel_config(op)["bkv"] == (2048, 2048)
    assert parse_kernel_config("RPA-bq_32-bkvp_16-p_16") == {"phase": "mixed", "page": 16, "bq": (32, 32), "bkv": (256, 256)}
    assert match_kernel_config("fusion.12") is None
    with pytest.raises(ValueError, match="no RPA kernel name"):
        parse_kernel_config("while.3")
