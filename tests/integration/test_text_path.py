"""Text serving needs no vision stack: with mlx_vlm, opencv and pandas hidden, the text path runs and never tries them.

The hidden packages are shadow modules first on PYTHONPATH that log every import of them and then fail as an
absent package does, so an optional ``try: import pandas`` is caught too.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT, Agent, free_port

HIDDEN = ("mlx_vlm", "cv2", "pandas", "pyarrow", "scipy", "mlx_audio")  # what mlx-vlm brings
# Every module of the package except the mlx-vlm server and the __main__ modules (which run on import), then the
# runtime entry for mlx_lm as far as its argument parsing (it imports mlx_lm.server and the wrapper on the way).
IMPORT_TEXT_PATH = """
import atexit, importlib, json, pkgutil, sys
import mlx_agent
names = [m.name for m in pkgutil.walk_packages(mlx_agent.__path__, "mlx_agent.")]
for name in names:
    if not name.endswith("__main__") and "vlm" not in name:
        importlib.import_module(name)
hidden = set(sys.argv[1].split(","))
atexit.register(lambda: print(json.dumps(sorted({m.split(".")[0] for m in sys.modules} & hidden))))
from mlx_agent.runtime.entry import main
from tests.contract_support import contract
sys.exit(main(["mlx_lm", "--help", *contract()]))
"""


@pytest.fixture
def shadow(tmp_path: Path) -> Path:
    """Return a directory of modules that stand for the hidden packages: each logs its import and fails."""
    directory = tmp_path / "shadow"
    directory.mkdir()
    for name in HIDDEN:
        (directory / f"{name}.py").write_text(
            f"open({str(directory / 'imported.log')!r}, 'a').write(__name__ + '\\n')\n"
            "raise ModuleNotFoundError(f'No module named {__name__!r}', name=__name__)\n"
        )
    return directory


def imported(shadow: Path) -> list[str]:
    """Return the hidden packages something tried to import, in order."""
    log = shadow / "imported.log"
    return log.read_text().split() if log.exists() else []


def test_the_text_path_imports_none_of_the_vision_stack(shadow: Path) -> None:
    """Every text-path module and the mlx_lm entry import with the vision stack hidden, and never try to import it."""
    for pythonpath in (str(shadow), None):  # hidden, then installed (sys.modules must still hold none of it)
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        if pythonpath is not None:
            env["PYTHONPATH"] = pythonpath
        proc = subprocess.run(
            [sys.executable, "-c", IMPORT_TEXT_PATH, ",".join(HIDDEN)],
            capture_output=True,
            text=True,
            cwd=REPO_ROOT,
            env=env,
            timeout=300,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert "--max-tokens" in proc.stdout  # mlx_lm.server's own help: the entry got as far as mlx_lm
        assert json.loads(proc.stdout.strip().splitlines()[-1]) == []
    assert imported(shadow) == []


def test_previews_without_mlx_vlm(agent: Agent, model_copy: Path, shadow: Path) -> None:
    """A text preview works without mlx_vlm; --runtime mlx-vlm and a vision config are runtime_not_installed."""
    agent.env["PYTHONPATH"] = str(shadow)
    port = str(free_port())
    text = agent.run("serve", "start", "--path", str(model_copy), "--port", port)
    assert (text.rc, text.doc["status"]) == (0, "ok"), text.stdout + text.stderr
    assert text.data["plan"]["models"][0]["runtime"]["name"] == "mlx_lm"
    refused = agent.run("serve", "start", "--path", str(model_copy), "--port", port, "--runtime", "mlx-vlm")
    assert (refused.rc, refused.code) == (1, "runtime_not_installed")
    error = refused.doc["error"]
    command = error["details"]["install_command"]
    assert command in error["remediation"] and sys.executable in error["message"]
    if Path(sys.prefix) == REPO_ROOT / ".venv":  # the checkout's own environment is scripts/install's
        assert command == f"bash {REPO_ROOT / 'scripts' / 'install'}"
    config = json.loads((model_copy / "config.json").read_text())
    (model_copy / "config.json").write_text(json.dumps({**config, "vision_config": {"depth": 1}}))
    auto = agent.run("serve", "start", "--path", str(model_copy), "--port", port, "--runtime", "auto")
    assert (auto.rc, auto.code) == (1, "runtime_not_installed")
    assert "vision_config" in auto.doc["error"]["message"]
    assert imported(shadow) == []
