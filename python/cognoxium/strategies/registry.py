"""The strategy registry: registration, validation, TOML configuration and the fallback path.

Configuration (``config.toml``)::

    [context.strategies]
    enabled = ["simple-keyword", "semantic-embedding", "breadth-depth-navigator"]
    timeout_seconds = 30            # defaults of every strategy (optional)
    max_fragments = 100
    max_workers = 4                 # executor-wide
    circuit_breaker_threshold = 3

    [context.strategies.custom]
    "my-strategy" = "my_package.strategies:MyStrategy"

    [context.strategies.settings."semantic-embedding"]   # per strategy (optional)
    timeout_seconds = 10
    enabled = false

A project overrides the global enabled list with a project file holding only
``[context.strategies] enabled = [...]`` (:func:`load_config`'s ``project``),
or with :meth:`StrategyConfig.with_enabled`; the list given replaces the
global one.

The registry validates that

1. every enabled strategy is registered;
2. every strategy declares at least one backend capability;
3. every strategy declares its supported resource types (a non-empty tuple
   of :data:`~cognoxium.strategies.protocol.RESOURCE_TYPES`).

When backends are missing, context still comes out: the fallback path tries
``arce`` (text, vector and graph), then ``breadth-depth-navigator`` (graph),
``semantic-embedding`` (vector) and ``simple-keyword`` (text), each only when
its backends are present (:func:`fallback_chain`).
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import tomllib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from cognoxium.exceptions import ConfigError, StrategyError
from cognoxium.strategies.backends import Backends
from cognoxium.strategies.builtin import builtin_strategies
from cognoxium.strategies.protocol import (
    RESOURCE_TYPES,
    ContextStrategy,
    StrategyCapabilities,
)
from cognoxium.strategies.settings import SETTING_KEYS, StrategySettings

__all__ = [
    "DEFAULT_ENABLED",
    "FALLBACK_ORDER",
    "StrategyConfig",
    "StrategyRegistry",
    "fallback_chain",
    "load_config",
    "load_strategy",
]

DEFAULT_ENABLED: tuple[str, ...] = (
    "simple-keyword",
    "semantic-embedding",
    "breadth-depth-navigator",
)
"""The strategies enabled when the configuration names none (``context.strategies.enabled``)."""

FALLBACK_ORDER: tuple[str, ...] = (
    "arce",
    "breadth-depth-navigator",
    "semantic-embedding",
    "simple-keyword",
)
"""The degradation path when backends are missing: richest first, text only last."""

_DEFAULT_KEYS = tuple(k for k in SETTING_KEYS if k != "enabled")
_TOP_KEYS = ("enabled", "custom", "settings", *_DEFAULT_KEYS)
_EXECUTOR_KEYS = ("max_workers",)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class StrategyConfig:
    """The ``[context.strategies]`` configuration.

    Parameters
    ----------
    enabled
        The enabled strategy names, in polling order.
    custom
        Custom strategies: name to ``"module:Class"`` import path.
    defaults
        Settings of every strategy without its own (``max_workers`` is the
        executor's).
    overrides
        Complete settings per strategy name.

    Examples
    --------
    >>> config = StrategyConfig.from_toml('''
    ... [context.strategies]
    ... enabled = ["simple-keyword", "arce"]
    ... timeout_seconds = 5
    ... [context.strategies.settings.arce]
    ... enabled = false
    ... ''')
    >>> config.active(), config.settings_for("arce").timeout_seconds
    (('simple-keyword',), 5)
    >>> config.with_enabled(["semantic-embedding"]).enabled
    ('semantic-embedding',)
    """

    enabled: tuple[str, ...] = DEFAULT_ENABLED
    custom: Mapping[str, str] = dataclasses.field(default_factory=dict)
    defaults: StrategySettings = dataclasses.field(default_factory=StrategySettings)
    overrides: Mapping[str, StrategySettings] = dataclasses.field(default_factory=dict)

    def settings_for(self, name: str) -> StrategySettings:
        """The settings of strategy ``name``: its override, else the defaults."""
        return self.overrides.get(name, self.defaults)

    def active(self) -> tuple[str, ...]:
        """The enabled names whose settings have ``enabled = true``, in order."""
        return tuple(n for n in self.enabled if self.settings_for(n).enabled)

    def with_enabled(self, names: Iterable[str]) -> StrategyConfig:
        """A copy whose enabled list is ``names`` (a per-project override).

        Raises
        ------
        ConfigError
            If ``names`` is a string or holds a non-string or a repeat.
        """
        enabled = _names(names, "enabled", "<project>")
        return dataclasses.replace(self, enabled=enabled)

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], *, source: str = "<config>") -> StrategyConfig:
        """Read the ``context.strategies`` table of a parsed TOML document.

        Parameters
        ----------
        data
            The whole document; a missing table gives the defaults.
        source
            Named in errors (the file path).

        Raises
        ------
        ConfigError
            On an unknown key or an invalid value, naming ``source`` and the key.
        """
        table = _table(data, source)
        unknown = sorted(set(table) - set(_TOP_KEYS))
        if unknown:
            raise ConfigError(
                f"{source}: context.strategies: unknown keys {unknown}; known: {list(_TOP_KEYS)}"
            )
        enabled = (
            _names(table["enabled"], "context.strategies.enabled", source)
            if "enabled" in table
            else DEFAULT_ENABLED
        )
        custom_table = table.get("custom", {})
        if not isinstance(custom_table, dict):
            raise ConfigError(f"{source}: context.strategies.custom must be a table")
        custom: dict[str, str] = {}
        for name, spec in custom_table.items():
            if not isinstance(spec, str) or spec.count(":") != 1:
                raise ConfigError(
                    f"{source}: context.strategies.custom.{name}: expected "
                    f'"module:Class", got {spec!r}'
                )
            custom[name] = spec
        defaults = _settings(
            StrategySettings(),
            {k: v for k, v in table.items() if k in _DEFAULT_KEYS},
            "context.strategies",
            source,
        )
        settings_table = table.get("settings", {})
        if not isinstance(settings_table, dict):
            raise ConfigError(f"{source}: context.strategies.settings must be a table")
        overrides: dict[str, StrategySettings] = {}
        for name, values in settings_table.items():
            where = f"context.strategies.settings.{name}"
            if not isinstance(values, dict):
                raise ConfigError(f"{source}: {where} must be a table")
            executor_wide = sorted(set(values) & set(_EXECUTOR_KEYS))
            if executor_wide:
                raise ConfigError(
                    f"{source}: {where}: {executor_wide} is executor-wide; "
                    "set it in [context.strategies]"
                )
            overrides[name] = _settings(defaults, values, where, source)
        return cls(enabled=enabled, custom=custom, defaults=defaults, overrides=overrides)

    @classmethod
    def from_toml(cls, text: str, *, source: str = "<config>") -> StrategyConfig:
        """Parse TOML text (see :meth:`from_mapping`).

        Raises
        ------
        ConfigError
            On invalid TOML or configuration.
        """
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{source}: invalid TOML ({exc})") from None
        return cls.from_mapping(data, source=source)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> StrategyConfig:
        """Read a TOML configuration file (see :meth:`from_mapping`).

        Raises
        ------
        ConfigError
            If the file cannot be read or is invalid.
        """
        return cls.from_mapping(_read_toml(path), source=os.fspath(path))


def _read_toml(path: str | os.PathLike[str]) -> dict[str, Any]:
    try:
        with open(path, "rb") as handle:
            return tomllib.load(handle)
    except FileNotFoundError:
        raise ConfigError(f"{os.fspath(path)}: configuration file not found") from None
    except OSError as exc:
        raise ConfigError(
            f"{os.fspath(path)}: cannot read the configuration file ({exc})"
        ) from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{os.fspath(path)}: invalid TOML ({exc})") from None


def _table(data: Mapping[str, Any], source: str) -> dict[str, Any]:
    context = data.get("context", {})
    if not isinstance(context, dict):
        raise ConfigError(f"{source}: context must be a table")
    table = context.get("strategies", {})
    if not isinstance(table, dict):
        raise ConfigError(f"{source}: context.strategies must be a table")
    return table


def _names(value: Any, where: str, source: str) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, Iterable):
        raise ConfigError(f"{source}: {where} must be a list of strategy names, got {value!r}")
    names = list(value)
    bad = [n for n in names if not isinstance(n, str) or not n]
    if bad:
        raise ConfigError(f"{source}: {where}: names must be non-empty strings, got {bad!r}")
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ConfigError(f"{source}: {where}: {repeated} listed more than once")
    return tuple(names)


def _settings(
    base: StrategySettings, values: Mapping[str, Any], where: str, source: str
) -> StrategySettings:
    unknown = sorted(set(values) - set(SETTING_KEYS))
    if unknown:
        raise ConfigError(f"{source}: {where}: unknown keys {unknown}; known: {list(SETTING_KEYS)}")
    try:
        return base.replace(**dict(values))
    except StrategyError as exc:
        raise ConfigError(f"{source}: {where}: {exc}") from None


def load_config(
    path: str | os.PathLike[str] | None = None,
    *,
    project: str | os.PathLike[str] | None = None,
) -> StrategyConfig:
    """Read the global configuration, then apply a project's enabled list.

    Parameters
    ----------
    path
        The global TOML file; ``None`` for the defaults.
    project
        A project TOML file with ``[context.strategies] enabled = [...]`` and
        nothing else; its list replaces the global one.

    Returns
    -------
    StrategyConfig

    Raises
    ------
    ConfigError
        If a file cannot be read or is invalid, or the project file sets more
        than the enabled list.
    """
    config = StrategyConfig() if path is None else StrategyConfig.load(path)
    if project is None:
        return config
    source = os.fspath(project)
    table = _table(_read_toml(project), source)
    extra = sorted(set(table) - {"enabled"})
    if extra:
        raise ConfigError(
            f"{source}: a project file overrides only context.strategies.enabled; remove {extra}"
        )
    if "enabled" not in table:
        return config
    return dataclasses.replace(
        config, enabled=_names(table["enabled"], "context.strategies.enabled", source)
    )


def load_strategy(spec: str, *, name: str | None = None) -> ContextStrategy:
    """Import and instantiate a strategy from ``"module:Class"``.

    Parameters
    ----------
    spec
        ``"package.module:Attribute"``; the attribute is a class (instantiated
        without arguments) or a strategy instance. Dotted attributes are
        followed (``"pkg.mod:Outer.Inner"``).
    name
        The name the strategy must have (its configuration key).

    Returns
    -------
    ContextStrategy

    Raises
    ------
    StrategyError
        If the module or attribute cannot be found, instantiation fails, the
        object is not a strategy, or its name differs from ``name``.
    """
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise StrategyError(f'custom strategy {spec!r}: expected "module:Class"')
    try:
        target: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise StrategyError(
            f"custom strategy {spec!r}: cannot import {module_name!r} ({exc})"
        ) from None
    for part in attribute.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise StrategyError(f"custom strategy {spec!r}: {part!r} not found") from None
    if isinstance(target, type):
        try:
            target = target()
        except Exception as exc:
            raise StrategyError(
                f"custom strategy {spec!r}: cannot instantiate ({type(exc).__name__}: {exc})"
            ) from None
    _check_shape(target, where=f"custom strategy {spec!r}")
    if name is not None and target.name != name:
        raise StrategyError(
            f"custom strategy {spec!r} is configured as {name!r} but its name is {target.name!r}"
        )
    strategy: ContextStrategy = target
    return strategy


def _check_shape(strategy: object, *, where: str) -> None:
    if not isinstance(strategy, ContextStrategy):
        raise StrategyError(
            f"{where}: {type(strategy).__name__} does not implement ContextStrategy "
            "(name, capabilities, can_handle, assemble, explain)"
        )
    if not isinstance(strategy.name, str) or not strategy.name:
        raise StrategyError(f"{where}: name must be a non-empty string, got {strategy.name!r}")
    if not isinstance(strategy.capabilities, StrategyCapabilities):
        raise StrategyError(
            f"{where}: capabilities must be a StrategyCapabilities, "
            f"got {type(strategy.capabilities).__name__}"
        )


class StrategyRegistry:
    """Strategies by name, in registration order.

    Parameters
    ----------
    strategies
        Strategies to register now.

    Examples
    --------
    >>> registry = StrategyRegistry.builtin()
    >>> registry.names[:3]
    ('simple-keyword', 'semantic-embedding', 'breadth-depth-navigator')
    >>> registry.validate(DEFAULT_ENABLED)
    >>> registry.validate(["simple-keyword", "nope"])
    Traceback (most recent call last):
    ...
    cognoxium.exceptions.StrategyError: invalid strategy registry: rule 1: ... 'nope' ...
    """

    def __init__(self, strategies: Iterable[ContextStrategy] = ()) -> None:
        self._strategies: dict[str, ContextStrategy] = {}
        for strategy in strategies:
            self.register(strategy)

    @classmethod
    def builtin(cls) -> StrategyRegistry:
        """A registry of the six built-in strategies."""
        return cls(builtin_strategies())

    @classmethod
    def from_config(cls, config: StrategyConfig) -> StrategyRegistry:
        """The built-ins plus the configuration's custom strategies.

        Raises
        ------
        StrategyError
            If a custom strategy cannot be loaded or repeats a name.
        """
        registry = cls.builtin()
        for name, spec in config.custom.items():
            registry.register(load_strategy(spec, name=name))
        return registry

    def register(self, strategy: ContextStrategy, *, replace: bool = False) -> ContextStrategy:
        """Add ``strategy`` under its name and return it.

        Parameters
        ----------
        strategy
            An object implementing :class:`ContextStrategy`.
        replace
            Replace a strategy registered under the same name.

        Raises
        ------
        StrategyError
            If it does not implement the protocol, or the name is taken and
            ``replace`` is false.
        """
        _check_shape(strategy, where=f"strategy {getattr(strategy, 'name', strategy)!r}")
        name = strategy.name
        if name in self._strategies and not replace:
            raise StrategyError(
                f"a strategy named {name!r} is already registered; pass replace=True to replace it"
            )
        self._strategies[name] = strategy
        return strategy

    def unregister(self, name: str) -> ContextStrategy:
        """Remove and return the strategy ``name``.

        Raises
        ------
        StrategyError
            If no strategy has that name.
        """
        strategy = self.get(name)
        del self._strategies[name]
        return strategy

    def get(self, name: str) -> ContextStrategy:
        """The strategy registered as ``name``.

        Raises
        ------
        StrategyError
            If no strategy has that name; the message lists the registered ones.
        """
        try:
            return self._strategies[name]
        except KeyError:
            raise StrategyError(
                f"no strategy named {name!r}; registered: {list(self._strategies)}"
            ) from None

    @property
    def names(self) -> tuple[str, ...]:
        """The registered names, in registration order."""
        return tuple(self._strategies)

    def __contains__(self, name: object) -> bool:
        return name in self._strategies

    def __iter__(self) -> Iterator[ContextStrategy]:
        return iter(tuple(self._strategies.values()))

    def __len__(self) -> int:
        return len(self._strategies)

    def problems(self, enabled: Sequence[str]) -> list[str]:
        """Every violation of the three validation rules, one message each.

        Parameters
        ----------
        enabled
            The enabled strategy names.

        Returns
        -------
        list of str
            Empty when the registry is valid; each message starts with
            ``"rule <n>: "``.
        """
        found: list[str] = []
        for name in enabled:
            if name not in self._strategies:
                found.append(
                    f"rule 1: enabled strategy {name!r} is not registered "
                    f"(registered: {list(self._strategies)})"
                )
        for name, strategy in self._strategies.items():
            capabilities = strategy.capabilities
            if not capabilities.backends:
                found.append(
                    f"rule 2: strategy {name!r} declares no backend capability "
                    "(set uses_text, uses_vector, uses_graph or uses_temporal)"
                )
            types = capabilities.resource_types
            unknown = sorted(set(types) - set(RESOURCE_TYPES))
            if not types:
                found.append(
                    f"rule 3: strategy {name!r} declares no resource types "
                    f"(set resource_types to some of {list(RESOURCE_TYPES)})"
                )
            elif unknown:
                found.append(
                    f"rule 3: strategy {name!r} declares unknown resource types {unknown} "
                    f"(known: {list(RESOURCE_TYPES)})"
                )
        return found

    def validate(self, enabled: Sequence[str]) -> None:
        """Check the three validation rules (see the module docstring).

        Raises
        ------
        StrategyError
            Listing every violation.
        """
        found = self.problems(enabled)
        if found:
            raise StrategyError("invalid strategy registry: " + "; ".join(found))


def fallback_chain(
    registry: StrategyRegistry,
    backends: Backends,
    *,
    order: Sequence[str] = FALLBACK_ORDER,
) -> list[ContextStrategy]:
    """The registered strategies of ``order`` whose backends are all present, in order.

    Parameters
    ----------
    registry
        The registry to take the strategies from.
    backends
        The backends available; a strategy is kept only when every backend
        of its capabilities is present.
    order
        Strategy names in order of preference; names not registered are
        left out. Defaults to :data:`FALLBACK_ORDER`.

    Returns
    -------
    list of ContextStrategy
        The registered strategies named in ``order`` whose backends are all
        present, in the order of ``order``; empty when none qualifies.

    Examples
    --------
    >>> from cognoxium import CognitionFrame
    >>> backends = Backends.from_frame(
    ...     CognitionFrame([{"id": "a", "role": "user", "text": "hi"}]), vector=False)
    >>> [s.name for s in fallback_chain(StrategyRegistry.builtin(), backends)]
    ['breadth-depth-navigator', 'simple-keyword']
    >>> [s.name for s in fallback_chain(StrategyRegistry.builtin(), backends.without("graph"))]
    ['simple-keyword']
    """
    return [
        registry.get(name)
        for name in order
        if name in registry and backends.supports(registry.get(name).capabilities)
    ]
