"""Name -> implementation tables whose entries are imported only when their name is asked for."""
from __future__ import annotations

import dataclasses
import importlib
from typing import Any, Mapping


@dataclasses.dataclass(frozen=True, slots=True)
class Entry:
    target: str
    """``"package.module:attribute"``; the module is imported on first use."""
    preset: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    """Keyword arguments this name fixes (variants are entries, not subclasses)."""


class Registry:
    def __init__(self, kind: str, entries: Mapping[str, Entry]):
        self.kind = kind
        self._entries = dict(entries)

    def names(self) -> list[str]:
        return list(self._entries)

    def entry(self, name: str) -> Entry:
        try:
            return self._entries[name]
        except KeyError:
            raise ValueError(f"unknown {self.kind} {name!r}; valid names: {', '.join(self._entries)}") from None

    def check(self, name: str) -> None:
        self.entry(name)

    def resolve(self, name: str) -> Any:
        module, _, attribute = self.entry(name).target.partition(":")
        return getattr(importlib.import_module(module), attribute)

    def create(self, name: str, /, **kwargs: Any) -> Any:
        return self.resolve(name)(**{**self.entry(name).preset, **kwargs})
