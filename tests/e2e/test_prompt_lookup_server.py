"""--prompt-lookup through the real wrapped server: the same tokens as native greedy, and everything around it.

Two servers run the session's random tiny model: one plain (native batching), one with
``--mlx-agent-prompt-lookup --mlx-agent-m5-prefill`` (the kernel does not apply on this machine and says so).
Random weights fall into loops, so the lookup server accepts drafts here too; a trained copy model is used by
``scripts/bench_prompt_lookup.py`` for speed.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from mlx_agent.wire import M5_PREFILL_FLAG, PROMPT_LOOKUP_FLAG
from tests.conftest import Agent, assert_valid, free_port
from tests.e2e.test_wrapped_support import Server, running

pytestmark = pytest.mark.e2e

CODE = (
    'def load_config(path: Path) -> dict[str, object]:\n    with open(path, "r", encoding="utf-8") as f:\n'
    "        return json.load(f)\n\nclass Stack:\n    def __init__(self) -> None:\n"
    "        self.items: list[int] = []\n\n    def push(self, item: int) -> None:\n"
    "        self.items.append(item)\n"
)
CHATS = {
    "code_edit": [{"role": "user", "content": f"Rename Stack to Pile in this code:\n{CODE}"}],
    "code_edit_system": [
        {"role": "system", "content": "You edit code."},
        {"role": "user", "content": f"Add type hints:\n{CODE}\nReturn the whole file."},
    ],
    "chat": [{"role": "user", "content": "Could you explain why the sky looks blue during the day?"}],
    "chat_short": [{"role": "user", "content": "Hello! How are you today?"}],
}
LOOKUP_LINE = re.compile(
    r"(chatcmpl-\S+|cmpl-\S+) prompt lookup: (\d+) tokens in (\d+) forward passes, "
    r"(\d+) of (\d+) drafted tokens accepted"
)


@pytest.fixture(scope="module")
def servers(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Server]]:
    """Start the plain server and the lookup server on the same model."""
    logs = tmp_path_factory.mktemp("lookup")
    with running(tiny_model, logs) as plain, running(tiny_model, logs, PROMPT_LOOKUP_FLAG, M5_PREFILL_FLAG) as fast:
        yield plain, fast


def chat(server: Server, messages: list[dict[str, Any]], *, stream: bool, **extra: Any) -> tuple[str, str, int]:
    """Return the reply text, finish reason and completion tokens of one chat request."""
    create: Any = server.client().chat.completions.create
    params = {"model": "default_model", "messages": messages, "max_tokens": 96, "temperature": 0.0, **extra}
    if not stream:
        reply = create(**params)
        assert reply.usage is not None
        return reply.choices[0].message.content or "", reply.choices[0].finish_reason, reply.usage.completion_tokens
    text, finish, tokens = "", "", 0
    chunks = create(**params, stream=True, stream_options={"include_usage": True})
    for chunk in chunks:
        if chunk.choices:
            text += chunk.choices[0].delta.content or ""
            finish = chunk.choices[0].finish_reason or finish
        if chunk.usage is not None:
            tokens = chunk.usage.completion_tokens
    return text, finish, tokens


def lookups(server: Server) -> list[tuple[str, ...]]:
    """Return the per-reply prompt-lookup lines of the server's log."""
    return LOOKUP_LINE.findall(server.log())


def wait_for_lookups(server: Server, count: int) -> list[tuple[str, ...]]:
    """Wait until the log has ``count`` lookup lines (the line follows the reply's last token)."""
    deadline = time.monotonic() + 30
    while len(found := lookups(server)) < count and time.monotonic() < deadline:
        time.sleep(0.05)
    return found


def test_the_log_says_what_is_on(servers: tuple[Server, Server]) -> None:
    """Lookup is on for this model; the kernel is not eligible here and adapted 0 layers."""
    log = servers[1].log()
    assert "mlx-agent: prompt lookup is on" in log
    assert "M5 prefill kernel not eligible" in log and "adapted 0 layers" in log
    assert log.index("adapted 0 layers") < log.index("Starting httpd")


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("name", sorted(CHATS))
def test_replies_are_token_for_token_native(servers: tuple[Server, Server], name: str, stream: bool) -> None:
    """Code edits and chat, streamed or not: the lookup server answers exactly what the plain server answers."""
    plain, fast = servers
    before = len(lookups(fast))
    want = chat(plain, CHATS[name], stream=stream)
    got = chat(fast, CHATS[name], stream=stream)
    assert got == want
    found = wait_for_lookups(fast, before + 1)
    assert len(found) == before + 1, "the reply took the lookup path"
    assert int(found[-1][1]) == want[2] or want[1] == "stop"


def test_drafts_are_accepted_on_a_code_edit(servers: tuple[Server, Server]) -> None:
    """On a long code edit the decoder verifies several drafted tokens per forward pass."""
    plain, fast = servers
    before = len(lookups(fast))
    assert chat(fast, CHATS["code_edit"], stream=False, max_tokens=200) == chat(
        plain, CHATS["code_edit"], stream=False, max_tokens=200
    )
    _, tokens, passes, accepted, drafted = wait_for_lookups(fast, before + 1)[-1]
    assert int(accepted) > 0 and int(passes) < int(tokens) and int(accepted) <= int(drafted)


