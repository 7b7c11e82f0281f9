//! Signed checkpoints (SPEC.md §16.3): a session's head signed with the key the user
//! signs commits with (git's `user.signingkey`, `gpg.format ssh`), as SSHSIG, so that
//! `ssh-keygen -Y verify` checks it without tacho; verified here in-process (the
//! `ssh-key` crate) against git's `gpg.ssh.allowedSignersFile`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use serde::Serialize;
use ssh_key::{HashAlg, PublicKey, SshSig};
use tacho_git::remote::git_command;

/// The SSHSIG namespace of tacho's signatures (`ssh-keygen -Y … -n tacho-session`).
pub const NAMESPACE: &str = "tacho-session";
/// The first line of the text a signature covers.
const SIGNED_HEADER: &str = "tacho-session-signature v1";
/// Where `ssh-keygen` is looked for, in order (never through `PATH`).
pub const SSH_KEYGEN_PATHS: &[&str] = &[
    "/usr/bin/ssh-keygen",
    "/usr/local/bin/ssh-keygen",
    "/bin/ssh-keygen",
];

/// What a signature covers: a session's head.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SignedHead {
    pub session: String,
    /// Events in the session at the head.
    pub events: u64,
    /// The chain value after them (hex).
    pub head: String,
}

impl SignedHead {
    /// The exact bytes signed: four lines.
    pub fn text(&self) -> String {
        format!(
            "{SIGNED_HEADER}\nsession {}\nevents {}\nhead {}\n",
            self.session, self.events, self.head
        )
    }

    /// Reads what [`SignedHead::text`] writes, and nothing else.
    pub fn parse(bytes: &[u8]) -> Option<SignedHead> {
        let text = std::str::from_utf8(bytes).ok()?;
        let mut lines = text.strip_suffix('\n')?.split('\n');
        (lines.next()? == SIGNED_HEADER).then_some(())?;
        let session = lines.next()?.strip_prefix("session ")?.to_owned();
        let events = lines.next()?.strip_prefix("events ")?.parse().ok()?;
        let head = lines.next()?.strip_prefix("head ")?.to_owned();
        let h = SignedHead {
            session,
            events,
            head,
        };
        (lines.next().is_none() && h.text() == text).then_some(h)
    }
}

/// Whether, and by whom, a session's head is signed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum SignatureStatus {
    /// No signature is kept for the session.
    Unsigned,
    /// A good signature by a key of the allowed signers file.
    Signed {
        fingerprint: String,
        principals: Vec<String>,
        /// Events the signature covers (the session may have grown since).
        events: u64,
    },
    /// A good signature by a key the allowed signers file does not hold (or no such
    /// file is configured).
    UnknownKey { fingerprint: String, events: u64 },
    /// The signature does not verify, or does not cover this log.
    Bad { reason: String },
}

impl SignatureStatus {
    /// One line for people.
    pub fn describe(&self) -> String {
        match self {
            SignatureStatus::Unsigned => "unsigned".into(),
            SignatureStatus::Signed {
                fingerprint,
                principals,
                events,
            } => format!(
                "signed by {} ({fingerprint}), {events} events",
                principals.join(", ")
            ),
            SignatureStatus::UnknownKey {
                fingerprint,
                events,
            } => format!(
                "signed by an unknown key {fingerprint} (not in gpg.ssh.allowedSignersFile), {events} events"
            ),
            SignatureStatus::Bad { reason } => format!("BAD SIGNATURE: {reason}"),
        }
    }
}

