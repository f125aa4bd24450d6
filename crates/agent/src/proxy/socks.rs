//! The SOCKS5 proxy client: no-auth CONNECT to an IPv4, IPv6 or name destination.

use super::Net;
use sbx_agent_proto::NetError;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

async fn read_exact_timeout<R: AsyncRead + Unpin>(s: &mut R, buf: &mut [u8]) -> Option<()> {
    tokio::time::timeout(Duration::from_secs(30), s.read_exact(buf))
        .await
        .ok()?
        .ok()
        .map(|_| ())
}

pub(super) async fn socks_client(net: Arc<Net>, mut s: TcpStream) {
    let mut hdr = [0u8; 2];
    if read_exact_timeout(&mut s, &mut hdr).await.is_none() || hdr[0] != 5 {
        return;
    }
    let mut methods = vec![0u8; hdr[1] as usize];
    if read_exact_timeout(&mut s, &mut methods).await.is_none() {
        return;
    }
    if !methods.contains(&0) {
        let _ = s.write_all(&[5, 0xff]).await;
        return;
    }
    if s.write_all(&[5, 0]).await.is_err() {
        return;
    }
    let mut req = [0u8; 4];
    if read_exact_timeout(&mut s, &mut req).await.is_none() || req[0] != 5 {
        return;
    }
    let host = match req[3] {
        1 => {
            let mut a = [0u8; 4];
            if read_exact_timeout(&mut s, &mut a).await.is_none() {
                return;
            }
            std::net::Ipv4Addr::from(a).to_string()
        }
        3 => {
            let mut len = [0u8; 1];
            if read_exact_timeout(&mut s, &mut len).await.is_none() {
                return;
            }
            let mut name = vec![0u8; len[0] as usize];
            if read_exact_timeout(&mut s, &mut name).await.is_none() {
                return;
            }
            match String::from_utf8(name) {
                Ok(n) => n,
                Err(_) => return socks_reply(&mut s, 1).await,
            }
        }
        4 => {
            let mut a = [0u8; 16];
            if read_exact_timeout(&mut s, &mut a).await.is_none() {
                return;
            }
            std::net::Ipv6Addr::from(a).to_string()
        }
        _ => return socks_reply(&mut s, 8).await,
    };
    let mut port = [0u8; 2];
    if read_exact_timeout(&mut s, &mut port).await.is_none() {
        return;
    }
    let port = u16::from_be_bytes(port);
    if req[1] != 1 {
        return socks_reply(&mut s, 7).await;
    }
    match net.open(host, port).await {
        Ok(t) => {
            if s.write_all(&[5, 0, 0, 1, 0, 0, 0, 0, 0, 0]).await.is_ok() {
                t.run(s, Vec::new()).await;
            } else {
                t.net.forget(t.conn);
            }
        }
        Err(e) => {
            let code = match e {
                NetError::Denied => 2,
                NetError::Resolve | NetError::Unreachable => 4,
                NetError::Refused => 5,
                NetError::TimedOut => 6,
                NetError::Failed => 1,
            };
            socks_reply(&mut s, code).await
        }
    }
}

async fn socks_reply(s: &mut TcpStream, code: u8) {
    let _ = s.write_all(&[5, code, 0, 1, 0, 0, 0, 0, 0, 0]).await;
    let _ = s.shutdown().await;
}
