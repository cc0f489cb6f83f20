"""An experiment's spec: the TOML file read and checked once, and its grid of runs.

The spec (see docs/research.md, Experiments) has an ``[experiment]`` table and three
dimensions, ``[[prompts]]``, ``[[variants]]`` and ``[[models]]``; the grid is
prompts x variants x models x repetitions, one :class:`Run` each, with the
deterministic id ``<prompt>.<variant>.<model>.r<rep>`` (so re-running resumes).
Every error is a :class:`SpecError` that names the file and the key.
"""

from __future__ import annotations

import difflib
import os
import re
import tomllib
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic_core import ErrorDetails

from ..arguments import must_be, shown
from ..errors import AmacsError

MAX_REPETITIONS = 10_000  # of each cell of the grid
MAX_PARALLEL = 256  # runs at once
MAX_RUNS = 100_000  # in the whole grid: each is a folder and a row
VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")

Name = Annotated[str, Field(pattern=r"^[a-z0-9-]+$", description="letters a-z, digits and -")]


class SpecError(AmacsError, ValueError):
    """The spec cannot be used: the message names the file and the key."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


# PATH@TICK, or PATH@COMMIT (a commit id of the home's history, as git log prints it: at least
# COMMIT_DIGITS of it; digits alone are a tick, unless that many or more of them name a commit).
COMMIT_DIGITS = 7
# ``now`` is read only to be refused with the tick it is (a resume reads the spec again).
ORIGIN = re.compile(r"^(?P<path>.+)@(?:(?P<tick>[0-9]+)|(?P<commit>[0-9a-f]{7,40})|(?P<now>now))$")


def _origin(value: str | None) -> str | None:
    if value is not None and not ORIGIN.match(value):
        short = re.match(r"^.+@([0-9a-f]{1,6})$", value)
        raise ValueError("must be PATH@TICK (an AMACS home and a tick of it) or PATH@COMMIT (a commit of its "
                         "history, as git log prints it" + ("; a commit is named by 7 characters or more of its id"
                                                             if short else "") + f"), got {value!r}")
    return value


class ExperimentTable(_Strict):
    """``[experiment]``: the name and the limits; ``from``, the home and tick every run is forked from."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, populate_by_name=True)

    name: Name
    repetitions: int = Field(1, ge=1, le=MAX_REPETITIONS)
    parallel: int = Field(1, ge=1, le=MAX_PARALLEL)
    budget: float | None = Field(None, ge=0)
    run_budget: float | None = Field(None, gt=0)
    timeout: float = Field(300.0, gt=0)
    max_steps: int = Field(20, ge=1)
    origin: str | None = Field(None, alias="from")
    order: Literal["random", "grid"] = "random"  # runs in a seeded random order, or the grid's
    seed: int | None = Field(None, ge=0)  # the order's seed (default: one drawn at the first start, kept)
    # The arm the report compares the others with: a variant's, model's or prompt's name (the first arm,
    # in the spec's order, that has it); default: the spec's first arm.
    reference: str | None = None

    @field_validator("origin")
    @classmethod
    def _check_origin(cls, value: str | None) -> str | None:
        return _origin(value)


class PromptEntry(_Strict):
    """One ``[[prompts]]``: a prompt, or a script of several turns."""

    name: Name
    turns: list[str] = Field(min_length=1)

    @field_validator("turns")
    @classmethod
    def _not_blank(cls, turns: list[str]) -> list[str]:
        if any(not turn.strip() for turn in turns):
            raise ValueError("a turn is empty")
        return turns


class VariantEntry(_Strict):
    """One ``[[variants]]``: folders of skills copied into the run's ``home/skills/``, and ``from``,
    the home and tick its runs are forked from (the experiment's when it names none)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, populate_by_name=True)

    name: Name
    skills: list[str] = Field(default_factory=list)
    origin: str | None = Field(None, alias="from")

    @field_validator("origin")
    @classmethod
    def _check_origin(cls, value: str | None) -> str | None:
        return _origin(value)


class PriceEntry(_Strict):
    """A ``[[models]]``'s ``price``: US dollars per million tokens (cache prices default to input's)."""

    input: float = Field(ge=0)
    output: float = Field(ge=0)
    cache_write: float | None = Field(None, ge=0)
    cache_read: float | None = Field(None, ge=0)

    def numbers(self) -> tuple[float, float, float, float]:
        """(input, output, cache_write, cache_read), as the server's price table holds them."""
        return (self.input, self.output, self.input if self.cache_write is None else self.cache_write,
                self.input if self.cache_read is None else self.cache_read)


class ModelEntry(_Strict):
    """One ``[[models]]``: a backend and a model, where to reach it, and its price if the person gives one."""

    name: Name
    backend: Literal["anthropic", "openai"] = "anthropic"
    model: str | None = None
    base_url: str | None = None
    price: PriceEntry | None = None


