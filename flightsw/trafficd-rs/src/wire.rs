//! The protocol lines and the datagram header, exactly as flightsw/trafficd.py and flightsw/protocol.py write them.

use serde::Serialize;
use std::io::Write;

pub const MAGIC: u32 = 0x5357_4D58; // "SWMX"
/// struct "!IIQd": magic, flow index, sequence, send time (big-endian)
pub const HEADER_LEN: usize = 24;
/// struct "!II": magic, flow index (the hello of a TCP flow)
pub const HELLO_LEN: usize = 8;

pub fn pack_header(buf: &mut [u8], index: u32, seq: u64, sent: f64) {
    buf[0..4].copy_from_slice(&MAGIC.to_be_bytes());
    buf[4..8].copy_from_slice(&index.to_be_bytes());
    buf[8..16].copy_from_slice(&seq.to_be_bytes());
    buf[16..24].copy_from_slice(&sent.to_be_bytes());
}

/// (magic, index, seq, sent) of a datagram at least HEADER_LEN long.
pub fn unpack_header(buf: &[u8]) -> (u32, u32, u64, f64) {
    let u32_at = |i: usize| u32::from_be_bytes(buf[i..i + 4].try_into().unwrap());
    (
        u32_at(0),
        u32_at(4),
        u64::from_be_bytes(buf[8..16].try_into().unwrap()),
        f64::from_be_bytes(buf[16..24].try_into().unwrap()),
    )
}

pub fn pack_hello(index: u32) -> [u8; HELLO_LEN] {
    let mut b = [0u8; HELLO_LEN];
    b[0..4].copy_from_slice(&MAGIC.to_be_bytes());
    b[4..8].copy_from_slice(&index.to_be_bytes());
    b
}

/// A host line after the plan: `connect`, or `RELEASE DURATION` (protocol.parse_mux_command).
#[derive(Debug, PartialEq)]
pub enum Command {
    Connect,
    Release(f64, f64),
}

pub fn parse_command(line: &str) -> Result<Command, String> {
    let words: Vec<&str> = line.split_whitespace().collect();
    if words == ["connect"] {
        return Ok(Command::Connect);
    }
    let bad = || format!("traffic engine: not a command: {:?}", line.trim());
    if words.len() != 2 {
        return Err(bad());
    }
    let number = |w: &str| w.parse::<f64>().map_err(|_| bad());
    Ok(Command::Release(number(words[0])?, number(words[1])?))
}

/// Python's json.dumps separators (", " and ": "), so a line reads the same whichever engine wrote it.
struct PythonFormatter;

impl serde_json::ser::Formatter for PythonFormatter {
    fn begin_array_value<W: ?Sized + Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        if first {
            Ok(())
        } else {
            w.write_all(b", ")
        }
    }
    fn begin_object_key<W: ?Sized + Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        if first {
            Ok(())
        } else {
            w.write_all(b", ")
        }
    }
    fn begin_object_value<W: ?Sized + Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        w.write_all(b": ")
    }
}

/// One protocol line (without its newline).
pub fn dumps<T: Serialize>(value: &T) -> String {
    let mut out = Vec::new();
    let mut ser = serde_json::Serializer::with_formatter(&mut out, PythonFormatter);
    value.serialize(&mut ser).expect("a record serialises");
    String::from_utf8(out).expect("JSON is UTF-8")
}

/// Write one line to stdout and flush it (the host reads line by line); a closed stdout is ignored.
pub fn emit<T: Serialize>(value: &T) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(dumps(value).as_bytes());
    let _ = out.write_all(b"\n");
    let _ = out.flush();
}

/// An OS error as Python's str(OSError) shows it ("[Errno 111] Connection refused"), so error fields match.
pub fn os_error_text(e: &std::io::Error) -> String {
    match e.raw_os_error() {
        Some(code) => {
            let msg = unsafe { std::ffi::CStr::from_ptr(libc::strerror(code)) };
            format!("[Errno {code}] {}", msg.to_string_lossy())
        }
        None if e.kind() == std::io::ErrorKind::TimedOut
            || e.kind() == std::io::ErrorKind::WouldBlock =>
        {
            "timed out".to_string()
        }
        None => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trips_big_endian() {
        let mut b = [0u8; 30];
        pack_header(&mut b, 7, 1 << 40, 1764097000.25);
        assert_eq!(&b[0..4], &[0x53, 0x57, 0x4D, 0x58]);
        assert_eq!(unpack_header(&b), (MAGIC, 7, 1 << 40, 1764097000.25));
    }

    #[test]
    fn commands_parse_like_protocol_py() {
        assert_eq!(parse_command("connect\n"), Ok(Command::Connect));
        assert_eq!(
            parse_command("1764097000.5 10\n"),
            Ok(Command::Release(1764097000.5, 10.0))
        );
        assert!(parse_command("connect now").is_err());
        assert!(parse_command("x 1").is_err());
    }

    #[test]
    fn lines_use_python_separators() {
        let v = serde_json::json!({"listening": 45001});
        assert_eq!(dumps(&v), "{\"listening\": 45001}");
        assert_eq!(dumps(&vec![1, 2]), "[1, 2]");
    }

    #[test]
    fn os_errors_read_like_python() {
        let e = std::io::Error::from_raw_os_error(libc::ECONNREFUSED);
        assert_eq!(os_error_text(&e), "[Errno 111] Connection refused");
    }
}
