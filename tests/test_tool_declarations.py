"""Each agent tool is declared once (tools/declared.py); its wrapper, method and skills are checked.

A tool's name, arguments and docs are written in its declaration. The elisp wrapper the agent's
eval calls (``elisp/amacs-agent.el``) must have the declared arglist and docstring and call the
declared method; the method must be in the server's table (``tools/registry.py``); the docs must
name every option the server's model of them allows; and every call a skill shows (in a code
span or an elisp block) must fit the declared arguments. The checks are functions of the texts,
so the tests at the end show each one failing on a drifted copy.
"""

from __future__ import annotations

import importlib.util
import inspect
import re
from pathlib import Path

from amacs_server.tools import declared, registry
from amacs_server.tools.declared import Tool

ROOT = Path(__file__).resolve().parents[1]
AGENT_EL = (ROOT / "elisp" / "amacs-agent.el").read_text(encoding="utf-8")
SKILLS = {path.parent.name: path.read_text(encoding="utf-8") for path in (ROOT / "skills").glob("*/SKILL.md")}

_spec = importlib.util.spec_from_file_location("tool_wrappers", ROOT / "scripts" / "tool-wrappers.py")
assert _spec is not None and _spec.loader is not None
tool_wrappers = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tool_wrappers)

# The person's methods an eval may call too: in amacs-agent.el, not in the agents' registry.
SHARED_WITH_THE_PERSON = {"consciousness", "set_consciousness"}


def read_string(text: str, i: int) -> tuple[str, int]:
    """The elisp string literal at ``text[i]`` (a double quote), read: its value, the index past it."""
    out = []
    i += 1
    while text[i] != '"':
        if text[i] == "\\":
            escaped = text[i + 1]
            out.append({"n": "\n", "\n": ""}.get(escaped, escaped))
            i += 2
        else:
            out.append(text[i])
            i += 1
    return "".join(out), i + 1


def defuns(elisp: str) -> dict[str, tuple[str, str, str]]:
    """Each ``agent-*`` function the elisp defines: (arglist, docstring, body)."""
    found = {}
    heads = list(re.finditer(r"^\(defun (agent-[a-z-]+) \(([^)]*)\)\n  ", elisp, re.M))
    for n, head in enumerate(heads):
        doc, end = read_string(elisp, head.end()) if elisp[head.end()] == '"' else ("", head.end())
        stop = heads[n + 1].start() if n + 1 < len(heads) else len(elisp)
        found[head.group(1)] = (head.group(2), doc, elisp[end:stop])
    return found


def keyword(field: str) -> str:
    return ":" + field.replace("_", "-")


def wrapper_drift(tools: tuple[Tool, ...], elisp: str) -> list[str]:
    """How the elisp wrappers differ from the declarations (empty: not at all)."""
    problems = []
    wrappers = defuns(elisp)
    for name in sorted(set(wrappers) - {t.function for t in tools}):
        problems.append(f"{name}: defined in amacs-agent.el, declared nowhere")
    for tool in tools:
        if tool.function not in wrappers:
            problems.append(f"{tool.function}: declared, not defined in amacs-agent.el")
            continue
        args, doc, body = wrappers[tool.function]
        if args != tool.args:
            problems.append(f"{tool.function}: arglist ({args}), declared ({tool.args})")
        if doc != tool.doc:
            problems.append(f"{tool.function}: docstring differs from its declaration (scripts/tool-wrappers.py "
                            f"writes it):\n{doc}\n---\n{tool.doc}")
        if not re.search(rf"\(amacs--(?:agent-call|call-sync) '{tool.method}\b", body):
            problems.append(f"{tool.function}: does not call the declared method {tool.method}")
    return problems


def option_drift(tools: tuple[Tool, ...]) -> list[str]:
    """Options a tool's docs leave out, or a model that is not the one its method reads."""
    problems = []
    servers = {**registry.AS_ITS_EVAL, **registry.ON_THE_LOOP, **registry.ON_ITS_THREAD}
    for tool in tools:
        if tool.options is None:
            continue
        for field in tool.options.model_fields:
            if not re.search(rf"{re.escape(keyword(field))}\b", tool.doc):
                problems.append(f"{tool.function}: its docs do not name the option {keyword(field)}")
        params = inspect.signature(servers[tool.method]).parameters.values()
        annotations = " ".join(str(p.annotation) for p in params)
        if "Options" in annotations and tool.options.__name__ not in annotations:
            problems.append(f"{tool.function}: declared {tool.options.__name__}, {tool.method} reads {annotations}")
    return problems