class Spec(_Strict):
    """The whole spec, as read (``${VAR}`` not yet expanded)."""

    experiment: ExperimentTable
    prompts: list[PromptEntry] = Field(min_length=1)
    variants: list[VariantEntry] = Field(default_factory=lambda: [VariantEntry.model_validate({"name": "base"})])
    models: list[ModelEntry] = Field(min_length=1)


@dataclass(frozen=True)
class Run:
    """One session of the grid, with everything needed to run it (picklable, for Ray)."""

    run_id: str
    experiment: str
    prompt: str
    variant: str
    model: str
    backend: str
    model_name: str | None
    base_url: str | None
    rep: int
    turns: tuple[str, ...]
    skills: tuple[Path, ...]
    max_steps: int
    run_budget: float | None
    timeout: float
    origin: tuple[str, int] | None = None  # the home (absolute) and the tick the run is forked from
    origin_commit: str | None = None  # that tick's commit: the one mind the home's tick named when the spec was read
    price: tuple[float, float, float, float] | None = None  # the spec's price of the model, if it gives one
    position: int | None = None  # where it goes in the experiment's run order (0 first)
    order_seed: int | None = None  # the seed of that order (None: the grid's order)

    @property
    def seed(self) -> int:
        """The run's seed: its repetition (AMACS_SEED)."""
        return self.rep


@dataclass(frozen=True)
class Experiment:
    """A checked spec: where it came from, and its grid."""

    path: Path
    spec: Spec
    runs: list[Run]

    @property
    def name(self) -> str:
        """The experiment's name."""
        return self.spec.experiment.name


_TABLES: dict[str, type[BaseModel]] = {
    "experiment": ExperimentTable, "prompts": PromptEntry, "variants": VariantEntry, "models": ModelEntry,
    "price": PriceEntry}


def _unknown(loc: tuple[int | str, ...]) -> str:
    """What to say of the unknown key at LOC: the key meant, or the keys allowed."""
    table = next((str(part) for part in reversed(loc[:-1]) if str(part) in _TABLES), None)
    model = _TABLES[table] if table else Spec
    fields = [f.alias or name for name, f in model.model_fields.items()]
    close = difflib.get_close_matches(str(loc[-1]), fields, n=1)
    return (f"unknown key; did you mean {close[0]}?" if close
            else f"unknown key; the keys allowed are {', '.join(fields)}")


def _plain(error: ErrorDetails) -> str:
    """ERROR (one of pydantic's) as a person says it, worded as the server words arguments for Emacs."""
    kind, loc = error["type"], tuple(error["loc"])
    if kind == "missing":
        return "is required"
    if kind == "extra_forbidden":
        return _unknown(loc)
    if kind == "value_error":  # our own rule: its message says it all
        return error["msg"].removeprefix("Value error, ")
    if kind == "string_pattern_mismatch":
        return f"must be letters a-z, digits and - only, got {shown(error['input'])}"
    if kind == "too_short":
        least = (error.get("ctx") or {}).get("min_length", 1)
        return f"must have at least {least} {'entry' if least == 1 else 'entries'}"
    return must_be([error])


