"""A real LoRA adapter (trained here by mlx_lm.lora on the tiny model) served, rechecked and refused."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import openai
import pytest

from tests.adapter_support import flip_last_byte, restart_refusal
from tests.conftest import Agent, free_port

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def trained_adapter(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Train a LoRA for a few iterations with mlx_lm.lora and return its adapter directory."""
    root = tmp_path_factory.mktemp("lora")
    data = root / "data"
    data.mkdir()
    for split, count in (("train", 16), ("valid", 4)):
        lines = [json.dumps({"text": f"Question {i}: the answer is {i * 3}."}) for i in range(count)]
        (data / f"{split}.jsonl").write_text("\n".join(lines) + "\n")
    adapter = root / "adapter"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "mlx_lm",
            "lora",
            "--model",
            str(tiny_model),
            "--train",
            "--data",
            str(data),
            "--iters",
            "3",
            "--batch-size",
            "2",
            "--num-layers",
            "2",
            "--adapter-path",
            str(adapter),
            "--val-batches",
            "1",
            "--steps-per-eval",
            "100",
        ],
        check=True,
        capture_output=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    return adapter


def test_serve_with_adapter_then_refuse_a_changed_one(
    agent: Agent, tiny_model: Path, trained_adapter: Path, tmp_path: Path
) -> None:
    """Serve a bound adapter; after one changed byte confirm says adapter_changed and a restart refuses to load."""
    adapter = tmp_path / "adapter"
    shutil.copytree(trained_adapter, adapter)
    port = free_port()
    args = ["--path", str(tiny_model), "--port", str(port), "--adapter-path", str(adapter)]
    preview_hash = agent.preview_hash(*args)
    started = agent.run("serve", "start", *args, "--confirm", "--preview-hash", preview_hash)
    assert started.rc == 0, started.stdout
    receipt = started.data["receipt"]
    served = receipt["models"][0]
    assert served["adapter"]["path"] == str(adapter) and served["model"] == str(tiny_model)
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="local")
    reply = client.chat.completions.create(
        model="default_model", max_tokens=4, messages=[{"role": "user", "content": "Question 2"}]
    )
    assert reply.choices[0].message.content is not None
    server = agent.run("serve", "status").data["servers"][0]
    assert (server["adapter_path"], server["adapter_status"]) == (str(adapter), "bound")
    assert agent.run("serve", "status", "--verify").data["servers"][0]["adapter_status"] == "verified"
    assert agent.run("serve", "stop", "--port", str(port)).rc == 0

    # One changed byte: the reviewed plan no longer holds, and confirm names the adapter.
    preview_hash = agent.preview_hash(*args)
    flip_last_byte(adapter / "adapters.safetensors")
    refused = agent.run("serve", "start", *args, "--confirm", "--preview-hash", preview_hash)
    assert (refused.rc, refused.code) == (1, "adapter_changed")
    fields = [c["field"] for c in refused.doc["error"]["details"]["changes"]]
    assert f"models[{tiny_model.name}].adapter.files[adapters.safetensors].sha256" in fields
    assert agent.run("serve", "status").data["servers"] == []

    # A new load of the reviewed worker argv (what every front load does) refuses inside the worker.
    assert restart_refusal(receipt, tmp_path / "restart.log") == (3, "adapter_changed")
