//! Property-based API testing with schemathesis (tests/schemathesis/run.sh):
//! generated requests against docs/openapi.yaml on a real sbxd must never get
//! a 5xx and every response must conform to the spec. Takes about a minute
//! (two the first time, when the pinned venv is installed).

use std::process::Command;

#[test]
#[ignore = "needs root, runsc, the image and PyPI (first run); run ./scripts/test"]
fn schemathesis_finds_no_server_error_or_schema_mismatch() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let started = std::time::Instant::now();
    let status = Command::new("bash")
        .arg(format!("{root}/tests/schemathesis/run.sh"))
        // The sbxd built for these tests, not whatever release build is around.
        .env("SBX_ST_SBXD", env!("CARGO_BIN_EXE_sbxd"))
        .status()
        .expect("run tests/schemathesis/run.sh");
    println!("schemathesis run took {:?}", started.elapsed());
    assert!(
        status.success(),
        "schemathesis found failures ({status}); see its output above and target/schemathesis-report/"
    );
}
