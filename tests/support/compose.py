"""docker-compose.yml, read without PyYAML (not a dependency): the compose file is written in a small
YAML subset that ``load_yaml_subset`` parses exactly and refuses anything outside of."""

from __future__ import annotations

import json
import re
from typing import Any

from tests.support.paths import ROOT

COMPOSE_FILE = ROOT / "docker-compose.yml"

# A YAML subset: block mappings and sequences, plain / quoted / literal-block scalars, JSON-style flow
# sequences, comments. Plain scalars whose meaning differs between YAML 1.1 and 1.2 are refused.


class YamlSubsetError(ValueError):
    pass


_INDICATORS = tuple("&*!|>%@`{}[],?#'\"")


_AMBIGUOUS_WORDS = {"y", "n", "yes", "no", "on", "off"}


_AMBIGUOUS_PLAIN = re.compile(
    r"[-+]?(\d[\d_]*(:[0-5]?\d)+(\.\d*)?"  # YAML 1.1 sexagesimal: 22:22
    r"|0\d+|0[xXoObB][\dA-Fa-f_]+"  # octal, hex, binary
    r"|(\d+\.\d*|\.\d+)([eE][-+]?\d+)?|\.inf|\.nan"  # floats
    r"|\d{4}-\d\d-\d\d.*)",  # timestamps
    re.IGNORECASE,
)


def _strip_comment(text: str) -> str:
    match = re.search(r"(^|\s)#", text)
    return (text[: match.start()] if match else text).rstrip()


def _scalar(text: str, where: str) -> Any:
    text = text.strip()
    if text.startswith('"'):
        value, end = json.JSONDecoder().raw_decode(text)
        if _strip_comment(text[end:]):
            raise YamlSubsetError(f"{where}: text after a quoted scalar")
        return value
    if text.startswith("'"):
        match = re.match(r"'((?:[^']|'')*)'", text)
        if not match or _strip_comment(text[match.end() :]):
            raise YamlSubsetError(f"{where}: bad single-quoted scalar")
        return match.group(1).replace("''", "'")
    if text.startswith("["):
        value, end = json.JSONDecoder().raw_decode(text)
        if not isinstance(value, list) or _strip_comment(text[end:]):
            raise YamlSubsetError(f"{where}: flow sequences must be JSON arrays")
        return value
    text = _strip_comment(text)
    if text in ("", "~", "null"):
        return None
    if text in ("true", "false"):
        return text == "true"
    if re.fullmatch(r"[-+]?[1-9]\d*|0", text):
        return int(text)
    if (
        text.startswith(_INDICATORS)
        or text.startswith("- ")
        or ": " in text
        or text.endswith(":")
        or text.lower() in _AMBIGUOUS_WORDS
        or text.lower() in ("true", "false", "null")
        or _AMBIGUOUS_PLAIN.fullmatch(text)
    ):
        raise YamlSubsetError(f"{where}: quote the scalar {text!r}")
    return text


def load_yaml_subset(source: str) -> Any:
    lines = source.splitlines()
    for number, line in enumerate(lines, 1):
        if re.match(r" *\t", line):
            raise YamlSubsetError(f"line {number}: tab in indentation")
        if line.startswith(("---", "...", "%")):
            raise YamlSubsetError(f"line {number}: documents and directives are not supported")

    def significant(i: int) -> int:
        while i < len(lines) and not _strip_comment(lines[i]).strip():
            i += 1
        return i

    def indent_of(i: int) -> int:
        return len(lines[i]) - len(lines[i].lstrip(" "))

    def literal_block(i: int, parent_indent: int, keep_newline: bool) -> tuple[str, int]:
        body: list[str] = []
        while i < len(lines) and (not lines[i].strip() or indent_of(i) > parent_indent):
            body.append(lines[i])
            i += 1
        while body and not body[-1].strip():
            body.pop()
        if not body:
            return "", i
        block_indent = min(len(b) - len(b.lstrip(" ")) for b in body if b.strip())
        text = "\n".join(b[block_indent:] for b in body)
        return text + ("\n" if keep_newline else ""), i

    def value_after(rest: str, i: int, indent: int, where: str) -> tuple[Any, int]:
        """The value of ``key: rest`` or ``- rest`` on line i - 1; i is the next line."""
        rest = rest.strip()
        if rest.startswith(("'", '"', "[")):
            return _scalar(rest, where), i
        rest = _strip_comment(rest)
        if rest in ("|", "|-"):
            return literal_block(i, indent, keep_newline=rest == "|")
        if rest:
            return _scalar(rest, where), i
        nxt = significant(i)
        if nxt < len(lines) and indent_of(nxt) > indent:
            return block(nxt, indent_of(nxt))
        return None, i

    def block(i: int, indent: int) -> tuple[Any, int]:
        i = significant(i)
        if lines[i].lstrip().startswith("-"):
            items: list[Any] = []
            while i < len(lines) and indent_of(i) == indent and re.match(r" *-( |$)", lines[i]):
                rest = lines[i].strip()[1:]
                if re.match(r"\s*[\w.-]+:( |$)", rest):
                    raise YamlSubsetError(f"line {i + 1}: mappings inside sequences are not supported")
                value, i = value_after(rest, i + 1, indent, f"line {i + 1}")
                items.append(value)
                i = significant(i)
            if i < len(lines) and indent_of(i) > indent:
                raise YamlSubsetError(f"line {i + 1}: unexpected indentation")
            return items, i
        mapping: dict[str, Any] = {}
        while i < len(lines) and indent_of(i) == indent:
            match = re.match(r" *([\w.-]+|\"[^\"]*\"):(?: (.*))?$", lines[i])
            if not match:
                raise YamlSubsetError(f"line {i + 1}: expected 'key: value'")
            key = json.loads(match.group(1)) if match.group(1).startswith('"') else match.group(1)
            if key in mapping:
                raise YamlSubsetError(f"line {i + 1}: duplicate key {key!r}")
            mapping[key], i = value_after(match.group(2) or "", i + 1, indent, f"line {i + 1}")
            i = significant(i)
        if i < len(lines) and indent_of(i) > indent:
            raise YamlSubsetError(f"line {i + 1}: unexpected indentation")
        return mapping, i

    start = significant(0)
    if start == len(lines) or indent_of(start) != 0:
        raise YamlSubsetError("expected a mapping at the top level")
    document, end = block(start, 0)
    if significant(end) != len(lines):
        raise YamlSubsetError(f"line {end + 1}: unexpected text")
    return document


_INTERPOLATION = re.compile(r"\$\$|\$\{(\w+)(?:(:?-)([^}]*))?\}|\$(\w+)")


def interpolate(value: str, environment: dict[str, str]) -> str:
    """Compose's variable substitution: ``$$``, ``${VAR}``, ``${VAR:-default}``, ``${VAR-default}``."""

    def replace(match: re.Match) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group(1) or match.group(4)
        if match.group(2) == ":-":
            return environment.get(name) or match.group(3)
        if match.group(2) == "-":
            return environment.get(name, match.group(3))
        return environment.get(name, "")

    return _INTERPOLATION.sub(replace, value)
