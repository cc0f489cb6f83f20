"""The files each agent's evals have read and written (docs/ARCHITECTURE.md, Agent and World).

Per agent, so a subagent starts knowing no file; each file is stamped as the
eval left it, so the agent's compulsions are told whether it changed on disk
since (another agent, or the person, may have written it meanwhile).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..state.consciousness import EvalResult

FILES_SHOWN = 100  # files an agent read or wrote, newest, listed for its compulsions


@dataclass(frozen=True)
class FileSeen:
    """A file as one agent's evals last left it: read, written, and its size and mtime then."""

    read: bool
    written: bool
    stamp: tuple[int, int] | None  # (mtime_ns, size) right after that eval; None: not on disk

    def since(self, path: str) -> str:
        """Whether PATH on disk is still as the agent left it, in words."""
        now = file_stamp(path)
        if now == self.stamp:
            return "unchanged since" if now is not None else "not on disk"
        return "deleted since" if now is None else "changed on disk since"


def file_stamp(path: str) -> tuple[int, int] | None:
    """(mtime_ns, size) of PATH, or None when it cannot be stat'ed (gone, or a remote name)."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return st.st_mtime_ns, st.st_size


class FilesSeen:
    """Every agent's files: agent id -> path -> :class:`FileSeen`, the newest last."""

    def __init__(self) -> None:
        self._by_agent: dict[str, dict[str, FileSeen]] = {}

    def __contains__(self, agent_id: object) -> bool:
        return agent_id in self._by_agent

    def of(self, agent_id: str) -> dict[str, FileSeen]:
        """AGENT_ID's files (empty when its evals touched none)."""
        return self._by_agent.get(agent_id, {})

    def note(self, agent_id: str, result: EvalResult) -> None:
        """Remember the files AGENT_ID's eval read and wrote, stamped as they are on disk now.

        A file the agent wrote is known to it as one it read is; the newest go last."""
        seen = self._by_agent.setdefault(agent_id, {})
        for path in dict.fromkeys((*result.files_read, *result.files_written)):
            before = seen.pop(path, None)
            seen[path] = FileSeen(read=path in result.files_read or bool(before and before.read),
                                  written=path in result.files_written or bool(before and before.written),
                                  stamp=file_stamp(path))

    def forget(self, agent_id: str) -> None:
        """AGENT_ID ended: its files go with it."""
        self._by_agent.pop(agent_id, None)

    def text(self, agent_id: str) -> str:
        """AGENT_ID's files, for its compulsions: what it did to each, and whether it changed since."""
        seen = list(self.of(agent_id).items())
        head = "Files this agent has read or written in its evals, and whether each changed on disk since:"
        if not seen:
            return f"{head} none."
        lines = [f"- {path} ({' and '.join(w for w, did in (('read', f.read), ('written', f.written)) if did)}; "
                 f"{f.since(path)})" for path, f in seen[-FILES_SHOWN:]]
        more = [f"(and {len(seen) - FILES_SHOWN} older ones)"] if len(seen) > FILES_SHOWN else []
        return "\n".join([head, *lines, *more])
