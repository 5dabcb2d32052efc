"""The M5 Q4 prefill kernel without Metal: its emulated arithmetic, its dispatch, and its failure handling."""

from __future__ import annotations

import re
from typing import Any, cast

import mlx.core as mx
import pytest
from mlx import nn as _nn

from mlx_agent.runtime.accel import m5_prefill
from mlx_agent.runtime.accel.m5_prefill import KernelLinear, adapt_model, emulate, layer_reasons, restore, unpack
from tests.unit.m5_prefill_support import FakeKernel, qwen2_model

nn: Any = _nn


def quantized(
    n: int, k: int, *, seed: int = 0, dtype: Any = mx.float16, bits: int = 4, group_size: int = 64, bias: bool = False
) -> Any:
    """Return a QuantizedLinear of random weights (n outputs, k inputs) with scales of ``dtype``."""
    mx.random.seed(seed)
    layer = nn.Linear(k, n, bias=bias)
    layer.weight = mx.random.normal((n, k)) * 0.05
    q = nn.QuantizedLinear.from_linear(layer, group_size=group_size, bits=bits)
    q.set_dtype(dtype)
    q.eval()
    return q


def relative_error(got: mx.array, want: mx.array) -> float:
    """Return the largest absolute difference relative to the largest magnitude of ``want``."""
    diff = cast(float, mx.max(mx.abs(got.astype(mx.float32) - want.astype(mx.float32))).item())
    scale = cast(float, mx.max(mx.abs(want.astype(mx.float32))).item())
    return diff / max(scale, 1e-6)


def test_the_source_splits_into_header_and_body_with_the_python_tiling() -> None:
    """The bundled .metal file has both parts, and its tile constants are the ones the emulation uses."""
    header, body = m5_prefill.kernel_source()
    constants = dict(re.findall(r"constexpr int (\w+) = (\d+);", header))
    assert {k: int(v) for k, v in constants.items() if k in ("BM", "BN", "BK", "THREADS")} == {
        "BM": m5_prefill.BM,
        "BN": m5_prefill.BN,
        "BK": m5_prefill.BK,
        "THREADS": m5_prefill.THREADS,
    }
    assert "simdgroup_multiply_accumulate" in body and "x_shape[0]" in body and "y[" in body


def test_unpack_reads_eight_values_per_word_as_mlx_packs_them() -> None:
    """Value j of a word sits in bits 4j..4j+3: unpacked and scaled, it is what mx.dequantize returns."""
    layer = quantized(64, 128, dtype=mx.float32)
    scale = mx.repeat(layer.scales, 64, axis=1)
    bias = mx.repeat(layer.biases, 64, axis=1)
    want = mx.dequantize(layer.weight, layer.scales, layer.biases, group_size=64, bits=4)
    assert mx.allclose(scale * unpack(layer.weight) + bias, want, atol=1e-6).item()


@pytest.mark.parametrize(("rows", "k", "n"), [(128, 128, 64), (131, 256, 192), (200, 512, 128), (1, 64, 64)])
def test_emulated_kernel_matches_quantized_matmul(rows: int, k: int, n: int) -> None:
    """The emulated kernel agrees with mx.quantized_matmul (2e-2: it accumulates in fp16 on the CPU) and fp32 (1e-3)."""
    layer = quantized(n, k, seed=rows)
    mx.random.seed(rows + 1)
    x = mx.random.normal((rows, k)).astype(mx.float16)
    got = emulate(x, layer.weight, layer.scales, layer.biases)
    want = mx.quantized_matmul(x, layer.weight, layer.scales, layer.biases, transpose=True, group_size=64, bits=4)
    exact = m5_prefill.reference(x, layer.weight, layer.scales, layer.biases)
    assert got.shape == (rows, n) and got.dtype == mx.float16
    assert relative_error(got, want) < 2e-2
    assert relative_error(got, exact) < 1e-3


def test_emulated_tail_rows_see_zeros() -> None:
    """Rows past the last full tile are padded with zeros, so they do not change the rows before them."""
    layer = quantized(64, 128)
    x = mx.random.normal((40, 128)).astype(mx.float16)
    assert mx.array_equal(
        emulate(x, layer.weight, layer.scales, layer.biases)[:32],
        emulate(x[:32], layer.weight, layer.scales, layer.biases),
    ).item()


@pytest.mark.parametrize(
    ("layer", "reason"),
    [
        (lambda: nn.Linear(128, 64, bias=False), "Linear is not a QuantizedLinear"),
        (lambda: quantized(64, 128, bits=8), "8-bit affine weights in groups of 64, not 4-bit affine in groups of 64"),
        (
            lambda: quantized(64, 128, group_size=32),
            "4-bit affine weights in groups of 32, not 4-bit affine in groups of 64",
        ),
        (lambda: quantized(96, 128), "shape 96x128 is not divisible by 64"),
        (lambda: quantized(64, 128, dtype=mx.float32), "scales are mlx.core.float32, not float16 activations"),
        (lambda: quantized(64, 128, bias=True), "the projection has a bias"),
    ],
)
def test_each_layer_rule(layer: Any, reason: str) -> None:
    """Each way a layer is not 4-bit affine, group 64, fp16, bias-free and a multiple of 64 has its own reason."""
    assert layer_reasons(layer()) == [reason]


