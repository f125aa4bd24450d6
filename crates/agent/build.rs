//! Links the agent binary with `link/pad-rodata.ld` (why: see that file).

fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    println!("cargo:rerun-if-changed=link/pad-rodata.ld");
    println!("cargo:rustc-link-arg-bins=-Wl,-T,{dir}/link/pad-rodata.ld");
}
