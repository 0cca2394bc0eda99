//! `sandpool mcp --http-listen` against clients that hold its connections (issue 46,
//! finding 6): authenticated clients that send their headers and trickle the body are cut
//! off at the body deadline, which by default is the header deadline (10 s), not a minute.
//!
//! Runs the real `sandpool` binary with an embedded executor: needs root and
//! `cargo build --workspace`.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// `sandpool mcp` over HTTP on a free port, killed on drop.
struct Mcp {
    child: Child,
    addr: String,
    _work: tempfile::TempDir,
}

impl Drop for Mcp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn mcp(args: &[&str]) -> Mcp {
    let work = tempfile::tempdir().expect("work root");
    let uid_base = 480_000 + (std::process::id() % 100) * 100;
    let mut child = Command::new(sandpool_tests::binary("sandpool"))
        .args(["mcp", "--http-listen", "127.0.0.1:0", "--enable-languages", "python"])
        .args(["--uid-base", &uid_base.to_string(), "--work-root"])
        .arg(work.path())
        .args(args)
        .env("SANDPOOL_MCP_TOKEN", "mcp-secret")
        .env_remove("SANDPOOL_MCP_BODY_TIMEOUT_MS")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn sandpool mcp");
    let stderr = child.stderr.take().expect("stderr");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut sent = false;
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if !sent && let Some(rest) = line.split("at http://").nth(1) {
                let _ = tx.send(rest.trim_end_matches("/mcp").to_string());
                sent = true;
            }
            // Keep draining, so the server never blocks on a full pipe.
        }
    });
    let addr = rx.recv_timeout(Duration::from_secs(120)).expect("sandpool mcp serves");
    Mcp {
        child,
        addr,
        _work: work,
    }
}

/// Every connection held by an authenticated client that sends its headers and trickles
/// its body: with the default flags each is cut off (408) at the 10 s deadline, and then a
/// client is served. Before, the default was 60 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trickled_bodies_hold_connections_no_longer_than_the_header_deadline() {
    let server = mcp(&["--http-max-connections", "2"]);
    let head = format!(
        "POST /mcp HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer mcp-secret\r\n\
         Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n\
         Content-Length: 100000\r\n\r\n{{",
        server.addr
    );
    let mut held = Vec::new();
    for _ in 0..2 {
        let mut tcp = tokio::net::TcpStream::connect(&server.addr).await.expect("connect");
        tcp.write_all(head.as_bytes()).await.expect("send");
        held.push(tcp);
    }
    let t = Instant::now();
    for tcp in &mut held {
        let mut got = Vec::new();
        // Generous against a loaded machine, well short of the old 60 s default.
        tokio::time::timeout(Duration::from_secs(40), tcp.read_to_end(&mut got))
            .await
            .expect("cut off at the body deadline")
            .expect("read");
        let text = String::from_utf8_lossy(&got);
        assert!(text.starts_with("HTTP/1.1 408"), "{text}");
        assert!(text.contains("--http-body-timeout-ms"), "{text}");
    }
    assert!(t.elapsed() >= Duration::from_secs(5), "cut off before the deadline");
    // The connections are free again: a client is served.
    let init = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}"#;
    let req = format!(
        "POST /mcp HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer mcp-secret\r\n\
         Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{init}",
        server.addr,
        init.len()
    );
    let mut tcp = tokio::net::TcpStream::connect(&server.addr).await.expect("connect");
    tcp.write_all(req.as_bytes()).await.expect("send");
    let mut got = vec![0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(30), tcp.read(&mut got))
        .await
        .expect("served")
        .expect("read");
    let text = String::from_utf8_lossy(&got[..n]);
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
}
