//! Deletes stale containers and cgroups through [`sbx_runsc::cleanup`].
//!
//! `cargo run -p sbx-runsc --example cleanup -- ROOT ID_PREFIX CGROUP_PARENT`
//! e.g. `... -- /tmp/runsc-probe/state runsc-probe- /runsc-probe` (as root).

use sbx_runsc::cleanup::{cleanup, CgroupCleanup};
use sbx_runsc::Runsc;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let [_, root, prefix, parent] = args.as_slice() else {
        return Err("usage: cleanup ROOT ID_PREFIX CGROUP_PARENT".into());
    };
    let rs = Runsc::new(sbx_runsc::DEFAULT_BINARY, root);
    let report = cleanup(
        &rs,
        |id| id.starts_with(prefix.as_str()),
        Some(&CgroupCleanup::new(parent.as_str())),
    )
    .await?;
    println!("{report:#?}");
    Ok(())
}
