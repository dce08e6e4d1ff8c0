"""A by-name registry, built once at worker start: the tools' and the hooks' share it."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Generic, Protocol, TypeVar


class Named(Protocol):
    @property
    def name(self) -> str: ...


T = TypeVar("T", bound=Named)


class NamedRegistry(Generic[T]):
    """Items by name; ``kind`` ("tool", "hook") names them in the error about a name given twice."""

    def __init__(self, items: Iterable[T], kind: str) -> None:
        self._items: dict[str, T] = {}
        for item in items:
            if item.name in self._items:
                raise ValueError(f"duplicate {kind} name {item.name!r}: {kind} names must be unique")
            self._items[item.name] = item

    def __contains__(self, name: str) -> bool:
        return name in self._items

    def __getitem__(self, name: str) -> T:
        return self._items[name]

    def get(self, name: str) -> T | None:
        return self._items.get(name)

    @property
    def names(self) -> list[str]:
        return sorted(self._items)
