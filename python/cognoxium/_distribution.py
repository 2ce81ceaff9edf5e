"""The name the package is installed by, and the install command for an extra.

The import name is ``cognoxium``; the distribution on the package index is
``cognoxium-engine`` (``cognoxium`` there is a different project). Every
message that tells a user what to install is built here, so none names the
other project.
"""

from __future__ import annotations

from typing import Final

__all__ = ["DISTRIBUTION", "install_command"]

DISTRIBUTION: Final = "cognoxium-engine"
"""The distribution name: what ``pip install`` and ``importlib.metadata`` know it by."""


def install_command(extra: str | None = None) -> str:
    """The ``pip install`` command that installs the package, with one extra if given.

    Parameters
    ----------
    extra
        The name of an optional-dependency group of the distribution
        (``"ray"``, ``"presidio"``, ``"langchain"``, ...), or None for the
        base install.

    Returns
    -------
    str
        A shell command, the requirement quoted so that shells do not expand
        the brackets.

    Examples
    --------
    >>> install_command("ray")
    "pip install 'cognoxium-engine[ray]'"
    >>> install_command()
    'pip install cognoxium-engine'
    """
    if extra is None:
        return f"pip install {DISTRIBUTION}"
    return f"pip install '{DISTRIBUTION}[{extra}]'"
