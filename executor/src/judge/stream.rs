//! Many requests on one stream: each is judged as soon as the stream delivers
//! it and answered as it finishes, so a slow one never holds back the others.
//!
//! Flow control: at most [`in_flight`] requests of one stream are being judged
//! or waiting to be sent back; past that the stream is not read, so HTTP/2
//! flow control pushes back on the client.

use super::Judge;
use crate::call::Call;
use crate::error::ExecError;
use futures::{Stream, StreamExt};
use sandpool_proto::v1 as pb;
use std::sync::Arc;
use tokio::sync::{Semaphore, mpsc};

/// Requests of one stream held at once: enough to keep every slot busy.
pub fn in_flight(judge: &Judge) -> usize {
    let a = &judge.engine().admission();
    (2 * a.slots() + a.queue_capacity()).max(2)
}

/// Judges every request of `input` as `call` (the stream's deadline and caller); the
/// responses arrive on the returned channel, tagged by id.
///
/// Each request is charged to the byte budget from when it is read until its answer is
/// queued: one past the budget is answered with `to_error` at once, unjudged.
/// `to_error` turns a rejected request's error into the response's `error`.
pub fn judge_stream<S>(
    judge: Judge,
    mut input: S,
    call: Call,
    to_error: fn(ExecError) -> pb::RequestError,
) -> mpsc::Receiver<pb::EvaluateResponse>
where
    S: Stream<Item = pb::EvaluateRequest> + Send + Unpin + 'static,
{
    let limit = in_flight(&judge);
    let (tx, rx) = mpsc::channel(limit);
    let permits = Arc::new(Semaphore::new(limit));
    tokio::spawn(async move {
        loop {
            let Ok(permit) = permits.clone().acquire_owned().await else {
                break;
            };
            let Some(req) = input.next().await else {
                break;
            };
            if tx.is_closed() {
                break;
            }
            let (judge, tx) = (judge.clone(), tx.clone());
            let charge = judge.engine().budget().charge();
            let call = Call {
                charge: Some(charge.clone()),
                ..call.clone()
            };
            tokio::spawn(async move {
                let id = req.id.clone();
                let taken = charge.take(prost::Message::encoded_len(&req) as u64);
                // A client that went away cancels its work: dropping the future kills the runs.
                let res = match taken {
                    Err(e) => Err(e.into()),
                    Ok(()) => tokio::select! {
                        r = judge.evaluate(req, call) => r,
                        _ = tx.closed() => return,
                    },
                };
                let resp = match res {
                    Ok(r) => r,
                    Err(e) => pb::EvaluateResponse {
                        id,
                        error: Some(to_error(e)),
                        ..Default::default()
                    },
                };
                // The permit is held until the response is queued: a client that
                // stops reading stops the stream from being read.
                let _ = tx.send(resp).await;
                drop(permit);
                drop(charge);
            });
        }
    });
    rx
}
