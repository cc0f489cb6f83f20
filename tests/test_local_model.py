"""The local model server under the AMACS server's care (amacs_server/local_model.py).

Against tests/fake_llama, a stand-in for ``python -m llama_cpp.server`` that speaks
real HTTP; the real llama.cpp server is driven in tests/e2e/test_local_model.py.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from amacs_server.config import ConfigError, load_config
from amacs_server.local_model import RESTARTS, LocalModel, LocalModelError

FAKE = Path(__file__).with_name("fake_llama")


@pytest.fixture
def fake_llama(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", str(FAKE))


@pytest.fixture
def started(tmp_path: Path, fake_llama: None) -> Iterator[Callable[..., LocalModel]]:
    made: list[LocalModel] = []

    def start(model: str = "m.gguf", **kw: Any) -> LocalModel:
        (tmp_path / model).write_bytes(b"GGUF")
        local = LocalModel(Path(sys.executable), tmp_path / model, tmp_path / "logs" / "local-model.log", **kw)
        local.start()
        made.append(local)
        return local

    yield start
    for local in made:
        local.stop()


def wait_for(fn: Callable[[], Any], timeout: float = 20) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = fn()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError("timed out")


def gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z"
    except OSError:
        return True


def test_serves_on_localhost_and_is_restarted_when_it_dies(started: Callable[..., LocalModel]) -> None:
    local = started()
    local.wait_ready(20)
    assert local.base_url.startswith("http://127.0.0.1:")
    cmd = local.command()
    assert cmd[cmd.index("--host") + 1] == "127.0.0.1" and cmd[cmd.index("--n_ctx") + 1] == "8192"
    first = local.pid
    assert first is not None
    os.kill(first, signal.SIGKILL)
    second = wait_for(lambda: local.pid if local.pid not in (None, first) else None)
    local.wait_ready(20)  # on the same port: the backend's endpoint stays right
    assert local.starts == 2 and second != first
    local.stop()
    assert gone(second) and local.pid is None
    time.sleep(0.8)
    assert local.starts == 2  # stopped on purpose: not started again


def test_gives_up_after_dying_too_often(started: Callable[..., LocalModel]) -> None:
    local = started("fail", backoff=0.01)
    with pytest.raises(LocalModelError, match=f"stopped {RESTARTS + 1} times in a row"):
        local.wait_ready(30)
    assert local.starts == RESTARTS + 1


def test_missing_files_are_said(tmp_path: Path) -> None:
    with pytest.raises(LocalModelError, match="does not exist: run scripts/local-model.sh"):
        LocalModel(Path(sys.executable), tmp_path / "none.gguf", tmp_path / "log").start()


def test_no_orphan_when_its_parent_is_killed(tmp_path: Path, fake_llama: None) -> None:
    """SIGKILL leaves the AMACS server no time to stop the model server: it stops by itself."""
    (tmp_path / "m.gguf").write_bytes(b"GGUF")
    parent = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from pathlib import Path; "
         "from amacs_server.local_model import LocalModel; "
         f"m = LocalModel(Path(sys.executable), Path({str(tmp_path / 'm.gguf')!r}), Path({str(tmp_path / 'log')!r})); "
         "m.start(); m.wait_ready(20); print(m.pid, flush=True); time.sleep(600)"],
        stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": f"{FAKE}:{Path.cwd()}"})
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    assert not gone(child)
    parent.kill()
    parent.wait()
    wait_for(lambda: gone(child), 10)


def test_config(tmp_path: Path) -> None:
    env = {"AMACS_HOME": str(tmp_path), "AMACS_LOCAL_MODEL": "/m.gguf"}
    with pytest.raises(ConfigError, match="AMACS_LOCAL_PYTHON is not"):
        load_config(env)
    cfg = load_config({**env, "AMACS_LOCAL_PYTHON": "/py"})
    assert (cfg.backend, cfg.model, cfg.local_model, cfg.has_credentials) == ("openai", "smollm2", Path("/m.gguf"), True)
    # The no-key note offers the local model: by its page, or (a server chosen, its key missing) by name.
    assert "docs/local-models.md" in load_config({"AMACS_HOME": str(tmp_path)}).missing_key_message()
    assert "amacs-use-local-model" in load_config({"AMACS_HOME": str(tmp_path),
                                                   "ANTHROPIC_BASE_URL": "http://127.0.0.1:9"}).missing_key_message()


def test_the_runtime_runs_the_local_model(tmp_path: Path, fake_llama: None) -> None:
    """AMACS_LOCAL_MODEL: the runtime starts the model server, talks to it (its json_object reply
    form and its 8,192-token window known from the start), says what the model is for, and stops
    it when it stops."""
    from amacs_server.local_model import TRY_ONLY, LocalBackend
    from amacs_server.runtime import Runtime
    from tests.test_memory import SilentFace

    (tmp_path / "m.gguf").write_bytes(b"GGUF")
    rt = Runtime(load_config({"AMACS_HOME": str(tmp_path / "home"), "AMACS_LOCAL_MODEL": str(tmp_path / "m.gguf"),
                              "AMACS_LOCAL_PYTHON": sys.executable}), SilentFace())  # type: ignore[arg-type]
    try:
        rt.start()
        assert isinstance(rt.slot.backend, LocalBackend) and rt.slot.local is not None
        assert rt.slot.backend_name == "openai" and rt.slot.model == "smollm2"
        assert rt.config.openai_base_url == rt.slot.local.base_url
        assert TRY_ONLY in rt.startup_notes
        assert rt.slot.catalog.window == 8192
        wait_for(lambda: rt.slot.catalog.caps.schema_form == "json_object")
        assert rt.slot.backend.schema_form_of is not None and rt.slot.backend.schema_form_of() == "json_object"
        # An answer may take an eighth of the window (the room the context leaves), not all of it,
        # and the model this machine runs costs nothing.
        assert rt.slot.catalog.answer_tokens(8192) == 1024 and rt.slot.catalog.answer_tokens(500) == 500
        from amacs_server.inference.pricing import Usage
        assert rt.ledger.charge(Usage(input_tokens=4917, output_tokens=3275)) == 0.0
        rt.slot.local.wait_ready(20)
        pid = rt.slot.local.pid
        assert pid is not None
    finally:
        rt.stop()
    assert gone(pid) and rt.slot.local.pid is None
