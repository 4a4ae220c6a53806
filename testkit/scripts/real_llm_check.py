#!/usr/bin/env python3
"""A conversation with a real llama-cpp-python server, read from its log.

Starts BINARY (`switchboard run`, fresh `init` in a temporary HOME) against the server at
127.0.0.1:8011, talks to it as the owner over the API for TURNS turns PAUSE_S seconds apart,
and follows the server's log (LLM_LOG, default /tmp/llm-server.log) for what each request
reused from the server's cache and evaluated anew ("N prefix-match hit, remaining M prompt
tokens", "prompt eval time = X ms / N tokens"). Each request is stamped when it starts and put
down to the run (turn, memory_flush, summary) that was running then, from the runs table.

Start the server with llama_server_marked.py, which logs a line at the start of each chat
request: llama-cpp-python's `chatml-function-calling` format makes several completions for one
request, and only the first reads the rendered chat (without the lines each completion counts
as a request).

Prints every request, then a table with one row per turn: the turn's first request's
prefix-match hit, its prompt, the previous request's prompt (whatever that request was: the
last call of the turn before, or a compaction's summary), the share of that prompt reused
(hit / previous prompt, at most 100 %: a hit may run on into the previous answer), the tokens
all the turn's requests evaluated and their prompt-evaluation time, and the compaction
requests that followed it.
Ends with `switchboard runs` and the session's compaction count. See docs/benchmarks.md
(issue 37) for the server's command line.

Usage: real_llm_check.py BINARY LABEL TURNS PAUSE_S [WINDOW [KEY=VALUE,...]]
"""
import json, os, re, sqlite3, subprocess, sys, tempfile, threading, time, urllib.error, urllib.request

HIT = re.compile(r"(\d+) prefix-match hit, remaining (\d+) prompt tokens")
PERF = re.compile(r"prompt eval time =\s+([\d.]+) ms /\s+(\d+) tokens")
TOPICS = ["the garden needs watering before Thursday", "the train to Lyon leaves at seven",
          "remind me what we decided about the school trip money",
          "the plumber said the boiler part arrives next week",
          "the lentil recipe needed twice the cumin", "how to tell the neighbours about the party"]


class ServerLog(threading.Thread):
    """Follows the server's log from its end. With llama_server_marked.py's "chat request" lines
    a request is everything from its line to the next one (its completions); without them each
    completion counts as a request. A completion is its prefix-match line (none: nothing was
    reused) and its perf line; a request is stamped when it starts."""

    def __init__(self, path):
        super().__init__(daemon=True)
        self.file = open(path, errors="replace")
        self.file.seek(0, os.SEEK_END)
        self.raw, self.lock, self.pending, self.marked, self.last_line = [], threading.Lock(), None, False, time.time()

    def run(self):
        partial = ""
        while True:
            chunk = self.file.readline()
            if not chunk:
                time.sleep(0.05)
                continue
            partial += chunk
            if partial.endswith("\n"):
                self.parse(partial)
                partial = ""

    def parse(self, line):
        self.last_line = time.time()
        if line.startswith("chat request:"):
            self.marked = True
            with self.lock:
                self.raw.append(dict(t=time.time(), completions=[]))
        elif m := HIT.search(line):
            self.pending = (int(m[1]), int(m[2]))
        elif "full prompt already cached" in line:  # the same prompt again: nothing evaluated
            self.pending = ("all", 0)
        elif m := PERF.search(line):
            hit, evaluated = self.pending or (0, int(m[2]))
            self.pending = None
            with self.lock:
                if not self.marked or not self.raw:
                    self.raw.append(dict(t=time.time(), completions=[]))
                self.raw[-1]["completions"].append((hit, evaluated, float(m[1])))

    def taken(self):
        """The requests so far: the first completion's hit and prompt (the rendered chat), what
        all its completions evaluated and how long that took, and the previous prompt's length."""
        requests, prev = [], None
        with self.lock:
            raw = [dict(r, completions=list(r["completions"])) for r in self.raw]
        for r in raw:
            done = r["completions"]
            hit, first = (done[0][0], done[0][1]) if done else (0, 0)
            hit = (prev or 0) if hit == "all" else hit
            prompt = hit + first if done else None  # none: refused before any evaluation
            requests.append(dict(t=r["t"], hit=hit, evaluated=sum(c[1] for c in done), prompt=prompt, prev=prev,
                                 ms=sum(c[2] for c in done), completions=len(done), kind="?"))
            prev = prompt or prev
        return requests

    def wait_quiet(self, seconds, limit):
        """Waits until nothing was logged for `seconds` (a compaction after the last turn)."""
        end = time.time() + limit
        while time.time() < end and time.time() - self.last_line < seconds:
            time.sleep(0.2)


