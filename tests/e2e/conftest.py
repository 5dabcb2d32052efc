"""The end-to-end tests' shared fixtures: a loopback-only network namespace, and the fronts that tests only read.

A front here is started once per test process (pytest-xdist worker) and shared by every module there that asks
for it, as httpx's tests share their one ``server``: it is waited on by its readiness (``running_gateway`` polls
the front's health), never by a sleep. A test that stops, unloads, reconfigures or kills a server starts its own.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.agents_support import Namespace, loopback_namespace
from tests.e2e.vision_support import vision_front
from tests.gateway_support import Gateway, agent_model, real_worker_argv, running_gateway

# The tiny fronts' reply limit (the random model never ends, so a reply is this long), and the agent front's.
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


def tiny_gateway(directory: Path, tiny_model: Path, **options: Any) -> contextlib.AbstractContextManager[Gateway]:
    """Return what runs a front over the real runtime serving the tiny random-weight model (replies cut at 8)."""
    argv = real_worker_argv(tiny_model, TINY_MAX_TOKENS)
    return running_gateway(directory, argv, model_path=tiny_model, max_tokens=TINY_MAX_TOKENS, **options)


@pytest.fixture(scope="session")
def tiny_front(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path) -> Iterator[Gateway]:
    """Run one front over the real runtime serving the tiny model, its replies held to 8 tokens whatever is asked."""
    with tiny_gateway(tmp_path_factory.mktemp("tiny"), tiny_model, max_tokens_ceiling=TINY_MAX_TOKENS) as gateway:
        yield gateway


@pytest.fixture(scope="session")
def keyed_tiny_front(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path) -> Iterator[Gateway]:
    """Run one front with the API keys ``KEYS`` over the real runtime serving the tiny model."""
    with tiny_gateway(tmp_path_factory.mktemp("keyed-tiny"), tiny_model, api_keys=list(KEYS)) as gateway:
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
