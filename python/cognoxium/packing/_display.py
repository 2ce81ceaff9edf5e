"""How packs and manifests show themselves: one-line reprs and escaped HTML for notebooks.

Every value that reaches HTML is escaped with :func:`html.escape` (Polars
escapes the cells of the tables it renders), so item content such as
``<script>`` shows as text.
"""

from __future__ import annotations

import html
from collections.abc import Sequence

import polars as pl

__all__ = ["HTML_ROWS", "fields_html", "table_html"]

HTML_ROWS = 20
"""Rows of a table (manifest entries, packed items) shown in a notebook."""


def fields_html(title: str, fields: Sequence[tuple[str, object]]) -> str:
    """A titled two-column HTML table of ``(name, value)`` pairs, all escaped.

    Examples
    --------
    >>> fields_html("pack", [("label", "<b>")])
    '<p><b>pack</b></p><table><tr><th>label</th><td>&lt;b&gt;</td></tr></table>'
    """
    rows = "".join(
        f"<tr><th>{html.escape(name)}</th><td>{html.escape(str(value))}</td></tr>"
        for name, value in fields
    )
    return f"<p><b>{html.escape(title)}</b></p><table>{rows}</table>"


def table_html(title: str, frame: pl.DataFrame, rows: int = HTML_ROWS) -> str:
    """A titled HTML table of the first ``rows`` rows of ``frame``, every column shown.

    The title says how many of the frame's rows are shown; cells are escaped
    by Polars' HTML formatter.
    """
    shown = min(rows, frame.height)
    head = f"{title} (first {shown} of {frame.height})" if shown < frame.height else title
    with pl.Config(tbl_rows=rows, tbl_cols=-1):
        table = frame.head(rows)._repr_html_()
    return f"<p><b>{html.escape(head)}</b></p>{table}"
