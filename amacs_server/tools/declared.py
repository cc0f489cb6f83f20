"""Each agent tool declared once: its elisp function, arguments, docs, EPC method and skill.

An agent calls a tool from its eval through an elisp function (``elisp/amacs-agent.el``), which
calls a method of the server's one table (``tools/registry.py``); a skill shows it called. This
is where a tool's name, arguments and docs are written: tests/test_tool_declarations.py checks
each elisp wrapper's arglist and docstring against its declaration, its method against the
registry and what it sends against the server function that takes it, its options against
the server's model of them (the docs name every keyword), and every call any skill shows
against the arguments declared here (a keyword no model allows, too few or too many
arguments). Change a tool here, then run scripts/tool-wrappers.py, which writes each wrapper's
arglist and docstring from its declaration (its body stays written by hand).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..arguments import Options
from .agents import NotifyOptions, TaskOptions, WaitOptions
from .history import HistoryOptions
from .memory import CreateOptions, LoadOptions, SearchOptions
from .work import CompleteOptions, ThreadOptions


@dataclass(frozen=True)
class Tool:
    """One agent tool: the elisp function an eval calls and what it says of itself.

    ``method`` is the server method it calls; ``args`` the function's elisp arglist
    (``"name content &rest options"``); ``skill`` the skill that shows it called (``core``, or
    one the core skill names for reading on need); ``options``, when its ``&rest`` takes a
    plist of options, the server's model of them; ``doc`` its docstring, as Emacs shows it.
    """

    function: str
    method: str
    args: str
    skill: str
    options: type[Options] | None
    doc: str

    def arity(self) -> tuple[int, int | None]:
        """How many arguments before its options it takes: at least, at most (None: any)."""
        words = self.args.split()
        rest = "&rest" in words
        plain = words[: words.index("&rest")] if rest else words
        optional = plain.index("&optional") if "&optional" in plain else len(plain)
        required = len(plain[:optional])
        most = len([w for w in plain if w != "&optional"])
        return required, (None if rest and self.options is None else most)


TOOLS: tuple[Tool, ...] = (
    Tool("agent-consciousness", "consciousness", "", "core", None,
         "Return the agent's consciousness alist."),
    Tool("agent-set-consciousness", "set_consciousness", "field value", "core", None,
         """Set consciousness FIELD (a symbol) to VALUE; return the new value.
Harness-owned fields are refused with an error: identity, the tick
and time, budget, and the last eval result."""),
    Tool("agent-memory-create", "memory_create", "name content &rest options", "memory", CreateOptions,
         """Create memory item NAME holding CONTENT; return its MemId and version.
CONTENT is a string or data.  OPTIONS: :kind ("note" or
"summary") and :tags (a string or a list of strings).  The item
is pinned in active memory until evicted."""),
    Tool("agent-memory-mutate", "memory_mutate", "mem-id content", "memory", None,
         """Write CONTENT as the next version of the item MEM-ID; return the new version.
Only items shown with "mutable": true are changed; the change shows
next tick.  A scratchpad entry takes a string (its new text) or a
plist of :heading, :thread and :content, and scratchpad.org changes
too.  Earlier versions stay in long-term memory."""),
    Tool("agent-memory-evict", "memory_evict", "mem-id", "memory", None,
         """Move the item MEM-ID out of active memory; a handle with its MemId stays.
