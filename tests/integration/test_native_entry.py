"""The native entry under an interpreter that cannot import mlx_agent: its 401 is built by api_errors, by path."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from mlx_agent.api_errors import Code, Family, error_body
from mlx_agent.runtime.entries import native_entry
from tests.conftest import free_port
from tests.integration.native_support import SERVER, get


def test_a_request_without_the_key_gets_the_api_errors_401(tmp_path: Path) -> None:
    """With no site-packages (no mlx_agent), the entry still answers 401 invalid_api_key in the OpenAI shape."""
    script = tmp_path / "server.py"
    script.write_text(SERVER, encoding="utf-8")
    port = free_port()
    env = {**os.environ, native_entry.PORT_ENV: str(port), native_entry.KEY_ENV: "k" * 32}
    argv = [sys.executable, "-S", "-I", native_entry.__file__, str(script)]  # -S -I: stdlib only, as elsewhere
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        status, body = get(port, {})
        assert status == 401
        expected = error_body(Family.OPENAI, Code.INVALID_API_KEY, "this worker answers only its mlx-agent front")
        assert json.loads(body) == expected and expected["error"]["type"] == "authentication_error"
        assert get(port, {"Authorization": "Bearer " + "k" * 32}) == (200, b"ok")
    finally:
        proc.terminate()
        out, err = proc.communicate(timeout=30)
    assert "mlx_agent importable: False" in out, out + err
