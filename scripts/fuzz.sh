#!/usr/bin/env bash
# Runs every fuzz target in fuzz/ for a bounded time (not part of CI).
#
#   scripts/fuzz.sh [seconds-per-target] [target ...]
#
# Default: 240 s per target, all targets. Needs the nightly toolchain (rustup toolchain install
# nightly) and a C++ compiler; installs cargo-fuzz when it is missing. Corpora grow in
# fuzz/corpus/<target> (only the seed-* files are committed); a crash or failed property stops
# that target, leaves its input in fuzz/artifacts/<target>/ and makes the script exit non-zero.
# Each target's libFuzzer log is kept in fuzz/logs/<target>.log; the last line of the summary
# gives its executions and time.
set -uo pipefail
cd "$(dirname "$0")/../fuzz"

seconds="${1:-240}"
shift || true
if ! [[ "$seconds" =~ ^[0-9]+$ ]] || [ "$seconds" -eq 0 ]; then
    echo "usage: scripts/fuzz.sh [seconds-per-target] [target ...]" >&2
    exit 2
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
    cargo install --locked cargo-fuzz
fi

# Safe Rust: no sanitizer needed (and builds and runs much faster without); debug assertions
# on, so integer overflow is a crash too.
build_flags=(--sanitizer none --debug-assertions)
cargo +nightly fuzz build "${build_flags[@]}" || exit 1

targets=("$@")
if [ "${#targets[@]}" -eq 0 ]; then
    mapfile -t targets < <(cargo +nightly fuzz list)
fi

# Inputs longer than this are not tried: the SSE target feeds every split of its input (quadratic).
max_len() {
    case "$1" in
        sse) echo 4096 ;;
        config) echo 65536 ;;
        *) echo 16384 ;;
    esac
}

mkdir -p logs
failed=()
for target in "${targets[@]}"; do
    mkdir -p "corpus/$target"
    echo "== $target: ${seconds}s"
    if cargo +nightly fuzz run "${build_flags[@]}" "$target" "corpus/$target" -- \
        -max_total_time="$seconds" -max_len="$(max_len "$target")" -timeout=10 -rss_limit_mb=2048 \
        -print_final_stats=1 >"logs/$target.log" 2>&1; then
        grep -E '^stat::number_of_executed_units|^stat::average_exec_per_sec|^Done [0-9]+ runs' "logs/$target.log" \
            | tr '\n' ' '
        echo
    else
        echo "!! $target failed; see fuzz/logs/$target.log and fuzz/artifacts/$target/"
        grep -E 'panicked at|^SUMMARY|Test unit written' "logs/$target.log" | head -5
        failed+=("$target")
    fi
done

if [ "${#failed[@]}" -gt 0 ]; then
    echo "failed: ${failed[*]}"
    exit 1
fi
echo "all ${#targets[@]} targets ran ${seconds}s each without a failure"
