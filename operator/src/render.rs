//! `render`: every object the operator would apply for some pools, as YAML, with no cluster.

use kube::Resource;
use serde::Deserialize;

use crate::build::Children;
use crate::config::OperatorConfig;
use crate::crd::SandboxPool;
use crate::plan::{self, Plan, Refusal};

/// Why rendering failed.
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    /// The input is not YAML made of SandboxPool documents.
    #[error("document {index}: not a SandboxPool: {source}")]
    Parse {
        /// 1-based position of the document in the input.
        index: usize,
        /// The parser's complaint.
        source: serde_yaml::Error,
    },
    /// A document of another kind.
    #[error("document {index}: not a sandpool.dev/v1alpha1 SandboxPool")]
    NotAPool {
        /// 1-based position of the document in the input.
        index: usize,
    },
    /// A pool the operator would refuse (it would set Ready=False with the refusal's reason,
    /// InvalidSpec or PolicyRefused).
    #[error("SandboxPool {name}: {source}")]
    Refused {
        /// Pool name.
        name: String,
        /// The refused field and why.
        source: Refusal,
    },
    /// Serializing an object failed (not expected for well-formed objects).
    #[error("cannot serialize {what}: {source}")]
    Serialize {
        /// The object being written.
        what: String,
        /// The serializer's complaint.
        source: serde_yaml::Error,
    },
}

/// Reads SandboxPool documents from `input` (multi-document YAML; non-SandboxPool documents
/// are an error) and renders their children, in apply order, as one multi-document YAML.
pub fn render(input: &str, config: &OperatorConfig, namespace: &str) -> Result<String, RenderError> {
    let mut out = String::new();
    for (i, document) in serde_yaml::Deserializer::from_str(input).enumerate() {
        let value =
            serde_yaml::Value::deserialize(document).map_err(|source| RenderError::Parse { index: i + 1, source })?;
        if value.is_null() {
            continue; // an empty document, e.g. after a trailing `---`
        }
        let type_of = (value["apiVersion"].as_str(), value["kind"].as_str());
        let (version, kind) = (SandboxPool::api_version(&()), SandboxPool::kind(&()));
        if type_of != (Some(version.as_ref()), Some(kind.as_ref())) {
            return Err(RenderError::NotAPool { index: i + 1 });
        }
        let pool: SandboxPool =
            serde_yaml::from_value(value).map_err(|source| RenderError::Parse { index: i + 1, source })?;
        let refused = |source| RenderError::Refused {
            name: pool.metadata.name.clone().unwrap_or_default(),
            source,
        };
        let Plan {
            children:
                Children {
                    service_account,
                    network_policy,
                    service,
                    disruption_budget,
                    tenants,
                    deployment,
                    gateway,
                },
            ..
        } = plan::plan(&pool, config, namespace).map_err(refused)?;
        push(&mut out, &service_account, "ServiceAccount")?;
        push(&mut out, &network_policy, "NetworkPolicy")?;
        push(&mut out, &service, "Service")?;
        if let Some(pdb) = &disruption_budget {
            push(&mut out, pdb, "PodDisruptionBudget")?;
        }
        if let Some(config_map) = &tenants {
            push(&mut out, config_map, "ConfigMap")?;
        }
        push(&mut out, &deployment, "Deployment")?;
        if let Some(gateway) = &gateway {
            push(&mut out, &gateway.service_account, "ServiceAccount")?;
            push(&mut out, &gateway.role, "Role")?;
            push(&mut out, &gateway.role_binding, "RoleBinding")?;
            push(&mut out, &gateway.network_policy, "NetworkPolicy")?;
            push(&mut out, &gateway.service, "Service")?;
            push(&mut out, &gateway.deployment, "Deployment")?;
        }
    }
    Ok(out)
}