/// Why a session could not be signed.
#[derive(Debug, thiserror::Error)]
pub enum SignError {
    #[error("no ssh-keygen at {}: tacho runs it only from there", SSH_KEYGEN_PATHS.join(", "))]
    NoSshKeygen,
    #[error("signing with {key}: {detail}")]
    Failed { key: String, detail: String },
    #[error("writing the literal signing key to {}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// The signing key of the project's git configuration: `user.signingkey` when
/// `gpg.format` is `ssh` (`None` otherwise: sessions go unsigned).
pub fn signing_key(project: &Path) -> Option<String> {
    let format = git_config(project, "gpg.format")?;
    if format != "ssh" {
        return None;
    }
    git_config(project, "user.signingkey")
}

/// The allowed signers file git verifies SSH signatures against, from the git
/// configuration seen in `dir` (`~/` expanded).
pub fn allowed_signers_file(dir: &Path) -> Option<PathBuf> {
    let v = git_config(dir, "gpg.ssh.allowedSignersFile")?;
    match v.strip_prefix("~/") {
        Some(rest) => std::env::var_os("HOME").map(|h| PathBuf::from(h).join(rest)),
        None => Some(PathBuf::from(v)),
    }
}

fn git_config(dir: &Path, key: &str) -> Option<String> {
    let mut c = git_command(dir).ok()?;
    c.args(["config", "--get", key]);
    let out = c.stderr(Stdio::null()).output().ok()?;
    let v = String::from_utf8(out.stdout).ok()?.trim().to_owned();
    (out.status.success() && !v.is_empty()).then_some(v)
}

/// Signs `head` with `key` (a key file, or `key::<public key>` whose private half
/// ssh-agent holds, as git takes it) by `ssh-keygen -Y sign -n tacho-session`: the
/// armored SSHSIG.
pub fn sign(key: &str, head: &SignedHead, scratch: &Path) -> Result<Vec<u8>, SignError> {
    let program = SSH_KEYGEN_PATHS
        .iter()
        .copied()
        .find(|p| Path::new(p).is_file())
        .ok_or(SignError::NoSshKeygen)?;
    let failed = |detail: String| SignError::Failed {
        key: key.to_owned(),
        detail,
    };
    let mut literal = None;
    let key_file = match key.strip_prefix("key::") {
        Some(public) => {
            let path = scratch.join(format!("signing-key-{}.pub", std::process::id()));
            std::fs::write(&path, format!("{public}\n")).map_err(|source| SignError::Io {
                path: path.clone(),
                source,
            })?;
            literal = Some(path.clone());
            path
        }
        None => match key.strip_prefix("~/") {
            Some(rest) => std::env::var_os("HOME")
                .map(|h| PathBuf::from(h).join(rest))
                .unwrap_or_else(|| PathBuf::from(key)),
            None => PathBuf::from(key),
        },
    };
    let mut c = std::process::Command::new(program);
    c.args(["-Y", "sign", "-n", NAMESPACE, "-q"]);
    if literal.is_some() {
        c.arg("-U");
    }
    c.arg("-f").arg(&key_file);
    let run = (|| {
        let mut child = c
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| failed(format!("running {program}: {e}")))?;
        if let Some(mut stdin) = child.stdin.take() {
            stdin
                .write_all(head.text().as_bytes())
                .map_err(|e| failed(format!("writing to {program}: {e}")))?;
        }
        let out = child
            .wait_with_output()
            .map_err(|e| failed(format!("running {program}: {e}")))?;
        if !out.status.success() || out.stdout.is_empty() {
            return Err(failed(format!(
                "{program} -Y sign failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        Ok(out.stdout)
    })();
    if let Some(p) = literal {
        let _ = std::fs::remove_file(p);
    }
    run
}

/// Verifies `signature` (armored SSHSIG) over `signed` in tacho's namespace, and looks
/// its key up in `allowed` (an allowed signers file's text, if any). A signature that
/// fails is [`SignatureStatus::Bad`]; that it covers the right head is the caller's
/// check ([`SignedHead::parse`]).
pub fn verify(signed: &[u8], signature: &[u8], allowed: Option<&str>) -> SignatureStatus {
    let bad = |reason: String| SignatureStatus::Bad { reason };
    let Some(head) = SignedHead::parse(signed) else {
        return bad("the signed text is not what tacho signs".into());
    };
    let sig = match SshSig::from_pem(signature) {
        Ok(s) => s,
        Err(e) => return bad(format!("not an SSH signature: {e}")),
    };
    let key = PublicKey::from(sig.public_key().clone());
    if let Err(e) = key.verify(NAMESPACE, signed, &sig) {
        return bad(format!(
            "the signature by {} does not verify: {e}",
            key.fingerprint(HashAlg::Sha256)
        ));
    }
    let fingerprint = key.fingerprint(HashAlg::Sha256).to_string();
    let principals = allowed
        .map(|text| {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs() as i64);
            allowed_principals(text, &key, now)
        })
        .unwrap_or_default();
    if principals.is_empty() {
        SignatureStatus::UnknownKey {
            fingerprint,
            events: head.events,
        }
    } else {
        SignatureStatus::Signed {
            fingerprint,
            principals,
            events: head.events,
        }
    }
}

/// The principals an allowed signers file (ssh-keygen(1), "ALLOWED SIGNERS") gives
/// `key` for tacho's namespace at time `now` (Unix seconds), read as `ssh-keygen -Y
/// verify` reads it: lines `principals [options] keytype base64 [comment]`; a line
/// counts only when its `namespaces=` (if any) names tacho's namespace, `now` lies
/// within its `valid-after=` and `valid-before=` (a time it cannot read: the line does
/// not count), it is not `cert-authority` (which trusts certificates the key signs,
/// not the key's own signatures), and its principals hold no negated pattern (`!…`,
/// which ssh-keygen matches against a principal tacho is not given: fail closed).
fn allowed_principals(text: &str, key: &PublicKey, now: i64) -> Vec<String> {
    let mut out = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let words: Vec<&str> = line.split_whitespace().collect();
        // The key is the first place where `keytype base64` parses.
        let Some(at) = (1..words.len()).find(|&i| {
            PublicKey::from_openssh(&words[i..words.len().min(i + 2)].join(" ")).is_ok()
        }) else {
            continue;
        };
        let Ok(listed) = PublicKey::from_openssh(&words[at..at + 2].join(" ")) else {
            continue;
        };
        if listed.key_data() != key.key_data() {
            continue;
        }
        let options = words[1..at].join(" ");
        if let Some(ns) = option_value(&options, "namespaces")
            && !ns.split(',').any(|n| n.trim() == NAMESPACE)
        {
            continue;
        }
        if has_flag(&options, "cert-authority") {
            continue;
        }
        let within = |name: &str, ok: &dyn Fn(i64) -> bool| match option_value(&options, name) {
            None => true,
            Some(v) => ssh_time(v).is_some_and(ok),
        };
        if !within("valid-after", &|t| now >= t) || !within("valid-before", &|t| now <= t) {
            continue;
        }
        let principals: Vec<&str> = words[0].trim_matches('"').split(',').collect();
        if principals.iter().any(|p| p.starts_with('!')) {
            continue;
        }
        out.extend(principals.into_iter().map(str::to_owned));
    }
    out.sort();
    out.dedup();
    out
}

/// Whether the options hold the bare flag `name` (e.g. `cert-authority`).
fn has_flag(options: &str, name: &str) -> bool {
    options
        .split(',')
        .any(|o| o.trim().eq_ignore_ascii_case(name))
}

/// A time of an allowed signer's `valid-after`/`valid-before` as ssh-keygen(1) takes
/// it — `YYYYMMDD`, `YYYYMMDDHHMM` or `YYYYMMDDHHMMSS`, with an optional `Z` — as Unix
/// seconds (read as UTC: with or without the `Z`, which ssh-keygen reads as local time,
/// the same on a machine that runs in UTC as CI does). `None` for anything else.
fn ssh_time(v: &str) -> Option<i64> {
    let v = v.strip_suffix(['Z', 'z']).unwrap_or(v);
    if !v.bytes().all(|b| b.is_ascii_digit()) || ![8, 12, 14].contains(&v.len()) {
        return None;
    }
    let n = |a: usize, b: usize| v.get(a..b).and_then(|x| x.parse::<i64>().ok());
    let (y, m, d) = (n(0, 4)?, n(4, 6)?, n(6, 8)?);
    let (h, mi, s) = (
        n(8, 10).unwrap_or(0),
        n(10, 12).unwrap_or(0),
        n(12, 14).unwrap_or(0),
    );
    if !(1..=12).contains(&m) || !(1..=31).contains(&d) || h > 23 || mi > 59 || s > 60 {
        return None;
    }
    // Days from the civil date (proleptic Gregorian), after Howard Hinnant.
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(days * 86_400 + h * 3_600 + mi * 60 + s)
}

/// The value of `name="…"` (or `name=…`) among an allowed signer's options.
fn option_value<'a>(options: &'a str, name: &str) -> Option<&'a str> {
    let lower = options.to_ascii_lowercase();
    let at = lower.find(&format!("{name}="))?;
    let rest = &options[at + name.len() + 1..];
    Some(match rest.strip_prefix('"') {
        Some(q) => q.split('"').next().unwrap_or(""),
        None => rest.split([',', ' ']).next().unwrap_or(""),
    })
}

