//! The source fingerprint of a workspace at the limits (20,000 files, close to 128 MiB)
//! against what a user would otherwise run,
//! `git ls-files -co --exclude-standard -z | xargs -0 sha256sum`, in the same run.
//!
//! `cargo bench -p tacho-benches --bench fingerprint`; under `cargo test` it runs once
//! on 500 files. `TACHO_BENCH_FINGERPRINT_FILES` and `TACHO_BENCH_FINGERPRINT_MB` set
//! the size. Skipped when `git` is not installed.

#![allow(clippy::unwrap_used)] // a benchmark that cannot set up should panic

use std::process::Command;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use tacho_benches::generate_workspace;
use tacho_git::fingerprint::{Fingerprint, MAX_BYTES, fingerprint};

fn bench_mode() -> bool {
    std::env::args().any(|a| a == "--bench")
}

fn benches(c: &mut Criterion) {
    if Command::new("git").arg("--version").output().is_err() {
        eprintln!("git is not installed: the fingerprint benchmark compares against it; skipped");
        return;
    }
    let env = |k: &str| std::env::var(k).ok().and_then(|v| v.parse::<u64>().ok());
    let (files, mb) = if bench_mode() {
        (20_000, 126)
    } else {
        (500, 3)
    };
    let files = env("TACHO_BENCH_FINGERPRINT_FILES").map_or(files, |v| v as usize);
    let mb = env("TACHO_BENCH_FINGERPRINT_MB").unwrap_or(mb);
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("ws");
    generate_workspace(&ws, files, mb * 1024 * 1024).unwrap();
    let ws = ws.canonicalize().unwrap();
    let st = Command::new("git")
        .args(["init", "-q"])
        .current_dir(&ws)
        .status()
        .unwrap();
    assert!(st.success());
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let total = match fingerprint(&ws, &[".".into()], &[], threads).unwrap() {
        Fingerprint::Fresh { entries, bytes, .. } => {
            assert_eq!(entries.len(), files);
            assert!(bytes <= MAX_BYTES);
            bytes
        }
        Fingerprint::NoFreshEvidence(why) => panic!("{why:?}"),
    };
    let mut g = c.benchmark_group(format!("fingerprint ({files} files, {total} bytes)"));
    g.throughput(Throughput::Bytes(total));
    g.sample_size(10)
        .measurement_time(Duration::from_secs(if bench_mode() { 20 } else { 1 }));
    g.bench_function("tacho fingerprint (gix listing, BLAKE3, all cores)", |b| {
        b.iter(|| fingerprint(&ws, &[".".into()], &[], threads).unwrap())
    });
    g.bench_function(
        "git ls-files -co --exclude-standard -z | xargs -0 sha256sum",
        |b| {
            b.iter(|| {
                let out = Command::new("sh")
                    .arg("-c")
                    .arg("git ls-files -co --exclude-standard -z | xargs -0 sha256sum")
                    .current_dir(&ws)
                    .env("GIT_CONFIG_NOSYSTEM", "1")
                    .env("GIT_CONFIG_GLOBAL", "/dev/null")
                    .output()
                    .unwrap();
                assert!(out.status.success());
                out.stdout.len()
            })
        },
    );
    g.finish();
}

criterion_group!(fingerprint_bench, benches);
criterion_main!(fingerprint_bench);
