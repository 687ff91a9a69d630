"""How an options dataclass's fields become command-line options, argv, and back. Torch-free.

Every field of RunOptions / LaunchOptions (workloads.options) carries its default, help, choices and flag
spelling (`opt`); `cli_options` reads them for the click command (diagnose/cli/run.py) and for the ranks'
argparse (`from_argv`), and `to_argv` writes the flags a rank reads back, so no default or help text is
written twice. Generic over the dataclass: it knows no option by name.
"""

from __future__ import annotations

import argparse
import typing
from dataclasses import MISSING, dataclass, field, fields
from types import NoneType


def opt(default=MISSING, help: str = "", *, choices=None, flag: str | None = None, short: str | None = None,
        shown: str | None = None, hidden: bool = False, argv_required: bool = False):
    """A dataclass field that is also a command-line option.

    `flag` overrides `--field-name`; `short` adds an alias (`-w`); `shown` is the `[default: ...]` text for a
    default that is decided later (None here, filled by the plan); `argv_required` makes a rank refuse argv
    without it (the launcher always passes it, so the CLI need not).
    """
    return field(default=default, metadata={"help": help, "choices": choices, "flag": flag, "short": short,
                                             "shown": shown, "hidden": hidden, "argv_required": argv_required})


@dataclass(frozen=True)
class CliOption:
    """One field as a command-line option. kind: `flag` (bool, off by default), `tristate` (bool | None:
    `--x/--no-x`, None when neither is given) or `value` (int, float or str, one argument)."""

    name: str
    flag: str
    kind: str
    type: type
    default: object
    required: bool
    help: str
    choices: tuple | None
    short: str | None
    shown: str | None
    hidden: bool
    argv_required: bool

    @property
    def negative(self) -> str:
        return "--no-" + self.flag[2:]


def cli_options(cls) -> list[CliOption]:
    """The fields of an options dataclass, in declaration order, as command-line options."""
    hints = typing.get_type_hints(cls)
    out = []
    for f in fields(cls):
        args = typing.get_args(hints[f.name])
        base = next(a for a in args if a is not NoneType) if args else hints[f.name]
        kind = "value" if base is not bool else ("tristate" if NoneType in args else "flag")
        if kind == "flag" and f.default is not False:
            raise TypeError(f"{cls.__name__}.{f.name}: a flag must default to False")
        m = f.metadata
        out.append(CliOption(f.name, m["flag"] or "--" + f.name.replace("_", "-"), kind, base,
                             None if f.default is MISSING else f.default, f.default is MISSING, m["help"],
                             tuple(m["choices"]) if m["choices"] else None, m["short"], m["shown"], m["hidden"],
                             m["argv_required"]))
    return out


def pick(cls, values: dict):
    """An options dataclass from a dict that may hold other classes' options too (click's kwargs)."""
    return cls(**{f.name: values[f.name] for f in fields(cls) if f.name in values})


def to_argv(options, exclude: tuple[str, ...] = ()) -> list[str]:
    """Every option that is not None, as the flags `from_argv` reads back (`exclude`: field names left out)."""
    argv = []
    for o in cli_options(type(options)):
        value = getattr(options, o.name)
        if value is None or o.name in exclude:
            continue
        if o.kind == "tristate":
            argv.append(o.flag if value else o.negative)
        elif o.kind == "flag":
            argv += [o.flag] if value else []
        else:
            argv += [o.flag, str(value)]
    return argv


def from_argv(cls, argv: list[str] | None, *, prog: str, description: str):
    """An options dataclass from the flags `to_argv` wrote (argparse: a bad argv exits 2 with its usage)."""
    p = argparse.ArgumentParser(prog=prog, description=description)
    for o in cli_options(cls):
        if o.kind == "flag":
            p.add_argument(o.flag, dest=o.name, action="store_true", help=o.help)
        elif o.kind == "tristate":
            p.add_argument(o.flag, dest=o.name, action="store_true", default=None, help=o.help)
            p.add_argument(o.negative, dest=o.name, action="store_false")
        else:
            p.add_argument(o.flag, dest=o.name, type=o.type, choices=o.choices, default=o.default,
                           required=o.required or o.argv_required, help=o.help)
    return cls(**vars(p.parse_args(argv)))
