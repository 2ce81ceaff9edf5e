"""The documentation site builds cleanly, covers the public API, and its examples run.

The site is built once per session with ``mkdocs build --strict`` into a
temporary directory (any warning fails the build: a broken link or anchor, an
unresolved cross-reference, a docstring that does not match its signature).
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import json
import os
import re
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType

import pytest

pytest.importorskip("mkdocs", reason="needs the docs extra: pip install -e '.[docs]'")
pytest.importorskip("mkdocstrings_handlers.python", reason="needs the docs extra")
pytest.importorskip("mkdocs_typer2", reason="needs the docs extra")

import yaml

import cognoxium

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PACKAGE = ROOT / "python" / "cognoxium"
PYTHON_BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
JSON_BLOCK = re.compile(r"^```json\n(.*?)^```", re.S | re.M)
RST_LEFTOVERS = re.compile(
    r":(?:class|func|meth|mod|data|attr|exc|obj):`|^\s*={3,}(?: +={3,})+\s*$", re.M
)


def _config() -> dict[str, object]:
    config: dict[str, object] = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    return config


def _nav_pages(node: object) -> list[str]:
    if isinstance(node, str):
        return [node]
    if isinstance(node, list):
        return [page for entry in node for page in _nav_pages(entry)]
    if isinstance(node, dict):
        return [page for value in node.values() for page in _nav_pages(value)]
    return []


def _public_modules() -> list[str]:
    """The package's public first-level modules and subpackages, by dotted name."""
    names = [path.stem for path in PACKAGE.glob("*.py") if path.stem != "__init__"]
    names += [path.parent.name for path in PACKAGE.glob("*/__init__.py")]
    return sorted(f"cognoxium.{name}" for name in names if not name.startswith("_"))


def _reference_pages() -> dict[str, Path]:
    """Module name -> reference page, from the ``::: module`` directive that opens each page."""
    pages = {}
    for page in sorted((DOCS / "reference").glob("*.md")):
        match = re.match(r"::: (cognoxium(?:\.\w+)*)\s*$", page.read_text().splitlines()[0])
        if match:
            pages[match[1]] = page
    return pages


@pytest.fixture(scope="session")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    build = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    log = build.stdout + build.stderr
    assert build.returncode == 0, f"mkdocs build --strict failed:\n{log}"
    warnings = [line for line in log.splitlines() if line.startswith(("WARNING", "ERROR"))]
    assert not warnings, "\n".join(warnings)
    return out


def test_every_public_module_has_a_reference_page_in_the_nav() -> None:
    pages = _reference_pages()
    nav = _nav_pages(_config()["nav"])
    first_level = sorted(name for name in pages if name.count(".") <= 1)
    assert first_level == ["cognoxium", *_public_modules()]
    # A page of its own only for a public submodule whose names its subpackage
    # does not export (an optional extra's adapter, the command line).
    for name in sorted(set(pages) - set(first_level)):
        package, _, module = name.rpartition(".")
        assert not module.startswith("_"), name
        exported = set(getattr(importlib.import_module(package), "__all__", ()))
        assert not exported & set(importlib.import_module(name).__all__), name
    missing = [str(page.relative_to(DOCS)) for page in pages.values()]
    missing = [page for page in missing if page not in nav]
    assert not missing, f"reference pages not in the nav of mkdocs.yml: {missing}"


def test_every_nav_page_exists() -> None:
    nav = _nav_pages(_config()["nav"])
    assert nav
    assert [page for page in nav if not (DOCS / page).is_file()] == []


def test_the_package_page_names_every_top_level_export() -> None:
    text = (DOCS / "reference" / "cognoxium.md").read_text()
    assert [name for name in cognoxium.__all__ if f"`{name}`" not in text] == []


def test_every_name_the_package_page_lists_is_a_top_level_export() -> None:
    # The page listed from_anthropic_messages, which `from cognoxium import` refused.
    text = (DOCS / "reference" / "cognoxium.md").read_text()
    listed = re.findall(r"\[`(\w+)`\]\[cognoxium\.", text)
    assert listed
    assert [name for name in listed if name not in cognoxium.__all__] == []


def test_site_builds_in_strict_mode(site: Path) -> None:
    assert (site / "index.html").is_file()
    assert (site / "reference" / "frame" / "index.html").is_file()


def _documented(module: ModuleType) -> list[str]:
    """The exported classes and functions of ``module`` that carry a docstring."""
    names = []
    for name in getattr(module, "__all__", ()):
        value = getattr(module, name)
        if (inspect.isclass(value) or inspect.isfunction(value)) and inspect.getdoc(value):
            names.append(name)
    return names


@pytest.mark.parametrize("module_name", _public_modules())
def test_reference_page_renders_every_export(site: Path, module_name: str) -> None:
    module = importlib.import_module(module_name)
    page = site / "reference" / module_name.split(".", 1)[1] / "index.html"
    html = page.read_text(encoding="utf-8")
    missing = [name for name in _documented(module) if f'id="{module_name}.{name}"' not in html]
    assert not missing, f"{page.relative_to(site)} lacks {missing}"


