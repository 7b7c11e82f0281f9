//! Links `tacho` as a position-dependent executable on Linux (`-no-pie`).
//!
//! Every hook is a new `tacho` process, so its start is paid at every event of an
//! agent. As a position-independent executable the binary carries about 40,000
//! relative relocations that the dynamic loader applies at each start, writing (and so
//! copying) every page of its relocated data: about 170 page faults and 0.4 ms of a
//! 2 ms start on the machine it was measured on (`perf stat`, `tacho --version`).
//! Linked at a fixed address it needs none. What that gives up is the randomised
//! address of the executable's own code (libraries, heap and stack stay randomised):
//! the processes tacho protects its evidence from already run as the same user with a
//! shell, which is the stronger position (ARCHITECTURE.md).

fn main() {
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let env = std::env::var("CARGO_CFG_TARGET_ENV").unwrap_or_default();
    if os == "linux" && env == "gnu" {
        println!("cargo:rustc-link-arg-bin=tacho=-no-pie");
    }
    println!("cargo:rerun-if-changed=build.rs");
}
