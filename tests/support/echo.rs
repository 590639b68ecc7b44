//! An HTTP/1.1 echo backend shaped like the Gateway API conformance `echo-basic`: every
//! request is answered 200 with a JSON description of what arrived (path with query, Host,
//! method, protocol, headers under Go's canonical names, the namespace and a pod name
//! `<app>-<5 random characters>`), `X-Echo-Set-Header: Name:value,Name2:value2` adds those
//! response headers, `?delay=1s` (or `500ms`) waits before answering, and each server counts
//! the requests it answered (for weight and mirror checks). Keep-alive unless the client
//! asks to close. Included with `#[path = "../support/echo.rs"] mod echo;`.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// A running echo backend (its threads live as long as the test program).
pub struct EchoServer {
    pub port: u16,
    pub namespace: String,
    pub pod: String,
    pub requests: Arc<AtomicUsize>,
}

impl EchoServer {
    /// How many requests it has answered so far.
    pub fn count(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }
}

/// Five lowercase letters and digits, different on every call.
pub fn random_suffix() -> String {
    static CALLS: AtomicUsize = AtomicUsize::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or_default();
    let mut state = nanos
        ^ (u64::from(std::process::id()) << 32)
        ^ (CALLS.fetch_add(1, Ordering::Relaxed) as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    (0..5)
        .map(|_| {
            // xorshift64*
            state ^= state >> 12;
            state ^= state << 25;
            state ^= state >> 27;
            let n = state.wrapping_mul(0x2545_F491_4F6C_DD1D);
            ALPHABET[(n >> 33) as usize % ALPHABET.len()] as char
        })
        .collect()
}

/// Go's `http.CanonicalHeaderKey`: the first letter and each letter after `-` upper case,
/// the rest lower case; a name holding a character a token may not hold stays as it is.
pub fn canonical_header_name(name: &str) -> String {
    let valid = name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
    if !valid || name.is_empty() {
        return name.to_string();
    }
    let mut upper = true;
    name.chars()
        .map(|c| {
            let out = if upper {
                c.to_ascii_uppercase()
            } else {
                c.to_ascii_lowercase()
            };
            upper = c == '-';
            out
        })
        .collect()
}

/// Starts an echo backend on a free loopback port for the pods of `app` in `namespace`.
pub fn start(namespace: &str, app: &str) -> EchoServer {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind an echo backend");
    let port = listener.local_addr().expect("its address").port();
    let requests = Arc::new(AtomicUsize::new(0));
    let pod = format!("{app}-{}", random_suffix());
    let (counted, ns, name) = (Arc::clone(&requests), namespace.to_string(), pod.clone());
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let (counted, ns, name) = (Arc::clone(&counted), ns.clone(), name.clone());
            std::thread::spawn(move || serve(stream, &ns, &name, &counted));
        }
    });
    EchoServer {
        port,
        namespace: namespace.to_string(),
        pod,
        requests,
    }
}

/// One request as it arrived.
struct Request {
    method: String,
    target: String,
    proto: String,
    headers: Vec<(String, String)>,
}

