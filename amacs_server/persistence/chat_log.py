"""``agent-chat.org``: chat history, a heading per tick.

Each tick is a ``* Tick N`` heading with a ``:TIMESTAMP:`` property, then
``** Human`` (the person's input, written before the model is called),
``** Agent`` (the reply) and, when the tick evaluated something, ``** Eval``
(``** Eval (error)`` when it failed): the form as an ``emacs-lisp`` src
block and its result or error as an example block under ``#+RESULTS:``, each
cut at :data:`EVAL_CHARS` (the transcript has them whole).  The result and the
error are for the person: a memory address in them reads as the shell shows it,
without its ``<EOT>`` delimiters; the form is the code as it ran.  The eval is its
own part, not under ``** Agent``: the reply read back is only the reply.
A tick that ended without a reply (interrupted, no key, the budget) says
why in ``** No reply``; one with neither was cut off (the server stopped).
A subagent task that ended adds ``** Task ended``, the line the shell showed
(``✓ task-1 (researcher) done: …``, ``✗`` when it did not answer), under the
tick last begun, where it fell among that tick's parts: a resumed shell shows
it where the live one did.  What else the shell showed of the agents adds
``** Talk``, under the tick last begun too, each line saying who said it: a
viewpoint's comment, a subagent's answer to the person (``[viewpoint-pro] …``)
and what the person said to it (``person to viewpoint-pro: …``).  A tick no
input of the person's began says what began it in ``** Event`` (``task-1
(researcher) done``); an action a compulsion blocked says so, and by whom, in
``** Blocked`` (a held reply in place of ``** Agent``; a blocked eval's error
says it too).

The human's text is plain: lines that would start an org heading are escaped
with a leading comma, as org does in source blocks.  The reply is org:
its headings are demoted two levels (``* H`` becomes ``*** H``) so they nest and
fold under ``** Agent``, and the lines of its src and example blocks are
comma-escaped as org escapes them.  :func:`unnest_reply` undoes both.

The file holds the current month; the earlier ticks are in ``chat/``, one file
a month, written once (:mod:`.monthly`): a tick's commit adds the
current file to git, not the history, and start-up reads only the log's end.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ..memory.memid import for_person
from .monthly import ROTATE_BYTES, TAIL_BYTES, MonthlyLog

# The form and the result (or error) of a tick's eval are cut at this many characters in
# agent-chat.org, saying so: the transcript has them whole.
EVAL_CHARS = 2000


@dataclass
class ChatEval:
    """A tick's eval as agent-chat.org keeps it: the form and its result or error (cut)."""

    form: str
    success: bool
    result: str | None = None
    error: str | None = None

    @classmethod
    def of(cls, form: str, success: bool, result: str | None, error: str | None) -> ChatEval:
        """The eval of FORM, each text cut at :data:`EVAL_CHARS` (saying so); RESULT and ERROR
        with each memory address as the person reads it (:func:`for_person`)."""
        return cls(_cut(form, ";; ") or form, success, _cut(_shown(result), ""), _cut(_shown(error), ""))

    def to_dict(self) -> dict[str, object]:
        """Plain dict (the shell reads it as the live eval's event and result)."""
        return {"form": self.form, "success": self.success, "result": self.result, "error": self.error}


def shorten(text: str, limit: int, note: str) -> str:
    """TEXT cut at LIMIT characters (at a line's end when one is in the second half), then a
    line, NOTE, saying how much was cut (its ``{more}``: how many characters, formatted ``,``)."""
    if len(text) <= limit:
        return text
    cut = text.rfind("\n", 0, limit)
    cut = cut if cut > limit // 2 else limit
    return f"{text[:cut]}\n" + note.format(more=f"{len(text) - cut:,}")


def _shown(text: str | None) -> str | None:
    return None if text is None else for_person(text)


def _cut(text: str | None, comment: str) -> str | None:
    """TEXT cut at :data:`EVAL_CHARS` (at a line's end when one is near), then a line,
    after COMMENT, saying how much was cut."""
    if text is None:
        return None
    return shorten(text, EVAL_CHARS, comment + "[… {more} more characters cut: the transcript has them all]")


# A task's line is kept to this many characters (the shell shows at most two lines of it;
# the task's whole answer is in its transcript).
TASK_LINE_CHARS = 1000


