"""The per-request memory estimate: the KV shape from config.json, the prompt's bound, and the check."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from mlx_agent.gateway.models.request_memory import (
    KvShape,
    estimate,
    kv_bytes,
    kv_shape,
    prompt_token_bound,
    read_kv_shape,
    request_tokens,
)
from mlx_agent.records.plan import KvCacheRecord

pytestmark = pytest.mark.fast

LLAMA_8B = {  # Meta-Llama-3-8B's attention: 32 layers, 8 KV heads of 128 (GQA), bfloat16
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "hidden_size": 4096,
    "torch_dtype": "bfloat16",
}


def test_a_gqa_models_token_takes_layers_times_kv_heads_times_key_and_value_width() -> None:
    """Llama-3-8B: 32 x 8 x (128 + 128) x 2 bytes = 131072 bytes (128 KiB) per token, the known figure."""
    shape = kv_shape(LLAMA_8B)
    assert shape == KvShape(layers=32, kv_heads=8, key_dim=128, value_dim=128, dtype_bytes=2)
    assert shape.token_bytes(None) == 131072


def test_the_shape_reads_head_dim_v_head_dim_a_vlms_text_config_and_defaults() -> None:
    """An explicit head_dim wins over hidden/heads; a VLM's text_config is read; no KV heads means MHA."""
    assert kv_shape({**LLAMA_8B, "head_dim": 64}) == KvShape(32, 8, 64, 64, 2)
    assert kv_shape({**LLAMA_8B, "v_head_dim": 96}) == KvShape(32, 8, 128, 96, 2)
    vlm = {"model_type": "qwen2_vl", "text_config": {**LLAMA_8B, "torch_dtype": "float32"}}
    assert kv_shape(vlm) == KvShape(32, 8, 128, 128, 4)
    mha = {"num_hidden_layers": 2, "num_attention_heads": 4, "hidden_size": 64}
    assert kv_shape(mha) == KvShape(2, 4, 16, 16, 2)  # no dtype named: 2 bytes
    assert kv_shape({"hidden_size": 64}) is None


def test_a_quantized_cache_counts_bits_and_the_scales_and_biases_of_each_group() -> None:
    """4-bit keys in groups of 64 take 0.5 byte plus two bf16 values per 64 elements: 0.5625 bytes each."""
    shape = kv_shape(LLAMA_8B)
    assert shape is not None
    elements = 32 * 8 * 256
    assert shape.token_bytes({"kv_bits": 4, "kv_group_size": 64}) == pytest.approx(elements * 0.5625)
    assert shape.token_bytes({"kv_bits": 8, "kv_group_size": 32}) == pytest.approx(elements * (1 + 4 / 32))


def test_the_cache_grows_in_256_token_steps_and_a_quantized_one_keeps_its_first_5000_tokens_wide() -> None:
    """One token costs a whole 256-token step; a quantized cache adds the full-width start it converts from."""
    shape = KvShape(layers=1, kv_heads=1, key_dim=1, value_dim=1, dtype_bytes=2)  # 4 bytes a token
    assert kv_bytes(shape, 1, None) == 256 * 4
    assert kv_bytes(shape, 257, None) == 512 * 4
    quantized: KvCacheRecord = {"kv_bits": 8, "kv_group_size": 32}
    per_token = 2 * (1 + 4 / 32)
    assert kv_bytes(shape, 10_000, quantized) == pytest.approx(10_240 * per_token + 5_120 * 4, abs=1)


def test_the_prompt_bound_counts_text_bytes_and_template_markers_but_no_image_data() -> None:
    """UTF-8 bytes of contents and tools, 64 + 16 per message for the template; a data URL counts nothing."""
    body: dict[str, Any] = {
        "messages": [
            {"role": "system", "content": "abc"},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "héllo"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64," + "A" * 100_000}},
                ],
            },
        ],
        "tools": [{"type": "function", "function": {"name": "f"}}],
    }
    text = len("system") + 3 + len("user") + len("text") + len("héllo".encode()) + len("function") + 1
    assert prompt_token_bound(body) == text + 64 + 16 * 2
    assert prompt_token_bound({"prompt": "x" * 10}) == 10 + 64


def test_the_request_fills_its_prompt_and_reply_capped_at_the_window() -> None:
    """Prompt + max_tokens, no more than the context window; without a limit, the whole window (or no bound)."""
    assert request_tokens(100, 50, None) == 150
    assert request_tokens(100, 5000, 1024) == 1024
    assert request_tokens(100, None, 4096) == 4096
    assert request_tokens(100, None, None) is None


def test_a_request_that_does_not_fit_the_memory_left_is_refused_with_its_numbers() -> None:
    """Available less the reserve is what is left; a KV cache larger than it is 503 insufficient_memory."""
    shape = kv_shape(LLAMA_8B)
    assert shape is not None
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 100_000}
    found = estimate(shape, body, context_window=None, kv_cache=None, reserve_gb=2, available_bytes=10_000_000_000)
    assert found is not None and not found.fits
    assert found.left_bytes == 8_000_000_000 and found.peak_bytes > found.left_bytes
    assert found.peak_bytes == math.ceil(found.kv_bytes * 1.5)
    refusal = found.refusal("llama")
    assert (refusal.status, refusal.code, refusal.headers["Retry-After"]) == (503, "insufficient_memory", "30")
    assert refusal.extra["memory"]["kv_bytes"] == found.kv_bytes
    assert "8.000 GB is left" in refusal.message
    small = estimate(
        shape, {**body, "max_tokens": 100}, context_window=None, kv_cache=None, reserve_gb=2, available_bytes=10**10
    )
    assert small is not None and small.fits
    unknown = estimate(shape, body, context_window=None, kv_cache=None, reserve_gb=2, available_bytes=None)
    assert unknown is not None and unknown.fits  # unreadable memory is not a reason to refuse


def test_the_check_counts_the_peak_while_the_cache_grows_not_only_its_final_size() -> None:
    """A request whose cache alone fits but whose 1.5x growth peak does not is refused."""
    shape = KvShape(layers=1, kv_heads=1, key_dim=1, value_dim=1, dtype_bytes=2)
    body = {"prompt": "", "max_tokens": 1000}  # 64 + 1000 tokens: 1280 stepped, 5120 bytes of cache
    found = estimate(shape, body, context_window=None, kv_cache=None, reserve_gb=0, available_bytes=6000)
    assert found is not None and found.kv_bytes == 5120 and found.peak_bytes == 7680 and not found.fits


def test_the_shape_is_read_from_the_models_config_file(tmp_path: Path) -> None:
    """read_kv_shape reads config.json in the model's directory; a missing or broken file gives None."""
    (tmp_path / "config.json").write_text(json.dumps(LLAMA_8B))
    assert read_kv_shape(tmp_path) == kv_shape(LLAMA_8B)
    assert read_kv_shape(tmp_path / "absent") is None
    (tmp_path / "config.json").write_text("{")
    assert read_kv_shape(tmp_path) is None
