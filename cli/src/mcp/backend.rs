//! Where the tools' calls go: an executor embedded in this process, or remote
//! executors. A session lives on one executor; remote session calls go to the
//! address its create response named.

use crate::target::{Client, channels, client, endpoint_uri};
use sandpool_executor::config::ExecutorArgs;
use sandpool_executor::judge::Judge;
use sandpool_executor::service::ExecutorService;
use sandpool_executor::session::SessionManager;
use sandpool_proto::v1 as pb;
use sandpool_proto::v1::executor_server::Executor as _;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tonic::{Request, Status};

/// How long a session's route is kept when its create response gave no lifetime.
const DEFAULT_ROUTE_TTL: Duration = Duration::from_secs(24 * 3600);

/// Routes kept at most: past it the least recently used goes (its session, if still alive,
/// then answers "unknown" here and ends at its idle timeout). Bounds what a caller that
/// creates sessions and abandons them can make this server hold.
const MAX_ROUTES: usize = 65_536;

/// A remote session's executor.
#[derive(Clone)]
pub struct Route {
    client: Client,
    address: String,
    /// When the session's absolute lifetime ends: its route can go then.
    expires: Instant,
    /// The last call's start, for evicting the least recently used past [`MAX_ROUTES`].
    last_used: Instant,
}

pub enum Backend {
    /// The gRPC service itself, called in-process (no network, no token), and its
    /// sessions, to end them at shutdown.
    Embedded(ExecutorService, Arc<SessionManager>),
    Remote(Box<Remote>),
}

/// Remote executors.
pub struct Remote {
    balanced: Client,
    /// Send session calls to the address each create response names (else through `balanced`).
    route: bool,
    /// Clients by executor address, shared by that executor's sessions.
    by_address: Mutex<HashMap<String, Client>>,
    /// Sessions this server created, by id. Only addresses executors named go
    /// here, never one a caller supplies: a caller cannot point this server
    /// (and its token) at another host.
    routes: Mutex<HashMap<String, Route>>,
}

/// A session id this server does not know (remote), like the executor's NOT_FOUND.
fn unknown_session() -> Status {
    Status::not_found("no such session: unknown, closed or expired")
}

impl Backend {
    /// Connects to `endpoint` (routing session calls to their executors when `route`),
    /// or builds an embedded executor from `args`.
    pub async fn new(endpoint: Option<&str>, route: bool, args: &ExecutorArgs) -> anyhow::Result<Backend> {
        Ok(match endpoint {
            Some(e) => Backend::Remote(Box::new(Remote {
                balanced: client(channels(e).await?.balanced),
                route,
                by_address: Mutex::default(),
                routes: Mutex::default(),
            })),
            None => {
                let engine = Arc::new(args.build_engine().await?);
                // No address to advertise: every call stays in this process.
                let sessions = SessionManager::start(engine.clone(), args.session_policy(), String::new());
                Backend::Embedded(
                    ExecutorService::with_sessions(Judge::new(engine), sessions.clone()),
                    sessions,
                )
            }
        })
    }

    pub async fn execute(&self, req: pb::ExecuteRequest) -> Result<pb::ExecuteResponse, Status> {
        match self {
            Backend::Embedded(s, _) => Ok(s.execute(Request::new(req)).await?.into_inner()),
            Backend::Remote(r) => Ok(r.balanced.clone().execute(req).await?.into_inner()),
        }
    }

    pub async fn capabilities(&self) -> Result<pb::Capabilities, Status> {
        let req = pb::GetCapabilitiesRequest {};
        match self {
            Backend::Embedded(s, _) => Ok(s.get_capabilities(Request::new(req)).await?.into_inner()),
            Backend::Remote(r) => Ok(r.balanced.clone().get_capabilities(req).await?.into_inner()),
        }
    }

    pub async fn create_session(&self, req: pb::CreateSessionRequest) -> Result<pb::CreateSessionResponse, Status> {
        let Remote {
            balanced,
            route,
            by_address,
            routes,
        } = match self {
            Backend::Embedded(s, _) => return Ok(s.create_session(Request::new(req)).await?.into_inner()),
            Backend::Remote(r) => &**r,
        };
        let resp = balanced.clone().create_session(req).await?.into_inner();
        let address = resp.executor_address.clone();
        let client = if address.is_empty() || !route {
            balanced.clone()
        } else {
            let mut cache = by_address.lock().unwrap_or_else(|p| p.into_inner());
            match cache.get(&address) {
                Some(c) => c.clone(),
                None => {
                    // Lazy: the executor just answered through the balancer, and a
                    // failure to reach it shows on the session's first call.
                    let ch = tonic::transport::Endpoint::from_shared(endpoint_uri(&address))
                        .map_err(|e| Status::internal(format!("executor address {address:?}: {e}")))?
                        .connect_lazy();
                    let c = client(ch);
                    cache.insert(address.clone(), c.clone());
                    c
                }
            }
        };
        let lifetime = resp
            .session_limits
            .as_ref()
            .map(|l| Duration::from_millis(l.lifetime_ms))
            .filter(|d| !d.is_zero())
            .unwrap_or(DEFAULT_ROUTE_TTL);
        let now = Instant::now();
        let mut routes = routes.lock().unwrap_or_else(|p| p.into_inner());
        // Sessions that timed out on their executor were never closed here.
        routes.retain(|_, r| r.expires > now);
        if routes.len() >= MAX_ROUTES
            && let Some(oldest) = routes.iter().min_by_key(|(_, r)| r.last_used).map(|(id, _)| id.clone())
        {
            routes.remove(&oldest);
        }
        routes.insert(
            resp.session_id.clone(),
            Route {
                client,
                // Errors name where the calls went.
                address: if *route { address } else { "through --endpoint".into() },
                expires: now + lifetime,
                last_used: now,
            },
        );
        Ok(resp)
    }