@dataclass
class ChatTaskEnded:
    """A subagent task's end as the shell showed it: TEXT after ✓ (OK) or ✗; BEFORE_REPLY when
    it came before its tick's reply (or no-reply) part, else after the tick's reply and eval."""

    text: str
    ok: bool
    before_reply: bool

    def to_dict(self) -> dict[str, object]:
        """Plain dict (the shell draws it as the live ``agent-ended`` event)."""
        return {"text": self.text, "ok": self.ok, "before_reply": self.before_reply}


@dataclass
class ChatEntry:
    """One tick of the chat: the human part, the agent part, or both."""

    tick: int
    timestamp: str
    human: str | None = None
    agent: str | None = None
    eval: ChatEval | None = None
    no_reply: str | None = None  # why the tick ended without a reply, when it said so
    tasks: list[ChatTaskEnded] = field(default_factory=list)  # the tasks that ended, in order
    event: str | None = None  # what began a tick no input of the person's began
    blocked: list[str] = field(default_factory=list)  # the actions compulsions blocked, each why and by whom
    talk: list[str] = field(default_factory=list)  # the agents' lines the shell showed, each naming who said it

    @property
    def interrupted(self) -> bool:
        """A human message that never got its agent part nor a reason why (the server stopped)."""
        return self.human is not None and self.agent is None and self.no_reply is None and not self.blocked


def escape_org(text: str) -> str:
    """Protect lines that org would read as headings (``*``) or as escapes (``,*``)."""
    out = []
    for line in text.split("\n"):
        stripped = line.lstrip(",")
        out.append("," + line if stripped.startswith("*") else line)
    return "\n".join(out)


def unescape_org(text: str) -> str:
    """Undo :func:`escape_org`."""
    out = []
    for line in text.split("\n"):
        stripped = line.lstrip(",")
        out.append(line[1:] if line.startswith(",") and stripped.startswith("*") else line)
    return "\n".join(out)


# Blocks whose lines org reads verbatim, comma-escaped; and the line ending one.
_VERBATIM_BLOCK = re.compile(r"^[ \t]*#\+begin_(src|example|export|comment)\b", re.IGNORECASE)
# A line of a verbatim block that org escapes, and an escaped one: ``*``, ``#+``.
_CODE_TO_ESCAPE = re.compile(r"^([ \t]*)(,*(?:\*|#\+))")
_ESCAPED_CODE = re.compile(r"^([ \t]*,*),((?:\*|#\+))")
# Outside blocks: a heading line, a demoted one, and a line that needs a comma
# so it is not mistaken for an escaped heading from the old format.
_HEADING = re.compile(r"^\*+(?:[ \t]|$)")
_NESTED_HEADING = re.compile(r"^\*\*\*+(?:[ \t]|$)")
_COMMA_STAR = re.compile(r"^,+\*")


def _escape_code(text: str) -> str:
    """TEXT as the lines of a verbatim block (``*`` and ``#+`` lines escaped)."""
    return "\n".join(_CODE_TO_ESCAPE.sub(r"\1,\2", line) for line in text.split("\n"))


def _unescape_code(text: str) -> str:
    """Undo :func:`_escape_code`."""
    return "\n".join(_ESCAPED_CODE.sub(r"\1\2", line) for line in text.split("\n"))


def _block_end(line: str) -> re.Pattern[str] | None:
    """If LINE begins a verbatim block, the pattern of the line that ends it."""
    begin = _VERBATIM_BLOCK.match(line)
    if begin is None:
        return None
    return re.compile(rf"^[ \t]*#\+end_{begin[1]}[ \t]*$", re.IGNORECASE)


def _map_reply_lines(text: str, *, code: Callable[[str], str], prose: Callable[[str], str]) -> str:
    """TEXT with CODE applied to the lines inside verbatim blocks, PROSE to the others.

    The lines that begin and end blocks are kept as they are."""
    out: list[str] = []
    end: re.Pattern[str] | None = None
    for line in text.split("\n"):
        if end is None:
            end = _block_end(line)
            out.append(line if end is not None else prose(line))
        elif end.match(line):
            end = None
            out.append(line)
        else:
            out.append(code(line))
    return "\n".join(out)


def nest_reply(text: str) -> str:
    """The reply (org) as the body of ``** Agent``: headings two levels down, block
    lines escaped as org escapes them (``,*``, ``,#+``)."""

    def prose(line: str) -> str:
        if _HEADING.match(line):
            return "**" + line
        return "," + line if _COMMA_STAR.match(line) else line

    return _map_reply_lines(text, code=_escape_code, prose=prose)


