"""The front's `GET /v1/models?client_version=`: Codex's catalogue shape, behind the same key as every listing."""

from __future__ import annotations

from pathlib import Path

from tests.gateway_support import running_gateway

AUTH = {"Authorization": "Bearer key-one"}


def test_codexs_refresh_gets_its_shape_and_everyone_else_the_openai_list(tmp_path: Path) -> None:
    """With ``client_version`` the answer is ``{"models": [...]}``; without, the OpenAI list; both need the key."""
    with running_gateway(
        tmp_path, api_keys=["key-one"], context_window=8192, max_tokens_ceiling=1024, alias=["gpt-5-codex", "gpt-*"]
    ) as gateway:
        asked = "/v1/models?client_version=0.171.0"
        assert gateway.request("GET", asked).status == 401  # the catalogue is no way around the key
        codex = gateway.request("GET", asked, headers=AUTH)
        assert codex.status == 200
        entry, alias = codex.json()["models"]
        assert (entry["slug"], alias["slug"]) == ("org/tiny", "gpt-5-codex")  # a glob alias names no model
        assert (entry["visibility"], alias["visibility"]) == ("list", "hide") and entry["base_instructions"]
        assert (entry["context_window"], entry["auto_compact_token_limit"]) == (8192, 8192 - 1024)
        listing = gateway.request("GET", "/v1/models", headers=AUTH).json()
        assert listing["object"] == "list" and [m["id"] for m in listing["data"]] == ["org/tiny", "gpt-5-codex"]
        assert listing["data"][0]["context_length"] == 8192  # one window, in each client's field
        assert gateway.status()["loads"] == 0  # a listing loads nothing
