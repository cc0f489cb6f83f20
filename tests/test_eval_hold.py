"""The eval time limit waits while the person decides (`amacs-eval-confirm', issue 9)."""

from __future__ import annotations

import asyncio
from typing import Any

from amacs_server.transport.emacs_face import EmacsFace


class Emacs:
    """Stands in for the EPC server: records what the face sends; has no pid to signal."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []
        self.emacs_pid: int | None = None

    def notify(self, event: dict[str, Any], now: bool = False) -> bool:
        self.sent.append(event)
        return True


def face_with_limit(seconds: float) -> tuple[EmacsFace, Emacs]:
    emacs = Emacs()
    face = EmacsFace(emacs)  # type: ignore[arg-type]
    face.eval_timeout = seconds
    return face, emacs


async def answer_later(face: EmacsFace, emacs: Emacs, hold_for: float, then_run_for: float,
                       answer: dict[str, Any] | None = None) -> None:
    """Emacs asks the person for HOLD_FOR seconds, then evaluates for THEN_RUN_FOR seconds."""
    while not emacs.sent:
        await asyncio.sleep(0.01)
    rid = emacs.sent[0]["id"]
    face._hold(rid, True)
    await asyncio.sleep(hold_for)
    face._hold(rid, False)
    await asyncio.sleep(then_run_for)
    face._resolve(rid, answer or {"success": True, "result": "3"})


def test_the_limit_does_not_run_while_the_person_decides() -> None:
    """Asked for 2.5 s with a 0.3 s limit (+1 s grace): the answer is not counted as past the limit.

    Had the limit run, the error would read "the eval ran past the time limit ...".
    """
    face, emacs = face_with_limit(0.3)

    async def main() -> Any:
        helper = asyncio.create_task(answer_later(face, emacs, hold_for=2.5, then_run_for=0.1,
                                                  answer={"success": False, "error": "the person declined this eval"}))
        result = await face.evaluate("(+ 1 2)")
        await helper
        return result

    result = asyncio.run(main())
    assert result.error == "the person declined this eval"


def test_the_limit_restarts_when_the_person_has_decided() -> None:
    """After the answer the eval gets the whole limit again, and no more: past it, it is stopped."""
    face, emacs = face_with_limit(0.2)

    async def main() -> Any:
        helper = asyncio.create_task(answer_later(face, emacs, hold_for=0.5, then_run_for=30))
        started = asyncio.get_running_loop().time()
        result = await face.evaluate("(while t)")
        helper.cancel()
        return result, asyncio.get_running_loop().time() - started

    result, elapsed = asyncio.run(main())
    assert not result.success
    assert "did not come back" in (result.error or "")  # no pid to interrupt: it gave up waiting
    assert 0.5 + 0.2 + 1.0 <= elapsed < 0.5 + 0.2 + 1.0 + 5.0 + 1.0  # held, then limit + grace, then the wait
