"""Request records: each field is an option declared on its record, so no option can be parsed and dropped."""

from __future__ import annotations

import pytest

from mlx_agent.plan.options import Opt, Record, option
from mlx_agent.plan.requests import COMMANDS, ServeRequest

pytestmark = pytest.mark.fast


@pytest.mark.parametrize("key", sorted(COMMANDS), ids=" ".join)
def test_every_option_fills_a_field_of_its_name(key: tuple[str, str]) -> None:
    """Each record option's field is named as its flag, and the record holds exactly its options."""
    command = COMMANDS[key]
    dests = [opt.dest for opt in command.options]
    assert len(dests) == len(set(dests))
    record = command.record()
    for opt in command.record.OPTIONS:
        assert opt.dest == opt.flag.removeprefix("--").replace("-", "_")
        assert hasattr(record, opt.dest)
    assert set(record.values()) == {opt.dest for opt in command.record.OPTIONS}


def test_a_value_no_field_declares_is_refused() -> None:
    """A record refuses a value it has no option for, instead of dropping it."""
    with pytest.raises(TypeError, match="training_receipt"):
        COMMANDS[("lora", "train")].record(data="d", adapter_path="a", training_receipt="r")
    record, flags = COMMANDS[("serve", "start")].parse({"path": "/m", "json": True, "confirm": False})
    assert isinstance(record, ServeRequest) and record.path == "/m" and flags["json"] is True


def test_a_field_must_be_named_as_its_flag() -> None:
    """Declaring an option under another name than its flag's fails when the record class is made."""
    with pytest.raises(TypeError, match="--max-tokens"):

        class Renamed(Record):
            limit: int = option("--max-tokens", "int", "A reply limit.")

    assert Opt("--alias", "multi", "x").default == ()


@pytest.mark.parametrize("argv", [["--kv-bits", "7"], ["--kv-group-size", "48"], ["--max-tokens", "0"]])
def test_a_value_outside_an_options_bounds_is_refused_by_both_parsers(argv: list[str]) -> None:
    """The fast path leaves a value it does not allow to Click, which refuses it as a usage error."""
    import click

    from mlx_agent.cli.app import serve
    from mlx_agent.cli.fast import parse

    assert parse(["serve", "start", "--path", "/m", *argv, "--json"]) is None
    assert parse(["serve", "start", "--path", "/m", "--kv-bits", "4", "--json"]) is not None
    with pytest.raises(click.BadParameter):
        serve.commands["start"].make_context("start", ["--path", "/m", *argv])


def test_hosts_are_split_once_into_the_record() -> None:
    """--hosts A,B fills the record with the list of hosts, as a models file's array does."""
    record, _ = COMMANDS[("serve", "start")].parse({"path": "/m", "hosts": "10.0.0.1, 10.0.0.2", "json": True})
    assert isinstance(record, ServeRequest) and record.hosts == ("10.0.0.1", "10.0.0.2")
    assert ServeRequest(hosts=["10.0.0.1"]).hosts == ("10.0.0.1",) and ServeRequest().hosts is None
