"""Embeddings in the front and the plan: inputs, routing to an embedding model, base64, runtime choice, seams."""

from __future__ import annotations

import base64
import struct
from pathlib import Path
from typing import Any

import pytest

from mlx_agent.errors import RequestRefused, SeamChanged, UnsupportedModel
from mlx_agent.errors.commands import UnsupportedRuntime
from mlx_agent.gateway.openai.embeddings import MAX_INPUTS, embedding_model, floats, inputs_of
from mlx_agent.installed import embedding_support
from mlx_agent.plan.runtime_select import select_runtime
from mlx_agent.runtime.entries.mlx_vlm_embed import EMBED_SEAMS, check_embed_seams
from tests.unit.fleets import fleet


@pytest.mark.fast
@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("hi", ["hi"]),
        (["a", "b"], ["a", "b"]),
        ([1, 2, 3], [[1, 2, 3]]),
        ([[1], [2, 3]], [[1], [2, 3]]),
    ],
)
def test_inputs_take_every_openai_shape(value: Any, expected: Any) -> None:
    """A string, strings, a token-id list and token-id lists all become a list of inputs."""
    assert inputs_of(value) == expected


@pytest.mark.fast
@pytest.mark.parametrize(
    ("value", "code", "param"),
    [
        ([], "invalid_value", "input"),
        ("", "invalid_value", "input.0"),
        (["a", 1], "invalid_type", "input.1"),
        ([[1], "a"], "invalid_type", "input.1"),
        ([[1, -2]], "invalid_type", "input.0"),
        ([[True]], "invalid_type", "input.0"),
        ({"text": "a"}, "invalid_value", "input"),
        (["a"] * (MAX_INPUTS + 1), "invalid_value", "input"),
    ],
)
def test_bad_inputs_are_refused_naming_the_first(value: Any, code: str, param: str) -> None:
    """Empty, mixed, negative, boolean and too many inputs are 400s with the input's param."""
    with pytest.raises(RequestRefused) as info:
        inputs_of(value)
    assert (info.value.status, info.value.code, info.value.param) == (400, code, param)


@pytest.mark.fast
def test_only_an_embedding_model_embeds(tmp_path: Path) -> None:
    """The embedding model is found by name and alias; the chat model is 400 model_not_embedding naming both."""
    models = fleet(tmp_path)
    assert embedding_model(models, "embed").name == "embed"
    assert embedding_model(models, "text-embedding-3-small").name == "embed"
    with pytest.raises(RequestRefused) as info:
        embedding_model(models, "org/tiny")
    refusal = info.value
    assert (refusal.status, refusal.code, refusal.param) == (400, "model_not_embedding", "model")
    assert "'org/tiny'" in refusal.message and "embed" in refusal.message
    with pytest.raises(RequestRefused) as missing:
        embedding_model(models, "nobody")
    assert missing.value.code == "model_not_found"


@pytest.mark.fast
def test_ollamas_latest_tag_names_the_embedding_model(tmp_path: Path) -> None:
    """NAME:latest routes to NAME for embeddings, as on Ollama's chat; another tag, or a chat model's, does not."""
    models = fleet(tmp_path)
    assert embedding_model(models, "embed:latest").name == "embed"
    for name, code in [("embed:v2", "model_not_found"), ("org/tiny:latest", "model_not_embedding")]:
        with pytest.raises(RequestRefused) as info:
            embedding_model(models, name)
        assert info.value.code == code


@pytest.mark.fast
def test_base64_is_little_endian_float32() -> None:
    """The base64 encoding read back is the packed little-endian float32 values, as OpenAI writes them."""
    vector = [0.5, -1.25, 3.0]
    assert floats(base64.b64encode(struct.pack("<3f", *vector)).decode()) == vector


def test_the_embedding_runtime_is_chosen_by_name_and_checks_the_model_type() -> None:
    """--runtime mlx-vlm-embed takes model types mlx-vlm embeds; auto keeps serving them as chat."""
    name, reason = select_runtime("mlx-vlm-embed", {"model_type": "qwen3"}, None)
    assert name == "mlx-vlm-embed" and "embedding loader" in reason
    with pytest.raises(UnsupportedModel):
        select_runtime("mlx-vlm-embed", {"model_type": "llama"}, None)
    assert select_runtime("auto", {"model_type": "qwen3"}, None)[0] == "mlx_lm"
    with pytest.raises(UnsupportedRuntime):  # mlx_vlm's own server would ignore dimensions and token ids
        select_runtime("mlx-vlm-embed", {"model_type": "qwen3"}, "/usr/bin/python3")


def test_embedding_support_reads_mlx_vlms_files() -> None:
    """The installed mlx-vlm embeds BERT and Qwen3 (remapped to qwen3_embedding), not a chat-only llama."""
    supported = embedding_support(None)
    assert supported is not None and {"bert", "qwen3", "xlm_roberta"} <= supported and "llama" not in supported


def test_the_embedding_entrys_seams_hold_for_the_installed_mlx_vlm() -> None:
    """Every mlx_vlm callable the embedding entry uses exists with the parameters it passes."""
    check_embed_seams()


@pytest.mark.parametrize(("module", "name"), [(m, n) for m, names in EMBED_SEAMS.items() for n in names])
def test_a_removed_or_changed_embedding_seam_fails_loudly(
    monkeypatch: pytest.MonkeyPatch, module: str, name: str
) -> None:
    """A missing callable, or one whose leading parameters changed, is SeamChanged naming it."""
    import importlib

    target = importlib.import_module(module)
    monkeypatch.delattr(target, name)
    with pytest.raises(SeamChanged, match=name):
        check_embed_seams()
    monkeypatch.setattr(target, name, lambda renamed: None, raising=False)
    with pytest.raises(SeamChanged, match="expected to start with"):
        check_embed_seams()


def test_a_changed_seam_stops_the_embedding_worker_before_it_listens(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The worker exits 2 with the reason on stderr, and no socket is bound."""
    import mlx_vlm.embedding_loader

    from mlx_agent.runtime.entries.mlx_vlm_embed import serve

    monkeypatch.setattr(mlx_vlm.embedding_loader, "load_embedding_model", lambda path: None)
    socket_path = tmp_path / "w.sock"
    assert serve(["--model", str(tmp_path), "--mlx-agent-socket", str(socket_path)]) == 2
    assert "load_embedding_model" in capsys.readouterr().err and not socket_path.exists()
