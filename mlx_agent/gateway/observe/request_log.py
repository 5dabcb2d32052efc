"""What the front records of each model request: one request line in its log, and the metrics it adds to.

The ``observe`` middleware (outermost, so it sees the status the client gets) gives each ``/v1/...`` and
``/api/...`` (Ollama's) request an ``Exchange``. ``Upstream`` fills in the model it was routed to, the usage the
worker reported and, for a stream, when the first token arrived. When the request ends the middleware writes the
line::

    request {"time", "model", "endpoint", "status", "stream", "prompt_tokens", "completion_tokens",
             "cached_tokens", "ttft_ms", "duration_ms", "max_tokens", "max_tokens_requested"}

(``prompt`` too, only when the plan has ``--log-prompts``) and adds it to ``FrontMetrics`` (with the tool calls
the worker marked ``unparsed_tool_calls``, counted from the reply or its stream's chunks) and to its model's
one-second samples (``samples``: a stream's tokens are counted there as its events arrive). A client that hangs
up before its reply ended gets ``status`` 499; one that closes after its stream's last event, the stream's 200.
``max_tokens`` is the reply limit the request was given (as far as the front knows: our worker reports its cut
to the context's room), ``max_tokens_requested`` the client's own (null when it sent none); a plain reply whose
own limit was lowered gets the ``limit_notice`` header here.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from aiohttp import web

from mlx_agent.files import utc_iso
from mlx_agent.gateway.observe.limit_notice import lowered_headers
from mlx_agent.wire import UNPARSED_TOOL_CALLS

if TYPE_CHECKING:
    from aiohttp.typedefs import Middleware

    from mlx_agent.gateway.door.connections import Handler
    from mlx_agent.gateway.observe.metrics import FrontMetrics
    from mlx_agent.gateway.observe.samples import Ring, Samples

EXCHANGE = "mlx_agent_exchange"
REQUEST_LINE = "request "  # what starts a request line's message (``serve logs`` reads them)
OBSERVED_PREFIX = ("/v1/", "/api/")  # the model APIs: OpenAI and Anthropic, and Ollama's
# The status a request line gives a request whose client hung up before its reply ended (nginx's convention):
# the handler is cancelled, so no status of the reply's own is left to log, and 500 would blame the front.
CLIENT_CLOSED = 499
log = logging.getLogger("mlx_agent.gateway")


@dataclass
class Exchange:
    """One model request as the front saw it."""

    started: float  # perf_counter at arrival
    wall: float  # time.time at arrival
    stream: bool = False
    model: str | None = None
    prompt: Any = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    first_token: float | None = None  # perf_counter at the first streamed token
    max_tokens_requested: int | None = None  # the client's own reply limit
    max_tokens: int | None = None  # the reply limit granted (``limit_notice``)
    completed: int | None = None  # the status of a stream whose last event reached the client
    unparsed_tool_calls: int = 0  # calls the worker's parser could not read, returned as text (never silent)
    samples: Samples | None = None  # the front's per-second samples (``samples.py``)
    streamed: int = 0  # the stream's data events so far, each counted as a token in the samples
    # The model's ring in the samples, once the first token came.
    _ring: tuple[str, Ring] | None = field(default=None, init=False, repr=False)

    def routed(self, model: str, stream: bool, prompt: Any) -> None:
        """Record the model the request reached, whether it streams, and its prompt (kept only if logged)."""
        self.model, self.stream, self.prompt = model, stream, prompt

    def limits(self, requested: int | None, granted: int | None) -> None:
        """Record the client's own reply limit and the one the front gave the worker."""
        self.max_tokens_requested, self.max_tokens = requested, granted

    @property
    def limit_lowered(self) -> bool:
        """Whether the reply limit granted is below the client's own."""
        requested, granted = self.max_tokens_requested, self.max_tokens
        return requested is not None and granted is not None and granted < requested

    def token(self) -> None:
        """Record that a streamed token arrived (the first one's time is the request's time to first token)."""
        if self.first_token is None:
            self.first_token = time.perf_counter()
        self.streamed += 1
        if self.samples is not None and self.model is not None:
            ring = self._ring
            if ring is None or ring[0] != self.model:  # looked up once per stream, not once per token
                ring = self._ring = (self.model, self.samples.ring(self.model))
            ring[1].tokens()

    def usage(self, usage: dict[str, Any]) -> None:
        """Record the worker's usage object (chat-completion shape)."""
        self.prompt_tokens = _count(usage.get("prompt_tokens"))
        self.completion_tokens = _count(usage.get("completion_tokens"))
        details = usage.get("prompt_tokens_details")
        self.cached_tokens = _count(details.get("cached_tokens")) if isinstance(details, dict) else None

    def unparsed(self, doc: object, part: str) -> None:
        """Count the tool calls the worker could not parse in a reply (``part`` "message") or a chunk ("delta")."""
        self.unparsed_tool_calls += unparsed_calls(doc, part)


