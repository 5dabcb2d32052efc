"""Whose share of mlx-vlm's prefix cache a request may read: the front names the tenant, never the client.

mlx-vlm's automatic prefix cache (APC) salts every cached block with a tenant read from the request headers
``X-APC-Tenant`` or ``X-Tenant-Id`` (mlx_vlm/server/app.py ``_read_tenant_id``): a client that sends another
client's tenant reads (and times) that client's cached prefixes. The front never forwards a client's headers
to a worker: it writes each worker request itself (``worker_stream.request_head``), with the worker session's
headers and the one ``TENANT_HEADER`` set here from the caller's API key identity (``security.key_id``). So a
key's requests hit only that key's cached prefixes, and a client's own ``X-APC-Tenant`` or ``X-Tenant-Id`` is
dropped with the rest of its headers. Without API keys every client is one trust domain: one shared tenant.

The worker listens on a private socket only the front reaches (0600 in the front's 0700 directory), so the
header it reads always comes from here; the plan gives it no default tenant (``decoding.prefix_cache_env``).
The caller is set by the front's guard for every request (keep-alive requests share a task, so it is reset
each time) and read when the worker request is written.
"""

from __future__ import annotations

from contextvars import ContextVar

TENANT_HEADER = "X-APC-Tenant"  # mlx-vlm reads it first; X-Tenant-Id only without it
SHARED_TENANT = "mlx-agent-shared"  # no API keys: one trust domain

_CALLER: ContextVar[str | None] = ContextVar("mlx_agent_cache_caller", default=None)


def tenant_of(key_id: str | None) -> str:
    """Return the tenant of a caller: its API key's non-secret id, or the shared tenant without keys."""
    return SHARED_TENANT if key_id is None else f"mlx-agent-key-{key_id}"


def set_caller(key_id: str | None) -> None:
    """Name the API key id (None without keys) of the request the current task serves."""
    _CALLER.set(key_id)


def tenant_headers() -> dict[str, str]:
    """Return the tenant header of the request the current task serves, for its worker request."""
    return {TENANT_HEADER: tenant_of(_CALLER.get())}
