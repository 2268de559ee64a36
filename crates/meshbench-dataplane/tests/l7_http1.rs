//! The L7 sidecar pair's HTTP/1.1 codec over real sockets: client -> outbound L7 sidecar ->
//! mTLS -> inbound L7 sidecar -> a scripted app that answers in every framing HTTP/1.1 has
//! (length, chunked with trailers, until close, HEAD), so that what crosses the pair can be
//! checked byte for byte on both ends.

mod common;

use std::net::SocketAddr;

use common::Lab;
use meshbench_dataplane::ProxyMode;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

/// One HTTP/1.1 message as read off the wire, its body decoded from its framing.
#[derive(Debug, Default)]
struct Message {
    start_line: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    trailers: Vec<(String, String)>,
}

impl Message {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Reads until `buf` holds `n` bytes; false at end of stream.
async fn fill<R: AsyncRead + Unpin>(r: &mut R, buf: &mut Vec<u8>, n: usize) -> bool {
    while buf.len() < n {
        if r.read_buf(buf).await.unwrap() == 0 {
            return false;
        }
    }
    true
}

/// Reads up to and including the next CRLF.
async fn line<R: AsyncRead + Unpin>(r: &mut R, buf: &mut Vec<u8>) -> String {
    loop {
        if let Some(end) = buf.windows(2).position(|w| w == b"\r\n") {
            let text = String::from_utf8(buf[..end].to_vec()).unwrap();
            buf.drain(..end + 2);
            return text;
        }
        assert!(r.read_buf(buf).await.unwrap() > 0, "stream ended mid-line");
    }
}

/// Reads one message (`None` at a clean end of stream); `buf` carries bytes between messages.
async fn read_message<R: AsyncRead + Unpin>(
    r: &mut R,
    buf: &mut Vec<u8>,
    without_body: bool,
) -> Option<Message> {
    let mut message = read_head(r, buf).await?;
    if !without_body {
        read_body(r, buf, &mut message).await;
    }
    Some(message)
}

async fn read_head<R: AsyncRead + Unpin>(r: &mut R, buf: &mut Vec<u8>) -> Option<Message> {
    if buf.is_empty() && r.read_buf(buf).await.unwrap() == 0 {
        return None;
    }
    let mut message = Message {
        start_line: line(r, buf).await,
        ..Message::default()
    };
    loop {
        let header = line(r, buf).await;
        let Some((name, value)) = header.split_once(':') else {
            break;
        };
        message.headers.push((name.into(), value.trim().into()));
    }
    Some(message)
}

async fn read_body<R: AsyncRead + Unpin>(r: &mut R, buf: &mut Vec<u8>, message: &mut Message) {
    let response = message.start_line.starts_with("HTTP/");
    if message.header("transfer-encoding") == Some("chunked") {
        loop {
            let size_line = line(r, buf).await;
            let size = usize::from_str_radix(size_line.split(';').next().unwrap(), 16).unwrap();
            if size == 0 {
                loop {
                    let trailer = line(r, buf).await;
                    let Some((name, value)) = trailer.split_once(':') else {
                        break;
                    };
                    message.trailers.push((name.into(), value.trim().into()));
                }
                break;
            }
            assert!(fill(r, buf, size + 2).await, "stream ended in a chunk");
            message.body.extend(buf.drain(..size));
            buf.drain(..2);
        }
    } else if let Some(length) = message.header("content-length") {
        let length: usize = length.parse().unwrap();
        assert!(fill(r, buf, length).await, "stream ended in the body");
        message.body.extend(buf.drain(..length));
    } else if response {
        // Delimited by the end of the connection.
        r.read_to_end(buf).await.unwrap();
        message.body.append(buf);
    }
}

/// The app behind the pair, answering by path: `/echo` with the request body (or, without
/// one, its target) by length, `/chunked` in chunks with a trailer, `/unsized` without length
/// then closing, `/bye` by length then closing without a word. Every request it reads is
/// reported on `seen`.
async fn scripted_app(listener: TcpListener, seen: mpsc::UnboundedSender<Message>) {
    loop {
        let (mut stream, _) = listener.accept().await.unwrap();
        let seen = seen.clone();
        tokio::spawn(async move {
            let mut buf = Vec::new();
            while let Some(mut request) = read_head(&mut stream, &mut buf).await {
                if request.header("expect") == Some("100-continue") {
                    stream
                        .write_all(b"HTTP/1.1 100 Continue\r\n\r\n")
                        .await
                        .unwrap();
                }
                read_body(&mut stream, &mut buf, &mut request).await;
                let target = request.start_line.split(' ').nth(1).unwrap().to_owned();
                let is_head = request.start_line.starts_with("HEAD ");
                let body = match request.body.is_empty() {
                    true => target.clone().into_bytes(),
                    false => request.body.clone(),
                };
                seen.send(request).unwrap();
                let path = target.split('?').next().unwrap();
                let mut answer = match path {
                    "/chunked" => b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n\
                        4\r\nabcd\r\n2;ext=1\r\nef\r\n0\r\nx-checksum: 6\r\n\r\n"
                        .to_vec(),
                    "/unsized" => b"HTTP/1.1 200 OK\r\n\r\nuntil the end".to_vec(),
                    _ => format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n", body.len())
                        .into_bytes(),
                };
                if path != "/chunked" && path != "/unsized" && !is_head {
                    answer.extend_from_slice(&body);
                }
                stream.write_all(&answer).await.unwrap();
                if path == "/unsized" || path == "/bye" {
                    return;
                }
            }
        });
    }
}

struct Pair {
    lab: Lab,
    entry: SocketAddr,
    seen: mpsc::UnboundedReceiver<Message>,
}

/// The experimenter's L7 sidecar, mTLS to the calculator's L7 sidecar, in front of the
/// scripted app.
fn pair() -> Pair {
    let lab = Lab::new();
    let (seen_tx, seen) = mpsc::unbounded_channel();
    let app = lab.runtime.block_on(async {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(scripted_app(listener, seen_tx));
        addr
    });
    let calculator = lab.calculator_for(app, common::STRICT_NO_ADMIN, true, ProxyMode::L7);
    let entry = lab.l7_client("experimenter", calculator);
    Pair { lab, entry, seen }
}

/// A client connection to the pair, with the bytes read past the last message.
struct Client {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Client {
    async fn connect(entry: SocketAddr) -> Client {
        let stream = TcpStream::connect(entry).await.unwrap();
        Client {
            stream,
            buf: Vec::new(),
        }
    }

