"""Front-door rules that need no server: which Host and Origin values name the loopback gateway."""

from __future__ import annotations

import pytest

from mlx_agent.gateway.door.security import allowed_hosts, key_id, loopback_origin

pytestmark = pytest.mark.fast


def test_allowed_hosts_are_the_loopback_names_with_the_port() -> None:
    """Only loopback names with the gateway's port are accepted (bare names only on port 80)."""
    assert allowed_hosts(8080) == {"127.0.0.1:8080", "localhost:8080", "[::1]:8080"}
    assert "localhost" in allowed_hosts(80)


@pytest.mark.parametrize(
    ("origin", "ok"),
    [
        ("http://localhost:3000", True),
        ("https://127.0.0.1", True),
        ("http://[::1]:5173", True),
        ("http://localhost.evil.example", False),
        ("http://evil.example", False),
        ("null", False),
        ("file://", False),
        ("http://127.0.0.1:99999", False),
    ],
)
def test_loopback_origins(origin: str, ok: bool) -> None:
    """Pages served from loopback may call the gateway; any other origin, or a malformed one, may not."""
    assert loopback_origin(origin) is ok


def test_key_ids_are_stable_and_do_not_reveal_the_key() -> None:
    """A key's id is a short digest: the same for the same key, never the key itself."""
    assert key_id("secret-key") == key_id("secret-key") != key_id("other-key")
    assert "secret" not in key_id("secret-key")
