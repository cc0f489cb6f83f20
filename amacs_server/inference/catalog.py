"""The model in use: its capabilities (asked off the start-up path), and calls adapted to them.

At start and on ``amacs-set-model`` the catalog asks the backend what the model
accepts, in a task of the loop, so start-up does not wait.  The answer is kept in
the home for a day (:class:`~amacs_server.inference.capabilities.CapabilityStore`).
A request waits for it only where it could change the request otherwise than by a
400 (:meth:`ModelCatalog.waits_for_answer`): a new home's first answer does not
wait for the Models API.  Where the backend cannot say, :class:`Adapting`
learns from the model's 400s: a parameter it names is dropped, remembered, and the
call made once more; a 400 to a request made before the answer is in makes it
again with the answer.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol

from . import sdk
from .capabilities import (
    Capabilities,
    CapabilityStore,
    TooLong,
    from_model_info,
    from_openai_models,
    refused_param,
    too_long,
)
from .request import RequestSpec, sent_params
from .retry import InferenceError

if TYPE_CHECKING:
    from ..state.consciousness import ApiSettings
    from .backend import ModelResult

log = logging.getLogger("amacs")

ASK_TIMEOUT = 10.0  # seconds the first request waits for the backend's answer, at most
# Below this many tokens a request is smaller than every Messages API model's window (the least,
# 100K): the window the answer may report cannot change what it sends.
EARLY_TOKENS = 50_000
DEFAULT_CHARS_PER_TOKEN = 3.5  # before a call's usage calibrates it (JSON and code: fewer than prose's 4)


class Askable(Protocol):
    """A backend that can say what a model accepts."""

    async def capabilities(self, model: str) -> dict[str, Any] | None:
        """The backend's raw answer for MODEL (None: it could not be asked)."""