impl Request {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Reads one request head and its body; None at the end of the connection.
fn read_request(reader: &mut BufReader<TcpStream>) -> Option<Request> {
    let mut line = String::new();
    // Skip blank lines before a request line (RFC 9112 2.2).
    loop {
        line.clear();
        if reader.read_line(&mut line).ok()? == 0 {
            return None;
        }
        if !line.trim().is_empty() {
            break;
        }
    }
    let mut parts = line.split_whitespace();
    let method = parts.next()?.to_string();
    let target = parts.next()?.to_string();
    let proto = parts.next().unwrap_or("HTTP/1.0").to_string();
    let mut headers = Vec::new();
    loop {
        line.clear();
        if reader.read_line(&mut line).ok()? == 0 {
            return None;
        }
        let trimmed = line.trim_end_matches(['\r', '\n']);
        if trimmed.is_empty() {
            break;
        }
        if let Some((name, value)) = trimmed.split_once(':') {
            headers.push((name.trim().to_string(), value.trim().to_string()));
        }
    }
    let request = Request {
        method,
        target,
        proto,
        headers,
    };
    if request
        .header("transfer-encoding")
        .is_some_and(|te| te.to_ascii_lowercase().contains("chunked"))
    {
        loop {
            line.clear();
            reader.read_line(&mut line).ok()?;
            let size = usize::from_str_radix(line.trim().split(';').next()?, 16).ok()?;
            let mut chunk = vec![0u8; size + 2];
            reader.read_exact(&mut chunk).ok()?;
            if size == 0 {
                break;
            }
        }
    } else if let Some(length) = request
        .header("content-length")
        .and_then(|l| l.parse::<usize>().ok())
    {
        let mut body = vec![0u8; length];
        reader.read_exact(&mut body).ok()?;
    }
    Some(request)
}

/// `1s`, `500ms`, `2m`, a bare number of seconds.
fn parse_delay(text: &str) -> Option<Duration> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: f64 = number.parse().ok()?;
    let seconds = match unit {
        "ms" => number / 1000.0,
        "" | "s" => number,
        "m" => number * 60.0,
        "us" | "µs" => number / 1_000_000.0,
        _ => return None,
    };
    Some(Duration::from_secs_f64(seconds))
}

fn serve(stream: TcpStream, namespace: &str, pod: &str, counted: &AtomicUsize) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(60)));
    let Ok(mut writer) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(stream);
    while let Some(request) = read_request(&mut reader) {
        counted.fetch_add(1, Ordering::SeqCst);
        let query = request.target.split_once('?').map(|(_, q)| q).unwrap_or("");
        if let Some(delay) = query
            .split('&')
            .find_map(|pair| pair.strip_prefix("delay="))
            .and_then(parse_delay)
        {
            std::thread::sleep(delay);
        }
        let mut headers = serde_json::Map::new();
        for (name, value) in &request.headers {
            if name.eq_ignore_ascii_case("host") {
                continue;
            }
            let values = headers
                .entry(canonical_header_name(name))
                .or_insert_with(|| serde_json::Value::Array(Vec::new()));
            if let serde_json::Value::Array(values) = values {
                values.push(serde_json::Value::String(value.clone()));
            }
        }
        let body = serde_json::json!({
            "path": request.target,
            "host": request.header("host").unwrap_or_default(),
            "method": request.method,
            "proto": request.proto,
            "headers": headers,
            "namespace": namespace,
            "ingress": "",
            "service": "",
            "pod": pod,
        })
        .to_string();
        let close = request
            .header("connection")
            .is_some_and(|c| c.eq_ignore_ascii_case("close"))
            || request.proto == "HTTP/1.0";
        let mut head = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Content-Type-Options: nosniff\r\nContent-Length: {}\r\n",
            body.len()
        );
        for pair in request
            .header("x-echo-set-header")
            .unwrap_or_default()
            .split(',')
        {
            if let Some((name, value)) = pair.split_once(':')
                && !name.trim().is_empty()
            {
                head.push_str(&format!("{}: {}\r\n", name.trim(), value.trim()));
            }
        }
        if close {
            head.push_str("Connection: close\r\n");
        }
        head.push_str("\r\n");
        let mut response = head.into_bytes();
        if request.method != "HEAD" {
            response.extend_from_slice(body.as_bytes());
        }
        if writer.write_all(&response).is_err() || close {
            return;
        }
    }
}

#[test]
fn header_names_are_canonical_as_go_spells_them() {
    assert_eq!(canonical_header_name("x-header-set"), "X-Header-Set");
    assert_eq!(
        canonical_header_name("X-ECHO-set-Header"),
        "X-Echo-Set-Header"
    );
    assert_eq!(canonical_header_name("bad name"), "bad name");
    assert_eq!(parse_delay("1s"), Some(Duration::from_secs(1)));
    assert_eq!(parse_delay("250ms"), Some(Duration::from_millis(250)));
}
