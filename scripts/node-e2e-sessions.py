"""Agent sessions through a rolling update (issue 47 item 4), run by scripts/node-e2e.sh from a
role=sandbox-user pod: N E2B code-interpreter sandboxes made through the pool's gateway with
plain urllib against the E2B HTTP API, each writing a file and setting Python variables, then
looping cells (each checks the state and adds a step) until /tmp/stop appears; then each
checks its file, its variables and every step it was answered for.

A failed call (an HTTP or connection error, a cut stream, an error line) is retried once,
after an E2B `connect` of its sandbox (what a client does with a sandbox it lost; E2B data-plane
calls do not yet resume a drain-paused sandbox by themselves); a sandbox may retry one call in
all. Prints `ready N` once every sandbox holds its state,
`round R ...` as the loops go, and a last line
`sessions: survived=S/N retries=R max_retries_per_sandbox=M errors=E moved=V executors=X calls=C`.

    python3 node-e2e-sessions.py GATEWAY_URL N
"""

import concurrent.futures
import json
import os
import random
import socket
import sys
import threading
import time
import urllib.error
import urllib.request

GW, N = sys.argv[1], int(sys.argv[2])
STOP = "/tmp/stop"
DEADLINE = time.time() + 900  # the loops end by then even without /tmp/stop
THINK = 2.0  # seconds a "model" thinks between two cells, on average

lock = threading.Lock()
stats = {"calls": 0, "retries": 0, "errors": 0}
errors = []
executors = set()


class Failed(Exception):
    pass


def call(method, path, body=None, headers=None):
    """One HTTP call: (status, body text, the executor that answered)."""
    data = None if body is None else json.dumps(body).encode()
    hs = {"content-type": "application/json", "x-api-key": "none", **(headers or {})}
    req = urllib.request.Request(GW + path, method=method, data=data, headers=hs)
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, r.read().decode(), r.headers.get("x-sandpool-executor")
    except urllib.error.HTTPError as e:
        raise Failed(f"{method} {path}: HTTP {e.code}: {e.read().decode()[:300]}") from None
    except (OSError, ValueError) as e:
        raise Failed(f"{method} {path}: {e!r}") from None


class Agent:
    def __init__(self, i):
        self.i = i
        self.retries = 0
        self.steps = 0
        self.by = []  # the executors that answered, in order
        self.failed = None

    def once(self, fn):
        """fn(), retried once on failure; the sandbox's retries are counted."""
        with lock:
            stats["calls"] += 1
        try:
            return fn()
        except Failed as first:
            with lock:
                stats["retries"] += 1
            self.retries += 1
            print(f"retry sandbox {self.i}: {first}", flush=True)
            time.sleep(3)
            if hasattr(self, "id"):
                # As an E2B client does with a sandbox it lost: connect (which resumes a paused
                # one wherever the gateway sends it), then the call again.
                code, text, _ = call("POST", f"/v2/sandboxes/{self.id}/connect", {"timeout": 3600})
                if code not in (200, 201):
                    raise Failed(f"connect: {code} {text[:300]}")
            return fn()

    def create(self):
        def go():
            code, text, by = call("POST", "/v2/sandboxes", {"templateID": "code-interpreter-v1", "timeout": 3600})
            if code != 201:
                raise Failed(f"create: {code} {text[:300]}")
            self.by.append(by)
            return json.loads(text)

        sbx = self.once(go)
        self.id = sbx["sandboxID"]
        self.headers = {"e2b-sandbox-id": self.id, "e2b-sandbox-port": "49999", "x-access-token": sbx["envdAccessToken"]}

    def cell(self, code):
        """Runs a cell; its `result` text (or None). An error line is a failure."""

        def go():
            _, text, by = call("POST", "/execute", {"code": code}, self.headers)
            lines = [json.loads(line) for line in text.splitlines() if line.strip()]
            bad = [l for l in lines if l.get("type") == "error"]
            if bad:
                raise Failed(f"cell error: {bad[0].get('name')}: {str(bad[0].get('value'))[:300]}")
            if not any(l.get("type") == "number_of_executions" for l in lines):
                raise Failed(f"cell cut short: {text[-300:]!r}")
            self.by.append(by)
            res = [l for l in lines if l.get("type") == "result"]
            return res[0].get("text") if res else None

        return self.once(go)

    def setup(self):
        t0 = time.time()
        self.create()
        self.created_s = time.time() - t0
        self.cell(
            f"agent = {self.i}\n"
            f"memory = {{'name': 'agent-{self.i}', 'facts': list(range({self.i}))}}\n"
            "steps = {}\n"
            f"open('notes-{self.i}.txt', 'w').write('agent {self.i} was here\\n' * 100)\n"
            "def check():\n"
            f"    assert agent == {self.i}, agent\n"
            f"    assert memory == {{'name': 'agent-{self.i}', 'facts': list(range({self.i}))}}, memory\n"
            f"    assert open('notes-{self.i}.txt').read() == 'agent {self.i} was here\\n' * 100\n"
            "    return 'ok'\n"
        )

    def step(self, k):
        # Idempotent (a retried cell may have run once already): a step is a key.
        got = self.cell(f"check(); steps[{k}] = {k} * {k}; len(steps)")
        self.steps = k + 1
        return got

    def final(self):
        got = self.cell(f"check(); sorted(steps) == list(range({self.steps})) and all(v == k * k for k, v in steps.items())")
        if got != "True":
            raise Failed(f"steps lost: {got!r} after {self.steps} steps")

    def loop(self):
        k = 0
        while not os.path.exists(STOP) and time.time() < DEADLINE:
            self.step(k)
            k += 1
            time.sleep(random.uniform(0.5, 1.5) * THINK)


