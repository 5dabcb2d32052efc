"""The fronts over the stand-in worker that tests only read, shared by every test file of one test process.

One front per configuration (the default one, and the same with the API keys ``KEYS``) is started once per test
process by a session fixture of tests/conftest.py (``standin_front``, ``keyed_standin_front``), waited on by its
readiness, and handed to each test by ``standin`` / ``keyed_standin`` only once it is checked whole and settled:
its process alive, no request or stream open, no client connection held (a test that hung up or sent a slow body
has been let go of), its model unloaded; after each test it is checked again, so that one that left the front
busy fails itself, not the next. A test counts what it counts (loads, log lines, metrics) from where the
front stands when it begins. The files that use them are in two groups of ``SHARED_SERVERS`` (tests/conftest.py),
each run by pytest-xdist in one process (two, so that neither takes long). A test that stops, kills,
reconfigures or exhausts a front starts its own.
"""

from __future__ import annotations

from typing import Any

from tests.conditions import accepted_connections, wait_until
from tests.gateway_support import Gateway

# The keyed front's keys: those of tests/integration/test_gateway_front.py, test_gateway_responses_items.py and
# test_slow_bodies.py (each test uses its own; the wrong keys they send, "nope" and "sk-wrong", are none of these).
KEYS = ("alice", "bob", "alice-key", "bob-key", "sk-slow-bodies-test-key")


def idle(gateway: Gateway) -> dict[str, Any]:
    """Return the front's state if it has no request and no stream open, else nothing (an empty one)."""
    state = gateway.status()
    return state if state["open_requests"] == 0 and state["open_streams"] == 0 else {}


def settled(gateway: Gateway) -> Gateway:
    """Check that a shared front lives and has let go of every request, stream and connection; unload its model."""
    assert gateway.proc.poll() is None, gateway.log_path.read_text()
    state = wait_until(lambda: idle(gateway), "no request or stream open on the shared front")
    if state["model_state"] != "unloaded":
        assert gateway.control("POST", "unload").status == 200
    assert gateway.wait_state("unloaded")["model_state"] == "unloaded"
    wait_until(
        lambda: accepted_connections(gateway.proc.pid, gateway.port) == 0,
        "the shared front holds no client connection",
    )
    return gateway
