"""Markdown to org for the agent's replies (the shell and ``agent-chat.org`` show org).

The core skill asks the model to write ``reply`` in org markup, but models
write Markdown anyway.  :func:`markdown_to_org` turns a reply that looks like
Markdown into org, so the shell and ``agent-chat.org`` show it right; text that
does not look like Markdown is org already and comes back unchanged.

Code is never rewritten: fenced blocks become ``#+begin_src`` blocks with their
lines verbatim, inline code keeps its text, and org blocks already in the text
are copied as they are.  Emphasis is converted only where it is clearly
emphasis (``snake_case`` and ``2*3*4`` stay as they are).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from types import MappingProxyType

# Code fences: ``` or ~~~, three or more, an optional info string.
_FENCE_OPEN = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>.*)$")
_FENCE_CLOSE = re.compile(r"^[ \t]*(?P<fence>`{3,}|~{3,})[ \t]*$")
_LANGUAGE_WORD = re.compile(r"[\w+#-]+")

# Org blocks already in the text: copied as they are.
_ORG_BLOCK_BEGIN = re.compile(r"^[ \t]*#\+begin_(?P<name>\S+)", re.IGNORECASE)

# Line syntax.
_HEADING = re.compile(r"^ {0,3}(?P<hashes>#{1,6})[ \t]+(?P<text>\S.*?)(?:[ \t]+#+)?[ \t]*$")
_RULE = re.compile(r"^ {0,3}(?:(?:-[ \t]*){3,}|(?:\*[ \t]*){3,}|(?:_[ \t]*){3,})$")
_BULLET = re.compile(r"^(?P<indent>[ \t]*)[*+](?:[ \t]+(?P<text>.*))?$")
_QUOTE = re.compile(r"^(?P<indent>[ \t]*)> ?(?P<text>.*)$")
_CELL_SEPARATOR = re.compile(r"(?<!\\)\|")
_SEPARATOR_CELL = re.compile(r"^[ \t]*:?-+:?[ \t]*$")

# Inline code: a run of backticks, content without whitespace at one end only.
_CODE_SPAN = re.compile(
    r"(?<!`)(?P<ticks>`+)(?!`)"
    r"(?P<code>[^\s`]|[^\s`].*?[^\s`]|\s.*?\s)"
    r"(?<!`)(?P=ticks)(?!`)"
)
_URL = r"(?P<url><[^<>\n]*>|(?:[^()\s]|\([^()\s]*\))+)"
_TITLE = r"""(?:[ \t]+(?:"[^"\n]*"|'[^'\n]*'))?"""
_IMAGE = re.compile(r"!\[(?P<text>[^\[\]\n]*)\]\(" + _URL + _TITLE + r"\)")
_LINK = re.compile(r"\[(?P<text>[^\[\]\n]+)\]\(" + _URL + _TITLE + r"\)")
_BARE_URL = re.compile(r"\b(?:https?|ftp|file)://[^\s<>\[\]]*[^\s<>\[\].,;:!?'\")*_~]")
_ORG_LINK = re.compile(r"\[\[[^\[\]\n]+\](?:\[[^\[\]\n]*\])?\]")
_ORG_VERBATIM = re.compile(r"(?P<mark>[~=])(?:\S|\S.*?\S)(?P=mark)")


def _delimited(mark: str, name: str) -> str:
    """Emphasis between MARK and MARK: not inside a word, no space inside either end."""
    m = re.escape(mark)
    c = re.escape(mark[0])
    return rf"(?<![\w{c}\\]){m}(?![\s{c}])(?P<{name}>.+?)(?<![\s{c}\\]){m}(?![\w{c}])"


# Strong emphasis, which alone marks text as Markdown.
_STRONG = re.compile("|".join([_delimited("**", "strong"), _delimited("__", "under")]))
# Every emphasis, longest markers first so ``**`` is never read as two ``*``.
_EMPHASIS = re.compile(
    "|".join(
        [
            _delimited("***", "strong_em"),
            _delimited("**", "strong"),
            _delimited("__", "under"),
            _delimited("~~", "strike"),
            _delimited("*", "em"),
            _delimited("_", "under_em"),
        ]
    )
)
_ORG_EMPHASIS = MappingProxyType(
    {
        "strong_em": ("*/", "/*"),
        "strong": ("*", "*"),
        "under": ("*", "*"),
        "strike": ("+", "+"),
        "em": ("/", "/"),
        "under_em": ("/", "/"),
    }
)
_MAX_NESTING = 20

# Fence languages and the org (Emacs mode) names they stand for.
_SRC_LANGUAGES = MappingProxyType(
    {
        "elisp": "emacs-lisp",
        "emacs-lisp": "emacs-lisp",
        "el": "emacs-lisp",
        "python": "python",
        "py": "python",
        "python3": "python",
        "sh": "shell",
        "bash": "shell",
        "shell": "shell",
        "zsh": "shell",
        "js": "js",
        "javascript": "js",
        "ts": "typescript",
        "typescript": "typescript",
        "json": "json",
        "yaml": "yaml",
        "yml": "yaml",
        "c": "c",
        "cpp": "cpp",
        "c++": "cpp",
        "rust": "rust",
        "rs": "rust",
        "go": "go",
        "golang": "go",
        "java": "java",
        "sql": "sql",
        "org": "org",
        "diff": "diff",
        "patch": "diff",
    }
)
_EXAMPLE_LANGUAGES = frozenset({"", "text", "txt", "plain", "plaintext"})


def markdown_to_org(text: str) -> str:
    """TEXT in org markup: converted if it looks like Markdown, else unchanged."""
    if not looks_like_markdown(text):
        return text
    return "\n".join(_convert_lines(text.split("\n")))


# Text without any of these has none of the Markdown looks_like_markdown looks for:
# fences (``` or ~~~), headings (#), table rules (|), links and images (](),
# code spans (`) and strong emphasis (** or __).
_MARKERS = ("`", "~~~", "#", "|", "](", "**", "__")


def looks_like_markdown(text: str) -> bool:
    """Whether TEXT has Markdown that org does not share: fences, ``#`` headings,
    ``**strong**``, ``[links](url)``, ``|---|---|`` table rules or `` `code` ``.

    Org blocks, org links and org ``~code~`` / ``=verbatim=`` are not looked at,
    so org text (and this module's own output) is never taken for Markdown.
    """
    if not any(marker in text for marker in _MARKERS):  # plain prose: ~1 ms of regexes saved
        return False
    return _has_markdown(text)


def _has_markdown(text: str) -> bool:
    """:func:`looks_like_markdown` without its first look for the markers."""
    for line in _outside_org_blocks(text.split("\n")):
        if _fence_at(line) or _HEADING.match(line) or _is_separator(line, alone=True):
            return True
        if _FENCE_OPEN.match(line):  # backticks in the info string: left as it is
            continue
        bare = _ORG_VERBATIM.sub(" ", _ORG_LINK.sub(" ", line))
        if _LINK.search(bare) or _IMAGE.search(bare):
            return True
        bare = _BARE_URL.sub(" ", bare)
        if _CODE_SPAN.search(bare) or _STRONG.search(bare):
            return True
    return False


# Blocks


def _org_block_end(lines: list[str], start: int) -> int | None:
    """The index of the line ending the org block begun at START, if it begins one."""
    begin = _ORG_BLOCK_BEGIN.match(lines[start])
    if begin is None:
        return None
    end = re.compile(rf"^[ \t]*#\+end_{re.escape(begin['name'])}[ \t]*$", re.IGNORECASE)
    return next((i for i in range(start + 1, len(lines)) if end.match(lines[i])), None)


def _outside_org_blocks(lines: list[str]) -> Iterator[str]:
    """The lines that are not part of an org block."""
    i = 0
    while i < len(lines):
        end = _org_block_end(lines, i)
        if end is None:
            yield lines[i]
            i += 1
        else:
            i = end + 1


def _fence_at(line: str) -> re.Match[str] | None:
    """The opening code fence on LINE, if there is one."""
    match = _FENCE_OPEN.match(line)
    if match is None or (match["fence"][0] == "`" and "`" in match["info"]):
        return None
    return match


def _convert_lines(lines: list[str]) -> list[str]:
    """Markdown LINES as org lines."""
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        end = _org_block_end(lines, i)
        if end is not None:
            out.extend(lines[i : end + 1])
            i = end + 1
        elif fence := _fence_at(line):
            i = _convert_fence(lines, i, fence, out)
        elif _QUOTE.match(line):
            i = _convert_quote(lines, i, out)
        elif _starts_table(lines, i):
            i = _convert_table(lines, i, out)
        else:
            out.append(_convert_line(line))
            i += 1
    return out


def _convert_fence(lines: list[str], start: int, fence: re.Match[str], out: list[str]) -> int:
    """A fenced block as an org block, its lines verbatim; returns the next index.

    A fence that is never closed (the model stopped) is closed at the end."""
    marks = fence["fence"]
    end = start + 1
    while end < len(lines):
        close = _FENCE_CLOSE.match(lines[end])
        if close and close["fence"][0] == marks[0] and len(close["fence"]) >= len(marks):
            break
        end += 1
    word = _LANGUAGE_WORD.search(fence["info"])
    language = word.group().lower() if word else ""
    indent = fence["indent"]
    if language in _EXAMPLE_LANGUAGES:
        begin, finish = "#+begin_example", "#+end_example"
    else:
        begin, finish = f"#+begin_src {_SRC_LANGUAGES.get(language, language)}", "#+end_src"
    out.append(indent + begin)
    out.extend(lines[start + 1 : end])
    out.append(indent + finish)
    return end + 1


def _convert_quote(lines: list[str], start: int, out: list[str]) -> int:
    """Consecutive ``>`` lines as a quote block, their text converted; returns the next index."""
    first = _QUOTE.match(lines[start])
    assert first is not None
    indent = first["indent"]
    inner: list[str] = []
    end = start
    while end < len(lines) and (quoted := _QUOTE.match(lines[end])):
        inner.append(quoted["text"])
        end += 1
    out.append(indent + "#+begin_quote")
    out.extend(indent + line if line else line for line in _convert_lines(inner))
    out.append(indent + "#+end_quote")
    return end


def _starts_table(lines: list[str], i: int) -> bool:
    """Whether line I is a table's header row: a separator row follows it."""
    line = lines[i]
    return (
        "|" in line
        and i + 1 < len(lines)
        and _is_separator(lines[i + 1], alone=False)
        and not _is_separator(line, alone=True)
    )


def _convert_table(lines: list[str], start: int, out: list[str]) -> int:
    """A table (header, separator, rows) as an org table; returns the next index."""
    out.append(_table_row(lines[start]))
    out.append(_table_rule(lines[start + 1]))
    end = start + 2
    while (
        end < len(lines) and "|" in lines[end] and lines[end].strip() and not _fence_at(lines[end])
    ):
        row = lines[end]
        out.append(_table_rule(row) if _is_separator(row, alone=False) else _table_row(row))
        end += 1
    return end


# Lines


def _convert_line(line: str) -> str:
    """One line outside blocks and tables.

    A line that starts like a fence but is not one (backticks in its info string)
    stays as it is: converting its code spans would make it a fence."""
    if _FENCE_OPEN.match(line):
        return line
    if heading := _HEADING.match(line):
        return "*" * len(heading["hashes"]) + " " + _inline(heading["text"])
    if _RULE.match(line):
        return "-----"
    if _is_separator(line, alone=True):
        return _table_rule(line)
    if bullet := _BULLET.match(line):
        text = bullet["text"]
        return bullet["indent"] + "-" + (" " + _inline(text) if text else "")
    if line.lstrip().startswith("|"):
        return _table_row(line)
    return _inline(line)


def _split_row(line: str) -> tuple[str, list[str]]:
    """A table row's indentation and its cells (the text between the pipes)."""
    body = line.lstrip()
    indent = line[: len(line) - len(body)]
    body = body.rstrip()
    if body.startswith("|"):
        body = body[1:]
    if body.endswith("|") and not body.endswith("\\|"):
        body = body[:-1]
    code = [span.span() for span in _CODE_SPAN.finditer(body)]
    cuts = [
        pipe.start()
        for pipe in _CELL_SEPARATOR.finditer(body)
        if not any(low < pipe.start() < high for low, high in code)
    ]
    bounds = zip([-1, *cuts], [*cuts, len(body)], strict=True)
    return indent, [body[low + 1 : high] for low, high in bounds]


def _is_separator(line: str, *, alone: bool) -> bool:
    """Whether LINE is a Markdown table's separator row (``|---|:--:|``).

    ALONE: with no header row above it, so a one-cell ``|---|`` (an org rule too)
    does not count."""
    if "|" not in line:
        return False
    _, cells = _split_row(line)
    if not all(_SEPARATOR_CELL.match(cell) for cell in cells):
        return False
    return not alone or len(cells) > 1 or ":" in line


def _table_rule(line: str) -> str:
    """A separator row as an org table rule, ``|---+---|``."""
    indent, cells = _split_row(line)
    return indent + "|" + "+".join("-" * max(len(cell), 1) for cell in cells) + "|"


def _table_row(line: str) -> str:
    """A table row with its cells converted, between pipes as org needs."""
    indent, cells = _split_row(line)
    return indent + "|" + "|".join(_inline(cell) for cell in cells) + "|"


# Inline markup


@dataclass
class _Shelf:
    """Converted spans kept out of reach of later rules, as placeholder tokens.

    The mark is a private-use character that does not occur in the text."""

    mark: str
    items: list[str] = field(default_factory=list)

    @classmethod
    def for_text(cls, text: str) -> _Shelf:
        """A shelf whose mark is not in TEXT."""
        used = set(text)
        for low, high in ((0xE000, 0xF900), (0xF0000, 0xFFFFE)):
            for point in range(low, high):
                if chr(point) not in used:
                    return cls(chr(point))
        raise ValueError("text uses every private-use character; cannot convert it")

    def put(self, span: str) -> str:
        """A token that :meth:`restore` turns back into SPAN."""
        self.items.append(span)
        return f"{self.mark}{len(self.items) - 1}{self.mark}"

    def restore(self, text: str) -> str:
        """TEXT with every token replaced by its span (spans may hold tokens)."""
        token = re.compile(re.escape(self.mark) + r"(\d+)" + re.escape(self.mark))
        while self.mark in text:
            text = token.sub(lambda m: self.items[int(m[1])], text)
        return text


def _inline(text: str) -> str:
    """Inline Markdown in TEXT (one line) as org."""
    if not text.strip():
        return text
    shelf = _Shelf.for_text(text)
    text = _CODE_SPAN.sub(lambda m: shelf.put(_org_code(m)), text)
    text = _ORG_LINK.sub(lambda m: shelf.put(m.group()), text)
    text = _IMAGE.sub(lambda m: shelf.put(f"[[{_link_target(m)}]]"), text)
    text = _LINK.sub(lambda m: shelf.put(_org_link(m)), text)
    text = _BARE_URL.sub(lambda m: shelf.put(m.group()), text)
    text = _emphasis(text, _MAX_NESTING)
    return shelf.restore(text)


def _org_code(match: re.Match[str]) -> str:
    """An inline code span as org ``~code~`` (``=code=`` when the code has a ``~``)."""
    code = match["code"]
    if len(code) > 2 and code[0] == code[-1] == " ":
        code = code[1:-1]
    code = code.strip()
    if not code:
        return match.group()
    mark = "=" if "~" in code and "=" not in code else "~"
    return f"{mark}{code}{mark}"


def _link_target(match: re.Match[str]) -> str:
    """A Markdown link's URL, without angle brackets."""
    url = match["url"]
    return url[1:-1] if url.startswith("<") and url.endswith(">") else url


def _org_link(match: re.Match[str]) -> str:
    """``[text](url)`` as ``[[url][text]]`` (``[[url]]`` when the text is the URL)."""
    url, text = _link_target(match), match["text"]
    if text.strip() == url:
        return f"[[{url}]]"
    return f"[[{url}][{_emphasis(text, _MAX_NESTING)}]]"


def _emphasis(text: str, depth: int) -> str:
    """Markdown emphasis in TEXT as org emphasis, nested up to DEPTH levels."""
    if depth <= 0:
        return text
    convert: Callable[[re.Match[str]], str] = lambda m: _org_emphasis(m, depth)  # noqa: E731
    return _EMPHASIS.sub(convert, text)


def _org_emphasis(match: re.Match[str], depth: int) -> str:
    """One emphasised span, its content converted too."""
    name = match.lastgroup
    assert name is not None
    before, after = _ORG_EMPHASIS[name]
    return before + _emphasis(match[name], depth - 1) + after
