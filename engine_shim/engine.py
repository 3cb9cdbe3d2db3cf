"""vLLM-shaped offline engine: ``LLM(...).generate(prompts, SamplingParams(...))``.

Scheduling (offline batch, continuous): waiting requests are admitted while a request slot
and enough KV pages are free; each admitted request is prefilled alone (padded to a *token
bucket*, jnp causal attention, K/V written to its pages) and its first token sampled; then
all running requests decode together, padded to a *request bucket*, through the Pallas
kernel. Finished requests free their pages and slots at once.

Every bucket is its own named, ahead-of-time compiled function, hence its own
``hlo_module`` in a trace:

* ``jit_prefill_t{T}`` — prefill of one request at token bucket T; with chunked prefill
  ``jit_prefill_t{T}_r{S}``: packed chunks of up to S requests (a power of two up to
  ``max_num_seqs``: attention and logits cost grow with S) in T tokens;
* ``jit_decode_b{R}_bkv{K}`` — decode forward at request bucket R with KV block K (logits);
* ``jit_greedy_b{R}`` — argmax selection; ``jit_sample_b{R}`` — the top-k/top-p sampler
  (with its 32-iteration ``topp_binary_search``), used only when some running request samples;
* ``jit_logits_f32_b{R}`` — with a bfloat16 model (``dtype``), the runner's conversion of the
  ``bf16[R, V]`` logits to float32 before the sampler, whose greedy program then returns the
  float32 logits as well (a copy): the production-like path of the study's Strategy 6.
  ``greedy_bf16_logits`` skips both (argmax on the bf16 logits; greedy requests only).

With ``enable_chunked_prefill`` (or ``enable_prefix_caching``) prefill is scheduled as vLLM
does it instead: each scheduler step packs prompt *chunks* of several requests into one token
bucket, at most ``max_num_batched_tokens`` tokens in all (FIFO; a prompt longer than what is
left of the budget is split, its next chunk goes in the next step); every chunk attends over
its request's pages already in the cache plus itself (``model.chunked_prefill_forward``), and
a request samples its first token when its last chunk is done. Decode steps of running
requests alternate with those prefill steps. With ``enable_prefix_caching`` the full prompt
pages are kept under chained hashes (:class:`~traceview.engine_shim.kv_cache.PrefixCache`)
and a later prompt with the same leading pages reuses them; the last prompt token is always
computed (its logits give the first token), as vLLM does.

The KV cache is donated to the decode step (updated in place); ``donate=False`` compiles the
copying update instead, whose trace shows one cache-sized ``copy`` per pool per step. Each
prefill and decode step is timed (``step_clock``) from building its inputs to its tokens on
the host, and counted (``stats.step_tokens``, ``stats.step_s``, ``stats.last_steps``), for
the bench's paired checks; each token is stamped, per request, with the end of the step that
produced it (``stats.last_token_times``), for the bench's inter-token gaps;
:meth:`LLM.verification` reads the study's start-up figures off the arrays and executables.

With ``precompile=True`` all of them are compiled in the constructor (timed as
``stats.precompile_s``), as vLLM TPU precompiles its bucket menu.

The kernel entry points are reached through names bound at import time in this package
(``model.paged_decode``, ``engine.decode_block_size``); the transplant shim must therefore
run *before* the engine is constructed (import order is the mechanism, as in the study).
"""

from __future__ import annotations

import logging
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from traceview.kernels.paged_attention import decode_block_size

from . import model as model_lib
from . import tensor_parallel as tp_lib
from .buckets import pad_to_bucket, pow2_buckets
from .config import EngineConfig, ModelConfig, default_kv_dtype, model_config
from .kv_cache import KVCapacity, PageAllocator, PrefixCache, empty_cache, kv_capacity, page_hashes, pages_for
from .sampling import SamplingParams, greedy_tokens, greedy_tokens_f32, runner_logits_f32, sample_tokens
from .tokenizer import ByteTokenizer
from .verification import aliased_bytes, array_bytes, cache_capacity, program_memory

log = logging.getLogger(__name__)


@dataclass
class CompletionOutput:
    index: int
    text: str
    token_ids: list[int]
    finish_reason: str  # "length" | "stop"


@dataclass
class RequestOutput:
    request_id: str
    prompt: str
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput]
    finished: bool = True


