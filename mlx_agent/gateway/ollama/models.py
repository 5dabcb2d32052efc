"""What Ollama's listings say of a served model, read from the files the plan bound (``/api/tags``, ``show``, ``ps``).

Read once per model, off the event loop, and kept (the files are bound: a changed model fails its next load):

* ``family``: config.json's ``model_type``; ``format``: ``safetensors``;
* ``parameter_size``: the parameters counted from the safetensors headers (a quantized weight's packed
  ``uint32`` words times ``32 / bits``; its scales and biases are not parameters), as Ollama writes it (``8.0B``);
* ``quantization_level``: ``Q<bits>`` (``MXFP4`` for that mode) from config.json's ``quantization``, else the
  weights' most common dtype (``BF16``, ``F16``, ``F32``);
* ``context_length``: the plan's context window, else config.json's;
* capabilities: ``embedding`` for a model whose worker embeds (``WorkerRecord.kind``), else ``completion``, and
  ``tools`` and ``thinking`` when the chat template mentions them; ``vision`` for a worker of kind ``vision`` (a
  config written before kinds: when config.json has a vision tower, ``model_config.vision_markers``).

``digest`` is the sha256 of the model's bound identity (its files' records), so it changes when the plan's model
does; ``modified_at`` is config.json's mtime; ``size`` the weights' bytes.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlx_agent.files import utc_iso
from mlx_agent.gateway.model_kinds import NOT_CHAT
from mlx_agent.identity import read_safetensors_header
from mlx_agent.model_config import context_window, vision_markers

if TYPE_CHECKING:
    from mlx_agent.records.front import FrontModelConfig

DTYPES = {"BF16": "BF16", "F16": "F16", "F32": "F32", "F64": "F64"}
TEMPLATE_FILES = ("chat_template.jinja", "chat_template.json")


@dataclass(frozen=True)
class ModelInfo:
    """One served model as Ollama's listings describe it."""

    name: str
    family: str
    parameter_count: int | None
    quantization_level: str
    context_length: int | None
    size: int
    digest: str
    modified_at: str | None
    template: str
    capabilities: list[str] = field(default_factory=list)
    config: dict[str, Any] = field(default_factory=dict)

    @property
    def vision(self) -> bool:
        """Say whether the model takes images."""
        return "vision" in self.capabilities

    def details(self) -> dict[str, Any]:
        """Return Ollama's ``details`` object."""
        return {
            "parent_model": "",
            "format": "safetensors",
            "family": self.family,
            "families": [self.family],
            "parameter_size": parameter_size(self.parameter_count),
            "quantization_level": self.quantization_level,
        }

    def listing(self) -> dict[str, Any]:
        """Return the model's ``/api/tags`` entry."""
        return {
            "name": self.name,
            "model": self.name,
            "modified_at": self.modified_at,
            "size": self.size,
            "digest": self.digest,
            "details": self.details(),
        }

    def show(self) -> dict[str, Any]:
        """Return ``/api/show``'s answer."""
        info: dict[str, Any] = {"general.architecture": self.family, "general.parameter_count": self.parameter_count}
        if self.context_length is not None:
            info[f"{self.family}.context_length"] = self.context_length
        for key in ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "vocab_size"):
            if isinstance(self.config.get(key), int):
                info[f"{self.family}.{key}"] = self.config[key]
        return {
            "modelfile": "",
            "parameters": "",
            "template": self.template,
            "license": "",
            "details": self.details(),
            "model_info": info,
            "capabilities": self.capabilities,
            "modified_at": self.modified_at,
        }


def parameter_size(count: int | None) -> str:
    """Return a parameter count as Ollama writes it (``494.0M``, ``8.0B``); empty when unknown."""
    if count is None:
        return ""
    for scale, unit in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if count >= scale:
            return f"{count / scale:.1f}{unit}"
    return str(count)


