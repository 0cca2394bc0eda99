#!/usr/bin/env python3
"""The operator and the control plane at scale (docs/scale.md, "Control plane at scale").

Runs the real `sandpool-operator` binary out of cluster against the control plane of
scripts/cluster.sh (etcd, kube-apiserver, controller-manager, scheduler, kwok nodes whose pods
turn Ready), with a ServiceAccount holding exactly the rules of `sandpool-operator rbac`, and
measures, phase by phase:

  fill      POOLS SandboxPools of REPLICAS executors in NAMESPACES namespaces: seconds until
            every pool is Ready, the operator's writes per pool (from the API server's audit
            log, filtered by the operator's user)
  quiet     writes in QUIET seconds at rest (goal: only the leader Lease)
  restart   the operator restarted at full size: seconds until it has reconciled every pool
            again, and its writes meanwhile (goal: 0 for unchanged pools)
  change    every pool's spec changed once (--change scale: one more replica; rollout: a
            new pod template): writes per pool changed
  delete    every pool deleted: writes per pool deleted
  failover  (--failover) two replicas; the leader is killed (SIGKILL) mid-fill, the standby
            finishes; no child duplicated or orphaned, and exactly one leader transition

plus reconcile p50/p99 (the operator's histogram), its CPU seconds and peak RSS, Events per
pool and status writes per pool. Prints a table and one JSON line (`SCALE_JSON {...}`).
With --check it exits 1 when a write budget regresses (the thresholds say why).

  bench/scale.py                                   # 100 pools x 10 in 10 namespaces, 12 nodes
  bench/scale.py --pools 1000 --namespaces 50 --replicas 2 --nodes 20
  bench/scale.py --failover

Uses the cluster of $SANDPOOL_E2E_CLUSTER (eval "$(scripts/cluster.sh env)"), or starts one
with scripts/cluster.sh up. Adds kwok nodes `kwok-scale-N` up to --nodes and removes them after.
"""

import argparse
import collections
import concurrent.futures
import datetime
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH_NS = "sandpool-scale"
SA = "sandpool-operator"
USER = f"system:serviceaccount:{BENCH_NS}:{SA}"
LABEL = "sandpool.dev/scale-bench"

# What --check allows (per pool and per phase), and why.
THRESHOLDS = {
    # Creating a pool: its children (ServiceAccount, NetworkPolicy, Service, PDB, Deployment:
    # 5 applies), 2 Events, and status patches as its pods come up (~4). Measured 11.5 per
    # pool (100 x 10); 16 leaves room for a retry on a conflict, not for a write per reconcile
    # (a pool reconciles ~12 times while its pods start).
    "writes_per_pool_created": 16.0,
    # Changing a spec (--change rollout): the Deployment update, two Events, and a status patch
    # whenever the rollout's counts move (10 pods replaced: ~24 status patches per pool
    # measured, 26.8 writes in all); 40 catches a write per reconcile or a second write per change.
    "writes_per_pool_changed": 40.0,
    # --change scale (the default, and CI's): one more replica is the Deployment patch, two
    # Events and ~3 status patches: 6.1 measured at 100 x 10, and 10.6 with a status write on
    # every reconcile, hence 9.
    "writes_per_pool_changed_scale": 9.0,
    # Deleting: children go by garbage collection; the operator has nothing to write.
    "writes_per_pool_deleted": 1.0,
    # At rest the operator writes only its Lease: any other write is a write for nothing.
    "quiet_writes_not_lease": 0,
    # A restart finds every pool as it left it: nothing to write.
    "restart_writes_not_lease": 0,
    # Events: a handful per pool's life, never one per reconcile.
    "events_per_pool": 6.0,
}


def log(msg):
    print(f"scale: {msg}", file=sys.stderr, flush=True)


def kubectl(*args, input=None, check=True):
    r = subprocess.run([KUBECTL, *args], input=input, capture_output=True, text=True)
    if check and r.returncode != 0:
        raise SystemExit(f"kubectl {' '.join(args[:3])} failed: {r.stderr.strip()}")
    return r.stdout


