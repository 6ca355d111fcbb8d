#!/bin/sh
# automaton-min: one self-contained executable. This script is its head; the rest of the file is a gzip'd tar of
# the program (PyInstaller's one-folder bundle). The first start of a version unpacks it, once, into a cache folder
# on disk; every start after that checks the unpacked copy and runs it (README: The binary). build/pack.py writes
# the two values below: the archive's sha256 and this head's length in bytes (the archive starts at byte HEAD+1).
# A start runs one program besides this shell and the unpacked one (find): each costs, on a Pi and more so under
# emulation.
ID=@ID@
HEAD=@HEAD@
set -u
self=$0
case $self in /*) ;; *) self=$PWD/$self ;; esac
AUTOMATON_ONEFILE=$self AUTOMATON_ONEFILE_ID=$ID
export AUTOMATON_ONEFILE AUTOMATON_ONEFILE_ID
name=${ID%"${ID#????????????????}"}
nl='
'
fail() {
  printf 'automaton-min: %s\n' "$1" >&2
  exit 1
}

uid=
while read -r key real_uid uid rest; do  # this shell's effective uid, without running id(1)
  [ "$key" = Uid: ] && break
done < /proc/self/status
[ -n "$uid" ] || fail "cannot read /proc/self/status: it needs /proc mounted"

# What a check sees of the unpacked copy, one line a file: its path, size, mode, owner, inode and change time
# (ctime, which only the kernel sets). Anything replaced, added, removed, resized, rewritten or chmod'ed since it
# was sealed changes it. With more folders after the copy's: each that anyone but this user or root owns, or that
# others may write and is not sticky (as /tmp is), is a line starting with "!".
look() {
  copy=$1
  shift
  find "$copy" "$@" \( -path "$copy" -o -path "$copy/*" \) -printf ':%P %s %m %U %i %C@\n' \
    -o -prune \( \( ! -user 0 ! -user "$uid" \) -o \( -perm /022 ! -perm -1000 \) \) -printf '!%p\n' 2>/dev/null
}

# The cache folder $1 (it exists) and every folder above it, by their real paths; sets $real to the first.
above() {
  real=$(cd "$1" 2>/dev/null && pwd -P) && [ -n "$real" ] || return 1
  case $real in *[][*?\\]*) return 1 ;; esac  # no pattern characters: look() matches paths with -path
  folders=$real
  up=$real
  while [ -n "$up" ]; do
    up=${up%/*}
    folders="$folders$nl${up:-/}"
  done
}

# Unpack into a private folder beside $1, check the archive's sha256 first, seal it, and rename it into place. Both
# reads are of one file (fd 3, opened once): a binary renamed over this one meanwhile is not half read.
unpack() {
  cache=${1%/*}
  exec 3<"$self" || return 1
  fresh=$(mktemp -d "$cache/.unpacking.XXXXXX") || { exec 3<&-; return 1; }
  got=$(tail -c +$((HEAD + 1)) "/proc/$$/fd/3" | sha256sum) || got=
  if [ "${got%% *}" != "$ID" ]; then
    rm -rf "$fresh"
    fail "$self is damaged (its archive does not match its sha256); download it again"
  fi
  mkdir -m 700 "$fresh/bundle" &&
    tail -c +$((HEAD + 1)) "/proc/$$/fd/3" | gzip -dc | tar -x --no-same-owner -C "$fresh/bundle" &&
    { printf '%s\n' "$ID"; look "$fresh/bundle"; } > "$fresh/seal" || { exec 3<&-; rm -rf "$fresh"; return 1; }
  exec 3<&-
  if sound "$1"; then  # another start unpacked it meanwhile
    rm -rf "$fresh"
    return 0
  fi
  if [ -e "$1" ] || [ -L "$1" ]; then  # a copy that failed its check: set aside, then removed
    mv -T "$1" "$cache/.stale.$$" 2>/dev/null && rm -rf "$cache/.stale.$$"
  fi
  if ! mv -T "$fresh" "$1" 2>/dev/null; then  # another start got there first: its copy is checked as any is
    rm -rf "$fresh"
  fi
  # Keep this version and the newest other one (an update's previous binary), remove older ones that no running
  # program holds (each holds a shared lock on its copy's seal), and what starts killed while unpacking left over
  # an hour ago.
  ls -dt "$cache"/*/ 2>/dev/null | grep -vxF "$1/" | tail -n +2 | while IFS= read -r old; do
    flock -n -x "${old}seal" true 2>/dev/null && rm -rf "$old"
  done
  find "$cache" -maxdepth 1 -name '.unpacking.*' -mmin +60 -exec rm -rf {} + 2>/dev/null
  return 0
}

# The copy in $1 is this version's and as it was sealed, and no one but this user and root can change the way
# to it (the folders in $folders, which above() sets).
sound() {
  [ -d "$1/bundle" ] && [ ! -L "$1" ] && [ -O "$1" ] && [ -f "$1/seal" ] && [ -O "$1/seal" ] || return 1
  sealed=
  while IFS= read -r line; do
    sealed=$sealed$line$nl
  done < "$1/seal" || return 1
  seen=$(IFS=$nl; look "$1/bundle" $folders)
  [ "$sealed" = "$ID$nl$seen$nl" ]
}

# No one but this user and root can change the way to the cache folder (the folders in $folders).
safe_way() {
  case $nl$(IFS=$nl; look "$real/$name/bundle" $folders) in
    *"$nl!"*) return 1 ;;
  esac
}

# Where: AUTOMATON_UNPACK_DIR, else the unit's CacheDirectory=, else the user's cache folder; then, where those
# cannot be used or are mounted noexec, the user's runtime folder and the temp folder. Each a folder this user
# owns, made 0700 when it is made, in folders only this user and root can change.
user_cache=${XDG_CACHE_HOME:-${HOME:+$HOME/.cache}}
for cache in "${AUTOMATON_UNPACK_DIR:+$AUTOMATON_UNPACK_DIR/automaton-min}" "${CACHE_DIRECTORY:-}" \
    "${user_cache:+$user_cache/automaton-min}" "${XDG_RUNTIME_DIR:+$XDG_RUNTIME_DIR/automaton-min}" \
    "${TMPDIR:-/tmp}/automaton-min-$uid"; do
  case $cache in /*) ;; *) continue ;; esac
  if [ ! -L "$cache" ] && { [ -d "$cache" ] || mkdir -p -m 700 "$cache" 2>/dev/null; } && above "$cache" &&
      [ -O "$real" ]; then
    dir=$real/$name
    if sound "$dir" || { safe_way && unpack "$dir" && sound "$dir"; }; then
      # -x is false on a noexec mount (access(2) checks the mount): try the next place
      [ -x "$dir/bundle/automaton-min" ] && exec "$dir/bundle/automaton-min" "$@"
    fi
  fi
  [ -n "${AUTOMATON_UNPACK_DIR:-}" ] && fail "cannot unpack into AUTOMATON_UNPACK_DIR=$AUTOMATON_UNPACK_DIR: \
it must be a folder this user owns, can write, and may run programs from, in folders only it and root can change"
done
fail "cannot unpack itself: no folder this user owns, can write and may run programs from (tried the cache and \
temp folders); set AUTOMATON_UNPACK_DIR to one"
