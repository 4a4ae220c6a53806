#!/usr/bin/env bash
# Regenerates build/hot-symbols.txt, the order in which release builds lay out the functions
# that run at start-up, while idle and in turns (see build.rs and docs/benchmarks.md, "Idle
# memory"). Run it after a change of compiler or dependencies, from the repository's root:
#
#   cargo build --release -p switchboard -p switchboard-testkit --bins
#   scripts/hot-symbols.sh [target/release]
#
# It runs the bench's start-up, idle and load shapes with the daemon under callgrind (valgrind),
# dumping every two seconds, and lists each function of the binary the first time a dump shows
# it ran: start-up and idle first, then the Telegram, API (with a tool call) and NATS turns.
set -euo pipefail
cd "$(dirname "$0")/.."

release=${1:-target/release}
binary=$(realpath "$release/switchboard")
bench=$(realpath "$release/bench")
work=$(mktemp -d)
trap 'touch "$work/stop"; sleep 3; rm -rf "$work"' EXIT

cat >"$work/daemon.sh" <<EOF
#!/bin/sh
exec valgrind --tool=callgrind --dump-instr=no --compress-strings=no --compress-pos=no --demangle=no \\
    --callgrind-out-file="$work/\$SHAPE.%p" "$binary" "\$@" 2>/dev/null
EOF
chmod +x "$work/daemon.sh"

# callgrind writes a dump when asked; the bench kills the daemon without one.
(
    while [ ! -f "$work/stop" ]; do
        for pid in $(pgrep -f "callgrind-out-file=$work/" || true); do
            callgrind_control -d "$pid" >/dev/null 2>&1 || true
        done
        sleep 2
    done
) &

run() {
    local shape=$1
    shift
    echo "== $shape: bench $*"
    SHAPE=$shape "$bench" --binary "$work/daemon.sh" --idle 1 --reply-timeout 300 "$@" | tail -n 1
}
run 1-idle --idle-only --idle 12
run 2-telegram --chats 4 --messages 8
run 3-api --path api --chats 4 --messages 8 --tool
run 4-nats --nats --chats 4 --messages 6
touch "$work/stop"
sleep 3

# Each dump names the object before its functions (`ob=`, then `fn=` lines); keep the
# binary's, first appearance first, dumps in the order they were written. The functions an
# idle daemon keeps running (the idle shape's dumps after its first two, past start-up) go
# first of all: after start-up the daemon unmaps its code (src/daemon/startup_pages.rs), and
# what idling maps again is then one dense run instead of pages strewn through start-up's.
dumps=$(cd "$work" && ls -- *.*.* | sort -t. -k1,1 -k3,3n | sed "s|^|$work/|")
# shellcheck disable=SC2086
awk -v binary="$binary" -v quote="'" '
    FNR == 1 {
        count = split(FILENAME, parts, ".")
        steady = FILENAME ~ /\/1-idle\.[0-9]+\.[0-9]+$/ && parts[count] + 0 >= 3
    }
    /^ob=/ { object = substr($0, 4) }
    /^fn=/ && object == binary {
        name = substr($0, 4)
        sub(quote "[0-9]+$", "", name)   # recursion levels: name followed by a quote and 2
        if (name ~ /^0x/) next
        if (!(name in seen)) { seen[name] = 1; order[++all] = name }
        if (steady && !(name in idle)) { idle[name] = 1; idling[++idles] = name }
    }
    END {
        for (i = 1; i <= idles; i++) print idling[i]
        for (i = 1; i <= all; i++) if (!(order[i] in idle)) print order[i]
        print idles " functions run while idle" > "/dev/stderr"
    }
' $dumps >build/hot-symbols.txt
echo "build/hot-symbols.txt: $(wc -l <build/hot-symbols.txt) functions"
