//! Helpers shared by the integration tests and the benches (which include this file with
//! `#[path]`): the binaries they run and loopback ports for the servers they start. Each
//! test crate uses a part of it.
#![allow(dead_code)]

use std::net::TcpListener;
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU16, Ordering};

/// The ports handed out lie below the kernel's ephemeral range (32768–60999 by default).
const FIRST_PORT: u16 = 20_000;
const PORT_COUNT: u16 = 12_000;

/// A loopback port for a server the test starts later (a HAProxy frontend, a haptor
/// listener). A port from `bind(0)` is in the ephemeral range, where the tests' own
/// listeners and every client socket are given ports too, so between releasing it and the
/// server binding it another socket could take it ("Address already in use"). Ports from
/// here come from below that range, differ from call to call, and one in use is skipped.
pub fn free_port() -> u16 {
    static NEXT: AtomicU16 = AtomicU16::new(0);
    // Test binaries of one run start from different places.
    let base = (std::process::id() % u32::from(PORT_COUNT)) as u16;
    loop {
        let n = NEXT.fetch_add(7, Ordering::Relaxed);
        let port = FIRST_PORT + (base.wrapping_add(n) % PORT_COUNT);
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

/// The haproxy the tests run: `HAPTOR_HAPROXY_BIN`, else the Debian package's, else the one
/// on `PATH`. The library holds the one definition, so that its own unit tests and the
/// benches find the same binary.
pub use haptor::drivers::haproxy_check::haproxy_binary;

/// Runs the haptor binary built for these tests and waits for it. Its commands that run
/// haproxy run the tests' one ([`haproxy_binary`], through `HAPROXY_BIN`).
pub fn haptor(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_haptor"))
        .args(args)
        .env("HAPROXY_BIN", haproxy_binary())
        .output()
        .expect("the haptor binary runs")
}

/// Standard output and standard error of a finished run, in that order.
pub fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}
