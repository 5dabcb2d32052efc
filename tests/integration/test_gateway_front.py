"""The gateway's front door as a real process: auth, Host/Origin, body cap, model checks, clamps, cached_tokens."""

from __future__ import annotations

import http.client
import json
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

from mlx_agent.api_errors import Family
from mlx_agent.gateway.door.endpoints import ENDPOINTS, Endpoint
from mlx_agent.wire import CONTROL_PREFIX
from tests.conftest import REPO_ROOT, assert_valid
from tests.gateway_support import CONTROL_TOKEN, Gateway, running_gateway, start_gateway

HEAVY = ("mlx", "mlx_lm", "mlx_vlm", "transformers", "huggingface_hub")


# Most tests here only send requests and read replies: they share the stand-in front (and the keyed one) of the
# test process (tests/standin_fronts.py), as httpx's tests share one server. What they count from is reset before
# each: the model is unloaded, so a request that reaches the worker shows as a load. Tests that change the policy
# or the config start their own.


def test_control_endpoints_need_the_control_token(standin: Gateway) -> None:
    """Status, unload and policy answer 401 without the token or with a wrong one."""
    for method, path in (("GET", "status"), ("POST", "unload"), ("PUT", "policy")):
        for token in (None, "wrong-token"):
            reply = standin.control(method, path, {}, token=token)
            assert reply.status == 401, (method, path, token)
            assert reply.json()["error"]["code"] == "unauthorized"
    assert standin.control("GET", "status").status == 200


def test_api_keys_guard_model_endpoints_only(keyed_standin: Gateway) -> None:
    """With an API key file, /v1 needs a key (Bearer or x-api-key); /health stays open; no key loads nothing."""
    loads = keyed_standin.status()["loads"]  # the shared front's count so far: nothing here may add one
    assert keyed_standin.request("GET", "/v1/models").status == 401
    wrong = keyed_standin.request("GET", "/v1/models", headers={"Authorization": "Bearer nope"})
    assert (wrong.status, wrong.json()["error"]["message"]) == (401, "invalid API key")
    assert wrong.headers["x-should-retry"] == "false"  # agents stop retrying a wrong key
    denied = keyed_standin.chat()
    assert (denied.status, denied.json()["error"]["code"]) == (401, "invalid_api_key")
    assert "required" in denied.json()["error"]["message"]
    assert keyed_standin.status()["loads"] == loads
    assert keyed_standin.request("GET", "/v1/models", headers={"Authorization": "Bearer alice"}).status == 200
    assert keyed_standin.request("GET", "/v1/models", headers={"x-api-key": "bob"}).status == 200
    assert keyed_standin.request("GET", "/health").status == 200
    hi = {"messages": [{"role": "user", "content": "hi"}]}
    reply = keyed_standin.request("POST", "/v1/chat/completions", hi, {"x-api-key": "alice"})
    assert reply.status == 200
    assert "alice" not in json.dumps(reply.json()["headers"])  # keys are not forwarded to the worker


def test_foreign_host_and_origin_are_forbidden(standin: Gateway) -> None:
    """A rebinding Host or a foreign Origin is 403; loopback names pass and only their origin is echoed."""
    port = standin.port
    host = standin.request("GET", "/health", headers={"Host": f"attacker.example:{port}"})
    assert (host.status, host.json()["error"]["code"]) == (403, "forbidden_host")
    assert standin.request("GET", "/health", headers={"Host": "127.0.0.1:1"}).status == 403
    assert standin.request("GET", "/health", headers={"Host": f"localhost:{port}"}).status == 200
    foreign = standin.request("GET", "/v1/models", headers={"Origin": "http://attacker.example"})
    assert (foreign.status, foreign.json()["error"]["code"]) == (403, "forbidden_origin")
    local = standin.request("GET", "/v1/models", headers={"Origin": "http://localhost:5173"})
    assert local.status == 200 and local.headers["access-control-allow-origin"] == "http://localhost:5173"
    plain = standin.request("GET", "/v1/models")
    assert "access-control-allow-origin" not in plain.headers
    preflight = standin.request("OPTIONS", "/v1/chat/completions", headers={"Origin": "http://127.0.0.1:3000"})
    assert preflight.status == 204 and preflight.headers["access-control-allow-origin"] == "http://127.0.0.1:3000"
    allowed = {h.strip().lower() for h in preflight.headers["access-control-allow-headers"].split(",")}
    assert {"anthropic-version", "x-api-key", "authorization"} <= allowed  # what the official SDKs send


