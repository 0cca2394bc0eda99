//! The byte budget on the gRPC server: a tower layer that charges each `sandpool.v1.Executor`
//! call's request as it arrives (before tonic buffers and decodes it), hands the charge to
//! the handler in the request's extensions (for files read on the call's behalf), and keeps
//! it until the reply's body has been sent. A request's body must also arrive within a
//! deadline: a client that sends part of one and stalls holds its charge that long at most.
//!
//! Health and reflection are never charged (a kubelet probe must not be refused because
//! callers are busy), nor is `EvaluateStream`'s body: a stream lives for hours, so each of
//! its requests is charged once decoded, until its answer is queued
//! ([`crate::judge::stream`]).

use super::{ByteBudget, Charge};
use bytes::Bytes;
use http_body::{Body as HttpBody, Frame, SizeHint};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use tonic::body::Body;

/// The calls the layer charges: every method of the Executor service but the stream.
fn charged(path: &str) -> bool {
    path.starts_with("/sandpool.v1.Executor/") && path != "/sandpool.v1.Executor/EvaluateStream"
}

/// Charges request bodies against `budget`, each of which must arrive within
/// `body_timeout`; see the module doc.
#[derive(Debug, Clone)]
pub struct BudgetLayer {
    budget: ByteBudget,
    body_timeout: std::time::Duration,
}

impl BudgetLayer {
    pub fn new(budget: ByteBudget, body_timeout: std::time::Duration) -> Self {
        BudgetLayer { budget, body_timeout }
    }
}

impl<S> tower::Layer<S> for BudgetLayer {
    type Service = Budgeted<S>;
    fn layer(&self, inner: S) -> Self::Service {
        Budgeted {
            inner,
            budget: self.budget.clone(),
            body_timeout: self.body_timeout,
        }
    }
}

/// The service [`BudgetLayer`] makes.
#[derive(Debug, Clone)]
pub struct Budgeted<S> {
    inner: S,
    budget: ByteBudget,
    body_timeout: std::time::Duration,
}

type BoxFuture<T, E> = Pin<Box<dyn Future<Output = Result<T, E>> + Send>>;

impl<S> tower::Service<http::Request<Body>> for Budgeted<S>
where
    S: tower::Service<http::Request<Body>, Response = http::Response<Body>>,
    S::Future: Send + 'static,
{
    type Response = http::Response<Body>;
    type Error = S::Error;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<Body>) -> Self::Future {
        if !charged(req.uri().path()) {
            return Box::pin(self.inner.call(req));
        }
        let charge = self.budget.charge();
        let (mut parts, body) = req.into_parts();
        parts.extensions.insert(charge.clone());
        let body = Body::new(Charged {
            inner: body,
            charge: charge.clone(),
            prefix: Vec::with_capacity(PREFIX),
            seen: 0,
            charged: 0,
            deadline: Box::pin(tokio::time::sleep(self.body_timeout)),
            timeout: self.body_timeout,
        });
        let fut = self.inner.call(http::Request::from_parts(parts, body));
        Box::pin(async move {
            let resp = fut.await?;
            Ok(resp.map(|inner| Body::new(Holding { inner, _charge: charge })))
        })
    }
}

/// A request body charged as it arrives: the whole message at once when its gRPC length
/// prefix (a flag byte and a big-endian u32) has arrived, so a request either gets room
/// for all of itself or is refused before any more of it is read, and many large requests
/// arriving together cannot each take a part and starve one another. Past the budget the
/// body ends with `RESOURCE_EXHAUSTED`, which tonic answers the call with; a body still
/// arriving at its deadline ends with `DEADLINE_EXCEEDED`.
struct Charged {
    inner: Body,
    charge: Charge,
    /// The message's first bytes, until its 5-byte prefix is complete.
    prefix: Vec<u8>,
    /// Bytes of the body seen, and bytes charged for (ahead of what was seen, once the prefix said).
    seen: u64,
    charged: u64,
    /// When the whole body must have arrived, and that limit's length (for the message).
    deadline: Pin<Box<tokio::time::Sleep>>,
    timeout: std::time::Duration,
}

