#!/usr/bin/env bash
# The release build of mcpgate with the code it runs at start and at rest linked first, for a
# small x86_64 host: the kernel maps the 64 KiB around every page of code a process touches
# (fault-around), and start-up touches code all over the binary, so most of mcpgate's RSS at
# rest is code it ran once or never (docs/PROFILE.md, "A board build: small, at some CPU").
#
#   scripts/ordered.sh [OUT]     OUT: the stripped binary (default target/ordered/mcpgate)
#
# 1. The release build, not stripped (its symbols name the functions), in target/ordered/.
# 2. It runs under valgrind's callgrind in front of two fixture servers (bench.sh's footprint
#    configuration) for REST seconds (3), then SIGINT: every function of mcpgate that ran, from
#    start to shutdown, in address order, is lld's --symbol-ordering-file
#    (target/ordered/startup.order).
# 3. The same build linked again with it (`cargo rustc`: the same code, so the same names), and
#    stripped to OUT.
# 4. Both binaries at rest in the same configuration, 3 starts each, interleaved: their VmRSS
#    1.2 s after start is printed, and the script fails if the ordered one is not smaller.
#
# The names carry hashes of the compiler and of Cargo.lock: the file is made from each build,
# never kept. lld only (rustup's default linker on x86_64 since Rust 1.90: the binary's .comment
# says `Linker: LLD`); another linker stops the script, saying so. Installs Debian's valgrind
# when missing. Everything listens on 127.0.0.1; every process started is stopped by its PID.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
SCRIPT=ordered.sh
DIR=$ROOT/target/ordered
OUT=${1:-$DIR/mcpgate}
REST=${REST:-3}
LOG_DIR=$DIR/run
mkdir -p "$LOG_DIR"
# shellcheck source=lib.sh
. scripts/lib.sh
step() { printf '\n== ordered.sh: %s\n' "$*"; }

install_debian "$LOG_DIR/apt.log" valgrind=valgrind || fail "valgrind is not installed (see $LOG_DIR/apt.log)"

# The same settings for both links, so the second has the names the first ran.
build() {
  CARGO_TARGET_DIR=$DIR CARGO_PROFILE_RELEASE_STRIP=false cargo "$@"
}
step "the release build, with symbols"
build build --locked --quiet --release -p mcpgate --bin mcpgate -p mcp-fixture --bin mcp-fixture
BIN=$DIR/release/mcpgate
readelf -p .comment "$BIN" | grep -q 'Linker: LLD' ||
  fail "$BIN was not linked by lld (readelf -p .comment), which alone takes a symbol ordering file"
cp "$BIN" "$DIR/mcpgate-unordered"
strip "$DIR/mcpgate-unordered"

step "two fixtures, and the configuration"
serve fixture-a "$DIR/release/mcp-fixture" --listen 127.0.0.1:0 --name a || fail "fixture a did not start"
FIX_A=$ADDR
serve fixture-b "$DIR/release/mcp-fixture" --listen 127.0.0.1:0 --name b || fail "fixture b did not start"
FIX_B=$ADDR
CONFIG=$LOG_DIR/config.json
printf '{"listen": "127.0.0.1:0", "session_idle_timeout_secs": 3600, "max_connections": 4096, "max_sessions": 4096,
 "mcpServers": {"a": {"url": "http://%s/mcp", "prefix": ""}, "b": {"url": "http://%s/mcp", "prefix": ""}}}\n' \
  "$FIX_A" "$FIX_B" >"$CONFIG"

step "what runs: start, $REST s at rest, SIGINT, under callgrind"
CALLS=$LOG_DIR/callgrind.out
rm -f "$CALLS"
serve recorded valgrind --tool=callgrind --demangle=no --callgrind-out-file="$CALLS" "$BIN" --config "$CONFIG" ||
  fail "mcpgate did not start under valgrind (see $LOG_DIR/recorded.err)"
RECORDED=$PID
sleep "$REST"
kill -INT "$RECORDED"
wait_for 60 "mcpgate under valgrind to exit after SIGINT" ended "$RECORDED" || fail "it did not"
[[ -s $CALLS ]] || fail "callgrind wrote nothing to $CALLS"

ORDER=$DIR/startup.order
# Callgrind names each function once, at its first `fn=(N) name` or `cfn=(N) name`; the ones
# that are mcpgate's text symbols (nm), in the order they sit in the binary.
python3 - "$CALLS" "$BIN" "$ORDER" <<'EOF'
import re, subprocess, sys
calls, binary, order = sys.argv[1:4]
ran = set()
with open(calls, errors="replace") as f:
    for line in f:
        m = re.match(r"c?fn=\(\d+\) (\S+)", line)
        if m:
            ran.add(m.group(1))
symbols = subprocess.run(["nm", "-S", "--defined-only", binary], capture_output=True, text=True, check=True).stdout
found = []
for line in symbols.splitlines():
    f = line.split()
    if len(f) == 4 and f[2] in "tTwW" and f[3] in ran:
        found.append((int(f[0], 16), int(f[1], 16), f[3]))
found.sort()
with open(order, "w") as out:
    out.writelines(name + "\n" for _, _, name in dict.fromkeys(found))
print(f"  {len(found)} functions of mcpgate ran ({sum(size for _, size, _ in found) // 1024} KiB), of {len(ran)} named")
if len(found) < 50:
    sys.exit(f"ordered.sh: only {len(found)} of mcpgate's functions found in {calls}: names do not match")
EOF

step "linked again, start-up code first"
build rustc --locked --quiet --release -p mcpgate --bin mcpgate -- \
  -C link-arg=-Wl,--symbol-ordering-file="$ORDER" -C link-arg=-Wl,--no-warn-symbol-ordering
mkdir -p "$(dirname "$OUT")"
cp "$BIN" "$OUT"
strip "$OUT"

step "RSS at rest (KiB, 1.2 s after start), 3 starts each, interleaved"
# glibc held to two malloc arenas and no cached thread stacks, as bench.sh runs mcpgate.
rest_kib() {
  serve "rest-$2" env GLIBC_TUNABLES=glibc.pthread.stack_cache_size=0:glibc.malloc.arena_max=2 "$1" --config "$CONFIG" ||
    fail "$1 did not start"
  sleep 1.2
  awk '/^VmRSS:/ {print $2}' "/proc/$PID/status"
  stop "$PID"
}
plain=() ordered=()
for round in 1 2 3; do
  plain+=("$(rest_kib "$DIR/mcpgate-unordered" "plain-$round")")
  ordered+=("$(rest_kib "$OUT" "ordered-$round")")
done
echo "  release build: ${plain[*]}"
echo "  ordered:       ${ordered[*]}"
max_ordered=$(printf '%s\n' "${ordered[@]}" | sort -n | tail -1)
min_plain=$(printf '%s\n' "${plain[@]}" | sort -n | head -1)
((max_ordered < min_plain)) || fail "the ordered build is not smaller at rest (${ordered[*]} against ${plain[*]} KiB)"
echo
echo "ordered.sh: $OUT, $(stat -c %s "$OUT") bytes"
