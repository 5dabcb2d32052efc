"""The seams of mlx_lm.server that the wrapped entry depends on."""

from __future__ import annotations

from typing import Any

import mlx_lm.server
import pytest

from mlx_agent.runtime import mlx_lm_server


def test_installed_mlx_lm_has_every_seam() -> None:
    """The installed mlx_lm offers run(host, port, model_provider), main and ModelProvider.load_default."""
    mlx_lm_server.check_seams()


def test_a_renamed_seam_fails_loudly(monkeypatch: pytest.MonkeyPatch) -> None:
    """If upstream renames a seam, the entry refuses to start instead of serving unpatched."""
    monkeypatch.delattr(mlx_lm.server, "run")
    with pytest.raises(mlx_lm_server.SeamChanged, match="run"):
        mlx_lm_server.check_seams()


def test_a_changed_signature_fails_loudly(monkeypatch: pytest.MonkeyPatch) -> None:
    """If upstream reorders run's parameters, the entry refuses to start."""
    def run(port: int, host: str, model_provider: Any) -> None:
        raise AssertionError

    monkeypatch.setattr(mlx_lm.server, "run", run)
    with pytest.raises(mlx_lm_server.SeamChanged, match="expected to start with"):
        mlx_lm_server.check_seams()


def test_wrapped_run_loads_before_calling_the_original() -> None:
    """The replacement run loads the default model and only then hands over to the original run."""
    calls: list[str] = []

    class Provider:
        class cli_args:
            model = "m"

        def load_default(self) -> None:
            calls.append("load")

    def original(host: str, port: int, model_provider: Any) -> None:
        calls.append(f"run {host}:{port}")

    mlx_lm_server._loading_run(original)("127.0.0.1", 1, Provider())
    assert calls == ["load", "run 127.0.0.1:1"]
