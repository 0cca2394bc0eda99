//! Leader election with a coordination.k8s.io Lease, so two operator replicas never
//! reconcile at once.

use kube::Client;
use kube_lease_manager::{LeaseManagerBuilder, LeaseManagerError};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Name of the Lease the replicas compete for.
pub const LEASE_NAME: &str = "sandpool-operator";
/// Seconds a lease stays valid without renewal: how long a dead leader blocks failover.
pub const LEASE_DURATION_S: u64 = 15;
/// Seconds before expiry at which the holder renews.
pub const LEASE_GRACE_S: u64 = 5;

/// Leadership of this replica.
pub struct Leadership {
    state: watch::Receiver<bool>,
    task: JoinHandle<Result<kube_lease_manager::LeaseManager, LeaseManagerError>>,
}

impl Leadership {
    /// Starts competing for the lease in `namespace` as `identity`.
    pub async fn start(client: Client, namespace: &str, identity: &str) -> Result<Self, LeaseManagerError> {
        let manager = LeaseManagerBuilder::new(client, LEASE_NAME)
            .with_namespace(namespace)
            .with_identity(identity)
            .with_duration(LEASE_DURATION_S)
            .with_grace(LEASE_GRACE_S)
            .build()
            .await?;
        let (state, task) = manager.watch().await;
        Ok(Self { state, task })
    }

    /// Waits until this replica leads. Returns false if the elector stopped first.
    pub async fn acquired(&mut self) -> bool {
        self.state.wait_for(|leading| *leading).await.is_ok()
    }

    /// A future that completes when this replica stops leading.
    pub fn lost(&self) -> impl Future<Output = ()> + Send + Sync + 'static {
        let mut state = self.state.clone();
        async move {
            let _ = state.wait_for(|leading| !*leading).await;
        }
    }

    /// Gives the lease up (closing the channel makes the elector release it) and waits
    /// briefly for that to reach the API server, so a standby takes over without waiting
    /// for expiry.
    pub async fn release(self) {
        drop(self.state);
        match tokio::time::timeout(std::time::Duration::from_secs(5), self.task).await {
            Ok(Ok(Ok(_))) => tracing::info!("released the leader lease"),
            Ok(Ok(Err(error))) => {
                tracing::warn!(error = %crate::error_chain(&error), "could not release the leader lease")
            }
            Ok(Err(error)) => tracing::warn!(error = %crate::error_chain(&error), "leader election task failed"),
            Err(_) => tracing::warn!("timed out releasing the leader lease; it will expire"),
        }
    }
}
