//! The gateway through the reconcile loop: applied after the executors for HTTP pools, its
//! replicas in the status, and removed (its NetworkPolicy last) when turned off.

use super::*;

const GW_SA: &str = "/api/v1/namespaces/evals/serviceaccounts/python-gateway";
const GW_ROLE: &str = "/apis/rbac.authorization.k8s.io/v1/namespaces/evals/roles/python-gateway";
const GW_RB: &str = "/apis/rbac.authorization.k8s.io/v1/namespaces/evals/rolebindings/python-gateway";
const GW_SVC: &str = "/api/v1/namespaces/evals/services/python-gateway";
const GW_DEPLOY: &str = "/apis/apps/v1/namespaces/evals/deployments/python-gateway";

fn http_spec() -> Value {
    let mut spec = spec();
    spec["access"] = json!({"http": true});
    spec
}

fn delete(path: &'static str, live: &Value) -> Reply {
    Reply {
        method: Method::DELETE,
        path,
        status: StatusCode::OK,
        body: Some(live.clone()),
    }
}

#[tokio::test]
async fn an_http_pool_gets_its_gateway_after_its_executors() {
    let pool = pool(http_spec(), 1);
    let want = desired(&pool).gateway.expect("a gateway");
    let mut gw_deploy = stamped(want.deployment.clone());
    gw_deploy["status"] = json!({"replicas": 1, "readyReplicas": 1});
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
            get_missing(DEPLOY),
            apply(DEPLOY),
            get_missing(CM),
            get_missing(GW_SA),
            apply(GW_SA),
            get_missing(GW_ROLE),
            apply(GW_ROLE),
            get_missing(GW_RB),
            apply(GW_RB),
            get_missing(GW_NP),
            apply(GW_NP),
            get_missing(GW_SVC),
            apply(GW_SVC),
            get_missing(GW_DEPLOY),
            apply_returning(GW_DEPLOY, gw_deploy),
            apply(STATUS),
        ],
    )
    .await;
    result.expect("reconcile succeeds");
    let expected = [
        (12, stamped(want.service_account)),
        (14, stamped(want.role)),
        (16, stamped(want.role_binding)),
        (18, stamped(want.network_policy)),
        (20, stamped(want.service)),
        (22, stamped(want.deployment)),
    ];
    for (i, body) in expected {
        seen[i].assert_apply();
        assert_eq!(seen[i].body, body, "request #{}", i + 1);
    }
    let status = &seen[23].body["status"];
    assert_eq!(
        status["gateway"],
        json!({"replicas": 1, "readyReplicas": 1,
               "endpoint": "http://python-gateway.evals.svc.cluster.local:8080"})
    );
    assert!(
        writes(&ctx).contains("kind=\"Role\",outcome=\"created\"} 1"),
        "{}",
        writes(&ctx)
    );
}

#[tokio::test]
async fn a_gateway_turned_off_is_removed_networkpolicy_last_and_only_if_ours() {
    let with_gateway = pool(http_spec(), 1);
    let gw = desired(&with_gateway).gateway.expect("a gateway");
    // Deletion reads only identity and ownership (`as_live` knows the executor's pod).
    let live = |mut object: Value| {
        object["metadata"]["uid"] = json!("child-uid");
        object["metadata"]["resourceVersion"] = json!("42");
        object
    };
    let (gw_sa, gw_role, gw_rb, gw_np, gw_svc, gw_deploy) = (
        live(stamped(gw.service_account)),
        live(stamped(gw.role)),
        live(stamped(gw.role_binding)),
        live(stamped(gw.network_policy)),
        live(stamped(gw.service)),
        live(stamped(gw.deployment)),
    );
    let mut spec = http_spec();
    spec["gateway"] = json!({"enabled": false});
    let pool = pool(spec, 2);
    let [sa, np, svc, pdb, deploy] = live_children(&pool, 3);
    let (result, seen, ctx) = run(
        pool.clone(),
        vec![
            get(SA, sa.clone()),
            get(NP, np.clone()),
            get(SVC, svc.clone()),
            get(PDB, pdb.clone()),
            get(DEPLOY, deploy.clone()),
            get_missing(CM),
            get(GW_NP, gw_np.clone()),
            get(GW_DEPLOY, gw_deploy.clone()),
            delete(GW_DEPLOY, &gw_deploy),
            get(GW_SVC, gw_svc.clone()),
            delete(GW_SVC, &gw_svc),
            get(GW_RB, gw_rb.clone()),
            delete(GW_RB, &gw_rb),
            get(GW_ROLE, gw_role.clone()),
            delete(GW_ROLE, &gw_role),
            get(GW_SA, gw_sa.clone()),
            delete(GW_SA, &gw_sa),
            get(GW_NP, gw_np.clone()),
            delete(GW_NP, &gw_np),
            apply(STATUS),
        ],
    )
    .await;
    result.expect("reconcile succeeds");
    assert_eq!(seen[18].method, Method::DELETE, "the NetworkPolicy goes last");
    assert!(seen[19].body["status"].get("gateway").is_none(), "{}", seen[19].body);
    assert!(writes(&ctx).contains("kind=\"NetworkPolicy\",outcome=\"deleted\"} 1"));

    // Objects of those names that are not the pool's are left alone.
    let foreign = |mut object: Value| {
        object["metadata"]["ownerReferences"][0]["uid"] = json!("someone-else");
        object
    };
    let (result, seen, _ctx) = run(
        pool,
        vec![
            get(SA, sa),
            get(NP, np),
            get(SVC, svc),
            get(PDB, pdb),
            get(DEPLOY, deploy),
            get_missing(CM),
            get(GW_NP, foreign(gw_np.clone())),
            get(GW_DEPLOY, foreign(gw_deploy)),
            get(GW_SVC, foreign(gw_svc)),
            get(GW_RB, foreign(gw_rb)),
            get(GW_ROLE, foreign(gw_role)),
            get(GW_SA, foreign(gw_sa)),
            get(GW_NP, foreign(gw_np)),
            apply(STATUS),
        ],
    )
    .await;
    result.expect("reconcile succeeds");
    assert!(
        seen.iter()
            .all(|s| s.method == Method::GET || s.path.ends_with("/status")),
        "{seen:?}"
    );
}
