"""The person at the browser, for scripts/interop/oauth.sh: follows an authorization URL through
the authorization server's own login and consent pages (oidc-provider's development pages, plain
HTML forms), signs in with a login name (any is taken: it becomes the token's `sub`) and approves,
over HTTP with cookies, as a browser would, until the server redirects to the client's
redirect_uri with the code. No page is imitated: the forms are the server's, read and submitted.

    python oauth_browser.py URL [--login NAME] [--follow]

Prints that final redirect URL. With --follow it also opens it (the client's own callback server,
as mcp-remote runs one) and prints its status. Used as a module by oauth_checks.py, as a command
by oauth_ts_client.mjs, and as $BROWSER (through `oauth_open.sh`) for mcp-remote.
"""

from __future__ import annotations

import argparse
import re
import sys
from urllib.parse import urljoin, urlsplit

import httpx2

MAX_STEPS = 16


def authorize(url: str, login: str = "alice") -> str:
    """The URL the authorization server finally redirects to, off its own origin."""
    origin = urlsplit(url)[:2]
    with httpx2.Client(follow_redirects=False, timeout=15) as web:
        method, target, form = "GET", url, None
        for _ in range(MAX_STEPS):
            answer = web.request(method, target, data=form)
            if answer.is_redirect:
                location = urljoin(str(answer.url), answer.headers["location"])
                if urlsplit(location)[:2] != origin:
                    return location
                method, target, form = "GET", location, None
                continue
            page = answer.text
            action = re.search(r'<form[^>]*action="([^"]+)"', page)
            prompt = re.search(r'name="prompt" value="([a-z]+)"', page)
            if answer.status_code != 200 or not action or not prompt:
                raise RuntimeError(f"HTTP {answer.status_code} at {answer.url}, no form to fill: {page[:300]}")
            fields = {"prompt": prompt.group(1)}
            if prompt.group(1) == "login":
                fields.update(login=login, password="any")
            method, target, form = "POST", urljoin(str(answer.url), action.group(1)), fields
    raise RuntimeError(f"no redirect to the client after {MAX_STEPS} steps from {url}")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("--login", default="alice")
    parser.add_argument("--follow", action="store_true")
    args = parser.parse_args()
    final = authorize(args.url, args.login)
    print(final)
    if args.follow:
        with httpx2.Client(timeout=15) as web:
            print(web.get(final).status_code)
    return 0


if __name__ == "__main__":
    sys.exit(main())
