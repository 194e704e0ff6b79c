"""Immutable value classes (records, leases, budgets) that cost next to nothing to create.

A frozen ``@dataclass`` compiles six generated methods with ``exec`` when its module is
imported: the sixteen an ``oncelog.open()`` imports took about a third of its time
(docs/benchmarks.md, Import time). A subclass of ``Value`` behaves the same where oncelog
relies on it: a keyword or positional constructor from its annotated fields in order
(defaults from the class body, ``kw_only=True`` on a class for keyword-only fields,
``__post_init__`` called after), equal to another of its exact class with equal fields,
hashable, a ``Name(field=value, ...)`` repr, and frozen (``FrozenError``, an
``AttributeError``). Type checkers see a dataclass (PEP 681), and so do ``dataclasses``'
functions (``replace``, ``asdict``, ``fields``) at run time: the first that asks a class
for its fields makes them, once, from a mirror dataclass, so only code that uses them pays
for ``dataclasses``. ``as_dict`` and ``field_names`` are for modules an open imports.

``NamedTuple`` here is ``typing.NamedTuple`` made without typing's check of each field's
annotation: under ``from __future__ import annotations`` every annotation is text, which
typing compiles (``ForwardRef``), and the first ``compile()`` of a process builds the
interpreter's syntax-tree types: together about a sixth of what an open cost beyond
``import oncelog``. The class is ``collections.namedtuple``'s, with the class body's
docstring, defaults, methods and properties; type checkers see ``typing.NamedTuple``.
"""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from dataclasses import Field
    from typing import NamedTuple as NamedTuple
    from typing import TypeVar

    from typing_extensions import dataclass_transform

    V = TypeVar("V", bound="Value")
else:
    # The decorator only informs type checkers; ``typing`` costs an import.
    def dataclass_transform(**_: object) -> Callable[[type], type]:
        return lambda cls: cls

    class _NamedTupleType(type):
        """Makes each class based on ``NamedTuple`` a ``collections.namedtuple``."""

        def __new__(cls, name: str, bases: tuple[type, ...], body: dict[str, Any]) -> type:
            if not bases:  # ``NamedTuple`` itself
                return super().__new__(cls, name, bases, body)
            fields = tuple(body.get("__annotations__", ()))
            defaults = [body[field] for field in fields if field in body]
            made = namedtuple(name, fields, defaults=defaults, module=body["__module__"])
            for key, value in body.items():
                if key not in fields and key != "__module__":
                    setattr(made, key, value)
            return made

    class NamedTuple(metaclass=_NamedTupleType):
        """``typing.NamedTuple``, its annotations left as written (the module's docstring)."""


_MISSING = object()


class FrozenError(AttributeError):
    """An attempt to change a field of an immutable value."""


class _DataclassFields:
    """``cls.__dataclass_fields__``, made at first use from a dataclass of the same fields
    (public ``dataclasses`` API only) and kept on the class."""

    def __get__(self, value: object, cls: type[Value]) -> dict[str, Field[Any]]:
        from dataclasses import MISSING, field, fields, make_dataclass

        made = make_dataclass(
            cls.__name__,
            [
                (name, "Any", field(
                    default=cls._defaults.get(name, MISSING), kw_only=name in cls._keyword
                ))
                for name in cls._names
            ],
            frozen=True,
        )  # fmt: skip
        found = {made_field.name: made_field for made_field in fields(made)}
        type.__setattr__(cls, "__dataclass_fields__", found)
        return found


