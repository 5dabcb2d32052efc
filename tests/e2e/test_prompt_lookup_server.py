"""--prompt-lookup through the real wrapped server: the same tokens as native greedy, and everything around it.

Two servers run the session's random tiny model: one plain (native batching), one with
``--mlx-agent-prompt-lookup --mlx-agent-m5-prefill`` (the kernel does not apply on this machine and says so).
Random weights fall into loops, so the lookup server accepts drafts here too; a trained copy model is used by
``scripts/bench_prompt_lookup.py`` for speed. A second pair serves a thinking-vocabulary variant (``<think>`` and
``</think>`` tokens, a Qwen3-style template that opens the thinking or, with ``enable_thinking: false``, writes
an empty thinking block): its replies are watched, and the watcher steers the lookup path as it does native.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import openai
import pytest

from tests.conftest import assert_valid
from tests.contract_support import LOOKUP, contract
from tests.e2e.cli_launch import Launched
from tests.e2e.lookup_chats import CHATS, CODE, LOOKUP_LINE
from tests.e2e.wrapped_support import Server, running, variant
from tests.fixtures.tiny_model import CHAT_TEMPLATE

pytestmark = pytest.mark.e2e

JSON_OBJECT: dict[str, Any] = {"type": "json_object"}
NOTE_FORMAT: dict[str, Any] = {
    "type": "json_schema",
    "json_schema": {
        "name": "note",
        "schema": {
            "type": "object",
            "properties": {"note": {"type": "string"}, "count": {"type": "integer"}},
            "required": ["note", "count"],
            "additionalProperties": False,
        },
    },
}
# Qwen3-style: the thinking is opened for the model, or written empty when the request turns it off.
QWEN3_TEMPLATE = CHAT_TEMPLATE.replace(
    "{{- '<|im_start|>assistant\\n' }}",
    "{{- '<|im_start|>assistant\\n' }}{%- if enable_thinking is defined and not enable_thinking %}"
    "{{- '<think>\\n\\n</think>\\n\\n' }}{%- else %}{{- '<think>\\n' }}{%- endif %}",
)
THINKING_MODES: dict[str, dict[str, Any]] = {
    "thinking_off": {"chat_template_kwargs": {"enable_thinking": False}},
    "thinking_budget": {"reasoning_budget": 24, "hedge_limit": 0, "repeat_limit": 0},
    "thinking_limits": {},  # the default hedge and repeat limits and the answer reserve close the thinking
    "thinking_off_limit_answers": {"chat_template_kwargs": {"enable_thinking": False}, "limit_answers": True},
}


@pytest.fixture(scope="module")
def servers(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Server]]:
    """Start the plain server and the lookup server on the same model."""
    logs = tmp_path_factory.mktemp("lookup")
    with (
        running(tiny_model, logs) as plain,
        running(tiny_model, logs, *contract(prompt_lookup=True, m5_prefill=True)) as fast,
    ):
        yield plain, fast


@pytest.fixture(scope="module")
def thinking_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Server]]:
    """Start the plain server and the lookup server on the thinking-vocabulary variant."""
    model = tmp_path_factory.mktemp("thinking") / "model"
    assert QWEN3_TEMPLATE != CHAT_TEMPLATE
    variant(model, special=["<think>", "</think>"], template=QWEN3_TEMPLATE)
    with running(model, model.parent) as plain, running(model, model.parent, *LOOKUP) as fast:
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


def settled_lookups(server: Server, quiet: float = 0.5) -> int:
    """Return the number of lookup lines once none has been added for ``quiet`` s (earlier replies log late)."""
    count = len(lookups(server))
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        time.sleep(quiet)
        now = len(lookups(server))
        if now == count:
            return count
        count = now
    return count


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


def test_sampling_keeps_native_generation(servers: tuple[Server, Server]) -> None:
    """A sampled, seeded request takes mlx_lm's path, as the log says."""
    plain, fast = servers
    before = settled_lookups(fast)
    sampled = {"temperature": 0.9, "seed": 7, "max_tokens": 24}
    assert chat(fast, CHATS["chat"], stream=False, **sampled) == chat(plain, CHATS["chat"], stream=False, **sampled)
    assert "keeps native generation (sampling (temperature > 0), seed)" in fast.log()
    assert settled_lookups(fast) == before


