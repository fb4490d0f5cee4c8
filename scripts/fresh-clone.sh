#!/usr/bin/env bash
# A new user's first run, checked: a fresh clone in a directory only its owner may enter (made by
# `mktemp -d`, as root's home is one), while apt-get update fails for one foreign architecture's
# index. In that clone, as root, it runs what met both before: the tests that run mcpgate as
# nobody (tests/exhaustion.rs, tests/hazards.rs, tests/private_clone.rs), scripts/cross.sh (which
# installs its toolchain when it is missing), and the scripts that run mcpgate as another user
# (scripts/initd.sh, scripts/systemd.sh); with --ci, all of .ci/run instead.
#
# apt reads this machine's configuration and sources as they are, plus, through APT_CONFIG (so
# /etc/apt is never written): armhf as a foreign architecture, as `dpkg --add-architecture armhf`
# makes it, and an armhf-only source at a file that does not exist, whose index cannot be
# fetched; its lists go to a directory of its own, removed on exit. Before anything runs, a plain
# `apt-get update` must fail under it, or the check would prove nothing.
#
#   scripts/fresh-clone.sh [--ci] [REV]   (REV: the commit to clone, default HEAD)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
SCRIPT=fresh-clone.sh
WORK=$(mktemp -d)
LOG_DIR=$WORK
# shellcheck source=lib.sh
. scripts/lib.sh
APT_DIR=
on_exit() { rm -rf "$WORK" "$APT_DIR"; }

ci=
rev=HEAD
while (($#)); do
  case "$1" in
    --ci) ci=yes; shift ;;
    -*) echo "usage: scripts/fresh-clone.sh [--ci] [REV]" >&2; exit 2 ;;
    *) rev=$1; shift ;;
  esac
done
[[ $EUID == 0 ]] || fail "needs root: CI runs as root, and the checks it runs need it"
step() { printf '\n== fresh-clone.sh: %s\n' "$*"; }
began=$SECONDS

step "a clone of $(git rev-parse --short "$rev") in $WORK (mode $(stat -c %a "$WORK"))"
[[ $(stat -c %a "$WORK") == 700 ]] || fail "mktemp -d made $WORK with mode $(stat -c %a "$WORK"), not 700"
git clone --quiet --no-checkout "$ROOT" "$WORK/clone"
git -C "$WORK/clone" checkout --quiet --detach "$(git rev-parse "$rev")"
CLONE=$WORK/clone

step "apt: this machine's sources, armhf added, and an armhf index that cannot be fetched"
# Its own directory, which apt's download user (_apt) may enter.
APT_DIR=$(mktemp -d /tmp/mcpgate-apt.XXXXXX)
chmod 0755 "$APT_DIR"
mkdir -p "$APT_DIR/sources.list.d" "$APT_DIR/lists/partial" "$APT_DIR/cache"
[[ -f /etc/apt/sources.list ]] && cp /etc/apt/sources.list "$APT_DIR/"
for f in /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
  [[ -f $f ]] && cp "$f" "$APT_DIR/sources.list.d/"
done
cat >"$APT_DIR/sources.list.d/armhf-out-of-step.sources" <<EOF
Types: deb
URIs: file:$APT_DIR/no-such-mirror
Suites: bookworm-security
Components: main
Architectures: armhf
Trusted: yes
EOF
native=$(dpkg --print-architecture)
cat >"$APT_DIR/apt.conf" <<EOF
Dir::Etc::sourcelist "$APT_DIR/sources.list";
Dir::Etc::sourceparts "$APT_DIR/sources.list.d";
Dir::State::lists "$APT_DIR/lists/";
Dir::Cache "$APT_DIR/cache/";
Dir::Cache::archives "/var/cache/apt/archives/";
APT::Architectures { "$native"; "armhf"; };
EOF
export APT_CONFIG=$APT_DIR/apt.conf
code=0
mkdir -p "$APT_DIR/probe-lists/partial"
timeout 600 apt-get update -q -o Dir::State::lists="$APT_DIR/probe-lists/" >"$WORK/plain-update.log" 2>&1 || code=$?
((code != 0)) || fail "a plain apt-get update succeeded with the broken armhf index: this check would prove nothing"
rm -rf "$APT_DIR/probe-lists"
echo "  a plain apt-get update (what the scripts ran before) exits $code:"
apt_failed_indexes "$WORK/plain-update.log" | sed 's/^/    /'
had=$({ dpkg-query -W -f='${Status} ${Package} ${Version}\n' rustc-web gcc-aarch64-linux-gnu qemu-user-static 2>/dev/null ||
  true; } | awk '$3 == "installed" {printf "%s %s; ", $4, $5}')
echo "  the ARM toolchain on this machine before the run: ${had:-none of it}"

cd "$CLONE"
if [[ -n $ci ]]; then
  step ".ci/run in the clone"
  .ci/run
else
  step "the tests that run mcpgate as nobody"
  cargo test --locked --quiet --test exhaustion --test hazards --test private_clone -- --include-ignored
  step "scripts/cross.sh"
  scripts/cross.sh
  step "scripts/initd.sh"
  scripts/initd.sh
  step "scripts/systemd.sh"
  scripts/systemd.sh
fi
echo
echo "fresh-clone.sh: passed in a clone in a 0700 directory, with an armhf index failing, in $((SECONDS - began)) s"
