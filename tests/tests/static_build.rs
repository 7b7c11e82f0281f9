//! The statically linked build the README offers on x86-64 Linux with glibc (every
//! hook process starts without the dynamic loader): it builds with the README's
//! command, is static, and works — the demo, `log verify`, a hook, and an OTLP export
//! to a collector named by host name (glibc resolves names through NSS, which a static
//! binary loads at run time).
//!
//! A release build of its own (6 to 11 minutes on a 2-core machine, more than a third
//! of CI's 25-minute budget): a campaign run with `TACHO_TEST_STATIC_BUILD=1`; skipped
//! otherwise, and on other platforms.

#![allow(clippy::unwrap_used)] // tests fail loudly on purpose

/// The flags of the static build, as the README gives them.
#[cfg(all(target_os = "linux", target_arch = "x86_64", target_env = "gnu"))]
const STATIC_FLAGS: &str = r#"target.x86_64-unknown-linux-gnu.rustflags=["-C","target-feature=+crt-static","-C","relocation-model=static"]"#;

#[cfg(all(target_os = "linux", target_arch = "x86_64", target_env = "gnu"))]
#[test]
fn the_static_build_is_static_and_works() {
    use std::io::{BufRead, BufReader, Read, Write};
    use std::path::Path;
    use std::process::Command;

    let root = tacho_tests::repo_root();
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    assert!(
        readme.contains(&format!("--config '{STATIC_FLAGS}'")),
        "the README's static build command has other flags than this test builds with"
    );
    if std::env::var_os("TACHO_TEST_STATIC_BUILD").is_none() {
        eprintln!("skipped: a release build of its own (set TACHO_TEST_STATIC_BUILD=1)");
        return;
    }
    let target_dir = root.join("target").join("static");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = Command::new(cargo)
        .current_dir(&root)
        .env("CARGO_TARGET_DIR", &target_dir)
        .args([
            "build",
            "--release",
            "-p",
            "tacho-cli",
            "--target",
            "x86_64-unknown-linux-gnu",
            "--config",
            STATIC_FLAGS,
        ])
        .status()
        .unwrap();
    assert!(status.success(), "the static build failed");
    let bin = target_dir.join("x86_64-unknown-linux-gnu/release/tacho");

    // No program interpreter: the kernel starts it without the dynamic loader.
    let elf = std::fs::read(&bin).unwrap();
    assert_eq!(elf.get(..4), Some(&b"\x7fELF"[..]));
    let u16_at = |at: usize| u16::from_le_bytes(elf[at..at + 2].try_into().unwrap());
    let u32_at = |at: usize| u32::from_le_bytes(elf[at..at + 4].try_into().unwrap());
    let u64_at = |at: usize| u64::from_le_bytes(elf[at..at + 8].try_into().unwrap());
    let (phoff, phentsize, phnum) = (u64_at(0x20) as usize, u16_at(0x36), u16_at(0x38));
    let types: Vec<u32> = (0..usize::from(phnum))
        .map(|i| u32_at(phoff + i * usize::from(phentsize)))
        .collect();
    const PT_INTERP: u32 = 3;
    const PT_DYNAMIC: u32 = 2;
    assert!(!types.is_empty(), "no program headers");
    assert!(
        !types.contains(&PT_INTERP) && !types.contains(&PT_DYNAMIC),
        "{} is linked dynamically (program header types {types:?})",
        bin.display()
    );

    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let tacho = |dir: &Path| {
        let mut c = Command::new(&bin);
        c.env_clear()
            .env("TACHO_HOME", &home)
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .current_dir(dir);
        c
    };
    let out = tacho(tmp.path()).args(["demo"]).output().unwrap();
    assert!(
        out.status.success(),
        "demo: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = tacho(tmp.path()).args(["log", "verify"]).output().unwrap();
    assert!(
        out.status.success(),
        "log verify: {}",
        String::from_utf8_lossy(&out.stdout)
    );

    // A hook, as an agent runs it.
    let payload = serde_json::json!({"session_id": "static-build-test", "transcript_path": "/nonexistent", "cwd": ws, "hook_event_name": "SessionStart", "source": "startup"});
    let mut hook = tacho(&ws);
    hook.args(["hook", "claude-code"]);
    let (code, _, stderr) = tacho_tests::run_input(hook, &payload.to_string());
    assert!(code == 0 && stderr.is_empty(), "hook: {stderr}");
    let out = tacho(&ws)
        .args(["session", "list", "--json"])
        .output()
        .unwrap();
    let listed = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && listed.contains("static-build-test"),
        "the hook's session is not listed: {listed}"
    );

    // An export to a collector named `localhost`: the name goes through NSS.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    // (It answers every request until told to stop: a request per batch of spans.)
    let collector = std::thread::spawn(move || {
        let mut requests = Vec::new();
        for stream in listener.incoming() {
            let mut reader = BufReader::new(stream.unwrap());
            let mut request_line = String::new();
            reader.read_line(&mut request_line).unwrap();
            if request_line.starts_with("STOP") {
                break;
            }
            let mut length = 0usize;
            loop {
                let mut line = String::new();
                reader.read_line(&mut line).unwrap();
                if line.trim().is_empty() {
                    break;
                }
                if let Some((k, v)) = line.split_once(':')
                    && k.eq_ignore_ascii_case("content-length")
                {
                    length = v.trim().parse().unwrap();
                }
            }
            let mut body = vec![0u8; length];
            reader.read_exact(&mut body).unwrap();
            reader
                .into_inner()
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                .unwrap();
            requests.push((request_line, body.len()));
        }
        requests
    });
    let out = tacho(tmp.path())
        .args([
            "audit",
            "otlp",
            "--all",
            "--endpoint",
            &format!("http://localhost:{port}"),
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "audit otlp to localhost: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::net::TcpStream::connect(("127.0.0.1", port))
        .unwrap()
        .write_all(b"STOP\n")
        .unwrap();
    let requests = collector.join().unwrap();
    assert!(!requests.is_empty(), "the collector got no request");
    for (request_line, body) in requests {
        assert!(
            request_line.starts_with("POST /v1/traces "),
            "{request_line}"
        );
        assert!(body > 0, "the collector got an empty request");
    }
}