@pytest.mark.parametrize("name", ["code_edit", "chat"])
@pytest.mark.parametrize("response_format", [JSON_OBJECT, NOTE_FORMAT], ids=["json_object", "json_schema"])
def test_structured_output_takes_lookup_and_answers_as_native(
    servers: tuple[Server, Server], name: str, response_format: dict[str, Any]
) -> None:
    """A JSON-constrained greedy reply is served by lookup, held to its schema, and identical to native."""
    plain, fast = servers
    before = len(lookups(fast))
    extra = {"response_format": response_format, "max_tokens": 80}
    want = chat(plain, CHATS[name], stream=False, **extra)
    assert chat(fast, CHATS[name], stream=False, **extra) == want
    assert chat(fast, CHATS[name], stream=True, **extra) == want
    document = json.loads(want[0])
    if response_format is NOTE_FORMAT:
        jsonschema.validate(document, NOTE_FORMAT["json_schema"]["schema"])
    assert isinstance(document, dict)
    assert len(wait_for_lookups(fast, before + 2)) == before + 2, "both replies took the lookup path"


def reply_of(server: Server, messages: list[dict[str, Any]], **extra: Any) -> tuple[Any, ...]:
    """Return one greedy chat reply's id, reasoning, content, finish reason and completion tokens."""
    status, body = server.post({"messages": messages, "max_tokens": 96, "temperature": 0, **extra})
    assert status == 200, body
    choice = body["choices"][0]
    message = choice["message"]
    return body["id"], message.get("reasoning"), message["content"], choice["finish_reason"], body["usage"]


@pytest.mark.parametrize("mode", sorted(THINKING_MODES))
@pytest.mark.parametrize("name", ["code_edit", "chat"])
def test_thinking_replies_are_token_for_token_native(
    thinking_servers: tuple[Server, Server], name: str, mode: str
) -> None:
    """On a thinking vocabulary, thinking on (its budget or limits active) or off, lookup answers as native does."""
    plain, fast = thinking_servers
    before = len(lookups(fast))
    extra = THINKING_MODES[mode]
    want = reply_of(plain, CHATS[name], **extra)
    got = reply_of(fast, CHATS[name], **extra)
    assert got[1:] == want[1:]
    streamed = [chat(server, CHATS[name], stream=True, extra_body=extra) for server in (fast, plain)]
    assert streamed[0] == streamed[1]
    found = wait_for_lookups(fast, before + 2)
    assert len(found) == before + 2, "both replies took the lookup path"
    assert found[before][0] == got[0]
    assert name == "chat" or int(found[before][3]) > 0, "drafts were verified under the watcher"
    if mode.startswith("thinking_off"):
        assert not want[1] and want[2]
    else:
        assert want[1] and "</think>" not in want[1], "the watcher closed the thinking and the model answered"


def test_the_watcher_acts_on_lookup_replies(thinking_servers: tuple[Server, Server]) -> None:
    """The reasoning budget closes a lookup reply's thinking, and the log says so once, for that reply."""
    fast = thinking_servers[1]
    ident = reply_of(fast, CHATS["code_edit"], reasoning_budget=10, hedge_limit=0, repeat_limit=0)[0]
    log = fast.wait_for_log(f"{ident} prompt lookup: ")  # the reply's last line
    assert log.count(f"{ident} spent its reasoning budget") == 1
    assert f"{ident} spent its reasoning budget of 10 tokens; closing its thinking" in log


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


def test_cli_plan_and_receipt_record_both_profiles(lookup_launch: Launched) -> None:
    """Through the CLI, both options are planned, recorded in the receipt, and applied by the server."""
    port, receipt = lookup_launch.port, lookup_launch.receipt  # shared with test_readme_fields (it stops it after)
    assert_valid("serve_plan", lookup_launch.plan)
    assert_valid("serve_receipt", receipt)
    served = receipt["models"][0]
    assert served["decode_profile"] == receipt["plan"]["models"][0]["decode_profile"]
    assert served["decode_profile"]["applied"] is True
    assert served["prefill_kernel"]["requested"] is True and served["prefill_kernel"]["eligible"] is False
    log = Path(receipt["plan"]["models"][0]["worker"]["log_path"]).read_text()
    assert "prompt lookup is on" in log and "adapted 0 layers" in log
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="local", max_retries=0)
    reply = client.chat.completions.create(
        model="default_model", max_tokens=8, temperature=0.0, messages=[{"role": "user", "content": "Say hello"}]
    )
    assert reply.choices[0].message.content
