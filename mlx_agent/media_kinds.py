"""Which media kind a checkpoint is, decided from its config files alone (standard library only).

mlx-vlm's server speaks (mlx-audio's TTS models), transcribes (mlx-audio's STT models) and draws (its own diffusion
pipelines). Whether a checkpoint is one of those is read here from what its files declare, never from its
directory name: mlx-audio falls back to the name's parts when ``model_type`` is not one of its remapping keys, and
mlx-vlm's image loader keys first on the name's first ``-`` token; a plan decided that way would serve whatever a
folder happened to be called. The plan (``plan/runtime_select.py``) decides with these rules; the worker
(``runtime/entries/mlx_vlm_media.py``) loads through mlx-vlm and checks that what loaded is the family decided here.

The installed packages' model types come from their files (``installed.media_support``); this module only applies
rules to a config and those sets. It imports nothing of mlx, mlx-audio or mlx-vlm.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

MediaKind = Literal["speech", "transcription", "image_generation"]
SPEECH: MediaKind = "speech"
TRANSCRIPTION: MediaKind = "transcription"
IMAGE_GENERATION: MediaKind = "image_generation"
MEDIA_KINDS: tuple[MediaKind, ...] = (SPEECH, TRANSCRIPTION, IMAGE_GENERATION)
# Every kind of model a plan serves (``WorkerRecord.kind``), and those that chat (an agents record, a template).
ModelKind = Literal["text", "vision", "embedding", "speech", "transcription", "image_generation"]
CHAT_KINDS: tuple[ModelKind, ...] = ("text", "vision")

# NeMo checkpoints (Parakeet, Canary) carry no model_type: their ``target`` class names the model, as mlx-audio's
# Parakeet and Canary loaders read it.
NEMO_TARGETS = {
    "EncDecCTCModelBPE": "parakeet",
    "EncDecCTCModel": "parakeet",
    "EncDecRNNTBPEModel": "parakeet",
    "EncDecHybridRNNTCTCBPEModel": "parakeet",
    "EncDecMultiTaskModel": "canary",
}
# Families whose loading (or module import) fetches another repository from the Hugging Face Hub. Serving never
# downloads (workers run with HF_HUB_OFFLINE=1), and a copy already in the cache would be a file no plan bound:
# such models are refused at preview. Keys are the family mlx-audio / mlx-vlm loads (after its remapping).
HUB_FETCHES: dict[MediaKind, dict[str, str]] = {
    SPEECH: {
        "llama": "the SNAC codec mlx-community/snac_24khz, fetched when its module is imported",
        "qwen3": "the SNAC codec mlx-community/snac_24khz, fetched when its module is imported",
        "kokoro": "its voices from prince-canuma/Kokoro-82M",
        "sesame": "the Mimi codec kyutai/moshiko-pytorch-bf16 and the tokenizer unsloth/Llama-3.2-1B",
        "rumik_oss": "the Mimi codec kyutai/moshiko-pytorch-bf16",
        "outetts": "the DAC codec mlx-community/dac-speech-24khz-1.5kbps and its tokenizer",
        "spark": "a wav2vec2 feature extractor",
        "melotts": "the BERT model bert-base-uncased",
        "lingv3_tts": "a speaker file",
        "kugelaudio": "a Qwen tokenizer",
    },
    TRANSCRIPTION: {},
    IMAGE_GENERATION: {
        "flux3": "its prompt upsampler black-forest-labs/flux-3-image-klein-pup (a 9B model, on by default)",
    },
}
# The configuration file of a diffusers-style pipeline (no root config.json: one per component folder).
PIPELINE_INDEX = "model_index.json"


def config_path(model_dir: Path) -> Path:
    """Return the file that declares a model: config.json, or (without one) a pipeline's ``model_index.json``."""
    config, index = model_dir / "config.json", model_dir / PIPELINE_INDEX
    return index if index.is_file() and not config.is_file() else config


