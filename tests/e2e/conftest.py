"""The end-to-end tests' shared fixtures: a loopback-only network namespace, and the fronts that tests only read.

A front here is started once per test process (pytest-xdist worker) and shared by every module there that asks
for it, as httpx's tests share their one ``server``: it is waited on by its readiness (``running_gateway`` polls
the front's health), never by a sleep. A test that stops, unloads, reconfigures or kills a server starts its own.
``trainer_agent`` is the lora tests' CLI runner: afterwards it stops any watcher (and trainer) a test left running.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mlx_agent.supervise import process
from tests.agent_servers import NotesServer, notes_server
from tests.agents_support import Namespace, loopback_namespace
from tests.conftest import Agent, free_port
from tests.e2e.cli_launch import Launched, launched
from tests.e2e.front_support import Front, running_front
from tests.e2e.fuzz_support import REPLY_LIMITS
from tests.e2e.group_references import one_process_replies
from tests.e2e.media_fleet_support import media_front
from tests.e2e.shared_workers import wrapped_tiny_server
from tests.e2e.vision_support import ServedVlm, served_vlm, vision_front
from tests.e2e.worker_socket_support import SHORT_DEADLINES, SocketWorker, socket_worker
from tests.e2e.wrapped_support import Server
from tests.fixtures.tiny_embed import build_tiny_embed
from tests.fixtures.tiny_model import build_tiny_model
from tests.gateway_support import Gateway, agent_model, real_worker_argv, running_gateway, stand_in_gateway
from tests.media_traps import Traps

# The tiny fronts' reply limit (the random model never ends, so a reply is this long), and the agent front's.
TINY_MAX_TOKENS = 8
AGENT_MAX_TOKENS = 32
# The keyed tiny front's keys: each test that shares it takes keys of its own, so what one key sent is unseen by
# the next test's keys (the front reports cached tokens only for prompts the same key sent).
KEYS = ("alice-key", "bob-key", "carol-key", "dave-key", "erin-key", "frank-key")
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


@pytest.fixture(scope="session")
def wrapped_tiny(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """Serve the tiny model (its template refuses unknown roles) through the wrapped entry, for the files that read."""
    with wrapped_tiny_server(tmp_path_factory.mktemp("wrapped-tiny")) as server:
        yield server


@pytest.fixture(scope="session")
def tiny_socket_worker(tiny_model: Path) -> Iterator[SocketWorker]:
    """Start one wrapped worker of the tiny model on its Unix socket, as a front does: short deadlines, 256 tokens."""
    with socket_worker(tiny_model, SHORT_DEADLINES) as started:
        yield started


@pytest.fixture(scope="session")
def tiny_qwen2(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Build one tiny qwen2 (it has ``model.model.pipeline``) with its weight index for the whole session."""
    path = build_tiny_model(tmp_path_factory.mktemp("qwen2") / "tiny-qwen2", model_type="qwen2")
    assert (path / "model.safetensors.index.json").is_file()  # a pipeline picks each rank's files from it
    return path


@pytest.fixture(scope="session")
def tiny_replies(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path) -> list[str]:
    """Return the tiny llama's greedy replies in one process, that its groups must give (tests/e2e/group_references)."""
    return one_process_replies(tiny_model, tmp_path_factory.mktemp("tiny-one-process"))


@pytest.fixture(scope="session")
def qwen2_replies(tmp_path_factory: pytest.TempPathFactory, tiny_qwen2: Path) -> list[str]:
    """Return the tiny qwen2's greedy replies in one process, that its pipeline groups must give."""
    return one_process_replies(tiny_qwen2, tmp_path_factory.mktemp("qwen2-one-process"))


@pytest.fixture(scope="session")
def hostile_front(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path) -> Iterator[Front]:
    """Run one eager front on the tiny model (``tiny``, fuzz_support's REPLY_LIMITS) for the hostile-request files.

    Apart from the well-behaved readers' fronts: each case checks that a normal request is answered after it, and
    each file ends by asserting its worker is still the first one (nothing crashed or restarted it).
    """
    with running_front(tiny_model, tmp_path_factory.mktemp("hostile-home"), *REPLY_LIMITS) as started:
        yield started


@pytest.fixture(scope="session")
def stand_in_front(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    """Run one front without keys over the chat stand-in worker (tests.gateway_support), for the tests that only read.

    Without keys, the cached tokens the stand-in reports reach every client (a keyed front shows each key only what
    it sent itself).
    """
    with stand_in_gateway(tmp_path_factory.mktemp("stand-in")) as gateway:
        yield gateway


@pytest.fixture(scope="session")
def lookup_launch(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path) -> Iterator[Launched]:
    """Preview and confirm the tiny model with both accelerations (--prompt-lookup --m5-prefill) through the CLI."""
    with launched(
        tmp_path_factory.mktemp("lookup-launch"), "--path", str(tiny_model), "--prompt-lookup", "--m5-prefill"
    ) as server:
        yield server


@pytest.fixture(scope="session")
def keyed_notes_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NotesServer]:
    """Serve the keyed scripted model over two notes for the agent tests that only run agents against it."""
    with notes_server(tmp_path_factory.mktemp("keyed-notes")) as served:
        yield served


@pytest.fixture
def trainer_agent(agent: Agent) -> Iterator[Agent]:
    """Return the CLI runner; afterwards stop any watcher (and its trainer) a test left running."""
    yield agent
    for path in (agent.home / "receipts" / "train").glob("*.json"):
        receipt = json.loads(path.read_text())
        for role in ("watcher", "trainer"):
            record = receipt.get(role)
            if record and record.get("create_time") is not None and process.classify(record) == "running":
                process.stop_group(record["pid"], record["pgid"], grace=5.0)
