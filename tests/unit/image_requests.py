"""Image requests for the gateway tests: a front's model of a kind, Messages and Responses turned chat, a refusal."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mlx_agent.errors import RequestRefused
from mlx_agent.gateway.anthropic import request as anthropic
from mlx_agent.gateway.anthropic.bodies import MessagesBody
from mlx_agent.gateway.door.config import parse_config
from mlx_agent.gateway.door.http_errors import parse
from mlx_agent.gateway.responses import request as responses
from mlx_agent.gateway.responses.bodies import ResponsesBody
from mlx_agent.records.front import FrontModelConfig
from tests.gateway_support import gateway_config


def model(kind: str | None) -> FrontModelConfig:
    """Return a front's model whose worker is of ``kind`` (None: a config written before kinds)."""
    config = gateway_config(Path("/tmp/x"), 8080, ["python", "w.py", "--port", "{port}"], model_path=Path("/m/tiny"))
    if kind is not None:
        config["models"][0]["worker"]["kind"] = kind
    parsed: FrontModelConfig = parse_config(config)["models"][0]
    return parsed


def messages_body(*content: dict[str, Any]) -> dict[str, Any]:
    """Return a Messages request with one user turn of ``content`` blocks."""
    return {"model": "org/tiny", "max_tokens": 8, "messages": [{"role": "user", "content": list(content)}]}


def anthropic_chat(body: dict[str, Any]) -> dict[str, Any]:
    """Return the chat body the Messages translator makes of ``body``."""
    return anthropic.translate(parse(MessagesBody, body)).chat


def responses_chat(body: dict[str, Any]) -> dict[str, Any]:
    """Return the chat body the Responses translator makes of ``body``."""
    return responses.to_chat(parse(ResponsesBody, body), default_model="m").chat


def refusal(call: Any, *args: Any, **kwargs: Any) -> RequestRefused:
    """Return the refusal ``call`` raises."""
    with pytest.raises(RequestRefused) as info:
        call(*args, **kwargs)
    return info.value
