"""What Ollama's listings say of a model, read from its config.json, template and safetensors headers."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import pytest

from mlx_agent.gateway.ollama.models import parameter_size, read_info

pytestmark = pytest.mark.fast


def safetensors(path: Path, tensors: dict[str, tuple[str, list[int]]]) -> None:
    """Write a safetensors file whose header names ``tensors`` (dtype, shape); only headers are read."""
    header: dict[str, Any] = {}
    offset = 0
    for name, (dtype, shape) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset]}
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw)


def model_dir(tmp_path: Path, config: dict[str, Any], tensors: dict[str, tuple[str, list[int]]], template: str) -> Any:
    """Write a model directory and return the front's record of it, as the plan binds it."""
    (tmp_path / "config.json").write_text(json.dumps(config))
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": template}))
    safetensors(tmp_path / "model.safetensors", tensors)
    return {
        "served_model_name": "qwen",
        "worker": {},
        "context_window": None,
        "weight_bytes": 1234,
        "source": {
            "kind": "path",
            "path": str(tmp_path),
            "model_type": config.get("model_type"),
            "files": [{"name": "model.safetensors", "size": 1}],
        },
    }


def test_a_quantized_model_counts_unpacked_parameters_and_names_its_bits(tmp_path: Path) -> None:
    """Packed uint32 words count 32/bits parameters each; scales and biases are not parameters."""
    config = {"model_type": "qwen2", "quantization": {"bits": 4, "group_size": 64}, "max_position_embeddings": 4096}
    tensors = {
        "layers.0.q.weight": ("U32", [64, 8]),
        "layers.0.q.scales": ("BF16", [64, 1]),
        "layers.0.q.biases": ("BF16", [64, 1]),
        "norm.weight": ("BF16", [64]),
    }
    info = read_info(model_dir(tmp_path, config, tensors, "{% if tools %}{{ tools }}{% endif %}<think>"))
    assert info.parameter_count == 64 * 8 * 8 + 64
    assert info.details() == {
        "parent_model": "",
        "format": "safetensors",
        "family": "qwen2",
        "families": ["qwen2"],
        "parameter_size": "4.2K",
        "quantization_level": "Q4",
    }
    assert (info.context_length, info.size, info.capabilities) == (4096, 1234, ["completion", "tools", "thinking"])
    shown = info.show()
    assert shown["model_info"]["qwen2.context_length"] == 4096
    assert shown["model_info"]["general.parameter_count"] == 4160


def test_an_unquantized_vision_model_names_its_dtype_and_takes_images(tmp_path: Path) -> None:
    """Without quantization the weights' dtype is the level; a vision tower in config.json adds vision."""
    config = {"model_type": "gemma3", "vision_config": {"hidden_size": 8}}
    tensors = {"a.weight": ("BF16", [1000, 1000]), "b.weight": ("BF16", [10]), "c.weight": ("F32", [3])}
    info = read_info(model_dir(tmp_path, config, tensors, "plain"))
    assert (info.quantization_level, info.parameter_count, info.vision) == ("BF16", 1_000_013, True)
    assert info.capabilities == ["completion", "vision"]


def test_the_digest_follows_the_bound_identity(tmp_path: Path) -> None:
    """Two models with other bound files have other digests; the same record gives the same one."""
    record = model_dir(tmp_path, {"model_type": "llama"}, {"w": ("F16", [2])}, "")
    first = read_info(record).digest
    assert read_info(record).digest == first
    record["source"]["files"][0]["size"] = 2
    assert read_info(record).digest != first


@pytest.mark.parametrize(
    ("count", "text"),
    [(None, ""), (999, "999"), (139_584, "139.6K"), (494_032_768, "494.0M"), (8_030_261_248, "8.0B")],
)
def test_parameter_sizes_are_written_as_ollama_writes_them(count: int | None, text: str) -> None:
    """One decimal and a K, M, B or T suffix."""
    assert parameter_size(count) == text


def test_the_worker_kind_names_what_the_model_serves(tmp_path: Path) -> None:
    """An embedding worker's model embeds, a media model claims nothing; a text worker's takes no images."""
    record = model_dir(tmp_path, {"model_type": "qwen3", "vision_config": {}}, {"w": ("F16", [2])}, "{{ tools }}")
    record["worker"] = {"kind": "embedding"}
    assert read_info(record).capabilities == ["embedding"]
    record["worker"] = {"kind": "text"}
    assert read_info(record).capabilities == ["completion", "tools"]
    record["worker"] = {"kind": "vision"}
    assert read_info(record).vision
    for media in ("speech", "transcription", "image_generation"):  # Ollama's API asks them nothing
        record["worker"] = {"kind": media}
        assert read_info(record).capabilities == []
