"""What the OpenAI family's embeddings and rerank endpoints accept, declared as every body is.

Chat and text completions are declared in ``mlx_agent.bodies``, since the worker checks them too.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from mlx_agent.bodies import Body


class EmbeddingsBody(Body):
    """``POST /v1/embeddings``: ``input`` (strings or token ids) is checked by ``gateway/openai/embeddings.py``."""

    closed = True
    input: Any
    encoding_format: Literal["float", "base64"] | None = None
    dimensions: Annotated[int, Field(ge=1, le=65536)] | None = None
    user: str | None = None  # accepted, changes nothing


class RerankBody(Body):
    """``POST /v1/rerank`` (Cohere's and Jina's shape): read to route its model, which refuses (embeddings.py)."""

    query: Any = None
    documents: Any = None
    top_n: Annotated[int, Field(ge=1)] | None = None
    return_documents: bool | None = None
