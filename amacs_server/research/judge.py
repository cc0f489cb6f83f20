"""``amacs-server judge RUNS_DIR JUDGE``: score every done run of an experiment with a judge.

    amacs-server judge RUNS_DIR JUDGE [--parallel N] [--budget USD] [--model M]

A judge is a skill of kind ``judge``: a ``SKILL.md`` whose body is the rubric
and whose frontmatter declares ``scale: LOW-HIGH`` (whole numbers), ``input:
final`` (the person's turns and the primary agent's last reply) or ``input:
turns`` (every turn of every agent: who was asked what, and what it replied),
and optionally its own ``model:``.  JUDGE is the name of a shipped judge
(``skills/<name>/``) or a folder holding a ``SKILL.md``.

For each done run the judge is an agent of its own: one model call (its system
prompt the rubric and the answer's form, its message the run's words), with
the experiment's model (the run's backend, endpoint and model) unless the judge
or ``--model`` names another; a reply that is not the JSON asked for is asked
again, twice at most.  Its transcript, as any agent's, is
``RUNS_DIR/<run>/judges/<judge>/judge.jsonl``; its result,
``.../score.json`` (``score``, ``rationale``, ``cost``, ``status`` done or
failed, ``error``; ``estimated_where``: where its model ran when its dollars are
list prices for another server's tokens), which the dataset loads as the ``scores`` table and the
report draws per arm with bootstrap 95% intervals.

Runs are judged N at once (default the spec's ``parallel``) through the
experiment's loop: the same progress bar and total budget (a judgement starts
only if what is spent, the judgements going and its own, each at the most one has
cost, fit ``--budget``; one at a time until one has ended), and resume: a run already scored
by this judge is skipped, its cost counted; a judgement that failed (or was cut
short) is asked again, its earlier attempt kept in ``.../attempts/<n>/`` (its
score.json and judge.jsonl, as a run's are) and what it cost counted as the new
score's ``earlier_cost``, said apart as the experiment says its runs' earlier
attempts (:func:`record_words`).  Exit status as the experiment's:
0 every run judged; 1 some judgement failed; 2 a wrong judge or command line;
3 the budget was spent first; 130 interrupted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import sys
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from contextlib import aclosing
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import faults
from ..config import builtin_skills_dir
from ..errors import AmacsError
from ..records import AgentEnd, AgentStart, ModelRequest, ModelResponse, Record, scan
from ..skills import SKILL_NAME, parse_frontmatter
from ..transcripts import ATTEMPTS
from .runs import STOPPED_REPLIED, Outcome

if TYPE_CHECKING:
    from ..inference.model_call import Ask, Reply

SCORE = "score.json"
TRANSCRIPT = "judge"  # judges/<judge>/judge.jsonl
RETRIES = 2
INPUTS = ("final", "turns")
ANSWER = re.compile(r"\{.*\}", re.S)
MAX_TOKENS = 1024
# The forms of ``response_format`` an OpenAI-compatible server is asked for the answer in, in turn
# while it refuses them: OpenAI's json_schema, llama-cpp-python's json_object with a schema (its
# grammar holds even a small model to the form), then none (the rubric's words alone).
FORMS: tuple[str | None, ...] = ("json_schema", "json_object", None)
ENUM_MAX = 100  # a scale of at most this many whole numbers is given to the server as their list
RATIONALE_MAX = 600  # characters of rationale a grammar allows (json_object): the JSON ends before MAX_TOKENS
MAX_SCALE = 1_000_000  # a scale's ends, at most (the dataset keeps them as BIGINT)
JUDGE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
TIMEOUT = 300.0


class JudgeError(AmacsError, ValueError):
    """The judge cannot be used: the message names its file and what is wrong."""


@dataclass(frozen=True)
class Judge:
    """A judge skill, read and checked."""

    name: str
    rubric: str
    low: int
    high: int
    input: str
    model: str | None
    path: Path


@dataclass(frozen=True)
class Job:
    """One run to judge (picklable): its id, the words the judge reads, and the model to ask."""

    run_id: str
    material: str
    backend: str
    model: str
    base_url: str | None
    price: tuple[float, float, float, float] | None = None  # the spec's price of MODEL, if it gives one


def find_judge(name_or_path: str) -> Path:
    """The SKILL.md of the judge NAME_OR_PATH: a folder (or its SKILL.md), else a shipped judge's name."""
    given = Path(name_or_path)
    if given.is_file():
        return given
    if (given / "SKILL.md").is_file():
        return given / "SKILL.md"
    if SKILL_NAME.fullmatch(name_or_path) and (builtin_skills_dir() / name_or_path / "SKILL.md").is_file():
        return builtin_skills_dir() / name_or_path / "SKILL.md"
    shipped = sorted(p.parent.name for p in builtin_skills_dir().glob("*/SKILL.md")
                     if parse_frontmatter(p.read_text(encoding="utf-8"))[0].get("kind") == "judge")
    raise JudgeError(f"no judge {name_or_path!r}: give a folder with a SKILL.md, or one of the shipped judges: "
                     f"{', '.join(shipped) or '(none)'}")


