"""The main job on a built-in default: a tiny local model, previewed, confirmed, asked, inspected, stopped.

Run through ``bash scripts/demo``. State goes to ``.cache/demo-home`` (MLX_AGENT_HOME) so the demo leaves
the user's own receipts alone; the model is built once into ``.cache/tiny-model``.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

from mlx_agent.supervise.ports import free_port

ROOT = Path(__file__).resolve().parent.parent
CLI = [sys.executable, str(ROOT / "scripts" / "mlx-agent")]


def step(title: str) -> None:
    print(f"\n== {title}", flush=True)


def agent(*args: str) -> dict[str, Any]:
    """Run one mlx-agent command with --json, echo it, and return its envelope (exit on an error)."""
    argv = [*CLI, *args, "--json"]
    print("$ mlx-agent " + shlex.join([*args, "--json"]), flush=True)
    proc = subprocess.run(argv, capture_output=True, text=True)
    doc: dict[str, Any] = json.loads(proc.stdout)
    if doc["status"] != "ok":
        print(json.dumps(doc["error"], indent=2), file=sys.stderr)
        raise SystemExit(proc.returncode)
    return doc


def main() -> int:
    os.environ.setdefault("MLX_AGENT_HOME", str(ROOT / ".cache" / "demo-home"))
    model = ROOT / ".cache" / "tiny-model"
    port = free_port()

    step(f"build a tiny random-weight model in {model}")
    subprocess.run([sys.executable, str(ROOT / "tests" / "fixtures" / "tiny_model.py"), str(model)], check=True)

    step("preview: the plan is printed and nothing starts")
    start = ["serve", "start", "--path", str(model), "--port", str(port), "--max-tokens", "32"]
    plan = agent(*start)["data"]["plan"]
    source = plan["models"][0]["source"]
    print(f"  model {source['path']} ({len(source['files'])} files bound)")
    print(f"  argv  {shlex.join(plan['argv'])}")
    print(f"  preview_hash {plan['preview_hash']}")

    step("confirm: the same command with --confirm --preview-hash")
    receipt = agent(*start, "--confirm", "--preview-hash", plan["preview_hash"])["data"]["receipt"]
    print(f"  ready at {receipt['base_url']}, pid {receipt['pid']}, log {receipt['log_path']}")
    try:
        step("a chat completion")
        body = json.dumps({"messages": [{"role": "user", "content": "Say hello"}], "max_tokens": 12}).encode()
        request = urllib.request.Request(
            f"{receipt['base_url']}/v1/chat/completions", data=body, headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=60) as response:
            reply = json.load(response)
        print(
            f"  reply ({reply['usage']['completion_tokens']} tokens, random weights): "
            f"{reply['choices'][0]['message']['content']!r}"
        )

        step("status: the receipt checked against the live process")
        for server in agent("serve", "status")["data"]["servers"]:
            print(f"  port {server['port']}: {server['state']}, health {server['health']}, pid {server['pid']}")
    finally:
        step("stop")
        result = agent("serve", "stop", "--port", str(port))["data"]
        print(f"  {result['result']} pid {result['pid']}")
    print("\ndemo finished: preview, confirm, chat, status and stop all succeeded")
    return 0


if __name__ == "__main__":
    sys.exit(main())
