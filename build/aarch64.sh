#!/usr/bin/env bash
# Build dist/automaton-min-linux-aarch64 (the Raspberry Pi binary) on an x86_64 Debian machine, and smoke-test it,
# all under emulation: qemu-user-static through binfmt_misc and an arm64 Debian 12 root made by debootstrap (cached in
# build/aarch64/root). The root runs the same build/build.sh on HEAD (committed files only), so PyInstaller's aarch64
# bootloader and aarch64 wheels go in. Opt-in, not CI: 11 minutes on first use here (README). Run as root:
#   sudo nice -n 10 bash build/aarch64.sh
# Passed to build.sh when set: AUTOMATON_BUILD_VERSION, AUTOMATON_RELEASE_URL, AUTOMATON_RELEASE_KEY (a file: copied
# into the root), SOURCE_DATE_EPOCH (default: HEAD's time). DEBIAN_MIRROR chooses Debian's mirror.
set -euo pipefail
[ "$(id -u)" = 0 ] || { echo "aarch64.sh: needs root (debootstrap, chroot, binfmt_misc): sudo bash $0" >&2; exit 1; }
# A mount namespace of its own: the root's /proc, /sys and /dev mounts vanish when the script ends, however it ends.
[ -n "${AARCH64_UNSHARED:-}" ] || exec env AARCH64_UNSHARED=1 unshare --mount --propagation private bash "$0" "$@"
key=${AUTOMATON_RELEASE_KEY:+$(realpath "$AUTOMATON_RELEASE_KEY")}
[ -z "$key" ] || [ -f "$key" ] || { echo "aarch64.sh: AUTOMATON_RELEASE_KEY=$key is not a file" >&2; exit 1; }
cd "$(dirname "$0")/.."

# 1. debootstrap; qemu-user 9 or newer (older ones refuse prctl(PR_SET_CHILD_SUBREAPER), which `run` needs: Debian
# 12 has 7.2, its backports 10); binfmt_misc's aarch64 handler, registered afresh from qemu's binfmt.d file (its F
# flag opens the interpreter now, so it runs inside a chroot, and an older qemu's stays in use until then)
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
apt_install() {
  echo "+ apt-get install $*"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@"
}
qemu_major() { qemu-aarch64-static --version 2>/dev/null | sed -n '1s/.*version \([0-9]*\).*/\1/p' | grep . || echo 0; }
command -v debootstrap >/dev/null || apt_install debootstrap
if [ "$(qemu_major)" -lt 9 ]; then
  from=()
  if grep -q '^VERSION_CODENAME=bookworm$' /etc/os-release; then
    echo "deb $mirror bookworm-backports main" > /etc/apt/sources.list.d/bookworm-backports.list
    from=(-t bookworm-backports)
  fi
  apt_install "${from[@]}" qemu-user-static qemu-user-binfmt
fi
[ "$(qemu_major)" -ge 9 ] || { echo "aarch64.sh: qemu-aarch64-static is older than 9; install a newer" >&2; exit 1; }
handler=/proc/sys/fs/binfmt_misc/qemu-aarch64
mountpoint -q /proc/sys/fs/binfmt_misc || mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc
[ ! -e "$handler" ] || echo -1 > "$handler"
grep -v '^#' /usr/lib/binfmt.d/qemu-aarch64.conf > /proc/sys/fs/binfmt_misc/register
echo "$(qemu-aarch64-static --version | head -1); binfmt: $(tr '\n' ' ' < "$handler")"

# 2. the arm64 Debian 12 root, made once (the second stage runs arm64 dpkg under qemu)
root=$PWD/build/aarch64/root
if [ ! -e "$root/.ready" ]; then
  rm -rf "$root" && mkdir -p "$root"  # what an interrupted first run left
  echo "+ debootstrap --arch=arm64 bookworm $root"
  debootstrap --arch=arm64 --variant=minbase --foreign \
    --include=python3,python3-venv,python3-dev,binutils,gcc,ca-certificates bookworm "$root" \
    "$mirror"
  chroot "$root" /debootstrap/debootstrap --second-stage
  touch "$root/.ready"
fi
mount -t proc proc "$root/proc"
mount --rbind /sys "$root/sys"
mount --rbind /dev "$root/dev"
cp /etc/resolv.conf "$root/etc/resolv.conf"
# the root trusts the certificate authorities this machine added (a TLS-inspecting proxy's, say); pip is told to
# use the system's bundle (build_env below), not its own
cas=/usr/local/share/ca-certificates
[ ! -d $cas ] || cp -r $cas/. "$root$cas"
chroot "$root" update-ca-certificates >/dev/null

# 3. HEAD into the root (its build venv kept: pip under emulation is slow), and build/build.sh there
work=$root/automaton
src=$work/src
mkdir -p "$work"
[ ! -d "$src/build/.venv" ] || mv "$src/build/.venv" "$work/venv"
rm -rf "$src" && mkdir -p "$src/build"
[ ! -d "$work/venv" ] || mv "$work/venv" "$src/build/.venv"
git archive HEAD | tar -x -C "$src"
git diff --quiet HEAD || echo "aarch64.sh: building HEAD ($(git rev-parse --short HEAD)), not the uncommitted changes"
build_env=(PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 PIP_CERT=/etc/ssl/certs/ca-certificates.crt
           "SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct)}")
for name in AUTOMATON_BUILD_VERSION AUTOMATON_RELEASE_URL; do
  [ -z "${!name:-}" ] || build_env+=("$name=${!name}")