@dataclass
class EngineStats:
    """Engine-side counters. Times in seconds (``time.perf_counter``)."""

    init_s: float = 0.0  # constructor total (weights, cache, precompile)
    precompile_s: float = 0.0  # compiling the bucket menu in the constructor
    lazy_compile_s: float = 0.0  # buckets compiled on first use (precompile=False)
    num_compiled: int = 0
    num_generated_tokens: int = 0  # the engine's own token counter
    num_prompt_tokens: int = 0
    num_prefills: int = 0  # requests whose prefill completed
    num_prefill_steps: int = 0  # prefill program runs (one per request without chunked prefill)
    num_prefill_chunks: int = 0  # request chunks over all prefill steps
    num_prefill_computed_tokens: int = 0  # prompt tokens run through prefill (prefix-cache hits excluded)
    prefix_queried_pages: int = 0  # full prompt pages looked up in the prefix cache
    prefix_hit_pages: int = 0  # ... and found (their K/V reused, not recomputed)
    prefix_queried_tokens: int = 0
    prefix_hit_tokens: int = 0
    num_decode_steps: int = 0
    generate_s: float = 0.0  # time spent inside generate()
    compiled_modules: list[str] = field(default_factory=list)  # hlo_module names, compile order
    # The scheduler's per-step counters (independent of the outputs and of generate_s):
    step_tokens: int = 0  # tokens the steps produced: 1 per prefill, num_seqs per decode step
    step_s: float = 0.0  # summed step times, each from building its inputs to its tokens ready on the host
    #: the last generate() call's steps: (kind, bucket, num_seqs, seconds), kind "prefill"/"decode"
    last_steps: list[tuple[str, int, int, float]] = field(default_factory=list)
    #: the last generate() call's token times, one list per request in prompt order: for each
    #: token, the end of the step that produced it (its tokens ready on the host), in seconds
    #: of the step clock since that call started
    last_token_times: list[list[float]] = field(default_factory=list)


@dataclass
class _Request:
    index: int
    prompt: str
    prompt_ids: list[int]
    params: SamplingParams
    max_new: int
    seed: int
    pages: list[int] = field(default_factory=list)
    num_computed: int = 0  # prompt tokens whose K/V are in the cache (chunked prefill)
    page_keys: list[bytes] = field(default_factory=list)  # prefix-cache keys of the full prompt pages
    out: list[int] = field(default_factory=list)
    times: list[float] = field(default_factory=list)  # step-clock time each token of ``out`` was ready
    finish_reason: str | None = None

    @property
    def uses_sampler(self) -> bool:
        return _uses_sampler(self.params)


def _uses_sampler(sp: SamplingParams) -> bool:
    """Whether ``sp`` needs the sampler program (temperature > 0 or a repetition penalty)."""
    return not sp.greedy or sp.repetition_penalty != 1.0


def _named(fn, name):
    fn.__name__ = fn.__qualname__ = name
    return fn


def _abstract(tree, with_sharding: bool = False):
    if with_sharding:  # tensor parallel: compile for the arrays' placement on the mesh
        return jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=a.sharding), tree)
    return jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), tree)


def host_mask(logits: np.ndarray, tokenizer) -> np.ndarray:
    """An additive token mask ([batch, vocab] float32: 0 allowed, -inf banned) computed on the
    host in Python, as a host-side constrained-decoding logits processor does: every token's
    text is tested per row (control bytes banned), and the row's best token is always kept,
    so greedy outputs are unchanged. Its cost is host time inside each decode step."""
    b, v = logits.shape
    out = np.zeros((b, v), np.float32)
    for i in range(b):
        best = int(np.argmax(logits[i]))
        for t in range(v):
            text = tokenizer.decode([t]) if t < 256 else ""
            if t != best and text and not text.isprintable():
                out[i, t] = -np.inf
    return out


