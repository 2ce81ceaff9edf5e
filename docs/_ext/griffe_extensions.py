"""Griffe extensions of the documentation build.

:class:`RstToMarkdown` turns the reStructuredText in docstrings into Markdown;
:class:`PydanticSignatures` gives Pydantic models the keyword signature that
Pydantic generates for them.

The docstrings of the package are numpydoc, written to read well as plain
text and in the terminal; some reStructuredText constructs in them would
show as raw markup on the site. Before mkdocstrings renders them,
:class:`RstToMarkdown` rewrites, in every docstring of the package:

- cross-reference roles (``:class:`~cognoxium.items.model.ContextItem```,
  ``:func:`pack```, ``:meth:`title <target>```, ...): to an autorefs link
  when a reference page renders the target (one page per public
  first-level module, rendering its ``__all__``), else to inline code;
- simple tables (columns framed by ``=====  =====`` rules): to Markdown
  tables;
- hyperlink targets (``.. _name: url``, used as ``name_`` or
  ```name`_``): to Markdown links;
- definition lists (a term line, then its indented definition) in the free
  text before the numpydoc sections: to Markdown definition lists.

Pydantic models document their fields as constructor parameters (numpydoc
``Parameters``), but their ``__init__`` is Pydantic's ``(**data)``, so the
parameters would not match any signature. :class:`PydanticSignatures` gives
each model (a class deriving from ``pydantic.BaseModel``) without an
``__init__`` of its own a keyword-only ``__init__`` with one parameter per
field (annotated public class attribute, inherited fields first; annotation
and default as written, ``<factory>`` for a ``default_factory``), which is
the signature Pydantic generates; ``merge_init_into_class`` shows it on the
class.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

ROLE = re.compile(r":(?:py:)?(?P<role>class|func|meth|mod|data|attr|exc|obj):`(?P<body>[^`]+)`")
TITLED = re.compile(r"^(?P<title>.+?)\s*<(?P<target>[^>]+)>$")
RULE = re.compile(r"^(?P<indent>[ \t]*)=+(?:[ ]+=+)+[ \t]*$")
TARGET = re.compile(r"^[ \t]*\.\. _(?P<name>[^:]+): *(?P<url>\S+)[ \t]*$", re.MULTILINE)
CALLABLE_ROLES = frozenset({"func", "meth"})
FACTORY_DEFAULT = "<factory>"
PYDANTIC_BASES = frozenset({"pydantic.BaseModel", "pydantic.main.BaseModel"})
PYDANTIC_FIELD = frozenset({"Field", "pydantic.Field"})
UNDERLINE = re.compile(r"[ \t]*(?:-{3,}|={3,}|~{3,})[ \t]*")
NUMPY_SECTIONS = frozenset(
    {
        "parameters", "other parameters", "returns", "yields", "receives", "raises", "warns",
        "warnings", "see also", "notes", "references", "examples", "attributes", "methods",
        "classes", "functions", "modules", "deprecated", "type aliases", "type parameters",
    }
)  # fmt: skip


def _pages(package: griffe.Module) -> list[griffe.Module]:
    """The modules whose reference page renders their members: the public first-level ones."""
    return [
        member
        for name, member in package.members.items()
        if not isinstance(member, griffe.Alias) and member.is_module and not name.startswith("_")
    ]


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _rendered(obj: griffe.Object) -> bool:
    """Whether a page that renders ``obj``'s module-level holder also renders ``obj`` itself."""
    if not obj.has_docstring:
        return False
    node: griffe.Object | None = obj
    while node is not None and not node.is_module:
        if _private(node.name):
            return False
        node = node.parent
    return True


def _rendered_path(package: griffe.Module, obj: griffe.Object) -> str | None:
    """The path under which the reference pages render ``obj``, or ``None`` if none does.

    A page renders its module's public members (``__all__``), and the public
    members of those that are classes, with a docstring; a member re-exported
    from another module (an alias in ``__all__``) is rendered on the page of
    the module that exports it, under that module's path.
    """
    pages = _pages(package)
    if obj.is_module:
        return obj.path if any(page.path == obj.path for page in pages) else None
    if not _rendered(obj):
        return None
    top = obj
    while top.parent is not None and not top.parent.is_module:
        top = top.parent
    rest = obj.path[len(top.path) :]
    module = top.parent
    if module is not None and module.path in {page.path for page in pages}:
        return obj.path if top.is_public else None
    # Re-exported: prefer the page of the package that holds the defining module.
    exporters = sorted(pages, key=lambda page: not obj.path.startswith(f"{page.path}."))
    for page in exporters:
        for name in page.exports or ():
            member = page.members.get(name)
            if not isinstance(member, griffe.Alias):
                continue
            try:
                target = member.final_target
            except (griffe.AliasResolutionError, griffe.CyclicAliasError):
                continue
            if target.path == top.path:
                return f"{page.path}.{name}{rest}"
    return None


