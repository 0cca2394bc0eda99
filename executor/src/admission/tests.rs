//! The scheduler's rules, on the queue itself (no runs): order of grants, caps, bounds.

use super::*;
use std::time::Duration;

fn tenant(name: &str, weight: u32) -> Arc<Tenant> {
    Arc::new(Tenant {
        name: name.into(),
        weight,
        max_concurrency: None,
        max_queue: None,
        max_sessions: None,
        max_priority: Priority::Interactive,
        authenticated: true,
        identity: 1,
    })
}

fn ticket(t: &Arc<Tenant>, p: Priority) -> Ticket {
    Ticket {
        tenant: t.clone(),
        priority: p,
    }
}

/// Queues `n` waiters of each ticket behind a held slot (in the order given, round by
/// round), then lets them run one at a time and returns the labels in grant order.
async fn grant_order(a: &Arc<Admission>, waiters: &[(&str, Ticket)], n: usize) -> Vec<String> {
    let held: Vec<_> = futures::future::join_all((0..a.slots()).map(|_| a.acquire(None))).await;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    for _ in 0..n {
        for (label, t) in waiters {
            let (a, t, tx, label) = (a.clone(), t.clone(), tx.clone(), label.to_string());
            tokio::spawn(async move {
                let g = a.acquire_as(&t, None, Admit::New).await.expect("admitted");
                // Sent before the slot goes on: the labels come out in grant order.
                tx.send(label).ok();
                drop(g);
            });
            // Each waiter queued before the next, so arrival order is the listed order.
            tokio::task::yield_now().await;
        }
    }
    drop(tx);
    assert_eq!(a.queued(), n * waiters.len());
    drop(held);
    let mut out = Vec::new();
    while let Some(l) = rx.recv().await {
        out.push(l);
    }
    out
}

#[tokio::test]
async fn full_queue_is_refused_and_deadline_gives_up() {
    let a = Admission::new(1, 1);
    let held = a.acquire(None).await.unwrap();
    let a2 = a.clone();
    let waiter = tokio::spawn(async move { a2.acquire(None).await.map(|g| g.index()) });
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(a.queued(), 1);
    assert_eq!(
        a.acquire(None).await.unwrap_err(),
        AdmissionError::QueueFull {
            tenant: "anonymous".into(),
            slots: 1,
            queue: 1
        }
    );
    drop(held);
    assert_eq!(waiter.await.unwrap().unwrap(), 0);

    let held = a.acquire(None).await.unwrap();
    let d = tokio::time::Instant::now() + Duration::from_millis(30);
    assert_eq!(a.acquire(Some(d)).await.unwrap_err(), AdmissionError::Deadline);
    assert_eq!(a.queued(), 0);
    drop(held);
    assert_eq!(a.busy(), 0, "the slot came back");
}

#[tokio::test]
async fn drain_refuses_queued_new_requests_but_not_continuing_ones() {
    let a = Admission::new(1, 4);
    let held = a.acquire(None).await.unwrap();
    let (a1, a2) = (a.clone(), a.clone());
    let queued = tokio::spawn(async move { a1.acquire(None).await.map(|g| g.index()) });
    let continuing = tokio::spawn(async move {
        a2.acquire_as(&Ticket::default(), None, Admit::Continuing)
            .await
            .map(|g| g.index())
    });
    tokio::time::sleep(Duration::from_millis(20)).await;
    a.drain();
    assert_eq!(queued.await.unwrap(), Err(AdmissionError::Draining));
    assert_eq!(a.acquire(None).await.unwrap_err(), AdmissionError::Draining);
    drop(held);
    assert_eq!(continuing.await.unwrap(), Ok(0));
}

#[tokio::test]
async fn slots_get_distinct_indices() {
    let a = Admission::new(3, 0);
    let g: Vec<_> = futures::future::join_all((0..3).map(|_| a.acquire(None))).await;
    let mut idx: Vec<usize> = g.iter().map(|g| g.as_ref().unwrap().index()).collect();
    idx.sort();
    assert_eq!(idx, vec![0, 1, 2]);
}

