"""HTTP errors of the wrapped server, answered as OpenAI-style error objects.

Every error body is ``{"error": {"message", "type", "param", "code"}}`` (``HttpError.body``, built by
``mlx_agent.api_errors``, whose ``Code`` lists every code with its status). The status says whose fault it is:
400 a bad argument or a chat template that refused the request, 404 an unknown model, 503 a generation thread
that has died (restart the server), 500 anything else. mlx_lm answers 404 for every failure in generation,
including bad arguments; we never do.
"""

from __future__ import annotations

from mlx_agent.api_errors import Code
from mlx_agent.errors import ContextLengthExceeded, EmptyPrompt, HttpError, SchemaFailed, TemplateFailed


def api_error(code: Code, message: str, *, param: str | None = None) -> HttpError:
    """Return the answer of ``code`` (``mlx_agent.api_errors``: its status and type, the body's shape)."""
    return HttpError(code.status, message, type_=code.kind, param=param, code=code)


def bad_request(message: str, param: str | None = None, code: str = Code.INVALID_VALUE) -> HttpError:
    """Return a 400 for an argument the request got wrong."""
    return HttpError(400, message, param=param, code=code)


def model_not_found(name: str) -> HttpError:
    """Return the 404 for a model this server does not serve."""
    return api_error(
        Code.MODEL_NOT_FOUND,
        f"The model {name!r} is not served here; use 'default_model' or the served model's path.",
        param="model",
    )


def generation_unavailable() -> HttpError:
    """Return the 503 for a server whose generation thread has died."""
    return api_error(Code.GENERATION_UNAVAILABLE, "The server's generation thread has stopped; restart the server.")


def from_generation_error(error: Exception) -> HttpError:
    """Translate an exception the generation thread handed back for a request."""
    if isinstance(error, TemplateFailed):
        return bad_request(str(error), param="messages", code=Code.TEMPLATE_ERROR)
    if isinstance(error, ContextLengthExceeded):
        return bad_request(str(error), param="messages", code=Code.CONTEXT_LENGTH_EXCEEDED)
    if isinstance(error, EmptyPrompt):
        return bad_request(str(error), param=error.param, code=Code.EMPTY_PROMPT)
    if isinstance(error, SchemaFailed):
        return bad_request(str(error), param="response_format", code=Code.INVALID_SCHEMA)
    if isinstance(error, RuntimeError) and "generation thread died" in str(error):
        return generation_unavailable()
    return api_error(Code.GENERATION_FAILED, f"Generation failed: {type(error).__name__}: {error}")


def from_upstream_validation(error: ValueError) -> HttpError:
    """Translate mlx_lm's own parameter validation (``"<name> must be ..."``) into a 400 naming the parameter."""
    message = str(error)
    first = message.split(" ", 1)[0]
    param = {"requested_model": "model", "adapter": "adapters"}.get(first, first)
    return bad_request(message, param=param if first.isidentifier() else None)