def kubectl_json(*args):
    return json.loads(kubectl(*args, "-o", "json"))


def apply_list(items, verb="apply", chunk=50, clients=8):
    extra = ["--server-side", "--force-conflicts"] if verb == "apply" else []
    # kubectl sends one request per object, one after another; chunks go out from several
    # kubectl processes at once, so the fill's creates are bounded by the API server, not by
    # one client's request loop (at 1,000 pools one client created 1.7 pools/s; eight created
    # 2.4/s at load 15, so there the API server itself was the bound: docs/scale.md).
    docs = [
        json.dumps({"apiVersion": "v1", "kind": "List", "items": items[i : i + chunk]})
        for i in range(0, len(items), chunk)
    ]
    with concurrent.futures.ThreadPoolExecutor(max_workers=clients) as pool:
        for _ in pool.map(lambda doc: kubectl(verb, *extra, "-f", "-", input=doc), docs):
            pass


def now():
    return datetime.datetime.now(datetime.timezone.utc)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --- the cluster -----------------------------------------------------------------------------


def cluster_env():
    if not os.environ.get("SANDPOOL_E2E_CLUSTER"):
        subprocess.run([f"{ROOT}/scripts/cluster.sh", "up"], check=True)
        out = subprocess.run(
            [f"{ROOT}/scripts/cluster.sh", "env"], check=True, capture_output=True, text=True
        ).stdout
        for line in out.splitlines():
            k, _, v = line.removeprefix("export ").partition("=")
            os.environ[k] = v
    return os.environ["SANDPOOL_E2E_KUBECTL"], os.environ["SANDPOOL_E2E_AUDIT_LOG"]


def ensure_nodes(want):
    nodes = kubectl_json("get", "nodes", "-l", "type=kwok")["items"]
    have = len(nodes)
    added = [f"kwok-scale-{i}" for i in range(max(0, want - have))]
    items = [
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
                "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "type": "kwok", LABEL: "1"},
            },
        }
        for name in added
    ]
    if items:
        apply_list(items)
    deadline = time.time() + 120
    while True:
        nodes = kubectl_json("get", "nodes", "-l", "type=kwok")["items"]
        ready = sum(
            1
            for n in nodes
            for c in n.get("status", {}).get("conditions", [])
            if c["type"] == "Ready" and c["status"] == "True"
        )
        if ready >= want:
            return added
        if time.time() > deadline:
            raise SystemExit(f"only {ready}/{want} kwok nodes Ready after 120 s")
        time.sleep(1)


def prepare(dir, namespaces, binary):
    """CRD, namespaces, and a ServiceAccount with the operator's own RBAC rules, cluster-wide."""
    crd = subprocess.run([binary, "crd"], check=True, capture_output=True, text=True).stdout
    kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", input=crd)
    kubectl("wait", "--for=condition=Established", "crd/sandboxpools.sandpool.dev", "--timeout=60s")
    rules = json.loads(subprocess.run([binary, "rbac"], check=True, capture_output=True, text=True).stdout)
    grouped = collections.defaultdict(set)
    for r in rules:
        grouped[(r["apiGroup"], r["resource"])].update(r["verbs"])
    items = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "labels": {LABEL: "1"}}}
        for ns in [BENCH_NS, *namespaces]
    ]
    items += [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": SA, "namespace": BENCH_NS}},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": "sandpool-scale-operator"},
            "rules": [
                {"apiGroups": [g], "resources": [r], "verbs": sorted(v)} for (g, r), v in sorted(grouped.items())
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "sandpool-scale-operator"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "sandpool-scale-operator"},
            "subjects": [{"kind": "ServiceAccount", "name": SA, "namespace": BENCH_NS}],
        },
    ]
    apply_list(items)
    token = kubectl("create", "token", SA, "-n", BENCH_NS, "--duration=4h").strip()
    admin = open(os.environ["KUBECONFIG"]).read()
    server = re.search(r"server: (\S+)", admin).group(1)
    ca = re.search(r"certificate-authority: (\S+)", admin).group(1)
    path = os.path.join(dir, "operator.kubeconfig")
    with open(path, "w") as f:
        f.write(
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [{"name": "c", "cluster": {"server": server, "certificate-authority": ca}}],
                    "users": [{"name": "u", "user": {"token": token}}],
                    "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u", "namespace": BENCH_NS}}],
                    "current-context": "c",
                }
            )
        )
    return path


