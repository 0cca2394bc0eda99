//! Judges a whole dataset over several `EvaluateStream`s at once.
//!
//! Several streams, because a stream stays on one executor: stream k goes to
//! executor k mod n, so a run spreads over every pod. A stream that breaks
//! (a pod stopped, a connection reset) or ends early (a draining executor)
//! hands its unanswered requests back to be sent on the others, and is
//! reopened after a pause, on the executors a `dns:` endpoint names now (a
//! deleted pod's replacement has a new address). A SANDBOX_ERROR answer is
//! sent again; so is a request an executor refused as draining or full
//! (UNAVAILABLE, RESOURCE_EXHAUSTED: its own answers, not the request's fault),
//! and a draining executor's stream is ended from this side so no more go to it.
//! A `dns:` endpoint is also resolved again every few seconds: when the pool's
//! pods change, streams move over once their requests are answered.
//! Nothing is dropped silently: what never got an answer is reported at the end.

use anyhow::bail;
use sandpool_proto::v1 as pb;
use std::collections::{HashMap, HashSet, VecDeque};
use std::time::Duration;
use tokio::sync::mpsc;

type Client = crate::target::Client;
type Executors = crate::target::Executors;

/// Resends of a request an executor refused as draining or full, beyond which its refusal is
/// the answer: about a minute and a half of pauses, longer than a pod's drain.
const REFUSED_RESENDS: u32 = 30;

/// How a dataset is spread.
#[derive(Debug, Clone, Copy)]
pub struct Spread {
    /// Streams open at once.
    pub streams: usize,
    /// Requests in flight over all streams.
    pub concurrency: usize,
    /// Resends of a request answered SANDBOX_ERROR.
    pub retries: u32,
    /// Reopenings of a stream in a row without an answer before it is given up.
    pub reopen_attempts: u32,
}

/// What the stream tasks and timers tell the dispatcher.
enum Event {
    Response(usize, Box<pb::EvaluateResponse>),
    /// The stream ended, with the error that ended it, if any.
    Closed(usize, Option<tonic::Status>),
    /// A request's pause after SANDBOX_ERROR is over.
    Resend(usize),
    /// A closed stream's pause is over: open it again.
    Reopen(usize),
    /// Time to resolve a `dns:` endpoint again: pods that came since (a scale-up, a
    /// replacement) get streams too.
    Refresh,
}

/// How often a `dns:` endpoint is resolved again during a run.
const REFRESH_EVERY: Duration = Duration::from_secs(5);

#[derive(Default)]
struct Stream {
    tx: Option<mpsc::Sender<pb::EvaluateRequest>>,
    /// The executor it was opened to.
    uri: String,
    in_flight: HashSet<usize>,
    /// Closures since this stream's last answer.
    failures: u32,
    given_up: bool,
}

/// Opens stream `k`; its answers and its end arrive as events.
fn open(
    client: &Client,
    k: usize,
    cap: usize,
    events: &mpsc::UnboundedSender<Event>,
) -> mpsc::Sender<pb::EvaluateRequest> {
    let (tx, rx) = mpsc::channel(cap.max(1));
    let (mut client, events) = (client.clone(), events.clone());
    tokio::spawn(async move {
        let mut inbound = match client
            .evaluate_stream(tokio_stream::wrappers::ReceiverStream::new(rx))
            .await
        {
            Ok(r) => r.into_inner(),
            Err(s) => {
                let _ = events.send(Event::Closed(k, Some(s)));
                return;
            }
        };
        loop {
            match inbound.message().await {
                Ok(Some(m)) => {
                    if events.send(Event::Response(k, Box::new(m))).is_err() {
                        return;
                    }
                }
                Ok(None) => {
                    let _ = events.send(Event::Closed(k, None));
                    return;
                }
                Err(s) => {
                    let _ = events.send(Event::Closed(k, Some(s)));
                    return;
                }
            }
        }
    });
    tx
}

/// A stream error no reopening can fix.
fn fatal(s: &tonic::Status) -> bool {
    use tonic::Code::*;
    matches!(
        s.code(),
        InvalidArgument | Unimplemented | PermissionDenied | Unauthenticated
    )
}