done
rm -f "$work/release-key"
if [ -n "$key" ]; then
  install -m 0644 "$key" "$work/release-key"
  build_env+=(AUTOMATON_RELEASE_KEY=/automaton/release-key)
fi
echo "+ (arm64 root) bash build/build.sh"
started=$(date +%s)
chroot "$root" /usr/bin/env -i "${build_env[@]}" bash -c 'cd /automaton/src && bash build/build.sh'
build_s=$(( $(date +%s) - started ))
binary=dist/automaton-min-linux-aarch64
mkdir -p dist && install -m 0755 "$src/dist/automaton-min" "$binary"
# the one file is a sh head and an archive; the program in it is the bundle's executable
program=$src/build/out/bundle/automaton-min/automaton-min
[ "$(od -An -tx1 -j18 -N2 "$program" | tr -d ' ')" = b700 ] || { echo "aarch64.sh: $program is not aarch64" >&2; exit 1; }
echo "+ pycryptodome's libraries in it:"
(cd "$src/build/out/bundle/automaton-min/_internal" && find Crypto -name '*.so' | sort)

# 4. smoke test: the binary in the root, a bare environment, a new home, a scripted model server on loopback
install -m 0755 "$binary" "$work/automaton-min"
rm -rf "${work:?}/home" && mkdir -m 0700 "$work/home"
# chroot and env exec, so "${in_root[@]}" PROGRAM & leaves PROGRAM's pid in $!
in_root=(chroot "$root" /usr/bin/env -i PATH=/usr/bin:/bin HOME=/automaton/home LANG=C.UTF-8)
results=()
smoke() {
  echo "+ automaton-min $*"
  "${in_root[@]}" /automaton/automaton-min "$@"
  results+=("ok   automaton-min $*")
}
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true' EXIT
# the stand-in of tests/standins: "OK" to doctor's question, a sleep tool call to a turn (a request with tools)
"${in_root[@]}" PYTHONPATH=/automaton/src/tests /automaton/src/build/.venv/bin/python -c '
import json, time
from standins.model_servers import OpenAIServer, openai_answer
sleep = openai_answer("Nothing to do yet.", [("call_0", "sleep", json.dumps({"duration_seconds": 3600}))])
with OpenAIServer(mode="llamacpp", models=[{"id": "scripted-model", "object": "model"}]) as model:
    model.script(*[lambda body: sleep if body.get("tools") else openai_answer("OK")] * 20)
    print(model.url, flush=True)
    time.sleep(86400)
' > "$work/model.url" &
pids+=($!)
for _ in $(seq 120); do [ -s "$work/model.url" ] && break; sleep 1; done
model_url=$(cat "$work/model.url")
[ -n "$model_url" ] || { echo "aarch64.sh: the model server did not start" >&2; exit 1; }

smoke --version
smoke setup --name pi --genesis-prompt "Smoke-test the aarch64 binary." \
  --creator-address 0x1234567890AbcdEF1234567890aBcdef12345678 \
  --openai-base-url "$model_url" --inference-model scripted-model --yes
# loopback only: no chain node, no relay; whole-prompt turns, one model answer each
smoke config set rpcUrl http://127.0.0.1:9
smoke config set socialRelayUrl '""'
smoke config set actionMode direct
smoke status
# doctor: every check must pass but confinement's, which emulation may not provide (qemu-user and Landlock, seccomp)
echo "+ automaton-min doctor"
"${in_root[@]}" /automaton/automaton-min doctor || true
"${in_root[@]}" /automaton/automaton-min doctor --json > "$work/doctor.json" || true
failed=$("${in_root[@]}" python3 -c '
import json
report = json.load(open("/automaton/doctor.json"))
print(" ".join(c["name"].replace(" ", "-") for c in report["checks"] if not c["ok"]))')
for name in $failed; do
  case $name in
    confinement|unix-sockets|processes|limits) ;;
    *) echo "aarch64.sh: doctor: $name failed" >&2; exit 1;;
  esac
done
results+=("ok   automaton-min doctor (failed, allowed under emulation: ${failed:-none})")

echo "+ automaton-min run (SIGTERM once asleep)"
"${in_root[@]}" /automaton/automaton-min run > "$work/run.log" 2>&1 &
run_pid=$!
pids+=("$run_pid")
for _ in $(seq 600); do
  grep -q '"msg":"asleep"' "$work/run.log" && break
  kill -0 "$run_pid" 2>/dev/null || break
  sleep 1
done
grep -q '"msg":"asleep"' "$work/run.log" || { cat "$work/run.log"; echo "aarch64.sh: the run never slept" >&2; exit 1; }
kill -TERM "$run_pid"
code=0 && wait "$run_pid" || code=$?
cat "$work/run.log"
[ "$code" = 0 ] || { echo "aarch64.sh: run exited $code after SIGTERM, not 0" >&2; exit 1; }
if ! grep -q '"msg":"tool sleep ok' "$work/run.log" || grep -q Traceback "$work/run.log"; then
  echo "aarch64.sh: the run's turn did not call sleep, or a traceback was logged" >&2; exit 1
fi
results+=("ok   automaton-min run: one turn (the sleep tool), asleep, SIGTERM, exit 0")
smoke status

# 5. the summary
size=$(stat -c %s "$binary")
echo
mib=$(awk -v s="$size" 'BEGIN {printf "%.1f", s / 1048576}')
echo "built $binary in $build_s s under emulation: $size bytes ($mib MiB); the whole script took $SECONDS s"
echo "sha256 $(sha256sum "$binary" | cut -d' ' -f1)"
printf '%s\n' "${results[@]}"
