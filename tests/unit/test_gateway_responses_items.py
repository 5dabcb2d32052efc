"""Stored responses' delete and input items: the store, the listed items, the query and its pages (pure)."""

from __future__ import annotations

from typing import Any

import pytest
from multidict import MultiDict

from mlx_agent.api_errors import Code
from mlx_agent.errors import RequestRefused
from mlx_agent.gateway.responses.items import INCLUDABLE, MAX_LIMIT, ItemsQuery, items_of, page
from mlx_agent.gateway.responses.store import ResponseStore

pytestmark = pytest.mark.fast


def counting() -> Any:
    """Return an id maker that counts: ``msg_1``, ``fc_2``, ..."""
    counter = iter(range(1, 1000))
    return lambda prefix: f"{prefix}_{next(counter)}"


def query(*pairs: tuple[str, str]) -> ItemsQuery:
    """Return the query parsed from ``pairs`` as aiohttp hands them over (a multidict)."""
    return ItemsQuery.parse(MultiDict(pairs))


def refusal(*pairs: tuple[str, str]) -> RequestRefused:
    """Return the refusal the query ``pairs`` get."""
    with pytest.raises(RequestRefused) as info:
        query(*pairs)
    return info.value


def numbered(count: int) -> list[dict[str, Any]]:
    """Return ``count`` listed user messages with ids ``msg_0``..."""
    return items_of([{"type": "message", "id": f"msg_{i}", "role": "user", "content": str(i)} for i in range(count)])


# -- the store --------------------------------------------------------------------------------------------------


def test_deleting_frees_the_entry_and_only_its_owner_may() -> None:
    """Another key's delete drops nothing; the owner's drops the response, its conversation and its items."""
    store = ResponseStore()
    items = [{"id": "msg_1", "type": "message", "role": "user", "content": []}]
    store.put({"id": "resp_1", "output": []}, "alice", [{"role": "user", "content": "hi"}], items)
    assert not store.delete("resp_1", "bob") and not store.delete("resp_1", None)
    assert store.input_items("resp_1", "bob") is None and store.input_items("resp_1", "alice") == items
    assert store.delete("resp_1", "alice") and len(store) == 0
    assert store.get("resp_1", "alice") is None and store.conversation("resp_1", "alice") is None
    assert store.input_items("resp_1", "alice") is None and not store.delete("resp_1", "alice")


def test_input_items_are_copies_and_leave_with_their_response() -> None:
    """A caller cannot change the stored items; items of a response pushed out by the capacity go with it."""
    store = ResponseStore(capacity=2)
    for index in range(3):
        store.put({"id": f"resp_{index}"}, None, items=[{"id": f"msg_{index}", "type": "message"}])
    assert store.input_items("resp_0", None) is None and len(store) == 2
    listed = store.input_items("resp_2", None)
    assert listed is not None
    listed[0]["id"] = "changed"
    assert store.input_items("resp_2", None) == [{"id": "msg_2", "type": "message"}]


# -- the items a request is listed as ---------------------------------------------------------------------------


def test_a_string_input_is_one_user_message_with_one_input_text_part() -> None:
    """The item the API lists for a string input: a completed user message with an id."""
    assert items_of("hello", counting()) == [
        {
            "id": "msg_1",
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": "hello"}],
            "status": "completed",
        }
    ]


def test_each_item_keeps_its_own_id_or_gets_one_by_its_type() -> None:
    """Sent ids are kept; others are made by type; string content becomes a part; everything else is as sent."""
    sent: list[Any] = [
        {"role": "developer", "content": "Be brief."},
        {"type": "message", "id": "msg_given", "role": "assistant", "content": "Let me look."},
        {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "Sunny", "status": "incomplete"},
        {"type": "custom_tool_call", "call_id": "c2", "name": "patch", "input": "x"},
        {"type": "custom_tool_call_output", "call_id": "c2", "output": "done"},
        {"type": "reasoning", "summary": [], "encrypted_content": "opaque"},
    ]
    items = items_of(sent, counting())
    assert [item["id"] for item in items] == ["msg_1", "msg_given", "fc_2", "fco_3", "ctc_4", "ctco_5", "rs_6"]
    assert items[0] == {
        "id": "msg_1",
        "role": "developer",
        "content": [{"type": "input_text", "text": "Be brief."}],
        "type": "message",
        "status": "completed",
    }
    assert items[1]["content"] == [{"type": "output_text", "text": "Let me look.", "annotations": [], "logprobs": []}]
    assert items[2] == {**sent[2], "id": "fc_2", "status": "completed"}
    assert items[3]["status"] == "incomplete"  # as sent
    assert "status" not in items[6] and items[6]["encrypted_content"] == "opaque"
    assert sent[0] == {"role": "developer", "content": "Be brief."}  # the request's own items are not changed


