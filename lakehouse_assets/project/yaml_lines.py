"""YAML that remembers where each value was written, so an error can name the line.

Mappings load as `Located` dicts and sequences as `LocatedList`s: plain dicts and
lists that also carry the 1-based line of the node and of each key or item.
A key written twice in one mapping is an error (plain YAML keeps the last one
silently, which hides a duplicated table).
"""

from __future__ import annotations

from typing import Any

import yaml

from ..errors import DeclarationError


class Located(dict):
    line: int = 0
    lines: dict[str, int]


class LocatedList(list):
    line: int = 0
    lines: list[int]


class _Loader(yaml.SafeLoader):
    file = "<declaration>"

    def construct_mapping(self, node, deep=False):  # type: ignore[override]
        self.flatten_mapping(node)
        result = Located()
        result.line = node.start_mark.line + 1
        result.lines = {}
        for key_node, value_node in node.value:
            key = self.construct_object(key_node, deep=True)
            if not isinstance(key, (str, int, float, bool)):
                raise DeclarationError(self.file, key_node.start_mark.line + 1, f"a key must be text, not {key!r}")
            key = str(key)
            if key in result:
                raise DeclarationError(
                    self.file, key_node.start_mark.line + 1,
                    f"{key!r} is written twice in the same mapping (first on line {result.lines[key]})",
                )
            result[key] = self.construct_object(value_node, deep=True)
            result.lines[key] = key_node.start_mark.line + 1
        return result

    def construct_sequence(self, node, deep=False):  # type: ignore[override]
        result = LocatedList(self.construct_object(child, deep=True) for child in node.value)
        result.line = node.start_mark.line + 1
        result.lines = [child.start_mark.line + 1 for child in node.value]
        return result


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _Loader.construct_mapping)
_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_SEQUENCE_TAG, _Loader.construct_sequence)


def load_yaml(text: str, file: str) -> Any:
    loader = _Loader(text)
    loader.file = file
    try:
        return loader.get_single_data()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        raise DeclarationError(file, mark.line + 1 if mark else None, f"not valid YAML: {exc.problem or exc}") from None
    finally:
        loader.dispose()


def line_of(document: Any, path: tuple[Any, ...]) -> int | None:
    """The line of the value at `path` (keys and list indexes), or of its nearest parent."""
    node, line = document, getattr(document, "line", None)
    for part in path:
        if isinstance(node, Located) and str(part) in node:
            line = node.lines.get(str(part), line)
            node = node[str(part)]
        elif isinstance(node, LocatedList) and isinstance(part, int) and 0 <= part < len(node):
            line = node.lines[part]
            node = node[part]
        else:
            break
    return line