/// A raw Ed25519 signer for DSSE envelopes (SPEC §17.5): the signature is Ed25519 over
/// the bytes given (DSSE's PAE), as securesystemslib and every DSSE verifier check it,
/// not SSHSIG. The key is given as git's `user.signingkey` is: an unencrypted OpenSSH
/// private key file signs in process; `key::<public key>`, a public key file or an
/// encrypted private key file sign through ssh-agent (`SSH_AUTH_SOCK`), whose answer
/// is checked against the public key before it is used.
pub struct RawSigner {
    public: ssh_key::PublicKey,
    raw: [u8; 32],
    private: Option<ssh_key::PrivateKey>,
    /// The ssh-agent socket that signs when `private` is `None`.
    agent: Option<PathBuf>,
}

/// Key files larger than this are no key.
const KEY_FILE_BYTES_MAX: u64 = 1 << 20;

impl RawSigner {
    /// The signer for `key` (see [`RawSigner`]): Ed25519 keys only; the agent is
    /// `SSH_AUTH_SOCK`'s.
    pub fn open(key: &str) -> Result<RawSigner, SignError> {
        Self::open_with_agent(key, std::env::var_os("SSH_AUTH_SOCK").map(PathBuf::from))
    }

    /// [`RawSigner::open`] with the ssh-agent at `agent`.
    pub fn open_with_agent(key: &str, agent: Option<PathBuf>) -> Result<RawSigner, SignError> {
        let failed = |detail: String| SignError::Failed {
            key: key.to_owned(),
            detail,
        };
        let (public, private) = match key.strip_prefix("key::") {
            Some(line) => (
                ssh_key::PublicKey::from_openssh(line.trim())
                    .map_err(|e| failed(format!("not an OpenSSH public key: {e}")))?,
                None,
            ),
            None => {
                let path = match key.strip_prefix("~/") {
                    Some(rest) => std::env::var_os("HOME")
                        .map(|h| PathBuf::from(h).join(rest))
                        .unwrap_or_else(|| PathBuf::from(key)),
                    None => PathBuf::from(key),
                };
                // The key file is named by git's configuration, which the repository's
                // `.git/config` can set: a regular file of sane size, read with a limit
                // (a FIFO would block, a device never end).
                // Opened without blocking (a FIFO would wait for a writer), then asked
                // what it is: the file read is the file checked.
                let file = {
                    use std::os::unix::fs::OpenOptionsExt;
                    std::fs::OpenOptions::new()
                        .read(true)
                        .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
                        .open(&path)
                        .map_err(|e| failed(format!("{}: {e}", path.display())))?
                };
                let meta = file
                    .metadata()
                    .map_err(|e| failed(format!("{}: {e}", path.display())))?;
                if !meta.is_file() {
                    return Err(failed(format!("{} is not a regular file", path.display())));
                }
                if meta.len() > KEY_FILE_BYTES_MAX {
                    return Err(failed(format!(
                        "{} bytes: no key file is that large",
                        meta.len()
                    )));
                }
                let mut text = String::new();
                {
                    use std::io::Read;
                    file.take(KEY_FILE_BYTES_MAX)
                        .read_to_string(&mut text)
                        .map_err(|e| failed(format!("{}: {e}", path.display())))?;
                }
                if text
                    .trim_start()
                    .starts_with("-----BEGIN OPENSSH PRIVATE KEY-----")
                {
                    let k = ssh_key::PrivateKey::from_openssh(text.as_bytes())
                        .map_err(|e| failed(format!("not an OpenSSH private key: {e}")))?;
                    let public = k.public_key().clone();
                    (public, (!k.is_encrypted()).then_some(k))
                } else {
                    (
                        ssh_key::PublicKey::from_openssh(text.trim()).map_err(|e| {
                            failed(format!("neither an OpenSSH private nor public key: {e}"))
                        })?,
                        None,
                    )
                }
            }
        };
        let raw = public.key_data().ed25519().map(|k| k.0).ok_or_else(|| {
            failed(format!(
                "a {} key: DSSE envelopes are signed with Ed25519 keys only",
                public.algorithm()
            ))
        })?;
        Ok(RawSigner {
            public,
            raw,
            private,
            agent,
        })
    }

