//! Length-prefixed frames: `u32 BE total_len | u32 BE header_len | header JSON | payload`.

use crate::messages::Header;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Largest frame (header + payload + the 4-byte header length) either side accepts.
pub const MAX_FRAME_BYTES: usize = 8 * 1024 * 1024;
/// Largest JSON header either side accepts. Large enough for a directory
/// listing of ~30k entries or a process list of 1000 processes.
pub const MAX_HEADER_BYTES: usize = 4 * 1024 * 1024;

/// One protocol frame: a JSON header plus opaque payload bytes.
#[derive(Debug, Clone, PartialEq)]
pub struct Frame {
    /// The typed header (request id and message).
    pub header: Header,
    /// Raw bytes carried next to the header (file data, process output).
    pub payload: Vec<u8>,
}

impl Frame {
    /// A frame with an empty payload.
    pub fn new(header: Header) -> Self {
        Frame {
            header,
            payload: Vec::new(),
        }
    }

    /// A frame carrying payload bytes.
    pub fn with_payload(header: Header, payload: Vec<u8>) -> Self {
        Frame { header, payload }
    }

    /// Serialises the frame to its wire form.
    pub fn encode(&self) -> Result<Vec<u8>, CodecError> {
        let header = serde_json::to_vec(&self.header).map_err(CodecError::Json)?;
        if header.len() > MAX_HEADER_BYTES {
            return Err(CodecError::HeaderTooLarge(header.len()));
        }
        let total = 4 + header.len() + self.payload.len();
        if total > MAX_FRAME_BYTES {
            return Err(CodecError::FrameTooLarge(total));
        }
        let mut out = Vec::with_capacity(4 + total);
        out.extend_from_slice(&(total as u32).to_be_bytes());
        out.extend_from_slice(&(header.len() as u32).to_be_bytes());
        out.extend_from_slice(&header);
        out.extend_from_slice(&self.payload);
        Ok(out)
    }

    /// Parses one frame body (everything after the leading `total_len`).
    pub fn decode_body(body: &[u8]) -> Result<Frame, CodecError> {
        if body.len() < 4 {
            return Err(CodecError::Truncated);
        }
        let header_len = u32::from_be_bytes([body[0], body[1], body[2], body[3]]) as usize;
        if header_len > MAX_HEADER_BYTES {
            return Err(CodecError::HeaderTooLarge(header_len));
        }
        let rest = &body[4..];
        if header_len > rest.len() {
            return Err(CodecError::Truncated);
        }
        let header: Header =
            serde_json::from_slice(&rest[..header_len]).map_err(CodecError::Json)?;
        Ok(Frame {
            header,
            payload: rest[header_len..].to_vec(),
        })
    }
}

/// Why a frame could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum CodecError {
    /// The peer closed the stream cleanly between frames.
    #[error("stream closed")]
    Closed,
    /// The stream ended in the middle of a frame, or a length field lies.
    #[error("truncated frame")]
    Truncated,
    /// A frame larger than [`MAX_FRAME_BYTES`].
    #[error("frame of {0} bytes exceeds the limit")]
    FrameTooLarge(usize),
    /// A header larger than [`MAX_HEADER_BYTES`].
    #[error("frame header of {0} bytes exceeds the limit")]
    HeaderTooLarge(usize),
    /// The header is not valid JSON for [`Header`].
    #[error("bad frame header: {0}")]
    Json(serde_json::Error),
    /// The underlying stream failed.
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
}

/// Reads one frame; [`CodecError::Closed`] on a clean EOF before the first byte.
pub async fn read_frame<R: AsyncReadExt + Unpin>(reader: &mut R) -> Result<Frame, CodecError> {
    let mut len = [0u8; 4];
    let mut filled = 0;
    while filled < 4 {
        let n = reader.read(&mut len[filled..]).await?;
        if n == 0 {
            return Err(if filled == 0 {
                CodecError::Closed
            } else {
                CodecError::Truncated
            });
        }
        filled += n;
    }
    let total = u32::from_be_bytes(len) as usize;
    if total > MAX_FRAME_BYTES {
        return Err(CodecError::FrameTooLarge(total));
    }
    let mut body = vec![0u8; total];
    reader.read_exact(&mut body).await.map_err(|e| {
        if e.kind() == std::io::ErrorKind::UnexpectedEof {
            CodecError::Truncated
        } else {
            CodecError::Io(e)
        }
    })?;
    Frame::decode_body(&body)
}

/// Writes one frame and flushes it.
pub async fn write_frame<W: AsyncWriteExt + Unpin>(
    writer: &mut W,
    frame: &Frame,
) -> Result<(), CodecError> {
    let bytes = frame.encode()?;
    writer.write_all(&bytes).await?;
    writer.flush().await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::messages::{Body, Request};

    #[tokio::test]
    async fn round_trip_with_payload() {
        let frame = Frame::with_payload(
            Header {
                id: 7,
                body: Body::Request(Request::Ping),
            },
            b"hello".to_vec(),
        );
        let bytes = frame.encode().unwrap();
        let mut reader = &bytes[..];
        let back = read_frame(&mut reader).await.unwrap();
        assert_eq!(back, frame);
        assert!(matches!(
            read_frame(&mut reader).await,
            Err(CodecError::Closed)
        ));
    }

    #[tokio::test]
    async fn rejects_oversized_and_truncated_frames() {
        let huge = ((MAX_FRAME_BYTES + 1) as u32).to_be_bytes();
        assert!(matches!(
            read_frame(&mut &huge[..]).await,
            Err(CodecError::FrameTooLarge(_))
        ));
        let frame = Frame::new(Header {
            id: 1,
            body: Body::Request(Request::Ping),
        });
        let bytes = frame.encode().unwrap();
        let cut = &bytes[..bytes.len() - 1];
        assert!(matches!(
            read_frame(&mut &cut[..]).await,
            Err(CodecError::Truncated)
        ));
        // A header length that points past the body.
        let mut lying = vec![0, 0, 0, 8, 0, 0, 0, 99];
        lying.extend_from_slice(b"{}{}");
        assert!(matches!(
            read_frame(&mut &lying[..]).await,
            Err(CodecError::Truncated)
        ));
    }

    #[test]
    fn garbage_header_is_an_error_not_a_panic() {
        let body = [0, 0, 0, 3, b'{', b'x', b'}'];
        assert!(matches!(
            Frame::decode_body(&body),
            Err(CodecError::Json(_))
        ));
    }
}