#[tokio::test]
async fn priorities_share_by_weight_and_batch_is_never_starved() {
    // Interactive and batch both backlogged: 16 interactive grants per batch grant, and no
    // batch request waits more than 16 grants once it heads its queue.
    let a = Admission::new(1, 1000);
    let (b, i) = (tenant("sweep", 1), tenant("rl", 1));
    let order = grant_order(
        &a,
        &[
            ("b", ticket(&b, Priority::Batch)),
            ("i", ticket(&i, Priority::Interactive)),
        ],
        200,
    )
    .await;
    let first: String = order.iter().take(170).map(|s| s.as_str()).collect();
    assert_eq!(
        first.matches('b').count(),
        10,
        "1 in 17 grants while both wait: {first}"
    );
    let mut gap = 0;
    for l in order.iter().take(200) {
        if l == "b" {
            assert!(gap <= 16, "a batch request waited {gap} grants: {first}");
            gap = 0;
        } else {
            gap += 1;
        }
    }
}

#[tokio::test]
async fn all_three_priorities_keep_to_16_4_1() {
    let a = Admission::new(1, 1000);
    let t = tenant("t", 1);
    let order = grant_order(
        &a,
        &[
            ("i", ticket(&t, Priority::Interactive)),
            ("n", ticket(&t, Priority::Normal)),
            ("b", ticket(&t, Priority::Batch)),
        ],
        200,
    )
    .await;
    let first: String = order.iter().take(210).map(|s| s.as_str()).collect();
    let count = |c| first.matches(c).count() as i64;
    // One grant either way: the slots held to queue them were normal grants.
    let near = |got: i64, want: i64| (got - want).abs() <= 1;
    assert!(
        near(count('i'), 160) && near(count('n'), 40) && count('b') == 10,
        "{} {} {}: {first}",
        count('i'),
        count('n'),
        count('b')
    );
}

#[tokio::test]
async fn tenants_at_one_priority_share_by_weight() {
    let a = Admission::new(1, 1000);
    let (x, y) = (tenant("x", 1), tenant("y", 3));
    let order = grant_order(
        &a,
        &[("x", ticket(&x, Priority::Batch)), ("y", ticket(&y, Priority::Batch))],
        60,
    )
    .await;
    let first: String = order.iter().take(80).map(|s| s.as_str()).collect();
    assert_eq!(first.matches('x').count(), 20, "1:3 while both wait: {first}");
    // The lighter tenant's head request waits at most 3 of the heavier one's grants.
    assert!(!first.contains("yyyy"), "{first}");
}

#[tokio::test]
async fn an_interactive_request_takes_the_next_slot_ahead_of_a_batch_backlog() {
    let a = Admission::new(1, 1000);
    let (flood, rl) = (tenant("flood", 1), tenant("rl", 1));
    let held = a.acquire(None).await.unwrap();
    let mut backlog = Vec::new();
    for _ in 0..50 {
        let (a, t) = (a.clone(), ticket(&flood, Priority::Batch));
        backlog.push(tokio::spawn(async move {
            let g = a.acquire_as(&t, None, Admit::New).await.unwrap();
            tokio::time::sleep(Duration::from_millis(1)).await;
            drop(g);
        }));
    }
    tokio::time::sleep(Duration::from_millis(10)).await;
    let before = a.grants();
    let (a2, t) = (a.clone(), ticket(&rl, Priority::Interactive));
    let interactive = tokio::spawn(async move {
        let _g = a2.acquire_as(&t, None, Admit::New).await.unwrap();
        a2.grants()
    });
    tokio::time::sleep(Duration::from_millis(10)).await;
    drop(held);
    assert_eq!(
        interactive.await.unwrap(),
        before + 1,
        "served at the first slot that freed"
    );
    for b in backlog {
        b.await.unwrap();
    }
}