/// gRPC's length prefix: a compression flag byte and the message's length.
const PREFIX: usize = 5;

impl Charged {
    /// Accounts for `data`, the next bytes of the body.
    fn arrived(&mut self, data: &[u8]) -> Result<(), super::Exhausted> {
        if self.prefix.len() < PREFIX {
            let need = (PREFIX - self.prefix.len()).min(data.len());
            self.prefix.extend_from_slice(&data[..need]);
        }
        self.seen += data.len() as u64;
        let declared = match self.prefix.get(1..PREFIX) {
            Some(len) => PREFIX as u64 + u64::from(u32::from_be_bytes([len[0], len[1], len[2], len[3]])),
            None => 0,
        };
        let want = self.seen.max(declared);
        if want > self.charged {
            self.charge.take(want - self.charged)?;
            self.charged = want;
        }
        Ok(())
    }
}

impl HttpBody for Charged {
    type Data = Bytes;
    type Error = tonic::Status;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let frame = match Pin::new(&mut self.inner).poll_frame(cx) {
            Poll::Ready(f) => f,
            Poll::Pending => {
                if self.deadline.as_mut().poll(cx).is_ready() {
                    let msg = format!(
                        "the request did not arrive within {} ms (--grpc-body-timeout-ms)",
                        self.timeout.as_millis()
                    );
                    return Poll::Ready(Some(Err(tonic::Status::deadline_exceeded(msg))));
                }
                return Poll::Pending;
            }
        };
        if let Some(Ok(f)) = &frame
            && let Some(data) = f.data_ref()
        {
            let data = data.clone();
            if let Err(e) = self.arrived(&data) {
                return Poll::Ready(Some(Err(tonic::Status::resource_exhausted(e.to_string()))));
            }
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A reply body that keeps its request's charge until it has been sent: the reply
/// (fetched files, say) is in memory until then.
struct Holding {
    inner: Body,
    _charge: Charge,
}

impl HttpBody for Holding {
    type Data = Bytes;
    type Error = tonic::Status;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn charged_body(budget: &ByteBudget) -> Charged {
        Charged {
            inner: Body::empty(),
            charge: budget.charge(),
            prefix: Vec::new(),
            seen: 0,
            charged: 0,
            deadline: Box::pin(tokio::time::sleep(std::time::Duration::from_secs(60))),
            timeout: std::time::Duration::from_secs(60),
        }
    }

    #[tokio::test]
    async fn a_message_is_charged_whole_once_its_prefix_arrived_even_split() {
        let budget = ByteBudget::new(100);
        let mut b = charged_body(&budget);
        // The prefix split over two frames: 3 bytes, then 2 more and the first payload byte.
        b.arrived(&[0, 0, 0]).expect("3 bytes");
        assert_eq!(budget.in_use(), 3);
        b.arrived(&[0, 60, 1]).expect("prefix complete: 65 bytes reserved");
        assert_eq!(budget.in_use(), 65);
        b.arrived(&[1; 59]).expect("within the reservation");
        assert_eq!(budget.in_use(), 65);
        // A second message of 40 bytes would need room the budget no longer has...
        let mut other = charged_body(&budget);
        assert!(other.arrived(&[0, 0, 0, 0, 40]).is_err(), "45 > 35 left");
        assert_eq!(budget.in_use(), 65, "a refused message holds nothing");
        // ...and a body longer than it said is still charged for every byte.
        b.arrived(&[1; 10]).expect("10 more");
        assert_eq!(budget.in_use(), 75);
        drop(b);
        assert_eq!(budget.in_use(), 0);
    }

    #[test]
    fn only_executor_calls_but_the_stream_are_charged() {
        assert!(charged("/sandpool.v1.Executor/Execute"));
        assert!(charged("/sandpool.v1.Executor/GetSessionFiles"));
        assert!(!charged("/sandpool.v1.Executor/EvaluateStream"));
        assert!(!charged("/grpc.health.v1.Health/Check"));
        assert!(!charged("/grpc.reflection.v1.ServerReflection/ServerReflectionInfo"));
    }
}
