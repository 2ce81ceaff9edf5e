"""Lazy re-exports of a package facade (PEP 562).

A facade lists its public names by the module that defines them; the first
access to a name imports that module and keeps the value on the package, so
``import cognoxium`` loads only what the core needs, and a name of an
optional path (embeddings, formats, strategies) costs its imports when it is
first used. Under ``TYPE_CHECKING`` the facade imports the same names, so
type checkers and documentation tools see them as ordinary imports.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(
    package: str, exports: Mapping[str, Sequence[str]]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of a package that re-exports names lazily.

    Parameters
    ----------
    package
        The dotted name of the package (its ``__name__``).
    exports
        The names to re-export, by the dotted name of the module that defines them.

    Returns
    -------
    tuple of (callable, callable)
        ``__getattr__(name)``: the name's value, imported on first access and
        then kept on the package; a submodule of the package is imported too.
        ``__dir__()``: the package's names, the lazy ones included.

    Raises
    ------
    ValueError
        If a name is listed under two modules.

    Examples
    --------
    >>> getattr_, dir_ = lazy_exports("json", {"json.decoder": ["JSONDecodeError"]})
    >>> getattr_("JSONDecodeError").__name__
    'JSONDecodeError'
    >>> "JSONDecodeError" in dir_()
    True
    """
    where: dict[str, str] = {}
    for module, names in exports.items():
        for name in names:
            if name in where:
                raise ValueError(f"{package}: {name!r} is exported by {where[name]} and {module}")
            where[name] = module

    def module_getattr(name: str) -> Any:
        origin = where.get(name)
        if origin is not None:
            value = getattr(importlib.import_module(origin), name)
        elif not name.startswith("__"):
            try:  # a submodule, as `import package` once loaded every one
                value = importlib.import_module(f"{package}.{name}")
            except ModuleNotFoundError as exc:
                if exc.name != f"{package}.{name}":
                    raise
                raise AttributeError(f"module {package!r} has no attribute {name!r}") from None
        else:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        setattr(sys.modules[package], name, value)
        return value

    def module_dir() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(where))

    return module_getattr, module_dir