    async fn read(&mut self, without_body: bool) -> Option<Message> {
        read_message(&mut self.stream, &mut self.buf, without_body).await
    }

    async fn ask(&mut self, request: &[u8]) -> Message {
        self.stream.write_all(request).await.unwrap();
        let without_body = request.starts_with(b"HEAD ");
        self.read(without_body).await.expect("a response")
    }

    async fn get(&mut self, target: &str) -> Message {
        let request = format!("GET {target} HTTP/1.1\r\nhost: calc\r\n\r\n");
        self.ask(request.as_bytes()).await
    }
}

#[test]
fn bodies_cross_the_pair_in_every_framing_on_one_connection() {
    let mut pair = pair();
    pair.lab.runtime.block_on(async {
        let mut client = Client::connect(pair.entry).await;

        // Larger than any buffer on the way: streamed through in pieces.
        let big: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
        let mut request = format!(
            "POST /echo HTTP/1.1\r\nhost: calc\r\ncontent-length: {}\r\n\r\n",
            big.len()
        )
        .into_bytes();
        request.extend_from_slice(&big);
        let answer = client.ask(&request).await;
        assert_eq!(answer.start_line, "HTTP/1.1 200 OK");
        assert!(answer.body == big, "the 300 kB body came back intact");
        assert!(pair.seen.recv().await.unwrap().body == big);

        // A chunked request body keeps its chunked framing on the way.
        let answer = client
            .ask(
                b"POST /echo HTTP/1.1\r\nhost: calc\r\ntransfer-encoding: chunked\r\n\r\n\
              5\r\nhello\r\n7\r\n, world\r\n0\r\n\r\n",
            )
            .await;
        assert_eq!(answer.body, b"hello, world");
        let seen = pair.seen.recv().await.unwrap();
        assert_eq!(seen.header("transfer-encoding"), Some("chunked"));

        // A chunked response, trailers included.
        let answer = client.get("/chunked").await;
        assert_eq!(answer.body, b"abcdef");
        assert_eq!(answer.trailers, [("x-checksum".into(), "6".into())]);

        // HEAD: a length but no body; the connection stays in step.
        let answer = client
            .ask(b"HEAD /echo HTTP/1.1\r\nhost: calc\r\n\r\n")
            .await;
        assert_eq!(answer.header("content-length"), Some("5"));
        let answer = client.get("/echo?last").await;
        assert_eq!(answer.body, b"/echo?last");
    });
}

#[test]
fn pipelined_requests_are_answered_in_order_and_hop_by_hop_headers_stop_at_the_proxy() {
    let mut pair = pair();
    pair.lab.runtime.block_on(async {
        let mut client = Client::connect(pair.entry).await;
        client
            .stream
            .write_all(
                b"GET /echo?first HTTP/1.1\r\nhost: calc\r\nconnection: x-secret\r\nx-secret: 1\r\n\
                  keep-alive: timeout=5\r\nx-kept: 2\r\n\r\n\
                  GET /echo?second HTTP/1.1\r\nhost: calc\r\n\r\n",
            )
            .await
            .unwrap();
        for expected in ["/echo?first", "/echo?second"] {
            let answer = client.read(false).await.unwrap();
            assert_eq!(String::from_utf8(answer.body).unwrap(), expected);
        }
        let first = pair.seen.recv().await.unwrap();
        let names: Vec<&str> = first.headers.iter().map(|(n, _)| n.as_str()).collect();
        // The identity headers are the server-side proxy's, from the client's certificate.
        assert_eq!(
            names,
            [
                "host",
                "x-kept",
                "x-forwarded-client-cert",
                "x-meshbench-identity"
            ]
        );
        assert_eq!(
            first.header("x-meshbench-identity"),
            Some("spiffe://cluster.local/ns/app/sa/experimenter")
        );
    });
}

#[test]
fn a_response_without_length_ends_with_the_connection() {
    let pair = pair();
    pair.lab.runtime.block_on(async {
        let mut client = Client::connect(pair.entry).await;
        let answer = client.get("/unsized").await;
        assert_eq!(answer.header("connection"), Some("close"));
        // read_message read to the end of the stream: the proxy closed after the body.
        assert_eq!(answer.body, b"until the end");
    });
}

#[test]
fn a_request_that_could_smuggle_another_is_refused_before_reaching_the_app() {
    let mut pair = pair();
    pair.lab.runtime.block_on(async {
        let mut client = Client::connect(pair.entry).await;
        let answer = client
            .ask(
                b"POST /echo HTTP/1.1\r\nhost: calc\r\ncontent-length: 5\r\n\
              transfer-encoding: chunked\r\n\r\n0\r\n\r\nGET /admin/x HTTP/1.1\r\n\r\n",
            )
            .await;
        assert!(answer.start_line.starts_with("HTTP/1.1 400"), "{answer:?}");
        assert_eq!(
            client.stream.read(&mut [0u8; 16]).await.unwrap(),
            0,
            "closed after"
        );
        // A request that does reach the app shows the smuggling attempt never did.
        let mut client = Client::connect(pair.entry).await;
        client.get("/echo").await;
        assert_eq!(
            pair.seen.recv().await.unwrap().start_line,
            "GET /echo HTTP/1.1"
        );
        assert!(pair.seen.try_recv().is_err());
    });
}

#[test]
fn a_denied_request_with_a_body_gets_403_and_the_connection_stays_usable() {
    let mut pair = pair();
    pair.lab.runtime.block_on(async {
        let mut client = Client::connect(pair.entry).await;
        let answer = client
            .ask(b"POST /admin/users HTTP/1.1\r\nhost: calc\r\ncontent-length: 3\r\n\r\nabc")
            .await;
        assert!(answer.start_line.starts_with("HTTP/1.1 403"), "{answer:?}");
        assert_eq!(answer.body, b"RBAC: access denied\n");
        // The server-side proxy closed its connection (the body unread); the client's own
        // connection carried the whole body and goes on.
        let answer = client.get("/echo").await;
        assert_eq!(answer.body, b"/echo");
        assert_eq!(
            pair.seen.recv().await.unwrap().start_line,
            "GET /echo HTTP/1.1"
        );
        assert!(
            pair.seen.try_recv().is_err(),
            "the app never saw the denied request"
        );
    });
}

#[test]
fn a_pooled_connection_the_app_closed_is_not_reused() {
    let pair = pair();
    pair.lab.runtime.block_on(async {
        let mut client = Client::connect(pair.entry).await;
        // The app answers, then drops the connection the server-side proxy pooled.
        for round in 0..5 {
            let answer = client.get("/bye").await;
            assert_eq!(answer.body, b"/bye", "round {round}");
        }
    });
}

#[test]
fn a_client_expecting_100_continue_is_told_to_send_its_body() {
    let pair = pair();
    pair.lab.runtime.block_on(async {
        let mut client = Client::connect(pair.entry).await;
        client
            .stream
            .write_all(
                b"POST /echo HTTP/1.1\r\nhost: calc\r\nexpect: 100-continue\r\n\
                  content-length: 5\r\n\r\n",
            )
            .await
            .unwrap();
        // Without the go-ahead both ends would wait for each other.
        let interim = tokio::time::timeout(std::time::Duration::from_secs(10), client.read(true))
            .await
            .expect("a 100 Continue before the body")
            .unwrap();
        assert_eq!(interim.start_line, "HTTP/1.1 100 Continue");
        client.stream.write_all(b"hello").await.unwrap();
        let answer = client.read(false).await.unwrap();
        assert_eq!(
            (answer.start_line.as_str(), &answer.body[..]),
            ("HTTP/1.1 200 OK", &b"hello"[..])
        );
    });
}
