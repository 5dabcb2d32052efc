"""What a pull's preview says of the fetched files: the catalog's rules read them (describing one imports mlx_lm)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from mlx_agent.errors import InvalidArguments
from mlx_agent.plan import catalog, pull

COMMIT = "a" * 40


def sibling(name: str, data: bytes) -> dict[str, Any]:
    """Return one file of a listing as ``supervise/hub.listing`` gives it (weights in LFS)."""
    return {
        "name": name,
        "size": len(data),
        "blob_id": hashlib.sha1(data, usedforsecurity=False).hexdigest(),
        "sha256": hashlib.sha256(data).hexdigest() if name.endswith(".safetensors") else None,
    }


class NoRuntimes(catalog.Runtimes):
    """Runtimes that resolve none: the test reads only what the fetched files say."""

    def get(self, name: str) -> Any:
        """Refuse every runtime (no interpreter is hashed, no package read)."""
        raise InvalidArguments(f"no runtime {name} here")


@pytest.mark.parametrize(
    ("config", "complete"),
    [
        ({"target": "nemo.collections.asr.models.EncDecCTCModelBPE", "model_type": "parakeet"}, True),
        ({"model_type": "llama"}, False),
    ],
)
def test_a_recogniser_without_tokenizer_files_is_complete_a_chat_model_is_not(
    tmp_path: Path, config: dict[str, Any], complete: bool
) -> None:
    """A NeMo recogniser carries its vocabulary in its config; a chat model without tokenizer files would not serve."""
    (tmp_path / "config.json").write_text(json.dumps(config))
    listing = [sibling("model.safetensors", b"W" * 100), sibling("config.json", json.dumps(config).encode())]
    plan = pull.pull_plan("org/m", "main", COMMIT, "http://hub", Path("/cache"), listing)
    serving = pull.servable(plan, tmp_path, NoRuntimes(), None)
    assert (serving["problem"] is None) is complete, serving["problem"]