def _bits(quantization: dict[str, Any], tensor: str) -> int:
    own = quantization.get(tensor.removesuffix(".weight"))
    if isinstance(own, dict) and isinstance(own.get("bits"), int):
        return int(own["bits"])
    bits = quantization.get("bits")
    return bits if isinstance(bits, int) and bits > 0 else 4


def count_parameters(headers: list[dict[str, Any]], quantization: dict[str, Any] | None) -> tuple[int, Counter[str]]:
    """Return the parameters in safetensors headers and how many tensors have each dtype."""
    total = 0
    dtypes: Counter[str] = Counter()
    for header in headers:
        names = set(header) - {"__metadata__"}
        for name in names:
            tensor = header[name]
            base = name.removesuffix(".weight")
            if quantization and name.endswith((".scales", ".biases")) and f"{name.rsplit('.', 1)[0]}.weight" in names:
                continue
            elements = math.prod(tensor["shape"])
            if quantization and tensor["dtype"] == "U32" and f"{base}.scales" in names:
                elements = elements * 32 // _bits(quantization, name)
            else:
                dtypes[tensor["dtype"]] += 1
            total += elements
    return total, dtypes


def _template(path: Path) -> str:
    for name in TEMPLATE_FILES:
        file = path / name
        if file.is_file():
            text = file.read_text(encoding="utf-8")
            return str(json.loads(text).get("chat_template", "")) if name.endswith(".json") else text
    try:
        doc = json.loads((path / "tokenizer_config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return ""
    template = doc.get("chat_template") if isinstance(doc, dict) else None
    return template if isinstance(template, str) else ""


def read_info(model: FrontModelConfig) -> ModelInfo:
    """Read a served model's details from its bound files (module docstring); blocking."""
    source = model["source"]
    path = Path(source["path"])
    config_path = path / "config.json"
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
        modified = utc_iso(os.stat(config_path).st_mtime)
    except (OSError, ValueError):
        config, modified = {}, None
    config = config if isinstance(config, dict) else {}
    names = [f["name"] for f in source["files"] if f["name"].endswith(".safetensors")]
    files = [path / n for n in names] or sorted(path.glob("*.safetensors"))
    headers = [read_safetensors_header(file)[1] for file in files]
    quantization = config.get("quantization") or config.get("quantization_config")
    quantization = quantization if isinstance(quantization, dict) else None
    count, dtypes = count_parameters(headers, quantization)
    if quantization and quantization.get("mode") == "mxfp4":
        level = "MXFP4"
    elif quantization:
        level = f"Q{quantization.get('bits', 4)}"
    else:
        level = DTYPES.get(dtypes.most_common(1)[0][0], "") if dtypes else ""
    template = _template(path)
    kind = model["worker"].get("kind")
    chats = kind not in NOT_CHAT
    # A media model (speech, transcription, image generation) claims no Ollama capability: Ollama's API cannot ask
    # it for anything (its endpoints are OpenAI's /v1/audio/... and /v1/images/...).
    capabilities = ["embedding"] if kind == "embedding" else ["completion"] if chats else []
    if chats and "tools" in template:
        capabilities.append("tools")
    if chats and ("<think>" in template or "enable_thinking" in template or "reasoning" in template):
        capabilities.append("thinking")
    if kind == "vision" or (kind is None and vision_markers(config)):
        capabilities.append("vision")
    family = str(source.get("model_type") or config.get("model_type") or "")
    window = model["context_window"] or context_window(config)
    identity = json.dumps(source, sort_keys=True, separators=(",", ":"))
    return ModelInfo(
        name=model["served_model_name"],
        family=family,
        parameter_count=count if headers else None,
        quantization_level=level,
        context_length=window,
        size=model["weight_bytes"] or sum(f.stat().st_size for f in files),
        digest=hashlib.sha256(identity.encode()).hexdigest(),
        modified_at=modified,
        template=template,
        capabilities=capabilities,
        config=config,
    )
