"""Ollama's ``:latest`` tag on a model name, and the ``model`` its endpoints require.

Ollama names every model ``NAME:TAG``, and its clients add ``:latest`` to a name given without a tag. So a
served name (or alias) followed by ``:latest`` names that model on Ollama's own endpoints (``/api/*``) and on
``/v1/embeddings``, the endpoint Ollama's OpenAI-style embedding clients call; a model served under the tagged
name itself is found first. Ollama's endpoints require ``model`` (400 ``missing_parameter``); the OpenAI ones
take the first model when it is left out.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mlx_agent.api_errors import Code
from mlx_agent.errors import RequestRefused
from mlx_agent.gateway.door.http_errors import refused

if TYPE_CHECKING:
    from mlx_agent.gateway.models.fleet import Fleet
    from mlx_agent.gateway.models.lifecycle import Lifecycle

LATEST = ":latest"


def route_tagged(fleet: Fleet, name: object) -> Lifecycle:
    """Return the model ``name`` routes to, ``NAME:latest`` as ``NAME`` when no model has the tagged name."""
    try:
        return fleet.route(name)
    except RequestRefused as refusal:
        if refusal.code != Code.MODEL_NOT_FOUND or not isinstance(name, str) or not name.endswith(LATEST):
            raise
        return fleet.route(name.removesuffix(LATEST))


def required_model(name: object) -> str:
    """Return the ``model`` an Ollama request names; 400 ``missing_parameter`` when it names none."""
    if not isinstance(name, str) or not name:
        if name is not None and name != "":
            raise refused(Code.INVALID_TYPE, "'model' must be a string", param="model")
        raise refused(Code.MISSING_PARAMETER, "'model' is required", param="model")
    return name