    /// The key's id as securesystemslib computes it: SHA-256 of the canonical JSON of
    /// `{"keytype":"ed25519","keyval":{"public":HEX},"scheme":"ed25519"}`, in hex.
    pub fn keyid(&self) -> String {
        use ssh_key::sha2::{Digest, Sha256};
        let canonical = format!(
            r#"{{"keytype":"ed25519","keyval":{{"public":"{}"}},"scheme":"ed25519"}}"#,
            tacho_store::hex(&self.raw)
        );
        tacho_store::hex(&Sha256::digest(canonical.as_bytes()))
    }

    /// The public key, as an `authorized_keys` line without comment.
    pub fn public_openssh(&self) -> String {
        let mut p = self.public.clone();
        p.set_comment("");
        p.to_openssh().unwrap_or_default()
    }

    /// The SSH fingerprint of the key (`SHA256:…`).
    pub fn fingerprint(&self) -> String {
        self.public.fingerprint(HashAlg::Sha256).to_string()
    }

    /// Signs `message`: 64 bytes of Ed25519.
    pub fn sign(&self, message: &[u8]) -> Result<Vec<u8>, SignError> {
        use signature::{Signer, Verifier};
        let failed = |detail: String| SignError::Failed {
            key: self.fingerprint(),
            detail,
        };
        let sig = match &self.private {
            Some(k) => k
                .try_sign(message)
                .map_err(|e| failed(format!("signing in process: {e}")))?,
            None => {
                let wire = self
                    .public
                    .to_bytes()
                    .map_err(|e| failed(format!("encoding the public key: {e}")))?;
                let sock = self.agent.as_deref().ok_or_else(|| {
                    failed("its private half is not in the key file, and SSH_AUTH_SOCK names no ssh-agent".into())
                })?;
                let raw = agent_sign(sock, &wire, message).map_err(failed)?;
                ssh_key::Signature::new(ssh_key::Algorithm::Ed25519, raw)
                    .map_err(|e| failed(format!("ssh-agent's signature: {e}")))?
            }
        };
        // Whatever answered on the agent's socket, the signature must be the key's.
        self.public
            .key_data()
            .verify(message, &sig)
            .map_err(|_| failed("the signature made does not verify with the key".into()))?;
        Ok(sig.as_bytes().to_vec())
    }
}

