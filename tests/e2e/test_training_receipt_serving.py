"""`serve start --training-receipt`: a real `lora train` receipt selects base and adapter, and guards both."""

from __future__ import annotations

from pathlib import Path

import openai
import pytest

from tests.adapter_support import flip_last_byte, restart_refusal
from tests.conftest import Agent, assert_valid, free_port
from tests.fixtures.tiny_dataset import write_dataset
from tests.lora_support import settled, start, train_args

pytestmark = pytest.mark.e2e


def test_train_then_serve_the_receipt(trainer_agent: Agent, model_copy: Path, tmp_path: Path) -> None:
    """Train, serve the receipt, chat; one changed adapter byte: confirm says adapter_changed, a restart refuses."""
    adapter = tmp_path / "adapter"
    trained = start(trainer_agent, train_args(model_copy, write_dataset(tmp_path / "data"), adapter))
    receipt_path = trained["receipt_path"]
    settled(trainer_agent, receipt_path, "completed")

    port = free_port()
    args = ["--training-receipt", receipt_path, "--runtime", "auto", "--port", str(port)]
    preview = trainer_agent.run("serve", "start", *args)
    assert preview.rc == 0, preview.stdout
    plan = preview.data["plan"]
    assert_valid("serve_plan", plan)
    model = plan["models"][0]
    assert model["source"]["path"] == str(model_copy) and model["runtime"]["name"] == "mlx_lm"
    assert model["adapter"]["path"] == str(adapter)
    assert model["adapter"]["training_receipt"]["path"] == receipt_path
    started = trainer_agent.run("serve", "start", *args, "--confirm", "--preview-hash", plan["preview_hash"])
    assert started.rc == 0, started.stdout + started.stderr
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="local")
    reply = client.chat.completions.create(
        model="default_model", max_tokens=4, messages=[{"role": "user", "content": "hello"}]
    )
    assert reply.choices[0].message.content is not None
    assert trainer_agent.run("serve", "status", "--verify").data["servers"][0]["adapter_status"] == "verified"
    assert trainer_agent.run("serve", "stop", "--port", str(port)).rc == 0

    preview_hash = trainer_agent.preview_hash(*args)
    flip_last_byte(adapter / "adapters.safetensors")
    refused = trainer_agent.run("serve", "start", *args, "--confirm", "--preview-hash", preview_hash)
    assert (refused.rc, refused.code) == (1, "adapter_changed")

    receipt = started.data["receipt"]
    assert restart_refusal(receipt, tmp_path / "restart.log") == (3, "adapter_changed")


def test_training_receipt_refusals(agent: Agent, tiny_model: Path, tmp_path: Path) -> None:
    """A receipt cannot be combined with another source, installed as a unit, or served before it completes."""
    receipt = tmp_path / "t.json"
    receipt.write_text("{}")
    with_path = agent.run("serve", "start", "--training-receipt", str(receipt), "--path", str(tiny_model))
    assert (with_path.rc, with_path.code) == (2, "invalid_arguments")
    launchd = agent.run("serve", "start", "--training-receipt", str(receipt), "--launchd")
    assert launchd.code == "launchd_training_receipt_unsupported"
    missing = agent.run("serve", "start", "--training-receipt", str(tmp_path / "absent.json"))
    assert missing.code == "receipt_not_found"