def reused(request):
    """The share of the previous request's prompt this one reused, in percent."""
    if not request["prev"] or request["prompt"] is None:
        return None
    return 100.0 * min(request["hit"], request["prev"]) / request["prev"]


def start_daemon(binary, label, window, extra):
    port = 8797 if label == "old" else 8798  # two builds may run one after the other
    home = tempfile.mkdtemp(prefix=f"real-{label}-")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XDG_", "SWITCHBOARD_", "OPENAI_"))}
    env.update(HOME=home, OPENAI_BASE_URL="http://127.0.0.1:8011/v1", OPENAI_API_KEY="none",
               SWITCHBOARD_MODEL="smollm2", SWITCHBOARD_AGENT__CONTEXT_WINDOW=window,
               SWITCHBOARD_USERS__OWNERS='["api:api", "api:me"]',
               SWITCHBOARD_CHANNELS__API__LISTEN=f"127.0.0.1:{port}", RUST_LOG="warn")
    for pair in extra.split(",") if extra else []:
        key, value = pair.split("=", 1)
        env[key] = value
    subprocess.run([binary, "init"], env=env, check=True, stdout=subprocess.DEVNULL, input=b"")
    daemon = subprocess.Popen([binary, "run"], env=env, stdout=open(f"{home}/daemon.log", "w"),
                              stderr=subprocess.STDOUT)
    for _ in range(100):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1)
            break
        except Exception:
            time.sleep(0.2)
    return daemon, env, home, port


def talk(port, label, turns, pause, log):
    """Sends the turns; returns each turn's (send time, answer seconds)."""
    sent = []
    for n in range(turns):
        body = json.dumps({"chat_id": "me", "content": f"Message {n}: {TOPICS[n % 6]}."}).encode()
        req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/messages", data=body,
                                     headers={"Content-Type": "application/json"})
        t0 = time.time()
        try:
            reply = json.load(urllib.request.urlopen(req, timeout=600))
        except urllib.error.HTTPError as err:  # the API gave up waiting (504): the turn goes on
            reply = {"reply": f"HTTP {err.code}"}
        sent.append((t0, time.time() - t0))
        time.sleep(1)
        calls = [r for r in log.taken() if r["t"] >= t0]
        print(f"{label} turn {n + 1} {time.strftime('%H:%M:%S', time.localtime(t0))}: {len(calls)} calls so far, "
              f"answer in {sent[-1][1]:.1f} s: {reply.get('reply', '')[:60]!r}", flush=True)
        if n + 1 < turns:
            time.sleep(pause)
    return sent


def label_kinds(requests, home):
    """Puts each request down to the run that was running when it was logged."""
    db = sqlite3.connect(f"{home}/.local/share/switchboard/switchboard.db")
    runs = db.execute("select kind, started_at, coalesce(finished_at, 1e15) from runs order by started_at").fetchall()
    for request in requests:
        ms = request["t"] * 1000
        running = [kind for kind, start, end in runs if start - 200 <= ms <= end + 200]
        request["kind"] = running[-1] if running else "?"
    return db.execute("select key, compaction_count from sessions").fetchall()


def per_turn(requests, sent):
    """Each turn's calls: its own (logged from its message until the next one) and the
    compaction calls that followed them, even when they ran on into the next turn's time."""
    bounds = [t0 for t0, _ in sent] + [float("inf")]
    turns, current = [[] for _ in sent], 0
    for r in requests:
        if r["kind"] != "memory_flush" and r["kind"] != "summary":
            current = next(n for n in range(len(sent)) if r["t"] < bounds[n + 1])
        turns[current].append(r)
    return turns


