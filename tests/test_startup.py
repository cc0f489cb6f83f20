"""Start-up (issue 10): the port line comes before the model SDKs are imported."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from amacs_server.inference import sdk

ROOT = Path(__file__).resolve().parents[1]


def test_server_modules_import_no_sdk_and_no_gitpython(tmp_path: Path) -> None:
    """The path to the port line (imports, a Runtime on a new home) needs neither the SDKs nor GitPython,
    and the first commit makes the repository with git itself, not GitPython."""
    code = ("import sys; from pathlib import Path; "
            "import amacs_server.serve, amacs_server.methods, amacs_server.runtime; "
            "from amacs_server.inference import sdk; sdk.hold(); "  # as serve does until hello
            "from amacs_server.config import load_config; "
            "from amacs_server.runtime import Runtime; "
            "from amacs_server.transport.emacs_face import EmacsFace; "
            "from amacs_server.transport.server import AmacsEPCServer; "
            f"rt = Runtime(load_config({{'AMACS_HOME': {str(tmp_path)!r}}}), EmacsFace(AmacsEPCServer('t', headless=True))); "
            "print(sorted(m for m in ('anthropic', 'openai', 'git') if m in sys.modules)); sdk.release(); "
            "rt.mind.commits.submit([], 'first'); rt.mind.commits.flush(30); "
            "print('git' in sys.modules, rt.mind.repo.log())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.splitlines() == ["[]", "False ['first']"]


def test_port_first_then_only_the_backend_in_use(tmp_path: Path) -> None:
    """The port is the first line; the anthropic SDK is imported after it, in a thread; openai never."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AMACS_", "ANTHROPIC_", "OPENAI_"))}
    env.update(AMACS_HOME=str(tmp_path), AMACS_TOKEN="t" * 64, ANTHROPIC_API_KEY="sk-test")
    proc = subprocess.Popen([sys.executable, "-m", "amacs_server"], stdout=subprocess.PIPE, text=True,
                            env=env, cwd=ROOT)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip().isdigit()
        log = tmp_path / "logs" / "server.log"
        deadline = time.monotonic() + 30
        while "imported anthropic" not in log.read_text(encoding="utf-8"):
            assert time.monotonic() < deadline, log.read_text(encoding="utf-8")
            time.sleep(0.05)
        text = log.read_text(encoding="utf-8")
        assert text.index("serving on") < text.index("imported anthropic")
        assert "imported openai" not in text
    finally:
        proc.terminate()
        proc.wait(10)


def test_the_sdk_import_waits_for_hello(tmp_path: Path) -> None:
    """Emacs's hello is answered before the SDK import starts (it holds the GIL for ~1 s)."""
    from tests.test_transport import connect, hello

    env = {k: v for k, v in os.environ.items() if not k.startswith(("AMACS_", "ANTHROPIC_", "OPENAI_"))}
    token = "t" * 64
    env.update(AMACS_HOME=str(tmp_path), AMACS_TOKEN=token, ANTHROPIC_API_KEY="sk-test")
    proc = subprocess.Popen([sys.executable, "-m", "amacs_server"], stdout=subprocess.PIPE, text=True,
                            env=env, cwd=ROOT)
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline())
        log = tmp_path / "logs" / "server.log"
        time.sleep(0.3)  # well before the fallback (SDK_IMPORT_LATEST, 1 s)
        assert "importing anthropic" not in log.read_text(encoding="utf-8")
        sock = connect(port)
        hello(sock, token)
        deadline = time.monotonic() + 30
        while "imported anthropic" not in log.read_text(encoding="utf-8"):
            assert time.monotonic() < deadline, log.read_text(encoding="utf-8")
            time.sleep(0.05)
        sock.close()
    finally:
        proc.terminate()
        proc.wait(10)


def test_lazy_module_waits_for_a_held_preload() -> None:
    """A preload asked for while held starts at release; ready() waits for it off the loop."""
    mod = sdk.LazyModule("json")
    sdk.hold()
    try:
        mod.preload()
        assert not mod.loaded and mod in sdk._pending
    finally:
        sdk.release()
    assert asyncio.run(mod.ready()).dumps([1]) == "[1]"
    assert mod.loaded and mod.loads("2") == 2