def test_bodies_over_the_cap_are_413(tmp_path: Path) -> None:
    """A body over max_body_bytes is refused, whether announced by Content-Length or sent chunked."""
    with running_gateway(tmp_path, max_body_bytes=2048) as gateway:
        big = json.dumps({"messages": [{"role": "user", "content": "x" * 4096}]}).encode()
        reply = gateway.request("POST", "/v1/chat/completions", raw=big)
        assert (reply.status, reply.json()["error"]["code"]) == (413, "body_too_large")
        conn = http.client.HTTPConnection("127.0.0.1", gateway.port, timeout=30)
        conn.request(
            "POST",
            "/v1/chat/completions",
            body=iter([big[:1000], big[1000:]]),
            encode_chunked=True,
            headers={"Content-Type": "application/json", "Transfer-Encoding": "chunked"},
        )
        assert conn.getresponse().status == 413
        conn.close()
        assert gateway.status()["loads"] == 0


def test_other_models_are_404_and_adapters_and_bad_json_400(standin: Gateway) -> None:
    """Another model name is 404 model_not_found; a request-time adapter or draft model and bad JSON are 400s."""
    loads = standin.status()["loads"]  # the shared front's count so far: nothing here may add one
    other = standin.request(
        "POST", "/v1/chat/completions", {"model": "other/model", "messages": [{"role": "user", "content": "x"}]}
    )
    assert other.status == 404 and other.headers["x-should-retry"] == "false"
    assert other.json()["error"] == {
        **other.json()["error"],
        "type": "not_found_error",
        "param": "model",
        "code": "model_not_found",
    }
    assert "org/tiny" in other.json()["error"]["message"]
    for field in ("adapters", "adapter", "draft_model", "adapter_path"):
        reply = standin.chat(**{field: "/somewhere"})
        assert (reply.status, reply.json()["error"]["param"]) == (400, field)
    bad = standin.request("POST", "/v1/completions", raw=b"{not json")
    assert (bad.status, bad.json()["error"]["code"]) == (400, "invalid_json")
    assert standin.request("GET", "/v1/nothing-here").status == 404
    assert standin.status()["loads"] == loads


def test_every_record_of_the_route_table_is_answered_by_its_handler(standin: Gateway) -> None:
    """Each endpoint record is routed (no router 404 or 405), GET ones answer HEAD, errors take their family's shape."""
    loads = standin.status()["loads"]  # the shared front's count so far: nothing here may add one
    filled = {"{model_id:.+}": "org/tiny", "{response_id}": "resp_unknown"}
    for record in ENDPOINTS:
        path = record.path
        for pattern, value in filled.items():
            path = path.replace(pattern, value)
        headers = {"Authorization": f"Bearer {CONTROL_TOKEN}"} if path.startswith(CONTROL_PREFIX) else {}
        body: dict[str, Any] | None = {} if record.method != "GET" else None
        reply = standin.request(record.method, path, body, headers)
        doc = reply.json() if reply.headers.get("content-type", "").startswith("application/json") else {}
        error = doc.get("error") if isinstance(doc, dict) else None
        routed = not (isinstance(error, dict) and error.get("code") in ("not_found", "method_not_allowed"))
        assert routed or (error is not None and error.get("param") == "response_id"), (record.key, doc)
        if isinstance(record, Endpoint):  # an empty body is refused by the declaration, in the family's shape
            assert reply.status == 400, (record.key, doc)
            assert (doc.get("type") == "error") == (record.family is Family.ANTHROPIC), (record.key, doc)
        if record.method == "GET":
            head = standin.request("HEAD", path, None, headers)
            assert (head.status, head.body) == (reply.status, b""), record.key
    assert standin.status()["loads"] == loads