def print_requests(label, turns):
    print(f"\n{label}: every request (turn, request, run kind, prefix-match hit, prompt, previous prompt, reused, "
          "evaluated by its completions, prompt eval ms)")
    for n, calls in enumerate(turns):
        for i, r in enumerate(calls):
            share = reused(r)
            print(f"  {n + 1:>3} {i + 1:>2} {r['kind']:<12} hit {r['hit']:>5}  prompt {r['prompt'] or '-':>5}  "
                  f"prev {r['prev'] or '-':>5}  reused {'-' if share is None else f'{share:.0f} %':>6}  "
                  f"evaluated {r['evaluated']:>5} in {r['completions']}  {r['ms']:>9.1f} ms")


def print_turn_table(label, turns, sent):
    print(f"\n{label}: per turn: the turn's first request against the request before it; what all the "
          "turn's requests evaluated and the time it took; the compaction requests after it\n")
    print("| turn | sent | hit | prompt | previous prompt | reused | evaluated (requests) | prompt eval | compaction after |")
    print("| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    for n, calls in enumerate(turns):
        own = [r for r in calls if r["kind"] not in ("memory_flush", "summary")]
        side = [r for r in calls if r["kind"] in ("memory_flush", "summary")]
        clock = time.strftime("%H:%M:%S", time.localtime(sent[n][0]))
        after = ""
        if side:
            kinds = [r["kind"] for r in side]
            after = (f"flush ×{kinds.count('memory_flush')}, summary ×{kinds.count('summary')}, "
                     f"{sum(r['evaluated'] for r in side):,} evaluated, {sum(r['ms'] for r in side) / 1000:.1f} s")
        if not own:
            print(f"| {n + 1} | {clock} | - | - | - | - | - | - | {after} |")
            continue
        first, share = own[0], reused(own[0])
        print(f"| {n + 1} | {clock} | {first['hit']:,} | {first['prompt'] or 0:,} | {first['prev'] or 0:,} | "
              f"{'-' if share is None else f'{share:.0f} %'} | {sum(r['evaluated'] for r in own):,} ({len(own)}) | "
              f"{sum(r['ms'] for r in own) / 1000:.1f} s | {after} |")


def print_totals(label, requests):
    counted = [r for r in requests if reused(r) is not None]
    hit = sum(min(r["hit"], r["prev"]) for r in counted)
    prev = sum(r["prev"] for r in counted)
    print(f"\n{label} total: {len(requests)} requests; {hit} of the previous prompts' {prev} tokens reused "
          f"({100.0 * hit / max(prev, 1):.1f} %); {sum(r['evaluated'] for r in requests)} tokens evaluated, "
          f"prompt eval {sum(r['ms'] for r in requests) / 1000:.1f} s", flush=True)


def print_runs(binary, env):
    runs = subprocess.run([binary, "runs", "--limit", "300"], env=env, capture_output=True, text=True)
    print(runs.stdout[-8000:], runs.stderr[-2000:])
    kinds = {}
    for line in runs.stdout.splitlines()[1:]:
        parts = line.split()
        if len(parts) > 5 and parts[3] in ("turn", "memory_flush", "summary"):
            kinds[(parts[3], parts[4])] = kinds.get((parts[3], parts[4]), 0) + 1
    print("runs by kind and status:", kinds)


def main():
    binary, label, turns, pause = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    window = sys.argv[5] if len(sys.argv) > 5 else "4096"
    log = ServerLog(os.environ.get("LLM_LOG", "/tmp/llm-server.log"))
    log.start()
    daemon, env, home, port = start_daemon(binary, label, window, sys.argv[6] if len(sys.argv) > 6 else "")
    try:
        sent = talk(port, label, turns, pause, log)
        log.wait_quiet(5, 600)
        requests = log.taken()
        compactions = label_kinds(requests, home)
        turns_calls = per_turn(requests, sent)
        print_requests(label, turns_calls)
        print_turn_table(label, turns_calls, sent)
        print_totals(label, requests)
        print_runs(binary, env)
        print("compactions:", compactions)
    finally:
        daemon.terminate()
        daemon.wait()
        print(f"home: {home}")


if __name__ == "__main__":
    main()
