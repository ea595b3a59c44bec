#!/usr/bin/env bash
# Proves the README's two commands on a fresh machine. Builds a minimal Debian or Ubuntu root
# with debootstrap (variant minbase: no compiler, no git, nothing of ParaLab's), copies a clean
# clone of this repository's HEAD into it, and runs, inside it with chroot and as its root user,
#   1. scripts/quickstart.sh   (the main job, set-up included)
#   2. scripts/test.sh         (the tests, set-up included)
# with nothing installed but what those scripts install. Prints what each took and whether it
# passed; exits 1 if either failed. Uncommitted changes are not part of the check (a warning
# says so). Needs root, debootstrap and the distribution's mirror; about 15 minutes on 2 cores.
#
# Usage: scripts/fresh-machine-check.sh [--root DIR] [--keep] [--suite SUITE] [--mirror URL]
#                                       [--keyring FILE]
#   --root DIR      where to build the root (default: a new directory under /var/tmp); must not
#                   exist
#   --keep          keep the root afterwards (logs are kept either way, beside it)
#   --suite NAME    bookworm (Debian 12, the default), trixie (Debian 13), or an Ubuntu release:
#                   jammy (22.04), noble (24.04)
#   --mirror URL    the archive (default http://deb.debian.org/debian, or
#                   http://archive.ubuntu.com/ubuntu for Ubuntu)
#   --keyring FILE  the archive's signing keys for debootstrap (default: debootstrap's own for
#                   Debian, /usr/share/keyrings/ubuntu-archive-keyring.gpg for Ubuntu)
# An Ubuntu root gets the sources a standard install has (main and universe; the release,
# -updates and -security), since ParaLab's packages are in universe there.
# Run it, for each of the four releases above, whenever the dependency list, the build files or
# the oneDNN calls change; CI (Debian 12 only) does not run it.
set -euo pipefail
case "${1:-}" in -h | --help) sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0 ;; esac  # the comment above
start=$PWD  # a relative --root or --keyring is read from here, where the command was typed
cd "$(dirname "$0")/.."
repo=$PWD
root="" keep=0 mirror="" suite=bookworm keyring=""
say() { echo "fresh-machine-check: $*"; }
die() { echo "fresh-machine-check.sh: $*" >&2; exit 2; }
value() { [[ -n $2 && $2 != -* ]] || die "$1 needs $3"; }  # value OPTION "${2-}" WHAT
here() { [[ $1 == /* ]] && echo "$1" || echo "$start/$1"; }
while (($#)); do
  case "$1" in
    -h | --help) sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0 ;;
    --root) value "$1" "${2-}" "a directory"; root=$(here "$2"); shift 2 ;;
    --keep) keep=1; shift ;;
    --mirror) value "$1" "${2-}" "a URL"; mirror=$2; shift 2 ;;
    --suite) value "$1" "${2-}" "a name"; suite=$2; shift 2 ;;
    --keyring) value "$1" "${2-}" "a file"; keyring=$(here "$2"); shift 2 ;;
    *) die "unknown option '$1' (known: --root, --keep, --mirror, --suite, --keyring)" ;;
  esac
done
case "$suite" in
  focal | jammy | noble | oracular | plucky | questing) distro=Ubuntu ;;
  bullseye | bookworm | trixie | forky | sid) distro=Debian ;;
  *) die "--suite '$suite': not a release this script knows (Debian: bullseye, bookworm, trixie, forky, sid; Ubuntu: focal, jammy, noble, oracular, plucky, questing)" ;;
esac
if [[ $distro == Ubuntu ]]; then
  mirror=${mirror:-http://archive.ubuntu.com/ubuntu}
  keyring=${keyring:-/usr/share/keyrings/ubuntu-archive-keyring.gpg}
  [[ -r $keyring ]] || die "no Ubuntu archive keyring at $keyring: install ubuntu-keyring, or give --keyring FILE (ubuntu-archive-keyring.gpg from the ubuntu-keyring package)"
else
  mirror=${mirror:-http://deb.debian.org/debian}
fi
[[ -z $keyring || -r $keyring ]] || die "--keyring $keyring: cannot read it"
[[ $(id -u) -eq 0 ]] || die "needs root (debootstrap, mount and chroot)"
command -v debootstrap >/dev/null || die "debootstrap is not installed (apt-get install debootstrap)"
git -C "$repo" rev-parse --verify -q HEAD >/dev/null || die "$repo is not a git checkout with a commit"
if [[ -n $(git -C "$repo" status --porcelain --untracked-files=no) ]]; then
  say "warning: uncommitted changes in $repo are not part of this check (it clones HEAD)"
fi
if [[ -z $root ]]; then
  root=$(mktemp -d /var/tmp/paralab-fresh.XXXXXX)
  rmdir "$root"
fi
[[ ! -e $root ]] || die "$root exists; give a new directory"
logs=$root.logs
mkdir -p "$logs"

mounted=()
cleanup() {
  local i
  for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do umount -l "${mounted[i]}" 2>/dev/null || true; done
  if ((keep == 0)) && [[ -d $root ]]; then rm -rf --one-file-system "$root"; fi
}
trap cleanup EXIT

t0=$(date +%s)
bootstrap=(debootstrap --variant=minbase)
[[ -z $keyring ]] || bootstrap+=(--keyring="$keyring")
[[ $distro == Ubuntu ]] && bootstrap+=(--components=main,universe)
bootstrap+=("$suite" "$root" "$mirror")
# debootstrap knows newer Ubuntu releases by the script all of them share.
scripts=/usr/share/debootstrap/scripts
[[ $distro == Ubuntu && ! -e $scripts/$suite && -e $scripts/gutsy ]] && bootstrap+=("$scripts/gutsy")
say "debootstrap $distro $suite (minbase) into $root from $mirror"
if ! "${bootstrap[@]}" > "$logs/debootstrap.log" 2>&1; then
  tail -n 20 "$logs/debootstrap.log" >&2
  die "debootstrap failed (log: $logs/debootstrap.log)"
fi
say "root ready in $(($(date +%s) - t0)) s"

commit=$(git -C "$repo" rev-parse HEAD)
git clone -q --no-local "$repo" "$root/root/paralab"
say "cloned $commit into /root/paralab"

if [[ $distro == Ubuntu ]]; then
  rm -f "$root/etc/apt/sources.list.d/ubuntu.sources"
  security=http://security.ubuntu.com/ubuntu
  [[ $mirror == http://archive.ubuntu.com/ubuntu ]] || security=$mirror
  printf 'deb %s %s main universe\n' "$mirror" "$suite" "$mirror" "$suite-updates" \
    "$security" "$suite-security" > "$root/etc/apt/sources.list"
fi
cp /etc/resolv.conf "$root/etc/resolv.conf"
for m in proc sys dev dev/pts; do mkdir -p "$root/$m"; done
mount -t proc proc "$root/proc" && mounted+=("$root/proc")
mount -t sysfs sysfs "$root/sys" && mounted+=("$root/sys")
mount --bind /dev "$root/dev" && mounted+=("$root/dev")
mount --bind /dev/pts "$root/dev/pts" && mounted+=("$root/dev/pts")

# Each command in a clean environment, as a new user would type it.
run_in_root() {
  chroot "$root" /usr/bin/env -i HOME=/root TERM=dumb LANG=C.UTF-8 \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    /bin/bash -c "cd /root/paralab && $1"
}
names=() seconds=() verdicts=()
for cmd in scripts/quickstart.sh scripts/test.sh; do
  log="$logs/$(basename "$cmd" .sh).log"
  say "running $cmd (log: $log)"
  start=$(date +%s)
  if run_in_root "$cmd" > "$log" 2>&1; then verdict=PASS; else verdict="FAIL (exit $?)"; fi
  names+=("$cmd") seconds+=($(($(date +%s) - start))) verdicts+=("$verdict")
  say "$cmd: $verdict in ${seconds[-1]} s"
  [[ $verdict == PASS ]] || tail -n 15 "$log" | sed 's/^/    /'
done

echo
echo "fresh $distro $suite root, commit $commit, $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'))"
printf '%-24s %8s  %s\n' command seconds result
status=0
for i in "${!names[@]}"; do
  printf '%-24s %8s  %s\n' "${names[i]}" "${seconds[i]}" "${verdicts[i]}"
  [[ ${verdicts[i]} == PASS ]] || status=1
done
echo "logs: $logs"
exit $status
