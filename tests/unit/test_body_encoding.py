"""``bodies.load_json`` reads UTF-8 JSON only: the APIs say so, and ``json`` alone would read other encodings."""

from __future__ import annotations

import json

import pytest

from mlx_agent.bodies import load_json
from mlx_agent.errors import BodyInvalid

pytestmark = pytest.mark.fast

DOC = {"model": "m", "messages": [{"role": "user", "content": "héllo ☃"}]}


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-16-be", "utf-32", "utf-32-le", "utf-8-sig"])
def test_other_encodings_and_a_byte_order_mark_are_invalid_encoding(encoding: str) -> None:
    """A body ``json.loads`` would accept in UTF-16, UTF-32 or behind a BOM is refused as invalid_encoding."""
    raw = json.dumps(DOC, ensure_ascii=False).encode(encoding)
    assert json.loads(raw) == DOC  # what the check is for: json alone reads it
    with pytest.raises(BodyInvalid) as refused:
        load_json(raw)
    assert (refused.value.code, refused.value.param) == ("invalid_encoding", "body")


def test_bytes_that_are_not_utf8_are_invalid_encoding() -> None:
    """A body with a byte that is not UTF-8 (Latin-1 text) is invalid_encoding, naming where it is."""
    with pytest.raises(BodyInvalid) as refused:
        load_json('{"a": "café"}'.encode("latin-1"))
    assert refused.value.code == "invalid_encoding"
    assert "byte 10" in refused.value.message


def test_utf8_json_is_read_and_bad_json_stays_invalid_json() -> None:
    """UTF-8 JSON (non-ASCII included) is read as before; UTF-8 that is not JSON is still invalid_json."""
    assert load_json(json.dumps(DOC, ensure_ascii=False).encode()) == DOC
    with pytest.raises(BodyInvalid) as refused:
        load_json(b'{"a": ')
    assert refused.value.code == "invalid_json"


@pytest.mark.parametrize("token", ["NaN", "Infinity", "-Infinity"])
def test_nan_and_infinity_anywhere_are_refused_naming_where(token: str) -> None:
    """``json`` reads NaN and Infinity, which JSON has not: 400 invalid_value naming the field, however deep."""
    raw = f'{{"model": "m", "tool_parser": {token}, "messages": [{{"role": "user", "content": "hi"}}]}}'.encode()
    assert json.loads(raw)  # what the check is for: json alone reads it
    with pytest.raises(BodyInvalid) as refused:
        load_json(raw)
    assert (refused.value.code, refused.value.param) == ("invalid_value", "tool_parser")
    with pytest.raises(BodyInvalid) as nested:
        load_json(f'{{"metadata": {{"a": [1, {token}]}}}}'.encode())
    assert nested.value.param == "metadata.a.1"
    assert load_json(b'{"t": 1e308, "u": -0.0}') == {"t": 1e308, "u": -0.0}  # finite numbers still pass