def unparsed_calls(doc: object, part: str) -> int:
    """Return how many calls ``doc``'s choices list under the worker's ``unparsed_tool_calls`` marker."""
    if not isinstance(doc, dict):
        return 0
    found = 0
    for choice in doc.get("choices") or ():
        message = choice.get(part) if isinstance(choice, dict) else None
        calls = message.get(UNPARSED_TOOL_CALLS) if isinstance(message, dict) else None
        found += len(calls) if isinstance(calls, list) else 0
    return found


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


_CURRENT: ContextVar[Exchange | None] = ContextVar("mlx_agent_exchange", default=None)


def current_exchange() -> Exchange | None:
    """Return the exchange of the request being handled (None outside ``/v1/``): for code that has no request."""
    return _CURRENT.get()


def exchange_of(request: web.Request) -> Exchange | None:
    """Return the request's exchange (None outside ``/v1/``)."""
    found: Exchange | None = request.get(EXCHANGE)
    return found


def endpoint_of(request: web.Request) -> str:
    """Return the route's template (``/v1/models/{model_id}``), never the raw path (its label stays bounded)."""
    route = request.match_info.route
    resource = route.resource if route is not None else None
    return resource.canonical if resource is not None else "unmatched"


def record(metrics: FrontMetrics, exchange: Exchange, endpoint: str, status: int, log_prompts: bool) -> None:
    """Write the request line and add the exchange to the metrics."""
    ended = time.perf_counter()
    duration = ended - exchange.started
    ttft = None if exchange.first_token is None else exchange.first_token - exchange.started
    model = exchange.model or ""
    line: dict[str, Any] = {
        "time": utc_iso(exchange.wall),
        "model": exchange.model,
        "endpoint": endpoint,
        "status": status,
        "stream": exchange.stream,
        "prompt_tokens": exchange.prompt_tokens,
        "completion_tokens": exchange.completion_tokens,
        "cached_tokens": exchange.cached_tokens,
        "ttft_ms": None if ttft is None else round(ttft * 1000, 1),
        "duration_ms": round(duration * 1000, 1),
        "max_tokens": exchange.max_tokens,
        "max_tokens_requested": exchange.max_tokens_requested,
    }
    if log_prompts and exchange.prompt is not None:
        line["prompt"] = exchange.prompt
    log.info("%s%s", REQUEST_LINE, json.dumps(line, ensure_ascii=False))
    metrics.requests.labels(model, endpoint, str(status)).inc()
    metrics.duration.labels(model, endpoint).observe(duration)
    if exchange.model is None:
        return
    for counter, value in (
        (metrics.prompt_tokens, exchange.prompt_tokens),
        (metrics.completion_tokens, exchange.completion_tokens),
        (metrics.cached_tokens, exchange.cached_tokens),
    ):
        if value:
            counter.labels(model).inc(value)
    if exchange.unparsed_tool_calls:
        metrics.unparsed_tool_calls.labels(model).inc(exchange.unparsed_tool_calls)
    if ttft is not None:
        metrics.ttft.labels(model).observe(ttft)
    ring = metrics.samples.ring(model)
    ring.request(exchange.prompt_tokens, exchange.cached_tokens, ttft)
    if exchange.completion_tokens is not None and exchange.completion_tokens != exchange.streamed:
        ring.tokens(exchange.completion_tokens - exchange.streamed)  # the usage's count is the true one
    # Decode speed after the first token, for streams only: a plain reply's time includes a cold load and the prompt.
    tokens = exchange.completion_tokens
    if exchange.first_token is not None and tokens and tokens > 1 and ended > exchange.first_token:
        metrics.rate.labels(model).observe((tokens - 1) / (ended - exchange.first_token))


def observer(metrics: FrontMetrics, log_prompts: bool) -> Middleware:
    """Return the middleware that gives each model request an exchange and records it when it ends."""

    @web.middleware
    async def observe(request: web.Request, handler: Handler) -> web.StreamResponse:
        if not request.path.startswith(OBSERVED_PREFIX):
            return await handler(request)
        exchange = Exchange(time.perf_counter(), time.time(), samples=metrics.samples)
        request[EXCHANGE] = exchange
        _CURRENT.set(exchange)  # the handler runs in this task: a copy of this context
        status = 500
        try:
            response = await handler(request)
            status = response.status
            if exchange.limit_lowered and not response.prepared:
                response.headers.update(lowered_headers(exchange))
            return response
        except web.HTTPException as exc:
            status = exc.status
            raise
        except (asyncio.CancelledError, ConnectionResetError):
            # The client went away: after the whole stream (its own close) or before the reply ended.
            status = exchange.completed or CLIENT_CLOSED
            raise
        finally:
            record(metrics, exchange, endpoint_of(request), status, log_prompts)

    return observe
