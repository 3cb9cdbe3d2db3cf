"""vLLM-shaped offline engine: ``LLM(...).generate(prompts, SamplingParams(...))``.

Scheduling (offline batch, continuous): waiting requests are admitted while a request slot
and enough KV pages are free; each admitted request is prefilled alone (padded to a *token
bucket*, jnp causal attention, K/V written to its pages) and its first token sampled; then
all running requests decode together, padded to a *request bucket*, through the Pallas
kernel. Finished requests free their pages and slots at once.

Every bucket is its own named, ahead-of-time compiled function, hence its own
``hlo_module`` in a trace:

* ``jit_prefill_t{T}`` — prefill at token bucket T;
* ``jit_decode_b{R}_bkv{K}`` — decode forward at request bucket R with KV block K (logits);
* ``jit_greedy_b{R}`` — argmax selection; ``jit_sample_b{R}`` — the top-k/top-p sampler
  (with its 32-iteration ``topp_binary_search``), used only when some running request samples.

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

import jax
import jax.numpy as jnp
import numpy as np

from traceview.kernels.paged_attention import decode_block_size

from . import model as model_lib
from .buckets import pad_to_bucket, pow2_buckets
from .config import EngineConfig, ModelConfig, default_kv_dtype, model_config
from .kv_cache import KVCapacity, PageAllocator, empty_cache, kv_capacity, pages_for
from .sampling import SamplingParams, greedy_tokens, sample_tokens
from .tokenizer import ByteTokenizer

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
    num_prefills: int = 0
    num_decode_steps: int = 0
    generate_s: float = 0.0  # time spent inside generate()
    compiled_modules: list[str] = field(default_factory=list)  # hlo_module names, compile order


@dataclass
class _Request:
    index: int
    prompt: str
    prompt_ids: list[int]
    params: SamplingParams
    max_new: int
    seed: int
    pages: list[int] = field(default_factory=list)
    out: list[int] = field(default_factory=list)
    finish_reason: str | None = None

    @property
    def uses_sampler(self) -> bool:
        return not self.params.greedy or self.params.repetition_penalty != 1.0


def _named(fn, name):
    fn.__name__ = fn.__qualname__ = name
    return fn


def _abstract(tree):
    return jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), tree)


class LLM:
    """Toy serving engine with a vLLM-like interface.

    Args:
      model: preset name (``"tiny"``, ``"study"``, ``"gemma-2b"``) or a :class:`ModelConfig`.
      page_size: KV page size in tokens; None = the preset's (``ModelConfig.page_size``).
      max_num_seqs, max_model_len, kv_block_size, page_size, num_pages, min_request_bucket,
      min_token_bucket, max_num_batched_tokens, precompile, interpret, seed, kv_dtype,
      kv_cache_bytes: see :class:`~traceview.engine_shim.config.EngineConfig`.

    Raises: ValueError for an unknown preset, an invalid KV block size
      (``TRACEVIEW_KV_BLOCK_SIZE`` included), an unknown ``kv_dtype``, both ``num_pages`` and
      ``kv_cache_bytes``, or a budget under 2 pages.
    """

    def __init__(self, model: str | ModelConfig = "tiny", *, max_num_seqs: int = 8, max_model_len: int = 512,
                 kv_block_size: int | None = None, seed: int = 0, page_size: int | None = None, num_pages: int | None = None,
                 min_request_bucket: int = 8, min_token_bucket: int = 16, max_num_batched_tokens: int | None = None,
                 precompile: bool = True, interpret: bool | None = None, kv_dtype: str | None = None,
                 kv_cache_bytes: int | None = None):
        t0 = time.perf_counter()
        self.model_config: ModelConfig = model_config(model)
        page_size = self.model_config.page_size if page_size is None else page_size
        if num_pages is not None and kv_cache_bytes is not None:
            raise ValueError("give num_pages or kv_cache_bytes, not both")
        kv_dtype = default_kv_dtype(jax.default_backend()) if kv_dtype is None else kv_dtype
        self.config = EngineConfig(max_num_seqs=max_num_seqs, max_model_len=max_model_len, page_size=page_size,
                                   kv_block_size=kv_block_size, max_num_batched_tokens=max_num_batched_tokens,
                                   min_token_bucket=min_token_bucket, min_request_bucket=min_request_bucket,
                                   num_pages=num_pages, precompile=precompile, interpret=interpret, seed=seed,
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
        self.token_buckets = pow2_buckets(ec.min_token_bucket, ec.max_num_batched_tokens or ec.max_model_len)
        self.request_buckets = pow2_buckets(ec.min_request_bucket, ec.max_num_seqs)
        self.sampler_buckets = sorted({1, *self.request_buckets})
        self.stats = EngineStats()
        self.params = model_lib.init_params(mc, seed)
        self.k_cache, self.v_cache = empty_cache(num_layers=mc.num_layers, num_kv_heads=mc.num_kv_heads,
                                                 num_pages=ec.total_pages, page_size=ec.page_size,
                                                 head_dim=mc.head_dim, dtype=ec.kv_dtype)
        self.allocator = PageAllocator(ec.total_pages)
        self._compiled: dict[tuple, object] = {}
        self._num_requests = 0
        self._profile_dir: Path | None = None
        self._profile_runs_before: set[str] = set()
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

    # ------------------------------------------------------------------ compile buckets
    def bucket_names(self) -> list[str]:
        """Function names of the full bucket menu (each is ``jit_<name>`` in a trace)."""
        return ([f"prefill_t{t}" for t in self.token_buckets]
                + [f"decode_b{r}_bkv{self.kv_block_size}" for r in self.request_buckets]
                + [f"greedy_b{r}" for r in self.sampler_buckets] + [f"sample_b{r}" for r in self.sampler_buckets])

    def precompile(self) -> None:
        """Compile every bucket now (idempotent)."""
        for t in self.token_buckets:
            self._get("prefill", t)
        for r in self.request_buckets:
            self._get("decode", r)
        for r in self.sampler_buckets:
            self._get("greedy", r)
            self._get("sample", r)

    def _get(self, kind: str, size: int):
        key = (kind, size)
        fn = self._compiled.get(key)
        if fn is None:
            t0 = time.perf_counter()
            fn = self._compile(kind, size)
            self._compiled[key] = fn
            self.stats.num_compiled += 1
            if not self._precompiling:
                self.stats.lazy_compile_s += time.perf_counter() - t0
        return fn

    def _compile(self, kind: str, size: int):
        mc, ec = self.model_config, self.config
        pps = ec.pages_per_seq
        i32 = jnp.int32
        cache = _abstract((self.k_cache, self.v_cache))
        params = _abstract(self.params)
        if kind == "prefill":
            def fn(params, k_cache, v_cache, tokens, length, page_row):
                logits, k_cache, v_cache = model_lib.prefill_forward(params, mc, k_cache, v_cache, tokens, length,
                                                                     page_row, page_size=ec.page_size)
                return logits[None, :], k_cache, v_cache
            name = f"prefill_t{size}"
            args = (params, *cache, jax.ShapeDtypeStruct((size,), i32), jax.ShapeDtypeStruct((), i32),
                    jax.ShapeDtypeStruct((pps,), i32))
            jitted = jax.jit(_named(fn, name), donate_argnums=(1, 2))
        elif kind == "decode":
            bkv, interpret = self.kv_block_size, ec.interpret

            def fn(params, k_cache, v_cache, tokens, positions, page_table):
                return model_lib.decode_forward(params, mc, k_cache, v_cache, tokens, positions, page_table,
                                                page_size=ec.page_size, kv_block_size=bkv, interpret=interpret)
            name = f"decode_b{size}_bkv{bkv}"
            args = (params, *cache, jax.ShapeDtypeStruct((size,), i32), jax.ShapeDtypeStruct((size,), i32),
                    jax.ShapeDtypeStruct((size, pps), i32))
            jitted = jax.jit(_named(fn, name), donate_argnums=(1, 2))
        elif kind == "greedy":
            def fn(logits):
                return greedy_tokens(logits)
            name = f"greedy_b{size}"
            args = (jax.ShapeDtypeStruct((size, mc.vocab_size), jnp.float32),)
            jitted = jax.jit(_named(fn, name))
        elif kind == "sample":
            def fn(logits, temperature, top_k, top_p, repetition_penalty, seen, seeds):
                return sample_tokens(logits, temperature, top_k, top_p, repetition_penalty, seen, seeds)
            name = f"sample_b{size}"
            f32 = jnp.float32
            args = (jax.ShapeDtypeStruct((size, mc.vocab_size), f32), jax.ShapeDtypeStruct((size,), f32),
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

    # ------------------------------------------------------------------ generation
    def generate(self, prompts, sampling_params: SamplingParams | list[SamplingParams] | None = None
                 ) -> list[RequestOutput]:
        """Generate for every prompt; returns outputs in prompt order.

        Args:
          prompts: a string or a list of strings.
          sampling_params: one :class:`SamplingParams` for all prompts, or one per prompt
            (default ``SamplingParams()``).

        Raises: ValueError if a prompt does not fit ``max_model_len`` (it needs room for at
          least one generated token) or the lists' lengths differ.
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
        ec = self.config
        reqs = []
        for prompt, sp in zip(prompts, sampling_params):
            ids = self.tokenizer.encode(prompt)
            if len(ids) >= ec.max_model_len:
                raise ValueError(f"prompt of {len(ids)} tokens does not fit max_model_len={ec.max_model_len}")
            seed = sp.seed if sp.seed is not None else self.config.seed * 1_000_003 + self._num_requests
            reqs.append(_Request(self._num_requests, prompt, ids, sp, min(sp.max_tokens, ec.max_model_len - len(ids)), seed))
            self._num_requests += 1
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
            self.stats.generate_s += time.perf_counter() - t0
        return [RequestOutput(str(r.index), r.prompt, r.prompt_ids,
                              [CompletionOutput(0, self.tokenizer.decode(r.out), list(r.out), r.finish_reason or "length")])
                for r in reqs]

    def _release(self, req: _Request) -> None:
        if req.pages:
            self.allocator.free(req.pages)
            req.pages = []

    def _append(self, req: _Request, token: int) -> None:
        req.out.append(int(token))
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
        n = len(req.prompt_ids)
        t = pad_to_bucket(self.token_buckets, n)
        tokens = np.zeros(t, np.int32)
        tokens[:n] = req.prompt_ids
        fn = self._get("prefill", t)
        with jax.profiler.TraceAnnotation("prefill", token_bucket=t, prompt_tokens=n):
            logits, self.k_cache, self.v_cache = fn(self.params, self.k_cache, self.v_cache, tokens, np.int32(n),
                                                    self._page_row(req))
            (tok,) = self._select([req], logits, 1)
        self.stats.num_prefills += 1
        self.stats.num_prompt_tokens += n
        self._append(req, tok)

    def _decode_step(self, running: list[_Request]) -> None:
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
            toks = self._select(running, logits, r)
        self.stats.num_decode_steps += 1
        for req, tok in zip(running, toks):
            self._append(req, tok)

    def _select(self, reqs: list[_Request], logits, r: int) -> np.ndarray:
        if not any(q.uses_sampler for q in reqs):
            return np.asarray(self._get("greedy", r)(logits))[: len(reqs)]
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
        return np.asarray(self._get("sample", r)(logits, temp, top_k, top_p, pen, seen, seeds))[: len(reqs)]

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
                f"kv_dtype={self.config.kv_dtype!r})")


__all__ = ["LLM", "SamplingParams", "RequestOutput", "CompletionOutput", "EngineStats"]
