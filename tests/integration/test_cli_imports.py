"""What the agents' quick ``--json`` commands import: ``serve status`` stays near a bare interpreter's start-up.

Import lists are the deterministic side of ``scripts/bench_cli_startup.py`` (which times the same command against
``python -c "import json, os"``): each module named here cost ``serve status`` a measurable share of its time
when something on its path imported it.
"""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import REPO_ROOT, Agent

# Heavy for a command that reads receipts and prints JSON: dataclasses brings inspect, ast and dis (a fifth of
# status's start-up before disk.py dropped it), typing a sixth; psutil is only for a live pid; threading,
# hashlib, subprocess and socket belong to commands that start, hash or probe something.
HEAVY = {
    "dataclasses",
    "inspect",
    "typing",
    "psutil",
    "threading",
    "hashlib",
    "subprocess",
    "socket",
    "signal",
    "click",
    "rich",
    "pydantic",
    "jsonschema",
    "mlx",
    "mlx_lm",
    "transformers",
}
# Run the CLI's entry as the installed command does, and report what was imported once it has answered.
PROBE = """
import atexit, json, sys
atexit.register(lambda: print(json.dumps(sorted(sys.modules)), file=sys.stderr))
sys.argv = ["mlx-agent", *sys.argv[1:]]
from mlx_agent.cli import main
main()
"""


def exited_receipt(port: int, agent: Agent) -> dict[str, object]:
    """Return a receipt (the fields status reads) of a process that has already exited."""
    ended = subprocess.Popen(["true"])
    ended.wait()
    return {
        "format_version": "1.0",
        "kind": "serve",
        "port": port,
        "pid": ended.pid,
        "pgid": ended.pid,
        "create_time": 1.0,
        "argv": [sys.executable, "-m", "mlx_agent.runtime", "mlx_lm", "--port", str(port)],
        "host": "127.0.0.1",
        "base_url": f"http://127.0.0.1:{port}",
        "runtime": "mlx_lm",
        "model": str(agent.home / "model"),
        "log_path": str(agent.serve_dir / f"{port}.log"),
        "started_at": "2026-01-01T00:00:00.000+00:00",
        "preview_hash": "0" * 64,
    }


def run_python(agent: Agent, code: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run ``python -c code args`` from this checkout in ``agent``'s home; return it, finished and successful."""
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        env={**agent.env, "PYTHONPATH": str(REPO_ROOT)},
        cwd=agent.home,
        timeout=60,
        check=True,
    )


def test_serve_status_imports_nothing_heavy(agent: Agent) -> None:
    """``serve status --json`` over receipts of exited servers answers without any of the heavy modules."""
    agent.serve_dir.mkdir(parents=True)
    for port in (20001, 20002, 20003):
        path = agent.serve_dir / f"{port}.json"
        path.write_text(json.dumps(exited_receipt(port, agent)))
        path.chmod(0o600)
    done = run_python(agent, PROBE, "serve", "status", "--json")
    entries = json.loads(done.stdout)["data"]["servers"]
    assert [entry["state"] for entry in entries] == ["exited"] * 3
    imported = set(json.loads(done.stderr.splitlines()[-1]))
    assert {name for name in imported if name.split(".")[0] in HEAVY} == set()


def test_main_called_with_arguments_returns_to_its_caller(agent: Agent) -> None:
    """``main(argv)`` from Python answers a fast-path command and returns; only the command itself exits at once."""
    caller = "from mlx_agent.cli import main\nmain(['serve', 'status', '--json'])\nprint('returned')\n"
    done = run_python(agent, caller)
    answer, returned = done.stdout.removesuffix("\n").rsplit("\n", 1)
    assert json.loads(answer)["status"] == "ok" and returned == "returned"
