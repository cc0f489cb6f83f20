"""Replies as org (issue 9; RFC v4 §8.3 agent-chat.org): Markdown from the model becomes org."""

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from amacs_server.text.org_markup import looks_like_markdown, markdown_to_org

# Detection: org stays org


ORG_TEXTS = [
    "* Heading\nSome *bold*, /italic/, ~code~, =verbatim= and +strike+.",
    "- item one\n- item two\n  1. sub",
    "See [[https://example.com/a_b][the docs]] or [[file:notes.org]].",
    "| a | b |\n|---+---|\n| 1 | 2 |",
    "#+begin_src python\ndef f(**kwargs):\n    return `x`, [a](b)\n```\n#+end_src",
    "#+begin_example\n# not a heading\n**not bold**\n#+end_example",
    "snake_case and 2*3*4 and f(*args, **kwargs) and g(**opts)",
    "Emacs quotes: `foo' and `bar' stay.",
    "~**x**~ and =__init__= are code.",
    "A plain sentence.",
    "",
]


@pytest.mark.parametrize("text", ORG_TEXTS)
def test_org_text_passes_through_unchanged(text):
    assert not looks_like_markdown(text)
    assert markdown_to_org(text) == text


@pytest.mark.parametrize(
    "text",
    [
        "```\ncode\n```",
        "~~~\ncode\n~~~",
        "some **bold** text",
        "some __bold__ text",
        "## A heading",
        "see [the docs](https://example.com)",
        "![alt](pic.png)",
        "| a | b |\n|---|---|",
        "|:--|",
        "use `code` here",
    ],
)
def test_each_markdown_sign_is_detected(text):
    assert looks_like_markdown(text)


def test_single_emphasis_alone_is_org():
    """`*x*' and `_x_' are org too: alone they do not make text Markdown."""
    assert markdown_to_org("a *bold* and _under_ word") == "a *bold* and _under_ word"


# Fenced code


@pytest.mark.parametrize(
    ("fence", "language"),
    [
        ("elisp", "emacs-lisp"),
        ("emacs-lisp", "emacs-lisp"),
        ("el", "emacs-lisp"),
        ("python", "python"),
        ("py", "python"),
        ("sh", "shell"),
        ("bash", "shell"),
        ("shell", "shell"),
        ("zsh", "shell"),
        ("js", "js"),
        ("javascript", "js"),
        ("ts", "typescript"),
        ("json", "json"),
        ("yaml", "yaml"),
        ("c", "c"),
        ("cpp", "cpp"),
        ("rust", "rust"),
        ("go", "go"),
        ("java", "java"),
        ("sql", "sql"),
        ("org", "org"),
        ("diff", "diff"),
        ("Python", "python"),
        ("ruby", "ruby"),
        ("{.python}", "python"),
        ("python title=x.py", "python"),
    ],
)
def test_fence_becomes_src_block_with_emacs_mode(fence, language):
    text = f"```{fence}\nx = 1\n```"
    assert markdown_to_org(text) == f"#+begin_src {language}\nx = 1\n#+end_src"


@pytest.mark.parametrize("fence", ["", "text", "txt"])
def test_plain_fence_becomes_example_block(fence):
    assert (
        markdown_to_org(f"```{fence}\nsome output\n```")
        == "#+begin_example\nsome output\n#+end_example"
    )


def test_tilde_fence():
    assert markdown_to_org("~~~ sh\nls\n~~~") == "#+begin_src shell\nls\n#+end_src"


def test_code_lines_stay_verbatim():
    code = ["# comment", "* star", "**kw**", "[a](b)", "`x`", "| a |", "|---|---|", "> q", "  + p"]
    text = "```python\n" + "\n".join(code) + "\n```"
    assert markdown_to_org(text).split("\n")[1:-1] == code


def test_indented_fence_keeps_its_indentation():
    text = '- step one:\n  ```elisp\n  (message "hi")\n  ```\n- step two'
    assert markdown_to_org(text) == (
        '- step one:\n  #+begin_src emacs-lisp\n  (message "hi")\n  #+end_src\n- step two'
    )


def test_unterminated_fence_is_closed_at_the_end():
    """The model stopped in the middle of a block."""
    assert (
        markdown_to_org("Try:\n```python\nprint(1)")
        == "Try:\n#+begin_src python\nprint(1)\n#+end_src"
    )


def test_fence_closes_only_with_a_fence_as_long():
    text = "````md\n```python\nx\n```\n````"
    assert markdown_to_org(text) == "#+begin_src md\n```python\nx\n```\n#+end_src"


def test_org_block_in_markdown_is_copied_verbatim():
    text = "**Bold**\n#+begin_src python\n# **kw** `x`\n#+end_src"
    assert markdown_to_org(text) == "*Bold*\n#+begin_src python\n# **kw** `x`\n#+end_src"


