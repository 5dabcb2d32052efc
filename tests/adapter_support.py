"""Helpers for the adapter tests: a small adapter written, a bound one changed, and the server's refusal read."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
from safetensors.numpy import save_file

CONFIG = {"fine_tune_type": "lora", "num_layers": 2, "lora_parameters": {"rank": 8, "scale": 20.0, "dropout": 0.0}}


def flip_last_byte(path: Path) -> None:
    """Change one byte of a file, keeping its size."""
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x01
    path.write_bytes(bytes(data))


def restart_refusal(receipt: dict[str, Any], log: Path) -> tuple[int, str]:
    """Run a receipt's reviewed worker argv again, as every load by its front does; return exit code and code.

    The returned code is the one in the entry's ``mlx-agent-error`` line, or "" when there is none.
    """
    worker = receipt["plan"]["models"][0]["worker"]
    argv = [arg.replace("{socket}", str(log.with_suffix(".sock"))) for arg in worker["argv"]]
    with open(log, "wb") as out:
        exit_code = subprocess.run(
            argv, env={**os.environ, **worker["env"]}, stdout=out, stderr=subprocess.STDOUT, timeout=120
        ).returncode
    for line in log.read_text().splitlines():
        if line.startswith("mlx-agent-error "):
            return exit_code, str(json.loads(line.removeprefix("mlx-agent-error "))["code"])
    return exit_code, ""


def make_adapter(
    directory: Path,
    *,
    keys: tuple[str, ...] = ("model.layers.0.self_attn.q_proj.lora_a", "model.layers.0.self_attn.q_proj.lora_b"),
) -> Path:
    """Write a small adapter directory shaped like mlx_lm.lora's output."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "adapter_config.json").write_text(json.dumps(CONFIG))
    save_file({k: np.zeros((2, 2), dtype=np.float32) for k in keys}, str(directory / "adapters.safetensors"))
    return directory
