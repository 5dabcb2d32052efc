"""Wiring the gateway: read its secrets and policy, build the aiohttp app, listen on loopback, stop cleanly.

On SIGTERM or SIGINT the worker is stopped first (open streams end with an error event), then the server.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import AsyncIterator
from dataclasses import dataclass

import aiohttp
from aiohttp import web

from mlx_agent.gateway.anthropic.api import AnthropicApi, errors_middleware
from mlx_agent.gateway.cache_privacy import PromptLedger
from mlx_agent.gateway.config import ConfigError, GatewayConfig, read_private_lines, read_secret_file
from mlx_agent.gateway.control import Control
from mlx_agent.gateway.lifecycle import Lifecycle
from mlx_agent.gateway.openai.passthrough import OpenAiApi
from mlx_agent.gateway.policy import Policy, PolicyError, read_policy_file
from mlx_agent.gateway.responses.api import ResponsesApi
from mlx_agent.gateway.responses.store import ResponseStore
from mlx_agent.gateway.security import CONTROL_PREFIX, Guard, add_cors_headers
from mlx_agent.gateway.upstream import Upstream

log = logging.getLogger("mlx_agent.gateway")
LIFECYCLE = web.AppKey("lifecycle", Lifecycle)
SHUTDOWN_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class Secrets:
    """What the gateway reads once at start besides its config."""

    control_token: str
    api_keys: list[str] | None
    policy: Policy


def read_secrets(config: GatewayConfig) -> Secrets:
    """Read the control token, the API keys and the live policy; raise ``ConfigError`` if any is unusable."""
    token = read_secret_file(config.control_token_path, "control token file")
    keys = None if config.api_key_path is None else read_private_lines(config.api_key_path, "API key file")
    try:
        persisted = read_policy_file(config.policy_path)
    except PolicyError as exc:
        raise ConfigError(str(exc)) from exc
    return Secrets(token, keys, persisted if persisted is not None else config.policy)


def build_app(config: GatewayConfig, secrets: Secrets) -> web.Application:
    """Return the gateway application; its session and lifecycle start with it and stop with it."""
    guard = Guard(config.port, config.max_body_bytes, secrets.control_token, secrets.api_keys)
    # errors_middleware is outermost: it gives the front door's refusals on /v1/messages Anthropic's shape.
    app = web.Application(middlewares=[errors_middleware, guard.middleware()],
                          client_max_size=config.max_body_bytes)
    app.on_response_prepare.append(add_cors_headers)

    async def lifespan(app: web.Application) -> AsyncIterator[None]:
        connector = aiohttp.TCPConnector(limit=0, force_close=True)
        session = aiohttp.ClientSession(connector=connector, auto_decompress=False)
        lifecycle = Lifecycle(config, secrets.policy, session)
        app[LIFECYCLE] = lifecycle
        upstream = Upstream(config, lifecycle, session, PromptLedger() if secrets.api_keys else None)
        openai = OpenAiApi(upstream)
        control = Control(lifecycle)
        app.router.add_get("/health", openai.health)
        app.router.add_get("/v1/models", openai.models)
        app.router.add_post("/v1/chat/completions", openai.chat)
        app.router.add_post("/v1/completions", openai.completions)
        anthropic = AnthropicApi(upstream)
        app.router.add_post("/v1/messages", anthropic.messages)
        app.router.add_post("/v1/messages/count_tokens", anthropic.count_tokens)
        responses = ResponsesApi(upstream, ResponseStore(), config.model_id)
        app.router.add_post("/v1/responses", responses.create)
        app.router.add_get("/v1/responses/{response_id}", responses.retrieve)
        app.router.add_get(CONTROL_PREFIX + "status", control.status)
        app.router.add_post(CONTROL_PREFIX + "unload", control.unload)
        app.router.add_put(CONTROL_PREFIX + "policy", control.policy)
        lifecycle.start_watching()
        yield
        await lifecycle.close()
        await session.close()

    app.cleanup_ctx.append(lifespan)
    return app


async def serve(config: GatewayConfig, secrets: Secrets) -> int:
    """Listen until SIGTERM/SIGINT; return the exit status."""
    app = build_app(config, secrets)
    runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=SHUTDOWN_TIMEOUT_S)
    await runner.setup()
    site = web.TCPSite(runner, config.host, config.port, shutdown_timeout=SHUTDOWN_TIMEOUT_S)
    try:
        await site.start()
    except OSError as exc:
        log.error("cannot listen on %s:%d: %s", config.host, config.port, exc.strerror or exc)
        await runner.cleanup()
        return 1
    log.info("listening on http://%s:%d for %s (model unloaded)", config.host, config.port, config.model_id)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    log.info("stopping: worker first, then the gateway")
    await app[LIFECYCLE].close()
    await runner.cleanup()
    return 0