# Inline markup


@pytest.mark.parametrize(
    ("markdown", "org"),
    [
        ("a **bold** word", "a *bold* word"),
        ("a __bold__ word", "a *bold* word"),
        ("use `setq` here", "use ~setq~ here"),
        ("use ``a `b` c`` here", "use ~a `b` c~ here"),
        ("path `~/.emacs` **x**", "path =~/.emacs= *x*"),
        ("~~old~~ **new**", "+old+ *new*"),
        ("an *italic* **b**", "an /italic/ *b*"),
        ("an _italic_ **b**", "an /italic/ *b*"),
        ("***both*** `x`", "*/both/* ~x~"),
        ("**bold with *italic* inside**", "*bold with /italic/ inside*"),
        ("**Note:** `x`", "*Note:* ~x~"),
        ("(**a**), **b**.", "(*a*), *b*."),
    ],
)
def test_inline_markup(markdown, org):
    assert markdown_to_org(markdown) == org


@pytest.mark.parametrize(
    "plain",
    [
        "snake_case_name",
        "2*3*4",
        "f(*args, **kwargs)",
        "a * b * c",
        "__init__method",
        "x**2 + y**2",
    ],
)
def test_clear_emphasis_only(plain):
    """Inside words and around spaces, `*' and `_' are not emphasis."""
    assert markdown_to_org(f"`code` {plain}") == f"~code~ {plain}"


def test_nothing_converts_inside_inline_code():
    assert markdown_to_org("`**a** _b_ [c](d) # e`") == "~**a** _b_ [c](d) # e~"


# Headings, lists, rules


@pytest.mark.parametrize("level", range(1, 7))
def test_heading_levels(level):
    assert markdown_to_org("#" * level + " Title **x**") == "*" * level + " Title *x*"


def test_heading_closing_hashes_dropped_and_hashtag_kept():
    assert markdown_to_org("## Title ##\n#hashtag") == "** Title\n#hashtag"


def test_bullets_become_dashes_at_any_indentation():
    text = "* one\n+ two\n  * nested *it*\n    + deeper\n- dash\n1. first\n2) second"
    assert markdown_to_org(text + "\n**x**") == (
        "- one\n- two\n  - nested /it/\n    - deeper\n- dash\n1. first\n2) second\n*x*"
    )


def test_horizontal_rule():
    assert markdown_to_org("**a**\n\n---\n\n* * *\nb") == "*a*\n\n-----\n\n-----\nb"


def test_checkboxes_stay():
    assert markdown_to_org("- [ ] todo\n- [x] done **!**") == "- [ ] todo\n- [x] done *!*"


# Links


@pytest.mark.parametrize(
    ("markdown", "org"),
    [
        ("[docs](https://example.com)", "[[https://example.com][docs]]"),
        ("[`setq`](https://x.org/a_b_c)", "[[https://x.org/a_b_c][~setq~]]"),
        (
            "[Foo](https://en.wikipedia.org/wiki/Foo_(bar))",
            "[[https://en.wikipedia.org/wiki/Foo_(bar)][Foo]]",
        ),
        ('[t](https://x.org "Title")', "[[https://x.org][t]]"),
        ("[https://x.org](https://x.org)", "[[https://x.org]]"),
        ("![a diagram](img/d_1.png)", "[[img/d_1.png]]"),
        ("[t](<https://x.org/a b>)", "[[https://x.org/a b][t]]"),
    ],
)
def test_links_and_images(markdown, org):
    assert markdown_to_org(markdown) == org


def test_bare_url_keeps_its_underscores():
    assert markdown_to_org("**see** https://x.org/_a_/b_c_") == "*see* https://x.org/_a_/b_c_"


# Tables and quotes


def test_table_separator_becomes_org_rule():
    text = "| Name | Value |\n|:-----|------:|\n| **a** | `b` |\n| c | d |"
    assert markdown_to_org(text) == "| Name | Value |\n|------+-------|\n| *a* | ~b~ |\n| c | d |"


def test_table_without_outer_pipes():
    assert markdown_to_org("a | b\n--- | ---\n1 | 2") == "|a | b|\n|----+----|\n|1 | 2|"


def test_pipe_inside_code_stays_in_its_cell():
    text = "| op | code |\n|---|---|\n| or | `a|b` |"
    assert markdown_to_org(text) == "| op | code |\n|---+---|\n| or | ~a|b~ |"


def test_block_quote_becomes_quote_block():
    text = "He said:\n> **quoted** text\n> more\n>\n> - a list\nafter"
    assert markdown_to_org(text) == (
        "He said:\n#+begin_quote\n*quoted* text\nmore\n\n- a list\n#+end_quote\nafter"
    )


# A whole reply