/// Sends `event` to the dispatcher after `pause`, without holding it up meanwhile.
fn later(events: &mpsc::UnboundedSender<Event>, pause: Duration, event: Event) {
    let events = events.clone();
    tokio::spawn(async move {
        tokio::time::sleep(pause).await;
        let _ = events.send(event);
    });
}

fn pause(attempt: u32) -> Duration {
    Duration::from_millis(200 << attempt.min(4))
}

/// Ends every open stream's requests and waits (briefly) until the executor has ended its side:
/// a process that exits with streams half-open resets them, which the executor sees as a
/// broken stream.
async fn close(streams: &mut [Stream], events: &mut mpsc::UnboundedReceiver<Event>) {
    let mut open: HashSet<usize> = (0..streams.len()).filter(|&k| streams[k].tx.is_some()).collect();
    streams.iter_mut().for_each(|s| s.tx = None);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
    while !open.is_empty() {
        match tokio::time::timeout_at(deadline, events.recv()).await {
            Ok(Some(Event::Closed(k, _))) => {
                open.remove(&k);
            }
            Ok(Some(_)) => {}
            Ok(None) | Err(_) => break,
        }
    }
}

/// Requests that never got an answer, because every stream gave up.
#[derive(Debug)]
pub struct Unanswered {
    pub count: usize,
    /// The last error a stream ended with.
    pub why: String,
}