def _where(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def _expand(text: str, key: str, env: dict[str, str]) -> str:
    def one(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in env:
            raise SpecError(f"{key}: ${{{name}}} is not set in the environment")
        return env[name]

    return VARIABLE.sub(one, text)


def skill_folders(folder: Path) -> list[Path]:
    """The skills in a variant's FOLDER: its sub-folders (not hidden ones), each to hold a SKILL.md."""
    return [p for p in sorted(folder.iterdir()) if p.is_dir() and not p.name.startswith(".")]


def _unique(names: list[str], key: str) -> None:
    seen: set[str] = set()
    for n, name in enumerate(names):
        if name in seen:
            raise SpecError(f"{key}[{n}].name: {name!r} is used twice")
        seen.add(name)


def load(path: Path, env: dict[str, str] | None = None) -> Experiment:
    """Read and check the spec at PATH, expand ``${VAR}`` from ENV, and lay out its grid."""
    env = dict(os.environ if env is None else env)
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise SpecError(f"{path}: cannot read it: {err.strerror}") from err
    except UnicodeDecodeError as err:
        raise SpecError(f"{path}: not UTF-8 text (byte {err.start}); save it as UTF-8") from None
    except tomllib.TOMLDecodeError as err:
        raise SpecError(f"{path}: not TOML: {err}") from err
    try:
        spec = Spec.model_validate(raw)
    except ValidationError as err:
        said = "; ".join(f"{_where(tuple(e['loc']))}: {_plain(e)}" for e in err.errors(include_url=False))
        raise SpecError(f"{path}: {said}") from err
    for key, entries in (("prompts", spec.prompts), ("variants", spec.variants), ("models", spec.models)):
        _unique([e.name for e in entries], f"{path}: {key}")
    if spec.experiment.reference is not None and reference_arm(spec) is None:
        raise SpecError(f"{path}: experiment.reference: no variant, model or prompt is named "
                        f"{spec.experiment.reference!r} (variants: {', '.join(v.name for v in spec.variants)}; "
                        f"models: {', '.join(m.name for m in spec.models)}; "
                        f"prompts: {', '.join(p.name for p in spec.prompts)})")
    cells = len(spec.prompts) * len(spec.variants) * len(spec.models) * spec.experiment.repetitions
    if cells > MAX_RUNS:
        raise SpecError(f"{path}: {cells} runs (prompts x variants x models x repetitions); at most {MAX_RUNS} "
                        "in one experiment: split it")
    base = path.resolve().parent
    skills: dict[str, tuple[Path, ...]] = {}
    for n, variant in enumerate(spec.variants):
        folders = []
        for k, folder in enumerate(variant.skills):
            where = base / folder
            if not where.is_dir():
                raise SpecError(f"{path}: variants[{n}].skills[{k}]: no folder {where}")
            for skill in skill_folders(where):
                names = {p.name for p in skill.iterdir()}
                if "SKILL.md" not in names:  # skill.md is not SKILL.md
                    near = [name for name in names if name.lower() == "skill.md"]
                    hint = f" (it has {near[0]}: rename it SKILL.md)" if near else ""
                    raise SpecError(f"{path}: variants[{n}].skills[{k}]: {skill} has no SKILL.md{hint}")
            folders.append(where)
        skills[variant.name] = tuple(folders)
    origins = {v.name: _check_home(path, f"variants[{n}].from" if v.origin else "experiment.from",
                                   v.origin or spec.experiment.origin, base)
               for n, v in enumerate(spec.variants)}
    ticks = {name: (origin[0], origin[1]) if origin else None for name, origin in origins.items()}
    commits = {name: origin[2] if origin else None for name, origin in origins.items()}
    urls = {m.name: _expand(m.base_url, f"{path}: models[{n}].base_url", env) if m.base_url else None
            for n, m in enumerate(spec.models)}
    table = spec.experiment
    runs = [
        Run(run_id=_run_id(p, v, m, rep), experiment=table.name, prompt=p.name, variant=v.name,
            model=m.name, backend=m.backend, model_name=m.model, base_url=urls[m.name], rep=rep,
            turns=tuple(p.turns), skills=skills[v.name], max_steps=table.max_steps,
            run_budget=table.run_budget, timeout=table.timeout,
            origin=ticks[v.name], origin_commit=commits[v.name],
            price=m.price.numbers() if m.price else None)
        for p in spec.prompts for v in spec.variants for m in spec.models for rep in range(table.repetitions)
    ]
    return Experiment(path=path, spec=spec, runs=runs)


def _run_id(prompt: PromptEntry, variant: VariantEntry, model: ModelEntry, rep: int) -> str:
    return f"{prompt.name}.{variant.name}.{model.name}.r{rep}"


def run_order(runs: list[Run], seed: int | None) -> list[Run]:
    """RUNS in the order they go: a permutation drawn from SEED across arms and repetitions, so that
    neither time, nor the machine's load, nor warm-up lines up with an arm; SEED None: the grid's
    order (prompt, variant, model, repetition).  Each run is told its position and the seed."""
    import random

    order = list(runs)
    if seed is not None:
        random.Random(seed).shuffle(order)
    return [replace(run, position=n, order_seed=seed) for n, run in enumerate(order)]


def arm_name(prompt: str, variant: str, model: str) -> str:
    """An arm as the dataset's ``arm`` column says it."""
    return f"{prompt} / {variant} / {model}"


def spec_arms(spec: Spec) -> list[str]:
    """The arms of SPEC in the order it lists them (prompt, variant, model)."""
    return [arm_name(p.name, v.name, m.name) for p in spec.prompts for v in spec.variants for m in spec.models]


def reference_arm(spec: Spec) -> str | None:
    """The arm SPEC's ``reference`` names (the first, in the spec's order, with that variant, model or
    prompt, or that arm whole), None when it names none; without a reference, the spec's first arm."""
    wanted = spec.experiment.reference
    for p in spec.prompts:
        for v in spec.variants:
            for m in spec.models:
                arm = arm_name(p.name, v.name, m.name)
                if wanted is None or wanted in (v.name, m.name, p.name, arm):
                    return arm
    return None


def arms_of(path: Path) -> tuple[list[str], str | None, str | None] | None:
    """The arms of the spec at PATH in its order, its reference arm, and the reference as the spec
    names it (None: not named, the first arm); None when the spec cannot be read."""
    try:
        spec = Spec.model_validate(tomllib.loads(path.read_text(encoding="utf-8")))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError, ValidationError):
        return None
    return spec_arms(spec), reference_arm(spec), spec.experiment.reference


def planned_runs(path: Path) -> list[str] | None:
    """The ids of every run the spec at PATH lays out, or None when it cannot be read (its folders and
    ``${VAR}`` unchecked: a spec copied into a runs folder names them relative to where it was)."""
    try:
        spec = Spec.model_validate(tomllib.loads(path.read_text(encoding="utf-8")))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError, ValidationError):
        return None
    return [_run_id(p, v, m, rep) for p in spec.prompts for v in spec.variants for m in spec.models
            for rep in range(spec.experiment.repetitions)]