# --- the operator ----------------------------------------------------------------------------


class Operator:
    def __init__(self, binary, kubeconfig, identity, dir, extra_env):
        self.identity = identity
        self.port = free_port()
        self.log = open(os.path.join(dir, f"operator-{identity}.log"), "a")
        env = {**os.environ, "KUBECONFIG": kubeconfig, "RUST_LOG": "info", "NO_COLOR": "1", **extra_env}
        for k in ("WATCH_NAMESPACE", "POD_NAMESPACE", "POD_NAME"):
            env.pop(k, None)
        self.proc = subprocess.Popen(
            [binary, "run", "--namespace", "", "--lease-namespace", BENCH_NS, "--identity", identity,
             "--http-listen", f"127.0.0.1:{self.port}"],
            env=env, stdout=self.log, stderr=self.log, stdin=subprocess.DEVNULL,
        )
        self.peak_rss_kib = 0
        self.cpu_s = 0.0

    def metrics(self):
        try:
            text = urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5).read().decode()
        except OSError:
            return None
        return parse_metrics(text)

    def sample(self):
        """CPU seconds and peak RSS so far (kept after the process ends)."""
        try:
            with open(f"/proc/{self.proc.pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            self.cpu_s = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
            with open(f"/proc/{self.proc.pid}/status") as f:
                hwm = re.search(r"VmHWM:\s+(\d+)", f.read())
            self.peak_rss_kib = max(self.peak_rss_kib, int(hwm.group(1)))
        except (OSError, AttributeError):
            pass

    def leading(self):
        m = self.metrics()
        return bool(m and m.get("sandpool_operator_leader", 0) == 1)

    def stop(self, sig=signal.SIGTERM):
        self.sample()
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def parse_metrics(text):
    out = {}
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        name, _, value = line.rpartition(" ")
        try:
            out[name] = float(value)
        except ValueError:
            pass
    return out


def quantile(metrics, q, before=None):
    """Prometheus' histogram_quantile over the reconcile histogram (optionally a delta)."""
    prefix = "sandpool_operator_reconcile_duration_seconds_bucket{le="
    buckets = []
    for k, v in metrics.items():
        if k.startswith(prefix):
            le = k[len(prefix) + 1 : -2]
            v -= (before or {}).get(k, 0)
            buckets.append((float("inf") if le == "+Inf" else float(le), v))
    buckets.sort()
    if not buckets or buckets[-1][1] == 0:
        return None
    rank = q * buckets[-1][1]
    lower, below = 0.0, 0.0
    for le, count in buckets:
        if count >= rank:
            if le == float("inf"):
                return lower
            return lower + (le - lower) * (rank - below) / max(count - below, 1e-9)
        lower, below = le, count
    return lower


# --- the cluster's view ----------------------------------------------------------------------


def pools():
    return kubectl_json("get", "sandboxpools.sandpool.dev", "-A", "-l", LABEL)["items"]


def ready(pool):
    st = pool.get("status") or {}
    return st.get("observedGeneration") == pool["metadata"].get("generation") and any(
        c["type"] == "Ready" and c["status"] == "True" for c in st.get("conditions", [])
    )


def wait_pools(want, timeout, op=None, on_progress=None):
    start = time.time()
    while True:
        ps = pools()
        n = sum(1 for p in ps if ready(p))
        if op:
            for o in op:
                o.sample()
        if on_progress:
            on_progress(n)
        if n >= want and len(ps) == want:
            return time.time() - start
        if time.time() - start > timeout:
            raise SystemExit(f"only {n}/{want} pools Ready after {timeout} s")
        time.sleep(2)


class Audit:
    """The operator's writes, from the API server's audit log (Metadata level, writes only)."""

    def __init__(self, path):
        self.path = path

    def writes(self, since, until=None):
        out = []
        with open(self.path) as f:
            for line in f:
                if USER not in line:
                    continue
                e = json.loads(line)
                if e.get("user", {}).get("username") != USER or e.get("stage") != "ResponseComplete":
                    continue
                t = datetime.datetime.fromisoformat(e["requestReceivedTimestamp"].replace("Z", "+00:00"))
                if t < since or (until and t >= until):
                    continue
                ref = e.get("objectRef", {})
                res = ref.get("resource", "?") + ("/" + ref["subresource"] if ref.get("subresource") else "")
                out.append((e["verb"], res, ref.get("namespace"), ref.get("name"), e.get("responseStatus", {}).get("code")))
        return out

    def wait_quiet(self, quiet_s, timeout):
        """Waits until the operator wrote nothing but its Lease for quiet_s seconds."""
        start = time.time()
        while time.time() - start < timeout:
            recent = [w for w in self.writes(now() - datetime.timedelta(seconds=quiet_s)) if w[1] != "leases"]
            if not recent and time.time() - start >= quiet_s:
                return
            time.sleep(2)
        log(f"the operator kept writing for {timeout} s")


def summarize(writes):
    by = collections.Counter(f"{verb} {res}" for verb, res, *_ in writes)
    return dict(by.most_common())


def not_lease(writes):
    return [w for w in writes if w[1] != "leases"]


# --- phases ----------------------------------------------------------------------------------


def pool_items(args, namespaces, generation_note="1", extra_replicas=0):
    items = []
    for i in range(args.pools):
        ns = namespaces[i % len(namespaces)]
        items.append(
            {
                "apiVersion": "sandpool.dev/v1alpha1",
                "kind": "SandboxPool",
                "metadata": {"name": f"pool-{i}", "namespace": ns, "labels": {LABEL: "1"}},
                "spec": {
                    "replicas": args.replicas + extra_replicas,
                    # Small requests: kwok nodes have room for pods (110 each), not for real CPUs.
                    "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}},
                    "limits": {"wallTime": f"{generation_note}0s"},
                },
            }
        )
    return items


def children_check(expected_pools, replicas):
    """Every pool has exactly one Deployment it controls, and no Deployment lacks its pool."""
    uids = {(p["metadata"]["namespace"], p["metadata"]["name"]): p["metadata"]["uid"] for p in pools()}
    deps = kubectl_json("get", "deployments", "-A", "-l", "sandpool.dev/pool")["items"]
    owned = collections.Counter()
    problems = []
    for d in deps:
        ns, name = d["metadata"]["namespace"], d["metadata"]["name"]
        if not ns.startswith("scale-"):
            continue
        refs = [r for r in d["metadata"].get("ownerReferences", []) if r.get("controller")]
        if len(refs) != 1 or (ns, refs[0]["name"]) not in uids or uids[(ns, refs[0]["name"])] != refs[0]["uid"]:
            problems.append(f"{ns}/{name}: owner {refs}")
            continue
        owned[(ns, refs[0]["name"])] += 1
    for key in uids:
        if owned[key] != 1:
            problems.append(f"{key[0]}/{key[1]}: {owned[key]} Deployments")
    pods = kubectl_json("get", "pods", "-A", "-l", "sandpool.dev/pool", "--field-selector=status.phase=Running")["items"]
    pods = [p for p in pods if p["metadata"]["namespace"].startswith("scale-") and not p["metadata"].get("deletionTimestamp")]
    if len(pods) != expected_pools * replicas:
        problems.append(f"{len(pods)} running pods, want {expected_pools * replicas}")
    return problems


def lease():
    r = kubectl_json("get", "lease", "sandpool-operator", "-n", BENCH_NS)["spec"]
    return r.get("holderIdentity"), r.get("leaseTransitions", 0)


def events_per_pool(n):
    evs = kubectl_json("get", "events.events.k8s.io", "-A")["items"]
    mine = [e for e in evs if (e.get("regarding") or {}).get("kind") == "SandboxPool" and e["metadata"]["namespace"].startswith("scale-")]
    per = collections.Counter((e["metadata"]["namespace"], e["regarding"]["name"]) for e in mine)
    count = sum(e.get("deprecatedCount") or 1 if not e.get("series") else e["series"]["count"] for e in mine)
    return len(mine) / max(n, 1), max(per.values(), default=0), count / max(n, 1)


def run(args):
    global KUBECTL
    KUBECTL, audit_path = cluster_env()
    audit = Audit(audit_path)
    binary = args.operator or next(
        (p for p in (f"{ROOT}/target/release/sandpool-operator", f"{ROOT}/target/debug/sandpool-operator") if os.path.exists(p)),
        None,
    )
    if not binary:
        raise SystemExit("no sandpool-operator binary: cargo build -p sandpool-operator (or --operator PATH)")
    # Names of this run's own, so a run never waits for the last run's namespaces to go.
    run_id = os.urandom(3).hex()
    namespaces = [f"scale-{run_id}-{i}" for i in range(args.namespaces)]
    dir = tempfile.mkdtemp(prefix="sandpool-scale-")
    results = {"pools": args.pools, "namespaces": args.namespaces, "replicas": args.replicas, "nodes": args.nodes,
               "operator": os.path.relpath(binary, ROOT), "load_1m_start": os.getloadavg()[0]}
    added_nodes = []
    ops = []
    extra_env = {}
    try:
        added_nodes = ensure_nodes(args.nodes)
        kubeconfig = prepare(dir, namespaces, binary)
        start_op = lambda ident: ops.append(Operator(binary, kubeconfig, ident, dir, extra_env)) or ops[-1]
        a = start_op("scale-a")
        deadline = time.time() + 60
        while not a.leading():
            if a.proc.poll() is not None or time.time() > deadline:
                raise SystemExit(f"the operator did not lead (log: {a.log.name})")
            time.sleep(0.5)
        _, transitions0 = lease()
        b = start_op("scale-b") if args.failover else None

        # fill
        log(f"fill: {args.pools} pools x {args.replicas} in {args.namespaces} namespaces on {args.nodes} nodes")
        m0 = a.metrics()
        t0 = now()
        apply_list(pool_items(args, namespaces), verb="create")
        created_s = (now() - t0).total_seconds()
        killed = {}

        def failover(n):
            if b and not killed and n >= args.pools // 3:
                leader = a if a.leading() else b
                leader.stop(signal.SIGKILL)
                killed.update(identity=leader.identity, at_ready=n, t=time.time())
                log(f"failover: killed leader {leader.identity} with {n}/{args.pools} pools Ready")

        results["fill_ready_s"] = round(wait_pools(args.pools, args.timeout, ops, failover), 1)
        results["create_requests_s"] = round(created_s, 1)
        audit.wait_quiet(args.settle, args.timeout)
        t1 = now()
        live = [o for o in ops if o.proc.poll() is None]
        leader = next((o for o in live if o.leading()), live[0])
        fill = audit.writes(t0, t1)
        results["fill_writes"] = summarize(not_lease(fill))
        results["writes_per_pool_created"] = round(len(not_lease(fill)) / args.pools, 2)
        results["status_writes_per_pool_created"] = round(sum(1 for w in fill if w[1].endswith("/status")) / args.pools, 2)
        m1 = leader.metrics()
        before = m0 if leader is a else None
        results["reconcile_p50_ms"] = round(1000 * (quantile(m1, 0.5, before) or 0), 1)
        results["reconcile_p99_ms"] = round(1000 * (quantile(m1, 0.99, before) or 0), 1)
        results["reconciles_per_pool_fill"] = round(
            (m1.get("sandpool_operator_reconciles_total", 0) - (before or {}).get("sandpool_operator_reconciles_total", 0)) / args.pools, 1)
        if b:
            holder, transitions = lease()
            problems = children_check(args.pools, args.replicas)
            results["failover"] = {"killed": killed.get("identity"), "killed_at_ready": killed.get("at_ready"),
                                   "new_leader": holder, "leader_transitions": transitions - transitions0,
                                   "problems": problems[:10]}

        # quiet
        log(f"quiet: {args.quiet} s at rest")
        tq = now()
        time.sleep(args.quiet)
        quiet = audit.writes(tq, now())
        results["quiet_s"] = args.quiet
        results["quiet_writes_lease"] = len(quiet) - len(not_lease(quiet))
        results["quiet_writes_not_lease"] = len(not_lease(quiet))
        results["quiet_writes"] = summarize(not_lease(quiet))

        # One replica under the fill's load: a lease lost to slow renewals shows here.
        _, transitions = lease()
        results["leader_transitions"] = transitions - transitions0
        ev_per_pool, ev_max, ev_count = events_per_pool(args.pools)
        results["events_per_pool"] = round(ev_per_pool, 2)
        results["events_max_one_pool"] = ev_max
        results["event_occurrences_per_pool"] = round(ev_count, 2)

        # restart
        if not args.failover:
            log("restart: the operator again, at full size")
            leader.stop()
            for o in ops:
                o.sample()
            results["cpu_s_fill_quiet"] = round(sum(o.cpu_s for o in ops), 1)
            results["peak_rss_mib"] = round(max(o.peak_rss_kib for o in ops) / 1024, 1)
            tr = now()
            c = start_op("scale-c")
            start = time.time()
            while True:
                m = c.metrics() or {}
                if m.get("sandpool_operator_reconciles_total", 0) >= args.pools:
                    break
                if time.time() - start > args.timeout:
                    raise SystemExit("the restarted operator did not reconcile every pool")
                c.sample()
                time.sleep(0.5)
            results["restart_resync_s"] = round(time.time() - start, 1)
            audit.wait_quiet(args.settle, args.timeout)
            restart = audit.writes(tr, now())
            results["restart_writes_not_lease"] = len(not_lease(restart))
            results["restart_writes"] = summarize(not_lease(restart))
            leader = c

            # change
            log("change: every pool's spec once")
            tc = now()
            # scale: one more replica each (cheap); rollout: a new pod template, every pod
            # replaced at the controller-manager's pace (minutes at 1,000 pods here).
            if args.change == "rollout":
                apply_list(pool_items(args, namespaces, generation_note="2"))
            else:
                apply_list(pool_items(args, namespaces, extra_replicas=1))
            results["change_ready_s"] = round(wait_pools(args.pools, args.timeout, ops), 1)
            audit.wait_quiet(args.settle, args.timeout)
            change = audit.writes(tc, now())
            results["change"] = args.change
            results["writes_per_pool_changed"] = round(len(not_lease(change)) / args.pools, 2)
            results["change_writes"] = summarize(not_lease(change))

        # delete
        log("delete: every pool")
        td = now()
        kubectl("delete", "sandboxpools.sandpool.dev", "-A", "-l", LABEL, "--wait=false")
        deadline = time.time() + args.timeout
        while pools() and time.time() < deadline:
            time.sleep(2)
        audit.wait_quiet(args.settle, args.timeout)
        delete = audit.writes(td, now())
        results["writes_per_pool_deleted"] = round(len(not_lease(delete)) / args.pools, 2)
        results["delete_writes"] = summarize(not_lease(delete))
        for o in ops:
            o.sample()
        results["cpu_s"] = round(sum(o.cpu_s for o in ops), 1)
        results["peak_rss_mib"] = round(max(o.peak_rss_kib for o in ops) / 1024, 1)
        results["load_1m_end"] = os.getloadavg()[0]
    finally:
        for o in ops:
            o.stop()
        if not args.keep:
            kubectl("delete", "sandboxpools.sandpool.dev", "-A", "-l", LABEL, "--wait=false", check=False)
            kubectl("delete", "namespace", "-l", LABEL, "--wait=false", check=False)
            kubectl("delete", "clusterrolebinding,clusterrole", "sandpool-scale-operator", check=False)
            if added_nodes:
                kubectl("delete", "node", *added_nodes, "--wait=false", check=False)
        log(f"operator logs in {dir}")
    return results


def report(r, check):
    rows = [
        ("pools x replicas / namespaces / nodes", f"{r['pools']} x {r['replicas']} / {r['namespaces']} / {r['nodes']}"),
        ("every pool Ready after apply (s)", r.get("fill_ready_s")),
        ("reconcile p50 / p99 (ms)", f"{r.get('reconcile_p50_ms')} / {r.get('reconcile_p99_ms')}"),
        ("reconciles per pool (fill)", r.get("reconciles_per_pool_fill")),
        ("writes per pool created", r.get("writes_per_pool_created")),
        ("  of which status", r.get("status_writes_per_pool_created")),
        ("writes per pool changed", r.get("writes_per_pool_changed")),
        ("writes per pool deleted", r.get("writes_per_pool_deleted")),
        (f"writes in {r.get('quiet_s')} s at rest (lease / other)", f"{r.get('quiet_writes_lease')} / {r.get('quiet_writes_not_lease')}"),
        ("resync after restart (s) / writes", f"{r.get('restart_resync_s')} / {r.get('restart_writes_not_lease')}"),
        ("Events per pool (max one pool)", f"{r.get('events_per_pool')} ({r.get('events_max_one_pool')})"),
        ("leader transitions (fill and rest)", r.get("leader_transitions")),
        ("operator CPU (s) / peak RSS (MiB)", f"{r.get('cpu_s')} / {r.get('peak_rss_mib')}"),
        ("load average (start / end)", f"{r['load_1m_start']:.1f} / {r.get('load_1m_end', 0):.1f}"),
    ]
    if "failover" in r:
        f = r["failover"]
        rows.append(("failover: killed at Ready / new leader", f"{f['killed']} at {f['killed_at_ready']} / {f['new_leader']}"))
        rows.append(("failover: children problems", len(f["problems"])))
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"{k:<{width}}  {v}")
    print("SCALE_JSON " + json.dumps(r, sort_keys=True))
    failures = []
    if check:
        for key, limit in THRESHOLDS.items():
            if key == "writes_per_pool_changed" and r.get("change") == "scale":
                limit = THRESHOLDS["writes_per_pool_changed_scale"]
            if key in r and r[key] > limit:
                failures.append(f"{key} = {r[key]} > {limit}")
        f = r.get("failover")
        if f:
            if f["problems"]:
                failures.append(f"failover left children wrong: {f['problems']}")
            if f["leader_transitions"] != 1:
                failures.append(f"{f['leader_transitions']} leader transitions, want exactly 1 (the kill)")
        elif r.get("leader_transitions"):
            failures.append(f"{r['leader_transitions']} leader transitions with one replica: a lease was lost")
    for f in failures:
        print(f"scale: REGRESSION: {f}", file=sys.stderr)
    return not failures


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pools", type=int, default=100)
    p.add_argument("--namespaces", type=int, default=10)
    p.add_argument("--replicas", type=int, default=10)
    p.add_argument("--nodes", type=int, default=12, help="kwok nodes (110 pods each)")
    p.add_argument("--quiet", type=int, default=60, help="seconds at rest to count writes in")
    p.add_argument("--settle", type=int, default=8, help="seconds without operator writes that end a phase")
    p.add_argument("--timeout", type=int, default=900, help="seconds any phase may take")
    p.add_argument("--change", choices=["scale", "rollout"], default="scale",
                   help="the change phase: one more replica per pool, or a new pod template")
    p.add_argument("--failover", action="store_true", help="two replicas; kill the leader mid-fill")
    p.add_argument("--operator", help="sandpool-operator binary (default target/release, then target/debug)")
    p.add_argument("--check", action="store_true", help="exit 1 when a write budget regresses")
    p.add_argument("--keep", action="store_true", help="leave pools, namespaces and nodes behind")
    args = p.parse_args()
    ok = report(run(args), args.check)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
