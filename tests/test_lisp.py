"""The one Python <-> elisp boundary (DESIGN.md, EPC defect 7)."""

import subprocess

from epc.handler import encode_message as epc_encode_message
from hypothesis import given
from hypothesis import strategies as st
from sexpdata import Symbol, dumps, loads

from amacs_server.text.lisp import (
    alist_dumps,
    alist_loads,
    camel,
    camel_keys,
    encode_message,
    from_lisp,
    plist_to_dict,
    to_lisp,
)


def test_camel_is_the_single_kebab_to_camel_translation():
    """EPIC-002 naming: kebab in elisp, camelCase in JSON."""
    assert camel("last-eval-result") == "lastEvalResult"
    assert camel("mood") == "mood"
    assert camel_keys({"last-eval-result": {"cost-so-far": 1}}) == {"lastEvalResult": {"costSoFar": 1}}


def test_nil_false_and_empty_list_all_become_nil():
    assert dumps(to_lisp(None)) == dumps(to_lisp(False)) == "()"
    assert from_lisp([]) is None
    assert from_lisp(loads("t")) is True


def test_plist_arrives_as_dict_with_snake_keys():
    assert plist_to_dict(loads('(:success t :result "4" :error-text nil)')) == {
        "success": True,
        "result": "4",
        "error_text": None,
    }
    assert from_lisp(loads('(:a 1 :b (1 2))')) == {"a": 1, "b": [1, 2]}


def test_dict_goes_out_as_keyword_plist():
    assert dumps(to_lisp({"type": "eval", "max_steps": 8, "ok": True})) == '(:type "eval" :max-steps 8 :ok t)'


keys = st.from_regex(r"\A[a-z][a-z0-9]{0,6}(_[a-z0-9]{1,6}){0,2}\Z")
atoms = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**9), 10**9),
    st.floats(allow_nan=False, allow_infinity=False, width=32).filter(lambda f: f == f),
    st.text(max_size=20),
)


@given(st.dictionaries(keys, st.one_of(atoms, st.dictionaries(keys, atoms, min_size=1, max_size=3)), min_size=1, max_size=6))
def test_alist_round_trip(mapping):
    def norm(v):
        if v is False:
            return None
        if isinstance(v, dict):
            return {k: norm(x) for k, x in v.items()}
        return v

    assert alist_loads(alist_dumps(mapping)) == norm(mapping)


def test_alist_is_readable_by_real_emacs(tmp_path):
    """consciousness.el must be readable by Emacs with `read' (issue 2)."""
    text = alist_dumps({"mood": "🤔 ünï", "budget": {"pressure": Symbol("low"), "cost_so_far": 0.5}, "x": None})
    path = tmp_path / "c.el"
    path.write_text(text, encoding="utf-8")
    out = subprocess.run(
        ["emacs", "-Q", "--batch", "--eval",
         f'(with-temp-buffer (insert-file-contents "{path}") (let ((a (read (current-buffer)))) '
         "(princ (format \"%s|%s|%s\" (alist-get 'mood a) (alist-get 'pressure (alist-get 'budget a)) (alist-get 'x a)))))"],
        capture_output=True, text=True, check=True,
    )
    assert out.stdout == "🤔 ünï|low|nil"


lisp_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | st.text() | st.text().map(Symbol),
    lambda inner: st.lists(inner, max_size=4) | st.tuples(inner, inner)
    | st.dictionaries(st.text(alphabet="abc-_", min_size=1, max_size=3), inner, max_size=3),
    max_leaves=12)


@given(st.text(min_size=1), st.lists(lisp_values, max_size=4))
def test_messages_are_printed_as_python_epc_prints_them(name, args):
    assert encode_message(name, *args) == epc_encode_message(name, *args)


def test_an_events_message_is_printed_as_python_epc_prints_it():
    event = to_lisp({"type": "reply-delta", "text": 'a "quoted" \\ line\nand a tab\t\x0c\u2028 ünï',
                     "last": True, "n": 3, "x": 0.25, "none": None, "list": [1, [], (2, "b")]})
    assert encode_message("amacs-events", 0, [event]) == epc_encode_message("amacs-events", 0, [event])
