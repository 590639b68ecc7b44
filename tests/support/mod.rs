//! Helpers shared by the integration tests that start servers on loopback ports.

use std::net::TcpListener;
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
