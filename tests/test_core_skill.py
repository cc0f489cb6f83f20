"""The core skill teaches every capability, itself or through a skill it names.

The core skill is the system prompt every call sends, so it stays small: the detail of memory,
threads, subagents and MCP tools is in skills it names, which the agent reads on need with
``(agent-read-skill "NAME")``.  Every ``agent-*`` function the elisp defines is shown called in
the core skill or in one of those skills, every context section the server writes is named in
the core skill, and every response field is in its JSON.  Adding one without documenting it
fails here.
"""

import dataclasses
import re
from pathlib import Path
from types import SimpleNamespace

from amacs_server.context.assemble import Conversation
from amacs_server.inference.catalog import ModelCatalog
from amacs_server.inference.parse import AgentResponse
from amacs_server.skills import SkillLibrary, parse_frontmatter

ROOT = Path(__file__).resolve().parents[1]
SKILL = (ROOT / "skills" / "core" / "SKILL.md").read_text(encoding="utf-8")
LIBRARY = SkillLibrary(ROOT / "skills", ROOT / "no-personal-skills")


def on_need() -> dict[str, str]:
    """The skills the core skill tells the agent to read (`- `NAME`:` lines), by name: their text."""
    names = re.findall(r"^- `([a-z0-9-]+)`:", SKILL.split('(agent-read-skill "NAME")', 1)[1], re.M)
    return {name: LIBRARY.get(name).body for name in names}


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
    manual = "\n".join([SKILL, *on_need().values()])
    missing = sorted(f for f in functions if f"({f}" not in manual)
    assert missing == [], f"not in skills/core/SKILL.md nor a skill it names: {missing}"


def test_the_core_skill_names_the_skills_that_hold_the_rest():
    skills = on_need()
    assert set(skills) == {"memory", "threads", "subagents", "mcp-tools"}
    for name, text in skills.items():  # each is a skill an agent may list and read
        assert LIBRARY.get(name).kind == "skill" and len(text) > 200, name
    assert "(agent-read-skill" in SKILL


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
    """It is the system prompt of every call: about 1,500 tokens, by the estimate the server
    fits contexts with before a call calibrates it (a local model pays for each on every turn)."""
    body = parse_frontmatter(SKILL)[1].strip()
    tokens = ModelCatalog(store=None).estimate(len(body))  # type: ignore[arg-type]  # uncalibrated: no store asked
    assert tokens <= 1_500, (tokens, len(body))