#[tokio::test]
async fn an_idle_tenant_banks_no_credit() {
    // y ran alone for a while; when x arrives it shares 1:1 from then on, not first.
    let a = Admission::new(1, 1000);
    let (x, y) = (tenant("x", 1), tenant("y", 1));
    let _ = grant_order(&a, &[("y", ticket(&y, Priority::Normal))], 30).await;
    let _ = grant_order(&a, &[("x", ticket(&x, Priority::Normal))], 30).await;
    // Now both: had x kept y's 30 grants of credit it would win 30 in a row.
    let order = grant_order(
        &a,
        &[("y", ticket(&y, Priority::Normal)), ("x", ticket(&x, Priority::Normal))],
        20,
    )
    .await;
    let first: String = order.iter().take(20).map(|s| s.as_str()).collect();
    assert!(!first.contains("xxx") && !first.contains("yyy"), "{first}");
}

#[tokio::test]
async fn a_tenant_at_its_concurrency_cap_waits_while_others_use_the_free_slots() {
    let a = Admission::new(3, 10);
    let mut capped = (*tenant("capped", 1)).clone();
    capped.max_concurrency = Some(1);
    let capped = Arc::new(capped);
    let other = tenant("other", 1);
    let first = a
        .acquire_as(&ticket(&capped, Priority::Normal), None, Admit::New)
        .await
        .unwrap();
    let (a2, t) = (a.clone(), ticket(&capped, Priority::Normal));
    let second = tokio::spawn(async move { a2.acquire_as(&t, None, Admit::New).await.map(|g| g.index()) });
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!((a.busy(), a.queued()), (1, 1), "waits with two slots free");
    let o1 = a
        .acquire_as(&ticket(&other, Priority::Batch), None, Admit::New)
        .await
        .unwrap();
    let o2 = a
        .acquire_as(&ticket(&other, Priority::Batch), None, Admit::New)
        .await
        .unwrap();
    assert_eq!(a.busy(), 3);
    drop(first);
    assert!(second.await.unwrap().is_ok());
    drop((o1, o2));
}

#[tokio::test]
async fn one_tenants_full_queue_refuses_only_that_tenant() {
    let a = Admission::new(1, 100);
    let mut small = (*tenant("small", 1)).clone();
    small.max_queue = Some(2);
    let small = Arc::new(small);
    let other = tenant("other", 1);
    let held = a.acquire(None).await.unwrap();
    let mut waiters = Vec::new();
    for t in [&small, &small, &other] {
        let (a, t) = (a.clone(), ticket(t, Priority::Normal));
        waiters.push(tokio::spawn(async move {
            a.acquire_as(&t, None, Admit::New).await.map(drop)
        }));
    }
    tokio::time::sleep(Duration::from_millis(10)).await;
    let refused = a
        .acquire_as(&ticket(&small, Priority::Normal), None, Admit::New)
        .await
        .unwrap_err();
    assert!(matches!(&refused, AdmissionError::QueueFull { tenant, queue: 2, .. } if tenant == "small"));
    assert!(refused.to_string().contains("\"small\""), "{refused}");
    // The other tenant still queues; and a continuing run of an admitted request passes the cap.
    let (a2, t) = (a.clone(), ticket(&other, Priority::Normal));
    waiters.push(tokio::spawn(async move {
        a2.acquire_as(&t, None, Admit::New).await.map(drop)
    }));
    let (a3, t) = (a.clone(), ticket(&small, Priority::Normal));
    waiters.push(tokio::spawn(async move {
        a3.acquire_as(&t, None, Admit::Continuing).await.map(drop)
    }));
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(a.queued(), 5);
    drop(held);
    for w in waiters {
        w.await.unwrap().unwrap();
    }
    assert_eq!((a.busy(), a.queued()), (0, 0));
}

