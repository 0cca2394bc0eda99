//! Request bodies: kept whole for a retry when small, streamed through otherwise.

use bytes::Bytes;
use futures::StreamExt;
use http_body::{Body, Frame};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, BodyStream, Full, StreamBody};
use std::time::Duration;

/// Any error a body may end with.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
/// The bodies the gateway sends: upstream requests, and responses to clients.
pub type BoxBody = UnsyncBoxBody<Bytes, BoxError>;

/// A request body made ready to send.
#[derive(Debug)]
pub enum Prepared {
    /// Read whole (it was small enough): may be sent more than once.
    Kept(Bytes),
    /// Too large to keep: streamed to one backend only.
    Streamed(BoxBody),
}

/// Why a body could not be made ready.
#[derive(Debug, thiserror::Error)]
pub enum BodyError {
    #[error("the request body did not arrive within {} ms", .0.as_millis())]
    Timeout(Duration),
    #[error("reading the request body: {0}")]
    Read(BoxError),
}

impl Prepared {
    /// The body for one attempt (a kept one is cheap to copy: `Bytes` is shared).
    pub fn body(&self) -> Option<BoxBody> {
        match self {
            Prepared::Kept(b) => Some(full(b.clone())),
            Prepared::Streamed(_) => None,
        }
    }

    pub fn is_kept(&self) -> bool {
        matches!(self, Prepared::Kept(_))
    }
}

/// A whole body.
pub fn full(b: Bytes) -> BoxBody {
    Full::new(b).map_err(|never| match never {}).boxed_unsync()
}

/// Reads `body` whole when it is at most `cap` bytes (within `timeout`); a larger one
/// (declared or found so) becomes a stream of what was read and the rest, unread, so
/// nothing past `cap` is ever held.
pub async fn prepare<B>(body: B, cap: usize, timeout: Duration) -> Result<Prepared, BodyError>
where
    B: Body<Data = Bytes> + Send + Unpin + 'static,
    B::Error: Into<BoxError>,
{
    if body.size_hint().lower() > cap as u64 {
        return Ok(Prepared::Streamed(body.map_err(Into::into).boxed_unsync()));
    }
    match tokio::time::timeout(timeout, read_up_to(body, cap)).await {
        Ok(r) => r,
        Err(_) => Err(BodyError::Timeout(timeout)),
    }
}

async fn read_up_to<B>(mut body: B, cap: usize) -> Result<Prepared, BodyError>
where
    B: Body<Data = Bytes> + Send + Unpin + 'static,
    B::Error: Into<BoxError>,
{
    let mut chunks: Vec<Bytes> = Vec::new();
    let mut len = 0usize;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| BodyError::Read(e.into()))?;
        let Ok(data) = frame.into_data() else {
            continue; // trailers: HTTP/1.1 clients of ours send none
        };
        len += data.len();
        chunks.push(data);
        if len > cap {
            let read = futures::stream::iter(chunks.into_iter().map(|b| Ok(Frame::data(b))));
            let rest = BodyStream::new(body).map(|f| f.map_err(Into::into));
            return Ok(Prepared::Streamed(StreamBody::new(read.chain(rest)).boxed_unsync()));
        }
    }
    let whole = match chunks.len() {
        0 => Bytes::new(),
        1 => chunks.pop().unwrap_or_default(),
        _ => {
            let mut buf = bytes::BytesMut::with_capacity(len);
            for c in chunks {
                buf.extend_from_slice(&c);
            }
            buf.freeze()
        }
    };
    Ok(Prepared::Kept(whole))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunked(parts: &[&'static [u8]]) -> BoxBody {
        let frames: Vec<Result<Frame<Bytes>, BoxError>> =
            parts.iter().map(|p| Ok(Frame::data(Bytes::from_static(p)))).collect();
        StreamBody::new(futures::stream::iter(frames)).boxed_unsync()
    }

    async fn all(b: BoxBody) -> Bytes {
        b.collect().await.expect("body").to_bytes()
    }

    #[tokio::test]
    async fn small_bodies_are_kept() {
        let p = prepare(chunked(&[b"ab", b"cd"]), 4, Duration::from_secs(1))
            .await
            .expect("ok");
        assert!(p.is_kept());
        assert_eq!(all(p.body().expect("kept")).await, "abcd");
    }

    #[tokio::test]
    async fn large_bodies_stream_whole_and_are_not_kept() {
        let p = prepare(chunked(&[b"ab", b"cd", b"e", b"fg"]), 4, Duration::from_secs(1))
            .await
            .expect("ok");
        let Prepared::Streamed(b) = p else {
            panic!("kept a body over the cap")
        };
        assert_eq!(all(b).await, "abcdefg");
    }

    #[tokio::test]
    async fn declared_large_bodies_are_not_read() {
        let p = prepare(full(Bytes::from_static(b"abcdef")), 4, Duration::from_secs(1))
            .await
            .expect("ok");
        assert!(!p.is_kept());
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_body_times_out() {
        let never = StreamBody::new(futures::stream::pending::<Result<Frame<Bytes>, BoxError>>()).boxed_unsync();
        let r = prepare(never, 4, Duration::from_secs(1)).await;
        assert!(matches!(r, Err(BodyError::Timeout(_))));
    }
}
