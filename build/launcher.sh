#!/bin/sh
# automaton-min: one self-contained executable. This script is its head; the rest of the file is a gzip'd tar of
# the program (PyInstaller's one-folder bundle). The first start of a version unpacks it, once, into a cache folder
# on disk; every start after that checks the unpacked copy and runs it (README: The binary). build/pack.py writes
# the two values below: the archive's sha256 and this head's length in bytes (the archive starts at byte HEAD+1).
ID=@ID@
HEAD=@HEAD@
set -u
self=$0
case $self in /*) ;; *) self=$PWD/$self ;; esac
AUTOMATON_ONEFILE=$self AUTOMATON_ONEFILE_ID=$ID
export AUTOMATON_ONEFILE AUTOMATON_ONEFILE_ID
name=$(printf %.16s "$ID")

fail() {
  printf 'automaton-min: %s\n' "$1" >&2
  exit 1
}

# What a check sees of the unpacked copy: each file's path, size, mode, owner, inode and change time (ctime, which
# only the kernel sets). Anything replaced, added, removed, resized, rewritten or chmod'ed since it was sealed
# changes it.
fingerprint() {
  find "$1/bundle" -printf '%P %s %m %U %i %C@\n' 2>/dev/null | cksum
}

# The unpacked copy in $1 is this version's, whole, and still as it was sealed.
sound() {
  [ -d "$1/bundle" ] && [ ! -L "$1" ] && [ -O "$1" ] && [ -f "$1/seal" ] && [ -O "$1/seal" ] || return 1
  read -r sealed < "$1/seal" || return 1
  [ "$sealed" = "$ID $(fingerprint "$1")" ]
}

# Unpack into a private folder beside $1, check the archive's sha256 first, seal it, and rename it into place.
unpack() {
  cache=${1%/*}
  [ ! -L "$cache" ] && mkdir -p "$cache" 2>/dev/null && chmod 700 "$cache" && [ -O "$cache" ] || return 1
  fresh=$(mktemp -d "$cache/.unpacking.XXXXXX") || return 1
  got=$(tail -c +$((HEAD + 1)) "$self" | sha256sum) || got=
  if [ "${got%% *}" != "$ID" ]; then
    rm -rf "$fresh"
    fail "$self is damaged (its archive does not match its sha256); download it again"
  fi
  mkdir -m 700 "$fresh/bundle" &&
    tail -c +$((HEAD + 1)) "$self" | gzip -dc | tar -x --no-same-owner -C "$fresh/bundle" &&
    printf '%s %s\n' "$ID" "$(fingerprint "$fresh")" > "$fresh/seal" || { rm -rf "$fresh"; return 1; }
  if sound "$1"; then  # another start unpacked it meanwhile
    rm -rf "$fresh"
    return 0
  fi
  if [ -e "$1" ] || [ -L "$1" ]; then  # a copy that failed its check: set aside, then removed
    mv -T "$1" "$cache/.stale.$$" 2>/dev/null && rm -rf "$cache/.stale.$$"
  fi
  if ! mv -T "$fresh" "$1" 2>/dev/null; then  # another start got there first: use its copy
    rm -rf "$fresh"
    sound "$1" || return 1
  fi
  # Keep this version and the newest other one (an update's previous binary), remove older ones, and what starts
  # killed while unpacking left over an hour ago.
  ls -dt "$cache"/*/ 2>/dev/null | grep -vxF "$1/" | tail -n +2 | while IFS= read -r old; do rm -rf "$old"; done
  find "$cache" -maxdepth 1 -name '.unpacking.*' -mmin +60 -exec rm -rf {} + 2>/dev/null
  return 0
}

# Where: AUTOMATON_UNPACK_DIR, else the unit's CacheDirectory=, else the user's cache folder; then, where those
# cannot be written or are mounted noexec, the user's runtime folder and the temp folder. A folder of its own in
# each but the unit's, which systemd made for it alone: only that one is chmod'ed 700.
for cache in "${AUTOMATON_UNPACK_DIR:+$AUTOMATON_UNPACK_DIR/automaton-min}" "${CACHE_DIRECTORY:-}" \
    "${XDG_CACHE_HOME:-${HOME:-/nonexistent}/.cache}/automaton-min" "${XDG_RUNTIME_DIR:-/nonexistent}/automaton-min" \
    temp; do
  [ "$cache" = temp ] && cache=${TMPDIR:-/tmp}/automaton-min-$(id -u)
  case $cache in /*) ;; *) continue ;; esac
  dir=$cache/$name
  if sound "$dir" || unpack "$dir"; then
    # -x is false on a noexec mount (access(2) checks the mount): try the next place
    [ -x "$dir/bundle/automaton-min" ] && exec "$dir/bundle/automaton-min" "$@"
  fi
  [ -n "${AUTOMATON_UNPACK_DIR:-}" ] && fail "cannot unpack into AUTOMATON_UNPACK_DIR=$AUTOMATON_UNPACK_DIR: \
it must be a folder this user owns, can write, and may run programs from"
done
fail "cannot unpack itself: no folder this user owns, can write and may run programs from (tried the cache and \
temp folders); set AUTOMATON_UNPACK_DIR to one"
