#!/usr/bin/env bash
# Build dist/automaton-min, the one-file executable, from this checkout: creates (or reuses) the build virtualenv
# build/.venv, installs the project with its `build` extra (PyInstaller, pinned) into it, runs PyInstaller with
# build/automaton-min.spec (a one-folder bundle), packs that folder behind build/launcher.sh (build/pack.py), and
# prints the binary's size and sha256.
#
# Reproducible: PYTHONHASHSEED=0 and SOURCE_DATE_EPOCH (the last commit's time unless already set), so the same
# checkout, Python and dependency versions give the same bytes. Architecture-neutral: no machine-specific flag;
# the same script builds the aarch64 binary on 64-bit Raspberry Pi OS (PyInstaller's wheel carries the bootloader
# for x86_64 and aarch64 Linux).
#
# Needs: python3 (3.11+, with venv and a shared libpython, as Debian's and pyenv's are), `strip` (binutils), and
# the network to PyPI on the first run. PYTHON=/path/to/python3 chooses the interpreter for a new build venv.
#
# Release inputs (README: Updates), baked into the binary: AUTOMATON_RELEASE_KEY names a file holding the release
# public key (64 hex digits, from `python build/release.py keygen`; without it the binary refuses every update),
# AUTOMATON_RELEASE_URL the default manifest URL, AUTOMATON_BUILD_VERSION overrides the package's version.
# AUTOMATON_DIST chooses the output directory (default dist).
set -euo pipefail
cd "$(dirname "$0")/.."

venv=build/.venv
python=${PYTHON:-python3}

command -v strip >/dev/null || { echo "build.sh: strip not found; install binutils (sudo apt install binutils)" >&2; exit 1; }
if ! "$venv/bin/python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
  echo "+ $python -m venv $venv"
  rm -rf "$venv"
  "$python" -m venv "$venv"
fi
echo "+ pip install '.[build]' into $venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check '.[build]'

export PYTHONHASHSEED=0
if [ -z "${SOURCE_DATE_EPOCH:-}" ]; then
  SOURCE_DATE_EPOCH=$(git log -1 --format=%ct 2>/dev/null || true)
  SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-315532800}  # not a git checkout: 1980-01-01, still fixed
fi
export SOURCE_DATE_EPOCH

started=$(date +%s)
echo "+ pyinstaller build/automaton-min.spec (SOURCE_DATE_EPOCH=$SOURCE_DATE_EPOCH, PYTHONHASHSEED=0)"
# --clean: no cached analysis or stripped libraries from an earlier build (its own cache lives in ~/.cache/pyinstaller)
rm -rf build/out/bundle
"$venv/bin/python" -m PyInstaller --noconfirm --clean --log-level WARN \
  --distpath build/out/bundle --workpath build/out build/automaton-min.spec
binary=${AUTOMATON_DIST:-dist}/automaton-min
mkdir -p "$(dirname "$binary")"
"$venv/bin/python" build/pack.py build/out/bundle/automaton-min "$binary"

size=$(stat -c %s "$binary")
echo "built $binary in $(( $(date +%s) - started )) s: $size bytes ($(awk -v s="$size" 'BEGIN {printf "%.1f", s / 1048576}') MiB), $(uname -m)"
echo "sha256 $(sha256sum "$binary" | cut -d' ' -f1)"
echo "version $("$binary" --version | cut -d' ' -f2), release key: ${AUTOMATON_RELEASE_KEY:-none (updates refused)}," \
  "manifest URL: ${AUTOMATON_RELEASE_URL:-none (set updateManifestUrl on the device)}"