    /// The session's route, marked as used now.
    fn route(&self, session_id: &str) -> Result<Route, Status> {
        match self {
            Backend::Remote(r) => {
                let mut routes = r.routes.lock().unwrap_or_else(|p| p.into_inner());
                let route = routes.get_mut(session_id).ok_or_else(unknown_session)?;
                route.last_used = Instant::now();
                Ok(route.clone())
            }
            Backend::Embedded(..) => Err(Status::internal("no routes in embedded mode")),
        }
    }

    fn forget(&self, session_id: &str) {
        if let Backend::Remote(r) = self {
            r.routes.lock().unwrap_or_else(|p| p.into_inner()).remove(session_id);
        }
    }

    /// A remote session call's status, made plain: a session whose executor cannot be
    /// reached is (probably) lost, and one the executor no longer knows is forgotten here.
    fn session_status(&self, session_id: &str, route: &Route, s: Status) -> Status {
        match s.code() {
            tonic::Code::NotFound => {
                self.forget(session_id);
                s
            }
            _ if unreachable(&s) => Status::unavailable(format!(
                "the executor holding this session ({}) cannot be reached: {}. If it died, the session is \
                 lost (its files and state are gone): create a new one",
                route.address,
                s.message()
            )),
            _ => s,
        }
    }

    pub async fn run_in_session(&self, req: pb::RunInSessionRequest) -> Result<pb::RunInSessionResponse, Status> {
        if let Backend::Embedded(s, _) = self {
            return Ok(s.run_in_session(Request::new(req)).await?.into_inner());
        }
        let id = req.session_id.clone();
        let route = self.route(&id)?;
        match route.client.clone().run_in_session(req).await {
            Ok(r) => Ok(r.into_inner()),
            Err(s) => Err(self.session_status(&id, &route, s)),
        }
    }

    pub async fn put_session_files(
        &self,
        req: pb::PutSessionFilesRequest,
    ) -> Result<pb::PutSessionFilesResponse, Status> {
        if let Backend::Embedded(s, _) = self {
            return Ok(s.put_session_files(Request::new(req)).await?.into_inner());
        }
        let id = req.session_id.clone();
        let route = self.route(&id)?;
        match route.client.clone().put_session_files(req).await {
            Ok(r) => Ok(r.into_inner()),
            Err(s) => Err(self.session_status(&id, &route, s)),
        }
    }

    pub async fn get_session_files(
        &self,
        req: pb::GetSessionFilesRequest,
    ) -> Result<pb::GetSessionFilesResponse, Status> {
        if let Backend::Embedded(s, _) = self {
            return Ok(s.get_session_files(Request::new(req)).await?.into_inner());
        }
        let id = req.session_id.clone();
        let route = self.route(&id)?;
        match route.client.clone().get_session_files(req).await {
            Ok(r) => Ok(r.into_inner()),
            Err(s) => Err(self.session_status(&id, &route, s)),
        }
    }

    pub async fn close_session(&self, req: pb::CloseSessionRequest) -> Result<pb::CloseSessionResponse, Status> {
        if let Backend::Embedded(s, _) = self {
            return Ok(s.close_session(Request::new(req)).await?.into_inner());
        }
        let id = req.session_id.clone();
        let route = self.route(&id)?;
        let r = route.client.clone().close_session(req).await;
        self.forget(&id);
        match r {
            Ok(r) => Ok(r.into_inner()),
            Err(s) => Err(self.session_status(&id, &route, s)),
        }
    }

    /// Closes the sessions this server created and still holds (at shutdown: an agent
    /// gone for good leaves none running until their idle timeout).
    pub async fn close_all(&self) {
        let routes: Vec<(String, Route)> = match self {
            Backend::Remote(r) => r.routes.lock().unwrap_or_else(|p| p.into_inner()).drain().collect(),
            Backend::Embedded(_, sessions) => return sessions.close_all().await,
        };
        let closing = routes.into_iter().map(|(id, r)| async move {
            let req = pb::CloseSessionRequest { session_id: id };
            let _ = tokio::time::timeout(Duration::from_secs(5), r.client.clone().close_session(req)).await;
        });
        futures::future::join_all(closing).await;
    }
}

/// True when `s` says the executor could not be reached: UNAVAILABLE, or the UNKNOWN
/// "transport error" of a connection its death cut mid-call.
fn unreachable(s: &Status) -> bool {
    match s.code() {
        tonic::Code::Unavailable => true,
        tonic::Code::Unknown => s.message().contains("transport error"),
        _ => false,
    }
}