def read_judge(path: Path) -> Judge:
    """The judge in the SKILL.md at PATH, checked: kind judge, a scale, what it reads."""
    try:
        fields, body = parse_frontmatter(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as err:
        raise JudgeError(f"{path}: not UTF-8 text (byte {err.start}); save it as UTF-8") from None
    if fields.get("kind") != "judge":
        raise JudgeError(f"{path}: kind: must be judge, got {fields.get('kind', '(none)')!r}")
    scale = re.fullmatch(r"\s*(-?\d+)\s*-\s*(-?\d+)\s*", fields.get("scale", ""))
    if (not scale or int(scale.group(1)) >= int(scale.group(2))
            or max(abs(int(scale.group(1))), abs(int(scale.group(2)))) > MAX_SCALE):
        raise JudgeError(f"{path}: scale: must be LOW-HIGH, whole numbers, LOW below HIGH (e.g. 1-5), each "
                         f"within ±{MAX_SCALE}, got {fields.get('scale', '(none)')!r}")
    name = fields.get("name") or path.parent.name
    if not JUDGE_NAME.fullmatch(name):
        # The name is a folder of each run (judges/NAME): nothing that could leave it.
        raise JudgeError(f"{path}: name: must be letters, digits, '_', '-' or '.', starting with a letter or "
                         f"digit, at most 64 (it names a folder of each run), got {name!r}")
    reads = fields.get("input", "final")
    if reads not in INPUTS:
        raise JudgeError(f"{path}: input: must be final or turns, got {reads!r}")
    if not body.strip():
        raise JudgeError(f"{path}: the rubric (the text after the frontmatter) is empty")
    return Judge(name=name, rubric=body.strip(), low=int(scale.group(1)),
                 high=int(scale.group(2)), input=reads, model=fields.get("model") or None, path=path)


def system_prompt(judge: Judge) -> str:
    """What the judge agent is told: the rubric, then the form of its answer."""
    return (f"You are a judge of an AMACS experiment: you score one run of it by this rubric.\n\n{judge.rubric}\n\n"
            f"Answer with one JSON object and nothing else: "
            f'{{"score": <a whole number from {judge.low} to {judge.high}>, '
            f'"rationale": "<why, in two or three sentences>"}}')


def material(judge: Judge, turns: list[tuple[Any, ...]]) -> str:
    """The words of one run the judge reads, from its rows of the ``turns`` table
    (agent_id, agent_type, template, turn, input, reply), in order."""
    if judge.input == "final":
        primary = [t for t in turns if t[1] == "primary"]
        asked = "\n\n".join(f"[turn {t[3]}] {t[4]}" for t in primary)
        final = next((t[5] for t in reversed(primary) if t[5]), None)
        return (f"<question>\n{asked}\n</question>\n\n<final-reply>\n{final or '(no reply)'}\n</final-reply>")
    parts = []
    for agent_id, agent_type, template, turn, asked, reply in turns:
        parts.append(f'<turn agent="{agent_id}" type="{agent_type}" template="{template}" n="{turn}">\n'
                     f"<asked>\n{asked or ''}\n</asked>\n<reply>\n{reply or '(no reply)'}\n</reply>\n</turn>")
    return "\n\n".join(parts)


def answer_format(judge: Judge, form: str | None) -> dict[str, Any] | None:
    """The ``response_format`` that asks an OpenAI-compatible server for JUDGE's answer in FORM
    (see :data:`FORMS`): the score first, a whole number of the scale, then the rationale."""
    if form is None:
        return None
    values = judge.high - judge.low + 1
    score = {"type": "integer", **({"enum": list(range(judge.low, judge.high + 1))} if values <= ENUM_MAX else {})}
    rationale: dict[str, Any] = {"type": "string"}
    schema = {"type": "object", "properties": {"score": score, "rationale": rationale},
              "required": ["score", "rationale"], "additionalProperties": False}
    if form == "json_schema":
        return {"type": "json_schema", "json_schema": {"name": "judgement", "strict": True, "schema": schema}}
    rationale["maxLength"] = RATIONALE_MAX  # a grammar's bound: OpenAI's strict schemas refuse it
    return {"type": "json_object", "schema": schema}


def read_answer(text: str, judge: Judge) -> tuple[int, str]:
    """The score and rationale in the judge's TEXT; ValueError (what is wrong) if it has none."""
    found = ANSWER.search(text or "")
    if not found:
        raise ValueError("no JSON object in the answer")
    try:
        answer = json.loads(found.group(0))
    except ValueError as err:
        raise ValueError(f"not JSON: {err}") from err
    score = answer.get("score") if isinstance(answer, dict) else None
    if isinstance(score, bool) or not isinstance(score, int | float) or score != int(score):
        raise ValueError(f"score must be a whole number, got {score!r}")
    if not judge.low <= score <= judge.high:
        raise ValueError(f"score must be from {judge.low} to {judge.high}, got {score}")
    return int(score), str(answer.get("rationale") or "")


def _backend(job: Job) -> Any:
    """The model backend JOB asks, with the key from the environment."""
    if job.backend == "openai":
        from ..inference.openai_backend import OpenAIBackend

        return OpenAIBackend(os.environ.get("OPENAI_API_KEY"), job.base_url, TIMEOUT)
    from ..inference.anthropic_backend import AnthropicBackend

    return AnthropicBackend(os.environ.get("ANTHROPIC_API_KEY"), job.base_url or os.environ.get("ANTHROPIC_BASE_URL"),
                            TIMEOUT)


def session_of(run_id: str, judge: str, attempt: int = 1) -> str:
    """The session id of the judgement of RUN_ID by JUDGE (its ATTEMPTth, from 1): ``<run>.judge-<judge>``,
    and ``.attempt-N`` after it for a judgement asked again."""
    return f"{run_id}.judge-{judge}" + (f".attempt-{attempt}" if attempt > 1 else "")


async def _ask(judge: Judge, job: Job, folder: Path, attempt: int = 1) -> dict[str, Any]:
    """Ask the judge about JOB (its ATTEMPTth time), writing its transcript in FOLDER; its score.json's
    contents."""
    from ..inference.model_call import Ask
    from ..inference.retry import InferenceError
    from ..persistence.transcript import AgentIdentity, Transcript
    from ..scrub import Scrubber
    from ..state.consciousness import ApiSettings

    # The keys taken out as the server takes them out of its transcripts (a value too short to be a
    # secret, the docs' ANTHROPIC_API_KEY=fake, is an ordinary word there).
    transcript = Transcript(folder, TRANSCRIPT, scrub=Scrubber({k: v for k, v in os.environ.items()
                                                                if k.endswith("_API_KEY")}))
    # Its session is its own (the run, the judge and the attempt), not one shared by every judge.jsonl:
    # a reader of many transcripts (amacs-server transcripts) counts each judgement, and each earlier
    # attempt of one kept in attempts/<n>/, as a session of its own.
    transcript.run_id = session_of(job.run_id, judge.name, attempt)
    me = AgentIdentity(agent_id=f"judge-{judge.name}", parent_id=None, agent_type="judge", template=judge.name)
    transcript.write(AgentStart(run=job.run_id, model=job.model, input=judge.input, scale=[judge.low, judge.high]),
                     agent=me)
    backend = _backend(job)
    call = JudgeCall(transcript, me, judge, job)
    # An OpenAI-compatible server is asked for the answer's form (FORMS, each while it refuses the one
    # before); the Messages API, for the rubric's words alone.
    forms = list(FORMS) if job.backend == "openai" else [None]
    error, score, rationale = None, None, ""
    try:
        while True:
            form = answer_format(judge, forms[0])
            # A judge answers with its score, not an agent's reply: no reply schema; the session's
            # catalog is not its own (its model is the experiment's): sent what any model takes.
            ask = Ask[tuple[int, str]](backend, None, job.model, system_prompt(judge), ApiSettings(max_tokens=MAX_TOKENS),
                                       RETRIES, agent_reply=False, extra_body={"response_format": form} if form is not None else None)
            try:
                reply = await call.made(ask)
            except InferenceError as err:
                if form is not None and err.status in (400, 422):  # the form refused (422: said with a 500)
                    forms.pop(0)
                    continue
                from .outcome import model_error_words

                error = model_error_words(str(err), job.base_url)
                break
            if reply.value is None:
                error = "score never parsed"
            else:
                score, rationale = reply.value
            break
    finally:
        await backend.aclose()
        transcript.write(AgentEnd(state="failed" if error else "done",
                                  summary={"steps": 0, "cost": call.spent, "score": score}), agent=me)
        transcript.close()
    spent = call.spent
    return {"run_id": job.run_id, "judge": judge.name, "model": job.model, "scale_low": judge.low,
            "scale_high": judge.high, "input": judge.input, "status": "failed" if error else "done",
            "score": score, "rationale": rationale, "cost": None if spent is None else round(spent, 8),
            "error": error}


class JudgeCall:
    """A judgement making the one model call: it drives the call and acts on each of its steps
    here (its messages: the material, then each answer that did not read and the prompt that
    asked again; its reading: a score on the judge's scale and its rationale; its transcript;
    its cost)."""

    def __init__(self, transcript: Any, me: Any, judge: Judge, job: Job) -> None:
        self.transcript, self.me, self.judge, self.job = transcript, me, judge, job
        self.messages: list[dict[str, Any]] = [{"role": "user", "content": job.material}]
        self.spent: float | None = 0.0

    async def made(self, ask: Ask[tuple[int, str]]) -> Reply[tuple[int, str]]:
        """ASK's call made for this judgement, each of its steps acted on as it comes; its Reply.
        Its material is one message: nothing to leave out when it is too long."""
        from ..inference.model_call import Answered, Charge, Read, Reply, Show, model_call

        async with aclosing(model_call(ask)) as steps:
            async for step in steps:
                match step:
                    case Reply():
                        return step
                    case Show():
                        step.messages = self.messages
                    case Answered():
                        if step.retry is not None:
                            self.messages += [{"role": "assistant", "content": step.result.text or "(empty)"},
                                              {"role": "user", "content": step.retry}]
                    case Read():
                        try:
                            step.value = read_answer(step.text, self.judge)
                        except ValueError as err:
                            step.error, step.again = err, (f"That answer cannot be read: {err}. Answer again with "
                                                           "the one JSON object asked for, and nothing else.")
                    case Charge():
                        step.dollars = self.paid(step.usage)
                    case ModelRequest():
                        self.transcript.write(step, agent=self.me)
                        faults.point("judge.asked")
                    case Record():
                        self.transcript.write(step, agent=self.me)
        raise AssertionError("the model call ended without its reply")

    def paid(self, usage: Any) -> float | None:
        from ..inference.pricing import Price, cost, is_local

        job = self.job
        table = {job.model: Price(*job.price)} if job.price else None
        dollars = cost(job.model, usage, table, local=is_local(job.base_url))
        self.spent = None if dollars is None or self.spent is None else self.spent + dollars
        return dollars


def judge_one(judge: Judge, job: Job, runs_dir: Path) -> Outcome:
    """Judge JOB into ``RUNS_DIR/<run>/judges/<judge>/`` (made afresh); its outcome (never raises for a
    judgement that goes wrong: that is a failed one)."""
    folder = runs_dir / job.run_id / "judges" / judge.name
    attempt = keep_attempt(folder)  # a judgement asked again: its earlier attempt kept, its cost counted
    earlier = earlier_cost(folder)
    (folder / SCORE).unlink(missing_ok=True)
    folder.mkdir(parents=True, exist_ok=True)
    started = time.time()
    try:
        result = asyncio.run(_ask(judge, job, folder, attempt))
    except Exception as err:  # noqa: BLE001 - a judgement that broke is a failed one, said so
        result = {"run_id": job.run_id, "judge": judge.name, "model": job.model, "scale_low": judge.low,
                  "scale_high": judge.high, "input": judge.input, "status": "failed", "score": None,
                  "rationale": "", "cost": 0.0, "error": f"{type(err).__name__}: {err}"}
    ended = time.time()
    faults.point("judge.scored")
    # where its model ran, when its dollars are an estimate: said so by the last lines of later commands too
    result.update(started_at=started, ended_at=ended, seconds=round(ended - started, 3), earlier_cost=earlier,
                  estimated_where=estimated_where(job))
    (folder / (SCORE + ".tmp")).write_text(json.dumps(result, indent=1, ensure_ascii=False), encoding="utf-8")
    faults.point("judge.written")
    os.replace(folder / (SCORE + ".tmp"), folder / SCORE)
    return Outcome(run_id=job.run_id, status=result["status"],
                   cost=None if result["cost"] is None else float(result["cost"]),
                   seconds=result["seconds"], turns_done=int(result["status"] == "done"), started_at=started,
                   ended_at=ended, error=result["error"],
                   gave="" if result["score"] is None else f"score {result['score']} ({judge.low}-{judge.high})")


def keep_attempt(folder: Path) -> int:
    """Move the record of the earlier attempt of the judgement in FOLDER (its ``score.json`` and its
    transcript) to ``attempts/<n>/`` (n from 1), as a run's are kept when it runs again: what it paid
    for stays readable.  One killed before its score was written (a transcript and no score) gets the
    score.json of a failed judgement with what its transcript says it paid.  The number of the
    attempt about to be made (1: the first)."""
    root = folder / ATTEMPTS
    kept = max((int(p.name) for p in root.iterdir() if p.name.isdigit()), default=0) if root.is_dir() else 0
    transcript = folder / f"{TRANSCRIPT}.jsonl"
    before = _read_json(folder / SCORE)
    if before is None and not transcript.exists():
        return kept + 1
    if before is None:
        before = {"status": "failed", "cost": _paid(transcript), "earlier_cost": earlier_cost(folder),
                  "error": "the judge was killed while it judged; it was asked again"}
    target = root / str(kept + 1)
    target.mkdir(parents=True)
    (target / SCORE).write_text(json.dumps(before, indent=1, ensure_ascii=False), encoding="utf-8")
    if transcript.exists():
        os.replace(transcript, target / transcript.name)
    return kept + 2


def earlier_cost(folder: Path) -> float:
    """What the earlier attempts of the judgement in FOLDER cost: the last one kept in ``attempts/<n>/``,
    its ``cost`` and its own ``earlier_cost`` (the attempts before it)."""
    root = folder / ATTEMPTS
    kept = max((int(p.name) for p in root.iterdir() if p.name.isdigit()), default=0) if root.is_dir() else 0
    last = _read_json(root / str(kept) / SCORE) if kept else None
    return round(float((last or {}).get("cost") or 0.0) + float((last or {}).get("earlier_cost") or 0.0), 8)


def _paid(transcript: Path) -> float | None:
    """The dollars of the model calls a judge's TRANSCRIPT records (None: some call's price is unknown)."""
    paid = 0.0
    for line in scan([transcript], ModelResponse):
        if isinstance(line.event, ModelResponse):
            if line.event.cost is None:
                return None
            paid += float(line.event.cost)
    return round(paid, 8)


class JudgeExecutor:
    """Each judgement in a thread of this process (its model call is the time it takes)."""

    def __init__(self, judge: Judge, runs_dir: Path, parallel: int) -> None:
        self.judge, self.runs_dir = judge, runs_dir
        self.pool = ThreadPoolExecutor(max_workers=parallel, thread_name_prefix="amacs-judge")
        self.going: dict[Future[Outcome], Job] = {}
        self.handed: list[Outcome] = []

    def submit(self, job: Job) -> None:
        """Start judging JOB (a C-c comes after it is in GOING: one started and not known there ran on
        after the command's last line, and wrote a score that line did not count)."""
        from .runs import whole

        with whole():
            self.going[self.pool.submit(judge_one, self.judge, job, self.runs_dir)] = job

    def finished(self, timeout: float) -> list[Outcome]:
        """Outcomes of the judgements that ended.  Each is in HANDED before it leaves GOING: one a C-c
        cut off on its way (its done line never printed) is said from there."""
        if not self.going:
            return []
        done, _ = wait(list(self.going), timeout=timeout, return_when=FIRST_COMPLETED)
        start = len(self.handed)
        for future in done:
            if future in self.going:
                self.handed.append(future.result())
                self.going.pop(future, None)
        return self.handed[start:]

    def still_going(self) -> int:
        """How many judgements started have not ended."""
        return sum(not future.done() for future in self.going)

    def finishing(self) -> list[str]:
        """The runs of the judgements going, which a C-c lets end (each writes its score)."""
        return [job.run_id for future, job in self.going.items() if not future.done()]

    @staticmethod
    def letting_words(letting: list[str]) -> str:
        """What a C-c says of the judgements of the runs LETTING, which it lets end."""
        one = len(letting) == 1
        return (f"C-c: {len(letting)} {'judgement' if one else 'judgements'} being judged {'ends' if one else 'end'} "
                f"first and {'is' if one else 'are'} kept (C-c again to stop {'it' if one else 'them'} now: "
                f"{'it is' if one else 'they are'} asked again when you resume): {', '.join(letting)}")

    def close(self) -> None:
        """Start nothing more, and wait for the judgements going to end (each writes its score); a
        C-c meanwhile is raised (the command then ends without them: each is asked again)."""
        self.pool.shutdown(wait=False, cancel_futures=True)
        for future in [f for f in self.going if f.cancelled()]:  # never started: still to judge
            self.going.pop(future)
        wait(list(self.going))


ModelAt = tuple[str, str | None, str | None, tuple[float, float, float, float] | None]


def _models(runs_dir: Path) -> dict[str, ModelAt]:
    """The experiment's models by name: (backend, base_url, model, price), from its spec copied into RUNS_DIR."""
    from .spec import SpecError, models_of

    if not (runs_dir / "experiment.toml").is_file():
        return {}
    try:
        models = models_of(runs_dir / "experiment.toml")
    except SpecError as err:  # e.g. ${ANTHROPIC_BASE_URL} not set: never fall back to a paid endpoint
        raise JudgeError(f"the experiment's models cannot be read: {err}") from err
    return {name: (m.backend, m.base_url, m.model, m.price.numbers() if m.price else None)
            for name, m in models.items()}


def estimated_where(job: Job) -> str | None:
    """Where JOB's judge model ran when its dollars are list prices for what a server other than its
    provider's API reported (:func:`list_priced_elsewhere`), else None."""
    from ..inference.pricing import Price, endpoint_host, list_priced_elsewhere

    url = job.base_url or os.environ.get("OPENAI_BASE_URL" if job.backend == "openai" else "ANTHROPIC_BASE_URL")
    return list_priced_elsewhere(job.backend, job.model, endpoint_host(job.backend, url),
                                 {job.model: Price(*job.price)} if job.price else None)


def jobs(judge: Judge, runs_dir: Path, model: str | None) -> tuple[list[Job], list[tuple[str, str]], float]:
    """The done runs of RUNS_DIR still to judge, those not done (skipped: their ids and statuses), and
    what this judge's judgements cost before: every attempt's (the scores', the earlier attempts' kept with them, and a
    failed one's to be asked again), as an experiment's resume counts its runs'."""
    from .dataset import load

    con = load(runs_dir)
    try:
        runs = con.execute("SELECT run_id, status, model, backend, model_name FROM runs ORDER BY run_id").fetchall()
        rows = con.execute("""SELECT run_id, agent_id, agent_type, template, turn, input, reply FROM turns
                              ORDER BY run_id, started_at, agent_id, turn""").fetchall()
    finally:
        con.close()
    turns: dict[str, list[tuple[Any, ...]]] = {}
    for row in rows:
        turns.setdefault(row[0], []).append(row[1:])
    models: dict[str, ModelAt] | None = None  # read once there is a run to judge
    todo, skipped, spent = [], [], 0.0
    for run_id, status, model_key, backend, model_name in runs:
        if status != "done":
            skipped.append((run_id, status))
            continue
        folder = runs_dir / run_id / "judges" / judge.name
        earlier = _read_json(folder / SCORE)
        spent += float((earlier or {}).get("cost") or 0.0) + earlier_cost(folder)
        if earlier and earlier.get("status") == "done":
            continue
        models = _models(runs_dir) if models is None else models
        backend_of, base_url, spec_model, price = models.get(model_key, (backend or "anthropic", None, None, None))
        asks = model or judge.model or model_name or "claude-sonnet-4-5"
        todo.append(Job(run_id=run_id, material=material(judge, turns.get(run_id, [])), backend=backend_of,
                        model=asks, base_url=base_url, price=price if asks == (spec_model or model_name) else None))
    return todo, skipped, spent


def _read_json(path: Path) -> dict[str, Any] | None:
    """The JSON object in the file at PATH, or None."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def main(argv: list[str]) -> int:
    """The ``judge`` command; see the module's docstring for the exit status.  A C-c anywhere in it
    (while the SDK loads, as it prints) ends it with one line and 130, as one mid-judging does."""
    named: list[str] = []
    record: list[Callable[[], str]] = []
    going: list[JudgeExecutor] = []
    try:
        return _main(argv, named, record, going)
    except KeyboardInterrupt:
        print(f"judge{''.join(' ' + n for n in named[-1:])}: interrupted"
              + "".join(f": {words()}" for words in record[-1:]) + "; run the same command again to resume.",
              flush=True)
        if going and going[-1].still_going():  # C-c twice: their threads cannot be stopped but by the exit
            sys.stderr.flush()
            os._exit(130)
        return 130


def record_words(judge: Judge, runs_dir: Path, total: int, where: dict[str, str | None],
                 going: int = 0) -> str:
    """What the score files of JUDGE in RUNS_DIR say, as its last line says it (after a C-c too), as an
    experiment's says its runs: ``3 of 10 judged, 1 failed, 7 to judge, $0.0123 estimated at list
    prices (...; $0.0036 of it by earlier attempts of judgements that ran again)``.  TOTAL: the runs
    done, to judge; WHERE: each judged run's :func:`estimated_where` (the one place of them all for
    a run judged before this command); GOING: judgements a second C-c stopped while they were going
    (the first lets each end and write its score before this is said).  The dollars are every attempt's: each score's ``cost`` and ``earlier_cost``."""
    from .dataset import cost_words

    places = set(where.values())
    anywhere = places.pop() if len(places) == 1 else None
    judged = failed = 0
    costs: list[tuple[float | None, str | None]] = []
    earlier = 0.0
    def place(score: dict[str, Any], run_id: str) -> str | None:  # a score an older AMACS wrote has none
        return score["estimated_where"] if "estimated_where" in score else where.get(run_id, anywhere)

    scored = {path.parts[-4]: path for path in runs_dir.glob(f"*/judges/{judge.name}/{SCORE}")}
    for run_id in sorted(set(scored) | set(where)):  # those judged, and those to judge (nothing paid yet)
        score = (_read_json(scored[run_id]) or {}) if run_id in scored else {"cost": 0.0}
        # one being judged again has no score yet: its earlier attempts are kept aside already
        before = (float(score.get("earlier_cost") or 0.0) if run_id in scored
                  else earlier_cost(runs_dir / run_id / "judges" / judge.name))
        judged += score.get("status") == "done"
        failed += score.get("status") == "failed"
        earlier += before
        cost = score.get("cost")
        costs.append((None if cost is None else float(cost), place(score, run_id)))
        kept = [_read_json(p) or {} for p in runs_dir.glob(f"{run_id}/judges/{judge.name}/{ATTEMPTS}/*/{SCORE}")]
        paid = [float(k["cost"]) for k in kept if k.get("cost") is not None]
        if kept and len(paid) == len(kept) and abs(sum(paid) - before) < 1e-6:
            costs += [(float(k["cost"]), place(k, run_id)) for k in kept]  # each where it went
        elif before:
            costs.append((before, place(score, run_id)))
    return (f"{judged} of {total} judged, {failed} failed"
            + (f", {going} stopped while being judged (asked again when you resume)" if going else "")
            + (f", {total - judged} to judge" if judged < total else "") + ", "
            + cost_words(costs, "judgements", earlier=earlier))


def _main(argv: list[str], named: list[str], record: list[Callable[[], str]],
          going: list[JudgeExecutor]) -> int:
    """:func:`main`, appending the judge's name to NAMED once it is known, to RECORD the words of
    what is judged once the runs to judge are, and its executor to GOING."""
    from .experiment import (
        CENT_DUST,
        budget_words,
        execute,
        progress_console,
        summary,
    )

    parser = argparse.ArgumentParser(prog="amacs-server judge",
                                     description="Score every done run of RUNS_DIR with a judge skill.")
    parser.add_argument("runs_dir", type=Path, help="an experiment's runs folder (RUNS_DIR/<run-id>/manifest.json)")
    parser.add_argument("judge", help="a shipped judge's name (answer-quality, viewpoints-used) or a folder "
                                      "with its SKILL.md")
    parser.add_argument("--parallel", type=int, help="judgements at once (default: the experiment's parallel)")
    parser.add_argument("--budget", type=float, help="dollars for this judge over all runs (default: no limit)")
    parser.add_argument("--model", help="the model every judgement asks (default: the judge's model:, "
                                        "else the run's)")
    args = parser.parse_args(argv)
    try:
        judge = read_judge(find_judge(args.judge))
    except (JudgeError, OSError) as err:
        print(f"amacs-server judge: {err}", file=sys.stderr)
        return 2
    named.append(judge.name)
    runs_dir = args.runs_dir.resolve()
    if not any(runs_dir.glob("*/manifest.json")):
        print(f"amacs-server judge: no runs (*/manifest.json) in {runs_dir}", file=sys.stderr)
        return 2
    parallel = args.parallel or _spec_parallel(runs_dir)
    if parallel < 1:
        print("amacs-server judge: --parallel must be at least 1", file=sys.stderr)
        return 2
    try:
        todo, skipped, before = jobs(judge, runs_dir, args.model)
    except JudgeError as err:
        print(f"amacs-server judge: {err}", file=sys.stderr)
        return 2
    if args.budget is not None:
        from ..inference.pricing import is_local, listed_price

        nobody = next((j for j in todo if j.price is None and listed_price(j.model) is None
                       and not is_local(j.base_url)), None)
        if nobody is not None:
            print(f"amacs-server judge: a budget needs a price, and model {nobody.model!r}"
                  + (f" at {nobody.base_url}" if nobody.base_url else "") + " has none: give it in the "
                  "experiment's [[models]] price, or drop --budget to judge with the cost unknown", file=sys.stderr)
            return 2
    total = len(todo) + sum(1 for _ in _scored(runs_dir, judge))
    again = sum(any((runs_dir / job.run_id / "judges" / judge.name / name).exists()
                    for name in (SCORE, f"{TRANSCRIPT}.jsonl")) for job in todo)
    where = {job.run_id: estimated_where(job) for job in todo}
    executor = JudgeExecutor(judge, runs_dir, parallel)
    going.append(executor)
    # From the first line on, a C-c is said with what is judged (a C-c the moment it is read, too).
    record.append(lambda: record_words(judge, runs_dir, total, where, executor.still_going()))
    print(f"judge {judge.name} (scale {judge.low}-{judge.high}, reads {judge.input}) over {runs_dir}: "
          f"{total} runs done; {total - len(todo)} judged before, {len(todo)} to judge"
          + (f" ({again} of them again: failed or interrupted before)" if again else "") + f", {parallel} at once"
          + (f"; {len(skipped)} runs not done are not judged" if skipped else "")
          + (f" ({replied} of them stopped after {'its' if replied == 1 else 'their'} last reply: resume the "
             f"experiment to record {'it' if replied == 1 else 'them'} done, then judge again)" if (replied := sum(
                 status == STOPPED_REPLIED for _run, status in skipped)) else ""), flush=True)
    if not todo:  # what is judged and what it cost, as when it last ended
        if total:
            print(_last_line(judge, runs_dir, total, where), flush=True)
        return 0
    # The model SDKs imported before any judgement starts: a judgement's seconds are its own (its model
    # call), not the first ones' import of the SDK (~1.3 s of CPU, 5 s at load 8), which each waited for.
    from ..inference import sdk

    for backend in sorted({job.backend for job in todo}):
        sdk.SDKS[backend].load()
    known = [_cost_of(path) for path in _scored(runs_dir, judge)]  # what a judgement costs, before one ends
    outcomes, left, stopped = execute(todo, executor, parallel, args.budget, before, total, f"judge {judge.name}",
                                      progress_console(), known)
    spent = before + sum(o.cost or 0.0 for o in outcomes)
    failed = [o for o in outcomes if o.status == "failed"]
    print(_last_line(judge, runs_dir, total, where), flush=True)
    for line in summary(outcomes):
        print(line, flush=True)
    if stopped is not None and left:
        print(f"Stopped early: the last judgements failed the same way ({stopped}); {len(left)} runs not judged. "
              "Fix the cause and run the same command again to resume.", flush=True)
    elif args.budget is not None and (left or spent > args.budget + CENT_DUST):
        print(budget_words(spent, args.budget, len(left), "judgement", "runs not judged",
                           "re-run with a larger --budget to judge them"), flush=True)
    return 1 if failed else 3 if left else 0


def _last_line(judge: Judge, runs_dir: Path, total: int, where: dict[str, str | None]) -> str:
    """The judge's last line: what its score files say (:func:`record_words`), and where they are."""
    return (f"judge {judge.name}: {record_words(judge, runs_dir, total, where)}; scores in "
            f"{runs_dir}/*/judges/{judge.name}/{SCORE}, the dataset's scores table and the report")


def _scored(runs_dir: Path, judge: Judge) -> list[Path]:
    """The score files of runs this judge scored before (done)."""
    return [p for p in runs_dir.glob(f"*/judges/{judge.name}/{SCORE}")
            if (_read_json(p) or {}).get("status") == "done"]


def _cost_of(score: Path) -> float | None:
    """The cost a score file says its judgement had (None: it says none)."""
    cost = (_read_json(score) or {}).get("cost")
    return float(cost) if isinstance(cost, int | float) and not isinstance(cost, bool) else None


def _spec_parallel(runs_dir: Path) -> int:
    """The experiment's parallel (its spec in RUNS_DIR), else 4."""
    import tomllib

    try:
        table = tomllib.loads((runs_dir / "experiment.toml").read_text(encoding="utf-8")).get("experiment", {})
        return int(table.get("parallel", 4))
    except (OSError, ValueError, TypeError):
        return 4

