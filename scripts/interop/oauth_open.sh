#!/usr/bin/env bash
# The browser mcp-remote opens in scripts/interop/oauth.sh ($BROWSER, which the `open` package's
# xdg-open runs on a host with no display): the person at the browser, oauth_browser.py, signs in,
# approves, and opens the redirect to mcp-remote's own callback server, as a browser would.
set -euo pipefail
exec "${VPY:?VPY: the venv python}" "$(dirname "$0")/oauth_browser.py" "$1" --follow --login "${OAUTH_LOGIN:-dave}" \
    >>"${OAUTH_BROWSER_LOG:-/dev/null}" 2>&1
