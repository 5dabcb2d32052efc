"""The M5 Q4 prefill kernel: a tiled Metal matmul for Qwen2 MLP projections, its emulation, and its dispatch.

``kernels/m5_q4_prefill.metal`` computes ``x @ dequantize(w)^T`` for fp16 activations and affine 4-bit
weights with group size 64 (``q4_matmul`` calls it through ``mx.fast.metal_kernel``). ``emulate`` performs
the same arithmetic in the same order with plain MLX operations, so the kernel's arithmetic is tested against
``mx.quantized_matmul`` on any backend; the Metal code itself runs only on a Mac.

``adapt_model`` swaps each eligible ``gate_proj``/``up_proj``/``down_proj`` of a Qwen2 model for a
``KernelLinear`` that calls the kernel for batches of at least ``min_rows`` rows and the original layer
otherwise; the original quantized weights are kept (the wrapper holds the original layer). Every matrix shape
is compiled and checked against the float32 product of the dequantized weights before any layer is swapped: a
compile failure, or an answer that disagrees, leaves the model exactly as it was.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, cast

import mlx.core as mx
from mlx import nn as _nn

nn: Any = _nn  # mypy does not see mlx.nn's classes (re-exported through star imports)

log = logging.getLogger(__name__)

SOURCE = Path(__file__).resolve().parent / "kernels" / "m5_q4_prefill.metal"
HEADER_MARK = "// --- header ---"
BODY_MARK = "// --- body ---"
BM, BN, BK, CHUNK, THREADS = 32, 32, 64, 8, 128  # as in the .metal header; CHUNK is one simdgroup 8x8 step
BITS, GROUP_SIZE, MODE = 4, 64, "affine"
PROJECTIONS = ("gate_proj", "up_proj", "down_proj")
# The check of each compiled shape: the kernel must agree with the float32 product this closely (relative).
CHECK_TOLERANCE = 2e-2

Kernel = Callable[[mx.array, mx.array, mx.array, mx.array], mx.array]


def kernel_source() -> tuple[str, str]:
    """Return the kernel's header and body, read from the bundled ``.metal`` file."""
    text = SOURCE.read_text(encoding="utf-8")
    _, _, rest = text.partition(HEADER_MARK)
    header, found, body = rest.partition(BODY_MARK)
    if not found:
        raise ValueError(f"{SOURCE} lacks its {HEADER_MARK!r} and {BODY_MARK!r} lines")
    return header.strip() + "\n", body.strip() + "\n"


@cache
def _metal_kernel() -> Any:
    header, body = kernel_source()
    return mx.fast.metal_kernel(
        name="mlx_agent_m5_q4_prefill",
        input_names=["x", "w", "scales", "biases"],
        output_names=["y"],
        header=header,
        source=body,
    )


