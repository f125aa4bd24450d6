//! One proxied stream: relays a client socket over the agent channel under the credit window.

use super::{Inbound, Net};
use crate::server::Sink;
use sbx_agent_proto::{Event, NET_CHUNK_BYTES};
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, Semaphore};

/// A connected proxied stream.
pub(super) struct Tunnel {
    pub(super) net: Arc<Net>,
    pub(super) conn: u64,
    pub(super) sink: Sink,
    pub(super) inbound: mpsc::UnboundedReceiver<Inbound>,
    pub(super) credit: Arc<Semaphore>,
}

impl Tunnel {
    /// Relays between the client socket and the daemon until both sides are done.
    pub(super) async fn run(self, client: TcpStream, initial: Vec<u8>) {
        let Tunnel {
            net,
            conn,
            sink,
            mut inbound,
            credit,
        } = self;
        let (mut rd, mut wr) = client.into_split();
        let up_sink = sink.clone();
        let mut up = tokio::spawn(async move {
            let send = |bytes: Vec<u8>| {
                let sink = up_sink.clone();
                let credit = Arc::clone(&credit);
                async move {
                    let n = u32::try_from(bytes.len()).unwrap_or(u32::MAX);
                    credit.acquire_many(n).await.map_err(|_| ())?.forget();
                    sink.event(Event::NetData { conn }, bytes)
                        .await
                        .map_err(|_| ())
                }
            };
            for chunk in initial.chunks(NET_CHUNK_BYTES) {
                if send(chunk.to_vec()).await.is_err() {
                    return false;
                }
            }
            let mut buf = vec![0u8; NET_CHUNK_BYTES];
            loop {
                match rd.read(&mut buf).await {
                    Ok(0) => {
                        let _ = up_sink
                            .event(Event::NetClose { conn, reset: false }, Vec::new())
                            .await;
                        return true;
                    }
                    Ok(n) => {
                        if send(buf[..n].to_vec()).await.is_err() {
                            return false;
                        }
                    }
                    Err(_) => {
                        let _ = up_sink
                            .event(Event::NetClose { conn, reset: true }, Vec::new())
                            .await;
                        return false;
                    }
                }
            }
        });
        let mut up_done: Option<bool> = None;
        let mut down_done = false;
        loop {
            tokio::select! {
                r = &mut up, if up_done.is_none() => {
                    let ok = r.unwrap_or(false);
                    up_done = Some(ok);
                    if !ok { break; }
                    if down_done { break; }
                }
                item = inbound.recv(), if !down_done => match item {
                    Some(Inbound::Data(bytes)) => {
                        let n = bytes.len() as u64;
                        if wr.write_all(&bytes).await.is_err() {
                            let _ = sink.event(Event::NetClose { conn, reset: true }, Vec::new()).await;
                            break;
                        }
                        net.consumed(conn, n);
                        if sink.event(Event::NetAck { conn, bytes: n }, Vec::new()).await.is_err() {
                            break;
                        }
                    }
                    Some(Inbound::Eof) => {
                        let _ = wr.shutdown().await;
                        down_done = true;
                        if up_done.is_some() { break; }
                    }
                    Some(Inbound::Reset) | None => break,
                },
            }
        }
        up.abort();
        net.forget(conn);
    }
}