def unnest_reply(body: str) -> str:
    """Undo :func:`nest_reply`.

    Also reads the old format, in which every line starting with ``*`` had a comma."""

    def prose(line: str) -> str:
        if _NESTED_HEADING.match(line):
            return line[2:]
        return line[1:] if _COMMA_STAR.match(line) else line

    return _map_reply_lines(body, code=_unescape_code, prose=prose)


# A tick's first line, and the month of its :TIMESTAMP: when it follows (monthly.MonthlyLog).
_TICK_HEAD = re.compile(rb"^\* Tick (\d+)[ \t]*(?:\n|\Z)(?::PROPERTIES:[ \t]*\n:TIMESTAMP:[ \t]*(\d{4}-\d\d))?",
                        re.MULTILINE)
_TICK = re.compile(r"\A\* Tick (\d+)[ \t]*$\n?(?::PROPERTIES:[ \t]*\n(.*?)^:END:[ \t]*$)?", re.MULTILINE | re.DOTALL)
_TIMESTAMP = re.compile(r"^:TIMESTAMP:[ \t]*(.*?)[ \t]*$", re.MULTILINE)
_PART = re.compile(r"^\*\* (Human|Event|Agent|Blocked|Eval|No reply|Task ended|Talk|Rewound|Forked)( \(error\))?[ \t]*$",
                   re.MULTILINE)
# A task's line: its mark, ✓ when it answered, ✗ when not, then what the shell said.
_TASK_MARKS = {True: "✓", False: "✗"}
# The eval part's form and its result (escaped as org escapes block lines).
_EVAL_FORM = re.compile(r"^#\+begin_src emacs-lisp[ \t]*\n(.*?)\n#\+end_src[ \t]*$", re.MULTILINE | re.DOTALL)
_EVAL_RESULT = re.compile(r"^#\+RESULTS:[ \t]*\n#\+begin_example[ \t]*\n(.*?)\n#\+end_example[ \t]*$",
                          re.MULTILINE | re.DOTALL)
# How many ticks' evals the log keeps at hand for the shell's last exchanges (views.status).
RECENT_EVALS = 50


def eval_org(done: ChatEval) -> str:
    """The ``** Eval`` part of a tick: the form, then its result or error."""
    value = (done.result if done.success else done.error) or ""
    return (f"** Eval{'' if done.success else ' (error)'}\n"
            f"#+begin_src emacs-lisp\n{_escape_code(done.form)}\n#+end_src\n"
            f"#+RESULTS:\n#+begin_example\n{_escape_code(value)}\n#+end_example\n\n")


def parse_eval(body: str, failed: bool) -> ChatEval | None:
    """The eval whose ``** Eval`` part (FAILED: ``** Eval (error)``) has BODY; None if it is not one."""
    form = _EVAL_FORM.search(body)
    if form is None:
        return None
    result = _EVAL_RESULT.search(body, form.end())
    value = _unescape_code(result[1]) if result is not None else ""
    if failed:
        return ChatEval(_unescape_code(form[1]), False, error=value or None)
    return ChatEval(_unescape_code(form[1]), True, result=value or None)


