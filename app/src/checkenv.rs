//! The environment goal checks run in (SPEC §12.2). At freeze (`goal create`, `goal
//! revise`) the values of [`FROZEN_NAMES`] are taken from the process that freezes the
//! goal, with `TERM=dumb`, and recorded in `goal.created`; every check of that goal
//! then runs with exactly that environment (everything else cleared), whatever the
//! shell that asks for the run has set. The programs a command names are resolved
//! through the frozen `PATH` and recorded with the BLAKE3 of their content, at freeze
//! and in every receipt, so the gate can refuse a receipt whose programs are not the
//! frozen ones.

use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// The variables frozen with a goal, when the freezing process has them.
pub const FROZEN_NAMES: &[&str] = &["HOME", "LANG", "LC_ALL", "PATH", "TZ", "USER"];

/// The `PATH` frozen when the freezing process has none.
pub const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// Names a shell runs itself (keywords and special built-ins): never looked up.
const NOT_PROGRAMS: &[&str] = &[
    "!", "{", "}", "[[", "]]", "(", ")", ".", ":", "case", "cd", "do", "done", "elif", "else",
    "esac", "eval", "exec", "exit", "export", "fi", "for", "if", "readonly", "return", "set",
    "shift", "then", "trap", "unset", "until", "wait", "while",
];

/// The environment to freeze, from `get` (the freezing process's variables): the
/// [`FROZEN_NAMES`] it has as UTF-8, `PATH` always, `TERM=dumb`, and each of `named`
/// (the plan's variables; the caller has checked they are set); `NAME=VALUE` sorted by
/// name, each name once.
pub fn freeze(get: impl Fn(&str) -> Option<String>, named: &[&str]) -> Vec<String> {
    let mut env: Vec<String> = FROZEN_NAMES
        .iter()
        .copied()
        .chain(
            named
                .iter()
                .copied()
                .filter(|n| !FROZEN_NAMES.contains(n) && *n != "TERM"),
        )
        .filter_map(|n| match get(n) {
            Some(v) => Some(format!("{n}={v}")),
            None if n == "PATH" => Some(format!("PATH={DEFAULT_PATH}")),
            None => None,
        })
        .collect();
    env.push("TERM=dumb".into());
    env.sort();
    env.dedup_by(|a, b| a.split_once('=').map(|x| x.0) == b.split_once('=').map(|x| x.0));
    env
}

/// A variable of this process, as UTF-8.
pub fn process_var(name: &str) -> Option<String> {
    std::env::var_os(name).and_then(|v| v.into_string().ok())
}

/// The environment frozen now from this process's variables.
pub fn freeze_from_process(named: &[&str]) -> Vec<String> {
    freeze(process_var, named)
}

/// The digest of an environment: hex of BLAKE3-derive("tacho check environment v1")
/// over each `NAME=VALUE` entry, sorted, as a u64 LE length and its bytes.
pub fn digest(env: &[String]) -> String {
    let mut sorted: Vec<&String> = env.iter().collect();
    sorted.sort();
    let mut h = blake3::Hasher::new_derive_key("tacho check environment v1");
    for e in sorted {
        h.update(&(e.len() as u64).to_le_bytes());
        h.update(e.as_bytes());
    }
    h.finalize().to_hex().to_string()
}

/// `(name, value)` pairs of an environment's entries.
pub fn pairs(env: &[String]) -> impl Iterator<Item = (&str, &str)> {
    env.iter().filter_map(|e| e.split_once('='))
}