def q4_matmul(x: mx.array, w: mx.array, scales: mx.array, biases: mx.array) -> mx.array:
    """Return ``x @ dequantize(w, scales, biases)^T`` from the Metal kernel (x: fp16 [rows, K])."""
    rows, k = x.shape
    n = w.shape[0]
    grid = (n // BN * THREADS, (rows + BM - 1) // BM, 1)
    outputs = _metal_kernel()(
        inputs=[x, w, scales, biases],
        template=[("K", k), ("N", n)],
        grid=grid,
        threadgroup=(THREADS, 1, 1),
        output_shapes=[(rows, n)],
        output_dtypes=[mx.float16],
    )
    return outputs[0]  # type: ignore[no-any-return]


def unpack(w: mx.array) -> mx.array:
    """Return the 4-bit values of packed weights as float32 [N, K] (value j of a word in bits 4j..4j+3)."""
    shifts = mx.arange(0, 32, 4, dtype=mx.uint32)
    values = (w[..., None] >> shifts) & 0xF
    return values.reshape(w.shape[0], -1).astype(mx.float32)


def emulate(x: mx.array, w: mx.array, scales: mx.array, biases: mx.array) -> mx.array:
    """Return what the kernel computes, with its tiling and accumulation order, in plain MLX.

    Rows are padded with zeros to a multiple of BM (the kernel's tail tile reads zeros); weights are
    dequantized in float32 as ``scale * q + bias`` per group of BK; each output accumulates in float32, one
    8-wide chunk of K after the other from the first, as the simdgroup multiply-accumulate does (the order
    inside one 8-wide product is the hardware's); the result is rounded to float16 once. Output tiles are
    independent of each other, so they are computed together here.
    """
    rows, k = x.shape
    pad = -rows % BM
    xf = mx.concatenate([x, mx.zeros((pad, k), dtype=x.dtype)]) if pad else x
    xf = xf.astype(mx.float32)
    groups = k // BK
    scale = mx.repeat(scales.astype(mx.float32), BK, axis=1)
    bias = mx.repeat(biases.astype(mx.float32), BK, axis=1)
    wf = scale * unpack(w) + bias
    assert wf.shape[1] == groups * BK
    acc = mx.zeros((xf.shape[0], w.shape[0]), dtype=mx.float32)
    for start in range(0, k, CHUNK):
        acc = acc + xf[:, start : start + CHUNK] @ wf[:, start : start + CHUNK].T
    return acc[:rows].astype(mx.float16)


# -- dispatch ------------------------------------------------------------------------------------------------


def layer_reasons(layer: Any) -> list[str]:
    """Return why a layer cannot take the kernel (empty when it can)."""
    if not isinstance(layer, nn.QuantizedLinear):
        return [f"{type(layer).__name__} is not a QuantizedLinear"]
    reasons = []
    if layer.bits != BITS or layer.group_size != GROUP_SIZE or getattr(layer, "mode", MODE) != MODE:
        reasons.append(
            f"{layer.bits}-bit {getattr(layer, 'mode', MODE)} weights in groups of {layer.group_size}, "
            f"not {BITS}-bit {MODE} in groups of {GROUP_SIZE}"
        )
    n, k = layer.weight.shape[0], layer.weight.shape[1] * 32 // layer.bits
    if n % GROUP_SIZE or k % GROUP_SIZE:
        reasons.append(f"shape {n}x{k} is not divisible by {GROUP_SIZE}")
    if layer.scales.dtype != mx.float16:
        reasons.append(f"scales are {layer.scales.dtype}, not float16 activations")
    if "bias" in layer:
        reasons.append("the projection has a bias")
    if layer.training:
        reasons.append("the layer is in training mode")
    return reasons


class KernelLinear(nn.Module):  # type: ignore[misc]
    """A quantized projection that calls the kernel for large fp16 batches and the original layer otherwise."""

    def __init__(self, original: Any, kernel: Kernel, min_rows: int) -> None:
        super().__init__()
        self.original = original  # the original weights, unchanged, used for every other input
        self._kernel = kernel
        self._min_rows = min_rows
        self.freeze()

    def __call__(self, x: mx.array) -> mx.array:
        """Return the projection of ``x``: the kernel for ``min_rows`` fp16 rows or more, else native MLX."""
        k = x.shape[-1]
        rows = x.size // k if k else 0
        if rows < self._min_rows or x.dtype != mx.float16:
            return self.original(x)  # type: ignore[no-any-return]
        layer = self.original
        y = self._kernel(x.reshape(rows, k), layer.weight, layer.scales, layer.biases)
        return y.reshape(*x.shape[:-1], layer.weight.shape[0])


@dataclass
class Adaptation:
    """What ``adapt_model`` did: how many layers it swapped, and why others (or all) were left alone."""

    adapted: int = 0
    reasons: list[str] = field(default_factory=list)


def _model_type(model: Any) -> str | None:
    args = getattr(model, "args", None)
    value = getattr(model, "model_type", None) or getattr(args, "model_type", None)
    return value if isinstance(value, str) else None


def candidates(model: Any) -> tuple[list[tuple[Any, str]], list[str]]:
    """Return the (MLP, projection name) pairs that may take the kernel, and why the others may not."""
    found: list[tuple[Any, str]] = []
    reasons: list[str] = []
    for index, block in enumerate(getattr(model, "layers", [])):
        mlp = getattr(block, "mlp", None)
        for name in PROJECTIONS:
            layer = getattr(mlp, name, None) if mlp is not None else None
            if layer is None:
                reasons.append(f"layer {index} has no mlp.{name}")
                continue
            why = layer_reasons(layer)
            if why:
                reasons.append(f"layer {index} mlp.{name}: {'; '.join(why)}")
            else:
                found.append((mlp, name))
    return found, reasons


def reference(x: mx.array, w: mx.array, scales: mx.array, biases: mx.array) -> mx.array:
    """Return ``x @ dequantize(w)^T`` computed in float32 (the answer the kernel is checked against)."""
    dense = mx.dequantize(w, scales.astype(mx.float32), biases.astype(mx.float32), group_size=GROUP_SIZE, bits=BITS)
    return x.astype(mx.float32) @ dense.T


def _check_shape(kernel: Kernel, layer: Any, rows: int) -> str | None:
    """Compile and run the kernel for one shape; return why it cannot be used, or None."""
    k = layer.weight.shape[1] * 32 // BITS
    x = (mx.sin(mx.arange(rows * k, dtype=mx.float32)).reshape(rows, k) * 0.5).astype(mx.float16)
    try:
        got = kernel(x, layer.weight, layer.scales, layer.biases)
        want = reference(x, layer.weight, layer.scales, layer.biases)
        error = cast(float, mx.max(mx.abs(got.astype(mx.float32) - want)).item())
        scale = max(1.0, cast(float, mx.max(mx.abs(want)).item()))
    except Exception as exc:  # a compile or launch failure keeps the original model
        return f"{type(exc).__name__}: {exc}"
    if not error <= CHECK_TOLERANCE * scale:
        return f"the kernel disagrees with the float32 product by {error:.4g}"
    return None


def adapt_model(model: Any, *, min_rows: int, model_types: list[str], kernel: Kernel | None = None) -> Adaptation:
    """Swap the eligible Qwen2 MLP projections for ``KernelLinear``; on any failure change nothing."""
    kernel = kernel or q4_matmul
    result = Adaptation()
    model_type = _model_type(model)
    if model_type not in model_types:
        result.reasons.append(f"model_type {model_type!r} is not one of {model_types}")
        return result
    found, result.reasons = candidates(model)
    checked: dict[tuple[int, ...], str | None] = {}
    for mlp, name in found:
        layer = getattr(mlp, name)
        shape = tuple(layer.weight.shape)
        if shape not in checked:
            checked[shape] = _check_shape(kernel, layer, min_rows)
        failure = checked[shape]
        if failure is not None:
            return Adaptation(
                0, [*result.reasons, f"shape {shape[0]}x{shape[1] * 32 // BITS}: {failure}; the original model is kept"]
            )
    for mlp, name in found:
        setattr(mlp, name, KernelLinear(getattr(mlp, name), kernel, min_rows))
    result.adapted = len(found)
    return result


def restore(model: Any) -> int:
    """Put the original layers back; return how many were swapped."""
    count = 0
    for block in getattr(model, "layers", []):
        mlp = getattr(block, "mlp", None)
        for name in PROJECTIONS:
            layer = getattr(mlp, name, None) if mlp is not None else None
            if isinstance(layer, KernelLinear):
                setattr(mlp, name, layer.original)
                count += 1
    return count
