"""Contracts: the short, stable text that tells a model what a resource offers (AGP §3.1).

A code resource's contract lists its public functions and classes with their signatures and the
first line of their docstrings; a prompt's lists the ``{fields}`` it must be formatted with; a
skill's says when it applies. ``consolidated`` joins the contracts of many resources into one
skills.md-style document.
"""

from __future__ import annotations

import ast
import string
from collections.abc import Sequence

from evobus.schemas.registry import Resource


def _first_doc_line(node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> str:
    doc = (ast.get_docstring(node) or "").strip().splitlines()
    return f"  # {doc[0]}" if doc else ""


def _signatures(source: str) -> list[str]:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return ["  (source does not parse as Python)"] if source.strip() else []
    lines = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and not node.name.startswith(
            "_"
        ):
            prefix = "async " if isinstance(node, ast.AsyncFunctionDef) else ""
            signature = f"{prefix}{node.name}({ast.unparse(node.args)})"
            if node.returns is not None:
                signature += f" -> {ast.unparse(node.returns)}"
            lines.append(f"  {signature}{_first_doc_line(node)}")
        elif isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
            lines.append(f"  class {node.name}{_first_doc_line(node)}")
    return lines


def _template_fields(source: str) -> list[str]:
    try:
        parsed = list(string.Formatter().parse(source))
    except ValueError:
        return []
    return sorted({field for _, field, _, _ in parsed if field})


def generate_contract(resource: Resource) -> str:
    """The contract of one resource, from its kind, name, description and source."""
    description = " ".join(resource.description.split())
    match resource.kind:
        case "tool":
            head = f"tools.{resource.name}: {description}".rstrip(": ")
            return "\n".join([head, *_signatures(resource.source)])
        case "skill":
            head = f"skill {resource.name}" + (f" — use when: {description}" if description else "")
            return "\n".join([head, *_signatures(resource.source)])
        case "prompt":
            head = f"prompt {resource.name}: {description}".rstrip(": ")
            fields = _template_fields(resource.source)
            return head + (f"\n  fields: {', '.join(fields)}" if fields else "")
        case "agent" | "environment":
            head = f"{resource.kind} {resource.name}: {description}".rstrip(": ")
            return "\n".join([head, *_signatures(resource.source)])


def consolidated(kind: str, resources: Sequence[Resource]) -> str:
    """One document with the contracts of ``resources`` (active ones of one ``kind``)."""
    if not resources:
        return f"# {kind}s\n\n(none registered)\n"
    body = "\n\n".join(r.contract or generate_contract(r) for r in resources)
    return f"# {kind}s\n\n{body}\n"
