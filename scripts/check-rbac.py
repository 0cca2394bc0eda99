import json, sys, yaml
rules = json.load(open(sys.argv[1]))
docs = [d for d in yaml.safe_load_all(open(sys.argv[2])) if isinstance(d, dict)]
mode = sys.argv[3]  # namespaced | cluster-wide | cluster-wide-selector

def want(*scopes):
    return {(r["apiGroup"], r["resource"], v) for r in rules if r["scope"] in scopes for v in r["verbs"]}

def grants(doc):
    return {(g, res, v) for rule in doc.get("rules", []) for g in rule["apiGroups"]
            for res in rule["resources"] for v in rule["verbs"]}

roles = {(d["kind"], d["metadata"]["name"]): d for d in docs if d["kind"] in ("Role", "ClusterRole")}
lease = [d for (k, n), d in roles.items() if n.endswith("-leader-election")]
main = [d for (k, n), d in roles.items() if not n.endswith("-leader-election") and not n.endswith("-manage")]
manage = [d for (k, n), d in roles.items() if n.endswith("-manage")]
problems = []

def compare(label, got, expected):
    if got != expected:
        problems.append(f"{label}: extra {sorted(got - expected)}, missing {sorted(expected - got)}")

if mode.startswith("cluster-wide"):
    if [d["kind"] for d in main] != ["ClusterRole"] or len(manage) != 1:
        problems.append(f"expected a ClusterRole and a -manage ClusterRole, got {sorted(roles)}")
    else:
        extra = ["namespaceSelector"] if mode == "cluster-wide-selector" else []
        compare("ClusterRole", grants(main[0]), want("watch", *extra))
        compare("-manage ClusterRole", grants(manage[0]), want("manage"))
else:
    if [d["kind"] for d in main] != ["Role"] or manage:
        problems.append(f"expected one Role, got {sorted(roles)}")
    else:
        compare("Role", grants(main[0]), want("watch", "manage"))
if len(lease) != 1:
    problems.append("no leader-election Role")
else:
    compare("leader-election Role", grants(lease[0]), want("lease"))
for d in docs:
    if d["kind"] in ("Role", "ClusterRole"):
        for rule in d.get("rules", []):
            if "*" in rule["verbs"] or "*" in rule["resources"] or "*" in rule["apiGroups"]:
                problems.append(f"{d['metadata']['name']}: wildcard in {rule}")
            # The operator writes the gateway's Role; it must hold what that grants, never
            # the verbs that would let it grant more.
            risky = {"escalate", "bind", "impersonate"} & set(rule["verbs"])
            if risky:
                problems.append(f"{d['metadata']['name']}: {sorted(risky)} in {rule}")
print("\n".join(problems))
sys.exit(1 if problems else 0)
