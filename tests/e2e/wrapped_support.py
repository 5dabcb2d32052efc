"""Shared helpers of the wrapped-server e2e tests (no tests here): server processes and tiny model variants.

Variants start from the session's tiny-model builder and add tokens, a chat template or scripted weights:

* ``thinking_model``: random weights plus ``<think>``/``</think>``; the template opens the thinking, and the
  model (whose new rows are zero) practically never closes it by itself.
* ``scripted_model``: weights whose greedy output is a fixed chain of tokens. Every layer adds nothing (its
  output projections are zero), so the next token depends only on the current one: each token of the chain
  has its own embedding direction, and the output row of its successor points that way. Tokens outside the
  chain lead to ``default``. This is how a random-weight model is made to write hedges, loops or tool calls.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import openai

from tests.conftest import free_port
from tests.contract_support import with_contract
from tests.fixtures.tiny_model import CHAT_TEMPLATE, build_tiny_model

REPO_ROOT = Path(__file__).resolve().parents[2]
# One layer with one narrow head: a scripted model's layers add nothing to its residual stream, and on MLX's
# CPU backend attention is most of a long prefill (an agent's first turn is 20-30k tokens), so this shape
# prefills several times faster than the default one and still runs every step of the real model class.
LEAN: dict[str, Any] = {"num_layers": 1, "heads": (1, 1), "head_dim": 16}

# The log line of a reply whose client left, once its generation has gone quiet (runtime/serving/cancel.py):
# the reply's label, its tokens, and the tokens that still came after the stop.
STOPPED = re.compile(
    r"the client went away.* from (\S+) after (\d+) tokens; generation stopped "
    r"\((\d+) more tokens after the stop\)"
)

# Python for ``running(prelude=...)``: kills mlx_lm's generation thread on a request for 13 tokens, as an uncaught
# error inside a batch step (say, out of memory) would: nothing the handler thread builds first can see it coming.
FAULT = """
import mlx_lm.server as _server
_insert = _server.BatchGenerator.insert_segments
def _faulty(self, *args, **kwargs):
    if kwargs.get("max_tokens") == [13]:
        raise RuntimeError("injected fault")
    return _insert(self, *args, **kwargs)
_server.BatchGenerator.insert_segments = _faulty
"""

# ChatML whose generation prompt opens a thinking block, as thinking models' templates do.
THINKING_TEMPLATE = CHAT_TEMPLATE.replace(
    "{{- '<|im_start|>assistant\\n' }}", "{{- '<|im_start|>assistant\\n<think>\\n' }}"
)


@dataclass
class Server:
    """One server process on a free loopback port, with its log."""

    argv: list[str]
    port: int
    log_path: Path
    process: subprocess.Popen[bytes] = field(init=False)

    @property
    def url(self) -> str:
        """Return the server's base URL."""
        return f"http://127.0.0.1:{self.port}"

    def client(self, **kwargs: Any) -> openai.OpenAI:
        """Return the official client for this server (no retries: a test sees the first answer)."""
        return openai.OpenAI(base_url=f"{self.url}/v1", api_key="local", max_retries=0, **kwargs)

    def post(
        self,
        body: Mapping[str, Any] | bytes,
        path: str = "/v1/chat/completions",
        headers: Mapping[str, str] | None = None,
    ) -> tuple[int, Any]:
        """POST ``body`` and return the status and the parsed JSON answer (text if it is not JSON)."""
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        request = urllib.request.Request(
            f"{self.url}{path}", data=data, headers={"Content-Type": "application/json", **(headers or {})}
        )
        try:
            with urllib.request.urlopen(request, timeout=120) as answer:
                status, raw = answer.status, answer.read()
        except urllib.error.HTTPError as error:
            status, raw = error.code, error.read()
        try:
            return status, json.loads(raw)
        except ValueError:
            return status, raw.decode()

    def log(self) -> str:
        """Return the server's log so far."""
        return self.log_path.read_text(errors="replace")

    def wait_for_log(self, text: str, timeout: float = 60) -> str:
        """Wait until ``text`` is in the log; return the log."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            log = self.log()
            if text in log:
                return log
            time.sleep(0.1)
        raise AssertionError(f"{text!r} never appeared in the log:\n{self.log()[-3000:]}")


def wrapped_argv(model: Path, port: int, *extra: str) -> list[str]:
    """Return the supervisor's command line for the wrapped entry (the plain contract unless ``extra`` has one)."""
    return with_contract(
        [
            sys.executable,
            "-m",
            "mlx_agent.runtime",
            "mlx_lm",
            "--model",
            str(model),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            *extra,
        ]
    )


def bare_argv(model: Path, port: int, *extra: str) -> list[str]:
    """Return the command line of mlx_lm's own server, for comparisons."""
    return [
        sys.executable,
        "-m",
        "mlx_lm",
        "server",
        "--model",
        str(model),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        *extra,
    ]


@contextmanager
def running(
    model: Path, log_dir: Path, *extra: str, bare: bool = False, prelude: str | None = None
) -> Iterator[Server]:
    """Start a server on ``model`` and wait for /health; always stop it afterwards.

    ``prelude`` is Python run in the server process before the wrapped entry (to inject a fault).
    """
    port = free_port()
    argv = (bare_argv if bare else wrapped_argv)(model, port, *extra)
    if prelude is not None:
        entry = "import sys; from mlx_agent.runtime.entry import main; sys.exit(main(sys.argv[1:]))"
        argv = [sys.executable, "-c", f"{prelude}\n{entry}", *argv[3:]]
    log_path = log_dir / f"server-{port}.log"
    server = Server(argv, port, log_path)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONPATH": str(REPO_ROOT)}
    with log_path.open("wb") as log:
        server.process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=REPO_ROOT)
    try:
        _wait_healthy(server)
        yield server
    finally:
        server.process.terminate()
        try:
            server.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            server.process.kill()
            server.process.wait(timeout=15)


