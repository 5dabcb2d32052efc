"""Memory checked per request: the KV cache a request will fill, from the model's config, against what is left.

Per token, mlx_lm's cache holds a key and a value for every layer and KV head: ``layers x kv_heads x (head_dim
+ value head_dim) x bytes per element``, where an element takes the model's dtype (``torch_dtype`` or ``dtype``
in config.json; 2 bytes when it names none) or, with ``--kv-bits B --kv-group-size G``, ``B/8`` plus a scale and a
bias of the dtype per G elements. mlx_lm quantizes only past its first 5000 tokens, so a quantized cache also
counts those 5000 tokens at full width (the moment of conversion holds both). The cache grows in steps of 256
tokens, so the tokens are rounded up to the next step. What the check compares with the memory left is that size
times ``PEAK_FACTOR``: growing the cache briefly holds the old buffer and the new one (measured, below).

The tokens are the prompt's plus the reply limit, never more than the context window. The front does not tokenize,
so the prompt's count is a bound: the UTF-8 bytes of the text it is made of (message contents, tool definitions;
an image's data is left out) plus an allowance for the chat template's markers. A byte-level or byte-fallback
tokenizer never makes more tokens than bytes, so the bound is never short; it is several times the real count
(2.6 times for English on the test tokenizer), and the check can refuse a request that would have fit
(docs/gateway.md has the measured figures).
A request with no reply limit and no context window cannot be bounded and is not checked.

The memory left is the OS's available memory, read fresh, less the plan's reserve (``min_headroom_gb``): as for
cold loads, a request is refused (503 ``insufficient_memory``) only when a reserve is set.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlx_agent.api_errors import Code
from mlx_agent.gateway.door.http_errors import refused
from mlx_agent.gateway.models.admission import RETRY_AFTER_S
from mlx_agent.load_memory import GB

if TYPE_CHECKING:
    from mlx_agent.errors import RequestRefused
    from mlx_agent.records.plan import KvCacheRecord

KV_STEP = 256  # mlx_lm's KVCache allocates this many tokens at a time
QUANTIZED_KV_START = 5000  # mlx_lm's default --quantized-kv-start: the first tokens stay at full width
DEFAULT_DTYPE_BYTES = 2  # float16/bfloat16, what MLX models are saved in when config.json names no dtype
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8}
TEMPLATE_TOKENS = 64  # the chat template's start and generation prompt
TEMPLATE_TOKENS_PER_MESSAGE = 16  # each turn's role markers
# While the cache grows, the old buffer and the grown one coexist and MLX keeps freed buffers for reuse: a worker's
# memory grew 1.39 to 1.43 times the cache's size over a long reply (scripts/bench_request_memory.py, docs/gateway.md).
PEAK_FACTOR = 1.5


@dataclass(frozen=True)
class KvShape:
    """What one token of a model's KV cache is made of."""

    layers: int
    kv_heads: int
    key_dim: int
    value_dim: int
    dtype_bytes: int

    def token_bytes(self, kv_cache: KvCacheRecord | None) -> float:
        """Return the bytes one token takes (fractional with a quantized cache)."""
        elements = self.layers * self.kv_heads * (self.key_dim + self.value_dim)
        if kv_cache is None:
            return float(elements * self.dtype_bytes)
        bits, group = kv_cache["kv_bits"], kv_cache["kv_group_size"]
        return elements * (bits / 8 + 2 * self.dtype_bytes / group)

    def to_json(self) -> dict[str, int]:
        """Return the shape as status and refusals give it."""
        return {
            "layers": self.layers,
            "kv_heads": self.kv_heads,
            "key_dim": self.key_dim,
            "value_dim": self.value_dim,
            "dtype_bytes": self.dtype_bytes,
        }