class ChatLog:
    """Appends ticks to ``agent-chat.org`` and reads the history back.

    The file holds the current month; earlier months are in ``chat/``, one
    file each (:mod:`.monthly`: a tick's commit then hashes only the current
    month, and start-up reads only the tail)."""

    def __init__(self, path: Path, *, rotate_bytes: int = ROTATE_BYTES) -> None:
        self.path = path
        self.log = MonthlyLog(path, path.parent / "chat", _TICK_HEAD, title="AMACS chat", noun="ticks",
                              rotate_bytes=rotate_bytes)
        # The evals of the last ticks read at the tail or written since, by tick (for the
        # shell's last exchanges: the chat items in memory hold only what was said).
        self.recent_evals: dict[int, ChatEval] = {}
        # Likewise the tasks that ended under each of the last ticks, in order.
        self.recent_tasks: dict[int, list[ChatTaskEnded]] = {}
        # The tick whose heading is the file's last, and whether its reply (or why none) is
        # written: a task that ends goes under it, before or after that reply.
        self._last_tick: tuple[int, bool] | None = None

    @property
    def bad_utf8(self) -> int | None:
        """Offset of the first byte read that is not UTF-8 (read as U+FFFD), if any."""
        return self.log.bad_utf8

    def files(self) -> list[Path]:
        """Every file of the chat log, oldest first (the months in ``chat/``, then this one)."""
        return self.log.files()

    def write_human(self, tick: int, timestamp: str, text: str) -> None:
        """Write-ahead: the heading and the human's input, before any model call."""
        self.log.append(
            f"* Tick {tick}\n:PROPERTIES:\n:TIMESTAMP: {timestamp}\n:END:\n\n"
            f"** Human\n{escape_org(text)}\n\n",
            new_entry=timestamp,
        )
        self._last_tick = (tick, False)

    def _heading(self, tick: int, timestamp: str) -> str:
        return f"* Tick {tick}\n:PROPERTIES:\n:TIMESTAMP: {timestamp}\n:END:\n\n"

    def write_event(self, tick: int, timestamp: str, began: str) -> None:
        """The heading of a tick no input of the person's began, and what began it (BEGAN)."""
        self.log.append(f"{self._heading(tick, timestamp)}** Event\n{escape_org(began)}\n\n", new_entry=timestamp)
        self._last_tick = (tick, False)

    def write_blocked(self, tick: int, timestamp: str, why: str, *, with_heading: bool) -> None:
        """Append that a compulsion blocked an action of the tick (WHY: what, by whom, its words);
        a tick with no heading yet gets it here."""
        head = self._heading(tick, timestamp) if with_heading else ""
        self.log.append(f"{head}** Blocked\n{escape_org(why)}\n\n", new_entry=timestamp if with_heading else None)
        self._last_tick = (tick, True)

    def write_talk(self, line: str) -> None:
        """Append a line the shell showed of the agents (LINE names who said it), under the tick
        last begun."""
        self.log.append(f"** Talk\n{escape_org(line)}\n\n")

    def write_agent(self, tick: int, timestamp: str, reply: str, *, with_heading: bool) -> None:
        """Append the agent's part; a tick with no human input gets its heading here."""
        head = (
            f"* Tick {tick}\n:PROPERTIES:\n:TIMESTAMP: {timestamp}\n:END:\n\n"
            if with_heading
            else ""
        )
        self.log.append(f"{head}** Agent\n{nest_reply(reply)}\n\n", new_entry=timestamp if with_heading else None)
        self._last_tick = (tick, True)

    def write_no_reply(self, reason: str) -> None:
        """Append why the tick whose input was just written ends without a reply."""
        self.log.append(f"** No reply\n{escape_org(reason)}\n\n")
        if self._last_tick is not None:
            self._last_tick = (self._last_tick[0], True)

    def write_task_ended(self, text: str, ok: bool) -> None:
        """Append a subagent task's end, the line the shell showed (TEXT after ✓ when OK, else ✗),
        under the tick last begun: before its reply when that is not written yet."""
        line = " ".join(text.split())
        if len(line) > TASK_LINE_CHARS:
            line = line[:TASK_LINE_CHARS - 1] + "…"
        self.log.append(f"** Task ended\n{escape_org(f'{_TASK_MARKS[ok]} {line}')}\n\n")
        if self._last_tick is not None:
            tick, replied = self._last_tick
            self._keep_task(tick, ChatTaskEnded(line, ok, before_reply=not replied))

    def _keep_task(self, tick: int, task: ChatTaskEnded) -> None:
        self.recent_tasks.setdefault(tick, []).append(task)
        if len(self.recent_tasks) > 2 * RECENT_EVALS:
            for old in sorted(self.recent_tasks)[:-RECENT_EVALS]:
                del self.recent_tasks[old]

    def write_eval(self, tick: int, done: ChatEval) -> None:
        """Append the eval of TICK (after its agent part, which wrote the heading if needed)."""
        self.log.append(eval_org(done))
        self._keep_eval(tick, done)

    def _keep_eval(self, tick: int, done: ChatEval) -> None:
        self.recent_evals[tick] = done
        if len(self.recent_evals) > 2 * RECENT_EVALS:
            for old in sorted(self.recent_evals)[:-RECENT_EVALS]:
                del self.recent_evals[old]

    def read(self) -> list[ChatEntry]:
        """Every tick of the log (``chat/`` and this file), oldest first."""
        return [entry for _span, text in self.log.entries() if (entry := parse_tick(text)) is not None]

    def inputs(self, count: int, before: int | None = None) -> list[ChatEntry]:
        """The newest COUNT ticks with the person's input of those before tick BEFORE (None: of
        all), newest first: the files are read from their end only as far as that takes (a
        few hundred of 20,000 ticks: the whole log took 0.4 s)."""
        asked = count + 1
        while True:
            spans = self.log.tail(asked, budget=1 << 62)
            found = [entry for _span, text in reversed(spans)
                     if (entry := parse_tick(text)) is not None and entry.human is not None
                     and (before is None or entry.tick < before)]
            if len(found) >= count or len(spans) < asked:
                return found[:count]
            asked *= 2

    def input_page(self, count: int, before: int | None = None) -> tuple[list[ChatEntry], bool]:
        """A page of :meth:`inputs`, newest first: the COUNT newest of those before tick BEFORE
        (None: of all), and whether older ones are left (the next page: BEFORE the oldest of
        these ticks).  What M-x amacs-rewind's picker offers and ``amacs-server ticks`` lists."""
        said = self.inputs(count + 1, before)
        return said[:count], len(said) > count

    def read_tail(self, count: int, chunk: int = 1 << 16, budget: int = TAIL_BYTES) -> list[ChatEntry]:
        """The last COUNT ticks, oldest first, of those that begin within BUDGET bytes of the
        log's end (the newest always): the files are read from their end only as far as
        they need (start-up reads the windows the context shows, issues 10 and 12).

        A tick starts at a ``* Tick`` line; the human's text cannot start one
        (:func:`escape_org`) and the reply's headings are demoted, so the ticks
        are found by that line alone."""
        entries = [entry for _span, text in self.log.tail(count, budget=budget, chunk=chunk)
                   if (entry := parse_tick(text)) is not None]
        for entry in entries:
            if entry.eval is not None:
                self._keep_eval(entry.tick, entry.eval)
            for task in entry.tasks:
                self._keep_task(entry.tick, task)
        if entries:
            last = entries[-1]
            self._last_tick = (last.tick, last.agent is not None or last.no_reply is not None)
        return entries