def _resolve(package: griffe.Module, context: griffe.Object, target: str) -> str | None:
    """The rendered path of ``target`` as seen from ``context``, if the site documents it."""
    target = target.strip().lstrip("~").removesuffix("()")
    module = context.module
    owner = context if context.is_class else context.parent
    candidates = []
    if target.startswith("."):
        candidates.append(f"{package.path}{target}")
        candidates.append(f"{module.path}{target}")
    else:
        candidates.append(target)
        if owner is not None and owner.is_class:
            candidates.append(f"{owner.path}.{target}")
        candidates.append(f"{module.path}.{target}")
        candidates.append(f"{package.path}.{target}")
    for path in candidates:
        if path != package.path and not path.startswith(f"{package.path}."):
            continue
        relative = path.removeprefix(package.path).lstrip(".")
        try:
            found = package[relative] if relative else package
            final = found.final_target if isinstance(found, griffe.Alias) else found
        except (KeyError, ValueError, griffe.AliasResolutionError, griffe.CyclicAliasError):
            continue
        return _rendered_path(package, final)
    return None


def _roles(text: str, package: griffe.Module, context: griffe.Object) -> str:
    """Replace cross-reference roles by autorefs links or inline code."""

    def replace(match: re.Match[str]) -> str:
        body = match["body"].strip()
        titled = TITLED.match(body)
        if titled:
            title, target = titled["title"], titled["target"]
        else:
            target = body
            title = body.lstrip("~").rsplit(".", 1)[-1] if body.startswith("~") else body
            title = title.lstrip(".")
            if match["role"] in CALLABLE_ROLES and not title.endswith(")"):
                title += "()"
        path = _resolve(package, context, target)
        return f"[`{title}`][{path}]" if path else f"`{title}`"

    return ROLE.sub(replace, text)


def _cells(line: str, starts: list[int]) -> list[str]:
    """The cells of one table line: each column runs to the start of the next one."""
    stops: list[int | None] = [*starts[1:], None]
    return [line[start:stop].strip() for start, stop in zip(starts, stops, strict=True)]


def _table(lines: list[str], indent: str, starts: list[int]) -> list[str]:
    """One simple table (its lines between the first and the last rule) as Markdown."""
    rows: list[list[str]] = []
    header: list[str] | None = None
    for line in lines:
        body = line[len(indent) :] if line.startswith(indent) else line.lstrip()
        if RULE.match(line):
            if header is None and rows:
                header, rows = rows[0], rows[1:]
            continue
        if not body.strip():
            continue
        cells = _cells(body, starts)
        if rows and not cells[0]:
            # A continuation line: its cells extend the row above.
            rows[-1] = [f"{a} {b}".strip() for a, b in zip(rows[-1], cells, strict=True)]
        else:
            rows.append(cells)
    if header is None:
        header = [""] * len(starts)

    def row(cells: list[str]) -> str:
        return indent + "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"

    return [row(header), indent + "|" + "|".join(" --- " for _ in starts) + "|", *map(row, rows)]


def _tables(text: str) -> str:
    """Replace simple tables (a rule, header, rule, rows, rule) by Markdown tables."""
    lines = text.split("\n")
    out: list[str] = []
    index = 0
    while index < len(lines):
        rule = RULE.match(lines[index])
        if not rule:
            out.append(lines[index])
            index += 1
            continue
        indent = rule["indent"]
        starts = [m.start() for m in re.finditer(r"=+", lines[index][len(indent) :])]
        rules = [index]
        end = index + 1
        while end < len(lines) and len(rules) < 3:
            if lines[end].strip() and not lines[end].startswith(indent):
                break
            if lines[end].rstrip() == lines[index].rstrip():
                rules.append(end)
            end += 1
        if len(rules) < 2:
            out.append(lines[index])
            index += 1
            continue
        last = rules[-1]
        if out and out[-1].strip():
            out.append("")
        out.extend(_table(lines[index : last + 1], indent, starts))
        if last + 1 < len(lines) and lines[last + 1].strip():
            out.append("")
        index = last + 1
    return "\n".join(out)


def _targets(text: str) -> str:
    """Replace hyperlink targets and their references by Markdown links."""
    targets = {m["name"].strip(): m["url"] for m in TARGET.finditer(text)}
    if not targets:
        return text
    text = TARGET.sub("", text)
    for name, url in targets.items():
        quoted = re.escape(name)
        text = re.sub(rf"`{quoted}`_(?!\w)", f"[{name}]({url})", text)
        text = re.sub(rf"(?<![\w`]){quoted}_(?!\w)", f"[{name}]({url})", text)
    return re.sub(r"\n{3,}", "\n\n", text).strip("\n")