def read_model_config(model_dir: Path) -> dict[str, Any]:
    """Return the parsed file that declares a model (``config_path``), or {} where it is absent or not an object."""
    try:
        doc = json.loads(config_path(model_dir).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


@dataclass(frozen=True)
class MediaSupport:
    """The model families the installed mlx-audio and mlx-vlm load, each with its remapping of model types."""

    speech: frozenset[str]
    speech_remapping: dict[str, str]
    transcription: frozenset[str]
    transcription_remapping: dict[str, str]
    image: frozenset[str]


@dataclass(frozen=True)
class Detected:
    """One media kind a config declares: the family the runtime loads for it, and why."""

    kind: MediaKind
    family: str
    declared: str  # what the config says (model_type, the NeMo target, the pipeline's class name)
    why: str


def audio_model_type(config: dict[str, Any]) -> str | None:
    """Return the audio model type a config.json declares, by mlx-audio's own config rules (never by name).

    ``model_type`` (or ``architecture``); without one, the distinctive keys mlx-audio reads (Pocket TTS's
    ``flow_lm`` and ``mimi``, MiMo-Audio's), or a NeMo ``target``; a ``llama`` config with ``acoustic_dim`` is TADA.
    """
    raw = config.get("model_type") or config.get("architecture")
    model_type = raw.lower() if isinstance(raw, str) and raw else None
    if model_type is None and {"flow_lm", "mimi"} <= config.keys():
        return "pocket_tts"
    architectures = config.get("architectures")
    if model_type in (None, "qwen2", "mimo_audio") and "MiMoAudioModel" in (architectures or ()):
        return "mimo_audio"
    if model_type == "llama" and "acoustic_dim" in config:
        return "tada"
    if model_type is None and isinstance(config.get("target"), str):
        module, _, name = str(config["target"]).rpartition(".")
        if module.startswith("nemo.collections.asr."):
            return NEMO_TARGETS.get(name)
    return model_type


def _family(model_type: str, types: frozenset[str], remapping: dict[str, str]) -> str | None:
    family = remapping.get(model_type, model_type)
    return family if family in types else None


def pipeline_class(config: dict[str, Any]) -> str | None:
    """Return the pipeline class a diffusers ``model_index.json`` names (``ErnieImagePipeline``), or None."""
    name = config.get("_class_name")
    return name if isinstance(name, str) and name.endswith("Pipeline") else None


def class_tokens(class_name: str) -> list[str]:
    """Return the snake_case prefixes of a CamelCase class name: ``ErnieImagePipeline`` -> ernie, ernie_image, ..."""
    tokens = re.findall(r"[A-Z][a-z0-9]*|[A-Z]+(?=[A-Z]|$)", class_name)
    return ["_".join(tokens[:end]).lower() for end in range(1, len(tokens) + 1)]


def is_flux3_native(config: dict[str, Any]) -> bool:
    """Say whether a config.json is BFL's native Flux 3 layout (a ``dit`` with three input kinds)."""
    dit = config.get("dit")
    channels = dit.get("in_channels") if isinstance(dit, dict) else None
    return (
        isinstance(config.get("model"), str)
        and str(config["model"]).startswith("flux-3-image")
        and isinstance(channels, dict)
        and {"image", "image_cond", "text"} <= channels.keys()
    )


def detect(config: dict[str, Any], support: MediaSupport) -> list[Detected]:
    """Return every media kind the config declares that the installed packages load (none: not a media model).

    Two entries mean the config alone cannot tell (VibeVoice is a TTS and an STT model type): the runtime must be
    named. A chat model type that is also an audio one (llama, qwen3, glm, mimo) is for the caller to weigh.
    """
    found: list[Detected] = []
    pipeline = pipeline_class(config)
    if pipeline is not None:
        family = next((t for t in reversed(class_tokens(pipeline)) if t in support.image), None)
        if family is not None:
            found.append(Detected(IMAGE_GENERATION, family, pipeline, f"{PIPELINE_INDEX} names {pipeline}"))
        return found
    if is_flux3_native(config) and "flux3" in support.image:
        return [Detected(IMAGE_GENERATION, "flux3", str(config["model"]), "config.json is a native Flux 3 layout")]
    model_type = audio_model_type(config)
    if model_type is None:
        return found
    speech = _family(model_type, support.speech, support.speech_remapping)
    if speech is not None:
        found.append(Detected(SPEECH, speech, model_type, f"mlx-audio's TTS loads model_type {model_type}"))
    heard = _family(model_type, support.transcription, support.transcription_remapping)
    if heard is not None:
        found.append(Detected(TRANSCRIPTION, heard, model_type, f"mlx-audio's STT loads model_type {model_type}"))
    return found


def hub_fetch(detected: Detected) -> str | None:
    """Return what loading this family would fetch from the Hub, or None when it loads from its own files."""
    return HUB_FETCHES[detected.kind].get(detected.family)
