#!/usr/bin/env python3
"""Splits the chart's rendered monitoring objects into files promtool checks.

Usage: monitoring-rules.py RENDERED.yaml ALERT_TESTS.yaml DASHBOARD.json OUT_DIR

Writes OUT_DIR/rules.yaml (the PrometheusRule's spec, a Prometheus rule file) and
OUT_DIR/dashboard-rules.yaml (every query of the dashboard ConfigMap, and every variable's
selector, as a recording rule, so `promtool check rules` parses them), and fails when an
alert has no unit test in ALERT_TESTS that expects it to fire, or when the ConfigMap's
dashboard is not DASHBOARD.json. Used by check-manifests.sh.
"""
import json
import os
import re
import sys

import yaml

rendered, alert_tests, dashboard_file, out = sys.argv[1:5]
docs = [d for d in yaml.safe_load_all(open(rendered)) if isinstance(d, dict)]
(rule,) = [d for d in docs if d.get("kind") == "PrometheusRule"]
with open(os.path.join(out, "rules.yaml"), "w") as f:
    yaml.safe_dump(rule["spec"], f)

(cm,) = [d for d in docs if d.get("kind") == "ConfigMap" and d["metadata"]["name"].endswith("-dashboard")]
(text,) = cm["data"].values()
dashboard = json.loads(text)
if dashboard != json.load(open(dashboard_file)):
    sys.exit(f"the dashboard ConfigMap does not carry {dashboard_file}")
exprs = []


def walk(panels):
    for panel in panels:
        walk(panel.get("panels", []))
        exprs.extend(t["expr"] for t in panel.get("targets", []))


walk(dashboard["panels"])
for var in dashboard["templating"]["list"]:
    if var.get("type") == "query":
        # label_values(SELECTOR, LABEL): the selector must parse.
        m = re.fullmatch(r"label_values\((.*),\s*\w+\)", var["query"]["query"])
        if not m:
            sys.exit(f"variable {var['name']}: not label_values(selector, label): {var['query']}")
        exprs.append(m.group(1))
if len(exprs) < 20:
    sys.exit(f"only {len(exprs)} dashboard queries found")


def concrete(expr):
    # Grafana's variables, replaced by values of their kind.
    return expr.replace("$__rate_interval", "5m").replace("$namespace", ".*").replace("$pool", ".*")


rules = [{"record": f"dashboard:query_{i}", "expr": concrete(e)} for i, e in enumerate(exprs)]
with open(os.path.join(out, "dashboard-rules.yaml"), "w") as f:
    yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}, f)

tests = yaml.safe_load(open(alert_tests))
tested = {t["alertname"] for g in tests["tests"] for t in g.get("alert_rule_test", []) if t.get("exp_alerts")}
alerts = {r["alert"] for g in rule["spec"]["groups"] for r in g["rules"] if "alert" in r}
if alerts - tested:
    sys.exit(f"alerts without a unit test that fires them: {sorted(alerts - tested)}")
print(f"{len(alerts)} alerts, {len(exprs)} dashboard queries")
