"""Shared fixtures: a tiny local model, an isolated MLX_AGENT_HOME, free ports, and the CLI as a subprocess."""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import shutil
import subprocess
import sys
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psutil
import pytest
from jsonschema import Draft202012Validator
from referencing import Registry, Resource

from mlx_agent.runtime import transformers_index
from tests import fast_tier
from tests.fixtures.tiny_model import build_tiny_model
from tests.ports import PORT_BLOCK as PORT_BLOCK  # re-exported: the tests import them from here
from tests.ports import free_port as free_port

if TYPE_CHECKING:
    from tests.gateway_support import Gateway  # it imports this module: for the stand-in fronts' fixtures below

# Before any test module imports transformers (tokenizers, chat templates): the test processes read the index
# of its model files that the workers save, instead of each scanning ~3,300 files (nothing above imports it).
transformers_index.install()

REPO_ROOT = Path(__file__).resolve().parent.parent
LAUNCHER = REPO_ROOT / "scripts" / "mlx-agent"
SCHEMAS = REPO_ROOT / "schemas"


def _registry() -> Registry:
    resources = []
    for path in SCHEMAS.glob("*.json"):
        schema = json.loads(path.read_text())
        resources.append((schema["$id"], Resource.from_contents(schema)))
    return Registry().with_resources(resources)


REGISTRY = _registry()


def validator(name: str) -> Draft202012Validator:
    """Return a validator for one of the shipped schemas, with cross-references resolved."""
    schema = json.loads((SCHEMAS / f"{name}.json").read_text())
    return Draft202012Validator(schema, registry=REGISTRY, format_checker=Draft202012Validator.FORMAT_CHECKER)


def assert_valid(name: str, document: Any) -> None:
    """Fail with every schema violation of ``document``."""
    errors = sorted(validator(name).iter_errors(document), key=lambda e: list(e.path))
    assert not errors, "\n".join(f"{list(e.path)}: {e.message}" for e in errors)


@dataclass
class CliResult:
    """One CLI run: exit code, the parsed envelope (under --json), and stderr."""

    rc: int
    doc: dict[str, Any]
    stdout: str
    stderr: str

    @property
    def code(self) -> str | None:
        """Return the error code of a failed run, if any."""
        error = self.doc.get("error")
        return error["code"] if error else None

    @property
    def data(self) -> dict[str, Any]:
        """Return the envelope's data."""
        data: dict[str, Any] = self.doc["data"]
        return data