def _check_home(path: Path, key: str, origin: str | None, base: Path) -> tuple[str, int, str] | None:
    """ORIGIN (``PATH@TICK`` or ``PATH@COMMIT``, PATH relative to the spec's folder BASE) as (home,
    tick, commit), checked: the home has that tick (or commit: of a tick of its history as it
    stands), restorable (a tick state in its commit), and it ends a turn (:func:`~amacs_server.persistence.history.mid_turn`)."""
    if origin is None:
        return None
    match = ORIGIN.match(origin)
    assert match is not None  # the model checked it
    home = (base / os.path.expanduser(match["path"])).resolve()
    from ..persistence import history  # noqa: PLC0415 - git and memory.db, only for a spec that forks

    try:
        if match["now"] is not None:
            last = history.last_tick(home)
            raise SpecError(f"{path}: {key}: `@now` is not taken here: a resume reads the spec again, and by then "
                            f"{home} may have gone on, its runs started from another mind; its last tick now is "
                            f"{last}: write `@{last}` (or its commit, `@{history.tick_commit(home, last)[:12]}`)")
        given = match["tick"] or match["commit"]
        # Digits alone are a tick, but 7 or more that name a commit are its id: git log prints such ids too.
        if match["tick"] is not None and not (len(given) >= COMMIT_DIGITS and history.names_commit(home, given)):
            tick = int(given)
            commit = history.tick_commit(home, tick)
        else:
            commit, tick = history.origin_commit(home, given)
        history.state_at(home, commit, tick)
        inside = history.mid_turn(home, tick, "a run forked there would start", lambda n: f"`@{n}`",
                                  "a spec without `from`")
        history.lock(home).release()  # the runs fork it at once, unlocked: no server may write it meanwhile
    except history.NoSuchTick as err:
        raise SpecError(f"{path}: {key}: {err}; `amacs-server ticks {home}` lists its inputs and their "
                        "ticks") from err
    except history.HistoryError as err:
        raise SpecError(f"{path}: {key}: {err}") from err
    if inside is not None:
        raise SpecError(f"{path}: {key}: {inside}; `amacs-server ticks {home}` lists the inputs and the tick each began")
    return str(home), tick, commit


def unpriced(runs: list[Run]) -> list[Run]:
    """One run per model of RUNS whose price nobody knows: none in the spec, none listed, and not
    served on this machine (a base URL on 127.0.0.1 or ::1: free)."""
    from ..config import DEFAULT_MODEL
    from ..inference.pricing import is_local, listed_price

    seen: dict[str, Run] = {}
    for run in runs:
        if run.price is None and listed_price(run.model_name or DEFAULT_MODEL) is None and not is_local(run.base_url):
            seen.setdefault(run.model, run)
    return list(seen.values())


def models_of(path: Path, env: dict[str, str] | None = None) -> dict[str, ModelEntry]:
    """The ``[[models]]`` of the spec at PATH by name, ``${VAR}`` expanded from ENV (the rest unchecked:
    a spec copied into a runs folder names its skill folders relative to where it was)."""
    env = dict(os.environ if env is None else env)
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
        models = [ModelEntry.model_validate(m) for m in raw.get("models", [])]
    except OSError as err:
        raise SpecError(f"{path}: cannot read it: {err.strerror}") from err
    except UnicodeDecodeError as err:
        raise SpecError(f"{path}: not UTF-8 text (byte {err.start}); save it as UTF-8") from None
    except (tomllib.TOMLDecodeError, ValidationError, TypeError, AttributeError) as err:
        raise SpecError(f"{path}: its models cannot be read: {err}") from err
    return {m.name: m.model_copy(update={"base_url": _expand(m.base_url, f"{path}: models[{n}].base_url", env)
                                         if m.base_url else None}) for n, m in enumerate(models)}
