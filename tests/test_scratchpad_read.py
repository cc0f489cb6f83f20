"""scratchpad.org read fast (read_plain) reads what orgparse reads (read_org), or defers to it."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from amacs_server.persistence.scratchpad import ScratchpadEntry, ScratchpadLog, read_org, read_plain

# Pieces of text org reads as more than text, and plain ones, to build notes and hand edits from.
TRICKY = ["* head", "** sub", ",* escaped", "#+TODO: NEXT | WAS", "NEXT thing", "TODO", "DONE x", "[#A] urgent",
          "words :tag:x:", "see [[https://x.org][the site]]", "[[plain]]", "CLOCK: [2026-11-29 Sun 10:00]",
          "- State \"DONE\" from \"TODO\" [2026-11-29 Sun 10:00]", "<2026-11-29 Sun>", "[2026-02-31 Tue]",
          "SCHEDULED: <2026-11-29 Sun>", ":PROPERTIES:", ":END:", ":TICK: 7", ":THREAD: t", ":Effort: 1:10",
          "", " ", "\t", "plain words", "a: b", "x\ry", "u\u2028v", "f\x0cg", "²", "*bold*", "#comment"]
PLAIN = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)
LINE = st.one_of(st.sampled_from(TRICKY), PLAIN)
CONTENT = st.lists(LINE, max_size=6).map("\n".join)
HEADING = st.one_of(st.sampled_from(["Notes", "TODO fix", "DONE", "DONE x", "TODO", "[#B] x", "a :t:", "see [[l]]", "x <2026-11-29 Sun>"]),
                    PLAIN.filter(lambda h: h.split() != []))


def write(path, ops):
    """A scratchpad written as the agent writes one: notes appended, some of them edited later."""
    log = ScratchpadLog(path)
    ticks = []
    for tick, (heading, thread, content, edit) in enumerate(ops, start=1):
        if edit is not None and ticks:
            log.replace(ScratchpadEntry(ticks[edit % len(ticks)], heading, thread, content))
        else:
            log.append(ScratchpadEntry(tick * 10, heading, thread, content))
            ticks.append(tick * 10)
    return log


def org(text):
    """What orgparse makes of TEXT: its entries, or the kind of error it raises (a timestamp of
    a day that is none, as today)."""
    try:
        return read_org(text)
    except ValueError as err:
        return type(err)


def read(log):
    try:
        return log.read()
    except ValueError as err:
        return type(err)


OPS = st.lists(st.tuples(HEADING, st.sampled_from([None, "t-1", "research"]), CONTENT,
                         st.one_of(st.none(), st.integers(0, 50))), max_size=12)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=OPS)
def test_a_scratchpad_the_agent_wrote_reads_as_orgparse_reads_it(tmp_path, ops):
    path = tmp_path / "scratchpad.org"
    path.unlink(missing_ok=True)
    log = write(path, ops)
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    assert read(log) == org(text)
    fast = read_plain(text)
    assert fast is None or fast == org(text)


@settings(max_examples=300, deadline=None)
@given(lines=st.lists(st.one_of(LINE, st.sampled_from(["* Notes", "* TODO x", "* DONE y", "* [#C] z", "* a :b:", "** deeper", "*  spaced  "])), max_size=20))
def test_any_org_text_reads_as_orgparse_reads_it_or_is_left_to_orgparse(lines):
    text = "\n".join(lines)
    fast = read_plain(text)
    assert fast is None or fast == org(text)


def test_many_plain_notes_threads_and_edits_are_read_fast_and_the_same(tmp_path):
    path = tmp_path / "scratchpad.org"
    log = ScratchpadLog(path)
    path.write_text("".join(ScratchpadLog.format(ScratchpadEntry(
        tick, f"Note {tick}", [None, "t-1", "t-2"][tick % 3], f"line one of {tick}\n* a star line\n\n  indented: {tick}\n"))
        for tick in range(1, 2001)), encoding="utf-8")
    for tick in (5, 500, 1999):
        log.replace(ScratchpadEntry(tick, f"Edited {tick}", "t-9", f"new text {tick}\n,* comma"))
    text = path.read_text(encoding="utf-8")
    fast = read_plain(text)
    assert fast is not None and len(fast) == 2000
    assert fast == read_org(text) == log.read()
    assert fast[4] == ScratchpadEntry(5, "Edited 5", "t-9", "new text 5\n,* comma")


def test_hand_edits_orgparse_reads_otherwise_are_read_by_orgparse(tmp_path):
    base = "* Note\n:PROPERTIES:\n:THREAD: null\n:TICK: 3\n:END:\ntext\n\n"
    for edit in ["* TODO Fix it\n", "* Note :work:\n", "* [#A] Note\n", "#+TODO: NEXT | DONE\n* NEXT Note\n",
                 "text with [[https://x.org][a link]]\n", "CLOCK: [2026-11-29 Sun 10:00]--[2026-11-29 Sun 11:00] =>  1:00\n",
                 "** a sub-heading\n", "a date <2026-11-29 Sun>\n", "preamble\n"]:
        path = tmp_path / "scratchpad.org"
        text = (edit + base) if edit.startswith(("#+", "preamble")) else base.replace("* Note\n", edit, 1) \
            if edit.startswith("* ") else base + edit
        path.write_text(text, encoding="utf-8")
        assert read_plain(text) is None, edit
        assert read(ScratchpadLog(path)) == org(text), edit


def test_a_plain_scratchpad_is_searched_for_org_markup_whole_not_line_by_line(monkeypatch):
    """Was: each of a 2,000-note file's 14,000 lines was searched for org markup on its own
    (~80 ms of a start at 20,000 ticks).  The text is searched whole; line by line only when it
    holds a line break other than \\n, where str.splitlines (orgparse's) and a search's ``^``
    part: there a setting after a \\r is still seen."""
    from amacs_server.persistence import scratchpad

    class Counting:
        calls = 0

        def search(self, line: str) -> object:
            Counting.calls += 1
            return NOT_PLAIN.search(line)

    NOT_PLAIN = scratchpad._NOT_PLAIN
    monkeypatch.setattr(scratchpad, "_NOT_PLAIN", Counting())
    text = "".join(ScratchpadLog.format(ScratchpadEntry(tick, f"Note {tick}", None, f"said {tick}\n  more: [x] <y>\n"))
                   for tick in range(1, 2001))
    fast = read_plain(text)
    assert fast is not None and len(fast) == 2000 and fast == read_org(text)
    assert Counting.calls == 0
    for hidden in ("said 7\r#+TODO: A | B", "said 7\r** deeper", "said 7\x0c#+STARTUP: x", "said 7\u2028  #+X: y"):
        marked = text.replace("said 7\n", hidden + "\n", 1)
        assert read_plain(marked) is None, hidden
    assert Counting.calls > 0
    spaced = text.replace("said 7\n", "said 7\rnothing more\n", 1)
    assert read_plain(spaced) == read_org(spaced)