@dataclass
class Agent:
    """Runs the CLI against one isolated MLX_AGENT_HOME."""

    home: Path
    env: dict[str, str]
    prefix: tuple[str, ...] = ()  # e.g. ("ip", "netns", "exec", NAME): where the CLI and its servers run

    def run(self, *args: str, timeout: float = 180, check_json: bool = True) -> CliResult:
        """Run ``mlx-agent ARGS --json`` from the checkout and validate its single JSON document."""
        argv = [*self.prefix, sys.executable, str(LAUNCHER), *args]
        if check_json:
            argv.append("--json")
        proc = subprocess.run(argv, capture_output=True, text=True, env=self.env, timeout=timeout, cwd=self.home)
        doc: dict[str, Any] = {}
        if check_json:
            doc = json.loads(proc.stdout)  # exactly one document, nothing else on stdout
            assert_valid("envelope", doc)
        return CliResult(proc.returncode, doc, proc.stdout, proc.stderr)

    def popen(self, *args: str) -> subprocess.Popen[str]:
        """Start ``mlx-agent ARGS --json`` without waiting."""
        return subprocess.Popen(
            [*self.prefix, sys.executable, str(LAUNCHER), *args, "--json"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=self.env,
            cwd=self.home,
        )

    def launch(self, *args: str) -> dict[str, Any]:
        """Preview and confirm ``serve start ARGS``; return the schema-checked receipt."""
        preview_hash = self.preview_hash(*args)
        result = self.run("serve", "start", *args, "--confirm", "--preview-hash", preview_hash)
        assert result.rc == 0, result.stdout + result.stderr
        receipt: dict[str, Any] = result.data["receipt"]
        assert_valid("serve_receipt", receipt)
        return receipt

    @property
    def serve_dir(self) -> Path:
        """Return the directory of serve receipts."""
        return self.home / "receipts" / "serve"

    def preview_hash(self, *args: str) -> str:
        """Preview ``serve start ARGS`` and return the plan's hash."""
        result = self.run("serve", "start", *args)
        assert result.rc == 0, result.stdout + result.stderr
        assert_valid("serve_plan", result.data["plan"])
        preview_hash: str = result.data["plan"]["preview_hash"]
        return preview_hash


# The files that take longest, longest first (junit times, 6 workers on 2 cores). pytest-xdist hands out whole
# files (``--dist loadfile``) in collection order (``--no-loadscope-reorder``): a long file handed out last is
# the run's tail, so these go first, then the other end-to-end, integration and unit files in their order.
SLOW_FIRST = (  # by the census's slowest files (scripts/census_tests.py), a shared server's group by its files' sum
    "tests/e2e/test_fuzz_content_parts.py",
    "tests/e2e/test_distributed_entry.py",  # group_references, with test_serve_group.py
    "tests/e2e/test_fuzz_content_kinds.py",  # hostile_front, with test_fuzz_requests.py, test_hostile_requests.py
    "tests/integration/test_long_prefill.py",  # standin_front_2, with test_front_connections.py
    "tests/e2e/test_agent_long_prefill.py",
    "tests/e2e/test_family_agents.py",
    "tests/e2e/test_media_worker_socket.py",  # media_fleet, with test_media_front_real.py
    "tests/e2e/test_wire_agents.py",  # keyed_notes_server, with test_agent_run.py
    "tests/e2e/test_real_agents.py",
    "tests/e2e/test_mcp_agents.py",
    "tests/e2e/test_agent_modes.py",
    "tests/integration/test_gateway_lifecycle.py",  # standin_front, with three more files
    "tests/e2e/test_prompt_cache_disk.py",
    "tests/e2e/test_fleet.py",
    "tests/e2e/test_agent_sessions.py",
    "tests/e2e/test_prompt_cache_damage.py",
    "tests/e2e/test_ring_links.py",
    "tests/e2e/test_prompt_lookup_server.py",  # lookup_launch, with test_readme_fields.py
    "tests/integration/test_pull_cli.py",
    "tests/e2e/test_wheel_install.py",
    "tests/e2e/test_agent_compaction.py",
    "tests/e2e/test_concurrent_serving.py",
    "tests/e2e/test_runtimes.py",
    "tests/e2e/test_serve_top.py",
)
TIERS = ("tests/e2e/", "tests/integration/", "tests/unit/")


def suite_order(nodeid: str) -> tuple[int, int]:
    """Return where a test's file goes in the run: the slow files first, then by tier."""
    path = nodeid.split("::", 1)[0]
    if path in SLOW_FIRST:
        return 0, SLOW_FIRST.index(path)
    return 1, next((i for i, tier in enumerate(TIERS) if path.startswith(tier)), len(TIERS))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Put the slow files first (a stable sort: each file's tests keep their order)."""
    items.sort(key=lambda item: suite_order(item.nodeid))


# The files whose tests share a server started once per test process (a session fixture of tests/e2e/conftest.py),
# by that server. scripts/test hands files to pytest-xdist workers whole (``--dist loadfile``); the scheduler below
# hands each group's files to one worker together, so that the server starts once per run, not once per file.
SHARED_SERVERS: dict[str, tuple[str, ...]] = {
    "tiny_front": (  # and keyed_tiny_front, and stand_in_front: every file that uses them is here
        "tests/e2e/test_gateway_anthropic.py",
        "tests/e2e/test_gateway_responses.py",
        "tests/e2e/test_gateway_real.py",
        "tests/e2e/test_prompt_cache_hits.py",
        "tests/e2e/test_tokenize.py",
    ),
    "vlm_front": ("tests/e2e/test_images.py", "tests/e2e/test_vlm_system_turns.py"),
    "embed_fleet": ("tests/e2e/test_embeddings.py", "tests/e2e/test_ollama_embed.py"),
    "wrapped_tiny": (
        "tests/e2e/test_wrapped_structured.py",
        "tests/e2e/test_wrapped_errors.py",
        "tests/e2e/test_wrapped_cancel.py",
        "tests/e2e/test_concurrent_serving.py",
    ),
    "tiny_socket_worker": ("tests/e2e/test_worker_socket.py", "tests/e2e/test_fuzz_worker_socket.py"),
    # tiny_replies and qwen2_replies: one process per model answers once what its groups must answer alike.
    "group_references": ("tests/e2e/test_distributed_entry.py", "tests/e2e/test_serve_group.py"),
    "hostile_front": (
        "tests/e2e/test_hostile_requests.py",
        "tests/e2e/test_fuzz_requests.py",
        "tests/e2e/test_fuzz_content_kinds.py",
    ),
    "lookup_launch": ("tests/e2e/test_prompt_lookup_server.py", "tests/e2e/test_readme_fields.py"),
    "keyed_notes_server": ("tests/e2e/test_agent_run.py", "tests/e2e/test_wire_agents.py"),
    "plain_vlm": ("tests/e2e/test_vlm_options.py", "tests/e2e/test_vlm_prefix_cache.py"),
    "media_fleet": ("tests/e2e/test_media_worker_socket.py", "tests/e2e/test_media_front_real.py"),
    # The stand-in fronts (standin_front, keyed_standin_front): all six files in one process took 3 min, so two
    # groups, each with its own fronts of the same configurations (the second group uses only the keyless one).
    "standin_front": (
        "tests/integration/test_gateway_front.py",
        "tests/integration/test_gateway_lifecycle.py",
        "tests/integration/test_slow_bodies.py",
        "tests/integration/test_gateway_responses_items.py",
    ),
    "standin_front_2": ("tests/integration/test_front_connections.py", "tests/integration/test_long_prefill.py"),
}


def work_unit(path: str) -> str:
    """Return the unit of work a test file goes to an xdist worker in: its shared server's group, or itself."""
    return next((server for server, files in SHARED_SERVERS.items() if path in files), path)


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook: absent under -p no:xdist
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Under ``--dist loadfile``, hand out the files of one shared server together (``SHARED_SERVERS``)."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling  # type: ignore[import-untyped]  # xdist ships no types

    class SharedServerScheduling(LoadFileScheduling):  # type: ignore[misc]  # so its classes are Any
        """pytest-xdist's loadfile, with the files that share a server in one unit of work."""

        def _split_scope(self, nodeid: str) -> str:
            return work_unit(super()._split_scope(nodeid))

    return SharedServerScheduling(config, log)


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Under ``-m fast``, skip the test files without a fast test unread, so that their imports (mlx) cost nothing."""
    if config.option.markexpr != fast_tier.MARK or collection_path.suffix != ".py":
        return None
    return True if collection_path.name.startswith("test_") and not fast_tier.declares_fast(collection_path) else None


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(
    collector: pytest.Collector,
) -> Generator[None, pytest.CollectReport, pytest.CollectReport]:
    """Fail the collection of a module with fast tests that imports mlx (seen when it is first to, as under -m fast)."""
    before = any(map(fast_tier.is_runtime, sys.modules))
    report: pytest.CollectReport = yield
    if isinstance(collector, pytest.Module) and report.passed and not before:
        imported = sorted(name for name in sys.modules if fast_tier.is_runtime(name))[:1]
        if imported and fast_tier.holds_fast_tests(report.result):
            report.outcome = "failed"
            report.longrepr = f"fast tier: {collector.path} imports {imported[0]} (drop its fast mark, or make it pure)"
    return report


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, None, None]:
    """Hold a fast test's fixtures to the fast tier's rules (tests/fast_tier.py)."""
    with fast_tier.guarded(item.nodeid) if fast_tier.is_fast(item) else contextlib.nullcontext():
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    """Hold a fast test to the fast tier's rules: no process, no socket, no mlx (tests/fast_tier.py)."""
    with fast_tier.guarded(item.nodeid) if fast_tier.is_fast(item) else contextlib.nullcontext():
        return (yield)


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Build one tiny random-weight llama model for the whole session."""
    return build_tiny_model(tmp_path_factory.mktemp("models") / "tiny-llama")


@pytest.fixture(scope="session")
def tiny_draft(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Build one one-layer tiny model with the tiny model's tokenizer, to draft for it, for the whole session."""
    return build_tiny_model(tmp_path_factory.mktemp("draft") / "tiny-draft", seed=7, num_layers=1)


@pytest.fixture(scope="session")
def tiny_vlm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Build one tiny random-weight Qwen2-VL model for the whole session."""
    from tests.fixtures.tiny_vlm import build_tiny_vlm  # builds with mlx_vlm's classes: only the tests that ask

    return build_tiny_vlm(tmp_path_factory.mktemp("vlm") / "tiny-qwen2-vl")


@pytest.fixture(scope="session")
def tiny_vlm_adapter(tiny_vlm: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Build one mlx-vlm LoRA adapter of the tiny Qwen2-VL model (mlx_vlm's own LoRA code) for the whole session."""
    from tests.fixtures.tiny_vlm_adapter import build_tiny_vlm_adapter

    return build_tiny_vlm_adapter(tiny_vlm, tmp_path_factory.mktemp("vlm-adapter") / "adapter")


@pytest.fixture(scope="session")
def tiny_tts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Build one tiny random-weight Soprano speech synthesiser for the whole session."""
    from tests.fixtures.tiny_tts import build_tiny_tts  # builds with mlx-audio's classes: only the tests that ask

    return build_tiny_tts(tmp_path_factory.mktemp("tts") / "tiny-voice")


@pytest.fixture(scope="session")
def tiny_stt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Build one tiny random-weight Parakeet-CTC speech recogniser for the whole session."""
    from tests.fixtures.tiny_stt import build_tiny_stt  # builds with mlx-audio's classes: only the tests that ask

    return build_tiny_stt(tmp_path_factory.mktemp("stt") / "tiny-ears")


@pytest.fixture(scope="session")
def tiny_image(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Build one tiny random-weight ERNIE-Image pipeline (~160 MB: mlx-vlm fixes its VAE) for the whole session."""
    from tests.fixtures.tiny_image import build_tiny_image  # builds with mlx-vlm's classes: only the tests that ask

    return build_tiny_image(tmp_path_factory.mktemp("image") / "tiny-picture")


# Each pytest-xdist worker acts through its own second user (gw0 -> mlxattacker0; a serial run: mlxattacker).
ATTACKER = "mlxattacker" + os.environ.get("PYTEST_XDIST_WORKER", "").removeprefix("gw")


@pytest.fixture(scope="module")
def attacker() -> Iterator[pwd.struct_passwd]:
    """Return an unprivileged second user, created for the tests (root only)."""
    if os.geteuid() != 0:
        pytest.skip("needs root to create a second user (CI runs as root)")
    if shutil.which("useradd") is None or shutil.which("setpriv") is None:
        pytest.skip("needs useradd and setpriv to act as a second user")
    try:
        pwd.getpwnam(ATTACKER)
    except KeyError:
        made = subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", ATTACKER], check=False)
        assert made.returncode in (0, 9), f"useradd {ATTACKER} failed with {made.returncode}"  # 9: made meanwhile
    yield pwd.getpwnam(ATTACKER)


@pytest.fixture
def model_copy(tiny_model: Path, tmp_path: Path) -> Path:
    """Return a private copy of the tiny model that a test may change."""
    import shutil

    dest = tmp_path / "model"
    shutil.copytree(tiny_model, dest)
    return dest


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[Agent]:
    """Return a CLI runner with its own MLX_AGENT_HOME and HF cache; stop anything it left running."""
    home = tmp_path / "home"
    home.mkdir()
    env = {**os.environ, "MLX_AGENT_HOME": str(home), "HF_HOME": str(tmp_path / "hf")}
    env.pop("HF_HUB_CACHE", None)
    env.pop("HUGGINGFACE_HUB_CACHE", None)
    runner = Agent(home, env)
    yield runner
    serve_dir = runner.serve_dir
    answers = [
        runner.run("serve", "stop", "--port", receipt.stem)
        for receipt in (serve_dir.glob("*.json") if serve_dir.is_dir() else [])
        if receipt.stem.isdigit()  # beside each receipt lie the front's config, policy and hosts files
    ]
    left = processes_mentioning(str(home))  # what the test launched there
    for process in left:
        with contextlib.suppress(psutil.Error):
            process.kill()
    if left:
        said = "\n".join(answer.stdout + answer.stderr for answer in answers)
        pytest.fail(f"still running after the test and its stops: {[p.pid for p in left]}\n{said}")


def processes_mentioning(marker: str) -> list[psutil.Process]:
    """Return the live processes (not zombies) whose command line mentions ``marker`` (test-side orphan checks)."""
    return [
        proc
        for proc in psutil.process_iter(["cmdline", "status"])
        if proc.info["status"] != psutil.STATUS_ZOMBIE and marker in " ".join(proc.info["cmdline"] or [])
    ]


FAKE_SERVER = """
import argparse, http.server, json, sys
p = argparse.ArgumentParser()
p.add_argument("--model"); p.add_argument("--host"); p.add_argument("--port", type=int)
p.add_argument("--max-tokens")
a = p.parse_args()
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps({"status": "ok"}).encode()
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        body = json.dumps({"choices": [{"message": {"role": "assistant", "content": "ok"}}]}).encode()
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
print("fake server listening", flush=True)
http.server.HTTPServer((a.host, a.port), H).serve_forever()
"""


def fake_runtime(directory: Path, body: str, name: str = "mlx_lm.server") -> Path:
    """Write an executable stand-in for a runtime, run by this interpreter (whose env has mlx-lm).

    It stands in where a test needs a server that fails, hangs or answers instantly; the real
    mlx_lm.server is exercised by the e2e tests.
    """
    exe = directory / name
    exe.write_text(f"#!{sys.executable}\n{body}\n")
    exe.chmod(0o755)
    return exe


# The fronts over the stand-in worker that tests only read (tests/standin_fronts.py): one per configuration and
# test process, the files that use them in SHARED_SERVERS["standin_front"] and ["standin_front_2"].
@pytest.fixture(scope="session")
def standin_front(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    """Run one front over the stand-in worker (the default config) for the read-only tests of the test process."""
    from tests.gateway_support import running_gateway  # it imports this module

    with running_gateway(tmp_path_factory.mktemp("standin-front")) as gateway:
        yield gateway


@pytest.fixture(scope="session")
def keyed_standin_front(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    """Run one front with the API keys ``tests.standin_fronts.KEYS`` over the stand-in worker, for the process."""
    from tests.gateway_support import running_gateway
    from tests.standin_fronts import KEYS

    with running_gateway(tmp_path_factory.mktemp("keyed-standin-front"), api_keys=list(KEYS)) as gateway:
        yield gateway


@pytest.fixture
def standin(standin_front: Gateway) -> Iterator[Gateway]:
    """Return the shared stand-in front settled, its model unloaded; after the test, check that it settles again."""
    from tests.standin_fronts import settled

    yield settled(standin_front)
    settled(standin_front)  # the test let go of all it opened: the front recovered before the next


@pytest.fixture
def keyed_standin(keyed_standin_front: Gateway) -> Iterator[Gateway]:
    """Return the shared keyed stand-in front settled, its model unloaded; after the test, check that it settles."""
    from tests.standin_fronts import settled

    yield settled(keyed_standin_front)
    settled(keyed_standin_front)  # the test let go of all it opened: the front recovered before the next
