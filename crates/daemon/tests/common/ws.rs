//! A minimal WebSocket client for tests that speak to sbxd's upgrades
//! (preview URLs, the console's terminal): masked client frames, server frames read whole.

use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

/// A masked client WebSocket frame.
pub fn frame(op: u8, data: &[u8]) -> Vec<u8> {
    let mask = [1u8, 2, 3, 4];
    let mut out = vec![0x80 | op];
    match data.len() {
        n if n < 126 => out.push(0x80 | n as u8),
        n if n < 65536 => {
            out.push(0x80 | 126);
            out.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            out.push(0x80 | 127);
            out.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    out.extend_from_slice(&mask);
    out.extend(data.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
    out
}

/// Reads one unmasked server frame: (opcode, payload).
pub async fn read_frame(s: &mut TcpStream) -> (u8, Vec<u8>) {
    let mut head = [0u8; 2];
    s.read_exact(&mut head).await.unwrap();
    let mut n = (head[1] & 0x7f) as u64;
    if n == 126 {
        let mut b = [0u8; 2];
        s.read_exact(&mut b).await.unwrap();
        n = u16::from_be_bytes(b) as u64;
    } else if n == 127 {
        let mut b = [0u8; 8];
        s.read_exact(&mut b).await.unwrap();
        n = u64::from_be_bytes(b);
    }
    let mut data = vec![0u8; n as usize];
    s.read_exact(&mut data).await.unwrap();
    (head[0] & 0x0f, data)
}