/// Judges every request (ids must be distinct); `on_result(index, response, attempts)` is
/// called once per request as its answer is final. An error when an executor refused a
/// stream outright (e.g. UNIMPLEMENTED) or `on_result` failed.
pub async fn evaluate_all(
    mut executors: Executors,
    requests: &[pb::EvaluateRequest],
    spread: Spread,
    mut on_result: impl FnMut(usize, pb::EvaluateResponse, u32) -> anyhow::Result<()>,
) -> anyhow::Result<Option<Unanswered>> {
    let index: HashMap<&str, usize> = requests.iter().enumerate().map(|(i, r)| (r.id.as_str(), i)).collect();
    if index.len() != requests.len() {
        bail!("request ids must be distinct");
    }
    if executors.is_empty() {
        bail!("no executor to send to");
    }
    // At least one stream per executor: stream k goes to executor k mod n, so fewer streams
    // than executors would leave some idle. Requests go to the stream with the fewest in flight.
    let n_streams = spread.streams.max(executors.len()).clamp(1, spread.concurrency.max(1));
    let per_stream = spread.concurrency.div_ceil(n_streams);
    let (events_tx, mut events) = mpsc::unbounded_channel();
    let mut streams: Vec<Stream> = (0..n_streams)
        .map(|k| Stream {
            tx: Some(open(&executors.for_stream(k), k, per_stream, &events_tx)),
            uri: executors.uri_for_stream(k).to_owned(),
            ..Default::default()
        })
        .collect();
    if executors.resolves() {
        // Ends when the dispatcher has returned and dropped its receiver.
        let ticks = events_tx.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(REFRESH_EVERY).await;
                if ticks.send(Event::Refresh).is_err() {
                    return;
                }
            }
        });
    }
    let mut pending: VecDeque<usize> = (0..requests.len()).collect();
    let mut attempts = vec![0u32; requests.len()];
    let mut refused = vec![0u32; requests.len()];
    let mut waiting = 0usize; // pausing before a resend
    let mut done = 0usize;
    let mut last_error: Option<tonic::Status> = None;

    while done < requests.len() {
        // Fill every open stream up to its share.
        let mut in_flight: usize = streams.iter().map(|s| s.in_flight.len()).sum();
        while in_flight < spread.concurrency {
            let Some(k) = (0..n_streams)
                .filter(|&k| streams[k].tx.is_some() && streams[k].in_flight.len() < per_stream)
                .min_by_key(|&k| streams[k].in_flight.len())
            else {
                break;
            };
            let Some(i) = pending.pop_front() else { break };
            let sent = streams[k]
                .tx
                .as_ref()
                .is_some_and(|tx| tx.try_send(requests[i].clone()).is_ok());
            if !sent {
                // Its task ended; the Closed event is on its way.
                pending.push_front(i);
                streams[k].tx = None;
                continue;
            }
            attempts[i] += 1;
            streams[k].in_flight.insert(i);
            in_flight += 1;
        }
        if in_flight == 0 && waiting == 0 && streams.iter().all(|s| s.given_up) {
            break;
        }
        let Some(ev) = events.recv().await else { break };
        match ev {
            Event::Response(k, resp) => {
                let Some(&i) = index.get(resp.id.as_str()) else {
                    bail!("EvaluateStream: response with unknown id {:?}", resp.id);
                };
                if !streams[k].in_flight.remove(&i) {
                    bail!("EvaluateStream: unexpected or repeated id {:?}", resp.id);
                }
                streams[k].failures = 0;
                let refusal = resp.error.as_ref().map(|e| tonic::Code::from(e.code));
                let retryable = matches!(refusal, Some(tonic::Code::Unavailable | tonic::Code::ResourceExhausted));
                if retryable && refused[i] < REFUSED_RESENDS {
                    if refusal == Some(tonic::Code::Unavailable) {
                        // Draining: send it nothing more. It ends the stream once its own work is
                        // done, and the stream reopens on whatever executors there are then.
                        streams[k].tx = None;
                    }
                    refused[i] += 1;
                    waiting += 1;
                    later(&events_tx, pause(refused[i]), Event::Resend(i));
                    continue;
                }
                if resp.verdict == pb::Verdict::SandboxError as i32 && attempts[i] <= spread.retries {
                    // Not the code's fault: send it again after a pause.
                    waiting += 1;
                    later(&events_tx, pause(attempts[i]), Event::Resend(i));
                    continue;
                }
                done += 1;
                on_result(i, *resp, attempts[i])?;
            }
            Event::Closed(k, status) => {
                let s = &mut streams[k];
                s.tx = None;
                // Unanswered requests go first, on the other streams.
                let mut back: Vec<usize> = s.in_flight.drain().collect();
                back.sort_unstable_by(|a, b| b.cmp(a));
                back.into_iter().for_each(|i| pending.push_front(i));
                if done == requests.len() {
                    continue;
                }
                if let Some(st) = &status {
                    tracing::warn!(stream = k, code = ?st.code(), message = st.message(), "EvaluateStream broke; resending its requests");
                    if fatal(st) {
                        bail!("EvaluateStream: {}: {}", st.code(), st.message());
                    }
                }
                last_error = status.or(last_error);
                s.failures += 1;
                if s.failures > spread.reopen_attempts {
                    s.given_up = true;
                    continue;
                }
                later(&events_tx, pause(s.failures), Event::Reopen(k));
            }
            Event::Resend(i) => {
                waiting -= 1;
                pending.push_front(i);
            }
            Event::Reopen(k) => {
                executors.refresh().await;
                streams[k].tx = Some(open(&executors.for_stream(k), k, per_stream, &events_tx));
                streams[k].uri = executors.uri_for_stream(k).to_owned();
            }
            Event::Refresh => {
                if executors.refresh().await {
                    for (k, s) in streams.iter_mut().enumerate() {
                        if s.given_up {
                            // It gave up on executors that are gone; there are others now.
                            s.given_up = false;
                            s.failures = 0;
                            s.tx = Some(open(&executors.for_stream(k), k, per_stream, &events_tx));
                            s.uri = executors.uri_for_stream(k).to_owned();
                        } else if s.tx.is_some() && s.uri != executors.uri_for_stream(k) {
                            // Its executor is no longer its share: it ends from this side once
                            // its requests are answered, and reopens where it now belongs.
                            s.tx = None;
                        }
                    }
                }
            }
        }
    }
    close(&mut streams, &mut events).await;
    let count = requests.len() - done;
    Ok((count > 0).then(|| Unanswered {
        count,
        why: last_error.map_or_else(
            || "the streams kept ending".to_owned(),
            |s| format!("{:?}: {}", s.code(), s.message()),
        ),
    }))
}
