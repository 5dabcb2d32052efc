"""The end-to-end tests' shared fixtures: a loopback-only network namespace, and the fronts that tests only read.

A front here is started once per test process (pytest-xdist worker) and shared by every module there that asks
for it, as httpx's tests share their one ``server``: it is waited on by its readiness (``running_gateway`` polls
the front's health), never by a sleep. A test that stops, unloads, reconfigures or kills a server starts its own.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.agents_support import Namespace, loopback_namespace
from tests.e2e.vision_support import vision_front
from tests.gateway_support import Gateway, agent_model, real_worker_argv, running_gateway

# The shared tiny front's reply ceiling: the random model never ends, so every reply is exactly this long.
TINY_MAX_TOKENS = 8
AGENT_MAX_TOKENS = 32
# The keyed tiny front's keys: each test that shares it takes keys of its own, so what one key sent is unseen by
# the next test's keys (the front reports cached tokens only for prompts the same key sent).
KEYS = ("alice-key", "bob-key", "carol-key", "dave-key")


@pytest.fixture
def namespace() -> Iterator[Namespace]:
    """Make a network namespace with only loopback, for one test."""
    with loopback_namespace() as made:
        yield made


@pytest.fixture(scope="session")
def tiny_front(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path) -> Iterator[Gateway]:
    """Run one front over the real runtime serving the tiny random-weight model (replies cut at 8 tokens)."""
    with running_gateway(
        tmp_path_factory.mktemp("tiny"),
        real_worker_argv(tiny_model, TINY_MAX_TOKENS),
        model_path=tiny_model,
        max_tokens=TINY_MAX_TOKENS,
        max_tokens_ceiling=TINY_MAX_TOKENS,
    ) as gateway:
        yield gateway


@pytest.fixture(scope="session")
def keyed_tiny_front(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path) -> Iterator[Gateway]:
    """Run one front with the API keys ``KEYS`` over the real runtime serving the tiny model (replies cut at 8)."""
    with running_gateway(
        tmp_path_factory.mktemp("keyed-tiny"),
        real_worker_argv(tiny_model, TINY_MAX_TOKENS),
        model_path=tiny_model,
        max_tokens=TINY_MAX_TOKENS,
        api_keys=list(KEYS),
    ) as gateway:
        yield gateway


@pytest.fixture(scope="session")
def agent_front(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    """Run one front over the real runtime serving the scripted agent model (tests.gateway_support.agent_model)."""
    directory = tmp_path_factory.mktemp("agent")
    model = agent_model(directory / "model")
    with running_gateway(
        directory, real_worker_argv(model, AGENT_MAX_TOKENS), model_path=model, max_tokens=AGENT_MAX_TOKENS
    ) as gateway:
        yield gateway


@pytest.fixture(scope="session")
def vlm_front(tmp_path_factory: pytest.TempPathFactory, tiny_vlm: Path) -> Iterator[Gateway]:
    """Run one front over the wrapped mlx-vlm worker on the tiny Qwen2-VL model (its prefix cache off, as default)."""
    with vision_front(tmp_path_factory.mktemp("vlm-front"), tiny_vlm) as gateway:
        yield gateway
