"""An experiment spec's numbers are bounded and its encoding checked, each a one-line SpecError:
30,000,000 repetitions reached 3.9 GB before a memory error, and a non-UTF-8 spec was a traceback."""

from __future__ import annotations

import pytest

from amacs_server.research.spec import MAX_REPETITIONS, MAX_RUNS, SpecError, load

SPEC = """[experiment]
name = "bounds"
repetitions = {repetitions}
parallel = {parallel}

[[prompts]]
name = "p"
turns = ["hello"]

[[models]]
name = "m"
model = "claude-sonnet-4-5"
"""


def write(tmp_path, repetitions=1, parallel=1, extra=""):
    path = tmp_path / "experiment.toml"
    path.write_text(SPEC.format(repetitions=repetitions, parallel=parallel) + extra)
    return path


def test_a_spec_within_the_bounds_is_laid_out(tmp_path):
    assert len(load(write(tmp_path, repetitions=3), env={}).runs) == 3


@pytest.mark.parametrize(("repetitions", "parallel", "said"), [
    (30_000_000, 1, f"experiment.repetitions: .*{MAX_REPETITIONS}"),
    (10**11, 1, f"experiment.repetitions: .*{MAX_REPETITIONS}"),
    (1, 100_000, "experiment.parallel: "),
])
def test_numbers_past_their_bound_are_one_line(tmp_path, repetitions, parallel, said):
    with pytest.raises(SpecError, match=said) as err:
        load(write(tmp_path, repetitions, parallel), env={})
    assert "\n" not in str(err.value)


def test_a_grid_of_too_many_runs_is_one_line(tmp_path):
    prompts = "".join(f'\n[[prompts]]\nname = "p{n}"\nturns = ["hi"]\n' for n in range(20))
    with pytest.raises(SpecError, match=f"210000 runs .*at most {MAX_RUNS} in one experiment: split it"):
        load(write(tmp_path, repetitions=10_000, extra=prompts), env={})


def test_a_spec_that_is_not_utf8_is_one_line(tmp_path):
    path = write(tmp_path)
    path.write_bytes(path.read_bytes() + b'# caf\xe9\n')
    with pytest.raises(SpecError, match=r"experiment.toml: not UTF-8 text \(byte \d+\); save it as UTF-8"):
        load(path, env={})


def test_a_run_folder_is_its_owners_only(tmp_path):
    from amacs_server.research.runs import discard, prepare

    [run] = load(write(tmp_path), env={}).runs
    ready = prepare(run, tmp_path / "runs")
    try:
        assert (tmp_path / "runs" / run.run_id).stat().st_mode & 0o777 == 0o700
    finally:
        discard(ready)


def test_a_killed_experiments_fork_server_folder_is_swept(tmp_path, monkeypatch):
    import os
    import tempfile

    from amacs_server.research import cluster

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    dead = tmp_path / "amacs-fork-999999999-abc"  # no such process
    live = tmp_path / f"amacs-fork-{os.getpid()}-abc"
    other = tmp_path / "amacs-fork-old"  # a name of before: not ours to judge
    for folder in (dead, live, other):
        folder.mkdir()
    cluster._sweep()
    assert not dead.exists() and live.exists() and other.exists()
