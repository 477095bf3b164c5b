"""Typed operator attributes: MXNet's attribute strings parsed once, at graph import.

MXNet stores every attribute as a string (``"(3, 3)"``, ``"True"``, ``"64"``, ``"relu"``). :func:`parse_value`
turns one into a Python value (int, float, bool, None, tuple of those, or str) and :class:`Attrs` holds the
parsed attributes of one node as an immutable mapping. Operator-specific frozen dataclasses (``ConvAttrs``)
are built from an :class:`Attrs` by the TDL layer; nothing downstream sees raw strings.
"""
from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

AttrValue = int | float | bool | str | None | tuple

_INT = re.compile(r"^[+-]?\d+$")
_FLOAT = re.compile(r"^[+-]?(\d+\.\d*|\.\d+|\d+)([eE][+-]?\d+)?$|^[+-]?(inf|nan)$")


def parse_value(text: str) -> AttrValue:
    """Parses one MXNet attribute string.

    >>> parse_value("(3, 3)"), parse_value("True"), parse_value("0.9"), parse_value("relu")
    ((3, 3), True, 0.9, 'relu')
    """
    s = text.strip()
    if s in ("True", "true"):
        return True
    if s in ("False", "false"):
        return False
    if s == "None":
        return None
    if _INT.match(s):
        return int(s)
    if _FLOAT.match(s):
        return float(s)
    if len(s) >= 2 and s[0] in "([" and s[-1] in ")]":
        body = s[1:-1].strip().rstrip(",")
        if not body:
            return ()
        return tuple(parse_value(p) for p in body.split(","))
    return s


@dataclass(frozen=True)
class Attrs(Mapping[str, AttrValue]):
    """An immutable mapping from attribute name to parsed value (hidden ``__x__`` attributes excluded)."""

    items_: tuple[tuple[str, AttrValue], ...] = ()

    def __post_init__(self) -> None:
        # the search hashes attributes in every cache key: computed once
        object.__setattr__(self, "_hash", hash(self.items_))

    @staticmethod
    def parse(raw: Mapping[str, str]) -> "Attrs":
        return Attrs(tuple(sorted((k, parse_value(v)) for k, v in raw.items()
                                  if not (k.startswith("__") and k.endswith("__")))))

    @staticmethod
    def of(**values: AttrValue) -> "Attrs":
        return Attrs(tuple(sorted(values.items())))

    def __getitem__(self, key: str) -> AttrValue:
        for k, v in self.items_:
            if k == key:
                return v
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return (k for k, _ in self.items_)

    def __len__(self) -> int:
        return len(self.items_)

    def __hash__(self) -> int:
        return self._hash

    def __reduce__(self):
        return Attrs, (self.items_,)         # the cached hash is per process (string hashing is salted)

    def to_mxnet(self) -> dict[str, str]:
        """The attributes as MXNet wants them (strings), e.g. for re-creating the op."""
        return {k: _format(v) for k, v in self.items_}


def _format(v: AttrValue) -> str:
    if isinstance(v, tuple):
        return "(" + ", ".join(_format(x) for x in v) + ("," if len(v) == 1 else "") + ")"
    return str(v)
