#!/usr/bin/env bash
# A static mcpgate for a board (one file to copy, whatever its libc): musl, built with Debian's
# compiler alone. Debian ships no musl standard library, so it is rebuilt from Debian's own
# source of it (rust-web-src) with -Zbuild-std (RUSTC_BOOTSTRAP=1: the same compiler, its
# unstable flag allowed), and linked by zig, which carries musl's C library and start files
# (ziglang, and cargo-zigbuild to drive it, pinned in scripts/board/zig-requirements.txt, from
# PyPI: both are prebuilt wheels there, and cargo-zigbuild would take minutes to build from
# crates.io). `-C link-self-contained=no`: rustc's musl targets link their own copy of musl's
# start files by default, which Debian's rustc does not have; zig's are used instead.
# `backtrace-trace-only`: std without its symbolizer, which a stripped binary has no symbols
# for (scripts/cross.sh, STD_FEATURES).
#
#   scripts/cross-musl.sh TARGET [--no-default-features]
#       TARGET: aarch64-unknown-linux-musl or armv7-unknown-linux-musleabihf (or
#       x86_64-unknown-linux-musl, to compare the allocators natively)
#
# The binary: target/cross/TARGET/release/mcpgate. Called by scripts/cross.sh --full.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
SCRIPT=cross-musl.sh
LOG_DIR=$ROOT/.cross/run
mkdir -p "$LOG_DIR"
# shellcheck source=lib.sh
. scripts/lib.sh

target=${1:-}
shift || true
case "$target" in
  aarch64-unknown-linux-musl) zig_target=aarch64-unknown-linux-musl ;;
  armv7-unknown-linux-musleabihf) zig_target=armv7-unknown-linux-musleabihf ;;
  # Not for a board: the same libc natively, to measure musl's allocator without qemu (cross.sh --full).
  x86_64-unknown-linux-musl) zig_target=x86_64-unknown-linux-musl ;;
  *) echo "usage: scripts/cross-musl.sh aarch64-unknown-linux-musl|armv7-unknown-linux-musleabihf|x86_64-unknown-linux-musl" >&2; exit 2 ;;
esac

apt_install "$LOG_DIR/apt-src.log" rust-web-src || fail "rust-web-src is not installed (above)"
[[ -d /usr/lib/rustlib/src/rust/library/std ]] || fail "rust-web-src did not install /usr/lib/rustlib/src/rust/library"
install_venv "$ROOT/.cross/zig" scripts/board/zig-requirements.txt

# Debian's cargo and rustc, and zig from the venv (cargo-zigbuild runs `python3 -m ziglang`).
t0=$SECONDS
env -u RUSTUP_TOOLCHAIN PATH="$ROOT/.cross/zig/bin:/usr/bin:/bin" RUSTC=/usr/bin/rustc \
  CARGO_TARGET_DIR="$ROOT/target/cross" RUSTC_BOOTSTRAP=1 \
  RUSTFLAGS="-C link-self-contained=no" \
  cargo-zigbuild build --locked --quiet -p mcpgate --bin mcpgate --release \
  --target "$zig_target" -Zbuild-std=std,panic_abort -Zbuild-std-features=backtrace-trace-only "$@"
bin=$ROOT/target/cross/$target/release/mcpgate
file "$bin" 2>/dev/null || true
echo "cross-musl.sh: mcpgate for $target in $((SECONDS - t0)) s: $bin ($(stat -c %s "$bin") bytes)"