def run(agent, what):
    try:
        getattr(agent, what)()
    except Exception as e:  # noqa: BLE001: every failure is counted and shown
        agent.failed = agent.failed or f"{what}: {e}"
        with lock:
            stats["errors"] += 1
            errors.append(f"sandbox {agent.i}: {what}: {e}")
        # The id's first 8 hex digits are what the executors' logs name a session by.
        print(f"error sandbox {agent.i} session={getattr(agent, 'id', '-')[:8]}: {what}: {e}", flush=True)


# The gateway's Service may refuse connections for a moment after its pod is Ready (its
# address reaches the policy engine a moment later): wait for it (60 s at most), so that no
# sandbox spends its one retry on that.
_host, _, _port = GW.split("//", 1)[1].rstrip("/").partition(":")
_deadline = time.time() + 60
while True:
    try:
        socket.create_connection((_host, int(_port or 80)), timeout=2).close()
        break
    except OSError as e:
        if time.time() > _deadline:
            print(f"error: the gateway {GW} does not accept connections: {e}", flush=True)
            sys.exit(1)
        time.sleep(1)

agents = [Agent(i) for i in range(N)]
# Sandboxes are made 10 at a time (each starts an interpreter), then all loop at once.
with concurrent.futures.ThreadPoolExecutor(10) as pool:
    list(pool.map(lambda a: run(a, "setup"), agents))
with concurrent.futures.ThreadPoolExecutor(N) as pool:

    def progress():
        while not os.path.exists(STOP) and time.time() < DEADLINE:
            time.sleep(5)
            live = {a.by[-1] for a in agents if a.by}
            print(f"round steps={sum(a.steps for a in agents)} executors_now={sorted(live)}", flush=True)

    threading.Thread(target=progress, daemon=True).start()
    print(f"ready {sum(a.failed is None for a in agents)}", flush=True)
    took = sorted(getattr(a, "created_s", 0.0) for a in agents)
    print(f"setup: create p50={took[len(took) // 2]:.1f}s max={took[-1]:.1f}s", flush=True)
    list(pool.map(lambda a: run(a, "loop") if a.failed is None else None, agents))
    list(pool.map(lambda a: run(a, "final") if a.failed is None else None, agents))

for a in agents:
    executors.update(b for b in a.by if b)
# What the check is about is the rollout: the sandboxes made before it (setup failures are
# counted apart, and shown).
made = [a for a in agents if not (a.failed or "").startswith("setup:")]
survived = sum(a.failed is None for a in made)
moved = sum(len({b for b in a.by if b}) > 1 for a in made)
for e in errors[:5]:
    print("error:", e)
print(
    f"sessions: survived={survived}/{len(made)} setup_failed={N - len(made)} retries={stats['retries']} "
    f"max_retries_per_sandbox={max((a.retries for a in made), default=0)} "
    f"errors={sum(a.failed is not None for a in made)} "
    f"moved={moved} executors={len(executors)} calls={stats['calls']} "
    f"steps={sum(a.steps for a in agents)}",
    flush=True,
)
sys.exit(0 if survived == len(made) else 1)