def test_a_wait_for_a_held_preload_does_not_import_before_the_release(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The capabilities' question awaits the SDK as the server starts: it waits for the held
    preload (the import would compete with hello and the methods' publishing), then has it."""
    (tmp_path / "amacs_held_mod.py").write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    mod = sdk.LazyModule("amacs_held_mod")
    sdk.hold()
    try:
        mod.preload()

        async def wait() -> object:
            task = asyncio.ensure_future(mod.ready())
            await asyncio.sleep(0.2)
            imported_early = "amacs_held_mod" in sys.modules
            sdk.release()
            return imported_early, (await asyncio.wait_for(task, 10)).VALUE

        assert asyncio.run(wait()) == (False, 1)
    finally:
        sdk.release()


def test_a_wait_for_a_preload_holds_nothing_the_exit_waits_for(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A loop that stops while it awaits an import under way ends at once (its executor had a
    thread blocked on the import, and the server's exit waited ~1.2 s for the SDK)."""
    (tmp_path / "amacs_slow_mod.py").write_text("import time\ntime.sleep(1.5)\nVALUE = 2\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    mod = sdk.LazyModule("amacs_slow_mod")
    mod.preload()

    async def give_up() -> None:
        task = asyncio.ensure_future(mod.ready())
        await asyncio.sleep(0.1)
        task.cancel()

    started = time.monotonic()
    asyncio.run(give_up())  # joins the loop's default executor
    assert time.monotonic() - started < 1.0
    assert asyncio.run(mod.ready()).VALUE == 2


def test_a_missing_sdk_fails_at_first_use_not_at_start() -> None:
    mod = sdk.LazyModule("amacs_no_such_sdk")
    mod.preload()  # logged, not raised
    with pytest.raises(ModuleNotFoundError):
        mod.load()


def test_a_server_whose_emacs_died_before_connecting_stops(tmp_path: Path) -> None:
    """The Emacs that started a server is killed before it connects: the server does not serve
    nobody for ever (holding the home's lock); it sees its parent gone and exits, cleaning up."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AMACS_", "ANTHROPIC_", "OPENAI_"))}
    env.update(AMACS_HOME=str(tmp_path), AMACS_TOKEN="t" * 64, ANTHROPIC_API_KEY="sk-test")
    # The parent stands in for Emacs: it starts the server, reads its port line, prints its pid, dies.
    parent = ("import subprocess, sys; "
              "p = subprocess.Popen([sys.executable, '-m', 'amacs_server'], stdout=subprocess.PIPE, "
              "stdin=subprocess.DEVNULL, text=True, start_new_session=True); "
              "assert p.stdout.readline().strip().isdigit(); print(p.pid, flush=True)")
    out = subprocess.run([sys.executable, "-c", parent], capture_output=True, text=True, env=env, cwd=ROOT,
                         timeout=60, check=True)
    pid = int(out.stdout)
    deadline = time.monotonic() + 20
    while Path(f"/proc/{pid}").exists() and "zombie" not in _state(pid):
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            raise AssertionError("the orphaned server is still running")
        time.sleep(0.1)
    log = (tmp_path / "logs" / "server.log").read_text(encoding="utf-8")
    assert "is gone: stopping" in log
    assert not (tmp_path / "server.json").exists()  # it cleaned up as at any stop


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/status").read_text().split("State:")[1].split("\n")[0]
    except (OSError, IndexError):
        return "zombie"


def test_garbage_is_collected_again_once_the_runtime_is_built(tmp_path: Path) -> None:
    """main holds cyclic garbage collection while the runtime is built (~80 collections walked
    start-up's objects while hello waited); the builder enables it again, start-up's objects frozen."""
    code = ("import gc; "
            "from amacs_server.serve import RuntimeBuilder; "
            "from amacs_server.config import load_config; "
            "from amacs_server.scrub import Scrubber; "
            "from amacs_server.transport.server import AmacsEPCServer; "
            f"config = load_config({{'AMACS_HOME': {str(tmp_path)!r}, 'ANTHROPIC_API_KEY': 'sk-test'}}); "
            "server = AmacsEPCServer('t' * 64, headless=False, starting=True); "
            "builder = RuntimeBuilder(config, server, Scrubber({}), headless=False); "
            "gc.disable(); builder.start(); rt = builder.finish(60); "
            "print(rt is not None, gc.isenabled(), gc.get_freeze_count() > 10000); rt.stop(); server.server_close()")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.stdout.splitlines() == ["True True True"], out.stderr[-2000:]


def test_the_commands_other_than_serving_collect_garbage(tmp_path: Path) -> None:
    """``python -m amacs_server`` holds the cyclic collector from its first line (the server's
    start-up enables it once its runtime is built); a command such as ``transcripts`` runs
    with it enabled."""
    code = ("import gc, runpy, sys\n"
            f"sys.argv = ['amacs-server', 'transcripts', {str(tmp_path)!r}]\n"
            "try:\n    runpy.run_module('amacs_server', run_name='__main__')\n"
            "except SystemExit:\n    pass\n"
            "print('collector enabled:', gc.isenabled())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.stdout.splitlines()[-1] == "collector enabled: True", (out.stdout, out.stderr[-2000:])


def test_amacs_help_says_its_own_options_and_starts_nothing(tmp_path: Path) -> None:
    """Was: ./amacs --help went to Emacs, which printed its own usage, not --demo, --local, --stop-warm."""
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path)}
    out = subprocess.run([str(ROOT / "amacs"), "--help"], capture_output=True, text=True, env=env, timeout=30)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("Usage: ./amacs"), out.stdout
    for option in ("--demo", "--local", "--stop-warm"):
        assert option in out.stdout, option
    # A newcomer looked in --help for where the agent's files go and how to keep no warm server.
    for setting in ("AMACS_HOME", "AMACS_WARM=0", "ANTHROPIC_BASE_URL"):
        assert setting in out.stdout, setting
    assert "emacs [OPTION-OR-FILENAME]" not in out.stdout
    assert not list(tmp_path.iterdir())  # no setup ran, nothing was made in HOME
