"""The wheel works on its own: installed text-only into a fresh venv (and as a uv tool), it runs the demo's steps.

The fresh environments get the locked versions (uv.lock exported as constraints), their files from uv's cache,
which scripts/install fills. They are not installed offline: uv asks the index which files a version has, and a
sync from the lock never reads it, so what an offline install found would depend on what else had used this
cache before. They run from a temporary directory without PYTHONPATH, so nothing of the checkout is on their
path. The text-only venv gets its bytecode compiled, as pip installs packages, so its size is what a pip user gets.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import mlx_agent
from tests.conftest import REPO_ROOT, assert_valid, free_port
from tests.install_support import UV, declared, make_venv, parsed, uv, uv_env

pytestmark = pytest.mark.e2e

TEXT_ONLY_LIMIT_MB = 400  # the bound for a text-only install in a fresh venv
LINUX = sys.platform == "linux"


def constraints(directory: Path, *extras: str) -> Path:
    """Write uv.lock's versions for the project with ``extras`` (and the CPU backend on Linux) as a constraints file."""
    path = directory / f"constraints-{'-'.join(extras) or 'text'}.txt"
    chosen = [*extras, *(["cpu"] if LINUX else [])]
    args = ["export", "--frozen", "--no-hashes", "--no-emit-project", "--quiet", "--output-file", str(path)]
    proc = uv(*args, *(f"--extra={e}" for e in chosen), cwd=REPO_ROOT)
    assert proc.returncode == 0, proc.stderr
    return path


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Build the sdist and the wheel (no network: the venv's hatchling) and return their folder."""
    out = tmp_path_factory.mktemp("dist")
    build = ["build", "--no-build-isolation", "--python", sys.executable, "--offline", "--quiet", "--out-dir"]
    proc = uv(*build, str(out), str(REPO_ROOT), cwd=out)
    assert proc.returncode == 0, proc.stderr
    return out


def wheel_of(dist: Path) -> Path:
    """Return the one wheel in ``dist``."""
    [wheel] = dist.glob("mlx_agent-*.whl")
    return wheel


def size_mb(path: Path) -> int:
    """Return what ``du`` counts under ``path``, in MB."""
    return int(subprocess.run(["du", "-sm", str(path)], capture_output=True, text=True, check=True).stdout.split()[0])


class Installed:
    """An installed ``mlx-agent`` run from its own bin folder, in a temporary directory, with its own home."""

    def __init__(self, bin_dir: Path, work: Path) -> None:
        self.bin_dir, self.work = bin_dir, work
        (work / "home").mkdir(parents=True)
        tools = work / "tools-on-path"  # the uv a remediation names, and nothing else of the checkout's venv
        tools.mkdir()
        (tools / "uv").symlink_to(UV)
        path = os.pathsep.join([str(bin_dir), str(tools), os.environ.get("PATH", "/usr/bin:/bin")])
        self.env = uv_env(PATH=path, MLX_AGENT_HOME=str(work / "home"), HF_HOME=str(work / "hf"))

    def run(self, *args: str, env: dict[str, str] | None = None) -> tuple[int, dict[str, Any]]:
        """Run ``mlx-agent ARGS --json`` as found on PATH; return its exit status and schema-checked envelope."""
        assert shutil.which("mlx-agent", path=self.env["PATH"]) == str(self.bin_dir / "mlx-agent")
        proc = subprocess.run(
            ["mlx-agent", *args, "--json"],
            capture_output=True,
            text=True,
            cwd=self.work,
            env={**self.env, **(env or {})},
            timeout=300,
        )
        doc: dict[str, Any] = json.loads(proc.stdout)
        assert_valid("envelope", doc)
        return proc.returncode, doc

    def python(self, code: str) -> Any:
        """Run ``code`` under the installed interpreter (from the temporary directory) and return its JSON output."""
        python = shutil.which("python", path=str(self.bin_dir))
        assert python is not None
        proc = subprocess.run(
            [python, "-c", code], capture_output=True, text=True, cwd=self.work, env=self.env, timeout=120, check=True
        )
        return json.loads(proc.stdout)


@pytest.fixture(scope="module")
def text_venv(dist: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Installed]]:
    """Return a fresh venv with the wheel installed text-only (and MLX's CPU backend on Linux), and its runner."""
    work = tmp_path_factory.mktemp("text-only")
    python = make_venv(work / "venv")
    wanted = f"mlx-agent[cpu] @ {wheel_of(dist).as_uri()}" if LINUX else str(wheel_of(dist))
    install = ["pip", "install", "--quiet", "--compile-bytecode", "--python", str(python), "-c", str(constraints(work))]
    install.append(wanted)
    proc = uv(*install, cwd=work)
    assert proc.returncode == 0, proc.stderr
    yield work / "venv", Installed(work / "venv" / "bin", work / "run")


def test_the_sdist_and_wheel_carry_the_data_and_the_lock(dist: Path) -> None:
    """The sdist holds the lock, recipes and schemas (no test caches); the wheel holds them inside the package."""
    [sdist] = dist.glob("mlx_agent-*.tar.gz")
    listing = subprocess.run(["tar", "tzf", str(sdist)], capture_output=True, text=True, check=True).stdout
    names = {line.split("/", 1)[1] for line in listing.splitlines() if "/" in line}
    assert {"uv.lock", "pyproject.toml", "recipes/mlx_lm.json", "schemas/serve_plan.json"} <= names
    assert not any(n.startswith(".hypothesis") for n in names)
    import zipfile

    inside = set(zipfile.ZipFile(wheel_of(dist)).namelist())
    assert {"mlx_agent/recipes/mlx-vlm.json", "mlx_agent/schemas/serve_receipt.json"} <= inside


