"""The person at the browser, for scripts/interop/oauth_out.sh, in a real browser: headless Chromium
(Debian's) opens a sign-in link mcpgate gave, and is driven over the DevTools protocol (a
WebSocket, `websockets` from the pinned venv) as a person would use it: on the authorization
server's own login page it types a login name (any is taken: it becomes the tokens' `sub`) and a
password, on its consent page it presses continue, and it follows every redirect the pages make,
until it lands on one of mcpgate's own pages (one that says what happened, `#said`). Nothing is
fetched beside the browser: the cookies, the redirects, the forms are Chromium's own.

Each user has a profile directory of their own (`--profile`), so two users are two browsers.

    python oauth_chromium.py URL --profile DIR --login NAME [--timeout SECONDS]

Prints one JSON line: the page it ended on (`url`, `title`, `text`, HTTP-less: what the person
sees) and the origins it went through. Exit status 0 when it ended on a page of mcpgate's.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from typing import Any

from websockets.sync.client import connect

# What a person does on a page, in its own JavaScript: fill the login form (oidc-provider's
# development pages have `login` and `password`), press the form's button, or say there is nothing
# to do. A form is submitted once per page.
ACT = """
(() => {
  const said = document.getElementById('said');
  if (said) return {done: true};
  const form = document.querySelector('form');
  if (!form || form.dataset.pressed) return {done: false, acted: false};
  if (form.elements.login) {
    form.elements.login.value = LOGIN;
    if (form.elements.password) form.elements.password.value = 'any';
  }
  if (form.querySelector('input[name=token]')) return {done: false, acted: false, token_form: true};
  form.dataset.pressed = '1';
  const button = form.querySelector('button[type=submit], button:not([type])');
  if (button) button.click(); else form.submit();
  return {done: false, acted: true};
})()
"""

LOOK = """
JSON.stringify({url: location.href, title: document.title, ready: document.readyState,
                text: document.body ? document.body.innerText.slice(0, 1500) : ''})
"""


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    raise SystemExit("no chromium on PATH (apt-get install chromium)")


class Tab:
    """One page of the browser, spoken to over its DevTools WebSocket."""

    def __init__(self, ws: Any) -> None:
        self.ws = ws
        self.ids = itertools.count(1)

    def call(self, method: str, params: dict[str, Any] | None = None, timeout: float = 15) -> dict[str, Any]:
        n = next(self.ids)
        self.ws.send(json.dumps({"id": n, "method": method, "params": params or {}}))
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"{method}: no answer within {timeout} s")
            message = json.loads(self.ws.recv(timeout=left))
            if message.get("id") == n:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})

    def evaluate(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True})
        return result.get("result", {}).get("value")


def launch(profile: str) -> tuple[subprocess.Popen[bytes], int]:
    """Chromium on `profile`, headless, its DevTools on a port it picks: the process and the port."""
    os.makedirs(profile, exist_ok=True)
    active = os.path.join(profile, "DevToolsActivePort")
    if os.path.exists(active):
        os.remove(active)
    process = subprocess.Popen(
        [chromium(), "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run", "--no-default-browser-check",
         "--disable-extensions", "--password-store=basic", f"--user-data-dir={profile}", "--remote-debugging-port=0",
         "--remote-allow-origins=*", "about:blank"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if os.path.exists(active):
            with open(active) as f:
                first = f.readline().strip()
            if first.isdigit():
                return process, int(first)
        if process.poll() is not None:
            raise RuntimeError(f"chromium exited ({process.returncode}) before its DevTools listened")
        time.sleep(0.1)
    process.kill()
    raise RuntimeError("chromium's DevTools did not listen within 30 s")


def stop(process: subprocess.Popen[bytes]) -> None:
    """Ends Chromium and its children (its own process group), by its PID."""
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=10)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)


def walk(url: str, profile: str, login: str, timeout: float) -> dict[str, Any]:
    process, port = launch(profile)
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as answer:
            pages = [t for t in json.load(answer) if t.get("type") == "page"]
        with connect(pages[0]["webSocketDebuggerUrl"], max_size=None, open_timeout=10) as ws:
            return drive(Tab(ws), url, login, timeout)
    finally:
        stop(process)


def drive(tab: Tab, url: str, login: str, timeout: float) -> dict[str, Any]:
    """Opens `url` in `tab` and does what a person does there until a page of mcpgate's says what happened."""
    tab.call("Page.enable")
    tab.call("Page.navigate", {"url": url})
    act = ACT.replace("LOGIN", json.dumps(login))
    seen: list[str] = []
    deadline = time.monotonic() + timeout
    page: dict[str, Any] = {}
    while time.monotonic() < deadline:
        time.sleep(0.3)
        page = json.loads(tab.evaluate(LOOK) or "{}")
        origin = "/".join(str(page.get("url", "")).split("/")[:3])
        if origin and (not seen or seen[-1] != origin):
            seen.append(origin)
        if page.get("ready") != "complete":
            continue
        did = tab.evaluate(act) or {}
        if did.get("done"):
            return {"ok": True, **{k: page.get(k) for k in ("url", "title", "text")}, "origins": seen}
        if did.get("token_form"):
            return {"ok": False, "why": "mcpgate asks for a token", **page, "origins": seen}
    return {"ok": False, "why": f"no page of mcpgate's within {timeout} s", **page, "origins": seen}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("--profile", required=True)
    parser.add_argument("--login", default="alice")
    parser.add_argument("--timeout", type=float, default=60)
    args = parser.parse_args()
    result = walk(args.url, args.profile, args.login, args.timeout)
    print(json.dumps(result), flush=True)
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
