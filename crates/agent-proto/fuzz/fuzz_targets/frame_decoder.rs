//! libFuzzer target for the agent frame decoder.
//!
//! The input is a byte stream as the daemon or the agent would receive it.
//! Properties: `read_frame` and `Frame::decode_body` never panic, they agree
//! with each other, and anything that decodes re-encodes to the same frame.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sbx_agent_proto::{read_frame, CodecError, Frame, MAX_FRAME_BYTES};
use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

/// `&[u8]` readers are always ready: one poll finishes the future.
fn run_ready<F: Future>(f: F) -> F::Output {
    let mut f = pin!(f);
    let mut cx = Context::from_waker(Waker::noop());
    match f.as_mut().poll(&mut cx) {
        Poll::Ready(v) => v,
        Poll::Pending => panic!("read_frame pending on a slice"),
    }
}

fuzz_target!(|data: &[u8]| {
    // The body alone, as decode_body sees it.
    let direct = Frame::decode_body(data);
    if let Ok(frame) = &direct {
        if let Ok(wire) = frame.encode() {
            let back = Frame::decode_body(&wire[4..]).expect("re-encoded frame decodes");
            assert_eq!(&back, frame);
        }
    }

    // The same bytes as a stream of frames: read until the stream ends or fails.
    let mut rest = data;
    for _ in 0..64 {
        let before = rest.len();
        match run_ready(read_frame(&mut rest)) {
            Ok(frame) => {
                // The frame consumed exactly its announced length.
                let total = before - rest.len();
                assert!(total >= 8 && total <= MAX_FRAME_BYTES + 4);
                // Defaults filled in on decode can make the re-encoded header
                // longer than the input, so encode may refuse a frame near the limit.
                if let Ok(wire) = frame.encode() {
                    assert_eq!(Frame::decode_body(&wire[4..]).expect("round trip"), frame);
                }
            }
            Err(CodecError::Closed) => {
                assert_eq!(before, 0);
                break;
            }
            Err(CodecError::Io(e)) => panic!("i/o error from a slice: {e}"),
            Err(_) => break,
        }
    }
});
