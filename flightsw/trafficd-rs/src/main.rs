//! swarm-trafficd: the multiplexing traffic engine of a swarm-emu node, in Rust.
//!
//! It speaks exactly the protocol of flightsw/trafficd.py (JSON lines on stdin/stdout, names from
//! flightsw/protocol.py) and writes the same per-flow reports, so the host cannot tell the two apart
//! except by the CPU they leave to the rest of the swarm (the Python engine took ~2/3 of a
//! 2-core host at n=32 and n=100, the link engine's share came out of the senders):
//!
//! 1. host -> plan (one JSON line); engine -> {"listening": P}
//! 2. host -> "connect"; engine -> {"connected": n, "errors": {id: message}, "engine": "swarm-trafficd"}
//! 3. host -> "RELEASE DURATION"; engine -> {"release_ts": t}, one record per flow, {"done": true}
//!
//! End of input (or the watchdog) before step 3 aborts: the engine exits 1 without writing anything more.
//! Usage: swarm-trafficd [PID_FILE]  (the pid is appended to PID_FILE, as the agent's clean-up expects)

mod engine;
mod flows;
mod wire;

use serde::ser::{SerializeMap, Serializer};
use serde_json::{json, Value};
use std::io::Read;
use std::os::fd::AsRawFd;

/// An engine never told to start gives up after this long.
const WATCHDOG_S: f64 = 600.0;

/// Lines of stdin read with a deadline (poll on the descriptor, our own buffer).
struct Input {
    pending: Vec<u8>,
    eof: bool,
}

impl Input {
    /// The next line, or None at end of input or after `deadline` (epoch s); a last line without its
    /// newline counts, as Python's readline returns it.
    fn read_line(&mut self, deadline: f64) -> Option<String> {
        loop {
            if let Some(at) = self.pending.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.pending.drain(..=at).collect();
                return Some(String::from_utf8_lossy(&line).into_owned());
            }
            if self.eof {
                if self.pending.is_empty() {
                    return None;
                }
                let line = std::mem::take(&mut self.pending);
                return Some(String::from_utf8_lossy(&line).into_owned());
            }
            let left = deadline - engine::now();
            if left <= 0.0 {
                return None;
            }
            let stdin = std::io::stdin();
            let mut pfd = libc::pollfd {
                fd: stdin.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            let ms = (left * 1000.0).ceil().min(i32::MAX as f64) as libc::c_int;
            if unsafe { libc::poll(&mut pfd, 1, ms) } <= 0 {
                continue; // timeout (checked above) or EINTR
            }
            let mut chunk = [0u8; 65536];
            match stdin.lock().read(&mut chunk) {
                Ok(0) | Err(_) => self.eof = true,
                Ok(n) => self.pending.extend_from_slice(&chunk[..n]),
            }
        }
    }
}

/// {"connected": n, "errors": {id: message}, "engine": "swarm-trafficd"} with the errors in plan order.
struct Connected<'a>(usize, &'a [(Value, String)]);

impl serde::Serialize for Connected<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        struct Errors<'a>(&'a [(Value, String)]);
        impl serde::Serialize for Errors<'_> {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                let mut m = s.serialize_map(Some(self.0.len()))?;
                for (id, message) in self.0 {
                    match id {
                        Value::String(text) => m.serialize_entry(text, message)?,
                        other => m.serialize_entry(&other.to_string(), message)?,
                    }
                }
                m.end()
            }
        }
        let mut m = s.serialize_map(Some(3))?;
        m.serialize_entry("connected", &self.0)?;
        m.serialize_entry("errors", &Errors(self.1))?;
        m.serialize_entry("engine", "swarm-trafficd")?;
        m.end()
    }
}

fn serve(pid_file: Option<String>) -> Result<i32, String> {
    if let Some(path) = pid_file {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(&path)
            .map_err(|e| format!("{path}: {e}"))?;
        writeln!(f, "{}", std::process::id()).map_err(|e| format!("{path}: {e}"))?;
    }
    let give_up = engine::now() + WATCHDOG_S;
    let mut input = Input {
        pending: Vec::new(),
        eof: false,
    };
    let Some(line) = input.read_line(give_up) else {
        return Ok(1);
    };
    let plan: Value =
        serde_json::from_str(&line).map_err(|e| format!("traffic engine: plan: {e}"))?;
    let mut engine = engine::Engine::new(&plan)?;
    wire::emit(&json!({"listening": engine.listening_port()}));
    let (release, duration) = loop {
        let Some(line) = input.read_line(give_up) else {
            return Ok(1);
        };
        match wire::parse_command(&line)? {
            wire::Command::Connect => {
                let (connected, errors) = engine.connect();
                wire::emit(&Connected(connected, &errors));
            }
            wire::Command::Release(release, duration) => break (release, duration),
        }
    };
    let woke = engine.run(release, duration);
    wire::emit(&json!({"release_ts": woke}));
    for f in &engine.outs {
        wire::emit(&f.record());
    }
    for f in &engine.ins {
        wire::emit(&f.record());
    }
    wire::emit(&json!({"done": true}));
    Ok(0)
}

fn main() {
    let code = serve(std::env::args().nth(1)).unwrap_or_else(|message| {
        eprintln!("{message}");
        1
    });
    std::process::exit(code);
}