# What the server's function for each table is handed before the arguments Emacs sends, after the
# parts of the host its family takes (registry.TAKES).
LEADING = {"AS_ITS_EVAL": ("caller",), "ON_THE_LOOP": (), "agent_tool": ("evals", "on_loop"), "history_search": ()}


def wire_drift(tools: tuple[Tool, ...], elisp: str) -> list[str]:
    """Calls of a wrapper that the server's function of its method cannot take."""
    problems = []
    wrappers = defuns(elisp)
    for tool in tools:
        if tool.method in SHARED_WITH_THE_PERSON or tool.function not in wrappers:
            continue
        seen: list[list[object]] = []
        read_form(tokens(wrappers[tool.function][2]), 0, seen)
        for form in seen:
            if form[0] == "amacs--agent-call":
                sent = 1 + len(form[2:])  # the eval's id first
            elif form[0] == "amacs--call-sync":
                args = form[2]
                sent = 0 if args == "nil" else len(args) - 1  # (list A B)
            else:
                continue
            table = "AS_ITS_EVAL" if tool.method in registry.AS_ITS_EVAL else (
                "ON_THE_LOOP" if tool.method in registry.ON_THE_LOOP else tool.method)
            server = {**registry.AS_ITS_EVAL, **registry.ON_THE_LOOP, **registry.ON_ITS_THREAD}[tool.method]
            try:
                inspect.signature(server).bind(*registry.TAKES[tool.method], *LEADING[table], *([None] * sent))
            except TypeError as error:
                problems.append(f"{tool.function}: sends {sent} arguments to {tool.method}, which {error}")
    return problems


def calls(text: str) -> list[str]:
    """The code a skill shows: its code spans and its elisp blocks."""
    blocks = re.findall(r"```elisp\n(.*?)```", text, re.S)
    spans = re.findall(r"`([^`\n]+)`", re.sub(r"```.*?```", "", text, flags=re.S))
    return blocks + spans


def tokens(code: str) -> list[str]:
    return re.findall(r'"(?:[^"\\]|\\.)*"|[()]|\'|[^\s()\'"]+', code)


def read_form(toks: list[str], i: int, seen: list[list[object]]) -> tuple[object, int]:
    """The form at ``toks[i]``, as nested lists of atoms, and the index past it.

    Each list read is added to SEEN; IndexError when it is not closed."""
    if toks[i] == "'":
        quoted, j = read_form(toks, i + 1, seen)
        return ["quote", quoted], j
    if toks[i] != "(":
        return toks[i], i + 1
    items: list[object] = []
    i += 1
    while toks[i] != ")":
        item, i = read_form(toks, i, seen)
        items.append(item)
    seen.append(items)
    return items, i + 1


def sexps(code: str) -> list[list[object]]:
    """Every ``(agent-...)`` form in CODE; unclosed ones left out."""
    toks, seen, i = tokens(code), [], 0
    while i < len(toks):
        try:
            _, i = read_form(toks, i, seen)
        except IndexError:
            break
    return [form for form in seen if form and isinstance(form[0], str) and form[0].startswith("agent-")]


def call_drift(tools: tuple[Tool, ...], skills: dict[str, str]) -> list[str]:
    """Calls the skills show that the declared arguments do not allow, and tools no skill shows."""
    problems = []
    by_name = {tool.function: tool for tool in tools}
    for skill, text in sorted(skills.items()):
        for code in calls(text):
            for form in sexps(code):
                tool = by_name.get(str(form[0]))
                args = form[1:]
                if tool is None or "..." in args:
                    continue
                first = next((n for n, a in enumerate(args) if isinstance(a, str) and a.startswith(":")), len(args))
                positional, options = args[:first], args[first:]
                least, most = tool.arity()
                if len(positional) < least or (most is not None and len(positional) > most):
                    problems.append(f"skill {skill}: {code!r} gives {tool.function} {len(positional)} arguments ({tool.args})")
                if tool.options is not None:
                    allowed = {keyword(f) for f in tool.options.model_fields}
                    unknown = sorted(str(k) for k in options[::2] if k not in allowed)
                    if unknown:
                        problems.append(f"skill {skill}: {code!r} gives {tool.function} options it has not: {unknown}")
    for tool in tools:
        if f"({tool.function}" not in skills[tool.skill]:
            problems.append(f"{tool.function}: not shown called in the skill {tool.skill}")
    return problems


