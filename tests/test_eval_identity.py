"""The server, not Emacs, knows whose eval is running (issue 11; agent-world-architecture.md, The World).

Each eval the server sends has an unguessable id and is recorded with the
agent it runs for; an agent-function call from Emacs acts as the agent of the
eval whose id it carries.  End to end: tests/e2e/test_identity.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

import pytest

from amacs_server.tools import agents as tools
from amacs_server.tools.kit import ToolError
from amacs_server.transport import emacs_face
from amacs_server.transport.emacs_face import MAX_REQUEST_ID, EmacsFace
from tests.test_eval_hold import Emacs


class World:
    """Records who the tools say is calling."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int | None]] = []

    def task(self, caller: str, eval_id: int | None, template: str, prompt: str,
             allowed: list[str] | None = None, request_input: bool = False,
             tools: list[str] | None = None, compulsions: Sequence[str] = ()) -> dict[str, Any]:
        self.calls.append((caller, eval_id))
        return {"handle": "task-9"}


async def sent(emacs: Emacs, count: int) -> list[dict[str, Any]]:
    while len(emacs.sent) < count:
        await asyncio.sleep(0.005)
    return emacs.sent


def test_an_outstanding_eval_is_known_by_its_id_until_it_is_answered() -> None:
    """agent_of_eval names the agent while the eval runs, and nobody once its answer came."""
    emacs = Emacs()
    face = EmacsFace(emacs)  # type: ignore[arg-type]

    async def main() -> None:
        running = asyncio.create_task(face.evaluate("(agent-task ...)", "task-1"))
        primary = asyncio.create_task(face.evaluate("(+ 1 2)"))
        reading = asyncio.create_task(face.hydrate(["*scratch*"]))
        task_eval, primary_eval, hydrate = await sent(emacs, 3)
        assert face.agent_of_eval(task_eval["id"]) == "task-1"
        assert face.agent_of_eval(primary_eval["id"]) == "primary"
        assert face.agent_of_eval(hydrate["id"]) is None  # a buffer read is not an eval
        assert face.evals_outstanding()
        face._resolve(task_eval["id"], {"success": True, "result": "t"})
        await running
        assert face.agent_of_eval(task_eval["id"]) is None
        assert face.agent_of_eval(primary_eval["id"]) == "primary"
        face._resolve(primary_eval["id"], {"success": True, "result": "3"})
        face._resolve(hydrate["id"], {"buffers": []})
        await primary
        await reading
        assert not face.evals_outstanding()

    asyncio.run(main())


def test_eval_ids_are_random_positive_fixnums() -> None:
    """Ids cannot be guessed from the last one, and stay within Emacs's fixnums (`eq' works on them)."""
    emacs = Emacs()
    face = EmacsFace(emacs)  # type: ignore[arg-type]

    async def main() -> list[int]:
        evals = [asyncio.create_task(face.evaluate("nil")) for _ in range(20)]
        events = await sent(emacs, 20)
        for event in events:
            face._resolve(event["id"], {"success": True, "result": "nil"})
        await asyncio.gather(*evals)
        return [e["id"] for e in events]

    ids = asyncio.run(main())
    assert len(set(ids)) == 20 and all(0 < i <= MAX_REQUEST_ID for i in ids)
    assert MAX_REQUEST_ID == 2**61 - 1  # Emacs's most-positive-fixnum on a 64-bit build
    assert sorted(ids) != list(range(ids[0], ids[0] + 20))  # not a sequence


def test_the_caller_comes_from_the_eval_not_from_emacs() -> None:
    """A call carrying a running eval's id acts as that eval's agent; the World hears that caller."""
    emacs = Emacs()
    face = EmacsFace(emacs)  # type: ignore[arg-type]
    world = World()
    agent_task = tools.acting_as_its_eval(face, tools.agent_task)

    async def main() -> None:
        running = asyncio.create_task(face.evaluate("(agent-task ...)", "task-1"))
        (event,) = await sent(emacs, 1)
        assert agent_task(world, event["id"], "researcher", "go", None) == {"handle": "task-9"}
        assert world.calls == [("task-1", event["id"])]
        with pytest.raises(ToolError, match="refused while an eval runs"):
            agent_task(world, None, "researcher", "go", None)  # an eval pretending to be outside any eval
        with pytest.raises(ToolError, match=r"eval 7 is not running"):
            agent_task(world, 7, "researcher", "go", None)  # a guessed id
        with pytest.raises(ToolError, match=r"eval 'primary' is not running"):
            agent_task(world, "primary", "researcher", "go", None)  # the old call shape, naming a caller
        face._resolve(event["id"], {"success": True, "result": "t"})
        await running
        with pytest.raises(ToolError, match=rf"eval {event['id']} is not running"):
            agent_task(world, event["id"], "researcher", "go", None)  # its eval is over: a stale id
        assert agent_task(world, None, "researcher", "go", None) == {"handle": "task-9"}  # the person, at M-x
        assert world.calls[1:] == [("primary", None)]

    asyncio.run(main())


def test_an_eval_given_up_at_its_time_limit_no_longer_acts(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past the limit the server stops waiting; what the stuck eval calls later is refused."""
    monkeypatch.setattr(emacs_face, "EVAL_GRACE_SECONDS", 0.0)
    monkeypatch.setattr(emacs_face, "EVAL_INTERRUPT_WAIT_SECONDS", 0.05)
    emacs = Emacs()
    face = EmacsFace(emacs)  # type: ignore[arg-type]
    face.eval_timeout = 0.05

    async def main() -> None:
        result = await face.evaluate("(while t)", "task-1")
        assert "did not come back" in (result.error or "")
        with pytest.raises(ToolError, match="is not running"):
            tools.caller_of(face, emacs.sent[0]["id"])

    asyncio.run(main())


def test_a_flag_is_not_an_eval_id() -> None:
    """t (True) is not an id, even if an eval with id 1 were running."""
    with pytest.raises(ToolError, match="eval True is not running"):
        tools.caller_of(SimpleNamespace(agent_of_eval=lambda _id: "task-1",  # type: ignore[arg-type]
                                        evals_outstanding=lambda: True), True)
