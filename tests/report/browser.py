"""A headless Chromium (Debian's `chromium`) driven over the DevTools protocol, for the report tests
and `make report-screenshots`: open a file, record console errors, exceptions and every network
request the page makes, evaluate expressions, take a full-page screenshot.

Chromium is started with `--remote-debugging-port=0` on 127.0.0.1 and announces its websocket
on stderr; we wait for that line, never for a fixed time. It is stopped by its PID.
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import websocket

__all__ = ["Chromium", "PageLoad"]

_LISTENING = "DevTools listening on "
_WAIT_PLOTS = """
new Promise((resolve, reject) => {
  const started = performance.now();
  (function check() {
    const divs = [...document.querySelectorAll('.plotly-graph-div')];
    if (divs.every(d => d._fullLayout && d.data)) resolve(divs.length);
    else if (performance.now() - started > 60000) reject(new Error('plots not drawn within 60 s'));
    else requestAnimationFrame(check);
  })();
})
"""


@dataclass
class PageLoad:
    """What happened while a page loaded: console errors, uncaught exceptions, requests made."""

    url: str
    errors: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)
    plots: int = 0

    @property
    def external_requests(self) -> list[str]:
        """Requests for anything but the page file itself and inline data."""
        return [u for u in self.requests if u != self.url and not u.startswith(("data:", "blob:", "about:"))]


class Chromium:
    def __init__(self, binary: str = "chromium", timeout: float = 60.0) -> None:
        path = shutil.which(binary)
        if path is None:
            raise RuntimeError(f"{binary} is not installed (Debian: apt-get install -y chromium)")
        self.profile = tempfile.TemporaryDirectory(prefix="statebed-chromium-")
        args = [
            path,
            "--headless=new",
            "--no-sandbox",  # CI runs as root
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-extensions",
            "--disable-sync",
            "--remote-debugging-address=127.0.0.1",
            "--remote-debugging-port=0",
            f"--user-data-dir={self.profile.name}",
            "about:blank",
        ]
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.timeout = timeout
        try:  # Chromium checks the Origin header of DevTools connections: send none
            self.ws = websocket.create_connection(self._endpoint(), timeout=timeout, suppress_origin=True)
        except BaseException:
            self.proc.kill()
            self._stop()
            raise
        self.next_id = 0
        self.events: list[dict[str, Any]] = []

    def _endpoint(self) -> str:
        assert self.proc.stderr is not None
        seen = []
        for line in self.proc.stderr:  # blocks until Chromium writes a line or exits
            if line.startswith(_LISTENING):
                return line[len(_LISTENING) :].strip()
            seen.append(line)
        raise RuntimeError(f"chromium exited {self.proc.wait()} before listening: {''.join(seen)[-2000:]}")

    def send(self, method: str, params: dict[str, Any] | None = None, session: str | None = None) -> dict[str, Any]:
        """One command; events that arrive meanwhile are kept in `events`."""
        self.next_id += 1
        msg: dict[str, Any] = {"id": self.next_id, "method": method, "params": params or {}}
        if session is not None:
            msg["sessionId"] = session
        self.ws.send(json.dumps(msg))
        while True:
            reply = json.loads(self.ws.recv())
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return dict(reply.get("result") or {})
            self.events.append(reply)

    def _wait_event(self, method: str, session: str) -> None:
        deadline = time.monotonic() + self.timeout
        while not any(e.get("method") == method and e.get("sessionId") == session for e in self.events):
            self.ws.settimeout(max(deadline - time.monotonic(), 0.1))
            self.events.append(json.loads(self.ws.recv()))  # a timeout raises: the page never loaded

    def open(self, path: Path, width: int = 1400) -> tuple[str, PageLoad]:
        """Open a local file in a new tab; returns its session and what the load did (plots drawn)."""
        if not path.is_file():
            raise FileNotFoundError(path)  # Chromium would show its own error page, with no error to report
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.send(f"{domain}.enable", session=session)
        self.send("Emulation.setDeviceMetricsOverride", {"width": width, "height": 1000, "deviceScaleFactor": 1, "mobile": False}, session)
        url = path.absolute().as_uri()
        self.events.clear()
        self.send("Page.navigate", {"url": url}, session)
        self._wait_event("Page.loadEventFired", session)
        load = PageLoad(url)
        load.plots = int(self.evaluate(session, _WAIT_PLOTS))
        for e in self.events:
            if e.get("sessionId") != session:
                continue
            p = e.get("params") or {}
            if e["method"] == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                load.errors.append("console: " + " ".join(str(a.get("value", a.get("description"))) for a in p.get("args", [])))
            elif e["method"] == "Runtime.exceptionThrown":
                load.errors.append("exception: " + str(p.get("exceptionDetails", {}).get("exception", {}).get("description")))
            elif e["method"] == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
                load.errors.append("log: " + str(p["entry"].get("text")))
            elif e["method"] == "Network.requestWillBeSent":
                load.requests.append(str(p.get("request", {}).get("url")))
        return session, load

    def evaluate(self, session: str, expression: str) -> Any:
        """The value of a JavaScript expression (a promise is awaited); an exception raises."""
        r = self.send("Runtime.evaluate", {"expression": expression, "awaitPromise": True, "returnByValue": True}, session)
        if "exceptionDetails" in r:
            raise RuntimeError(f"{expression[:80]}: {r['exceptionDetails'].get('exception', {}).get('description')}")
        return r.get("result", {}).get("value")

    def screenshot(self, session: str, out: Path, width: int = 1400, max_height: int = 20000) -> Path:
        """A PNG of the whole page (up to `max_height` CSS pixels)."""
        height = int(self.evaluate(session, "document.documentElement.scrollHeight"))
        self.send(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": min(height, max_height), "deviceScaleFactor": 1, "mobile": False},
            session,
        )
        self.evaluate(session, "new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")  # relaid out and painted
        data = self.send("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True}, session)["data"]
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(base64.b64decode(data))
        return out

    def close(self) -> None:
        try:
            self.send("Browser.close")
        except Exception:  # already gone: still reap it below
            pass
        self.ws.close()
        self._stop()

    def _stop(self) -> None:
        """Wait for the browser (closed over CDP) or kill it by its PID; then remove its profile."""
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(30)
        self.profile.cleanup()

    def __enter__(self) -> Chromium:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