/// The program names a command line runs: the first word of each of its simple
/// commands (as `projections::shell::commands` splits them), leading `NAME=value`
/// assignments skipped, keywords and special built-ins left out, each once, in order.
/// The shell that runs the line comes first.
pub fn program_names(command: &str, shell: &str) -> Vec<String> {
    let mut names = vec![shell.to_owned()];
    for words in tacho_projections::shell::commands(command) {
        let first = words.iter().map(|w| w.trim_start_matches('(')).find(|w| {
            // Not an assignment, nor a redirection or its target (`2>&1` splits).
            let assignment = w.contains('=') && !w.starts_with('=') && !w.contains('/');
            let redirection = w.contains(['<', '>']) || w.bytes().all(|b| b.is_ascii_digit());
            !(w.is_empty() || assignment || redirection || *w == "!")
        });
        // A relative path names a workspace file: the agent's work may change it, and
        // the fingerprint covers it when it is under `sourcePaths`.
        if let Some(w) = first
            && !NOT_PROGRAMS.contains(&w)
            && (w.starts_with('/') || !w.contains('/'))
            && !names.iter().any(|n| n == w)
        {
            names.push(w.to_owned());
        }
    }
    names
}

/// Where `name` resolves through `path` (relative entries from `ws`), as the shell would
/// find it: the first executable regular file; an absolute path as it is.
fn locate(name: &str, path: &str, ws: &Path) -> Option<std::path::PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let runnable = |p: &Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if name.starts_with('/') {
        let p = Path::new(name);
        return p.is_file().then(|| p.to_path_buf());
    }
    path.split(':')
        .map(|d| {
            if d.is_empty() {
                ws.to_path_buf()
            } else {
                ws.join(d)
            }
        })
        .map(|d| d.join(name))
        .find(|p| runnable(p))
}

/// BLAKE3 of a program's content: opened without blocking, read only as a regular file
/// (a FIFO or device planted on the PATH is refused, not waited on).
fn content_digest(p: &Path) -> Option<String> {
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
        .open(p)
        .ok()?;
    if !f.metadata().ok()?.is_file() {
        return None;
    }
    let mut h = blake3::Hasher::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = f.read(&mut buf).ok()?;
        let Some(chunk) = buf.get(..n).filter(|c| !c.is_empty()) else {
            break;
        };
        h.update(chunk);
    }
    Some(h.finalize().to_hex().to_string())
}

/// Each name resolved through the environment's `PATH` from `ws`, as `BLAKE3-HEX  PATH`
/// (the form of `b3sum`); `-  NAME` when it is found nowhere or cannot be read.
pub fn resolve(names: &[String], env: &[String], ws: &Path) -> Vec<String> {
    let path = pairs(env)
        .find(|(n, _)| *n == "PATH")
        .map_or(DEFAULT_PATH, |(_, v)| v);
    names
        .iter()
        .map(
            |name| match locate(name, path, ws).and_then(|p| content_digest(&p).map(|d| (p, d))) {
                Some((p, d)) => format!("{d}  {}", p.display()),
                None => format!("-  {name}"),
            },
        )
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_frozen_names_are_kept() {
        let get = |n: &str| match n {
            "PATH" => Some("/opt/bin:/usr/bin".into()),
            "HOME" => Some("/home/u".into()),
            "NODE_ENV" => Some("test".into()),
            "TERM" => Some("xterm".into()),
            _ => None,
        };
        let env = freeze(get, &[]);
        assert_eq!(env, ["HOME=/home/u", "PATH=/opt/bin:/usr/bin", "TERM=dumb"]);
        assert_eq!(
            freeze(get, &["NODE_ENV", "PATH", "TERM"]),
            [
                "HOME=/home/u",
                "NODE_ENV=test",
                "PATH=/opt/bin:/usr/bin",
                "TERM=dumb"
            ]
        );
        assert_eq!(
            freeze(|_| None, &[]),
            [format!("PATH={DEFAULT_PATH}"), "TERM=dumb".into()]
        );
        assert_ne!(digest(&env), digest(&freeze(|_| None, &[])));
    }

    #[test]
    fn program_names_are_the_first_words() {
        assert_eq!(
            program_names(
                "CARGO_TERM_COLOR=never cargo test 2>&1 | tail -20 && cd x && ./run.sh; (make check) && /usr/bin/env true",
                "sh"
            ),
            ["sh", "cargo", "tail", "make", "/usr/bin/env"]
        );
    }
}