@dataclass_transform(frozen_default=True)
class Value:
    """Base of the value classes: see the module's docstring."""

    if TYPE_CHECKING:
        __dataclass_fields__: ClassVar[dict[str, Field[Any]]]
    else:
        __dataclass_fields__ = _DataclassFields()

    # The fields in constructor order, those that are keyword-only, and the defaults.
    _names: ClassVar[tuple[str, ...]] = ()
    _keyword: ClassVar[frozenset[str]] = frozenset()
    _defaults: ClassVar[dict[str, object]] = {}  # replaced per class, never changed
    _tails: ClassVar[tuple[dict[str, object] | None, ...]] = ({},)
    _post_init: ClassVar[Any] = None

    def __init_subclass__(cls, *, kw_only: bool = False, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        own = tuple(cls.__dict__.get("__annotations__", {}))  # noqa: RUF063 - no inspect
        inherited = tuple(n for n in cls._names if n not in own)
        keyword = set(cls._keyword) | (set(own) if kw_only else set())
        # As dataclasses order them: positional fields first, keyword-only ones after.
        names = inherited + own
        cls._names = tuple(n for n in names if n not in keyword) + tuple(
            n for n in names if n in keyword
        )
        cls._keyword = frozenset(keyword)
        defaults = dict(cls._defaults)
        for name in own:
            if name in cls.__dict__:
                defaults[name] = cls.__dict__[name]
        cls._defaults = defaults
        # For each number of positional arguments, the defaults of the fields after them
        # when every one has a default (None: the general path, which says what is wrong),
        # and ``__post_init__`` looked up once: a lease and a run's record are made at every
        # run's start from fewer arguments than fields, and the general path's dict and
        # loop cost a run's start about a tenth of its instructions.
        positional = len(cls._names) - len(keyword)
        tails: list[dict[str, object] | None] = []
        for given in range(positional + 1):
            rest = cls._names[given:]
            known = all(name in defaults for name in rest)
            tails.append({name: defaults[name] for name in rest} if known else None)
        cls._tails = tuple(tails)
        found = getattr(cls, "__post_init__", None)  # a function: read off an instance, unbound
        cls._post_init = None if found is None else staticmethod(found)

    if not TYPE_CHECKING:  # type checkers make these from the fields (PEP 681)

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            names = self._names
            tails = self._tails
            if not kwargs and len(args) < len(tails):
                tail = tails[len(args)]
                if tail is not None:  # positional arguments, the defaults after them
                    values = self.__dict__
                    values.update(zip(names, args, strict=False))
                    if tail:
                        values.update(tail)
                    post_init = self._post_init
                    if post_init is not None:
                        post_init(self)
                    return
            positional = len(names) - len(self._keyword)
            if len(args) > positional:
                raise TypeError(
                    f"{type(self).__name__}() takes {positional} positional arguments, "
                    f"{len(args)} given"
                )
            values = dict(zip(names, args, strict=False))
            for name, value in kwargs.items():
                if name not in names or name in values:
                    raise TypeError(
                        f"{type(self).__name__}() got an unexpected or repeated {name!r}"
                    )
                values[name] = value
            if len(values) < len(names):
                for name in names:
                    if name not in values:
                        default = self._defaults.get(name, _MISSING)
                        if default is _MISSING:
                            raise TypeError(f"{type(self).__name__}() missing argument {name!r}")
                        values[name] = default
            self.__dict__.update(values)
            post_init = getattr(self, "__post_init__", None)
            if post_init is not None:
                post_init()

        def __setattr__(self, name: str, value: object) -> None:
            raise FrozenError(f"cannot assign to field {name!r}")

        def __delattr__(self, name: str) -> None:
            raise FrozenError(f"cannot delete field {name!r}")

    def _values(self) -> tuple[Any, ...]:
        return tuple([self.__dict__[name] for name in self._names])

    def __eq__(self, other: object) -> bool:
        if other.__class__ is self.__class__:
            assert isinstance(other, Value)
            return self._values() == other._values()
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._values())

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={self.__dict__[name]!r}" for name in self._names)
        return f"{type(self).__qualname__}({shown})"


def field_names(value: Value | type[Value]) -> tuple[str, ...]:
    """``[f.name for f in dataclasses.fields(value)]``."""
    return value._names


def replace(value: V, **changes: Any) -> V:
    """``dataclasses.replace``: a copy with ``changes``, made by the class's constructor."""
    return type(value)(**{**{name: value.__dict__[name] for name in value._names}, **changes})


def as_dict(value: Value) -> dict[str, Any]:
    """``dataclasses.asdict``: the fields by name, nested values made dicts too."""
    return {name: _plain(value.__dict__[name]) for name in value._names}


def _plain(item: Any) -> Any:
    if isinstance(item, Value):
        return as_dict(item)
    if isinstance(item, tuple) and hasattr(item, "_fields"):  # a named tuple
        return type(item)(*[_plain(i) for i in item])
    if isinstance(item, (list, tuple)):
        return type(item)(_plain(i) for i in item)
    if isinstance(item, dict):
        return {_plain(k): _plain(v) for k, v in item.items()}
    return item