def _int(doc: dict[str, Any], *names: str) -> int | None:
    for name in names:
        value = doc.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def kv_shape(config: dict[str, Any]) -> KvShape | None:
    """Return the KV shape a model's config.json describes (a VLM's ``text_config``), or None if it is not there."""
    text = config.get("text_config")
    doc = {**config, **text} if isinstance(text, dict) else config
    layers = _int(doc, "num_hidden_layers", "n_layer", "num_layers")
    heads = _int(doc, "num_attention_heads", "n_head")
    hidden = _int(doc, "hidden_size", "n_embd")
    if layers is None or heads is None:
        return None
    kv_heads = _int(doc, "num_key_value_heads") or heads
    head_dim = _int(doc, "head_dim") or (hidden // heads if hidden else None)
    if head_dim is None:
        return None
    dtype = doc.get("torch_dtype") or doc.get("dtype") or config.get("torch_dtype")
    width = DTYPE_BYTES.get(str(dtype), DEFAULT_DTYPE_BYTES)
    return KvShape(layers, kv_heads, head_dim, _int(doc, "v_head_dim") or head_dim, width)


def read_kv_shape(model_dir: Path) -> KvShape | None:
    """Return the KV shape of the model in ``model_dir`` (its config.json), or None when it cannot be read."""
    try:
        doc = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return kv_shape(doc) if isinstance(doc, dict) else None


def _text_bytes(value: object) -> tuple[int, int]:
    """Return the UTF-8 bytes of the strings in ``value`` (image data left out) and how many messages it holds."""
    if isinstance(value, str):
        return (0 if value.startswith("data:") else len(value.encode("utf-8", "surrogatepass"))), 0
    if isinstance(value, list):
        total = messages = 0
        for item in value:
            size, inner = _text_bytes(item)
            total += size
            messages += inner + (1 if isinstance(item, dict) and "role" in item else 0)
        return total, messages
    if isinstance(value, dict):
        if value.get("type") in ("image_url", "input_image", "image", "input_audio"):
            return 0, 0
        total = messages = 0
        for item in value.values():
            size, inner = _text_bytes(item)
            total += size
            messages += inner
        return total, messages
    return 0, 0


def prompt_token_bound(body: dict[str, Any]) -> int:
    """Return a count the prompt's tokens cannot exceed (module docstring)."""
    size = 0
    messages = 0
    for key in ("messages", "prompt", "tools"):
        part_size, part_messages = _text_bytes(body.get(key))
        size += part_size
        messages += part_messages
    return size + TEMPLATE_TOKENS + TEMPLATE_TOKENS_PER_MESSAGE * messages


def kv_bytes(shape: KvShape, tokens: int, kv_cache: KvCacheRecord | None) -> int:
    """Return the KV cache ``tokens`` tokens take, in mlx_lm's 256-token steps (module docstring)."""
    stepped = math.ceil(tokens / KV_STEP) * KV_STEP
    total = shape.token_bytes(kv_cache) * stepped
    if kv_cache is not None:
        total += shape.token_bytes(None) * min(stepped, math.ceil(QUANTIZED_KV_START / KV_STEP) * KV_STEP)
    return math.ceil(total)


def request_tokens(prompt_bound: int, max_tokens: int | None, context_window: int | None) -> int | None:
    """Return the tokens a request can fill: its prompt and reply, capped at the window (None: unbounded)."""
    if max_tokens is None:
        return context_window
    tokens = prompt_bound + max_tokens
    return tokens if context_window is None else min(tokens, context_window)


@dataclass(frozen=True)
class RequestMemory:
    """One request's estimate against the memory left, and whether it may go ahead."""

    shape: KvShape
    prompt_tokens_bound: int
    max_tokens: int | None
    tokens: int
    kv_bytes: int
    available_bytes: int | None
    reserve_bytes: int

    @property
    def peak_bytes(self) -> int:
        """Return what the worker's memory grows by at most while the cache fills (``PEAK_FACTOR``)."""
        return math.ceil(self.kv_bytes * PEAK_FACTOR)

    @property
    def left_bytes(self) -> int | None:
        """Return the memory a request may use: available less the reserve (None when unreadable)."""
        return None if self.available_bytes is None else self.available_bytes - self.reserve_bytes

    @property
    def fits(self) -> bool:
        """Say whether the request's KV cache fits the memory left (an unreadable memory is not refused)."""
        left = self.left_bytes
        return left is None or self.peak_bytes <= left

    def details(self) -> dict[str, Any]:
        """Return the numbers a refusal gives."""
        return {
            "kv_bytes": self.kv_bytes,
            "peak_bytes": self.peak_bytes,
            "peak_factor": PEAK_FACTOR,
            "available_bytes": self.available_bytes,
            "reserve_bytes": self.reserve_bytes,
            "left_bytes": self.left_bytes,
            "tokens": self.tokens,
            "prompt_tokens_bound": self.prompt_tokens_bound,
            "max_tokens": self.max_tokens,
            "kv_shape": self.shape.to_json(),
        }

    def refusal(self, name: str) -> RequestRefused:
        """Return the 503 ``insufficient_memory`` of a request that does not fit, with its numbers."""
        left = self.left_bytes or 0
        reply = "the rest of the context" if self.max_tokens is None else f"{self.max_tokens}"
        available = (self.available_bytes or 0) / GB
        return refused(
            Code.INSUFFICIENT_MEMORY,
            f"this request's KV cache for {name} ({self.tokens} tokens: a prompt of at most "
            f"{self.prompt_tokens_bound} and a reply of {reply}) needs {self.peak_bytes / GB:.3f} GB, and "
            f"{left / GB:.3f} GB is left ({available:.3f} GB available less the {self.reserve_bytes / GB:g} GB "
            "reserve); ask for fewer max_tokens, send a shorter prompt, or free memory",
            headers={"Retry-After": str(RETRY_AFTER_S)},
            extra={"memory": self.details()},
        )


def estimate(
    shape: KvShape,
    body: dict[str, Any],
    *,
    context_window: int | None,
    kv_cache: KvCacheRecord | None,
    reserve_gb: float,
    available_bytes: int | None,
) -> RequestMemory | None:
    """Return the request's estimate against the memory left, or None when its tokens have no bound."""
    bound = prompt_token_bound(body)
    max_tokens = body.get("max_tokens")
    limit = max_tokens if isinstance(max_tokens, int) and not isinstance(max_tokens, bool) else None
    tokens = request_tokens(bound, limit, context_window)
    if tokens is None:
        return None
    return RequestMemory(
        shape=shape,
        prompt_tokens_bound=bound,
        max_tokens=limit,
        tokens=tokens,
        kv_bytes=kv_bytes(shape, tokens, kv_cache),
        available_bytes=available_bytes,
        reserve_bytes=round(reserve_gb * GB),
    )