Only items shown with "evictable": true are evicted;
`agent-memory-load' brings one back."""),
    Tool("agent-memory-load", "memory_load", "mem-id &optional version &rest options", "memory", LoadOptions,
         """Bring the item MEM-ID into active memory and return it with its content.
Loads the latest version, the one MEM-ID names, or VERSION.  OPTIONS
are :version, and :offset and :limit (characters) to read a long text
a part at a time: the answer has :total-chars and, for a part,
:offset, :limit and :next-offset (nil after the last part).  VERSION
may be left out: (agent-memory-load ID :offset 8000)."""),
    Tool("agent-memory-search", "memory_search", "query &rest options", "memory", SearchOptions,
         """Search long-term memory for QUERY; return ranked hits with snippets.
One hit per item: its newest version that matches, and :latest N when
the item has a newer version that does not.
OPTIONS: :limit (default 10), :tags, :mode ("keyword")."""),
    Tool("agent-history-search", "history_search", "query &rest options", "memory", HistoryOptions,
         """Search your history for QUERY; return the lines holding it, newest first.
The history is the commits of your ticks (their subjects), your monologue
and the diff of each tick (what it changed in your files).  Each match is
(:tick N :in SOURCE :line TEXT), :file too for a diff line, whose + or -
says added or removed.  OPTIONS: :tick N (that tick only), :limit (20),
:only (a list of "subject", "monologue", "diff")."""),
    Tool("agent-create-thread", "thread_create", "id &rest options", "threads", ThreadOptions,
         """Open thread ID; OPTIONS are :concern (a string) and :buffers (a list).
At most three threads may be open.  The new thread becomes active only
when no thread is."""),
    Tool("agent-switch-thread", "thread_switch", "id", "threads", None,
         "Make thread ID the active one; its buffers and skills load next tick."),
    Tool("agent-complete-thread", "thread_complete", "id &rest options", "threads", CompleteOptions,
         """Complete thread ID; OPTIONS are :evidence (data) and :learned (a string).
The completed thread stays searchable in long-term memory."""),
    Tool("agent-thread-add-buffer", "thread_add_buffer", "id buffer", "threads", None,
         "Add BUFFER (a buffer name or a file path) to thread ID."),
    Tool("agent-thread-remove-buffer", "thread_remove_buffer", "id buffer", "threads", None,
         "Remove BUFFER from thread ID."),
    Tool("agent-list-available-skills", "skills_list", "", "threads", None,
         "Return the skills that may be bound: name, description and kind each."),
    Tool("agent-read-skill", "skill_read", "skill", "threads", None,
         """Return SKILL's text now, as a plist of name, description, kind and text.
It needs no thread and binds nothing: the text is in this eval's result."""),
    Tool("agent-bind-skill-to-thread", "skill_bind", "skill &optional thread", "threads", None,
         """Bind SKILL to THREAD (default: the active thread).
Its text appears in the context while that thread is active."""),
    Tool("agent-unbind-skill-from-thread", "skill_unbind", "skill &optional thread", "threads", None,
         "Unbind SKILL from THREAD (default: the active thread)."),
    Tool("agent-task", "agent_task", "template prompt &rest options", "subagents", TaskOptions,
         """Start a Task from skill TEMPLATE with PROMPT and return its handle at once.
The handle is a plist with :handle and :talk-id; the task's final reply
arrives later as an event.  OPTIONS: :allowed (a list of actions),
:request-input (talk to the person in the shell until done), :tools (the
MCP tools it may call) and :compulsions (templates of compulsions that
watch it from its first step)."""),
    Tool("agent-viewpoint", "agent_viewpoint", "name template", "subagents", None,
         "Start a persistent Viewpoint called NAME from skill TEMPLATE."),
    Tool("agent-consider", "agent_consider", "prompt", "subagents", None,
         """Ask each viewpoint in turn about PROMPT; each hears the others' comments.
Returns at once; the list of comments arrives as an event."""),
    Tool("agent-discard", "agent_discard", "name", "subagents", None,
         "End the viewpoint NAME; the others hear that it left."),
    Tool("agent-compulsion", "agent_compulsion", "template &optional prompt", "subagents", None,
         """Attach a Compulsion from skill TEMPLATE, with PROMPT, to this agent.
It sees every result and every action, and may block actions."""),
    Tool("agent-quit", "agent_quit", "", "subagents", None,
         "End this compulsion (only a compulsion may call it)."),
    Tool("agent-talk-user", "talk_user", "text", "subagents", None,
         "Show TEXT to the person; return the TalkId their reply will carry."),
    Tool("agent-talk-agent", "talk_agent", "agent text", "subagents", None,
         "Send TEXT to AGENT (an id or a viewpoint name); return the TalkId."),
    Tool("agent-talk-brain", "talk_brain", "brain text", "subagents", None,
         "Send TEXT to BRAIN, one of this agent's own subagents; return the TalkId."),
    Tool("agent-talk-log", "talk_log", "text", "subagents", None,
         "Write TEXT to the transcript log; return the TalkId."),
    Tool("agent-wait-for", "wait_for", "talk-ids &rest options", "subagents", WaitOptions,
         """After this eval, sleep until replies to all TALK-IDS (one or a list) arrive.
TALK-IDS must come from agent-talk-* or agent-task calls in the same eval.
OPTIONS: :timeout seconds (then a Time event wakes the agent).
The wait is noted in `amacs--eval-wait', so the shell can say whom
the agent waits for."""),
    Tool("agent-list-agents", "agents_list", "", "subagents", None,
         "Return the live agents: id, type, template, state and cost each."),
    Tool("agent-notify", "agent_notify", "text &rest options", "subagents", NotifyOptions,
         """Share TEXT with this agent's viewpoints without asking for a reply.
OPTIONS: :to NAME shares it with the viewpoint NAME only."""),
    Tool("agent-pause", "agent_control", "agent", "subagents", None,
         """Pause AGENT (an id) until `agent-resume': no model call meanwhile.
The primary may pause any agent, an agent only its own subagents;
a compulsion obeys no agent (only it ends itself, with `agent-quit')."""),
    Tool("agent-resume", "agent_control", "agent", "subagents", None,
         "Let the paused AGENT (an id) go on."),
    Tool("agent-cancel", "agent_control", "agent", "subagents", None,
         """Cancel AGENT (an id) and every subagent below it, now.
Its model call and its eval chain end; its transcript says it was cancelled."""),
    Tool("agent-tool", "agent_tool", "name &rest arguments", "mcp-tools", None,
         """Call the MCP tool NAME, "SERVER/TOOL", with ARGUMENTS; return its result.
ARGUMENTS are a plist, :name value ..., checked against the tool's
input schema before the call (an error names the argument).
The result is elisp data: structured content as a plist, text as
a string, an image or resource as a plist of its :mime-type and
size.  A result the tool marks as an error, a refused or blocked
call, a timeout and a server that is down all signal an error.
Example: (agent-tool "time/get_current_time" :timezone "UTC")."""),
)
"""Every agent tool, in the order ``amacs-agent.el`` defines them."""


def by_function() -> dict[str, Tool]:
    """Each tool by its elisp function's name."""
    return {tool.function: tool for tool in TOOLS}