CLAUDE_REPLY = """\
## Summary

I looked at `init.el` and found **two problems**:

1. The `use-package` form is missing `:ensure t`.
2. Your *theme* loads before the package archive.

### The fix

* Add this near the top:
  ```elisp
  (require 'package)
  (package-initialize)
  ```
* Then restart.

```python
def check(path: str) -> bool:
    # **not bold**, * not a bullet
    return path.endswith("_init.el")
```

| Setting | Before | After |
|---------|:------:|------:|
| theme   | early  | late  |

See [the manual](https://www.gnu.org/software/emacs/manual/html_node/emacs/Package-Installation.html) for more.

> Note: back up your config first."""

CLAUDE_REPLY_ORG = """\
** Summary

I looked at ~init.el~ and found *two problems*:

1. The ~use-package~ form is missing ~:ensure t~.
2. Your /theme/ loads before the package archive.

*** The fix

- Add this near the top:
  #+begin_src emacs-lisp
  (require 'package)
  (package-initialize)
  #+end_src
- Then restart.

#+begin_src python
def check(path: str) -> bool:
    # **not bold**, * not a bullet
    return path.endswith("_init.el")
#+end_src

| Setting | Before | After |
|---------+--------+-------|
| theme   | early  | late  |

See [[https://www.gnu.org/software/emacs/manual/html_node/emacs/Package-Installation.html][the manual]] for more.

#+begin_quote
Note: back up your config first.
#+end_quote"""


def test_a_real_looking_reply():
    assert markdown_to_org(CLAUDE_REPLY) == CLAUDE_REPLY_ORG


@pytest.mark.parametrize(
    "text",
    [
        CLAUDE_REPLY,
        "**a**\n* b\n# c\n| x | y |\n|---|---|\n> q\n```\nunterminated",
        "[`x`](http://a/b_c) **`y`** ~~`z`~~",
    ],
)
def test_conversion_is_idempotent(text):
    once = markdown_to_org(text)
    assert markdown_to_org(once) == once


# Properties

_PLAIN = st.sampled_from(["a", "word", "x_y", "http://u.v/w_x", "(c)", "~/p", "a=b", "it's"])
_WORD = st.one_of(_PLAIN, st.sampled_from(["2*3*4", "f(**kw)", "*args", "snake_case"]))
_INLINE = st.one_of(
    _WORD,
    *(_PLAIN.map(lambda w, m=m: f"{m}{w}{m}") for m in ["**", "*", "_", "__", "~~"]),
    _WORD.map(lambda w: f"`{w}`"),
    _WORD.map(lambda w: f"[{w}](http://u/{w})"),
    _WORD.map(lambda w: f"![{w}](i.png)"),
)
_PREFIX = st.sampled_from(["", "# ", "### ", "* ", "  + ", "- ", "1. ", "> ", "| ", "  "])
_LINE = st.one_of(
    st.tuples(_PREFIX, st.lists(_INLINE, min_size=1, max_size=6).map(" ".join)).map("".join),
    st.sampled_from(
        ["", "```python", "```", "~~~", "|---|:--:|", "---", "#+begin_src", "    code"]
    ),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_LINE, max_size=12).map("\n".join))
def test_markdown_made_of_whole_pieces_converts_idempotently(text):
    once = markdown_to_org(text)
    assert markdown_to_org(once) == once


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_never_raises(text):
    assert isinstance(markdown_to_org(text), str)


_CLOSING_FENCE = re.compile(r"^[ \t]*(`{3,}|~{3,})[ \t]*$")
_CODE_LINE = st.text(st.characters(blacklist_characters="\n"), max_size=30).filter(
    lambda line: not _CLOSING_FENCE.match(line)
)


@settings(max_examples=300, deadline=None)
@given(
    before=st.text(max_size=80),
    language=st.sampled_from(["", "python", "elisp", "text", "weird-lang"]),
    code=st.lists(_CODE_LINE, min_size=1, max_size=8),
    after=st.text(max_size=80),
)
def test_fenced_code_lines_are_never_lost(before, language, code, after):
    text = f"{before}\n```{language}\n" + "\n".join(code) + f"\n```\n{after}"
    out = markdown_to_org(text)
    assert "\n" + "\n".join(code) + "\n" in "\n" + out + "\n"


_MARKDOWNISH = st.text(alphabet=st.sampled_from(list("ab #*_`~|[]()-:=>\n\t1.+!hps/")), max_size=80)


@given(_MARKDOWNISH)
@settings(max_examples=500, suppress_health_check=[HealthCheck.too_slow])
def test_the_first_look_for_markers_never_changes_the_answer(text):
    """looks_like_markdown's quick look (no marker character: plain prose, issue 10) says
    what the full look says, for text made of the characters Markdown and org use."""
    from amacs_server.text.org_markup import _has_markdown

    assert looks_like_markdown(text) == _has_markdown(text)