def _wait_healthy(server: Server, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise AssertionError(f"the server exited with {server.process.returncode}:\n{server.log()[-3000:]}")
        try:
            with urllib.request.urlopen(f"{server.url}/health", timeout=2) as answer:
                if json.loads(answer.read()) == {"status": "ok"}:
                    return
        except (OSError, ValueError):
            pass
        time.sleep(0.2)
    raise AssertionError(f"the server never became healthy:\n{server.log()[-3000:]}")


# -- model variants -------------------------------------------------------------------------------------


def add_tokens(out_dir: Path, special: Sequence[str], plain: Sequence[str]) -> tuple[Any, dict[str, Any]]:
    """Add tokens to a built model's tokenizer (saved); return it and its tokenizer_config naming them (unsaved)."""
    from tokenizers import AddedToken, Tokenizer

    tokenizer = Tokenizer.from_file(str(out_dir / "tokenizer.json"))
    tokenizer.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in special])
    tokenizer.add_tokens([AddedToken(t, special=False, normalized=False) for t in plain])
    tokenizer.save(str(out_dir / "tokenizer.json"))
    config: dict[str, Any] = json.loads((out_dir / "tokenizer_config.json").read_text())
    for token in [*special, *plain]:
        config["added_tokens_decoder"][str(tokenizer.token_to_id(token))] = {
            "content": token,
            "lstrip": False,
            "normalized": False,
            "rstrip": False,
            "single_word": False,
            "special": token in special,
        }
    return tokenizer, config


def variant(
    out_dir: Path,
    *,
    special: Sequence[str] = (),
    plain: Sequence[str] = (),
    template: str | None = None,
    tokenizer_config: Mapping[str, Any] | None = None,
    seed: int = 0,
    shape: Mapping[str, Any] | None = None,
) -> Any:
    """Build a tiny model with extra tokens (ids at the end of the vocabulary); return its ``tokenizers`` object.

    The model is built with a smaller vocabulary and its rows padded back to 512: new embedding rows are
    small random numbers, new output rows zero (their logit is 0; random rows are around 0).
    """
    import mlx.core as mx

    extra = len(special) + len(plain)
    build_tiny_model(out_dir, seed=seed, vocab_size=512 - extra, **(shape or {}))
    tokenizer, config = add_tokens(out_dir, special, plain)
    if template is not None:
        config["chat_template"] = template
    config.update(tokenizer_config or {})
    (out_dir / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
    model_config = json.loads((out_dir / "config.json").read_text())
    model_config["vocab_size"] = 512
    (out_dir / "config.json").write_text(json.dumps(model_config, indent=2))
    weights = cast(dict[str, Any], mx.load(str(out_dir / "model.safetensors")))
    mx.random.seed(seed + 1)
    hidden = weights["model.embed_tokens.weight"].shape[1]
    weights["model.embed_tokens.weight"] = mx.concatenate(
        [weights["model.embed_tokens.weight"], 0.02 * mx.random.normal((extra, hidden))]
    )
    weights["lm_head.weight"] = mx.concatenate([weights["lm_head.weight"], mx.zeros((extra, hidden))])
    mx.save_safetensors(str(out_dir / "model.safetensors"), weights, metadata={"format": "mlx"})
    return tokenizer


def thinking_model(out_dir: Path) -> Path:
    """Build a random-weight thinking model whose template opens the thinking (module docstring)."""
    variant(out_dir, special=["<think>", "</think>"], template=THINKING_TEMPLATE)
    return out_dir


def scripted_model(
    out_dir: Path,
    chain: Mapping[str, str],
    default: str,
    *,
    special: Sequence[str] = (),
    plain: Sequence[str] = (),
    template: str | None = None,
    tokenizer_config: Mapping[str, Any] | None = None,
    shape: Mapping[str, Any] | None = None,
) -> Path:
    """Build a model whose greedy next token is ``chain[token]``, or ``default`` (module docstring).

    ``shape`` passes layer and head counts to ``build_tiny_model`` (``LEAN``: the layers add nothing here).
    """
    import mlx.core as mx

    tokenizer = variant(
        out_dir, special=special, plain=plain, template=template, tokenizer_config=tokenizer_config, shape=shape
    )

    def token_id(text: str) -> int:
        found: list[int] = tokenizer.encode(text, add_special_tokens=False).ids
        assert len(found) == 1, f"{text!r} is not one token: {found}"
        return found[0]

    weights = cast(dict[str, Any], mx.load(str(out_dir / "model.safetensors")))
    vocab, hidden = weights["model.embed_tokens.weight"].shape
    for name in list(weights):
        if name.endswith(("o_proj.weight", "down_proj.weight")):
            weights[name] = mx.zeros_like(weights[name])  # every layer adds nothing to the residual
    embed = mx.zeros((vocab, hidden))
    embed[:, hidden - 1] = 1.0  # the direction of "any other token"
    head = mx.zeros((vocab, hidden))
    head[token_id(default), hidden - 1] = 10.0
    for dim, (source, target) in enumerate(chain.items()):
        embed[token_id(source)] = mx.zeros((hidden,))
        embed[token_id(source), dim] = 1.0
        head[token_id(target), dim] = 10.0
    weights["model.embed_tokens.weight"] = embed
    weights["lm_head.weight"] = head
    weights["model.norm.weight"] = mx.ones((hidden,))
    mx.save_safetensors(str(out_dir / "model.safetensors"), weights, metadata={"format": "mlx"})
    return out_dir
