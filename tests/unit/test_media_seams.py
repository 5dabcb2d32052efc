"""The names of mlx-vlm the media worker relies on: present as checked, and the check fails loudly when one changes."""

from __future__ import annotations

import importlib
from typing import Any

import pytest

from mlx_agent.errors import SeamChanged
from mlx_agent.runtime.entries.mlx_vlm_media import LOADER, check_media_seams


def test_the_installed_mlx_vlm_has_every_seam() -> None:
    """The pinned mlx-vlm passes the start-up check: every name, parameter list, caller and the loader lookup."""
    check_media_seams()


def test_an_endpoint_that_stops_loading_through_the_package_name_fails_the_check(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A TTS runner that loads its model another way would bypass the bound loader: the check names it."""
    audio: Any = importlib.import_module("mlx_vlm.server.audio")
    monkeypatch.setattr(audio, "_run_tts_request", lambda request: None)
    with pytest.raises(SeamChanged, match=f"_run_tts_request no longer calls {LOADER}"):
        check_media_seams()


def test_a_loader_dependency_bound_at_import_fails_the_check(monkeypatch: pytest.MonkeyPatch) -> None:
    """If the endpoints' dependency held mlx-vlm's loader itself (not the package's name), the check refuses."""
    app: Any = importlib.import_module("mlx_vlm.server.app")
    monkeypatch.setattr(app._protocol_deps, LOADER, lambda *args, **kwargs: None)
    with pytest.raises(SeamChanged, match="no longer load through"):
        check_media_seams()


def test_a_changed_signature_fails_the_check(monkeypatch: pytest.MonkeyPatch) -> None:
    """mlx-vlm's loader taking other parameters is a changed seam, named with what it now takes."""
    app: Any = importlib.import_module("mlx_vlm.server.app")
    monkeypatch.setattr(app, LOADER, lambda path, *, model_kind="auto": None)
    with pytest.raises(SeamChanged, match="now takes"):
        check_media_seams()


def test_an_audio_loader_that_no_longer_takes_the_family_fails_the_check(monkeypatch: pytest.MonkeyPatch) -> None:
    """mlx-audio's base loader no longer reading ``model_name_parts`` would let the folder name pick: refused."""
    utils: Any = importlib.import_module("mlx_audio.utils")

    def base_load_model(model_path: Any, category: str, model_remapping: dict[str, str], **kwargs: Any) -> None:
        return None

    monkeypatch.setattr(utils, "base_load_model", base_load_model)
    with pytest.raises(SeamChanged, match="no longer reads 'model_type'"):
        check_media_seams()
