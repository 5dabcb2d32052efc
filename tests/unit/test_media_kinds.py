"""Media kinds decided from config files alone: speech, transcription, image generation, and what is refused.

The model types come from the installed mlx-audio and mlx-vlm files (``installed.media_support``), read, never
imported; each config below is what such a checkpoint's config.json (or ``model_index.json``) says.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import pytest

from mlx_agent.errors import ModelInvalid, UnsupportedModel
from mlx_agent.errors.commands import RuntimeModelMismatch, UnsupportedRuntime
from mlx_agent.installed import media_support, own_site_paths
from mlx_agent.media_kinds import IMAGE_GENERATION, SPEECH, TRANSCRIPTION, MediaSupport, detect
from mlx_agent.plan import media_select, runtime_select
from mlx_agent.plan.runtime_select import select_runtime
from mlx_agent.plan.source import resolve_path_source

pytestmark = pytest.mark.fast

SOPRANO = {"model_type": "soprano", "hidden_size": 32}
NEMO_CTC = {"target": "nemo.collections.asr.models.ctc_bpe_models.EncDecCTCModelBPE", "encoder": {"d_model": 32}}
PARAKEET = {**NEMO_CTC, "model_type": "parakeet"}
ERNIE = {"_class_name": "ErnieImagePipeline", "_diffusers_version": "0.36.0"}
LLAMA = {"model_type": "llama", "hidden_size": 64}


EMPTY_SAFETENSORS = struct.pack("<Q", 2) + b"{}"


@pytest.fixture(autouse=True)
def installed_files(monkeypatch: pytest.MonkeyPatch) -> None:
    """Read the runtimes' files from this environment's site-packages by path (finding a spec counts as importing)."""
    for module in (media_select, runtime_select):
        monkeypatch.setattr(module, "runtime_site_paths", lambda name, executable: own_site_paths())


@pytest.fixture(scope="module")
def support() -> MediaSupport:
    """Return what the installed mlx-audio and mlx-vlm load, read from their files."""
    found = media_support(own_site_paths())
    assert found is not None
    return found


def kinds(config: dict[str, Any], support: MediaSupport) -> list[tuple[str, str]]:
    """Return the (kind, family) of each media kind a config declares."""
    return [(d.kind, d.family) for d in detect(config, support)]


def test_the_installed_packages_declare_each_kind(support: MediaSupport) -> None:
    """mlx-audio's TTS and STT modules and mlx-vlm's diffusion pipelines are read from the installed files."""
    assert {"soprano", "kokoro"} <= support.speech
    assert {"parakeet", "whisper"} <= support.transcription
    assert {"ernie_image", "flux2", "flux3"} <= support.image
    assert "qwen2_vl" not in support.image  # a chat model is no pipeline


def test_each_kind_is_read_from_its_config(support: MediaSupport) -> None:
    """A TTS model type, a NeMo target (with or without model_type) and a pipeline class each decide their kind."""
    assert kinds(SOPRANO, support) == [(SPEECH, "soprano")]
    assert kinds(PARAKEET, support) == [(TRANSCRIPTION, "parakeet")]
    assert kinds(NEMO_CTC, support) == [(TRANSCRIPTION, "parakeet")]
    assert kinds(ERNIE, support) == [(IMAGE_GENERATION, "ernie_image")]
    assert kinds({"model_type": "qwen2_vl"}, support) == []


def test_distinctive_keys_decide_without_a_model_type(support: MediaSupport) -> None:
    """Pocket TTS's flow_lm and mimi keys, and TADA's acoustic_dim on a llama config, are mlx-audio's own rules."""
    assert kinds({"flow_lm": {}, "mimi": {}}, support) == [(SPEECH, "pocket_tts")]
    assert kinds({**LLAMA, "acoustic_dim": 8}, support) == [(SPEECH, "tada")]


def test_the_directory_name_never_decides(tmp_path: Path, support: MediaSupport) -> None:
    """A folder named like a TTS model whose config is a chat model's is no media model (mlx-audio would guess)."""
    named = tmp_path / "kokoro-82m-whisper-tts"
    named.mkdir()
    config = {"model_type": "qwen2_vl"}
    (named / "config.json").write_text(json.dumps(config))
    assert kinds(config, support) == []


def test_auto_picks_the_media_recipe_of_each_kind() -> None:
    """``auto`` serves a speech, transcription or pipeline config with its kind's recipe, and says why."""
    assert select_runtime("auto", SOPRANO, None)[0] == "mlx-vlm-speech"
    assert select_runtime("auto", NEMO_CTC, None)[0] == "mlx-vlm-transcription"
    name, reason = select_runtime("auto", ERNIE, None)
    assert name == "mlx-vlm-image" and "ErnieImagePipeline" in reason and "ernie_image" in reason