fn push<T: serde::Serialize>(out: &mut String, object: &T, what: &str) -> Result<(), RenderError> {
    out.push_str("---\n");
    out.push_str(&serde_yaml::to_string(object).map_err(|source| RenderError::Serialize {
        what: what.to_owned(),
        source,
    })?);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const TWO_POOLS: &str = "\
apiVersion: sandpool.dev/v1alpha1
kind: SandboxPool
metadata: {name: cpu, namespace: evals}
spec: {replicas: 2}
---
apiVersion: sandpool.dev/v1alpha1
kind: SandboxPool
metadata: {name: nobudget}
spec: {disruptionBudget: {enabled: false}}
---
";

    #[test]
    fn renders_every_child_of_every_pool_in_apply_order() {
        let out = render(TWO_POOLS, &OperatorConfig::default(), "fallback").expect("renders");
        let kinds: Vec<(String, String, String)> = serde_yaml::Deserializer::from_str(&out)
            .map(|doc| {
                let v = serde_yaml::Value::deserialize(doc).expect("rendered YAML parses");
                let s = |path: &[&str]| {
                    path.iter()
                        .fold(&v, |v, k| &v[*k])
                        .as_str()
                        .unwrap_or_default()
                        .to_owned()
                };
                (s(&["kind"]), s(&["metadata", "name"]), s(&["metadata", "namespace"]))
            })
            .collect();
        let expect = |k: &str, n: &str, ns: &str| (k.to_owned(), n.to_owned(), ns.to_owned());
        assert_eq!(
            kinds,
            vec![
                expect("ServiceAccount", "cpu", "evals"),
                expect("NetworkPolicy", "cpu", "evals"),
                expect("Service", "cpu", "evals"),
                expect("PodDisruptionBudget", "cpu", "evals"),
                expect("Deployment", "cpu", "evals"),
                expect("ServiceAccount", "nobudget", "fallback"),
                expect("NetworkPolicy", "nobudget", "fallback"),
                expect("Service", "nobudget", "fallback"),
                expect("Deployment", "nobudget", "fallback"),
            ]
        );
        assert!(
            !out.contains("ownerReferences"),
            "pools from a file have no uid to own by"
        );
    }

    #[test]
    fn a_pool_with_tenants_renders_its_config_map_before_its_deployment() {
        let input = "apiVersion: sandpool.dev/v1alpha1\nkind: SandboxPool\nmetadata: {name: shared}\n\
                     spec: {tenants: [{name: rl, tokenSecretRef: {name: rl-token, key: token}}]}\n";
        let out = render(input, &OperatorConfig::default(), "evals").expect("renders");
        let kinds: Vec<String> = serde_yaml::Deserializer::from_str(&out)
            .map(|doc| {
                let v = serde_yaml::Value::deserialize(doc).expect("rendered YAML parses");
                v["kind"].as_str().unwrap_or_default().to_owned()
            })
            .collect();
        assert_eq!(
            kinds,
            [
                "ServiceAccount",
                "NetworkPolicy",
                "Service",
                "PodDisruptionBudget",
                "ConfigMap",
                "Deployment"
            ]
        );
        assert!(out.contains("name: shared-tenants"), "{out}");
    }

    #[test]
    fn invalid_pools_name_the_field() {
        let input = "apiVersion: sandpool.dev/v1alpha1\nkind: SandboxPool\nmetadata: {name: bad}\nspec: {limits: {wallTime: soon}}\n";
        let err = render(input, &OperatorConfig::default(), "x").expect_err("must refuse");
        assert_eq!(
            err.to_string(),
            "SandboxPool bad: invalid spec: spec.limits.wallTime: \"soon\" is not a duration like 500ms, 10s or 1m30s"
        );
    }

    #[test]
    fn pools_the_policy_refuses_name_the_field() {
        let input = "apiVersion: sandpool.dev/v1alpha1\nkind: SandboxPool\nmetadata: {name: evil}\nspec: {image: docker.io/library/ubuntu:24.04}\n";
        let err = render(input, &OperatorConfig::default(), "x").expect_err("must refuse");
        assert!(
            err.to_string().starts_with(
                "SandboxPool evil: refused by the operator's policy: spec.image: \"docker.io/library/ubuntu:24.04\" is not allowed"
            ),
            "{err}"
        );
    }

    #[test]
    fn other_documents_are_refused() {
        let err = render(
            "kind: ConfigMap\nmetadata: {name: x}\n",
            &OperatorConfig::default(),
            "x",
        )
        .expect_err("must refuse");
        assert!(matches!(err, RenderError::NotAPool { index: 1 }), "{err}");
        let err = render(
            "apiVersion: sandpool.dev/v1alpha1\nkind: SandboxPool\nmetadata: {name: x}\nspec: {replicas: many}\n",
            &OperatorConfig::default(),
            "x",
        )
        .expect_err("must refuse");
        assert!(matches!(err, RenderError::Parse { index: 1, .. }), "{err}");
    }
}