def test_a_training_layer_is_not_adapted() -> None:
    """The kernel is for inference only."""
    layer = quantized(64, 128)
    layer.train()
    assert layer_reasons(layer) == ["the layer is in training mode"]


def test_dispatch_swaps_the_six_mlp_projections_and_keeps_the_weights() -> None:
    """Each layer's gate, up and down projection is wrapped; the wrapper holds the original quantized layer."""
    model = qwen2_model()
    originals = [model.layers[i].mlp.gate_proj for i in range(2)]
    kernel = FakeKernel()
    result = adapt_model(model, min_rows=128, model_types=["qwen2"], kernel=kernel)
    assert (result.adapted, result.reasons) == (6, [])
    for i in range(2):
        wrapped = model.layers[i].mlp.gate_proj
        assert isinstance(wrapped, KernelLinear) and wrapped.original is originals[i]
        assert isinstance(model.layers[i].self_attn.q_proj, nn.QuantizedLinear)  # attention is untouched
    assert len({shape for shape in kernel.calls}) == 2  # the check ran once per distinct matrix shape
    assert restore(model) == 6 and model.layers[0].mlp.gate_proj is originals[0]


@pytest.mark.parametrize(("rows", "uses_kernel"), [(127, False), (128, True), (300, True)])
def test_dispatch_by_row_count(rows: int, uses_kernel: bool) -> None:
    """A batch under 128 rows runs the original layer; 128 rows or more call the kernel."""
    layer = quantized(128, 256)
    kernel = FakeKernel()
    wrapped = KernelLinear(layer, kernel, min_rows=128)
    x = mx.random.normal((1, rows, 256)).astype(mx.float16)
    got = wrapped(x)
    assert got.shape == (1, rows, 128)
    assert kernel.calls == ([(rows, 256)] if uses_kernel else [])
    assert relative_error(got, layer(x)) < 5e-3


def test_dispatch_keeps_native_mlx_for_other_activations() -> None:
    """A float32 batch of any size goes to the original layer."""
    kernel = FakeKernel()
    layer = quantized(64, 128)
    KernelLinear(layer, kernel, min_rows=128)(mx.zeros((256, 128), dtype=mx.float32))
    assert kernel.calls == []


def test_a_prefill_through_the_adapted_model_matches_native() -> None:
    """A 160-token prompt through the adapted model (kernel emulated) gives the native logits."""
    model = qwen2_model()
    tokens = mx.arange(160)[None] % 256
    want = model(tokens)
    kernel = FakeKernel()
    assert adapt_model(model, min_rows=128, model_types=["qwen2"], kernel=kernel).adapted == 6
    kernel.calls.clear()
    got = model(tokens)
    assert len(kernel.calls) == 6 and all(rows == 160 for rows, _ in kernel.calls)
    assert relative_error(got, want) < 2e-2
    kernel.calls.clear()
    model(tokens[:, :1])  # a decode step: one row, native everywhere
    assert kernel.calls == []


@pytest.mark.parametrize(
    ("build", "reasons"),
    [
        (lambda: qwen2_model(model_type="llama"), ["model_type 'llama' is not one of ['qwen2']"]),
        (
            lambda: qwen2_model(group_size=32),
            [
                f"layer {i} mlp.{name}: 4-bit affine weights in groups of 32, not 4-bit affine in groups of 64"
                for i in range(2)
                for name in ("gate_proj", "up_proj", "down_proj")
            ],
        ),
        (
            lambda: qwen2_model(dtype=mx.float32),
            [
                f"layer {i} mlp.{name}: scales are mlx.core.float32, not float16 activations"
                for i in range(2)
                for name in ("gate_proj", "up_proj", "down_proj")
            ],
        ),
    ],
)
def test_models_that_do_not_fit_adapt_nothing(build: Any, reasons: list[str]) -> None:
    """Another architecture, quantization or activation type leaves every layer native, each layer saying why."""
    model = build()
    result = adapt_model(model, min_rows=128, model_types=["qwen2"], kernel=FakeKernel())
    assert (result.adapted, result.reasons) == (0, reasons)
    assert not isinstance(model.layers[0].mlp.gate_proj, KernelLinear)


def test_a_compile_failure_keeps_the_original_model() -> None:
    """On this machine the real kernel cannot compile (no Metal): nothing is swapped, and the error is the reason."""
    model = qwen2_model()
    result = adapt_model(model, min_rows=128, model_types=["qwen2"])
    assert result.adapted == 0 and len(result.reasons) == 1
    assert re.fullmatch(r"shape 256x128: RuntimeError: .*Metal.*; the original model is kept", result.reasons[0])
    assert all(isinstance(model.layers[i].mlp.down_proj, nn.QuantizedLinear) for i in range(2))


def test_a_wrong_answer_keeps_the_original_model() -> None:
    """A kernel whose answer disagrees with mx.quantized_matmul is not used."""
    model = qwen2_model()

    def wrong(x: mx.array, w: mx.array, scales: mx.array, biases: mx.array) -> mx.array:
        return emulate(x, w, scales, biases) + 1

    result = adapt_model(model, min_rows=128, model_types=["qwen2"], kernel=wrong)
    assert result.adapted == 0 and len(result.reasons) == 1
    pattern = r"shape 256x128: the kernel disagrees with the float32 product by [0-9.]+; the original model is kept"
    assert re.fullmatch(pattern, result.reasons[0]), result.reasons
    assert not isinstance(model.layers[1].mlp.up_proj, KernelLinear)