def parse_tick(text: str) -> ChatEntry | None:
    """The tick whose org text (``* Tick N`` to the next tick) is TEXT; None if it is not one.

    The structure is the one :class:`ChatLog` writes, so it is read line by line,
    not with an org parser (orgparse takes ~10 s for 50 MB): the
    human's part is its text up to the next part, blank lines around it
    dropped; the agent's is the raw text up to the next part (``** Eval``) or
    the tick's end, its demoted headings included, without the blank line
    that ends it; the eval's is read into :attr:`ChatEntry.eval`."""
    head = _TICK.match(text)
    if head is None:
        return None
    stamp = _TIMESTAMP.search(head[2]) if head[2] is not None else None
    entry = ChatEntry(tick=int(head[1]), timestamp=stamp[1] if stamp else "")
    parts = list(_PART.finditer(text, head.end()))
    for i, part in enumerate(parts):
        body = text[part.end() + 1:parts[i + 1].start() if i + 1 < len(parts) else len(text)]
        if part[1] == "Human":
            entry.human = unescape_org(body.strip("\n"))
        elif part[1] == "Eval":
            entry.eval = parse_eval(body, failed=part[2] is not None)
        elif part[1] in ("Rewound", "Forked"):
            continue  # a rewind's or fork's record (persistence.history), not part of the exchange
        elif part[1] == "Event":
            entry.event = unescape_org(body.strip("\n"))
        elif part[1] == "Blocked":
            entry.blocked.append(unescape_org(body.strip("\n")))
        elif part[1] == "Talk":
            entry.talk.append(unescape_org(body.strip("\n")))
        elif part[1] == "No reply":
            entry.no_reply = unescape_org(body.strip("\n"))
        elif part[1] == "Task ended":
            line = unescape_org(body.strip("\n"))
            mark, _, said = line.partition(" ")
            entry.tasks.append(ChatTaskEnded(said, mark == _TASK_MARKS[True],
                                             before_reply=entry.agent is None and entry.no_reply is None))
        else:
            entry.agent = unnest_reply(body[:-2] if body.endswith("\n\n") else body.removesuffix("\n"))
    return entry
