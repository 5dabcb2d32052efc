"""DELETE /v1/responses/{id} and GET /v1/responses/{id}/input_items through a real front, over plain HTTP."""

from __future__ import annotations

from typing import Any

from tests.gateway_support import Gateway

ALICE = {"Authorization": "Bearer alice-key"}
BOB = {"Authorization": "Bearer bob-key"}
INPUT: Any = [
    {"role": "developer", "content": "Be brief."},
    {"type": "message", "id": "msg_mine", "role": "user", "content": [{"type": "input_text", "text": "hi"}]},
]


def create(gateway: Gateway, headers: dict[str, str], **fields: Any) -> str:
    """Create a response as the key in ``headers`` and return its id."""
    reply = gateway.request("POST", "/v1/responses", {"input": INPUT, **fields}, headers)
    assert reply.status == 200, reply.body
    response_id: str = reply.json()["id"]
    return response_id


def test_the_owner_lists_and_deletes_and_any_other_key_meets_an_unknown_id(keyed_standin: Gateway) -> None:
    """Another key gets exactly the 404 of an id never stored; the owner's delete frees it for every path."""
    gateway = keyed_standin  # the shared keyed front (alice-key and bob-key among its keys)
    rid = create(gateway, ALICE)
    listed = gateway.request("GET", f"/v1/responses/{rid}/input_items", headers=ALICE)
    assert listed.status == 200
    doc = listed.json()
    mine, made = doc["data"]  # the last item sent first
    assert mine["id"] == "msg_mine" and made["id"].startswith("msg_") and made["role"] == "developer"
    assert (doc["object"], doc["first_id"], doc["has_more"]) == ("list", "msg_mine", False)
    foreign = [
        gateway.request("GET", f"/v1/responses/{rid}/input_items", headers=BOB),
        gateway.request("DELETE", f"/v1/responses/{rid}", headers=BOB),
        gateway.request("GET", f"/v1/responses/{rid}", headers=BOB),
    ]
    assert gateway.request("GET", f"/v1/responses/{rid}", headers=ALICE).status == 200  # bob deleted nothing
    deleted = gateway.request("DELETE", f"/v1/responses/{rid}", headers=ALICE)
    assert (deleted.status, deleted.json()) == (200, {"id": rid, "object": "response", "deleted": True})
    gone = [
        gateway.request("GET", f"/v1/responses/{rid}/input_items", headers=ALICE),
        gateway.request("DELETE", f"/v1/responses/{rid}", headers=ALICE),
        gateway.request("GET", f"/v1/responses/{rid}", headers=ALICE),
    ]
    for theirs, unknown in zip(foreign, gone, strict=True):
        assert (theirs.status, theirs.body) == (unknown.status, unknown.body) == (404, unknown.body)
        assert unknown.json()["error"]["code"] == "not_found" and unknown.json()["error"]["param"] == "response_id"
    continued = gateway.request("POST", "/v1/responses", {"input": "more", "previous_response_id": rid}, ALICE)
    assert (continued.status, continued.json()["error"]["code"]) == (400, "previous_response_not_found")


def test_a_bad_query_is_a_400_naming_it_and_head_answers_like_get(standin: Gateway) -> None:
    """A route's refusal is answered (400, its code and param, no retry), and HEAD has GET's status."""
    gateway = standin  # the shared front
    rid = create(gateway, {})
    for query, code, param in (
        ("limit=0", "invalid_value", "limit"),
        ("limit=many", "invalid_type", "limit"),
        ("order=sideways", "invalid_value", "order"),
        ("after=msg_nowhere", "invalid_value", "after"),
        ("before=msg_mine", "unsupported_parameter", "before"),
    ):
        reply = gateway.request("GET", f"/v1/responses/{rid}/input_items?{query}")
        error = reply.json()["error"]
        assert (reply.status, error["code"], error["param"]) == (400, code, param), query
        assert error["type"] == "invalid_request_error" and reply.headers["x-should-retry"] == "false"
    page = gateway.request(
        "GET", f"/v1/responses/{rid}/input_items?limit=1&order=asc&include[]=reasoning.encrypted_content"
    )
    assert [item["role"] for item in page.json()["data"]] == ["developer"] and page.json()["has_more"] is True
    head = gateway.request("HEAD", f"/v1/responses/{rid}/input_items")
    assert (head.status, head.body) == (200, b"")
    unstored = create(gateway, {}, store=False)
    assert gateway.request("GET", f"/v1/responses/{unstored}/input_items").status == 404


def test_a_loopback_page_may_delete(standin: Gateway) -> None:
    """The preflight allows every method the route table serves, DELETE included."""
    gateway = standin  # the shared front
    origin = {"Origin": "http://127.0.0.1:3000", "Access-Control-Request-Method": "DELETE"}
    preflight = gateway.request("OPTIONS", "/v1/responses/resp_1", headers=origin)
    allowed = {m.strip() for m in preflight.headers["access-control-allow-methods"].split(",")}
    assert preflight.status == 204 and {"DELETE", "GET", "POST", "PUT", "OPTIONS"} <= allowed