def test_a_text_only_venv_runs_the_demo_steps(text_venv: tuple[Path, Installed], tiny_model: Path) -> None:
    """From the wheel alone: preview, confirm, a chat completion, status and stop, under the 400 MB bound."""
    venv, installed = text_venv
    megabytes = size_mb(venv)
    print(f"\ntext-only venv (wheel + mlx[cpu], locked versions, bytecode compiled): {megabytes} MB")
    assert megabytes <= TEXT_ONLY_LIMIT_MB
    where = installed.python(
        "import importlib.util, json, mlx_agent\n"
        "from mlx_agent.resources import recipes_dir, schemas_dir\n"
        "print(json.dumps([mlx_agent.__file__, str(recipes_dir()), str(schemas_dir()),"
        " [importlib.util.find_spec(m) is None for m in ('mlx_vlm', 'cv2', 'pandas', 'jsonschema')]]))"
    )
    site = str(venv / "lib")
    assert all(str(p).startswith(site) for p in where[:3]) and where[3] == [True, True, True, True]

    port = str(free_port())
    start = ["serve", "start", "--path", str(tiny_model), "--port", port, "--max-tokens", "32"]
    rc, preview = installed.run(*start)
    assert rc == 0, preview
    plan = preview["data"]["plan"]
    assert plan["models"][0]["worker"]["argv"][:3] == [str(venv / "bin" / "python"), "-m", "mlx_agent.runtime"]
    rc, confirmed = installed.run(*start, "--confirm", "--preview-hash", plan["preview_hash"])
    assert rc == 0, confirmed
    try:
        base_url = confirmed["data"]["receipt"]["base_url"]
        body = json.dumps({"messages": [{"role": "user", "content": "Say hello"}], "max_tokens": 8}).encode()
        request = urllib.request.Request(
            f"{base_url}/v1/chat/completions", data=body, headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=120) as response:
            reply = json.load(response)
        assert 0 < reply["usage"]["completion_tokens"] <= 8
        rc, status = installed.run("serve", "status")
        [server] = status["data"]["servers"]
        assert (rc, server["state"], server["health"], server["port"]) == (0, "running", "ok", int(port))
    finally:
        rc, stopped = installed.run("serve", "stop", "--port", port)
    assert (rc, stopped["data"]["result"]) == (0, "stopped")


def test_a_text_only_venv_refuses_mlx_vlm_with_the_command_that_works(
    text_venv: tuple[Path, Installed], tiny_model: Path, tmp_path: Path
) -> None:
    """--runtime mlx-vlm is runtime_not_installed naming uv pip install for this venv; running it makes it plannable."""
    venv, installed = text_venv
    start = ["serve", "start", "--path", str(tiny_model), "--port", str(free_port()), "--runtime", "mlx-vlm"]
    rc, refused = installed.run(*start)
    assert (rc, refused["error"]["code"]) == (1, "runtime_not_installed")
    command = refused["error"]["details"]["install_command"]
    words = shlex.split(command)
    assert words[:5] == ["uv", "pip", "install", "--python", str(venv / "bin" / "python")]
    assert parsed(words[5]) == declared("vlm", "mlx-vlm") and command in refused["error"]["remediation"]
    # The command as given, with the locked versions as uv's constraints (UV_CONSTRAINT changes no word of it).
    locked = {"UV_CONSTRAINT": str(constraints(tmp_path, "vlm"))}
    proc = subprocess.run(command, shell=True, capture_output=True, text=True, env={**installed.env, **locked})
    assert proc.returncode == 0, proc.stderr
    print(f"\nthe same venv with mlx-vlm added: {size_mb(venv)} MB")
    rc, preview = installed.run(*start)
    assert (rc, preview["data"]["plan"]["models"][0]["runtime"]["name"]) == (0, "mlx-vlm"), preview


def test_uv_tool_install_of_the_wheel(dist: Path, tiny_model: Path, tmp_path: Path) -> None:
    """A uv tool install of the wheel gives an mlx-agent that previews, and names uv tool install for mlx-vlm."""
    tool_dir, bin_dir = tmp_path / "tools", tmp_path / "bin"
    dirs = {"UV_TOOL_DIR": str(tool_dir), "UV_TOOL_BIN_DIR": str(bin_dir)}
    with_cpu = ["--with", "mlx[cpu]"] if LINUX else []
    install = ["tool", "install", "--quiet", "--python", sys.executable, "-c", str(constraints(tmp_path))]
    proc = uv(*install, str(wheel_of(dist)), *with_cpu, cwd=tmp_path, env=dirs)
    assert proc.returncode == 0, proc.stderr
    installed = Installed(bin_dir, tmp_path / "run")
    version = subprocess.run(
        [str(bin_dir / "mlx-agent"), "--version"], capture_output=True, text=True, env=installed.env, check=True
    )
    assert mlx_agent.__version__ in version.stdout
    rc, preview = installed.run("serve", "start", "--path", str(tiny_model), "--port", str(free_port()))
    assert rc == 0, preview
    assert preview["data"]["plan"]["models"][0]["worker"]["argv"][0].startswith(str(tool_dir / "mlx-agent"))
    rc, refused = installed.run("serve", "start", "--path", str(tiny_model), "--runtime", "mlx-vlm", env=dirs)
    assert (rc, refused["error"]["code"]) == (1, "runtime_not_installed")
    words = shlex.split(refused["error"]["details"]["install_command"])
    assert words[:4] == ["uv", "tool", "install", str(wheel_of(dist))] and words[-2] == "--with"
    assert parsed(words[-1]) == declared("vlm", "mlx-vlm") and ("mlx[cpu]" in words) == LINUX