class LLM:
    """Toy serving engine with a vLLM-like interface.

    Args:
      model: preset name (``"tiny"``, ``"study"``, ``"gemma-2b"``) or a :class:`ModelConfig`.
      page_size: KV page size in tokens; None = the preset's (``ModelConfig.page_size``).
      max_num_seqs, max_model_len, kv_block_size, page_size, num_pages, min_request_bucket,
      min_token_bucket, max_num_batched_tokens, enable_chunked_prefill, enable_prefix_caching,
      precompile, interpret, seed, donate, kv_dtype, kv_cache_bytes: see
      :class:`~traceview.engine_shim.config.EngineConfig`.
      tensor_parallel: split the model over this many devices (query heads and MLP hidden
        units, two all-reduces per layer; :mod:`~traceview.engine_shim.tensor_parallel`);
        1 = one device. ValueError when fewer devices exist, with chunked prefill or prefix
        caching, or when it does not divide the heads and the MLP hidden size.
      dtype: model dtype (weights, activations, logits), ``float32`` or ``bfloat16``; None =
        the preset's. When given, it is also the KV cache dtype unless ``kv_dtype`` is.
      greedy_bf16_logits: with a bfloat16 model, take the greedy argmax on the bf16 logits and
        skip the runner's float32 conversion and the sampler's float32 copy (the treatment);
        the engine then serves greedy requests only (no sampler programs; ``generate`` raises
        ValueError for a request that samples or has a repetition penalty).
      step_clock: seconds clock for the per-step times and the token times (``stats.step_s``,
        ``last_steps``, ``last_token_times``); default ``time.perf_counter``. Injectable so a
        test can break it and see the bench's independent time check fail.

    Raises: ValueError for an unknown preset, an invalid KV block size
      (``TRACEVIEW_KV_BLOCK_SIZE`` included), an unknown ``kv_dtype``, both ``num_pages`` and
      ``kv_cache_bytes``, a budget under 2 pages, an unknown ``dtype``, or
      ``greedy_bf16_logits`` with a float32 model.
    """

    def __init__(self, model: str | ModelConfig = "tiny", *, max_num_seqs: int = 8, max_model_len: int = 512,
                 kv_block_size: int | None = None, seed: int = 0, page_size: int | None = None, num_pages: int | None = None,
                 min_request_bucket: int = 8, min_token_bucket: int = 16, max_num_batched_tokens: int | None = None,
                 precompile: bool = True, interpret: bool | None = None, enable_chunked_prefill: bool = False,
                 enable_prefix_caching: bool = False, donate: bool = True,
                 step_clock: Callable[[], float] | None = None, kv_dtype: str | None = None,
                 kv_cache_bytes: int | None = None, host_sampler_mask: bool = False, tensor_parallel: int = 1,
                 dtype: str | None = None, greedy_bf16_logits: bool = False):
        t0 = time.perf_counter()
        #: compute a token mask on the host each decode step (host_mask), the host-bound treatment
        self.host_sampler_mask = bool(host_sampler_mask)
        self._clock = step_clock or time.perf_counter
        self.model_config: ModelConfig = model_config(model, dtype)
        if greedy_bf16_logits and self.model_config.dtype != "bfloat16":
            raise ValueError(f"greedy_bf16_logits needs a bfloat16 model (dtype bfloat16); this one is "
                             f"{self.model_config.dtype}, whose logits no runner converts")
        #: the treatment: argmax on the bf16 logits, no float32 conversion or copy, greedy only
        self.greedy_bf16_logits = bool(greedy_bf16_logits)
        #: the production-like path: the runner converts non-float32 logits before the sampler
        self.upcast_logits = self.model_config.dtype != "float32" and not self.greedy_bf16_logits
        page_size = self.model_config.page_size if page_size is None else page_size
        if num_pages is not None and kv_cache_bytes is not None:
            raise ValueError("give num_pages or kv_cache_bytes, not both")
        if kv_dtype is None:
            kv_dtype = dtype if dtype is not None else default_kv_dtype(jax.default_backend())
        self.config = EngineConfig(max_num_seqs=max_num_seqs, max_model_len=max_model_len, page_size=page_size,
                                   kv_block_size=kv_block_size, max_num_batched_tokens=max_num_batched_tokens,
                                   min_token_bucket=min_token_bucket, min_request_bucket=min_request_bucket,
                                   num_pages=num_pages, precompile=precompile, interpret=interpret, seed=seed,
                                   enable_chunked_prefill=enable_chunked_prefill,
                                   enable_prefix_caching=enable_prefix_caching, donate=donate,
                                   kv_dtype=kv_dtype, kv_cache_bytes=kv_cache_bytes)
        mc = self.model_config
        self.kv_capacity: KVCapacity = kv_capacity(
            num_layers=mc.num_layers, num_kv_heads=mc.num_kv_heads, page_size=page_size, head_dim=mc.head_dim,
            dtype=kv_dtype, **({"kv_cache_bytes": kv_cache_bytes} if kv_cache_bytes is not None
                               else {"num_pages": self.config.total_pages}))
        if kv_cache_bytes is not None:
            self.config = self.config.replace(num_pages=self.kv_capacity.num_pages)
        ec = self.config
        self.tokenizer = ByteTokenizer()
        if mc.vocab_size <= self.tokenizer.eos_token_id:
            raise ValueError(f"vocab_size={mc.vocab_size} too small for the byte tokenizer")
        self.kv_block_size: int = decode_block_size(
            kv_block_size, head_dim=mc.head_dim, num_kv_heads=mc.num_kv_heads, dtype=jnp.dtype(ec.kv_dtype),
            page_size=ec.page_size, max_kv=ec.pages_per_seq * ec.page_size)
        # a budget past what can ever be scheduled (one prompt, or every slot's when chunked) only adds buckets
        most = ec.max_model_len * (ec.max_num_seqs if ec.enable_chunked_prefill or ec.enable_prefix_caching else 1)
        self.token_buckets = pow2_buckets(ec.min_token_bucket, min(ec.max_num_batched_tokens or ec.max_model_len, most))
        self.request_buckets = pow2_buckets(ec.min_request_bucket, ec.max_num_seqs)
        self.sampler_buckets = sorted({1, *self.request_buckets})
        self.stats = EngineStats()
        self.params = model_lib.init_params(mc, seed)
        self.k_cache, self.v_cache = empty_cache(num_layers=mc.num_layers, num_kv_heads=mc.num_kv_heads,
                                                 num_pages=ec.total_pages, page_size=ec.page_size,
                                                 head_dim=mc.head_dim, dtype=ec.kv_dtype)
        self.allocator = PageAllocator(ec.total_pages)
        self.chunked = ec.enable_chunked_prefill or ec.enable_prefix_caching
        self.pool = PrefixCache(self.allocator, ec.page_size)  # the chunked path's reference-counted pages
        self.prefill_row_buckets = pow2_buckets(1, ec.max_num_seqs) if self.chunked else [1]
        self._compiled: dict[tuple, object] = {}
        self._names: dict[tuple, str] = {}  # (kind, size) -> its hlo_module name, jit_<name>
        self._memory: dict[tuple, dict] = {}  # (kind, size) -> program_memory(...), read once
        self._num_requests = 0
        self._profile_dir: Path | None = None
        self._profile_runs_before: set[str] = set()
        self.tensor_parallel = int(tensor_parallel)
        self.mesh = None
        if self.tensor_parallel > 1:
            if self.chunked:
                raise ValueError("tensor_parallel > 1 runs the one-request prefill only (no chunked prefill or "
                                 "prefix caching)")
            self.mesh = tp_lib.make_mesh(self.tensor_parallel, mc.num_heads, mc.mlp_hidden)
            self.params = tp_lib.shard_params(self.params, self.mesh)
            self.k_cache, self.v_cache = tp_lib.replicate((self.k_cache, self.v_cache), self.mesh)
        jax.block_until_ready((self.params, self.k_cache, self.v_cache))
        log.info("engine %s: kv_block_size=%d token_buckets=%s request_buckets=%s; %s", mc.name, self.kv_block_size,
                 self.token_buckets, self.request_buckets, self.kv_capacity.describe())
        self._precompiling = False
        if precompile:
            tp = time.perf_counter()
            self._precompiling = True
            try:
                self.precompile()
            finally:
                self._precompiling = False
            self.stats.precompile_s = time.perf_counter() - tp
        self.stats.init_s = time.perf_counter() - t0

    # ------------------------------------------------------------------ verification
    def verification(self) -> dict:
        """The study's verification figures, read off the allocated arrays and the compiled
        executables (see :mod:`~traceview.engine_shim.verification`): ``param_count``,
        ``param_bytes``, ``kv_cache`` (:func:`~traceview.engine_shim.verification.cache_capacity`),
        ``buckets_compiled`` (``jit_*`` names so far) and ``decode_donation`` (``requested``,
        ``module``: the largest decode bucket compiled or None, ``aliased_bytes``) and ``memory``
        (:meth:`program_memory`)."""
        count, nbytes = array_bytes(self.params)
        decode = sorted(r for kind, r in self._compiled if kind == "decode")
        module = f"jit_decode_b{decode[-1]}_bkv{self.kv_block_size}" if decode else None
        return {"param_count": count, "param_bytes": nbytes, "kv_cache": cache_capacity(self.k_cache, self.v_cache),
                "buckets_compiled": list(self.stats.compiled_modules),
                "decode_donation": {"requested": self.config.donate, "module": module,
                                    "aliased_bytes": aliased_bytes(self._compiled[("decode", decode[-1])]) if decode else None},
                "memory": self.program_memory()}

    def program_memory(self) -> dict:
        """``{program name: verification.program_memory(...)}`` for every program compiled so
        far, in compile order: XLA's ``CompiledMemoryStats`` of the executable the engine runs
        (no second compile), KV pool figures for the programs that take the cache (prefill and
        decode: arguments 1-2, outputs 1-2)."""
        out = {}
        for key, compiled in self._compiled.items():
            m = self._memory.get(key)
            if m is None:
                kv = (1, 2) if key[0] in ("prefill", "decode") else ()
                m = self._memory[key] = program_memory(compiled, kv, kv)
            out[self._names[key]] = m
        return out

    # ------------------------------------------------------------------ compile buckets
    def bucket_names(self) -> list[str]:
        """Function names of the full bucket menu (each is ``jit_<name>`` in a trace)."""
        prefill = ([f"prefill_t{t}_r{r}" for t in self.token_buckets for r in self.prefill_row_buckets] if self.chunked
                   else [f"prefill_t{t}" for t in self.token_buckets])
        return (prefill
                + [f"decode_b{r}_bkv{self.kv_block_size}" for r in self.request_buckets]
                + ([f"logits_f32_b{r}" for r in self.sampler_buckets] if self.upcast_logits else [])
                + [f"greedy_b{r}" for r in self.sampler_buckets]
                + ([] if self.greedy_bf16_logits else [f"sample_b{r}" for r in self.sampler_buckets]))

    def precompile(self) -> None:
        """Compile every bucket now (idempotent)."""
        for t in self.token_buckets:
            if self.chunked:
                for r in self.prefill_row_buckets:
                    self._get("prefill", (t, r))
            else:
                self._get("prefill", t)
        for r in self.request_buckets:
            self._get("decode", r)
        for r in self.sampler_buckets:
            if self.upcast_logits:
                self._get("logits_f32", r)
            self._get("greedy", r)
            if not self.greedy_bf16_logits:
                self._get("sample", r)

    def _get(self, kind: str, size: int):
        key = (kind, size)
        fn = self._compiled.get(key)
        if fn is None:
            t0 = time.perf_counter()
            fn = self._compile(kind, size)
            self._compiled[key] = fn
            self._names[key] = self.stats.compiled_modules[-1]  # _compile appends the one name it compiled
            self.stats.num_compiled += 1
            if not self._precompiling:
                self.stats.lazy_compile_s += time.perf_counter() - t0
        return fn

    def _compile(self, kind: str, size: int):
        mc, ec = self.model_config, self.config
        pps = ec.pages_per_seq
        i32 = jnp.int32
        mesh = self.mesh
        cache = _abstract((self.k_cache, self.v_cache), mesh is not None)
        params = _abstract(self.params, mesh is not None)
        out = (lambda t: tp_lib.constrain_replicated(t, mesh)) if mesh is not None else (lambda t: t)
        logits_sharding = {"sharding": tp_lib.replicated(mesh)} if mesh is not None else {}
        if kind == "prefill":
            if self.chunked:
                return self._compile_chunked(*size, params, cache)

            def fn(params, k_cache, v_cache, tokens, length, page_row):
                logits, k_cache, v_cache = model_lib.prefill_forward(params, mc, k_cache, v_cache, tokens, length,
                                                                     page_row, page_size=ec.page_size)
                return out((logits[None, :], k_cache, v_cache))
            name = f"prefill_t{size}"
            args = (params, *cache, jax.ShapeDtypeStruct((size,), i32), jax.ShapeDtypeStruct((), i32),
                    jax.ShapeDtypeStruct((pps,), i32))
            jitted = jax.jit(_named(fn, name), donate_argnums=(1, 2))
        elif kind == "decode":
            bkv, interpret = self.kv_block_size, ec.interpret

            # tensor parallel: the kernel under shard_map, looked up in the model module at trace time (transplants)
            attention = None if mesh is None else tp_lib.head_sharded_attention(
                mesh, lambda *a, **k: model_lib.paged_decode(*a, **k))

            def fn(params, k_cache, v_cache, tokens, positions, page_table):
                return out(model_lib.decode_forward(params, mc, k_cache, v_cache, tokens, positions, page_table,
                                                    page_size=ec.page_size, kv_block_size=bkv, interpret=interpret,
                                                    attention=attention))
            name = self.decode_program(size)
            args = (params, *cache, jax.ShapeDtypeStruct((size,), i32), jax.ShapeDtypeStruct((size,), i32),
                    jax.ShapeDtypeStruct((size, pps), i32))
            # donate=False: the copying treatment; the scatter into a non-donated cache
            # makes XLA copy the whole pool first (one cache-sized copy per layer, K and V)
            jitted = jax.jit(_named(fn, name), donate_argnums=(1, 2) if ec.donate else ())
        elif kind == "logits_f32":  # the runner's conversion (production-like path, non-float32 model)
            def fn(logits):
                return runner_logits_f32(logits)
            name = f"logits_f32_b{size}"
            args = (jax.ShapeDtypeStruct((size, mc.vocab_size), jnp.dtype(mc.dtype), **logits_sharding),)
            jitted = jax.jit(_named(fn, name))
        elif kind == "greedy":
            # after the runner's conversion: argmax and the float32 logits returned (a copy);
            # else argmax on the model's logits as they are (float32, or bf16 in the treatment)
            def fn(logits):
                return greedy_tokens_f32(logits) if self.upcast_logits else greedy_tokens(logits)
            name = f"greedy_b{size}"
            dt = jnp.float32 if self.upcast_logits else jnp.dtype(mc.dtype)
            args = (jax.ShapeDtypeStruct((size, mc.vocab_size), dt, **logits_sharding),)
            jitted = jax.jit(_named(fn, name))
        elif kind == "sample":
            def fn(logits, temperature, top_k, top_p, repetition_penalty, seen, seeds):
                return sample_tokens(logits, temperature, top_k, top_p, repetition_penalty, seen, seeds)
            name = f"sample_b{size}"
            f32 = jnp.float32
            args = (jax.ShapeDtypeStruct((size, mc.vocab_size), f32, **logits_sharding), jax.ShapeDtypeStruct((size,), f32),
                    jax.ShapeDtypeStruct((size,), i32), jax.ShapeDtypeStruct((size,), f32),
                    jax.ShapeDtypeStruct((size,), f32), jax.ShapeDtypeStruct((size, mc.vocab_size), jnp.bool_),
                    jax.ShapeDtypeStruct((size,), jnp.uint32))
            jitted = jax.jit(_named(fn, name))
        else:  # pragma: no cover - internal
            raise ValueError(kind)
        compiled = jitted.lower(*args).compile()
        self.stats.compiled_modules.append(f"jit_{name}")
        log.debug("compiled jit_%s", name)
        return compiled

    def _compile_chunked(self, size: int, s_rows: int, params, cache):
        mc, ec = self.model_config, self.config
        i32 = jnp.int32
        n_logits = pad_to_bucket(self.sampler_buckets, s_rows)  # rows the token selection takes

        def fn(params, k_cache, v_cache, tokens, positions, slots, page_table, last_index):
            return model_lib.chunked_prefill_forward(params, mc, k_cache, v_cache, tokens, positions, slots, page_table,
                                                     last_index, page_size=ec.page_size)
        name = f"prefill_t{size}_r{s_rows}"
        tok = jax.ShapeDtypeStruct((size,), i32)
        args = (params, *cache, tok, tok, tok, jax.ShapeDtypeStruct((s_rows, ec.pages_per_seq), i32),
                jax.ShapeDtypeStruct((n_logits,), i32))
        compiled = jax.jit(_named(fn, name), donate_argnums=(1, 2)).lower(*args).compile()
        self.stats.compiled_modules.append(f"jit_{name}")
        return compiled

    # ------------------------------------------------------------------ generation
    def generate(self, prompts, sampling_params: SamplingParams | list[SamplingParams] | None = None
                 ) -> list[RequestOutput]:
        """Generate for every prompt; returns outputs in prompt order.

        Args:
          prompts: a string or a list of strings.
          sampling_params: one :class:`SamplingParams` for all prompts, or one per prompt
            (default ``SamplingParams()``).

        Raises: ValueError if a prompt does not fit ``max_model_len`` (it needs room for at
          least one generated token), the lists' lengths differ, or a request needs the
          sampler on a ``greedy_bf16_logits`` engine.
        """
        t0 = time.perf_counter()
        if isinstance(prompts, str):
            prompts = [prompts]
        if sampling_params is None:
            sampling_params = SamplingParams()
        if isinstance(sampling_params, SamplingParams):
            sampling_params = [sampling_params] * len(prompts)
        if len(sampling_params) != len(prompts):
            raise ValueError(f"{len(prompts)} prompts but {len(sampling_params)} SamplingParams")
        if self.greedy_bf16_logits and any(_uses_sampler(sp) for sp in sampling_params):
            raise ValueError("greedy_bf16_logits serves greedy requests only (temperature 0, no repetition penalty): "
                             "the sampler needs the float32 logits")
        ec = self.config
        reqs = []
        for prompt, sp in zip(prompts, sampling_params):
            ids = self.tokenizer.encode(prompt)
            if len(ids) >= ec.max_model_len:
                raise ValueError(f"prompt of {len(ids)} tokens does not fit max_model_len={ec.max_model_len}")
            seed = sp.seed if sp.seed is not None else self.config.seed * 1_000_003 + self._num_requests
            reqs.append(_Request(self._num_requests, prompt, ids, sp, min(sp.max_tokens, ec.max_model_len - len(ids)), seed))
            self._num_requests += 1
        self.stats.last_steps = []
        origin = self._clock()  # of the token times
        try:
            (self._schedule_chunked if self.chunked else self._schedule)(reqs)
        finally:
            self.stats.generate_s += time.perf_counter() - t0
            self.stats.last_token_times = [[t - origin for t in r.times] for r in reqs]
        return self._outputs(reqs)

    def _schedule(self, reqs: list[_Request]) -> None:
        """One-request prefill scheduler: admit and prefill while slots and pages last, one decode step; repeat."""
        ec = self.config
        waiting = deque(reqs)
        running: list[_Request] = []
        try:
            while waiting or running:
                while waiting and len(running) < ec.max_num_seqs:
                    req = waiting[0]
                    need = pages_for(len(req.prompt_ids) + req.max_new - 1, ec.page_size)
                    if need > self.allocator.num_free:
                        if not running:
                            raise MemoryError(f"request needs {need} KV pages; the pool has {self.allocator.num_free} free")
                        break
                    waiting.popleft()
                    req.pages = self.allocator.allocate(need)
                    self._prefill(req)
                    if req.finish_reason is None:
                        running.append(req)
                    else:
                        self._release(req)
                if running:
                    self._decode_step(running)
                    for req in [r for r in running if r.finish_reason is not None]:
                        running.remove(req)
                        self._release(req)
        finally:
            for req in running:
                self._release(req)

    def decode_program(self, bucket: int) -> str:
        """Name of the decode program at request bucket ``bucket`` (JAX prefixes ``jit_``):
        ``decode_b{R}_bkv{K}``."""
        return f"decode_b{bucket}_bkv{self.kv_block_size}"

    def _outputs(self, reqs: list[_Request]) -> list[RequestOutput]:
        return [RequestOutput(str(r.index), r.prompt, r.prompt_ids,
                              [CompletionOutput(0, self.tokenizer.decode(r.out), list(r.out), r.finish_reason or "length")])
                for r in reqs]

    def _schedule_chunked(self, reqs: list[_Request]) -> None:
        """Chunked-prefill scheduler: admit, one packed prefill step, one decode step; repeat."""
        ec = self.config
        waiting = deque(reqs)
        prefilling: list[_Request] = []
        running: list[_Request] = []
        try:
            while waiting or prefilling or running:
                while waiting and len(prefilling) + len(running) < ec.max_num_seqs:
                    req = waiting[0]
                    n = len(req.prompt_ids)
                    need = pages_for(n + req.max_new - 1, ec.page_size)
                    keys = page_hashes(req.prompt_ids, ec.page_size) if ec.enable_prefix_caching else []
                    try:  # the last prompt token is always computed: its logits give the first token
                        req.pages, hits = self.pool.allocate(keys, need, max_hit_pages=(n - 1) // ec.page_size)
                    except MemoryError:
                        if not (prefilling or running):
                            raise
                        break
                    waiting.popleft()
                    req.page_keys, req.num_computed = keys, hits * ec.page_size
                    prefilling.append(req)
                if prefilling:
                    for req in self._chunked_prefill_step(prefilling):
                        prefilling.remove(req)
                        if req.finish_reason is None:
                            running.append(req)
                        else:
                            self._release_pool(req)
                if running:
                    self._decode_step(running)
                    for req in [r for r in running if r.finish_reason is not None]:
                        running.remove(req)
                        self._release_pool(req)
        finally:
            for req in prefilling + running:
                self._release_pool(req)
            p = self.pool
            self.stats.prefix_queried_pages, self.stats.prefix_hit_pages = p.queried_pages, p.hit_pages
            self.stats.prefix_queried_tokens, self.stats.prefix_hit_tokens = p.queried_tokens, p.hit_tokens

    def _release_pool(self, req: _Request) -> None:
        if req.pages:
            self.pool.release(req.pages)
            req.pages = []

    def _chunked_prefill_step(self, prefilling: list[_Request]) -> list[_Request]:
        """Pack chunks FIFO up to the token budget, run ``prefill_t{T}``, sample the first token of
        every request whose prompt is now complete; returns those requests."""
        ec = self.config
        ts = self._clock()
        budget = self.token_buckets[-1]
        rows: list[tuple[_Request, int, int]] = []
        for req in prefilling:
            if budget == 0 or len(rows) == ec.max_num_seqs:
                break
            take = min(len(req.prompt_ids) - req.num_computed, budget)
            rows.append((req, req.num_computed, take))
            budget -= take
        total = sum(take for _, _, take in rows)
        t = pad_to_bucket(self.token_buckets, total)
        s_rows = pad_to_bucket(self.prefill_row_buckets, len(rows))
        n_logits = pad_to_bucket(self.sampler_buckets, s_rows)
        tokens = np.zeros(t, np.int32)
        positions = np.zeros(t, np.int32)
        slots = np.full(t, -1, np.int32)
        table = np.zeros((s_rows, ec.pages_per_seq), np.int32)
        last = np.zeros(n_logits, np.int32)
        off = 0
        for i, (req, start, take) in enumerate(rows):
            tokens[off: off + take] = req.prompt_ids[start: start + take]
            positions[off: off + take] = np.arange(start, start + take)
            slots[off: off + take] = i
            table[i, : len(req.pages)] = req.pages
            last[i] = off + take - 1
            off += take
        fn = self._get("prefill", (t, s_rows))
        # FIFO packing: only the last row can be partial, so the completed requests are rows [0, k).
        done = [req for req, start, take in rows if start + take == len(req.prompt_ids)]
        with jax.profiler.TraceAnnotation("prefill", token_bucket=t, row_bucket=s_rows, prompt_tokens=total,
                                          num_seqs=len(rows)):
            logits, self.k_cache, self.v_cache = fn(self.params, self.k_cache, self.v_cache, tokens, positions, slots,
                                                    table, last)
            toks = self._select(done, logits, n_logits) if done else []
            if not done:  # a step that completes no prompt still waits for its cache update
                jax.block_until_ready(self.k_cache)
            end = self._clock()
            self._record_step("prefill", t, len(done), end - ts)
        self.stats.num_prefill_steps += 1
        self.stats.num_prefill_chunks += len(rows)
        self.stats.num_prefill_computed_tokens += total
        for req, start, take in rows:
            req.num_computed = start + take
            if ec.enable_prefix_caching:
                for i in range(start // ec.page_size, min(req.num_computed // ec.page_size, len(req.page_keys))):
                    self.pool.register(req.page_keys[i], req.pages[i])
        for req, tok in zip(done, toks):
            self.stats.num_prefills += 1
            self.stats.num_prompt_tokens += len(req.prompt_ids)
            self._append(req, tok, end)
        return done

    def _release(self, req: _Request) -> None:
        if req.pages:
            self.allocator.free(req.pages)
            req.pages = []

    def _append(self, req: _Request, token: int, ready: float) -> None:
        """``ready``: the step clock at the end of the step that produced ``token``."""
        req.out.append(int(token))
        req.times.append(ready)
        self.stats.num_generated_tokens += 1
        if token == self.tokenizer.eos_token_id and not req.params.ignore_eos:
            req.finish_reason = "stop"
        elif len(req.out) >= req.max_new:
            req.finish_reason = "length"

    def _page_row(self, req: _Request) -> np.ndarray:
        row = np.zeros(self.config.pages_per_seq, np.int32)
        row[: len(req.pages)] = req.pages
        return row

    def _prefill(self, req: _Request) -> None:
        ts = self._clock()
        n = len(req.prompt_ids)
        t = pad_to_bucket(self.token_buckets, n)
        tokens = np.zeros(t, np.int32)
        tokens[:n] = req.prompt_ids
        fn = self._get("prefill", t)
        with jax.profiler.TraceAnnotation("prefill", token_bucket=t, prompt_tokens=n):
            logits, self.k_cache, self.v_cache = fn(self.params, self.k_cache, self.v_cache, tokens, np.int32(n),
                                                    self._page_row(req))
            (tok,) = self._select([req], logits, 1)
            end = self._clock()
            self._record_step("prefill", t, 1, end - ts)
        self.stats.num_prefills += 1
        self.stats.num_prefill_steps += 1
        self.stats.num_prefill_chunks += 1
        self.stats.num_prefill_computed_tokens += n
        self.stats.num_prompt_tokens += n
        self._append(req, tok, end)

    def _decode_step(self, running: list[_Request]) -> None:
        ts = self._clock()
        n = len(running)
        r = pad_to_bucket(self.request_buckets, n)
        tokens = np.zeros(r, np.int32)
        positions = np.zeros(r, np.int32)
        table = np.zeros((r, self.config.pages_per_seq), np.int32)
        for i, req in enumerate(running):
            tokens[i] = req.out[-1]
            positions[i] = len(req.prompt_ids) + len(req.out) - 1
            table[i, : len(req.pages)] = req.pages
        fn = self._get("decode", r)
        with jax.profiler.StepTraceAnnotation("decode", step_num=self.stats.num_decode_steps), \
                jax.profiler.TraceAnnotation("decode_step", request_bucket=r, num_seqs=n, kv_block=self.kv_block_size):
            logits, self.k_cache, self.v_cache = fn(self.params, self.k_cache, self.v_cache, tokens, positions, table)
            if self.host_sampler_mask:
                logits = logits + jnp.asarray(host_mask(np.asarray(logits), self.tokenizer), logits.dtype)
            toks = self._select(running, logits, r)
            end = self._clock()
            self._record_step("decode", r, n, end - ts)
        self.stats.num_decode_steps += 1
        for req, tok in zip(running, toks):
            self._append(req, tok, end)

    def _record_step(self, kind: str, bucket: int, num_seqs: int, seconds: float) -> None:
        self.stats.step_tokens += num_seqs
        self.stats.step_s += seconds
        self.stats.last_steps.append((kind, bucket, num_seqs, seconds))

    def _select(self, reqs: list[_Request], logits, r: int) -> np.ndarray:
        """Selected tokens on the host; blocks until the step's tokens are ready. On the
        production-like path the runner first converts the logits to float32
        (``logits_f32_b{R}``) and the greedy program also returns them (unread)."""
        if self.upcast_logits:
            logits = self._get("logits_f32", r)(logits)
        if not any(q.uses_sampler for q in reqs):
            out = self._get("greedy", r)(logits)
            toks = out[0] if self.upcast_logits else out
            return np.asarray(jax.block_until_ready(toks))[: len(reqs)]
        v = self.model_config.vocab_size
        temp = np.zeros(r, np.float32)
        top_k = np.zeros(r, np.int32)
        top_p = np.ones(r, np.float32)
        pen = np.ones(r, np.float32)
        seen = np.zeros((r, v), np.bool_)
        seeds = np.zeros(r, np.uint32)
        for i, q in enumerate(reqs):
            sp = q.params
            temp[i], top_k[i], top_p[i], pen[i] = sp.temperature, sp.top_k, sp.top_p, sp.repetition_penalty
            seen[i, [t for t in q.prompt_ids + q.out if t < v]] = True
            seeds[i] = (q.seed * 2_654_435_761 + len(q.out) * 40_503 + 12_345) % (1 << 32)
        return np.asarray(jax.block_until_ready(self._get("sample", r)(logits, temp, top_k, top_p, pen, seen,
                                                                       seeds)))[: len(reqs)]

    # ------------------------------------------------------------------ profiling
    def start_profile(self, log_dir: str | Path = "./profile") -> None:
        """Start ``jax.profiler`` tracing into ``log_dir`` (run folder ``plugins/profile/<run>/``)."""
        self._profile_dir = Path(log_dir)
        runs = self._profile_dir / "plugins" / "profile"
        self._profile_runs_before = {p.name for p in runs.iterdir()} if runs.is_dir() else set()
        jax.profiler.start_trace(str(self._profile_dir))

    def stop_profile(self) -> Path | None:
        """Stop tracing; returns the run folder written (``<log_dir>/plugins/profile/<run>``) or None."""
        jax.block_until_ready((self.k_cache, self.v_cache))
        jax.profiler.stop_trace()
        if self._profile_dir is None:
            return None
        runs = self._profile_dir / "plugins" / "profile"
        new = sorted((p for p in runs.iterdir() if p.name not in self._profile_runs_before), key=lambda p: p.stat().st_mtime) \
            if runs.is_dir() else []
        self._profile_dir = None
        return new[-1] if new else None

    def __repr__(self) -> str:
        return (f"LLM(model={self.model_config.name!r}, max_num_seqs={self.config.max_num_seqs}, "
                f"max_model_len={self.config.max_model_len}, kv_block_size={self.kv_block_size}, "
                f"donate={self.config.donate}, dtype={self.model_config.dtype!r}, kv_dtype={self.config.kv_dtype!r}"
                f"{', greedy_bf16_logits=True' if self.greedy_bf16_logits else ''})")


__all__ = ["LLM", "SamplingParams", "RequestOutput", "CompletionOutput", "EngineStats"]
