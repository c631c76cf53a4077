"""Sub-commands whose modules are imported only when they run.

``gpuyield --help`` lists every command from its name and one help line,
and ``gpuyield plan`` imports the planner and nothing of the worker: the
module of a command (with Faust, aiokafka, the Kubernetes client or torch
behind it) is imported when that command is invoked, or its own ``--help``
is asked for, and not before.

``LazyCommand`` names the function as ``"module:function"``; ``lazy_group``
makes the typer group class that lists such commands and turns one into the
real typer command on first use (built exactly as ``app.command(name)(fn)``
would build it, so options, help and errors are the same).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any, ClassVar

import typer
from typer.core import TyperCommand, TyperGroup


@dataclass(frozen=True, slots=True)
class LazyCommand:
    """A command by reference: where its function lives, and its one-line help."""

    target: str  # "gpuyield.plan_command:plan_command"
    help: str  # the first line of the function's docstring (a test keeps them equal)

    def function(self) -> Callable[..., Any]:
        module, _, name = self.target.partition(":")
        found: Callable[..., Any] = getattr(importlib.import_module(module), name)
        return found

    def load(self, name: str) -> TyperCommand:
        """The real command, as ``app.command(name)(function)`` registers it."""
        single = typer.Typer(add_completion=False)
        single.command(name)(self.function())
        command = typer.main.get_command(single)
        assert isinstance(command, TyperCommand)
        return command


class _Placeholder(TyperCommand):
    """What the group lists before the command is needed: a name and a help line.

    Invoking it (``make_context`` is where click starts parsing a
    sub-command's arguments) loads the real command and hands over to it.
    """

    def __init__(self, name: str, lazy: LazyCommand, loaded: Callable[[], TyperCommand]) -> None:
        super().__init__(name, help=lazy.help, short_help=lazy.help)
        self._loaded = loaded

    def make_context(
        self, info_name: str | None, args: list[str], parent: Any = None, **extra: Any
    ) -> Any:
        return self._loaded().make_context(info_name, args, parent=parent, **extra)


class LazyGroup(TyperGroup):
    """The typer group of ``gpuyield``: every lazy command is listed by a placeholder.

    ``commands`` holds a placeholder per lazy command, so click lists, finds
    and suggests them as usual; the real command replaces nothing and is
    built once per group, when a placeholder is first invoked.
    """

    lazy_commands: ClassVar[Mapping[str, LazyCommand]] = {}

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._loaded: dict[str, TyperCommand] = {}
        for name, lazy in self.lazy_commands.items():
            if name not in self.commands:
                self.add_command(_Placeholder(name, lazy, partial(self.load, name)))

    def load(self, name: str) -> TyperCommand:
        """The real command ``name`` (its module imported on the first call)."""
        if name not in self._loaded:
            self._loaded[name] = self.lazy_commands[name].load(name)
        return self._loaded[name]


def lazy_group(commands: Mapping[str, LazyCommand]) -> type[LazyGroup]:
    """A ``LazyGroup`` class over ``commands`` (typer instantiates the class itself)."""
    return type("GpuyieldGroup", (LazyGroup,), {"lazy_commands": dict(commands)})
