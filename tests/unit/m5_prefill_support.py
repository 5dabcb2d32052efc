"""The M5 prefill kernel's tests' model and kernel: a quantized two-layer Qwen2 and a stand-in for the Metal call."""

from __future__ import annotations

from typing import Any

import mlx.core as mx
from mlx import nn as _nn
from mlx_lm.models import qwen2

from mlx_agent.runtime.accel.m5_prefill import emulate

nn: Any = _nn


def qwen2_model(
    *,
    hidden: int = 128,
    intermediate: int = 256,
    model_type: str = "qwen2",
    dtype: Any = mx.float16,
    group_size: int = 64,
) -> Any:
    """Return a two-layer Qwen2 model quantized to 4 bits, as mlx_lm loads a Q4 checkpoint."""
    model_args: Any = qwen2.ModelArgs
    args = model_args.from_dict(
        {
            "model_type": model_type,
            "hidden_size": hidden,
            "intermediate_size": intermediate,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "rms_norm_eps": 1e-6,
            "vocab_size": 256,
            "rope_theta": 10000.0,
            "tie_word_embeddings": False,
        }
    )
    mx.random.seed(1)
    model = qwen2.Model(args)
    nn.quantize(model, group_size=group_size, bits=4)
    model.set_dtype(dtype)
    model.eval()
    return model


class FakeKernel:
    """Stands in for the Metal call: counts the rows it was given and answers with the emulation."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, int]] = []

    def __call__(self, x: mx.array, w: mx.array, scales: mx.array, biases: mx.array) -> mx.array:
        """Record the call and return the emulated product."""
        self.calls.append((x.shape[0], x.shape[1]))
        return emulate(x, w, scales, biases)
