"""Wiring the front: read its secrets and policy, build the aiohttp app, listen on loopback, stop cleanly.

An eager front loads its ``preload`` models once it listens (``/health`` says ``ready: false`` until then)
and exits with the load's refusal line if one fails, so its supervisor reports the worker's own error. On
SIGTERM or SIGINT the workers are stopped first (open streams end with an error event), then the server.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST

from mlx_agent.errors import MlxAgentError, PortInUse, print_refusal
from mlx_agent.gateway.anthropic.api import AnthropicApi, errors_middleware
from mlx_agent.gateway.cache_privacy import PromptLedger
from mlx_agent.gateway.door.config import read_private_lines, read_secret_file
from mlx_agent.gateway.door.connections import ConnectionCollector, GuardedConnections, Limits, track_requests
from mlx_agent.gateway.door.control import Control
from mlx_agent.gateway.door.endpoints import ENDPOINTS, Apis
from mlx_agent.gateway.door.security import Guard, add_cors_headers
from mlx_agent.gateway.models.admission import read_policy_file
from mlx_agent.gateway.models.fleet import Fleet
from mlx_agent.gateway.observe.request_log import observer
from mlx_agent.gateway.ollama.api import OllamaApi
from mlx_agent.gateway.ollama.api import errors_middleware as ollama_errors
from mlx_agent.gateway.openai.cache_stats import CacheApi
from mlx_agent.gateway.openai.embeddings import EmbeddingsApi
from mlx_agent.gateway.openai.media import MediaApi, upload_caps
from mlx_agent.gateway.openai.passthrough import OpenAiApi
from mlx_agent.gateway.responses.api import ResponsesApi
from mlx_agent.gateway.responses.store import ResponseStore
from mlx_agent.gateway.upstream import Upstream
from mlx_agent.policy import Policy
from mlx_agent.wire import EXIT_REFUSED

if TYPE_CHECKING:
    from mlx_agent.records.front import FrontConfig

log = logging.getLogger("mlx_agent.gateway")
FLEET = web.AppKey("fleet", Fleet)
SHUTDOWN_TIMEOUT_S = 5.0
LINGER_S = 2.0  # how long an unread body is drained after its answer (see the runner below)


@dataclass(frozen=True)
class Secrets:
    """What the front reads once at start besides its config."""

    control_token: str
    api_keys: list[str] | None
    policies: dict[str, Policy] | None  # the persisted per-model policies (None: the config's)
    min_headroom_gb: float | None


def read_secrets(config: FrontConfig) -> Secrets:
    """Read the control token, the API keys and the live policy; raise ``FrontConfigInvalid`` if unusable."""
    token = read_secret_file(Path(config["control_token_path"]), "control token file")
    key_path = config["api_key_path"]
    keys = None if key_path is None else read_private_lines(Path(key_path), "API key file")
    persisted = read_policy_file(Path(config["policy_path"]))
    if persisted is None:
        return Secrets(token, keys, None, config["min_headroom_gb"])
    reserve, policies = persisted
    return Secrets(token, keys, policies, reserve)


def build_app(config: FrontConfig, secrets: Secrets) -> web.Application:
    """Return the front's application; its fleet starts with it and stops with it."""
    methods = {endpoint.method for endpoint in ENDPOINTS}
    caps = upload_caps(config["max_body_bytes"])
    guard = Guard(config["port"], config["max_body_bytes"], secrets.control_token, secrets.api_keys, methods, caps)
    fleet = Fleet(config, secrets.policies, secrets.min_headroom_gb)
    # track_requests is outermost, to see each request's whole life on its connection; observe next, so its
    # request line has the status the client got; errors_middleware then gives the front door's refusals on
    # /v1/messages Anthropic's shape, ollama_errors those on /api/ Ollama's (an endpoint's own: endpoints.Endpoint).
    app = web.Application(
        middlewares=[
            track_requests,
            observer(fleet.metrics, config["log_prompts"]),
            errors_middleware,
            ollama_errors,
            guard.middleware(),
        ],
        client_max_size=config["max_body_bytes"],
    )
    app.on_response_prepare.append(add_cors_headers)
    app[FLEET] = fleet

    async def metrics(request: web.Request) -> web.Response:
        """Answer a Prometheus scrape."""
        return web.Response(body=fleet.metrics.render(), headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def lifespan(app: web.Application) -> AsyncIterator[None]:
        upstream = Upstream(fleet, PromptLedger() if secrets.api_keys else None)
        apis = Apis(
            openai=OpenAiApi(upstream, guard.proof),
            anthropic=AnthropicApi(upstream),
            responses=ResponsesApi(upstream, ResponseStore()),
            ollama=OllamaApi(upstream),
            control=Control(fleet),
            metrics=metrics,
            embeddings=EmbeddingsApi(upstream),
            media=MediaApi(upstream, fleet.socket_dir, config["max_body_bytes"]),
            cache=CacheApi(fleet, private=bool(secrets.api_keys)),
        )
        for endpoint in ENDPOINTS:  # the route table (gateway/door/endpoints.py), in its order
            handler = endpoint.bind(apis)
            if endpoint.method == "GET":
                app.router.add_get(endpoint.path, handler)  # HEAD too: agents probe the base URL with it
            else:
                app.router.add_route(endpoint.method, endpoint.path, handler)
        fleet.start_watching()
        yield
        await fleet.close()

    app.cleanup_ctx.append(lifespan)
    return app


async def serve(config: FrontConfig, secrets: Secrets) -> int:
    """Listen until SIGTERM/SIGINT; return the exit status."""
    app = build_app(config, secrets)
    # handler_cancellation: a client that hangs up cancels its handler, which closes the worker's request, so
    # a non-streamed generation stops as a streamed one does.
    runner = web.AppRunner(
        app,
        access_log=None,
        handle_signals=False,
        shutdown_timeout=SHUTDOWN_TIMEOUT_S,
        handler_cancellation=True,
        keepalive_timeout=config["keepalive_timeout"],
        auto_decompress=False,  # a compressed body is refused (415) by the guard, never inflated
        # aiohttp drains (and drops) a body its handler left unread before it closes, 10 s by default. A body
        # refused from its headers (401, 403, 413) or cut off (408) is never read by a handler; 2 s of draining
        # lets an honest client finish sending it and read the answer (with none, a client still writing a large
        # body gets a broken pipe instead of its 413, and SDKs retry that), while a slow sender holds its
        # connection 2 s at most.
        lingering_time=LINGER_S,
    )
    await runner.setup()
    loop = asyncio.get_running_loop()
    guarded = GuardedConnections(runner.server, Limits.of(config))  # type: ignore[arg-type]
    app[FLEET].metrics.registry.register(ConnectionCollector(guarded))
    try:
        listener = await loop.create_server(guarded, config["host"], config["port"], reuse_address=True)
    except OSError as exc:
        log.error("cannot listen on %s:%d: %s", config["host"], config["port"], exc.strerror or exc)
        await runner.cleanup()
        # Another process holds the port (it took it after the preview checked): the supervisor says so.
        taken = PortInUse(
            f"port {config['port']} was taken before the front could listen: {exc.strerror or exc}",
            details={"port": config["port"]},
        )
        print_refusal(taken)
        return EXIT_REFUSED
    names = ", ".join(m["served_model_name"] for m in config["models"])
    log.info("listening on http://%s:%d for %s (%s)", config["host"], config["port"], names, config["mode"])
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    preload = loop.create_task(app[FLEET].preload())
    failure: MlxAgentError | None = None
    stopped = loop.create_task(stop.wait())
    await asyncio.wait({preload, stopped}, return_when=asyncio.FIRST_COMPLETED)
    if preload.done() and not preload.cancelled():
        failure = preload.result()
    if failure is None and not stop.is_set():
        await stopped
    log.info("stopping: workers first, then the front")
    preload.cancel()
    listener.close()
    await app[FLEET].close()
    await runner.cleanup()
    if failure is not None:
        print_refusal(failure)
        return EXIT_REFUSED
    return 0
