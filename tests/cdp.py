"""Headless Chromium driven over the DevTools protocol: open a page, wait in real time until its text
shows what a test looks for, read its text, and take a screenshot.

``--virtual-time-budget`` (what tests/e2e/test_report.py uses for a static page) fast-forwards a
page's clock but not its server: a single-page app that fetches its data (inspect view) is still
"Loading..." when the budget is spent.  Here the test waits on the page's own text instead."""

from __future__ import annotations

import asyncio
import base64
import json
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

FLAGS = ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-extensions", "--disable-sync", "--no-first-run", "--hide-scrollbars", "--mute-audio")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Browser:
    """One headless Chromium (Debian's ``chromium``) with its DevTools endpoint on 127.0.0.1."""

    def __init__(self, width: int = 1400, height: int = 1000) -> None:
        self.port = _free_port()
        self.profile = tempfile.mkdtemp(prefix="amacs-chromium-")
        self.proc = subprocess.Popen(["chromium", *FLAGS, f"--window-size={width},{height}",
                                      f"--remote-debugging-port={self.port}", f"--user-data-dir={self.profile}",
                                      "about:blank"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()
        shutil.rmtree(self.profile, ignore_errors=True)

    def visit(self, url: str, until: list[str], screenshot: Path | None = None, timeout: float = 90.0) -> str:
        """Open URL, wait until the page's text holds every string of UNTIL (or TIMEOUT: AssertionError
        with the text it had); its text, and a PNG at SCREENSHOT."""
        return asyncio.run(self._visit(url, until, screenshot, timeout))

    async def _visit(self, url: str, until: list[str], screenshot: Path | None, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        async with aiohttp.ClientSession() as http:
            while True:
                try:
                    async with http.put(f"http://127.0.0.1:{self.port}/json/new?about:blank") as r:
                        target = json.loads(await r.text())
                    break
                except (aiohttp.ClientError, ValueError):
                    if time.monotonic() > deadline:
                        raise
                    await asyncio.sleep(0.2)
            async with http.ws_connect(target["webSocketDebuggerUrl"], max_msg_size=0) as ws:
                ids = iter(range(1, 1 << 30))

                async def call(method: str, **params: Any) -> dict[str, Any]:
                    n = next(ids)
                    await ws.send_json({"id": n, "method": method, "params": params})
                    while True:
                        msg = await ws.receive_json()
                        if msg.get("id") == n:
                            return dict(msg.get("result") or {})

                await call("Page.enable")
                await call("Page.navigate", url=url)
                text = ""
                while True:
                    result = await call("Runtime.evaluate", expression="document.body ? document.body.innerText : ''",
                                        returnByValue=True)
                    text = str((result.get("result") or {}).get("value") or "")
                    if all(s in text for s in until):
                        break
                    if time.monotonic() > deadline:
                        raise AssertionError(f"{url}: not all of {until} shown in {timeout:g} s; the page said:\n"
                                             + text[:3000])
                    await asyncio.sleep(0.5)
                await asyncio.sleep(1.0)  # let the last of it paint
                if screenshot is not None:
                    shot = await call("Page.captureScreenshot", format="png")
                    screenshot.write_bytes(base64.b64decode(shot["data"]))
                return text
