//! The tenants ConfigMap through the reconcile loop: applied before the Deployment that
//! mounts it, deleted after the Deployment stops mounting it, and never a Secret read.

use super::*;

fn tenants_spec() -> Value {
    let mut spec = spec();
    spec["tenants"] = json!([
        {"name": "rl", "tokenSecretRef": {"name": "rl-token", "key": "token"}, "weight": 3},
        {"name": "sweeps", "tokenSecretRef": {"name": "sweeps-token", "key": "token"}, "maxPriority": "batch"},
    ]);
    spec
}

#[tokio::test]
async fn a_pool_with_tenants_gets_its_config_map_before_its_deployment() {
    let pool = pool(tenants_spec(), 1);
    let want = desired(&pool);
    let config_map = want.tenants.clone().expect("a ConfigMap for the tenants");
    let (result, seen, ctx) = run(
        pool,
        vec![
            get_missing(SA),
            apply(SA),
            get_missing(NP),
            apply(NP),
            get_missing(SVC),
            apply(SVC),
            get_missing(PDB),
            apply(PDB),
            get_missing(CM),
            apply(CM),
            get_missing(DEPLOY),
            apply(DEPLOY),
            get_missing(GW_NP),
            apply(STATUS),
        ],
    )
    .await;
    result.expect("reconcile succeeds");
    let cm_write = &seen[9];
    cm_write.assert_apply();
    assert_eq!(cm_write.body, stamped(config_map));
    assert_eq!(cm_write.body["metadata"]["ownerReferences"][0]["uid"], "u-1");
    let file = cm_write.body["data"]["tenants.toml"].as_str().expect("tenants.toml");
    assert!(file.contains("token_file = \"/sandpool-tenants/rl/token\""), "{file}");
    let env = &seen[11].body["spec"]["template"]["spec"]["containers"][0]["env"];
    assert!(
        env.as_array()
            .expect("env")
            .contains(&json!({"name": "SANDPOOL_TENANTS_FILE", "value": "/sandpool-tenants-config/tenants.toml"})),
        "{env}"
    );
    assert!(
        seen.iter().all(|s| !s.path.contains("/secrets")),
        "the operator never touches the tenants' Secrets"
    );
    assert!(
        writes(&ctx).contains("kind=\"ConfigMap\",outcome=\"created\"} 1"),
        "{}",
        writes(&ctx)
    );
}

#[tokio::test]
async fn a_steady_pool_with_tenants_makes_no_writes() {
    let mut pool = pool(tenants_spec(), 1);
    pool.status = Some(settled_status(&pool, 3));
    let [sa, np, svc, pdb, deploy] = live_children(&pool, 3);
    let cm = as_live(stamped(desired(&pool).tenants.expect("ConfigMap")));
    let (result, seen, ctx) = run(
        pool,
        vec![
            get(SA, sa),
            get(NP, np),
            get(SVC, svc),
            get(PDB, pdb),
            get(CM, cm),
            get(DEPLOY, deploy),
            get_missing(GW_NP),
        ],
    )
    .await;
    result.expect("reconcile succeeds");
    assert!(seen.iter().all(|s| s.method == Method::GET), "{seen:?}");
    assert_eq!(writes(&ctx), "sandpool_operator_status_writes_total 0");
}

#[tokio::test]
async fn a_weight_change_rewrites_the_config_map_and_leaves_the_pods_alone() {
    let old = pool(tenants_spec(), 1);
    let [sa, np, svc, pdb, deploy] = live_children(&old, 3);
    let cm = as_live(stamped(desired(&old).tenants.expect("ConfigMap")));
    let mut new_spec = tenants_spec();
    new_spec["tenants"][0]["weight"] = json!(5);
    let mut pool = pool(new_spec, 2);
    pool.status = Some(settled_status(&old, 3));
    let (result, seen, _ctx) = run(
        pool,
        vec![
            get(SA, sa),
            get(NP, np),
            get(SVC, svc),
            get(PDB, pdb),
            get(CM, cm),
            apply(CM),
            get(DEPLOY, deploy),
            get_missing(GW_NP),
            apply(STATUS),
        ],
    )
    .await;
    result.expect("reconcile succeeds");
    let patches: Vec<&str> = seen
        .iter()
        .filter(|s| s.method == Method::PATCH)
        .map(|s| s.path.as_str())
        .collect();
    assert_eq!(patches, [CM, STATUS], "the executor re-reads the file: no rollout");
    assert!(
        seen[5].body["data"]["tenants.toml"]
            .as_str()
            .is_some_and(|f| f.contains("weight = 5")),
        "{}",
        seen[5].body
    );
}