/// How long ssh-agent may take to answer (it may ask the user to confirm).
const AGENT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(120);

/// Asks the ssh-agent at `sock` to sign `data` with the key whose wire
/// encoding is `key` (SSH_AGENTC_SIGN_REQUEST, no flags): the raw Ed25519 signature.
fn agent_sign(sock: &Path, key: &[u8], data: &[u8]) -> Result<Vec<u8>, String> {
    use std::io::Read;
    let mut s = std::os::unix::net::UnixStream::connect(sock)
        .map_err(|e| format!("connecting to ssh-agent at {}: {e}", sock.display()))?;
    // One deadline for the whole exchange: a peer that answers a byte at a time does
    // not keep tacho waiting past it.
    let deadline = std::time::Instant::now() + AGENT_TIMEOUT;
    let _ = s.set_write_timeout(Some(AGENT_TIMEOUT));
    let string = |out: &mut Vec<u8>, b: &[u8]| -> Result<(), String> {
        let n = u32::try_from(b.len()).map_err(|_| "too much to sign".to_owned())?;
        out.extend_from_slice(&n.to_be_bytes());
        out.extend_from_slice(b);
        Ok(())
    };
    let mut body = vec![13u8]; // SSH_AGENTC_SIGN_REQUEST
    string(&mut body, key)?;
    string(&mut body, data)?;
    body.extend_from_slice(&0u32.to_be_bytes());
    let mut msg = Vec::with_capacity(body.len() + 4);
    string(&mut msg, &body)?;
    s.write_all(&msg)
        .map_err(|e| format!("writing to ssh-agent: {e}"))?;
    let mut read_all = |buf: &mut [u8]| -> Result<(), String> {
        let mut at = 0;
        while at < buf.len() {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return Err(format!(
                    "ssh-agent did not answer within {} s",
                    AGENT_TIMEOUT.as_secs()
                ));
            }
            let _ = s.set_read_timeout(Some(left));
            match s.read(buf.get_mut(at..).unwrap_or_default()) {
                Ok(0) => return Err("ssh-agent closed the connection".into()),
                Ok(n) => at += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(format!("reading ssh-agent's answer: {e}")),
            }
        }
        Ok(())
    };
    let mut len = [0u8; 4];
    read_all(&mut len)?;
    let len = u32::from_be_bytes(len);
    if len == 0 || len > 1 << 16 {
        return Err(format!("ssh-agent answered with a message of {len} bytes"));
    }
    let mut answer = vec![0u8; len as usize];
    read_all(&mut answer)?;
    let (kind, rest) = answer.split_first().ok_or("an empty answer")?;
    match kind {
        14 => {} // SSH_AGENT_SIGN_RESPONSE
        5 => return Err("ssh-agent refused to sign (is the key added? ssh-add -l)".into()),
        k => return Err(format!("ssh-agent answered message type {k}")),
    }
    let take = |b: &[u8]| -> Option<(Vec<u8>, usize)> {
        let n = u32::from_be_bytes(b.get(..4)?.try_into().ok()?) as usize;
        Some((b.get(4..4usize.checked_add(n)?)?.to_vec(), 4 + n))
    };
    let (blob, _) = take(rest).ok_or("a malformed signature")?;
    let (alg, used) = take(&blob).ok_or("a malformed signature")?;
    let (sig, _) = take(blob.get(used..).unwrap_or_default()).ok_or("a malformed signature")?;
    if alg != b"ssh-ed25519" || sig.len() != 64 {
        return Err(format!(
            "ssh-agent signed with {} ({} bytes), not ssh-ed25519",
            String::from_utf8_lossy(&alg),
            sig.len()
        ));
    }
    Ok(sig)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_signed_text_reads_back_and_nothing_else_does() {
        let h = SignedHead {
            session: "ses_a".into(),
            events: 3,
            head: "ab".repeat(32),
        };
        assert_eq!(SignedHead::parse(h.text().as_bytes()), Some(h.clone()));
        let extra = format!("{}more\n", h.text());
        assert_eq!(SignedHead::parse(extra.as_bytes()), None);
        assert_eq!(
            SignedHead::parse(b"tacho-session-signature v1\nsession a\n"),
            None
        );
    }

    #[test]
    fn namespaces_option_is_read_quoted_or_bare() {
        assert_eq!(
            option_value(
                r#"cert-authority,namespaces="git,tacho-session""#,
                "namespaces"
            ),
            Some("git,tacho-session")
        );
        assert_eq!(option_value("namespaces=git", "namespaces"), Some("git"));
        assert_eq!(option_value("valid-after=1", "namespaces"), None);
    }

    /// Issue 42 (12): an allowed signers file is read as `ssh-keygen -Y verify` reads
    /// it — the reference reader decides each case, and tacho must agree: expiry
    /// (`valid-before`, `valid-after`), `cert-authority`, a negated principal,
    /// `namespaces`.
    #[test]
    fn allowed_signers_mean_what_ssh_keygen_says() {
        let Some(keygen) = SSH_KEYGEN_PATHS
            .iter()
            .copied()
            .find(|p| Path::new(p).is_file())
        else {
            eprintln!("skipped: no ssh-keygen");
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let key = dir.path().join("k");
        let st = std::process::Command::new(keygen)
            .args(["-q", "-t", "ed25519", "-N", "", "-C", "alice", "-f"])
            .arg(&key)
            .status()
            .unwrap();
        assert!(st.success());
        let public = std::fs::read_to_string(key.with_extension("pub")).unwrap();
        let public: Vec<&str> = public.split_whitespace().take(2).collect();
        let public = public.join(" ");
        let head = SignedHead {
            session: "ses_sig".into(),
            events: 4,
            head: "cd".repeat(32),
        };
        let sig = sign(key.to_str().unwrap(), &head, dir.path()).unwrap();
        let sig_file = dir.path().join("sig");
        std::fs::write(&sig_file, &sig).unwrap();
        let p = "alice@example.invalid";
        let cases = [
            (format!("{p} {public}"), true),
            (format!("{p} namespaces=\"tacho-session\" {public}"), true),
            (format!("{p} namespaces=\"git\" {public}"), false),
            (format!("{p} valid-before=\"20200101\" {public}"), false),
            (format!("{p} valid-after=\"29990101\" {public}"), false),
            (
                format!("{p} valid-after=\"20200101\",valid-before=\"29991231\" {public}"),
                true,
            ),
            (format!("{p} valid-before=\"20200101Z\" {public}"), false),
            (format!("{p} cert-authority {public}"), false),
            (format!("!{p},* {public}"), false),
        ];
        for (line, want) in cases {
            let allowed = dir.path().join("allowed");
            std::fs::write(&allowed, format!("{line}\n")).unwrap();
            let mut c = std::process::Command::new(keygen);
            c.args(["-Y", "verify", "-n", NAMESPACE, "-I", p, "-f"])
                .arg(&allowed)
                .arg("-s")
                .arg(&sig_file)
                .stdin(Stdio::piped())
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            let mut child = c.spawn().unwrap();
            child
                .stdin
                .take()
                .unwrap()
                .write_all(head.text().as_bytes())
                .unwrap();
            let reference = child.wait().unwrap().success();
            let ours = matches!(
                verify(head.text().as_bytes(), &sig, Some(&format!("{line}\n"))),
                SignatureStatus::Signed { .. }
            );
            assert_eq!(reference, want, "ssh-keygen on {line}");
            assert_eq!(ours, reference, "tacho against ssh-keygen on {line}");
        }
        assert_eq!(ssh_time("19700101"), Some(0));
        assert_eq!(ssh_time("20000301120000Z"), Some(951_912_000));
        assert_eq!(ssh_time("2000-03-01"), None);
    }

    /// Whatever listens on the agent's socket (the watched agent can bind it), a
    /// signature that is not the key's is refused, never written to an envelope.
    #[test]
    fn an_agent_that_signs_with_another_key_is_refused() {
        use std::io::{Read, Write};
        let seed = |b: u8| {
            ssh_key::PrivateKey::from(ssh_key::private::Ed25519Keypair::from_seed(&[b; 32]))
        };
        let (ours, theirs) = (seed(1), seed(2));
        let dir = tempfile::tempdir().expect("tempdir");
        let sock = dir.path().join("agent.sock");
        let listener = std::os::unix::net::UnixListener::bind(&sock).expect("bind");
        let server = std::thread::spawn(move || {
            let (mut c, _) = listener.accept().expect("accept");
            let mut len = [0u8; 4];
            c.read_exact(&mut len).expect("read");
            let mut req = vec![0u8; u32::from_be_bytes(len) as usize];
            c.read_exact(&mut req).expect("read");
            // The data to sign is the request's second string.
            let klen = u32::from_be_bytes(req[1..5].try_into().expect("len")) as usize;
            let at = 5 + klen;
            let dlen = u32::from_be_bytes(req[at..at + 4].try_into().expect("len")) as usize;
            let data = &req[at + 4..at + 4 + dlen];
            use signature::Signer;
            let sig = theirs.try_sign(data).expect("sign");
            let mut blob = Vec::new();
            for part in [b"ssh-ed25519".as_slice(), sig.as_bytes()] {
                blob.extend_from_slice(&(part.len() as u32).to_be_bytes());
                blob.extend_from_slice(part);
            }
            let mut body = vec![14u8];
            body.extend_from_slice(&(blob.len() as u32).to_be_bytes());
            body.extend_from_slice(&blob);
            c.write_all(&(body.len() as u32).to_be_bytes())
                .expect("write");
            c.write_all(&body).expect("write");
        });
        let public = ours.public_key().to_openssh().expect("openssh");
        let signer =
            RawSigner::open_with_agent(&format!("key::{public}"), Some(sock)).expect("open");
        let err = signer.sign(b"statement").expect_err("refused");
        assert!(
            err.to_string().contains("does not verify with the key"),
            "{err}"
        );
        server.join().expect("server");
    }
}
