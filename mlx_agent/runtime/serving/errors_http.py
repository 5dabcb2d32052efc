"""HTTP errors of the wrapped server, answered as OpenAI-style error objects.

Every error body is ``{"error": {"message", "type", "param", "code"}}``. The status says whose fault it is:
400 a bad argument or a chat template that refused the request, 404 an unknown model, 503 a generation thread
that has died (restart the server), 500 anything else. mlx_lm answers 404 for every failure in generation,
including bad arguments; we never do.
"""

from __future__ import annotations

from mlx_agent.errors import ContextLengthExceeded, EmptyPrompt, HttpError, SchemaFailed, TemplateFailed

# OpenAI's error types; ``code`` is ours, stable and snake_case (listed in docs/wrapped-server.md).
NOT_FOUND = "not_found_error"
SERVER_ERROR = "server_error"


def bad_request(message: str, param: str | None = None, code: str = "invalid_value") -> HttpError:
    """Return a 400 for an argument the request got wrong."""
    return HttpError(400, message, param=param, code=code)


def model_not_found(name: str) -> HttpError:
    """Return the 404 for a model this server does not serve."""
    return HttpError(
        404,
        f"The model {name!r} is not served here; use 'default_model' or the served model's path.",
        type_=NOT_FOUND,
        param="model",
        code="model_not_found",
    )


def generation_unavailable() -> HttpError:
    """Return the 503 for a server whose generation thread has died."""
    return HttpError(
        503,
        "The server's generation thread has stopped; restart the server.",
        type_=SERVER_ERROR,
        code="generation_unavailable",
    )


def from_generation_error(error: Exception) -> HttpError:
    """Translate an exception the generation thread handed back for a request."""
    if isinstance(error, TemplateFailed):
        return bad_request(str(error), param="messages", code="template_error")
    if isinstance(error, ContextLengthExceeded):
        return bad_request(str(error), param="messages", code="context_length_exceeded")
    if isinstance(error, EmptyPrompt):
        return bad_request(str(error), param=error.param, code="empty_prompt")
    if isinstance(error, SchemaFailed):
        return bad_request(str(error), param="response_format", code="invalid_schema")
    if isinstance(error, RuntimeError) and "generation thread died" in str(error):
        return generation_unavailable()
    return HttpError(
        500, f"Generation failed: {type(error).__name__}: {error}", type_=SERVER_ERROR, code="generation_failed"
    )


def from_upstream_validation(error: ValueError) -> HttpError:
    """Translate mlx_lm's own parameter validation (``"<name> must be ..."``) into a 400 naming the parameter."""
    message = str(error)
    first = message.split(" ", 1)[0]
    param = {"requested_model": "model", "adapter": "adapters"}.get(first, first)
    return bad_request(message, param=param if first.isidentifier() else None)
