"""Model presets (Gemma-like shapes) and the engine configuration."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

#: KV cache dtypes (the same tuple as :data:`traceview.kernels.quant.KV_DTYPES`; kept here so
#: that the CLI can validate without importing jax).
KV_DTYPES = ("bfloat16", "float32", "int8")

#: model dtypes (weights, activations and, unless ``--kv-dtype`` says otherwise, the KV cache)
DTYPES = ("float32", "bfloat16")


def default_kv_dtype(backend: str) -> str:
    """KV cache dtype used when none is given: ``bfloat16`` on an accelerator (``tpu``, ``gpu``),
    ``float32`` on ``cpu`` (XLA:CPU has no native bf16 arithmetic and converts each use, so
    bf16 there buys memory only; f32 keeps the CPU traces comparable with earlier ones)."""
    return "float32" if backend == "cpu" else "bfloat16"


@dataclass(frozen=True)
class ModelConfig:
    """Shape of a Gemma-like decoder (RMSNorm, RoPE, MQA/GQA, GeGLU MLP, tied scaled embeddings).

    ``dtype`` is the parameter and activation dtype name (``"float32"`` / ``"bfloat16"``), also
    the dtype of the logits the model returns (computed with float32 accumulation).
    """

    name: str
    vocab_size: int
    d_model: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    mlp_hidden: int
    dtype: str = "float32"
    rope_base: float = 10_000.0
    norm_eps: float = 1e-6
    #: KV page size (tokens) the engine uses with this preset unless told otherwise.
    page_size: int = 16
    #: Whether the preset runs on a CPU-only machine in CI time (else ``--allow-cpu`` is needed).
    cpu_ok: bool = False

    def __post_init__(self):
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_heads={self.num_heads} must be a multiple of num_kv_heads={self.num_kv_heads}")
        if self.head_dim % 2:
            raise ValueError(f"head_dim={self.head_dim} must be even for RoPE")
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype={self.dtype!r} must be one of {', '.join(DTYPES)}")


#: ``gemma-2b``: Gemma 2B's published shape (d_model 2048, 18 layers, 8 query heads sharing
#: 1 KV head of dim 256, GeGLU hidden 16384, vocab 256000, bf16) — for accelerators only.
#: ``tiny``: the same ratios scaled down to run on 2 CPU cores in seconds.
#: ``study``: the study's shapes where they set the costs (vocabulary 256,000, so the logits,
#: their f32 conversion and the top-p search are vocabulary-sized; 8 query heads of dim 256
#: sharing 1 KV head; 128-token pages) with 2 layers and a small hidden size, for CPU.
PRESETS: dict[str, ModelConfig] = {
    "tiny": ModelConfig("tiny", vocab_size=512, d_model=256, num_layers=2, num_heads=8, num_kv_heads=1,
                        head_dim=64, mlp_hidden=512, dtype="float32", cpu_ok=True),
    "study": ModelConfig("study", vocab_size=256_000, d_model=256, num_layers=2, num_heads=8, num_kv_heads=1,
                         head_dim=256, mlp_hidden=512, dtype="float32", page_size=128, cpu_ok=True),
    "gemma-2b": ModelConfig("gemma-2b", vocab_size=256_000, d_model=2048, num_layers=18, num_heads=8, num_kv_heads=1,
                            head_dim=256, mlp_hidden=16_384, dtype="bfloat16"),
}


def model_config(model: str | ModelConfig, dtype: str | None = None) -> ModelConfig:
    """Look up a preset by name (or pass a :class:`ModelConfig` through), with ``dtype`` in
    place of its own when given. Raises ValueError for an unknown preset or dtype."""
    if isinstance(model, ModelConfig):
        cfg = model
    else:
        try:
            cfg = PRESETS[model]
        except KeyError:
            raise ValueError(f"unknown model preset {model!r}; choose one of {sorted(PRESETS)}") from None
    return cfg if dtype is None or dtype == cfg.dtype else dataclasses.replace(cfg, dtype=dtype)


@dataclass(frozen=True)
class EngineConfig:
    """Serving configuration (vLLM names where they exist).

    * ``max_num_seqs``: concurrent requests (largest request bucket).
    * ``max_model_len``: prompt + generated tokens per request (the max context).
    * ``page_size``: tokens per KV page; page 0 is reserved as the trash page.
    * ``kv_block_size``: decode KV block in tokens; None = env ``TRACEVIEW_KV_BLOCK_SIZE`` or heuristic.
    * ``max_num_batched_tokens``: largest prefill token bucket (default ``max_model_len``); with
      chunked prefill, the token budget of one prefill step (vLLM's name and meaning).
    * ``enable_chunked_prefill``: pack prompt chunks of several requests into each prefill
      step under the budget (vLLM's name); off: one request per prefill, whole prompt.
    * ``enable_prefix_caching``: reuse full KV pages of repeated prompt prefixes (implies the
      chunked scheduler, whose attention reads the cache).
    * ``min_token_bucket`` / ``min_request_bucket``: smallest buckets (vLLM TPU: 16 and 8).
    * ``num_pages``: page pool size including page 0 (default: enough for every slot at max length).
    * ``precompile``: compile every bucket at start-up (timed separately) instead of on first use.
    * ``interpret``: Pallas interpret mode; None = compiled on TPU (Mosaic) and GPU (the Triton
      kernel of :mod:`traceview.kernels.paged_attention_gpu`), interpreted on CPU.
    * ``donate``: donate the KV cache to the decode step (``donate_argnums``), so the page
      write updates it in place; False compiles the copying update (a new cache array per
      step), the second seed's un-donated baseline. Prefill always donates.
    * ``kv_dtype``: KV cache dtype, ``bfloat16``, ``float32`` or ``int8`` (per-token scales,
      :mod:`traceview.kernels.quant`); None = :func:`default_kv_dtype` of the backend.
    * ``kv_cache_bytes``: KV memory budget in bytes (vLLM-like); the page count is derived from
      it for ``kv_dtype``, scales included (:func:`traceview.engine_shim.kv_cache.kv_capacity`),
      and the engine then records that count as ``num_pages``.
    """

    max_num_seqs: int = 8
    max_model_len: int = 512
    page_size: int = 16
    kv_block_size: int | None = None
    max_num_batched_tokens: int | None = None
    min_token_bucket: int = 16
    min_request_bucket: int = 8
    num_pages: int | None = None
    precompile: bool = True
    interpret: bool | None = None
    seed: int = 0
    enable_chunked_prefill: bool = False
    enable_prefix_caching: bool = False
    donate: bool = True
    kv_dtype: str | None = None
    kv_cache_bytes: int | None = None

    def __post_init__(self):
        for f in ("max_num_seqs", "max_model_len", "page_size", "min_token_bucket", "min_request_bucket"):
            if int(getattr(self, f)) <= 0:
                raise ValueError(f"{f} must be positive, got {getattr(self, f)!r}")
        if self.max_num_batched_tokens is not None and int(self.max_num_batched_tokens) <= 0:
            raise ValueError(f"max_num_batched_tokens must be positive, got {self.max_num_batched_tokens!r}")
        if self.kv_dtype is not None and self.kv_dtype not in KV_DTYPES:
            raise ValueError(f"kv_dtype={self.kv_dtype!r} must be one of {', '.join(KV_DTYPES)}")

    @property
    def pages_per_seq(self) -> int:
        return -(-self.max_model_len // self.page_size)

    @property
    def total_pages(self) -> int:
        return self.num_pages if self.num_pages is not None else self.max_num_seqs * self.pages_per_seq + 1

    def replace(self, **kw) -> "EngineConfig":
        return dataclasses.replace(self, **kw)
