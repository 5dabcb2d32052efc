"""Command-line options declared on the records they fill, so a flag cannot be defined and then dropped.

A request record (``plan/requests.py``) declares each of its fields with ``option(...)``: the flag, its help, its
type, bounds and default. Click (``cli/app.py``) and the click-free fast path (``cli/fast.py``) both build their
parsers from ``Record.OPTIONS``, and both hand the parsed values back to ``Record(**values)``, which
refuses a value no field declares. One name per idea: the field is named as the flag, without dashes, and a
models file's key is the field's name (``plan/models_file.py`` builds its validator from the same options).

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
        "file_path",
        "file_required",
        "flag",
        "help",
        "kind",
        "maximum",
        "min_open",
        "minimum",
        "required",
        "scope",
        "synonyms",
        "values",
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
        values: tuple[float, ...] | None = None,
        scope: str = "both",
        file_path: str | None = None,
        file_required: bool = False,
        synonyms: tuple[str, ...] = (),
    ) -> None:
        self.flag = flag
        self.dest = flag.lstrip("-").replace("-", "_")
        # "str", "int", "float", "flag", "multi" (a repeatable string), "list" (A,B,... on the command line, an
        # array in a file) or "json" (a JSON object's text on the command line, a table in a file)
        self.kind = kind
        self.help = help
        self.default = () if kind == "multi" and default is None else default
        self.minimum = minimum
        self.maximum = maximum
        self.min_open = min_open
        self.required = required
        self.choices = choices
        self.choices_from = choices_from  # a function of plan.recipes returning the allowed values
        self.values = values  # the numbers allowed, where bounds alone say too little
        # Where a per-model option is given: "both" (the command line or a [[model]] table), "cli" (once on the
        # command line, for every model), or "file" (a table only: the command line derives it).
        self.scope = scope
        self.file_path = file_path  # "path" or "path_or_repo": a file's relative value is read from its directory
        self.file_required = file_required
        self.synonyms = synonyms  # older models-file keys still read


def option(flag: str, kind: str, help: str, **settings: Any) -> Any:
    """Declare a record field filled by ``flag`` (typed as the field's annotation says)."""
    return Opt(flag, kind, help, **settings)


class Record:
    """A request record: its fields are the options declared on its class, in declaration order."""

    OPTIONS: tuple[Opt, ...] = ()

    def __init_subclass__(cls) -> None:
        declared = [value for value in vars(cls).values() if isinstance(value, Opt)]
        names = {d.dest for d in declared}
        inherited: dict[str, Opt] = {}
        for base in cls.__bases__:  # every base's options, in the order the bases are named
            for opt in getattr(base, "OPTIONS", ()):
                inherited.setdefault(opt.dest, opt)
        cls.OPTIONS = (*(opt for opt in inherited.values() if opt.dest not in names), *declared)
        for opt in declared:
            if vars(cls).get(opt.dest) is not opt:
                raise TypeError(f"{cls.__name__}: the option {opt.flag} must be declared as the field {opt.dest}")

    def __init__(self, **values: Any) -> None:
        for opt in self.OPTIONS:
            value = values.pop(opt.dest, opt.default)
            if opt.kind == "list" and isinstance(value, str):
                value = tuple(part.strip() for part in value.split(","))
            elif opt.kind in ("multi", "list") and value is not None:
                value = tuple(value)
            setattr(self, opt.dest, value)
        if values:
            raise TypeError(f"{type(self).__name__} has no option for {', '.join(sorted(values))}")

    def values(self) -> dict[str, Any]:
        """Return every field's value by name."""
        return {opt.dest: getattr(self, opt.dest) for opt in self.OPTIONS}


def problem(opt: Opt, value: Any) -> str | None:
    """Return what is wrong with a given value of ``opt`` (its bounds, fixed choices or allowed numbers), or None.

    Choices read from the recipes are left to the plan, which refuses an unknown runtime with its own error.
    """
    if value is None or opt.kind not in ("int", "float", "str"):
        return None
    if opt.minimum is not None and (value < opt.minimum or (opt.min_open and value == opt.minimum)):
        return f"must be {'above' if opt.min_open else 'at least'} {opt.minimum:g}"
    if opt.maximum is not None and value > opt.maximum:
        return f"must be at most {opt.maximum:g}"
    if opt.values is not None and value not in opt.values:
        return f"must be one of {', '.join(map(str, opt.values))}"
    if opt.choices is not None and value not in opt.choices:
        return f"must be one of {', '.join(opt.choices)}"
    return None


def choices(opt: Opt) -> list[str] | None:
    """Return the allowed values of an option, if it has a fixed set."""
    if opt.choices is not None:
        return list(opt.choices)
    if opt.choices_from is None:
        return None
    from mlx_agent.plan import recipes

    values: list[str] = getattr(recipes, opt.choices_from)()
    return values
