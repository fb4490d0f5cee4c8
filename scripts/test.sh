#!/usr/bin/env bash
# The whole test suite, as CI runs it: formatting, lints (shellcheck and
# ruff for the scripts, clippy), unit and integration tests, the crate as it
# would be published, the demo end to end, the interoperability check with
# the official SDK and conformance suite (it installs pinned versions into
# .interop/), the ARM builds under qemu, the unit under a real systemd and
# the init script (docs/BOARDS.md), a short scale-out run behind HAProxy
# and nginx, and a short smoke run of the benchmark.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n== %s\n' "$*"; }
SCRIPT=test.sh
# shellcheck source=lib.sh
. scripts/lib.sh

step "cargo fmt --check"
cargo fmt --all -- --check

step "shellcheck (the scripts)"
mkdir -p .lint
install_debian .lint/apt.log shellcheck=shellcheck || fail "shellcheck is not installed (above)"
shellcheck .ci/run scripts/*.sh scripts/interop/*.sh config/mcpgate.init

# ruff, pinned (scripts/lint-requirements.txt), in a venv of its own (.lint/), for the Python of
# scripts/ (ruff.toml).
step "ruff (the scripts' Python)"
install_venv .lint/venv scripts/lint-requirements.txt
.lint/venv/bin/ruff check --no-cache scripts/

step "cargo clippy"
cargo clippy --workspace --all-targets --quiet -- -D warnings

# mcpgate's integration tests build the fixture (fixture/) on first use:
# tests/support/process.rs, fixture_bin. CI runs as root, so the tests that
# need root (`#[ignore = "needs root"]`) run here too, in the same run.
step "cargo test"
cargo test --workspace --quiet -- --include-ignored

# The crate as it would be published: mcpgate alone, with its sources, README
# and licenses (Cargo.toml's include), and it builds. Nothing is uploaded; the
# dry run reads the registry's index, so it is not --offline. The tests stay
# in the repository (they need the fixture): cargo's line for each is dropped.
step "cargo package --list, cargo publish --dry-run"
not_tests() { grep -vE '^warning: ignoring test .[a-z_]+. as .tests/[a-z_]+\.rs. is not included in the published package$' >&2; }
files=$(cargo package --list --locked --offline --package mcpgate 2> >(not_tests))
echo "$(wc -l <<<"$files") files: $(grep -c '^src/' <<<"$files") in src/, and $(grep -v '^src/' <<<"$files" | paste -sd' ')"
stray=$(grep -vxE 'src/.*\.rs|Cargo\.toml|Cargo\.toml\.orig|Cargo\.lock|README\.md|LICENSE-(MIT|APACHE)|\.cargo_vcs_info\.json' <<<"$files" || true)
if [ -n "$stray" ]; then
  echo "test.sh: the package holds files it should not:" >&2
  echo "$stray" >&2
  exit 1
fi
cargo publish --dry-run --locked --package mcpgate 2> >(not_tests)

# Where mcpgate is meant to run. Both ARM builds (Debian's toolchain, installed when missing) and
# their smoke test under qemu-user; the unit under a real systemd, PID 1 of private namespaces;
# the init script under sysvinit's and BusyBox's start-stop-daemon. docs/BOARDS.md.
step "ARM builds and their smoke test under qemu-user (scripts/cross.sh)"
scripts/cross.sh

step "the unit under a real systemd (scripts/systemd.sh)"
scripts/systemd.sh

step "the init script under sysvinit and BusyBox (scripts/initd.sh)"
scripts/initd.sh

step "metrics and the status page with promtool, Prometheus and Chromium (scripts/observe.sh)"
scripts/observe.sh

step "demo (scripts/demo.sh --once)"
scripts/demo.sh --once

step "interop (scripts/interop.sh)"
scripts/interop.sh

step "scale-out smoke run (scripts/scale.sh --smoke: 3 instances behind HAProxy and nginx, one killed)"
scripts/scale.sh --smoke

step "benchmark smoke run (scripts/bench.sh --smoke: correctness only, never timing)"
scripts/bench.sh --smoke
