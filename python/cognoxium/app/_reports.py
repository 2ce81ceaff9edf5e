"""The tables ``cognoxium locomo`` prints: evidence recall per budget and category, and per method.

Loaded by the command's body only, so ``cognoxium --help`` needs no Rich table.
"""

from __future__ import annotations

from typing import Any

from rich.table import Table

from cognoxium.app.locomo_dataset import CATEGORY_NAMES

__all__ = ["comparison_table", "locomo_tables"]


def _fmt(value: float | None, spec: str = ".3f") -> str:
    return "-" if value is None else format(value, spec)


def comparison_table(report: dict[str, Any]) -> Table:
    """Recall 1-4 of the run's rank method and the compared ones, overall and per split."""
    table = Table(
        title="Rank methods compared (recall 1-4)",
        caption=(
            "tuning = conversations the default settings were chosen on "
            f"({', '.join(report['settings']['tuning_conversations']) or 'none'}); "
            "held out = the others."
        ),
        caption_justify="left",
    )
    for header in ("rank", "budget", "all", "tuning", "held out"):
        table.add_column(header, justify="left" if header == "rank" else "right")
    runs = {report["settings"]["rank"]: report, **report["compare"]}
    for method, run in runs.items():
        for budget, figures in sorted(run["budgets"].items(), key=lambda kv: int(kv[0])):
            splits = [
                run["splits"][name]["budgets"].get(budget, {}).get("recall_answerable")
                for name in ("tuning", "held_out")
            ]
            table.add_row(method, budget, _fmt(figures["recall_answerable"]), *map(_fmt, splits))
    return table


def locomo_tables(report: dict[str, Any]) -> tuple[Table, Table]:
    """The overall figures and the per-category recall, one row per budget."""
    rows = sorted(report["budgets"].items(), key=lambda kv: int(kv[0]))
    overall = Table(
        title="LoCoMo evidence recall (mean per question)",
        caption=(
            "recall 1-4 = mean per-question evidence recall (share of a question's evidence "
            "turns that are packed) over categories 1-4; recall all = the same over all "
            "categories; all found 1-4 = share of questions of categories 1-4 whose evidence "
            "is all packed; tokens = mean tokens used per pack; packs/s = packs per second "
            "of packing. Questions without valid evidence are excluded."
        ),
        caption_justify="left",
    )
    for header in ("budget", "recall 1-4", "recall all", "all found 1-4", "tokens", "packs/s"):
        overall.add_column(header, justify="right")
    for budget, row in rows:
        overall.add_row(
            budget,
            _fmt(row["recall_answerable"]),
            _fmt(row["recall_all"]),
            _fmt(row["hit_rate_answerable"]),
            _fmt(row.get("mean_used_tokens"), ".0f"),
            _fmt(row.get("packs_per_s"), ".1f"),
        )
    per_category = Table(
        title="Recall per question category",
        caption=(
            "Mean per-question evidence recall of each LoCoMo question category "
            "(5 adversarial: questions the conversation does not answer); - = no question."
        ),
        caption_justify="left",
    )
    per_category.add_column("budget", justify="right")
    for category, name in CATEGORY_NAMES.items():
        per_category.add_column(f"{category} {name}", justify="right")
    for budget, row in rows:
        per = row["per_category"]
        per_category.add_row(
            budget, *[_fmt(per.get(str(c), {}).get("recall")) for c in CATEGORY_NAMES]
        )
    return overall, per_category
