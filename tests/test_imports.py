"""What each entry point loads: ``import cognoxium``, the core, and the command line's help.

Each case runs in a fresh interpreter and reads ``sys.modules``: the package
itself loads only its errors, a first use of the core (frames, items, packs)
loads the engine but none of the optional paths, and ``cognoxium --help``
loads neither. The timings are in ``benchmarks/bench_import.py``.
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
import textwrap

import pytest

import cognoxium

# Optional paths: each loads only with the feature that needs it.
OPTIONAL = (
    "onnxruntime",
    "tokenizers",
    "ray",
    "openai",
    "anthropic",
    "presidio_analyzer",
    "spacy",
    "langchain_core",
    "llama_index",
    "rich",
    "typer",
    "bm25s",
    "Stemmer",
    "phonenumbers",
    "imagesize",
    "cognoxium.strategies",
    "cognoxium.formats",
    "cognoxium.continuity",
    "cognoxium.app",
    "cognoxium.governance.redaction",
    "cognoxium.retrieval.embeddings",
    "cognoxium.retrieval.scope",
    "cognoxium.retrieval.learned",
)
# The engine's heavy dependencies and layers, which the command line's help does
# without (pydantic is not among them: Typer itself loads it for a command's options).
ENGINE = (
    "polars",
    "pyarrow",
    "numpy",
    "sqlglot",
    "tiktoken",
    "cognoxium.items.model",
    "cognoxium.engine",
    "cognoxium.frame",
    "cognoxium.packing",
    "cognoxium.tokens.profiles",
)


def _loaded(code: str) -> dict[str, object]:
    """Run ``code`` in a fresh interpreter; its stdout, and the modules then loaded."""
    script = textwrap.dedent(
        """
        import contextlib, io, json, sys
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            try:
        {code}
            except SystemExit as exc:
                assert exc.code in (0, None), exc.code
        print(json.dumps({{"stdout": out.getvalue(), "modules": sorted(sys.modules)}}))
        """
    ).format(code=textwrap.indent(textwrap.dedent(code), " " * 8))
    run = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=False
    )
    assert run.returncode == 0, run.stderr
    result: dict[str, object] = json.loads(run.stdout)
    return result


def _present(modules: object, names: tuple[str, ...]) -> list[str]:
    assert isinstance(modules, list)
    return [name for name in names if name in modules]


def test_import_cognoxium_loads_only_the_errors() -> None:
    modules = _loaded("import cognoxium")["modules"]
    assert isinstance(modules, list)
    assert [m for m in modules if m.startswith("cognoxium")] == [
        "cognoxium",
        "cognoxium._lazy",
        "cognoxium.exceptions",
    ]
    assert _present(modules, (*OPTIONAL, *ENGINE, "pydantic")) == []


def test_the_core_loads_no_optional_path() -> None:
    modules = _loaded(
        """
        from cognoxium import CognitionFrame, ContextItem, pack
        frame = CognitionFrame([{"id": "a", "role": "user", "text": "hello"}])
        assert frame.pack(100).ids == ["a"]
        """
    )["modules"]
    assert _present(modules, ("polars", "cognoxium.engine", "cognoxium.packing")) == [
        "polars",
        "cognoxium.engine",
        "cognoxium.packing",
    ]
    assert _present(modules, OPTIONAL) == []


@pytest.mark.parametrize("argv", [["--help"], ["pack", "--help"], ["inspect", "--help"]])
def test_help_loads_no_engine(argv: list[str]) -> None:
    loaded = _loaded(
        f"""
        sys.argv = ["cognoxium", *{argv!r}]
        from cognoxium.app.cli import main
        main()
        """
    )
    assert "Usage: cognoxium" in str(loaded["stdout"])
    assert _present(loaded["modules"], ENGINE) == []


def test_rank_strategies_lowers_without_importing_strategies() -> None:
    # The lowering imports the handler of rank("strategies") on first use.
    loaded = _loaded(
        """
        import sys
        from cognoxium import CognitionFrame
        frame = CognitionFrame([
            {"id": "t1", "role": "user", "text": "I adopted a cat named Miso."},
            {"id": "t2", "role": "user", "text": "Stocks fell today."},
        ])
        ranked = frame.rank("strategies", query="cat name", budget=200, model="local_hash")
        assert "cognoxium.strategies" not in sys.modules
        print(ranked.collect()["rank"].to_list())
        """
    )
    scores = json.loads(str(loaded["stdout"]))
    assert len(scores) == 2
    assert scores[0] > scores[1]
    assert "cognoxium.strategies.ranking" in _present(
        loaded["modules"], ("cognoxium.strategies.ranking",)
    )


PACKAGES = (
    "cognoxium",
    "cognoxium.app",
    "cognoxium.continuity",
    "cognoxium.formats",
    "cognoxium.frame",
    "cognoxium.governance",
    "cognoxium.items",
    "cognoxium.packing",
    "cognoxium.retrieval",
    "cognoxium.strategies",
    "cognoxium.tokens",
)


@pytest.mark.parametrize("name", PACKAGES)
def test_every_lazy_export_resolves_and_is_listed(name: str) -> None:
    package = importlib.import_module(name)
    for export in package.__all__:
        value = getattr(package, export)
        assert value is not None, export
    assert set(package.__all__) <= set(dir(package))


def test_a_missing_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="module 'cognoxium' has no attribute 'nope'"):
        _ = cognoxium.nope  # type: ignore[attr-defined]
    assert not hasattr(cognoxium.items, "no_such_module")


def test_a_submodule_is_an_attribute_of_its_package() -> None:
    # `import cognoxium` once loaded every subpackage; reaching one by attribute still works.
    assert cognoxium.frame.CognitionFrame is cognoxium.CognitionFrame
    assert cognoxium.strategies.registry.StrategyRegistry is not None
