#!/usr/bin/env bash
# The other supported Pythons (3.12 and 3.13; CI runs ci/test.sh on the default python3, 3.11), each in a
# throwaway virtualenv: a clean copy of the tree installed with plain ``pip install`` (the system's
# xxhash.h hidden where this runs as root, so the build can only use the header shipped in native/csrc),
# every native module loaded, ``pybroker serve`` started and stopped with nothing but INFO lines on its
# stderr, then the tests through ci/test.sh. Opt-in.
#   bash ci/test-pythons.sh              the whole suite per interpreter (about 15 minutes each)
#   bash ci/test-pythons.sh --unit 3.13  the unit tier only, on 3.13 only
set -euo pipefail
cd "$(dirname "$0")/.."
tests=()
if [ "${1:-}" = "--unit" ]; then tests=(tests/unit -n 2); shift; fi
versions=("$@")
[ "${#versions[@]}" -gt 0 ] || versions=(3.12 3.13)

find_python() {  # find_python VERSION: the interpreter's path, also behind a bare pyenv shim
    local v=$1 interpreter
    interpreter=$(command -v "python$v" || true)
    if ! "${interpreter:-false}" --version >/dev/null 2>&1 && command -v pyenv >/dev/null 2>&1; then
        interpreter=$(pyenv prefix "$(pyenv versions --bare | grep -E "^$v(\.|$)" | tail -1)" 2>/dev/null)/bin/python$v
    fi
    [ -x "${interpreter:-}" ] && echo "$interpreter"
}

fresh_install() {  # fresh_install VENV WORKDIR: pip install a clean copy of the tree (tracked and new files)
    local venv=$1 src=$2/src
    mkdir -p "$src"
    git ls-files -z --cached --others --exclude-standard | xargs -0 cp --parents -t "$src"
    local install=("$venv/bin/pip" install --quiet "$src")
    if [ "$(id -u)" = 0 ] && [ -f /usr/include/xxhash.h ] && command -v unshare >/dev/null 2>&1; then
        printf '#error "the system xxhash.h was used, not native/csrc/xxhash.h"\n' >"$2/poison.h"
        unshare -m sh -c 'mount --bind "$1" /usr/include/xxhash.h && shift && exec "$@"' sh "$2/poison.h" \
            "${install[@]}"
    else
        "${install[@]}"
    fi
}

serve_smoke() {  # serve_smoke VENV WORKDIR: every native module loads; the broker starts and stops quietly
    local venv=$1 dir=$2/serve pid
    mkdir -p "$dir"
    (cd "$dir" && "$venv/bin/python" -W error -c \
        'import importlib; from pybroker import core; [importlib.import_module(f"pybroker._native.{n}") for n in core.MODULES]')
    (cd "$dir" && exec "$venv/bin/pybroker" serve --override listeners=PLAINTEXT://127.0.0.1:0 \
        --override log.dirs="$dir/data" --ready-file "$dir/ready" >"$dir/out" 2>"$dir/err") &
    pid=$!
    for _ in $(seq 600); do [ -f "$dir/ready" ] || ! kill -0 "$pid" 2>/dev/null && break; sleep 0.1; done
    [ -f "$dir/ready" ] || { echo "pybroker serve did not start:"; cat "$dir/err"; kill "$pid" 2>/dev/null; return 1; }
    kill "$pid"
    wait "$pid" || { echo "pybroker serve did not stop cleanly:"; cat "$dir/err"; return 1; }
    if grep -v ' level=INFO ' "$dir/err"; then echo "pybroker serve wrote more than INFO lines (above)"; return 1; fi
}

failed=()
for v in "${versions[@]}"; do
    interpreter=$(find_python "$v") || { echo "=== python $v: not installed"; failed+=("$v"); continue; }
    work=$(mktemp -d)
    "$interpreter" -m venv "$work/venv"
    echo "=== python $v: $("$work/venv/bin/python" --version): pip install, pybroker serve"
    if fresh_install "$work/venv" "$work" && serve_smoke "$work/venv" "$work"; then
        PATH="$work/venv/bin:$PATH" PYTHON="$work/venv/bin/python" PYSPARK_PYTHON="$work/venv/bin/python" bash ci/test.sh "${tests[@]}" || failed+=("$v")
    else
        failed+=("$v")
    fi
    rm -rf "$work"
done
if [ "${#failed[@]}" -gt 0 ]; then
    echo "failed pythons: ${failed[*]}"
    exit 1
fi
echo "passed pythons: ${versions[*]}"