def test_text_completions_are_native_too(servers: tuple[Server, Server]) -> None:
    """/v1/completions takes the same path with the same result."""
    body = {"prompt": f"Copy this code exactly:\n{CODE}\n", "max_tokens": 80, "temperature": 0}
    results = [server.post(body, "/v1/completions") for server in servers]
    assert results[0][0] == results[1][0] == 200
    assert results[0][1]["choices"][0]["text"] == results[1][1]["choices"][0]["text"]


def test_stop_sequences_end_the_reply_where_native_does(servers: tuple[Server, Server], tiny_model: Path) -> None:
    """A stop word made of a token from the middle of the native reply ends both replies at the same place."""
    from tokenizers import Tokenizer

    plain, fast = servers
    status, body = plain.post({"messages": CHATS["code_edit"], "max_tokens": 96, "temperature": 0, "logprobs": True})
    assert status == 200
    ids = [entry["id"] for entry in body["choices"][0]["logprobs"]["content"]]
    tokenizer = Tokenizer.from_file(str(tiny_model / "tokenizer.json"))
    stop = next(
        text
        for text in (tokenizer.decode([i]) for i in ids[len(ids) // 3 :])
        if text.strip() and tokenizer.encode(text, add_special_tokens=False).ids in ([i] for i in ids)
    )
    want = chat(plain, CHATS["code_edit"], stream=False, stop=[stop])
    assert want[1] == "stop" and want[2] < len(ids)
    assert chat(fast, CHATS["code_edit"], stream=False, stop=[stop]) == want
    assert chat(fast, CHATS["code_edit"], stream=True, stop=[stop])[:2] == want[:2]


def test_the_prompt_cache_is_reused(servers: tuple[Server, Server]) -> None:
    """A second turn that extends the first reuses the cached prefix, and still answers as native does."""
    plain, fast = servers
    messages = CHATS["chat_short"]
    first, _, _ = chat(fast, messages, stream=False)
    follow_up = [*messages, {"role": "assistant", "content": first}, {"role": "user", "content": "And then?"}]
    client = fast.client()
    reply = client.chat.completions.create(
        model="default_model",
        messages=follow_up,  # type: ignore[arg-type]
        max_tokens=64,
        temperature=0.0,
    )
    assert reply.usage is not None and reply.usage.prompt_tokens_details is not None
    assert (reply.usage.prompt_tokens_details.cached_tokens or 0) > 0
    assert reply.choices[0].message.content == chat(plain, follow_up, stream=False, max_tokens=64)[0]
    again = client.chat.completions.create(
        model="default_model",
        messages=follow_up,  # type: ignore[arg-type]
        max_tokens=64,
        temperature=0.0,
    )
    assert again.choices[0].message.content == reply.choices[0].message.content


def test_sampling_and_structured_output_keep_native_generation(servers: tuple[Server, Server]) -> None:
    """A sampled, seeded request and a JSON-constrained one take mlx_lm's path, as the log says."""
    plain, fast = servers
    before = len(lookups(fast))
    sampled = {"temperature": 0.9, "seed": 7, "max_tokens": 24}
    assert chat(fast, CHATS["chat"], stream=False, **sampled) == chat(plain, CHATS["chat"], stream=False, **sampled)
    status, body = fast.post(
        {"messages": CHATS["chat"], "max_tokens": 48, "temperature": 0, "response_format": {"type": "json_object"}}
    )
    assert status == 200 and body["choices"][0]["message"]["content"].startswith("{")
    log = fast.wait_for_log("keeps native generation (a reply watcher")
    assert "keeps native generation (sampling (temperature > 0), seed)" in log
    assert len(lookups(fast)) == before


def test_a_client_that_leaves_stops_a_lookup_reply(servers: tuple[Server, Server]) -> None:
    """A streaming client that disconnects ends its lookup reply early; the server keeps answering."""
    fast = servers[1]
    before = len(lookups(fast))
    create: Any = fast.client().chat.completions.create
    stream = create(model="default_model", messages=CHATS["chat"], max_tokens=20000, stream=True)
    for index, _ in enumerate(stream):
        if index == 5:
            break
    stream.close()
    found = wait_for_lookups(fast, before + 1)
    assert len(found) == before + 1 and int(found[-1][1]) < 20000 // 4
    assert "the client went away" in fast.log()
    assert chat(fast, CHATS["chat_short"], stream=False)[0]


def test_cli_plan_and_receipt_record_both_profiles(agent: Agent, model_copy: Path) -> None:
    """Through the CLI, both options are planned, recorded in the receipt, and applied by the server."""
    port = free_port()
    receipt = agent.launch("--path", str(model_copy), "--port", str(port), "--prompt-lookup", "--m5-prefill")
    assert_valid("serve_receipt", receipt)
    served = receipt["models"][0]
    assert served["prompt_lookup"] == receipt["plan"]["models"][0]["prompt_lookup"]
    assert served["prompt_lookup"]["applied"] is True
    assert served["m5_prefill"]["requested"] is True and served["m5_prefill"]["eligible"] is False
    log = Path(receipt["plan"]["models"][0]["worker"]["log_path"]).read_text()
    assert "prompt lookup is on" in log and "adapted 0 layers" in log
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="local", max_retries=0)
    reply = client.chat.completions.create(
        model="default_model", max_tokens=8, temperature=0.0, messages=[{"role": "user", "content": "Say hello"}]
    )
    assert reply.choices[0].message.content
    assert agent.run("serve", "stop", "--port", str(port)).rc == 0
