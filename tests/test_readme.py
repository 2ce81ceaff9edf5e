"""The README's Python examples run as written, from the repository root."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BLOCKS = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), flags=re.S)


def test_readme_has_python_examples() -> None:
    assert BLOCKS


@pytest.mark.parametrize("code", BLOCKS)
def test_readme_example_runs(code: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    namespace: dict[str, object] = {}
    exec(compile(code, "README.md", "exec"), namespace)
    pack = namespace["pack"]
    assert pack.used_tokens <= pack.budget  # type: ignore[attr-defined]
    assert pack.messages  # type: ignore[attr-defined]


def test_readme_pack_synopsis_names_every_flag_of_pack_help() -> None:
    from typer.main import get_command

    from cognoxium.app.cli import app

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    synopsis = re.search(r"`cognoxium pack ITEMS REQUESTS([^`]*)`", readme)
    assert synopsis is not None, "the README has no `cognoxium pack ITEMS REQUESTS ...` synopsis"
    command = get_command(app).commands["pack"]  # type: ignore[attr-defined]
    flags = {
        opt
        for param in command.params
        for opt in (*param.opts, *param.secondary_opts)
        if opt.startswith("--")
    }
    assert "--gap-note" in flags
    assert set(re.findall(r"--[a-z][a-z-]*", synopsis[1])) == flags
