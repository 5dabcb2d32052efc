"""Command-line options declared on the records they fill, so a flag cannot be defined and then dropped.

A request record (``requests.py``) declares each of its fields with ``option(...)``: the flag, its help, its
type and bounds. Click (``cli/app.py``) and the click-free fast path (``cli/fast.py``) both build their
parsers from ``Record.OPTIONS``, and both hand the parsed values back to ``Record(**values)``, which
refuses a value no field declares. One name per idea: the field is named as the flag, without dashes.

Plain classes, no dataclasses: the fast path must not pay for importing ``inspect``.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


class Opt:
    """One command-line option; ``dest`` is the name of the record field it fills."""

    __slots__ = (
        "choices",
        "choices_from",
        "default",
        "dest",
        "flag",
        "help",
        "kind",
        "maximum",
        "min_open",
        "minimum",
        "required",
    )

    def __init__(
        self,
        flag: str,
        kind: str,
        help: str,
        *,
        default: Any = None,
        minimum: float | None = None,
        maximum: float | None = None,
        min_open: bool = False,
        required: bool = False,
        choices: tuple[str, ...] | None = None,
        choices_from: str | None = None,
    ) -> None:
        self.flag = flag
        self.dest = flag.lstrip("-").replace("-", "_")
        self.kind = kind  # "str", "int", "float", "flag" or "multi" (a repeatable string)
        self.help = help
        self.default = () if kind == "multi" and default is None else default
        self.minimum = minimum
        self.maximum = maximum
        self.min_open = min_open
        self.required = required
        self.choices = choices
        self.choices_from = choices_from  # a function of plan.recipes returning the allowed values


def option(flag: str, kind: str, help: str, **settings: Any) -> Any:
    """Declare a record field filled by ``flag`` (typed as the field's annotation says)."""
    return Opt(flag, kind, help, **settings)


class Record:
    """A request record: its fields are the options declared on its class, in declaration order."""

    OPTIONS: tuple[Opt, ...] = ()

    def __init_subclass__(cls) -> None:
        declared = [value for value in vars(cls).values() if isinstance(value, Opt)]
        inherited = [opt for opt in cls.OPTIONS if opt.dest not in {d.dest for d in declared}]
        cls.OPTIONS = (*inherited, *declared)
        for opt in declared:
            if vars(cls).get(opt.dest) is not opt:
                raise TypeError(f"{cls.__name__}: the option {opt.flag} must be declared as the field {opt.dest}")

    def __init__(self, **values: Any) -> None:
        for opt in self.OPTIONS:
            value = values.pop(opt.dest, opt.default)
            setattr(self, opt.dest, tuple(value) if opt.kind == "multi" else value)
        if values:
            raise TypeError(f"{type(self).__name__} has no option for {', '.join(sorted(values))}")

    def values(self) -> dict[str, Any]:
        """Return every field's value by name."""
        return {opt.dest: getattr(self, opt.dest) for opt in self.OPTIONS}


def choices(opt: Opt) -> list[str] | None:
    """Return the allowed values of an option, if it has a fixed set."""
    if opt.choices is not None:
        return list(opt.choices)
    if opt.choices_from is None:
        return None
    from mlx_agent.plan import recipes

    values: list[str] = getattr(recipes, opt.choices_from)()
    return values
