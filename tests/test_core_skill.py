"""The core skill teaches every capability (issue 13): it is the only manual the model gets.

Every ``agent-*`` function the elisp defines is shown called in skills/core/SKILL.md,
every context section the server writes is named there, and every response
field is in its JSON.  Adding one without documenting it fails here.
"""

import dataclasses
import re
from pathlib import Path
from types import SimpleNamespace

from amacs_server.context.assemble import Conversation
from amacs_server.inference.parse import AgentResponse

ROOT = Path(__file__).resolve().parents[1]
SKILL = (ROOT / "skills" / "core" / "SKILL.md").read_text(encoding="utf-8")


def agent_functions() -> set[str]:
    names = set()
    for file in (ROOT / "elisp").glob("*.el"):
        names.update(re.findall(r"^\(defun (agent-[a-z-]+) ", file.read_text(encoding="utf-8"), re.M))
    return names


def context_sections() -> set[str]:
    """Every <tag> the primary's context or a subagent's messages can hold."""
    tags = set(Conversation._sections(SimpleNamespace(skills=[], threads=[], scratchpad=[], memory=[], buffers=[])))
    for source in ("amacs_server/context/assemble.py", "amacs_server/agents/subagent.py"):
        text = (ROOT / source).read_text(encoding="utf-8")
        tags.update(re.findall(r'section\("([a-z-]+)"', text))
        tags.update(re.findall(r'"<([a-z][a-z-]+)>', text))
    tags.update(("monologue", "chat"))  # the conversation's own sections
    return tags


def test_every_agent_function_is_shown_called():
    functions = agent_functions()
    assert len(functions) >= 30  # the parser still finds them
    missing = sorted(f for f in functions if f"({f}" not in SKILL)
    assert missing == [], f"not in skills/core/SKILL.md: {missing}"


def test_every_context_section_is_explained():
    sections = context_sections()
    assert {"memory", "chat", "events", "last-eval-result", "threads", "buffers"} <= sections
    missing = sorted(t for t in sections if f"`<{t}>`" not in SKILL)
    assert missing == [], f"sections not explained in skills/core/SKILL.md: {missing}"


def test_every_response_field_is_in_the_format():
    fields = {f.name for f in dataclasses.fields(AgentResponse)} - {"fallback"}  # the harness's own mark
    missing = sorted(f for f in fields if f'"{f}"' not in SKILL)
    assert missing == [], f"response fields not in the format: {missing}"


def test_the_skill_stays_tight():
    """It is the cached system prompt of every call: its size is a cost (chars / 4 ~ tokens)."""
    assert len(SKILL) < 12_000, len(SKILL)
