//! Which paths are security-sensitive or part of an API surface: fragments and names
//! match whatever the case of their ASCII letters, anywhere in the path.

use tacho_projections::{is_api_surface, is_security_sensitive};

#[test]
fn sensitive_paths_ignore_ascii_case() {
    for p in [
        "src/auth/login.rs",
        "src/AUTH/Login.rs",
        "config/Secrets.yaml",
        "keys/server.PEM",
        ".github/workflows/ci.yml",
        ".GitHub/Workflows/ci.yml",
        "deploy/.env",
        "deploy/.ENV",
        ".env.local",
        "app/.Env.Production",
        "Dockerfile",
        "build/JenkinsFile",
        "docs/ünïcode/Token.md",
    ] {
        assert!(is_security_sensitive(p), "{p}");
    }
    for p in [
        "src/main.rs",
        "README.md",
        "src/envelope.rs",
        "deploy/.envrc",
        "deploy/x.env",
        "dockerfile.md/readme",
        "ünïcode/ßtraße.txt",
        "",
    ] {
        assert!(!is_security_sensitive(p), "{p}");
    }
}

#[test]
fn api_paths_ignore_ascii_case() {
    for p in [
        "src/API/v1.rs",
        "src/lib.rs",
        "src/Lib.RS",
        "web/Index.TS",
        "pkg/__init__.py",
        "types/x.D.ts",
        "proto/svc.PROTO",
    ] {
        assert!(is_api_surface(p), "{p}");
    }
    for p in ["lib.rs", "src/main.rs", "README.md", ""] {
        assert!(!is_api_surface(p), "{p}");
    }
}
