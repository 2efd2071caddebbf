"""A small W3C WebDriver client for the browser tests: Debian's `chromedriver` driving headless
`chromium` over HTTP with the standard library (no selenium to install).

    with Browser() as browser:
        browser.get("http://127.0.0.1:8040/")
        browser.click("#sq-e2")
        png = browser.screenshot()

`Browser.available()` says whether both programs are installed (`apt-get install chromium
chromium-driver`); `skip_reason()` says what is missing.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from typing import Any

ELEMENT = "element-6066-11e4-a52e-4f735466cecf"
CHROMIUM = ("chromium", "chromium-browser", "google-chrome")
DRIVER = ("chromedriver",)


def _which(names) -> str | None:
    for name in names:
        found = shutil.which(name) or (
            f"/usr/bin/{name}" if os.path.exists(f"/usr/bin/{name}") else None
        )
        if found:
            return found
    return None


def skip_reason() -> str | None:
    """None when chromium and chromedriver are installed, else what to install."""
    missing = [
        name for name, names in (("chromium", CHROMIUM), ("chromium-driver", DRIVER))
        if _which(names) is None
    ]  # fmt: skip
    if not missing:
        return None
    return (
        f"the browser test needs Debian's {' and '.join(missing)} (apt-get install chromium "
        "chromium-driver; .ci/run installs them)"
    )


class WebDriverError(RuntimeError):
    """An error answer of the driver (its message included)."""


class Browser:
    """One headless Chromium session through a chromedriver process started here."""

    def __init__(self, width: int = 1100, height: int = 820, timeout: float = 60.0):
        port = _free_port()
        self._profile = tempfile.mkdtemp(prefix="mmc_jax_chromium_")
        self._driver = subprocess.Popen(
            [_which(DRIVER), f"--port={port}"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self._base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + timeout
        while True:
            try:
                if self._call("GET", "/status")["ready"]:
                    break
            except (OSError, WebDriverError):
                pass
            if time.monotonic() > deadline:
                self.close()
                raise WebDriverError("chromedriver did not start")
            time.sleep(0.1)
        arguments = [
            "--headless=new",
            "--no-sandbox",  # the tests may run as root (CI)
            "--disable-gpu",
            "--disable-dev-shm-usage",
            f"--window-size={width},{height}",
            f"--user-data-dir={self._profile}",
        ]
        capabilities = {
            "browserName": "chrome",
            "goog:chromeOptions": {"binary": _which(CHROMIUM), "args": arguments},
        }
        try:
            session = self._call(
                "POST", "/session", {"capabilities": {"alwaysMatch": capabilities}}
            )
        except Exception:
            self.close()
            raise
        self._session = f"/session/{session['sessionId']}"

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self._base + path,
            data=data,
            method=method,
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=120) as response:
                payload = json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as error:
            try:
                payload = json.loads(error.read() or b"{}")
            except ValueError:
                payload = {}
            value = payload.get("value") or {}
            raise WebDriverError(f"{value.get('error')}: {value.get('message')}") from None
        return payload.get("value")

    def _session_call(self, method: str, path: str, body: Any = None) -> Any:
        return self._call(method, self._session + path, body)

    def get(self, url: str) -> None:
        """Open `url`."""
        self._session_call("POST", "/url", {"url": url})

    def find(self, css: str) -> str:
        """The element id of the first element matching `css`."""
        return self._session_call("POST", "/element", {"using": "css selector", "value": css})[
            ELEMENT
        ]

    def click(self, css: str) -> None:
        """Click the first element matching `css` (at its centre, as a person would)."""
        self._session_call("POST", f"/element/{self.find(css)}/click", {})

    def text(self, css: str) -> str:
        """The visible text of the first element matching `css`."""
        return self._session_call("GET", f"/element/{self.find(css)}/text")

    def run(self, script: str, *args: Any) -> Any:
        """Run JavaScript in the page (`return ...` gives a value)."""
        return self._session_call("POST", "/execute/sync", {"script": script, "args": list(args)})

    def source(self) -> str:
        """The page's current source (the DOM as the browser holds it)."""
        return self._session_call("GET", "/source")

    def screenshot(self) -> bytes:
        """A PNG of the window."""
        return base64.b64decode(self._session_call("GET", "/screenshot"))

    def wait(self, script: str, timeout: float = 180.0, interval: float = 0.2) -> Any:
        """Poll `script` (JavaScript returning a value) until it is truthy; return it."""
        deadline = time.monotonic() + timeout
        while True:
            value = self.run(script)
            if value:
                return value
            if time.monotonic() > deadline:
                raise WebDriverError(f"timed out waiting for: {script}")
            time.sleep(interval)

    def close(self) -> None:
        """End the session and stop the driver this object started."""
        session = getattr(self, "_session", None)
        if session is not None:
            try:
                self._call("DELETE", session)
            except (OSError, WebDriverError):
                pass
            self._session = None
        if self._driver.poll() is None:
            self._driver.terminate()
            try:
                self._driver.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._driver.kill()
        shutil.rmtree(self._profile, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
