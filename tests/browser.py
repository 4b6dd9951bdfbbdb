"""A real headless Chromium (Debian's `chromium` package), driven over its DevTools protocol with aiohttp (already
in the pinned set: no selenium, no driver binary). Used by tests/test_pipeline.py's MLflow UI test.

    with Chromium(profile_dir) as browser:
        text = browser.open(url, until=["theory_simulation"])   # the page's visible text once it shows them
        browser.screenshot(path)
"""

from __future__ import annotations

import asyncio
import base64
import json
import shutil
import subprocess
import time
from pathlib import Path

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--remote-debugging-port=0", "--window-size=1600,2000"]


def find_chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


class Chromium:
    """One browser process with a fresh ``--user-data-dir``; one page, reused."""

    def __init__(self, user_data_dir: Path, hang_guard_s: float = 300):
        self.user_data_dir = Path(user_data_dir)
        self.hang_guard_s = hang_guard_s
        self.loop = asyncio.new_event_loop()
        self.proc: subprocess.Popen | None = None
        self._id = 0

    def __enter__(self) -> "Chromium":
        binary = find_chromium()
        if binary is None:
            raise FileNotFoundError("chromium is not installed (apt-get install -y chromium)")
        shutil.rmtree(self.user_data_dir, ignore_errors=True)  # a fresh profile (and no stale DevToolsActivePort)
        self.user_data_dir.mkdir(parents=True)
        self.proc = subprocess.Popen([binary, *FLAGS, f"--user-data-dir={self.user_data_dir}", "about:blank"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        port_file = self.user_data_dir / "DevToolsActivePort"
        deadline = time.monotonic() + self.hang_guard_s
        while not (port_file.exists() and len(port_file.read_text().splitlines()) >= 2):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"chromium did not start (exit code {self.proc.poll()})")
            time.sleep(0.1)
        self.port = int(port_file.read_text().splitlines()[0])
        self.loop.run_until_complete(self._connect())
        return self

    def __exit__(self, *exc) -> None:
        try:
            self.loop.run_until_complete(self._close())
        finally:
            self.loop.close()
            if self.proc is not None:
                self.proc.terminate()
                try:
                    self.proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait(timeout=60)

    async def _connect(self) -> None:
        import aiohttp

        self.session = aiohttp.ClientSession()
        async with self.session.get(f"http://127.0.0.1:{self.port}/json/list") as resp:
            pages = [t for t in await resp.json(content_type=None) if t["type"] == "page"]
        self.ws = await self.session.ws_connect(pages[0]["webSocketDebuggerUrl"], max_msg_size=0)
        await self._call("Page.enable")
        await self._call("Runtime.enable")

    async def _close(self) -> None:
        if getattr(self, "ws", None) is not None:
            await self.ws.close()
        if getattr(self, "session", None) is not None:
            await self.session.close()

    async def _call(self, method: str, **params):
        self._id += 1
        msg_id = self._id
        await self.ws.send_str(json.dumps({"id": msg_id, "method": method, "params": params}))
        while True:
            msg = json.loads((await asyncio.wait_for(self.ws.receive(), self.hang_guard_s)).data)
            if msg.get("id") == msg_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})

    def evaluate(self, expression: str):
        result = self.loop.run_until_complete(self._call("Runtime.evaluate", expression=expression,
                                                         returnByValue=True))
        return result.get("result", {}).get("value")

    def viewport(self, width: int, height: int) -> None:
        """Resize the page (a tall one renders every lazily drawn chart, and the screenshot shows them all)."""
        self.loop.run_until_complete(self._call("Emulation.setDeviceMetricsOverride", width=width, height=height,
                                                deviceScaleFactor=1, mobile=False))

    def open(self, url: str, until: list[str]) -> str:
        """Load ``url`` and wait (hang guard only) until its visible text contains every string of ``until``;
        returns that text. Raises AssertionError with the text seen last if they never all show."""
        self.loop.run_until_complete(self._call("Page.navigate", url=url))
        deadline = time.monotonic() + self.hang_guard_s
        text = ""
        while time.monotonic() < deadline:
            text = self.evaluate("document.body ? document.body.innerText : ''") or ""
            if all(s in text for s in until):
                time.sleep(1.0)  # let charts finish drawing before a screenshot
                return self.evaluate("document.body.innerText") or text
            time.sleep(0.5)
        missing = [s for s in until if s not in text]
        raise AssertionError(f"{url}: never showed {missing}; the page's text:\n{text[:3000]}")

    def screenshot(self, path: Path) -> Path:
        result = self.loop.run_until_complete(self._call("Page.captureScreenshot", format="png"))
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_bytes(base64.b64decode(result["data"]))
        return Path(path)
