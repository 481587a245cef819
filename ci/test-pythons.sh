#!/usr/bin/env bash
# The whole suite once per other supported Python (3.12 and 3.13; CI runs ci/test.sh on the default
# python3, 3.11): each in a throwaway virtualenv with the test dependencies, run by ci/test.sh.
# Opt-in (about 15 minutes per interpreter); ``bash ci/test-pythons.sh 3.13`` runs only that one.
set -euo pipefail
cd "$(dirname "$0")/.."
versions=("$@")
[ "${#versions[@]}" -gt 0 ] || versions=(3.12 3.13)
failed=()
for v in "${versions[@]}"; do
    interpreter=$(command -v "python$v" || true)
    if ! "${interpreter:-false}" --version >/dev/null 2>&1 && command -v pyenv >/dev/null 2>&1; then  # a bare shim
        interpreter=$(pyenv prefix "$(pyenv versions --bare | grep -E "^$v(\.|$)" | tail -1)" 2>/dev/null)/bin/python$v
    fi
    if [ ! -x "${interpreter:-}" ]; then
        echo "=== python $v: not installed"; failed+=("$v"); continue
    fi
    venv=$(mktemp -d)/venv
    "$interpreter" -m venv "$venv"
    echo "=== python $v: $("$venv/bin/python" --version)"
    PATH="$venv/bin:$PATH" PYTHON="$venv/bin/python" bash ci/test.sh || failed+=("$v")
    rm -rf "$(dirname "$venv")"
done
if [ "${#failed[@]}" -gt 0 ]; then
    echo "failed pythons: ${failed[*]}"
    exit 1
fi