class ModelCatalog:
    """The capabilities of the model in use, and the estimate of its tokens per character."""

    def __init__(self, store: CapabilityStore) -> None:
        self.store = store
        self.key = ""
        self.backend = "anthropic"
        self.model = ""
        self.caps = Capabilities()
        # The person's window (AMACS_CONTEXT_WINDOW, M-x amacs-set-model's; a local model's n_ctx):
        # it beats what a server reports.
        self.setting_window: int | None = None
        self.chars_per_token = DEFAULT_CHARS_PER_TOKEN
        self._task: asyncio.Task[None] | None = None

    def use(self, backend: str, base_url: str | None, model: str, ask: Askable | None) -> None:
        """The model in use is now MODEL on BACKEND: take what the home knows of it, and (when
        that is missing or older than a day) ask ASK in a task of the running loop."""
        self.key = CapabilityStore.key(backend, base_url, model)
        self.backend, self.model = backend, model
        cached, fresh = self.store.get(self.key)
        self.caps = cached or Capabilities()
        self.chars_per_token = DEFAULT_CHARS_PER_TOKEN
        if self._task is not None:
            self._task.cancel()
            self._task = None
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop runs (a runtime driven by a test): the first call asks
            loop = None
        if not fresh and ask is not None and loop is not None:
            self._task = loop.create_task(self._ask(ask, self.key))

    async def _ask(self, ask: Askable, key: str) -> None:
        try:
            await sdk.SDKS[self.backend].ready()  # the SDK's import (seconds on a loaded machine) first,
            answer = await asyncio.wait_for(ask.capabilities(self.model), ASK_TIMEOUT)  # then the question
        except (TimeoutError, InferenceError) as err:
            log.info("could not ask the capabilities of %s: %r", self.model, err)
            return
        except Exception:  # noqa: BLE001 - a cache: the calls go on with what is known
            log.exception("asking the capabilities of %s", self.model)
            return
        if answer is None or key != self.key:
            return  # not reached (asked again later), or another model meanwhile
        if self.backend == "openai":
            fetched = from_openai_models(answer.get("models") or {}, self.model, answer.get("props"))
        else:
            fetched = from_model_info(answer)
        old = self.caps  # what 400s taught, and a window a refusal showed, outlive the day
        self.caps = replace(fetched, refused=old.refused, schema_form=old.schema_form,
                            max_input_tokens=fetched.max_input_tokens or old.max_input_tokens,
                            learned_window=old.learned_window)
        self._keep()
        log.info("capabilities of %s: %s", self.model, self.caps.to_json())

    def _keep(self) -> None:
        try:
            self.store.put(self.key, self.caps)
        except OSError as err:
            log.warning("could not keep the model's capabilities in %s: %s", self.store.path, err)

    @property
    def asking(self) -> bool:
        """The backend's answer is awaited."""
        return self._task is not None and not self._task.done()

    def waits_for_answer(self, settings: ApiSettings | None, chars: int) -> bool:
        """A request of CHARS characters of context under SETTINGS (None: any) waits for the
        backend's answer: not when the home knows the model from an earlier day (the answer
        refreshes that), nor, on the Messages API, when it can change the request only by
        the reply's schema or its most tokens (a 400 says either, and :class:`Adapting`
        makes the request again with the answer): no thinking or effort asked for (which
        type or level to send is the answer's), and too small for any window."""
        if not self.asking:
            return False
        if self.caps.fetched:
            return False
        return settings is None or not (self.backend == "anthropic" and not settings.thinking
                                        and settings.effort is None and self.estimate(chars) < EARLY_TOKENS)

    async def current(self, settings: ApiSettings | None = None, chars: int = 0) -> Capabilities:
        """The capabilities, once the backend answered (or ASK_TIMEOUT passed after the SDK's
        import, which the model call waits for anyway); at once for a request that need not
        wait (SETTINGS, CHARS: :meth:`waits_for_answer`)."""
        task = self._task
        if task is not None and self.waits_for_answer(settings, chars):
            await asyncio.wait({task})
        return self.caps

    @property
    def window(self) -> int | None:
        """The model's input window in tokens: the smaller of the person's setting and what a
        server's refusal showed, else what the server reports."""
        known = [w for w in (self.setting_window, self.caps.learned_window) if w]
        return min(known) if known else self.caps.max_input_tokens

    def answer_tokens(self, asked: int) -> int:
        """The most tokens an answer may take: on an OpenAI-compatible server, whose window holds
        the answer too, at most an eighth of a known window (the room `fit' keeps); else ASKED."""
        window = self.window
        if self.backend == "openai" and window is not None:
            return max(1, min(asked, window // 8))
        return asked

    def refuse(self, param: str) -> str:
        """The model refused PARAM: never send it again.  Returns what changed, in words.

        An OpenAI-compatible server that refuses the ``json_schema`` reply format is
        tried once with the ``json_object`` form (llama-cpp-python's) before the
        format is dropped; refusing ``reasoning_effort`` refuses thinking and effort."""
        if param == "format" and self.backend == "openai" and self.caps.schema_form != "json_object":
            self.caps = replace(self.caps, schema_form="json_object")
            said = "the json_schema reply format; trying its json_object form"
        elif param == "reasoning_effort":
            self.caps = self.caps.refusing("thinking").refusing("effort")
            said = "reasoning_effort; thinking and effort are not sent to it"
        else:
            self.caps = self.caps.refusing(param)
            said = f"{param}; not sent to it again"
        self._keep()
        return said

    def learn_window(self, tokens: int) -> None:
        """A server showed its window is TOKENS."""
        self.caps = self.caps.with_window(tokens)
        self._keep()

    def learn_refusal(self, refusal: TooLong, estimate: int) -> str | None:
        """A server refused a request as too long: REFUSAL, what it said; ESTIMATE, the request's
        tokens by the calibrated estimate.  The window it names is learned; one it does not name is
        below the request's tokens, so a window at or above them (a reported one: a proxy may report
        its price list's, not its model's) is taken down to nine tenths of them.  Returns the line
        that says a reported window was contradicted, else None."""
        if refusal.tokens:
            estimate = refusal.tokens
        before = self.window
        if refusal.window:
            self.learn_window(refusal.window)
        elif before is None or before >= estimate:
            self.learn_window(max(1, estimate * 9 // 10))
        reported = self.caps.max_input_tokens
        if reported and self.window is not None and self.window < reported and before == reported:
            return (f"The server reports a window of {reported:,} tokens for {self.model} but refused "
                    f"{estimate:,} as too long: its window is taken as {self.window:,} tokens.")
        return None

    def learn_from_cut(self, result: ModelResult) -> str | None:
        """RESULT, an answer, may have stopped at its length limit (``finish_reason`` ``length``).

        An OpenAI-compatible server of an unknown window that stopped it short of the tokens asked
        stopped at its window's end (llama-cpp-python does so): its window is the prompt's tokens
        and the answer's, learned and kept.  Returns the line that says so, else None."""
        asked, usage = result.request.get("max_tokens"), result.usage
        prompt, answer = usage.input_tokens + usage.cache_read_tokens, usage.output_tokens
        if (self.backend != "openai" or self.window is not None or result.stop_reason != "length"
                or not isinstance(asked, int) or answer >= asked or prompt <= 0):
            return None
        self.learn_window(prompt + answer)
        return (f"The model's window is {prompt + answer} tokens (its server stopped an answer there); "
                f"later requests are fitted to it.")

    def calibrate(self, chars: int, tokens: int) -> None:
        """A call of CHARS characters of context counted TOKENS input tokens."""
        if chars > 1000 and tokens > 100:
            self.chars_per_token = chars / tokens

    def estimate(self, chars: int) -> int:
        """The tokens CHARS characters of context come to, by the last calibration."""
        return int(chars / self.chars_per_token) + 1


def request_chars(request: dict[str, Any]) -> int:
    """The characters of REQUEST's system prompt and messages (what its input tokens count)."""
    return _chars(request.get("system")) + sum(_chars(m.get("content")) for m in request.get("messages") or ())


def _chars(content: Any) -> int:
    """The characters of a message's CONTENT: its text, or its blocks' text and thinking."""
    if isinstance(content, str):
        return len(content)
    if isinstance(content, list):
        return sum(len(b.get("text") or b.get("thinking") or "") for b in content if isinstance(b, dict))
    return 0


@dataclass(frozen=True)
class Prepared:
    """A request made for the capabilities the catalog had then (:func:`prepare`), to be sent later."""

    request: dict[str, Any]
    caps: Capabilities
    early: bool = False  # made before the backend's answer was in


def _capped(catalog: ModelCatalog, spec: RequestSpec, caps: Capabilities) -> dict[str, Any]:
    request = spec.built(caps)
    if "max_tokens" in request:
        request["max_tokens"] = catalog.answer_tokens(request["max_tokens"])
    return request


async def prepare(catalog: ModelCatalog, spec: RequestSpec, chars: int = 0) -> Prepared:
    """SPEC's request for the model's capabilities, made now and sent through an
    :class:`Adapting` (made again there if the catalog learned something meanwhile).  CHARS,
    the request's characters of context: it may be made before the backend's answer
    (:meth:`ModelCatalog.waits_for_answer`, with SPEC's settings)."""
    caps = await catalog.current(spec.settings, chars)
    return Prepared(_capped(catalog, spec, caps), caps, catalog.asking)


class Adapting:
    """The request of one call to the catalog's model, made again as the model's refusals teach.

    Its sender sends :attr:`request`; when the model refuses it, :meth:`refused` makes the next
    one or says that asking again will not help.  A 400 (or 422) that names a parameter the
    request sent is said in one line, remembered (never sent to this model again), and the
    request made without it.  Another 400 to a request made before the backend's answer (not
    one refusing it as too long: that is the caller's) waits for the answer, and when that
    changes the request, it is made again once.  The request is asked at most 3 times."""

    def __init__(self, catalog: ModelCatalog, spec: RequestSpec, prepared: Prepared) -> None:
        self.catalog, self.spec = catalog, spec
        self.early, self.built_for = prepared.early, catalog.caps
        # PREPARED's request unless the capabilities changed since it was made
        self.request = prepared.request if prepared.caps is self.built_for else _capped(catalog, spec, self.built_for)
        self.attempt = 0

    async def refused(self, err: InferenceError) -> str | None:
        """The model refused :attr:`request` with ERR: make the next one.  Returns the line that
        says what the model does not take (None: nothing to say); raises ERR when asking again
        will not help."""
        catalog, request = self.catalog, self.request
        refusal = err.status in (400, 422) and self.attempt < 2
        param = refused_param(err.detail, _sendable(request, catalog.backend)) if refusal else None
        line = None
        if param is not None:
            said = catalog.refuse(param)
            line = f"The model {catalog.model} does not take {said}; asking again."
        elif refusal and self.early and err.status == 400 and too_long(err.detail, err.status) is None:
            # A 400 the answer may explain (a most-tokens or a schema the model does not take); a
            # validation error said with a 500 (422) is the request's own: not asked again.
            self.early = False
            await catalog.current()
            if catalog.caps is self.built_for:
                raise err
            log.info("a request made before the capabilities of %s were known was refused: %s",
                     catalog.model, err.detail)
        else:
            raise err
        self.attempt += 1
        self.built_for = catalog.caps
        self.request = _capped(catalog, self.spec, self.built_for)
        return line


def _sendable(request: dict[str, Any], backend: str) -> set[str]:
    """The optional parameters REQUEST sends, as a refusal may name them: thinking and effort as
    the reasoning effort they become on an OpenAI-compatible server (or behind a proxy to one)."""
    sent = sent_params(request)
    if backend == "openai" and ({"thinking", "effort"} & sent):
        sent = (sent - {"thinking", "effort"}) | {"reasoning_effort"}
    elif {"thinking", "effort"} & sent:
        sent |= {"reasoning_effort"}
    return sent