# -- the query --------------------------------------------------------------------------------------------------


def test_the_query_defaults_to_the_last_20_items_first() -> None:
    """No parameters: limit 20, order desc, no cursor, nothing included."""
    assert query() == ItemsQuery(limit=20, order="desc", after=None, include=frozenset())


def test_the_query_takes_every_documented_parameter() -> None:
    """limit, order and after are read; include is read as sent plainly and as the SDK's include[]."""
    parsed = query(
        ("limit", "100"),
        ("order", "asc"),
        ("after", "msg_3"),
        ("include[]", "reasoning.encrypted_content"),
        ("include", "message.input_image.image_url"),
    )
    assert parsed == ItemsQuery(
        MAX_LIMIT, "asc", "msg_3", frozenset({"reasoning.encrypted_content", "message.input_image.image_url"})
    )
    assert query(("limit", "1")).limit == 1
    assert "reasoning.encrypted_content" in INCLUDABLE


@pytest.mark.parametrize(
    ("pairs", "code", "param"),
    [
        ((("limit", "ten"),), Code.INVALID_TYPE, "limit"),
        ((("limit", "2.5"),), Code.INVALID_TYPE, "limit"),
        ((("limit", "0"),), Code.INVALID_VALUE, "limit"),
        ((("limit", "101"),), Code.INVALID_VALUE, "limit"),
        ((("limit", "5"), ("limit", "6")), Code.INVALID_VALUE, "limit"),
        ((("order", "newest"),), Code.INVALID_VALUE, "order"),
        ((("after", ""),), Code.INVALID_VALUE, "after"),
        ((("include[]", "everything"),), Code.INVALID_VALUE, "include"),
        ((("before", "msg_1"),), Code.UNSUPPORTED_PARAMETER, "before"),
        ((("stream", "true"),), Code.UNSUPPORTED_PARAMETER, "stream"),
    ],
)
def test_a_bad_query_is_refused_naming_its_parameter(
    pairs: tuple[tuple[str, str], ...], code: Code, param: str
) -> None:
    """A bad value, type, repeat or an undeclared parameter is a 400 with a stable code and the parameter."""
    refused = refusal(*pairs)
    assert (refused.status, refused.code, refused.param) == (400, code, param)


# -- the pages --------------------------------------------------------------------------------------------------


def test_a_page_lists_the_last_item_first_by_default() -> None:
    """The default order, desc, starts from the last item sent; has_more says more follow the page."""
    listed = page(numbered(5), query(("limit", "2")))
    assert [item["id"] for item in listed["data"]] == ["msg_4", "msg_3"]
    assert (listed["object"], listed["first_id"], listed["last_id"], listed["has_more"]) == (
        "list",
        "msg_4",
        "msg_3",
        True,
    )


@pytest.mark.parametrize("order", ["asc", "desc"])
@pytest.mark.parametrize("limit", [1, 2, 5, 7])
def test_following_after_cursors_lists_every_item_once_in_order(order: str, limit: int) -> None:
    """Each page's last_id as the next page's after walks all items, once each, until has_more is false."""
    items = numbered(5)
    seen: list[str] = []
    after: str | None = None
    while True:
        pairs = [("limit", str(limit)), ("order", order)] + ([("after", after)] if after else [])
        listed = page(items, query(*pairs))
        seen += [item["id"] for item in listed["data"]]
        after = listed["last_id"]
        if not listed["has_more"]:
            break
    expected = [f"msg_{i}" for i in range(5)]
    assert seen == (expected if order == "asc" else expected[::-1])


def test_a_page_after_the_last_item_is_empty_and_an_unknown_cursor_is_refused() -> None:
    """A cursor on the final item gives an empty page; one the response never had is 400 invalid_value."""
    empty = page(numbered(3), query(("after", "msg_0")))
    assert empty == {"object": "list", "data": [], "first_id": None, "last_id": None, "has_more": False}
    with pytest.raises(RequestRefused) as info:
        page(numbered(3), query(("after", "msg_9")))
    assert (info.value.code, info.value.param) == (Code.INVALID_VALUE, "after")


def test_encrypted_reasoning_is_listed_only_when_included() -> None:
    """A reasoning item's encrypted_content is left out unless include asks for reasoning.encrypted_content."""
    items = items_of([{"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "opaque"}])
    assert "encrypted_content" not in page(items, query())["data"][0]
    included = page(items, query(("include[]", "reasoning.encrypted_content")))
    assert included["data"][0]["encrypted_content"] == "opaque"
    assert items[0]["encrypted_content"] == "opaque"  # the stored item keeps it
