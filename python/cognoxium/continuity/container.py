"""The Container: builds and holds the embedder, memory, structures and strategy.

Each slot has a default and may be set in a ``cognoxium.toml`` file, one
section per slot, each naming a ``kind`` (parameters, where a kind takes any,
are the other keys of its table)::

    [embedder]
    kind = "local_hash"      # cognoxium.retrieval.embeddings.get_embedder names

    [memory]
    kind = "in_memory"

    [[structures]]           # an array of tables, searched in order
    kind = "flat"

    [strategy]
    kind = "default"

``structures`` may also be a single table or a list of kind names
(``structures = ["flat"]``). Objects passed to :class:`Container` override the
file.
"""

from __future__ import annotations

import inspect
import os
import tomllib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from cognoxium.continuity.broker import EngineContext, Strategy
from cognoxium.continuity.memory import InMemoryBackend, MemoryBackend
from cognoxium.continuity.strategy import DefaultStrategy
from cognoxium.continuity.structures import FlatStructure, Structure
from cognoxium.exceptions import ConfigError, ModelError
from cognoxium.retrieval.embeddings import Embedder, get_embedder

__all__ = ["CONFIG_FILE", "DEFAULT_KINDS", "Container"]

CONFIG_FILE = "cognoxium.toml"
"""The file name :class:`Container` looks for in the current directory."""

DEFAULT_KINDS: Mapping[str, str | tuple[str, ...]] = {
    "embedder": "local_hash",
    "memory": "in_memory",
    "structures": ("flat",),
    "strategy": "default",
}
"""The kind of each slot when neither a file nor an argument sets it."""

_MEMORIES: dict[str, Callable[..., MemoryBackend]] = {InMemoryBackend.kind: InMemoryBackend}
_STRUCTURES: dict[str, Callable[..., Structure]] = {FlatStructure.kind: FlatStructure}
_STRATEGIES: dict[str, Callable[..., Strategy]] = {DefaultStrategy.kind: DefaultStrategy}

_T = TypeVar("_T")


def _read(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as handle:
            return tomllib.load(handle)
    except FileNotFoundError:
        raise ConfigError(f"{path}: configuration file not found") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the configuration file ({exc})") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML ({exc})") from None


def _params(
    source: str, where: str, kind: str, factory: Callable[..., Any], params: dict[str, Any]
) -> None:
    """Check ``params`` against the factory's keyword parameters."""
    signature = inspect.signature(factory)
    names = [
        p.name
        for p in signature.parameters.values()
        if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    ]
    if any(p.kind is p.VAR_KEYWORD for p in signature.parameters.values()):
        return
    for key in params:
        if key not in names:
            takes = ", ".join(names) if names else "no parameters"
            raise ConfigError(
                f"{source}: {where}.{key}: unknown parameter; kind {kind!r} takes {takes}"
            )


def _build(
    source: str,
    where: str,
    table: Any,
    registry: Mapping[str, Callable[..., _T]],
    default: str,
) -> _T:
    if isinstance(table, str):
        table = {"kind": table}
    if not isinstance(table, dict):
        raise ConfigError(
            f"{source}: {where} must be a table with a kind, got {type(table).__name__}"
        )
    kind = table.get("kind", default)
    if not isinstance(kind, str):
        raise ConfigError(f"{source}: {where}.kind must be a string, got {type(kind).__name__}")
    factory = registry.get(kind)
    if factory is None:
        known = ", ".join(sorted(registry))
        raise ConfigError(f"{source}: {where}.kind: unknown kind {kind!r}; known kinds: {known}")
    params = {key: value for key, value in table.items() if key != "kind"}
    _params(source, where, kind, factory, params)
    try:
        return factory(**params)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{source}: {where}: {exc}") from None


def _embedder(source: str, table: Any) -> Embedder:
    if isinstance(table, str):
        table = {"kind": table}
    if not isinstance(table, dict):
        raise ConfigError(
            f"{source}: embedder must be a table with a kind, got {type(table).__name__}"
        )
    kind = table.get("kind", DEFAULT_KINDS["embedder"])
    if not isinstance(kind, str):
        raise ConfigError(f"{source}: embedder.kind must be a string, got {type(kind).__name__}")
    extra = sorted(key for key in table if key != "kind")
    if extra:
        raise ConfigError(
            f"{source}: embedder.{extra[0]}: unknown parameter; embedders are chosen by kind only"
        )
    try:
        return get_embedder(kind)
    except ModelError as exc:
        raise ConfigError(f"{source}: embedder.kind: {exc}") from None


def _load_config(
    config: str | os.PathLike[str] | None, search_cwd: bool
) -> tuple[Path | None, str, dict[str, Any]]:
    """The configuration file (``config``, else the working directory's), its name and sections.

    Raises
    ------
    ConfigError
        If the file holds a section that is not one of :data:`DEFAULT_KINDS`.
    """
    path: Path | None = None
    if config is not None:
        path = Path(config)
    elif search_cwd and (Path.cwd() / CONFIG_FILE).is_file():
        path = Path.cwd() / CONFIG_FILE
    data = _read(path) if path is not None else {}
    source = str(path) if path is not None else "<defaults>"
    unknown = sorted(set(data) - set(DEFAULT_KINDS))
    if unknown:
        raise ConfigError(
            f"{source}: unknown key {unknown[0]!r}; the sections are "
            f"{', '.join(sorted(DEFAULT_KINDS))}"
        )
    return path, source, data