#[tokio::test]
async fn dropping_tenants_deletes_the_config_map_after_the_deployment_stops_mounting_it() {
    let old = pool(tenants_spec(), 1);
    let [sa, np, svc, pdb, deploy] = live_children(&old, 3);
    let cm = as_live(stamped(desired(&old).tenants.expect("ConfigMap")));
    let mut pool = pool(spec(), 2);
    pool.status = Some(settled_status(&old, 3));
    let new_deploy = live_children(&pool, 3)[4].clone();
    let (result, seen, ctx) = run(
        pool.clone(),
        vec![
            get(SA, sa.clone()),
            get(NP, np.clone()),
            get(SVC, svc.clone()),
            get(PDB, pdb.clone()),
            get(DEPLOY, deploy),
            apply_returning(DEPLOY, new_deploy.clone()),
            get(CM, cm.clone()),
            Reply {
                method: Method::DELETE,
                path: CM,
                status: StatusCode::OK,
                body: Some(cm.clone()),
            },
            get_missing(GW_NP),
            apply(STATUS),
        ],
    )
    .await;
    result.expect("reconcile succeeds");
    assert_eq!(seen[5].method, Method::PATCH, "the Deployment first");
    assert_eq!((&seen[7].method, seen[7].path.as_str()), (&Method::DELETE, CM));
    assert!(
        writes(&ctx).contains("kind=\"ConfigMap\",outcome=\"deleted\"} 1"),
        "{}",
        writes(&ctx)
    );

    // A ConfigMap of that name that is not the pool's is left alone.
    let mut foreign = cm;
    foreign["metadata"]["ownerReferences"][0]["uid"] = json!("someone-else");
    let (result, seen, _ctx) = run(
        pool,
        vec![
            get(SA, sa),
            get(NP, np),
            get(SVC, svc),
            get(PDB, pdb),
            get(DEPLOY, new_deploy),
            get(CM, foreign),
            get_missing(GW_NP),
            apply(STATUS),
        ],
    )
    .await;
    result.expect("reconcile succeeds");
    assert!(
        seen.iter().all(|s| s.method != Method::DELETE),
        "a ConfigMap we do not own is left alone"
    );
}

#[tokio::test]
async fn tenants_with_auth_are_refused_and_nothing_is_applied() {
    let mut spec = tenants_spec();
    spec["auth"] = json!({"enabled": true});
    let (result, seen, events, _ctx) =
        run_with_events(pool(spec, 4), vec![apply(STATUS)], OperatorConfig::default()).await;
    assert_eq!(result.expect("not retried"), Action::await_change());
    assert_eq!(seen.len(), 1, "no child object may be touched");
    let (ready, reason, message) = condition(&seen[0].body["status"], "Ready");
    assert_eq!((ready.as_str(), reason.as_str()), ("False", "InvalidSpec"));
    assert!(
        message.starts_with("spec.tenants: ") && message.contains("spec.auth.enabled"),
        "{message}"
    );
    assert_eq!(event_summary(&events)[0].1, "InvalidSpec");
}

#[tokio::test]
async fn a_role_without_configmaps_still_reconciles_pools_without_tenants() {
    let (pool, [sa, np, svc, pdb, deploy]) = {
        let mut pool = pool(spec(), 1);
        pool.status = Some(settled_status(&pool, 3));
        let children = live_children(&pool, 3);
        (pool, children)
    };
    let (result, seen, _ctx) = run(
        pool,
        vec![
            get(SA, sa),
            get(NP, np),
            get(SVC, svc),
            get(PDB, pdb),
            get(DEPLOY, deploy),
            api_error(
                Method::GET,
                CM,
                403,
                "Forbidden",
                "configmaps \"python-tenants\" is forbidden: User \"system:serviceaccount:x:y\" cannot get resource \"configmaps\"",
            ),
            get_missing(GW_NP),
        ],
    )
    .await;
    assert_eq!(
        result.expect("not worth failing the reconcile for"),
        Action::requeue(RESYNC)
    );
    assert!(seen.iter().all(|s| s.method == Method::GET), "{seen:?}");
}