#[tokio::test]
async fn waiters_that_give_up_lose_no_slot_and_leave_no_count() {
    let a = Admission::new(2, 1000);
    let t = tenant("t", 1);
    let held: Vec<_> = futures::future::join_all((0..2).map(|_| a.acquire(None))).await;
    let mut gave_up = Vec::new();
    for i in 0..40 {
        let (a, t) = (a.clone(), ticket(&t, Priority::ALL[i % 3]));
        let d = tokio::time::Instant::now() + Duration::from_millis(5 + (i as u64 % 7));
        gave_up.push(tokio::spawn(async move {
            a.acquire_as(&t, Some(d), Admit::New).await.map(drop)
        }));
    }
    for w in gave_up {
        assert_eq!(w.await.unwrap(), Err(AdmissionError::Deadline));
    }
    assert_eq!(a.queued(), 0);
    drop(held);
    assert_eq!(a.busy(), 0);
    // Both slots still go round.
    let g: Vec<_> = futures::future::join_all((0..2).map(|_| a.acquire(None))).await;
    assert!(g.iter().all(|g| g.is_ok()));
    assert_eq!(
        a.tenants().iter().map(|(_, r, q)| (r, q)).collect::<Vec<_>>(),
        vec![(&2, &0), (&0, &0)]
    );
}

#[tokio::test]
async fn waiters_that_give_up_behind_a_capped_tenant_do_not_pile_up() {
    // A tenant at its max_concurrency whose callers keep timing out: nothing is popped from
    // its queue, so the dead entries must be swept rather than kept.
    let a = Admission::new(2, 100);
    let mut capped = (*tenant("capped", 1)).clone();
    capped.max_concurrency = Some(1);
    let capped = Arc::new(capped);
    let t = ticket(&capped, Priority::Batch);
    let held = a.acquire_as(&t, None, Admit::New).await.unwrap();
    for _ in 0..2000 {
        let d = tokio::time::Instant::now();
        assert_eq!(
            a.acquire_as(&t, Some(d), Admit::New).await.unwrap_err(),
            AdmissionError::Deadline
        );
    }
    assert_eq!(a.queued(), 0);
    assert!(a.queue_entries() <= 32, "{} dead entries kept", a.queue_entries());
    drop(held);
    assert!(a.acquire_as(&t, None, Admit::New).await.is_ok());
}

/// Each grant is timed against the allowance it was given: overdue past it, with its tenant,
/// and forgotten once released; a waiter's grant is timed from when it got the slot.
#[tokio::test]
async fn a_slot_held_past_its_allowance_is_overdue_until_released() {
    let a = Admission::new(2, 4);
    let t = tenant("holder", 1);
    let lasting = a.acquire(None).await.unwrap();
    assert!(a.overdue().is_empty(), "no allowance set: never overdue");
    a.set_allowance(Duration::from_millis(50));
    let stuck = a
        .acquire_as(&ticket(&t, Priority::Batch), None, Admit::New)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(120)).await;
    let over = a.overdue();
    assert_eq!(over.len(), 1, "{over:?}");
    assert_eq!((over[0].index, &*over[0].tenant), (stuck.index(), "holder"));
    assert!(over[0].held >= Duration::from_millis(50) && over[0].allowance == Duration::from_millis(50));
    drop(stuck);
    assert!(a.overdue().is_empty());
    // Both slots busy: a waiter queues past the allowance, then gets the slot: not overdue.
    let other = a.acquire(None).await.unwrap();
    let (a2, t2) = (a.clone(), ticket(&t, Priority::Normal));
    let waiter = tokio::spawn(async move { a2.acquire_as(&t2, None, Admit::New).await.map(|g| (g, Instant::now())) });
    tokio::time::sleep(Duration::from_millis(120)).await;
    drop(lasting);
    let (got, at) = waiter.await.unwrap().unwrap();
    let over = a.overdue();
    if at.elapsed() < Duration::from_millis(50) {
        assert!(over.iter().all(|o| o.index != got.index()), "{over:?}");
    }
    drop((got, other));
    assert!(a.overdue().is_empty());
    assert_eq!(a.busy(), 0);
}