class Container:
    """Builds and holds the pieces of a continuity engine.

    Parameters
    ----------
    config
        A ``cognoxium.toml`` file to read (see the module docstring for its
        sections), or ``None``.
    search_cwd
        When ``config`` is ``None``, read ``cognoxium.toml`` from the current
        directory if it exists. ``Container(search_cwd=False)`` uses only the
        defaults and the arguments.
    embedder, memory, structures, strategy
        Objects that override the file and the defaults (``local_hash``,
        ``in_memory``, ``[flat]``, ``default``).

    Raises
    ------
    ConfigError
        If the file cannot be read or parsed, has an unknown section, kind or
        parameter (the message names the file and the key), or an argument is
        not of its slot's type.

    Examples
    --------
    >>> c = Container(search_cwd=False)
    >>> c.get(Strategy), c.get(MemoryBackend), c.get_all(Structure)
    (DefaultStrategy(), InMemoryBackend(notes=0, dim=None), [FlatStructure()])
    >>> c.get(Embedder).name
    'local_hash'
    """

    __slots__ = ("_config_path", "_embedder", "_memory", "_strategy", "_structures")

    def __init__(
        self,
        config: str | os.PathLike[str] | None = None,
        *,
        search_cwd: bool = True,
        embedder: Embedder | None = None,
        memory: MemoryBackend | None = None,
        structures: Sequence[Structure] | None = None,
        strategy: Strategy | None = None,
    ) -> None:
        self._config_path, source, data = _load_config(config, search_cwd)
        if embedder is None:
            embedder = _embedder(source, data.get("embedder", {}))
        elif not isinstance(embedder, Embedder):
            raise ConfigError(
                "Container(embedder=...) must follow the Embedder protocol, got "
                f"{type(embedder).__name__}"
            )
        self._embedder: Embedder = embedder

        if memory is None:
            memory = _build(
                source, "memory", data.get("memory", {}), _MEMORIES, str(DEFAULT_KINDS["memory"])
            )
        elif not isinstance(memory, MemoryBackend):
            raise ConfigError(
                f"Container(memory=...) must be a MemoryBackend, got {type(memory).__name__}"
            )
        self._memory: MemoryBackend = memory

        if structures is None:
            structures = self._configured_structures(source, data)
        elif isinstance(structures, str | bytes) or not all(
            isinstance(s, Structure) for s in structures
        ):
            raise ConfigError("Container(structures=...) must be a sequence of Structure")
        self._structures: tuple[Structure, ...] = tuple(structures)

        if strategy is None:
            strategy = _build(
                source,
                "strategy",
                data.get("strategy", {}),
                _STRATEGIES,
                str(DEFAULT_KINDS["strategy"]),
            )
        elif not isinstance(strategy, Strategy):
            raise ConfigError(
                f"Container(strategy=...) must be a Strategy, got {type(strategy).__name__}"
            )
        self._strategy: Strategy = strategy

    @staticmethod
    def _configured_structures(source: str, data: Mapping[str, Any]) -> list[Structure]:
        tables = data.get("structures", list(DEFAULT_KINDS["structures"]))
        if isinstance(tables, dict | str):
            tables = [tables]
        if not isinstance(tables, list):
            raise ConfigError(
                f"{source}: structures must be an array of tables ([[structures]]), got "
                f"{type(tables).__name__}"
            )
        return [
            _build(source, f"structures[{index}]", table, _STRUCTURES, "flat")
            for index, table in enumerate(tables)
        ]

    def __repr__(self) -> str:
        return (
            f"Container(config={self._config_path}, embedder={self._embedder!r}, "
            f"memory={self._memory!r}, structures={list(self._structures)!r}, "
            f"strategy={self._strategy!r})"
        )

    @property
    def config_path(self) -> Path | None:
        """The configuration file read, or ``None``."""
        return self._config_path

    @property
    def embedder(self) -> Embedder:
        """The embedder."""
        return self._embedder

    @property
    def memory(self) -> MemoryBackend:
        """The memory backend."""
        return self._memory

    @property
    def structures(self) -> tuple[Structure, ...]:
        """The structures, in search order."""
        return self._structures

    @property
    def strategy(self) -> Strategy:
        """The strategy."""
        return self._strategy

    def context(self) -> EngineContext:
        """Return an :class:`~cognoxium.continuity.broker.EngineContext` of the pieces."""
        return EngineContext(
            embedder=self._embedder, memory=self._memory, structures=self._structures
        )

    def get_all(self, kind: type[_T]) -> list[_T]:
        """Return every piece that is an instance of ``kind``, in slot order.

        The order is embedder, memory, structures (in search order), strategy.

        Raises
        ------
        ConfigError
            If ``kind`` is not a class.

        Examples
        --------
        >>> Container(search_cwd=False).get_all(Structure)
        [FlatStructure()]
        """
        if not isinstance(kind, type):
            raise ConfigError(f"Container.get_all takes a class, got {kind!r}")
        pieces: list[object] = [self._embedder, self._memory, *self._structures, self._strategy]
        return [piece for piece in pieces if isinstance(piece, kind)]

    def get(self, kind: type[_T]) -> _T:
        """Return the one piece that is an instance of ``kind``.

        Raises
        ------
        ConfigError
            If no piece, or more than one, is an instance of ``kind`` (use
            :meth:`get_all` for several structures).

        Examples
        --------
        >>> Container(search_cwd=False).get(Structure)
        FlatStructure()
        """
        found = self.get_all(kind)
        if len(found) != 1:
            what = "no piece" if not found else f"{len(found)} pieces"
            raise ConfigError(
                f"Container.get({kind.__name__}): {what} of that type"
                + ("; use get_all" if found else "")
            )
        return found[0]