def test_every_wrapper_has_its_declared_arguments_docs_and_method():
    assert len(defuns(AGENT_EL)) >= 30  # the parser still finds them
    assert wrapper_drift(declared.TOOLS, AGENT_EL) == []


def test_the_wrappers_are_as_the_script_writes_them_from_the_declarations():
    assert tool_wrappers.written(AGENT_EL) == AGENT_EL
    drifted = AGENT_EL.replace('"Let the paused AGENT (an id) go on."', '"Let AGENT go on."')
    assert tool_wrappers.written(drifted) == AGENT_EL


def test_every_wrapper_sends_what_its_method_takes():
    assert wire_drift(declared.TOOLS, AGENT_EL) == []


def test_the_declared_methods_are_the_registry():
    methods = {tool.method for tool in declared.TOOLS}
    assert methods - SHARED_WITH_THE_PERSON == registry.names()


def test_every_option_is_named_in_the_docs_and_is_the_one_the_server_reads():
    assert option_drift(declared.TOOLS) == []


def test_every_call_a_skill_shows_fits_the_declared_arguments():
    assert sum(len(sexps(code)) for text in SKILLS.values() for code in calls(text)) >= 40
    assert call_drift(declared.TOOLS, SKILLS) == []


def test_the_skill_a_tool_is_shown_in_is_the_core_skill_or_one_it_names():
    assert {tool.skill for tool in declared.TOOLS} <= {"core", "memory", "threads", "subagents", "mcp-tools"}


# Each check, shown failing on a drifted copy.


def test_a_drifted_docstring_or_arglist_or_method_fails():
    evict = declared.by_function()["agent-memory-evict"]
    drifted_doc = AGENT_EL.replace("Move the item MEM-ID out of active memory", "Move MEM-ID out of memory")
    assert [p.split(":")[0] for p in wrapper_drift(declared.TOOLS, drifted_doc)] == [evict.function]
    drifted_args = AGENT_EL.replace("(defun agent-memory-evict (mem-id)", "(defun agent-memory-evict (mem-id &optional now)")
    assert wrapper_drift(declared.TOOLS, drifted_args) == ["agent-memory-evict: arglist (mem-id &optional now), declared (mem-id)"]
    drifted_method = AGENT_EL.replace("'memory_evict", "'memory_drop")
    assert wrapper_drift(declared.TOOLS, drifted_method) == [
        "agent-memory-evict: does not call the declared method memory_evict"
    ]
    undeclared = AGENT_EL + '\n(defun agent-new (x)\n  "New."\n  (amacs--agent-call \'new x))\n'
    assert wrapper_drift(declared.TOOLS, undeclared) == ["agent-new: defined in amacs-agent.el, declared nowhere"]


def test_a_wrapper_that_sends_more_than_its_method_takes_fails():
    drifted = AGENT_EL.replace("(amacs--call-sync 'thread_switch (list id))", "(amacs--call-sync 'thread_switch (list id t))")
    assert wire_drift(declared.TOOLS, drifted) == [
        "agent-switch-thread: sends 2 arguments to thread_switch, which too many positional arguments"
    ]


def test_an_option_the_docs_leave_out_fails():
    create = declared.by_function()["agent-memory-create"]
    quiet = Tool(create.function, create.method, create.args, create.skill, create.options,
                 create.doc.replace(" and :tags (a string or a list of strings)", ""))
    assert option_drift((quiet,)) == ["agent-memory-create: its docs do not name the option :tags"]


def test_a_skill_call_with_an_option_or_argument_the_tool_has_not_fails():
    renamed = dict(SKILLS, memory=SKILLS["memory"].replace(":tags '(\"shopping\")", ":labels '(\"shopping\")"))
    assert call_drift(declared.TOOLS, renamed) == [
        "skill memory: '(agent-memory-create \"groceries\" \"milk\" :labels \\'(\"shopping\"))' "
        "gives agent-memory-create options it has not: [':labels']"
    ]
    extra = dict(SKILLS, threads=SKILLS["threads"].replace('(agent-switch-thread "refactor")',
                                                          '(agent-switch-thread "refactor" t)'))
    assert call_drift(declared.TOOLS, extra) == [
        "skill threads: '(agent-switch-thread \"refactor\" t)' gives agent-switch-thread 2 arguments (id)"
    ]
    gone = dict(SKILLS, threads=SKILLS["threads"].replace("(agent-switch-thread", "(switch-thread"))
    assert call_drift(declared.TOOLS, gone) == ["agent-switch-thread: not shown called in the skill threads"]