def test_reply_limits_are_honoured_up_to_the_ceiling_and_the_model_renamed(tmp_path: Path) -> None:
    """The worker gets default_model, the plan's limit when none is asked, and the request's own up to the ceiling."""
    with running_gateway(tmp_path, max_tokens_ceiling=4096) as gateway:
        over = gateway.chat(max_tokens=32000).json()
        assert over["echo"]["max_tokens"] == 4096 and over["echo"]["model"] == "default_model"
        assert over["model"] == "org/tiny"
        assert gateway.chat(max_completion_tokens=7).json()["echo"]["max_tokens"] == 7
        assert gateway.chat().json()["echo"]["max_tokens"] == 16
        unnamed = gateway.request("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}]})
        assert unnamed.json()["model"] == "org/tiny"  # a reply to a request without model names the served one
        completion = gateway.request("POST", "/v1/completions", {"prompt": "once", "max_tokens": 99}).json()
        assert completion["echo"]["max_tokens"] == 99


def test_worker_errors_pass_through_with_their_status(standin: Gateway) -> None:
    """A non-stream error from the worker keeps its status and message, in OpenAI's shape when it was not in it."""
    reply = standin.chat(x_status=422)
    assert reply.status == 422
    error = reply.json()["error"]
    assert (error["message"], error["code"], error["type"]) == (
        "stand-in error",
        "worker_error",
        "invalid_request_error",
    )


def test_a_reply_the_worker_breaks_off_is_502_and_the_stream_ends_with_an_error(standin: Gateway) -> None:
    """A body cut short of its length is 502 worker_failed; a stream without [DONE] ends with an error event."""
    plain = standin.chat(x_cut=True)
    assert plain.status == 502 and plain.json()["error"]["code"] == "worker_failed"
    assert {k.lower(): v for k, v in plain.headers.items()}.get("x-should-retry") != "false"  # may pass on a retry
    streamed = standin.chat(x_cut=True, stream=True)
    assert streamed.status == 200
    events = [json.loads(e[6:]) for e in streamed.body.split(b"\n\n") if e.startswith(b"data: {")]
    assert events[-1]["error"]["code"] == "worker_failed"
    assert b"[DONE]" not in streamed.body
    assert standin.chat().status == 200  # the worker still serves


def cached(gateway: Gateway, key: str, content: str, stream: bool = False) -> Any:
    """Send a chat as ``key`` (the stand-in claims 10 cached tokens) and return the reported cached_tokens."""
    body: dict[str, Any] = {"messages": [{"role": "user", "content": content}], "x_cached": 10}
    if stream:
        body |= {"stream": True, "stream_options": {"include_usage": True}}
    reply = gateway.request("POST", "/v1/chat/completions", body, {"Authorization": f"Bearer {key}"})
    assert reply.status == 200
    if not stream:
        return reply.json()["usage"]["prompt_tokens_details"]["cached_tokens"]
    events = [json.loads(e[6:]) for e in reply.body.split(b"\n\n") if e.startswith(b"data: {")]
    return next(e for e in events if e.get("usage"))["usage"]["prompt_tokens_details"]["cached_tokens"]


def test_cached_tokens_never_reveal_another_keys_prompt(keyed_standin: Gateway) -> None:
    """With API keys, a key sees cached tokens only for prompts it sent itself, streamed or not."""
    assert cached(keyed_standin, "alice", "the secret plan") == 0  # first time: nothing of alice's is cached
    assert cached(keyed_standin, "alice", "the secret plan") == 10  # her own prompt, repeated
    assert cached(keyed_standin, "bob", "the secret plan") == 0  # the worker says 10; bob never sent it
    assert cached(keyed_standin, "bob", "the secret plan", stream=True) == 10  # now bob has sent it himself
    assert cached(keyed_standin, "bob", "another", stream=True) == 0


def test_forced_usage_chunk_is_hidden_from_clients_that_did_not_ask(keyed_standin: Gateway) -> None:
    """With API keys the gateway asks for usage in streams, and drops that chunk for clients that did not."""
    body = {"messages": [{"role": "user", "content": "hi"}], "stream": True}
    reply = keyed_standin.request("POST", "/v1/chat/completions", body, {"Authorization": "Bearer alice"})
    assert reply.status == 200 and b'"usage"' not in reply.body
    assert reply.body.rstrip().endswith(b"data: [DONE]")


def test_without_api_keys_cached_tokens_pass_through(standin: Gateway) -> None:
    """With no API keys all clients are one trust domain: the worker's count is reported as is."""
    assert standin.chat(x_cached=10).json()["usage"]["prompt_tokens_details"]["cached_tokens"] == 10


def test_policy_replacement_persists_atomically_and_takes_effect(tmp_path: Path) -> None:
    """PUT policy writes a 0600 schema-valid file (no temp left), applies at once, and survives a restart."""
    with running_gateway(tmp_path) as gateway:
        assert gateway.chat().status == 200
        policy = {"idle_timeout": 0.3, "keep_loaded": False, "min_headroom_gb": 0.5}
        reply = gateway.control("PUT", "policy", policy)
        assert reply.status == 200 and reply.json()["policy"] == policy
        path = Path(gateway.config["policy_path"])
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        doc = json.loads(path.read_text())
        assert_valid("front_policy", doc)
        assert (doc["min_headroom_gb"], doc["models"]) == (
            0.5,
            {"org/tiny": {"idle_timeout": 0.3, "keep_loaded": False}},
        )
        assert [p.name for p in path.parent.iterdir() if p.name.startswith(".")] == []
        assert gateway.status()["policy"] == policy
        assert gateway.wait_state("unloaded")["model_state"] == "unloaded"  # idle unload now applies
        for bad in ({"idle_timeout": 1}, {**policy, "keep_loaded": "yes"}, {**policy, "min_headroom_gb": -1}):
            refused = gateway.control("PUT", "policy", bad)
            assert (refused.status, refused.json()["error"]["code"]) == (400, "policy_rejected")
        assert json.loads(path.read_text())["min_headroom_gb"] == 0.5
        gateway.stop()
        restarted = start_gateway(tmp_path, gateway.config)
        try:
            assert restarted.status()["policy"] == policy
        finally:
            restarted.stop()


def test_a_policy_that_cannot_be_saved_changes_nothing(tmp_path: Path) -> None:
    """When the policy file cannot be written the answer is 500 policy_not_saved and the old policy stays."""
    with running_gateway(tmp_path) as gateway:
        before = gateway.status()["policy"]
        Path(gateway.config["policy_path"]).mkdir(parents=True)  # a directory where the file must go
        reply = gateway.control("PUT", "policy", {"idle_timeout": 5, "keep_loaded": True, "min_headroom_gb": 1})
        assert (reply.status, reply.json()["error"]["code"]) == (500, "policy_not_saved")
        assert gateway.status()["policy"] == before
        bad = gateway.control("POST", "unload", {"model": 7})
        assert (bad.status, bad.json()["error"]["param"]) == (400, "model")


def test_gateway_imports_no_mlx(tmp_path: Path, standin: Gateway) -> None:
    """Importing and building the gateway loads no MLX, mlx_lm, transformers or huggingface_hub."""
    code = (
        "import json, sys\n"
        "import mlx_agent.gateway.__main__, mlx_agent.gateway.door.app as app\n"
        "from mlx_agent.gateway.door.config import parse_config\n"
        f"cfg = parse_config(json.loads(open({str(tmp_path / 'c.json')!r}).read()))\n"
        "app.build_app(cfg, app.Secrets('t', None, None, None))\n"
        f"print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r})))\n"
    )
    from tests.gateway_support import fake_worker_argv, gateway_config

    config = gateway_config(tmp_path, 8080, fake_worker_argv(tmp_path), model_path=tmp_path / "m")
    (tmp_path / "c.json").write_text(json.dumps(config))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO_ROOT, check=True)
    assert json.loads(out.stdout) == []
    assert standin.chat().status == 200
    maps = Path(f"/proc/{standin.proc.pid}/maps").read_text()
    assert "/mlx/" not in maps and "libmlx" not in maps


def test_bad_config_exits_2_and_wrong_token_mode_is_refused(tmp_path: Path) -> None:
    """An invalid config or a token file others can read stops the gateway at start with exit status 2."""
    config_path = tmp_path / "bad.json"
    config_path.write_text(json.dumps({"format_version": "1.0", "host": "0.0.0.0"}))
    proc = subprocess.run(
        [sys.executable, "-m", "mlx_agent.gateway", "--config", str(config_path)],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=60,
    )
    assert proc.returncode == 2 and "invalid" not in proc.stdout
    from tests.gateway_support import fake_worker_argv, gateway_config

    config = gateway_config(tmp_path, 8080, fake_worker_argv(tmp_path), model_path=tmp_path / "m")
    token = Path(config["control_token_path"])
    token.parent.mkdir(parents=True)
    token.write_text(CONTROL_TOKEN)
    token.chmod(0o644)
    config_path.write_text(json.dumps(config))
    proc = subprocess.run(
        [sys.executable, "-m", "mlx_agent.gateway", "--config", str(config_path)],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=60,
    )
    assert proc.returncode == 2 and "chmod 600" in proc.stderr
