"""The end-to-end tests' shared fixtures: a loopback-only network namespace, and the fronts that tests only read.

A front here is started once per test process (pytest-xdist worker) and shared by every module there that asks
for it, as httpx's tests share their one ``server``: it is waited on by its readiness (``running_gateway`` polls
the front's health), never by a sleep. A test that stops, unloads, reconfigures or kills a server starts its own.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.agents_support import Namespace, loopback_namespace
from tests.conftest import Agent, free_port
from tests.e2e.media_fleet_support import media_front
from tests.e2e.vision_support import ServedVlm, served_vlm, vision_front
from tests.fixtures.tiny_embed import build_tiny_embed
from tests.gateway_support import Gateway, agent_model, real_worker_argv, running_gateway
from tests.media_traps import Traps

# The tiny fronts' reply limit (the random model never ends, so a reply is this long), and the agent front's.
TINY_MAX_TOKENS = 8
AGENT_MAX_TOKENS = 32
# The keyed tiny front's keys: each test that shares it takes keys of its own, so what one key sent is unseen by
# the next test's keys (the front reports cached tokens only for prompts the same key sent).
KEYS = ("alice-key", "bob-key", "carol-key", "dave-key")
# The embedding fleet: the tiny chat model and the tiny embedding model, served by the CLI as a user would.
EMBED_FLEET = """\
[[model]]
name = "chat"
path = "{chat}"
max_tokens = 4

[[model]]
name = "embed"
path = "{embed}"
runtime = "mlx-vlm-embed"
aliases = ["text-embedding-*"]
"""


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


@pytest.fixture(scope="session")
def plain_vlm(tmp_path_factory: pytest.TempPathFactory, tiny_vlm: Path) -> Iterator[ServedVlm]:
    """Serve the tiny Qwen2-VL model by ``serve start --runtime mlx-vlm`` with no option (each default), once."""
    with served_vlm(tmp_path_factory.mktemp("plain-vlm"), tiny_vlm) as served:
        yield served


@pytest.fixture(scope="session")
def embed_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Build the tiny embedding model (it declares Matryoshka dimensions) for the whole session."""
    return build_tiny_embed(tmp_path_factory.mktemp("embed") / "tiny-embed")


@pytest.fixture(scope="session")
def embed_fleet(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path, embed_model: Path) -> Iterator[str]:
    """Preview and confirm the chat and embedding fleet (``EMBED_FLEET``); yield its base URL, stop it afterwards."""
    directory = tmp_path_factory.mktemp("embed-fleet")
    home = directory / "home"
    home.mkdir()
    agent = Agent(home, {**os.environ, "MLX_AGENT_HOME": str(home), "HF_HOME": str(directory / "hf")})
    models = directory / "models.toml"
    models.write_text(EMBED_FLEET.format(chat=tiny_model, embed=embed_model))
    port = free_port()
    receipt = agent.launch("--models", str(models), "--port", str(port))
    kinds = {m["served_model_name"]: (m["runtime"]["name"], m["worker"]["kind"]) for m in receipt["plan"]["models"]}
    assert kinds == {"chat": ("mlx_lm", "text"), "embed": ("mlx-vlm-embed", "embedding")}
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        agent.run("serve", "stop", "--port", str(port))


@pytest.fixture(scope="session")
def media_fleet(
    tmp_path_factory: pytest.TempPathFactory, tiny_tts: Path, tiny_stt: Path, tiny_image: Path
) -> Iterator[Gateway]:
    """Run one front over the real speech, transcription and image workers of the tiny models (loaded on request)."""
    models = {"speech": tiny_tts, "transcription": tiny_stt, "image_generation": tiny_image}
    with media_front(tmp_path_factory.mktemp("media-fleet"), models) as gateway:
        yield gateway


@pytest.fixture(scope="module")
def traps(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Traps]:
    """Yield a loopback listener and a 0600 file of nobody's, watched for the whole module."""
    watched = Traps(tmp_path_factory.mktemp("secret"))
    try:
        yield watched
    finally:
        watched.close()
