"""A real headless Chromium (Debian's ``chromium``), driven over the DevTools protocol through a pipe
(``--remote-debugging-pipe``: JSON messages ended by NUL on fds 3 and 4), with no Python package
beyond the standard library. Used to load the report page, collect console errors, read its text
and take a screenshot."""

from __future__ import annotations

import base64
import fcntl
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

ERROR_EVENTS = ("Runtime.exceptionThrown",)


def chromium_binary() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


class Browser:
    """One headless Chromium with one page. ``errors`` collects console errors and uncaught exceptions."""

    def __init__(self, profile: Path, width: int = 1280, height: int = 1600) -> None:
        binary = chromium_binary()
        if binary is None:
            raise RuntimeError("chromium is not installed (apt-get install -y chromium)")
        to_chrome_read, self._to_chrome = os.pipe()
        self._from_chrome, from_chrome_write = os.pipe()

        def map_fds() -> None:  # in the child: the pipe ends become fds 3 (commands in) and 4 (replies out)
            read_end = fcntl.fcntl(to_chrome_read, fcntl.F_DUPFD, 10)
            write_end = fcntl.fcntl(from_chrome_write, fcntl.F_DUPFD, 10)
            os.dup2(read_end, 3)
            os.dup2(write_end, 4)

        self.proc = subprocess.Popen(
            [binary, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
             "--remote-debugging-pipe", f"--user-data-dir={profile}", f"--window-size={width},{height}",
             "about:blank"],
            preexec_fn=map_fds, pass_fds=(3, 4), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL)
        os.close(to_chrome_read)
        os.close(from_chrome_write)
        self._buffer = b""
        self._id = 0
        self.events: list[dict[str, Any]] = []
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        self.call("Emulation.setDeviceMetricsOverride", {"width": width, "height": height, "deviceScaleFactor": 1,
                                                         "mobile": False}, page=True)
        for domain in ("Page.enable", "Runtime.enable", "Log.enable"):
            self.call(domain, page=True)

    def _receive(self) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            chunk = os.read(self._from_chrome, 1 << 16)
            if not chunk:
                raise RuntimeError("chromium closed the DevTools pipe")
            self._buffer += chunk
        message, _, self._buffer = self._buffer.partition(b"\0")
        return json.loads(message)

    def call(self, method: str, params: dict[str, Any] | None = None, page: bool = False) -> dict[str, Any]:
        self._id += 1
        message: dict[str, Any] = {"id": self._id, "method": method, "params": params or {}}
        if page:
            message["sessionId"] = self.session
        os.write(self._to_chrome, json.dumps(message).encode() + b"\0")
        while True:
            reply = self._receive()
            if reply.get("id") == self._id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply["result"]
            self.events.append(reply)

    def open(self, url: str) -> None:
        """Navigate and wait for the load event."""
        seen = len(self.events)
        self.call("Page.navigate", {"url": url}, page=True)
        while not any(e.get("method") == "Page.loadEventFired" for e in self.events[seen:]):
            self.events.append(self._receive())

    def evaluate(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True}, page=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    @property
    def errors(self) -> list[dict[str, Any]]:
        out = [e for e in self.events if e.get("method") in ERROR_EVENTS]
        out += [e for e in self.events if e.get("method") == "Runtime.consoleAPICalled"
                and e["params"].get("type") in ("error", "assert")]
        out += [e for e in self.events if e.get("method") == "Log.entryAdded"
                and e["params"]["entry"].get("level") == "error"]
        return out

    def screenshot(self, path: Path, full_page: bool = True) -> Path:
        params: dict[str, Any] = {"format": "png", "captureBeyondViewport": full_page}
        if full_page:
            size = self.call("Page.getLayoutMetrics", page=True)["cssContentSize"]
            params["clip"] = {"x": 0, "y": 0, "width": size["width"], "height": min(size["height"], 6000), "scale": 1}
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(self.call("Page.captureScreenshot", params, page=True)["data"]))
        return path

    def close(self) -> None:
        try:
            self.call("Browser.close")
        except RuntimeError:
            pass
        finally:
            os.close(self._to_chrome)
            os.close(self._from_chrome)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def stamp_png(path: Path, key: str, text: str) -> None:
    """Add a ``tEXt`` chunk ``key``: ``text`` to a PNG (before its IEND), e.g. the numbers a
    screenshot shows, so a later run can tell whether the picture is still current."""
    import struct
    import zlib

    data = path.read_bytes()
    end = data.rindex(b"IEND") - 4  # the IEND chunk starts with its 4-byte length
    body = key.encode("latin-1") + b"\0" + text.encode("latin-1")
    chunk = struct.pack(">I", len(body)) + b"tEXt" + body + struct.pack(">I", zlib.crc32(b"tEXt" + body))
    path.write_bytes(data[:end] + chunk + data[end:])


def png_text(path: Path, key: str) -> str | None:
    """The ``tEXt`` chunk ``key`` of a PNG, or None (no file, no such chunk)."""
    import struct

    try:
        data = path.read_bytes()
    except OSError:
        return None
    offset = 8
    while offset + 8 <= len(data):
        (length,) = struct.unpack(">I", data[offset:offset + 4])
        kind, body = data[offset + 4:offset + 8], data[offset + 8:offset + 8 + length]
        if kind == b"tEXt" and body.startswith(key.encode("latin-1") + b"\0"):
            return body[len(key) + 1:].decode("latin-1")
        offset += 12 + length
    return None