def _definitions(text: str) -> str:
    """Mark the definition lists of the free text before the first numpydoc section.

    In reStructuredText a paragraph line directly followed by an indented
    block is a definition list item; Markdown would run the two together.
    The indented block's first line gets the ``:   `` marker of a Markdown
    definition (the ``def_list`` extension). Numpydoc sections, whose
    entries have the same shape, are parsed by Griffe and left alone.
    """
    lines = text.split("\n")
    end = next(
        (
            index
            for index in range(len(lines) - 1)
            if lines[index].strip().lower() in NUMPY_SECTIONS
            and UNDERLINE.fullmatch(lines[index + 1])
        ),
        len(lines),
    )
    fence = False
    out = lines[:1]
    for index in range(1, len(lines)):
        line, term = lines[index], lines[index - 1]
        if line.lstrip().startswith("```"):
            fence = not fence
        above = lines[index - 2] if index >= 2 else ""
        if (
            index < end
            and not fence
            and line.startswith("    ")
            and line.strip()
            and term.strip()
            and not term.startswith((" ", "\t", ">>>", "...", "|", "```"))
            # the term starts a paragraph or a section, or follows the definition above it
            and (not above.strip() or above.startswith("    ") or UNDERLINE.fullmatch(above))
        ):
            if above.startswith("    "):
                out.insert(len(out) - 1, "")  # Markdown needs a blank line between items
            out.append(":   " + line[4:])
        else:
            out.append(line)
    return "\n".join(out)


def convert(text: str, package: griffe.Module, context: griffe.Object) -> str:
    """``text`` with its reStructuredText roles, tables, links and definitions as Markdown."""
    return _roles(_definitions(_tables(_targets(text))), package, context)


class RstToMarkdown(griffe.Extension):
    """Rewrite the docstrings of the loaded package (see the module docstring)."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        """Convert every docstring of ``pkg`` once it is fully loaded."""
        stack: list[griffe.Object] = [pkg]
        seen: set[str] = set()
        while stack:
            obj = stack.pop()
            if obj.path in seen:
                continue
            seen.add(obj.path)
            if obj.docstring is not None:
                obj.docstring.value = convert(obj.docstring.value, pkg, obj)
            stack.extend(
                member for member in obj.members.values() if not isinstance(member, griffe.Alias)
            )


def _is_model(cls: griffe.Class, seen: frozenset[str] = frozenset()) -> bool:
    """Whether ``cls`` derives from Pydantic's ``BaseModel`` (directly or through the package)."""
    for base in cls.bases:
        path = base.canonical_path if isinstance(base, griffe.Expr) else str(base)
        if path in PYDANTIC_BASES:
            return True
    return any(
        _is_model(base, seen | {cls.path}) for base in cls.resolved_bases if base.path not in seen
    )


def _own_fields(model: griffe.Class) -> dict[str, griffe.Attribute]:
    """Annotated, public, non-``ClassVar`` class attributes: what Pydantic makes fields of."""
    fields = {}
    for name, member in model.members.items():
        if not isinstance(member, griffe.Attribute) or member.annotation is None:
            continue
        if "property" in member.labels:  # a (cached or computed) property, not a field
            continue
        if name.startswith("_") or name == "model_config":
            continue
        if str(member.annotation).startswith(("ClassVar", "typing.ClassVar")):
            continue
        fields[name] = member
    return fields


def _fields(model: griffe.Class) -> dict[str, griffe.Attribute]:
    """The fields of ``model``, inherited ones first, in definition order."""
    fields: dict[str, griffe.Attribute] = {}
    for base in reversed(model.resolved_bases):
        if _is_model(base):
            fields.update(_fields(base))
    fields.update(_own_fields(model))
    return fields


def _default(field: griffe.Attribute) -> str | griffe.Expr | None:
    """The default a field shows: its value, or ``Field(...)``'s default or factory."""
    value = field.value
    if not isinstance(value, griffe.ExprCall) or str(value.function) not in PYDANTIC_FIELD:
        return value
    keywords = {a.name: a.value for a in value.arguments if isinstance(a, griffe.ExprKeyword)}
    positional = [a for a in value.arguments if not isinstance(a, griffe.ExprKeyword)]
    if "default" in keywords:
        return keywords["default"]
    if positional and str(positional[0]) != "...":
        return positional[0]
    if "default_factory" in keywords:
        return FACTORY_DEFAULT
    return None


class PydanticSignatures(griffe.Extension):
    """Give Pydantic models their generated keyword signature (see the module docstring)."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        """Add ``__init__`` to every Pydantic model of ``pkg`` that lacks one."""
        stack: list[griffe.Object] = [pkg]
        while stack:
            obj = stack.pop()
            stack.extend(
                member
                for member in obj.members.values()
                if not isinstance(member, griffe.Alias) and (member.is_module or member.is_class)
            )
            if not obj.is_class or "__init__" in obj.members or not _is_model(obj):
                continue
            parameters = [griffe.Parameter("self", kind=griffe.ParameterKind.positional_or_keyword)]
            parameters += [
                griffe.Parameter(
                    name,
                    annotation=field.annotation,
                    kind=griffe.ParameterKind.keyword_only,
                    default=_default(field),
                )
                for name, field in _fields(obj).items()
            ]
            init = griffe.Function("__init__", parameters=griffe.Parameters(*parameters))
            obj.set_member("__init__", init)