def test_docstrings_are_rendered_as_markdown(site: Path) -> None:
    leftovers = {
        str(page.relative_to(site)): RST_LEFTOVERS.findall(page.read_text(encoding="utf-8"))
        for page in (site / "reference").rglob("*.html")
    }
    assert {page: found for page, found in leftovers.items() if found} == {}
    items = (site / "reference" / "items" / "index.html").read_text(encoding="utf-8")
    assert "<table>" in items
    assert 'href="../items/#cognoxium.items.ContextItem"' in (
        site / "reference" / "frame" / "index.html"
    ).read_text(encoding="utf-8")


def test_cli_page_documents_every_command(site: Path) -> None:
    from typer.main import get_command

    from cognoxium.app.cli import app

    html = (site / "cli" / "index.html").read_text(encoding="utf-8")
    commands = sorted(get_command(app).commands)  # type: ignore[attr-defined]
    assert commands
    assert [name for name in commands if f"cognoxium {name}" not in html] == []


DOC_PAGES = sorted(
    page for page in DOCS.rglob("*.md") if PYTHON_BLOCK.search(page.read_text(encoding="utf-8"))
)


def test_pages_with_examples_are_found() -> None:
    assert {"index.md", "how-to/batch.md", "how-to/redact.md"} <= {
        str(page.relative_to(DOCS)) for page in DOC_PAGES
    }


@pytest.mark.parametrize("page", DOC_PAGES, ids=lambda p: str(p.relative_to(DOCS)))
def test_page_examples_run(page: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A page's Python blocks run in order, in one namespace, from the repository root."""
    monkeypatch.chdir(ROOT)
    namespace: dict[str, object] = {"__name__": f"docs.{page.stem}"}
    for index, code in enumerate(PYTHON_BLOCK.findall(page.read_text(encoding="utf-8"))):
        exec(compile(code, f"{page.relative_to(ROOT)}[{index}]", "exec"), namespace)


def _section_json_blocks(page: Path, heading: str) -> list[str]:
    """The ```json blocks of the section of ``page`` that opens with ``heading``."""
    text = page.read_text(encoding="utf-8")
    start = text.index(f"\n{heading}\n")
    end = text.find("\n## ", start + 1)
    return JSON_BLOCK.findall(text[start : None if end < 0 else end])


def _json_values(block: str) -> list[dict[str, object]]:
    """The JSON objects of a block, one after another (a record may be wrapped over lines)."""
    decoder = json.JSONDecoder()
    values, at = [], 0
    while block[at:].strip():
        at += len(block[at:]) - len(block[at:].lstrip())
        value, at = decoder.raw_decode(block, at)
        values.append(value)
    return values


def test_the_tool_call_records_of_the_items_page_pack_as_documented(tmp_path: Path) -> None:
    """The JSONL of *Tool calls* reads and packs into the messages the page shows."""
    from cognoxium import CognitionFrame
    from cognoxium.items import read_items, records_to_frame

    records_block, sent_block = _section_json_blocks(
        DOCS / "concepts" / "items.md", "## Tool calls"
    )
    records = _json_values(records_block)
    jsonl = tmp_path / "items.jsonl"
    jsonl.write_text("".join(json.dumps(record) + "\n" for record in records), encoding="utf-8")
    frames = {"read_items": read_items(jsonl), "records_to_frame": records_to_frame(records)}
    for name, frame in frames.items():
        pack = CognitionFrame(frame).pack(1000, as_of=datetime(2026, 1, 1, tzinfo=UTC))
        reasons = dict(pack.manifest.to_polars().select("id", "reason").iter_rows())
        assert reasons == dict.fromkeys(reasons, "selected"), name
        assert [record["id"] for record in records] == list(reasons), name
        messages = pack.to_openai()
        call = next(i for i, message in enumerate(messages) if message.get("tool_calls"))
        assert messages[call : call + 2] == _json_values(sent_block), name


def _extensions() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "griffe_extensions", DOCS / "_ext" / "griffe_extensions.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_rst_simple_table_becomes_markdown() -> None:
    ext = _extensions()
    text = (
        "Intro.\n\n"
        "======  ============\n"
        "action  effect\n"
        "======  ============\n"
        "allow   none\n"
        "error   the pack fails,\n"
        "        naming the item\n"
        "======  ============\n"
        "After."
    )
    assert ext._tables(text) == (
        "Intro.\n\n"
        "| action | effect |\n"
        "| --- | --- |\n"
        "| allow | none |\n"
        "| error | the pack fails, naming the item |\n"
        "\nAfter."
    )


def test_rst_definitions_and_targets_become_markdown() -> None:
    ext = _extensions()
    text = (
        "Files:\n\n``a.jsonl``\n    First.\n``b.jsonl``\n    Second.\n\n"
        "Parameters\n----------\nx\n    An x.\n"
    )
    assert ext._definitions(text) == (
        "Files:\n\n``a.jsonl``\n:   First.\n\n``b.jsonl``\n:   Second.\n\n"
        "Parameters\n----------\nx\n    An x.\n"
    )
    section = "Commands\n--------\n``pack``\n    Pack.\n``inspect``\n    Inspect.\n"
    assert ext._definitions(section) == (
        "Commands\n--------\n``pack``\n:   Pack.\n\n``inspect``\n:   Inspect.\n"
    )
    linked = ext._targets("Runs on `bm25s`_ and bm25s_.\n\n.. _bm25s: https://example.org/bm25s\n")
    assert (
        linked
        == "Runs on [bm25s](https://example.org/bm25s) and [bm25s](https://example.org/bm25s)."
    )
