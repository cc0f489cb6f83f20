"""Skills (docs/ARCHITECTURE.md, Agent and World): folders with a SKILL.md and frontmatter.

Built-in skills live in the repository's ``skills/`` (package data of an installed
server, see :func:`amacs_server.config.builtin_skills_dir`); the person's own, in the
AMACS home's ``skills/``, override them by name.  Files are read fresh when
they change, so an edit shows on the next tick without a restart.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from .errors import AmacsError

_FRONT = re.compile(r"\A---\n(.*?)\n---\n?", re.S)
SKILL_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")
KINDS = ("core", "skill", "task", "viewpoint", "compulsion", "judge")
NOT_FOR_AGENTS = ("core", "judge")  # the system prompt, and rubrics the research tools run


class SkillError(AmacsError, ValueError):
    """A skill that does not exist or cannot be read; the message is for the agent."""


@dataclass(frozen=True)
class Skill:
    """One skill: its frontmatter and its body."""

    name: str
    description: str
    kind: str
    body: str
    path: Path
    mtime_ns: int
    allowed: tuple[str, ...] | None = None  # an agent template's `allowed:' actions (None: its type's defaults)
    model: str | None = None  # an agent template's `model:' (None: the session's model)
    tools: str | None = None  # an agent template's `tools:' (MCP tools, `[time/*, git/git_status]'), as written

    def summary(self) -> dict[str, str]:
        """Name, description and kind, for listings."""
        return {"name": self.name, "description": self.description, "kind": self.kind}


def parse_frontmatter(text: str) -> tuple[dict[str, str], str]:
    """Split ``---`` frontmatter (simple ``key: value`` lines) from the body."""
    match = _FRONT.match(text)
    if not match:
        return {}, text
    fields = {}
    for line in match.group(1).splitlines():
        if ":" in line and not line.startswith((" ", "#")):
            key, _, value = line.partition(":")
            fields[key.strip()] = value.strip().strip("\"'")
    return fields, text[match.end():]


class SkillLibrary:
    """Finds skills in the built-in folder and the person's folder (which wins)."""

    def __init__(self, builtin: Path, personal: Path) -> None:
        self.builtin = builtin
        self.personal = personal
        self._cache: dict[Path, Skill] = {}
        self._where: dict[str, tuple[Path, Path]] = {}  # a skill name's two candidate files

    def _folders(self) -> dict[str, Path]:
        found: dict[str, Path] = {}
        for root in (self.builtin, self.personal):  # later roots override earlier ones
            if root.is_dir():
                for folder in sorted(root.iterdir()):
                    if (folder / "SKILL.md").is_file() and SKILL_NAME.fullmatch(folder.name):
                        found[folder.name] = folder / "SKILL.md"
        return found

    def _read(self, name: str, path: Path, mtime: int | None = None) -> Skill:
        if mtime is None:
            mtime = path.stat().st_mtime_ns
        cached = self._cache.get(path)
        if cached is not None and cached.mtime_ns == mtime:
            return cached
        fields, body = parse_frontmatter(path.read_text(encoding="utf-8"))
        kind = fields.get("kind", "skill")
        allowed = fields.get("allowed")
        skill = Skill(name=name, description=fields.get("description", ""),
                      kind=kind if kind in KINDS else "skill", body=body.strip(), path=path, mtime_ns=mtime,
                      allowed=tuple(a for a in re.split(r"[\s,\[\]]+", allowed) if a) if allowed is not None else None,
                      model=fields.get("model") or None, tools=fields.get("tools"))
        self._cache[path] = skill
        return skill

    def get(self, name: str) -> Skill:
        """The skill NAME, read fresh if its file changed."""
        if not SKILL_NAME.fullmatch(name):
            raise SkillError(f"{name!r} is not a skill name (lowercase letters, digits, - and _)")
        for path in self._paths(name):  # the person's own wins
            try:  # one stat: is it a file, and has it changed (every task and model call asks)
                found = os.stat(path)
            except OSError:
                continue
            if stat.S_ISREG(found.st_mode):
                return self._read(name, path, found.st_mtime_ns)
        raise SkillError(f"no skill named {name!r}; (agent-list-available-skills) lists them")

    def _paths(self, name: str) -> tuple[Path, Path]:
        """Where skill NAME's file would be: the person's folder, then the built-in one."""
        paths = self._where.get(name)
        if paths is None:
            if len(self._where) >= 1024:  # names asked for that do not exist: never many, but not unbounded
                self._where.clear()
            paths = self._where[name] = (self.personal / name / "SKILL.md", self.builtin / name / "SKILL.md")
        return paths

    def available(self) -> list[Skill]:
        """Every skill, sorted by name."""
        return [self._read(name, path) for name, path in sorted(self._folders().items())]

    def for_agents(self) -> list[Skill]:
        """The skills an agent may list and bind: every one but the core skill and judges."""
        return [s for s in self.available() if s.kind not in NOT_FOR_AGENTS]
