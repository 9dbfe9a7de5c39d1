"""Decoder LLMs (Llama, Qwen2, Qwen3) from a Hugging Face model directory: :class:`LLM`."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any, Iterator, List, Optional, Sequence, Union

from . import _config, _native
from ._errors import ValidationError
from ._runtime import Runtime, default_runtime

Prompt = Union[str, Sequence[int]]


@dataclass(frozen=True)
class GenerationResult:
    """One prompt's result: ``text`` (special tokens left out), ``token_ids`` (the
    generated ids only, the prompt excluded; a stop token that ended the sequence is the
    last one) and ``finish_reason`` (``"stop"`` or ``"length"``)."""

    text: str
    token_ids: List[int]
    finish_reason: str


@dataclass(frozen=True)
class StreamedToken:
    """One token of :meth:`LLM.stream`: its id, the text it completes (empty while a
    character is still incomplete, and for a stop token) and, on the last one, the
    ``finish_reason``."""

    token_id: int
    text: str
    finish_reason: Optional[str]


def _sampling(max_new_tokens: Any, temperature: Any, top_k: Any, top_p: Any, seed: Any,
              stop_token_ids: Any) -> tuple:
    n = _config._int("max_new_tokens", max_new_tokens, 1, 1 << 20)
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not (
            math.isfinite(temperature) and temperature >= 0):
        raise ValidationError(f"temperature must be a finite number >= 0, got {temperature!r}")
    k = _config._int("top_k", top_k, 0)
    if isinstance(top_p, bool) or not isinstance(top_p, (int, float)) or not (0 < top_p <= 1):
        raise ValidationError(f"top_p must be in (0, 1], got {top_p!r}")
    s = 0 if seed is None else _config._int("seed", seed, 0, (1 << 64) - 1)
    stops = None
    if stop_token_ids is not None:
        stops = [_config._int("stop_token_ids entry", t, 0, (1 << 32) - 1) for t in stop_token_ids]
    return n, float(temperature), k, float(top_p), s, stops


def _prompts(prompts: Any) -> Any:
    """A list of strings or a list of id lists, from one prompt or a sequence of them."""
    if isinstance(prompts, str):
        return [prompts]
    prompts = list(prompts)
    if prompts and all(isinstance(p, str) for p in prompts):
        return prompts
    if prompts and all(isinstance(t, int) and not isinstance(t, bool) for t in prompts):
        return [prompts]  # one prompt as token ids
    if all(not isinstance(p, str) for p in prompts):
        return [[_config._int("token id", t, 0, (1 << 32) - 1) for t in p] for p in prompts]
    raise ValidationError("prompts must all be strings or all be lists of token ids")


class LLM:
    """A Llama, Qwen2 or Qwen3 decoder from a Hugging Face model directory (``config.json``,
    ``model.safetensors``, ``tokenizer.json``; ``generation_config.json`` when present),
    generating with continuous batching over a paged KV cache.

    ``backend`` (``"cpu"``, ``"cuda"``, ``"acl"``) and ``precision`` (``"f32"``, ``"bf16"``,
    ``"f16"``, ``"auto"``) give the model a runtime of its own; without them (and without
    ``runtime``) it runs on the default runtime. ``max_batch`` sequences decode together at
    most, ``block_size`` token slots per KV-cache block, ``max_seq_len`` tokens per sequence
    (prompt included; default 2048, capped at the model's positions).

    Thread-safe: calls from several threads take turns on the model, each getting what it
    would alone; the GIL is released while generating.
    """

    def __init__(self, model_dir: Union[str, "os.PathLike[str]"], backend: Optional[str] = None,
                 precision: Optional[str] = None, *, device: Optional[int] = None, max_batch: int = 8,
                 block_size: int = 16, max_seq_len: Optional[int] = None,
                 runtime: Optional[Runtime] = None) -> None:
        if runtime is not None and (backend is not None or precision is not None):
            raise ValidationError("LLM: pass either runtime or backend/precision, not both")
        if runtime is None and (backend is not None or precision is not None):
            settings = {} if precision is None else {"precision": precision}
            runtime = Runtime(backend=backend, **settings)
        rt = runtime if runtime is not None else default_runtime()
        self._owner = rt
        msl = None if max_seq_len is None else _config._int("max_seq_len", max_seq_len, 1)
        self._m = _native.LLM(rt._rt(), os.fspath(model_dir), rt._device(device),
                              _config._int("max_batch", max_batch, 1, 1 << 12),
                              _config._int("block_size", block_size, 1, 1 << 16), msl)

    @property
    def eos_token_ids(self) -> List[int]:
        """The ids generation stops at unless ``stop_token_ids`` says otherwise."""
        return list(self._m.eos_token_ids)

    @property
    def kv_cache_bytes(self) -> int:
        """Bytes of the KV cache on the device."""
        return int(self._m.kv_cache_bytes)

    @property
    def vocab_size(self) -> int:
        """Entries of the model's vocabulary (rows of its output projection)."""
        return int(self._m.vocab_size)

    def encode(self, text: str) -> List[int]:
        """The ids of ``text`` exactly as ``tokenizer.json`` encodes it (no BOS of npurt's
        own: one is added only where the file's post-processor says so)."""
        if not isinstance(text, str):
            raise ValidationError("LLM.encode takes a string")
        return list(self._m.encode(text))

    def generate(self, prompts: Union[Prompt, Sequence[Prompt]], max_new_tokens: int = 16,
                 temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0, seed: Optional[int] = None,
                 stop_token_ids: Optional[Sequence[int]] = None) -> List[GenerationResult]:
        """One :class:`GenerationResult` per prompt (a string, a list of token ids, or a
        list of either). ``temperature=0`` is greedy (the default); otherwise tokens are
        drawn at that temperature from the ``top_k`` most likely (0: all) within the
        ``top_p`` nucleus (1.0: all), prompt ``i`` drawing from ``seed + i``.
        ``stop_token_ids=None`` stops at the model's EOS, ``[]`` never before
        ``max_new_tokens``. The prompts are decoded together."""
        args = _sampling(max_new_tokens, temperature, top_k, top_p, seed, stop_token_ids)
        ps = _prompts(prompts)
        if not ps:
            return []
        return [GenerationResult(t, list(ids), r) for t, ids, r in self._m.generate(ps, *args)]

    def stream(self, prompt: Prompt, max_new_tokens: int = 16, temperature: float = 0.0, top_k: int = 0,
               top_p: float = 1.0, seed: Optional[int] = None,
               stop_token_ids: Optional[Sequence[int]] = None) -> Iterator[StreamedToken]:
        """Generates one prompt as :meth:`generate` does, yielding each
        :class:`StreamedToken` as it is chosen; the texts joined are the result's ``text``.
        Leaving the loop early stops the generation."""
        args = _sampling(max_new_tokens, temperature, top_k, top_p, seed, stop_token_ids)
        ps = _prompts(prompt)
        if len(ps) != 1:
            raise ValidationError("LLM.stream takes one prompt")
        for token_id, text, finish in self._m.stream(ps, *args):
            yield StreamedToken(int(token_id), text, finish)

    def __repr__(self) -> str:
        return f"npurt.LLM(vocab_size={self.vocab_size}, eos_token_ids={self.eos_token_ids})"