def test_a_chat_type_that_is_also_audio_stays_chat_unless_named() -> None:
    """llama, glm and mimo configs are chat for ``auto``; naming the media runtime is the only way to serve one so."""
    assert select_runtime("auto", LLAMA, None)[0] == "mlx_lm"
    assert select_runtime("auto", {"model_type": "glm"}, None)[0] in ("mlx_lm", "mlx-vlm")
    name, reason = select_runtime("mlx-vlm-transcription", {"model_type": "glm"}, None)
    assert name == "mlx-vlm-transcription" and "glmasr" in reason


def test_a_type_of_two_media_kinds_needs_the_runtime_named() -> None:
    """VibeVoice is a TTS and an STT model type: ``auto`` refuses and names both runtimes; a named one serves it."""
    with pytest.raises(UnsupportedModel) as refused:
        select_runtime("auto", {"model_type": "vibevoice"}, None)
    assert "--runtime mlx-vlm-speech or --runtime mlx-vlm-transcription" in refused.value.remediation
    assert select_runtime("mlx-vlm-transcription", {"model_type": "vibevoice"}, None)[0] == "mlx-vlm-transcription"


@pytest.mark.parametrize(
    ("runtime", "config", "fetched"),
    [
        ("mlx-vlm-speech", LLAMA, "snac_24khz"),  # an Orpheus-style llama TTS: SNAC at module import
        ("mlx-vlm-speech", {"model_type": "qwen3"}, "snac_24khz"),
        ("auto", {"model_type": "kokoro"}, "Kokoro-82M"),
        ("auto", {"model_type": "csm"}, "moshiko"),  # remapped to sesame
        ("auto", {"_class_name": "Flux3Pipeline"}, "klein-pup"),  # the prompt upsampler, on by default
    ],
)
def test_a_family_that_fetches_from_the_hub_is_refused_with_what_it_fetches(
    runtime: str, config: dict[str, Any], fetched: str
) -> None:
    """A family whose load fetches another repository is refused at preview, the repository named."""
    with pytest.raises(UnsupportedModel) as refused:
        select_runtime(runtime, config, None)
    assert fetched in str(refused.value) and refused.value.details["fetches"]
    assert "never downloads" in refused.value.remediation


def test_a_media_runtime_refuses_a_model_of_another_kind() -> None:
    """Naming the speech runtime for a recogniser, or a media runtime for a chat model, is runtime_model_mismatch."""
    with pytest.raises(RuntimeModelMismatch):
        select_runtime("mlx-vlm-speech", PARAKEET, None)
    with pytest.raises(RuntimeModelMismatch):
        select_runtime("mlx-vlm-image", {"model_type": "qwen2_vl"}, None)
    with pytest.raises(UnsupportedRuntime):
        select_runtime("mlx-vlm-speech", SOPRANO, "/usr/bin/python3")


def write(path: Path, doc: Any = None, data: bytes = EMPTY_SAFETENSORS) -> None:
    """Write a JSON document (or bytes) at ``path``, its folders made."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if doc is not None:
        path.write_text(json.dumps(doc))
    else:
        path.write_bytes(data)


def test_a_pipeline_layout_binds_every_component_file(tmp_path: Path) -> None:
    """A diffusers folder (model_index.json, weights and tokenizer in subfolders) resolves, each file bound."""
    model = tmp_path / "pipeline"
    write(model / "model_index.json", ERNIE)
    for part in ("transformer", "text_encoder", "vae"):
        write(model / part / "model.safetensors")
    write(model / "transformer" / "config.json", {"hidden_size": 32})
    write(model / "tokenizer" / "tokenizer.json", {"model": {}})
    source, config = resolve_path_source(str(model))
    assert config == ERNIE and source["model_type"] is None
    names = {f["name"] for f in source["files"]}
    assert {"model_index.json", "transformer/model.safetensors", "vae/model.safetensors"} <= names
    assert "tokenizer/tokenizer.json" in names


def test_a_nemo_checkpoint_needs_no_tokenizer_but_a_chat_model_does(tmp_path: Path) -> None:
    """A NeMo ASR folder carries its vocabulary in its config; a chat model without tokenizer files is refused."""
    nemo = tmp_path / "nemo"
    write(nemo / "config.json", NEMO_CTC)
    write(nemo / "model.safetensors")
    assert resolve_path_source(str(nemo))[1] == NEMO_CTC
    chat = tmp_path / "chat"
    write(chat / "config.json", LLAMA)
    write(chat / "model.safetensors")
    with pytest.raises(ModelInvalid, match="tokenizer"):
        resolve_path_source(str(chat))
