#!/usr/bin/env python3
"""A conversation with a real llama-cpp-python server, read from its log.

Starts BINARY (`switchboard run`, fresh `init` in a temporary HOME) against the server at
127.0.0.1:8011, talks to it as the owner over the API for TURNS turns PAUSE_S seconds apart,
and reads the server's log (LLM_LOG, default /tmp/llm-server.log) for what each turn's
requests reused from the server's cache and evaluated anew ("N prefix-match hit, remaining M
prompt tokens", "prompt eval time = X ms / N tokens"). Ends with `switchboard runs` and the
session's compaction count. See docs/benchmarks.md (issue 37) for the server's command line.

Usage: real_llm_check.py BINARY LABEL TURNS PAUSE_S [WINDOW [KEY=VALUE,...]]
"""
import json, os, re, subprocess, sys, tempfile, time, urllib.request

binary, label, turns, pause = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
window = sys.argv[5] if len(sys.argv) > 5 else "4096"
LOG = os.environ.get("LLM_LOG", "/tmp/llm-server.log")
PORT = 8797 if label == "old" else 8798  # two builds may run one after the other
home = tempfile.mkdtemp(prefix=f"real-{label}-")
env = {k: v for k, v in os.environ.items() if not k.startswith(("XDG_", "SWITCHBOARD_", "OPENAI_"))}
env.update(HOME=home, OPENAI_BASE_URL="http://127.0.0.1:8011/v1", OPENAI_API_KEY="none",
           SWITCHBOARD_MODEL="smollm2", SWITCHBOARD_AGENT__CONTEXT_WINDOW=window,
           SWITCHBOARD_USERS__OWNERS='["api:api", "api:me"]',
           SWITCHBOARD_CHANNELS__API__LISTEN=f"127.0.0.1:{PORT}", RUST_LOG="warn")
for pair in (sys.argv[6].split(",") if len(sys.argv) > 6 else []):
    key, value = pair.split("=", 1)
    env[key] = value
subprocess.run([binary, "init"], env=env, check=True, stdout=subprocess.DEVNULL, input=b"")
daemon = subprocess.Popen([binary, "run"], env=env, stdout=open(f"{home}/daemon.log", "w"),
                          stderr=subprocess.STDOUT)
try:
    for _ in range(100):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{PORT}/healthz", timeout=1)
            break
        except Exception:
            time.sleep(0.2)
    TOPICS = ["the garden needs watering before Thursday", "the train to Lyon leaves at seven",
              "remind me what we decided about the school trip money",
              "the plumber said the boiler part arrives next week",
              "the lentil recipe needed twice the cumin", "how to tell the neighbours about the party"]
    total_hit = total_eval = 0
    total_ms = 0.0
    for n in range(turns):
        start = os.path.getsize(LOG)
        body = json.dumps({"chat_id": "me", "content": f"Message {n}: {TOPICS[n % 6]}."}).encode()
        req = urllib.request.Request(f"http://127.0.0.1:{PORT}/v1/messages", data=body,
                                     headers={"Content-Type": "application/json"})
        t0 = time.time()
        reply = json.load(urllib.request.urlopen(req, timeout=600))
        took = time.time() - t0
        time.sleep(1)
        with open(LOG) as f:
            f.seek(start)
            text = f.read()
        hits = [(int(a), int(b)) for a, b in re.findall(r"(\d+) prefix-match hit, remaining (\d+) prompt", text)]
        evals = [(float(ms), int(t)) for ms, t in re.findall(r"prompt eval time =\s+([\d.]+) ms /\s+(\d+) tokens", text)]
        hit = sum(h for h, _ in hits)
        # The perf line counts what was evaluated, with or without a prefix hit.
        ev = sum(t for _, t in evals) if evals else sum(r for _, r in hits)
        ms = sum(m for m, _ in evals)
        total_hit += hit
        total_eval += ev
        total_ms += ms
        share = 100.0 * hit / (hit + ev) if hit + ev else 0.0
        print(f"{label} turn {n + 1} {time.strftime('%H:%M:%S')}: {len(hits)} evals, reused {hit}, evaluated {ev} "
              f"({share:.0f}% reused), prompt eval {ms / 1000:.1f} s, answer in {took:.1f} s: "
              f"{reply.get('reply', '')[:60]!r}", flush=True)
        if n + 1 < turns:
            time.sleep(pause)
    share = 100.0 * total_hit / (total_hit + total_eval) if total_hit + total_eval else 0.0
    print(f"{label} total: reused {total_hit}, evaluated {total_eval} ({share:.1f}% reused), "
          f"prompt eval {total_ms / 1000:.1f} s", flush=True)
    runs = subprocess.run([binary, "runs", "--limit", "300"], env=env, capture_output=True, text=True)
    print(runs.stdout[-8000:], runs.stderr[-2000:])
    kinds = {}
    for line in runs.stdout.splitlines()[1:]:
        parts = line.split()
        if len(parts) > 5 and parts[3] in ("turn", "memory_flush", "summary"):
            kinds[(parts[3], parts[4])] = kinds.get((parts[3], parts[4]), 0) + 1
    print("runs by kind and status:", kinds)
    import sqlite3
    db = sqlite3.connect(f"{home}/.local/share/switchboard/switchboard.db")
    print("compactions:", db.execute("select key, compaction_count from sessions").fetchall())
finally:
    daemon.terminate()
    daemon.wait()
    print(f"home: {home}")
