//! The one secret detector (gitleaks' rules and tacho's own), judged on a labelled
//! corpus: credentials of real shapes it must find, ordinary code and configuration it
//! must leave alone. Recall and precision are computed, printed and held to a floor.
//!
//! The fake credentials are assembled at run time from a prefix and generated
//! characters: no full token is written in this file (a repository host's push
//! protection would rightly stop it).

use std::time::Instant;

use tacho_goals::secrets::{
    GITLEAKS_VERSION, SecretKind, credential, kinds, rule_count, scan, shannon_entropy,
    unusable_rules,
};

/// Deterministic characters from `alphabet` (a small LCG; seeded per use).
struct Chars(u64);

impl Chars {
    fn take(&mut self, alphabet: &str, n: usize) -> String {
        let a: Vec<char> = alphabet.chars().collect();
        (0..n)
            .map(|_| {
                self.0 = self
                    .0
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                a[((self.0 >> 33) as usize) % a.len()]
            })
            .collect()
    }
}

const ALNUM: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
const UPPER32: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
const B64: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
const URLSAFE: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-";
const LOWER: &str = "abcdefghijklmnopqrstuvwxyz";
const LOWNUM: &str = "abcdefghijklmnopqrstuvwxyz0123456789";
const HEX: &str = "0123456789abcdef";
const DIGITS: &str = "0123456789";

/// A PEM block: header, `lines` lines of 64 base64 characters, footer.
fn pem(c: &mut Chars, label: &str, lines: usize, footer: bool, nl: &str) -> String {
    let mut s = format!("-----BEGIN {label} PRIVATE KEY-----{nl}");
    for _ in 0..lines {
        s.push_str(&c.take(B64, 64));
        s.push_str(nl);
    }
    if footer {
        s.push_str(&format!("-----END {label} PRIVATE KEY-----{nl}"));
    }
    s
}

/// Credentials of real shapes: (label, text).
fn secrets() -> Vec<(&'static str, String)> {
    let mut c = Chars(0x7ac0_5ec2_e75e_ed01);
    let jwt = format!(
        "{}{}.{}{}.{}",
        "eyJhbGciOiJIUzI1NiIsInR5cCI6",
        "IkpXVCJ9",
        "eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6",
        c.take(ALNUM, 24),
        c.take(URLSAFE, 43)
    );
    let aws_secret = c.take(B64, 40);
    let openai_body = || {
        let mut c = Chars(42);
        format!(
            "{}{}{}",
            c.take(URLSAFE, 74),
            concat!("T3Blb", "kFJ"),
            c.take(URLSAFE, 74)
        )
    };
    vec![
        (
            "AWS access key id (credentials file)",
            format!("aws_access_key_id = {}{}", "AKIA", c.take(UPPER32, 16)),
        ),
        (
            "AWS access key id (env)",
            format!("export AWS_ACCESS_KEY_ID={}{}", "ASIA", c.take(UPPER32, 16)),
        ),
        (
            "AWS secret key (env)",
            format!("AWS_SECRET_ACCESS_KEY={aws_secret}"),
        ),
        (
            "AWS secret key (credentials file)",
            format!("aws_secret_access_key = {}", c.take(B64, 40)),
        ),
        (
            "GitHub classic PAT",
            format!("GITHUB_TOKEN={}{}{}", "gh", "p_", c.take(ALNUM, 36)),
        ),
        (
            "GitHub fine-grained PAT",
            format!(
                "token: {}{}_{}",
                "github_pat_11",
                c.take(ALNUM, 20),
                c.take(ALNUM, 59)
            ),
        ),
        (
            "GitHub OAuth token",
            format!("oauth {}{}", "gho_", c.take(ALNUM, 36)),
        ),
        (
            "GitHub app token",
            format!("\"token\": \"{}{}\"", "ghs_", c.take(ALNUM, 36)),
        ),
        (
            "GitLab PAT",
            format!("CI_TOKEN={}{}", "glpat-", c.take(URLSAFE, 20)),
        ),
        (
            "Slack bot token",
            format!(
                "slack: {}{}{}-{}-{}",
                "xox",
                "b-",
                c.take(DIGITS, 12),
                c.take(DIGITS, 12),
                c.take(ALNUM, 24)
            ),
        ),
        (
            "Slack user token",
            format!(
                "{}p-{}-{}-{}-{}",
                "xox",
                c.take(DIGITS, 11),
                c.take(DIGITS, 12),
                c.take(DIGITS, 12),
                c.take(HEX, 32)
            ),
        ),
        (
            "Slack webhook URL",
            format!(
                "curl -X POST https://hooks.slack.com/{}/T{}/B{}/{}",
                "services",
                c.take(ALNUM, 8),
                c.take(ALNUM, 10),
                c.take(ALNUM, 24)
            ),
        ),
        (
            "Stripe live secret key",
            format!(
                "stripe.api_key = \"{}{}{}\"",
                "sk_li",
                "ve_",
                c.take(ALNUM, 24)
            ),
        ),
        (
            "Stripe restricted key",
            format!("STRIPE_KEY={}{}", "rk_live_", c.take(ALNUM, 24)),
        ),
        (
            "OpenAI project key",
            format!("OPENAI_API_KEY={}{}", "sk-proj-", openai_body()),
        ),
        (
            "OpenAI legacy key",
            format!(
                "openai.api_key = '{}{}{}{}'",
                "sk-",
                c.take(ALNUM, 20),
                concat!("T3Blb", "kFJ"),
                c.take(ALNUM, 20)
            ),
        ),
        (
            "OpenAI key in code",
            format!(
                "client = OpenAI(api_key=\"{}{}\")",
                "sk-proj-",
                openai_body()
            ),
        ),
        (
            "Anthropic API key",
            format!(
                "ANTHROPIC_API_KEY={}{}{}",
                "sk-ant-api03-",
                c.take(URLSAFE, 93),
                "AA"
            ),
        ),
        (
            "Anthropic admin key",
            format!(
                "x-api-key: {}{}{}",
                "sk-ant-admin01-",
                c.take(URLSAFE, 93),
                "AA"
            ),
        ),
        (
            "Google API key",
            format!("const key = \"{}{}{}\";", "AIza", "Sy", c.take(URLSAFE, 33)),
        ),
        (
            "npm token (.npmrc)",
            format!(
                "//registry.npmjs.org/:_authToken={}{}",
                "npm_",
                c.take(ALNUM, 36)
            ),
        ),
        (
            "PyPI upload token",
            format!(
                "password = {}{}{}",
                "pypi-",
                "AgEIcHlwaS5vcmc",
                c.take(URLSAFE, 70)
            ),
        ),
        (
            "Hugging Face token",
            format!(
                "HF_TOKEN={}{}",
                "hf_",
                c.take(&format!("{LOWER}ABCDEFGHIJKLMNOPQRSTUVWXYZ"), 34)
            ),
        ),
        (
            "Azure storage connection string",
            format!(
                "DefaultEndpointsProtocol=https;AccountName=acmeprod;AccountKey={}==;EndpointSuffix=core.windows.net",
                c.take(B64, 86)
            ),
        ),
        (
            "SendGrid key",
            format!(
                "SENDGRID_API_KEY={}{}.{}",
                "SG.",
                c.take(URLSAFE, 22),
                c.take(URLSAFE, 43)
            ),
        ),
        (
            "Shopify access token",
            format!("shop_token: {}{}", "shpat_", c.take(HEX, 32)),
        ),
        (
            "DigitalOcean token",
            format!("DO_TOKEN={}{}", "dop_v1_", c.take(HEX, 64)),
        ),
        ("JWT in a header", format!("Authorization: Bearer {jwt}")),
        ("JWT in JSON", format!("{{\"id_token\": \"{jwt}\"}}")),
        (
            "Authorization Bearer opaque token",
            format!("Authorization: Bearer {}", c.take(ALNUM, 40)),
        ),
        (
            "curl Authorization header",
            format!(
                "curl -H \"Authorization: Bearer {}\" https://api.example.com/v1/me",
                c.take(URLSAFE, 32)
            ),
        ),
        (
            "Authorization Basic",
            format!(
                "headers: {{ 'Authorization': 'Basic {}=' }}",
                c.take(B64, 31)
            ),
        ),
        ("RSA private key block", pem(&mut c, "RSA", 12, true, "\n")),
        ("EC private key block", pem(&mut c, "EC", 3, true, "\n")),
        (
            "OpenSSH private key block",
            pem(&mut c, "OPENSSH", 6, true, "\n"),
        ),
        (
            "private key, JSON-escaped (service account)",
            format!(
                "{{\"type\": \"service_account\", \"private_key\": \"{}\"}}",
                pem(&mut c, "", 8, true, "\\n")
                    .replace("BEGIN  ", "BEGIN ")
                    .replace("END  ", "END ")
            ),
        ),
        (
            "private key split over lines, cut off",
            format!("$ head -5 id_rsa\n{}", pem(&mut c, "RSA", 4, false, "\n")),
        ),
        (
            "private key header ending the text",
            "-----BEGIN OPENSSH PRIVATE KEY-----".to_owned(),
        ),
        (
            "JSON password",
            format!(
                "{{\"user\": \"admin\", \"password\": \"{}!{}\"}}",
                c.take(ALNUM, 6),
                c.take(ALNUM, 4)
            ),
        ),
        (
            "YAML password, unquoted",
            format!("  password: {}#{}", c.take(LOWNUM, 5), c.take(ALNUM, 5)),
        ),
        (
            "YAML password, quoted",
            "  db_password: \"hunter2hunter2\"".to_owned(),
        ),
        (
            ".env password",
            "DB_PASSWORD=correct-horse-battery-staple".to_owned(),
        ),
        (
            ".env password, exported",
            format!(
                "export PGPASSWORD={}!{}",
                c.take(ALNUM, 4),
                c.take(ALNUM, 5)
            ),
        ),
        (
            "password in Python code",
            "conn = psycopg2.connect(host=\"db\", user=\"app\", password=\"S3cure-Pass-2024\")"
                .to_owned(),
        ),
        (
            "client secret in YAML",
            format!("client_secret: \"{}\"", c.take(ALNUM, 32)),
        ),
        (
            "Django secret key",
            format!(
                "SECRET_KEY = '{}'",
                c.take("abcdefghijklmnopqrstuvwxyz0123456789!@#%^&*-_=+", 50)
            ),
        ),
        (
            "URL password (postgres)",
            "DATABASE_URL=postgres://admin:S3cretPass@db.internal:5432/app".to_owned(),
        ),
        (
            "URL password (mongodb+srv)",
            format!(
                "mongodb+srv://svc:{}@cluster0.ab1cd.mongodb.net/prod",
                c.take(ALNUM, 16)
            ),
        ),
        (
            "URL password (redis, no user)",
            format!("REDIS_URL=redis://:{}@cache:6379/0", c.take(ALNUM, 20)),
        ),
        (
            "URL password (https basic auth)",
            "git clone https://deploy:hunter22@git.example.com/team/app.git".to_owned(),
        ),
    ]
}

/// Ordinary code and configuration: not secrets.
fn ordinary() -> Vec<&'static str> {
    vec![
        "api_key=os.environ[\"OPENAI_API_KEY\"]",
        "token=tokenizer.next_token()",
        "let token=self.lexer.next_token()?;",
        "password = getpass()",
        "token = ${{ secrets.GH_TOKEN }}",
        "api_key = \"<your-key>\"",
        "api_key: str = None",
        "password=$DB_PASSWORD",
        "export GITHUB_TOKEN=\"${GITHUB_TOKEN}\"",
        "const apiKey = process.env.STRIPE_SECRET_KEY;",
        "headers = {\"Authorization\": f\"Bearer {token}\"}",
        "curl -H \"Authorization: Bearer $TOKEN\" https://api.example.com/v1/me",
        "  password: ${DB_PASSWORD}",
        "secret_key_base: <%= ENV[\"SECRET_KEY_BASE\"] %>",
        "db_url = \"postgres://user:password@localhost/db\"",
        "DATABASE_URL=postgres://$PGUSER:$PGPASSWORD@localhost/app",
        "git clone git@github.com:org/repo.git && cd repo",
        "-----BEGIN PUBLIC KEY-----",
        "if line.starts_with(\"-----BEGIN RSA PRIVATE KEY-----\") {",
        "commit 3f2a9c1d0e8b7a6f5e4d3c2b1a0f9e8d7c6b5a4f",
        "image: node@sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
        "password_hash = bcrypt.hashpw(password.encode(), bcrypt.gensalt())",
        "self.api_key = api_key",
        "token_type = \"Bearer\"",
        "max_tokens: int = 4096",
        "const { data: session } = await supabase.auth.getSession();",
        "let secret = Secret::new(value);",
        "access_token = response.json()[\"access_token\"]",
        "OPENAI_API_KEY=your-api-key-here",
        "ANTHROPIC_API_KEY=sk-ant-...",
        "\"password\": \"********\"",
        "password: changeme",
        "def authenticate(self, username: str, password: str) -> bool:",
        "pw = keyring.get_password(\"service\", \"user\")",
        "auth_header = request.headers.get(\"Authorization\")",
        "key = cache_key(user.id, \"profile\")",
        "request_id: 123e4567-e89b-12d3-a456-426614174000",
        "token = jwt.encode(payload, SECRET_KEY, algorithm=\"HS256\")",
        "for key, value in os.environ.items():",
        "PASSWORD_MIN_LENGTH = 12",
        "pub fn next_token(&mut self) -> Option<Token> {",
        "      - name: GITHUB_TOKEN\n        valueFrom:\n          secretKeyRef:\n            name: gh\n            key: token",
        "password: str = Field(..., min_length=8)",
        "aws_access_key_id = AKIAIOSFODNN7EXAMPLE",
        "stripe.api_key = \"sk_test_...\"",
        "let key = format!(\"{prefix}:{id}\");",
        "\"integrity\": \"sha512-Kq5sNclPz7QV2+lfQIuuNGqECzJmIZJHXqwO87N23plqrvrPZQ37yMzL2lNkmP6Z6oBdYmv3KrTx5/hqDyHwXw==\"",
        "if (!process.env.NPM_TOKEN) throw new Error(\"NPM_TOKEN is not set\");",
        "the task: rename ghp_ to the token prefix",
        "password=short",
        "secret: \"projects/my-project/secrets/db-password/versions/latest\"",
        "\"NextToken\": null,",
        "token_url: https://oauth2.example.com/token",
        "password_reset_url = \"https://example.com/account/reset\"",
        "secret = os.urandom(32)",
        "export DB_PASSWORD=\"$(vault kv get -field=password secret/db)\"",
        "  password: process.env.DB_PASSWORD,",
        "    password: hashedPassword,",
        "const password = req.body.password;",
        "  password: ENV.fetch(\"DB_PASSWORD\")",
        "\"Authorization\": \"Bearer \" + token,",
        "-H 'Authorization: Bearer YOUR_ACCESS_TOKEN'",
        "url = f\"https://{user}:{password}@{host}/{db}\"",
        "\"proxy\": \"http://proxy.corp.example:3128\"",
        "let client_secret = env::var(\"CLIENT_SECRET\")?;",
        "const BEGIN: &str = \"-----BEGIN RSA PRIVATE KEY-----\";\nconst END: &str = \"-----END RSA PRIVATE KEY-----\";\n\n/// The key's body between its header and footer, base64 as it is.\nfn body(pem: &str) -> Option<&str> {\n    pem.strip_prefix(BEGIN)?.trim().strip_suffix(END)\n}",
    ]
}

#[test]
fn the_rule_set_compiles_and_says_what_it_could_not_use() {
    let unusable = unusable_rules();
    println!(
        "gitleaks {GITLEAKS_VERSION}: {} rules in use, {} not used:",
        rule_count(),
        unusable.len()
    );
    for (id, why) in unusable {
        println!("  {id}: {why}");
    }
    // The rules gitleaks itself applies only to files of some paths (a text has
    // none): every other rule must compile.
    let path_only = [
        "freemius-secret-key",
        "hashicorp-tf-password",
        "kubernetes-secret-yaml",
        "nuget-config-password",
        "pkcs12-file",
    ];
    let others: Vec<_> = unusable
        .iter()
        .filter(|(id, _)| !path_only.contains(&id.as_str()))
        .collect();
    assert!(others.is_empty(), "rules that did not compile: {others:?}");
    assert!(rule_count() >= 215, "{}", rule_count());
    // Each kind has a name and a short phrase in words.
    for kind in kinds() {
        let w = kind.words();
        assert!(
            (w.starts_with("a ") || w.starts_with("an ")) && w.len() < 90,
            "{}: {w}",
            kind.name()
        );
        assert_eq!(SecretKind::by_name(kind.name()), Some(kind));
    }
    let some: Vec<String> = kinds()
        .step_by(37)
        .map(|k| format!("{} = {}", k.name(), k.words()))
        .collect();
    println!("for example: {some:#?}");
}

#[test]
fn entropy_is_computed_as_gitleaks_computes_it() {
    assert_eq!(shannon_entropy(""), 0.0);
    assert_eq!(shannon_entropy("aaaa"), 0.0);
    assert!((shannon_entropy("ab") - 1.0).abs() < 1e-12);
    assert!((shannon_entropy("abcd") - 2.0).abs() < 1e-12);
}

#[test]
fn the_labelled_corpus_is_found_with_high_recall_and_precision() {
    let secrets = secrets();
    let ordinary = ordinary();
    assert!(secrets.len() >= 45 && ordinary.len() >= 45);
    let mut found = 0;
    let mut missed = Vec::new();
    println!("{:<46} {:<6} kind", "credential", "found");
    for (label, text) in &secrets {
        let f = scan(text);
        let kind = f.first().map(|f| f.kind.name()).unwrap_or("-");
        println!(
            "{label:<46} {:<6} {kind}",
            if f.is_empty() { "MISSED" } else { "yes" }
        );
        if f.is_empty() {
            missed.push(*label);
        } else {
            found += 1;
        }
    }
    let mut false_positives = Vec::new();
    println!("\n{:<70} flagged", "ordinary line");
    for text in &ordinary {
        let f = scan(text);
        let shown: String = text.replace('\n', "⏎").chars().take(68).collect();
        match f.first() {
            Some(f) => {
                println!("{shown:<70} {}", f.kind.name());
                false_positives.push((*text, f.kind.name()));
            }
            None => println!("{shown:<70} -"),
        }
    }
    let recall = found as f64 / secrets.len() as f64;
    let precision = found as f64 / (found + false_positives.len()) as f64;
    let clean = 1.0 - false_positives.len() as f64 / ordinary.len() as f64;
    println!(
        "\nrecall {found}/{} = {recall:.3}; false positives {}/{} (precision {precision:.3}, ordinary lines left alone {clean:.3})",
        secrets.len(),
        false_positives.len(),
        ordinary.len()
    );
    assert!(recall >= 0.95, "missed: {missed:?}");
    assert!(false_positives.len() <= 1, "{false_positives:?}");
}

#[test]
fn a_finding_has_its_place_and_a_hint_that_never_gives_the_secret_away() {
    let mut c = Chars(7);
    let token = format!("{}{}", "ghp_", c.take(ALNUM, 36));
    let text = format!("first line\nPATH=/bin\nGITHUB_TOKEN={token}\n");
    let found = scan(&text);
    assert_eq!(found.len(), 1, "{found:?}");
    let f = &found[0];
    assert_eq!((f.kind.name(), f.line, f.column), ("github-pat", 3, 14));
    assert_eq!(f.kind.words(), "a GitHub token");
    assert_eq!(f.hint, "ghp_… (40 characters)");
    assert_eq!(SecretKind::by_name("github-pat"), Some(f.kind));
    // A short secret shows its length only.
    let f = &scan("password=correct-horse")[0];
    assert_eq!(f.hint, "(13 characters)");
    // A key block is one finding, on its header's line.
    let key = pem(&mut c, "RSA", 10, true, "\n");
    let found = scan(&format!("$ cat id_rsa\n{key}"));
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!((found[0].line, found[0].column), (2, 1));
    assert_eq!(found[0].kind.words(), "a private key");
}

#[test]
fn a_specific_rule_wins_over_a_generic_one_on_the_same_line() {
    let mut c = Chars(9);
    let key = format!("{}{}", "npm_", c.take(ALNUM, 36));
    let found = scan(&format!("NPM_TOKEN={key}"));
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].kind.name(), "npm-access-token");
}

/// The plan rule's words for what a plan line holds (`goals/tests/plan.rs` asks the
/// same of `submit`).
#[test]
fn the_plan_rule_names_the_credential_in_words() {
    let mut c = Chars(11);
    let table = [
        (
            format!("Token: {}{}", "ghp_", c.take(ALNUM, 36)),
            "a GitHub token",
        ),
        (
            format!("key {}{}", "AKIA", c.take(UPPER32, 16)),
            "an AWS access key",
        ),
        (
            "db: postgres://admin:hunter22@db.internal/app".to_owned(),
            "a password in a URL",
        ),
        (
            "-----BEGIN OPENSSH PRIVATE KEY-----".to_owned(),
            "a private key",
        ),
        (
            format!(
                "export API_KEY={}{}{}",
                "sk-ant-api03-",
                c.take(URLSAFE, 93),
                "AA"
            ),
            "an Anthropic API key",
        ),
        (
            "password=correct-horse-battery".to_owned(),
            "a secret assigned in the text",
        ),
    ];
    for (line, what) in &table {
        assert_eq!(credential(line), Some(*what), "{line}");
    }
    assert_eq!(
        credential("password=$DB_PASSWORD; token=<from the vault>; https://example.com/a:b"),
        None
    );
}

/// A push scans every event: about 1 MB of ordinary text with a secret every 200
/// lines or so. Only the secrets are found (no rule runs from one line's context into
/// another's), each of them, and quickly.
#[test]
fn a_megabyte_is_scanned_quickly_and_only_its_secrets_are_found() {
    let ordinary = ordinary();
    // (A lone key header is a key only where it ends the text.)
    let secrets: Vec<_> = secrets()
        .into_iter()
        .filter(|(label, _)| !label.contains("ending the text"))
        .collect();
    let mut text = String::new();
    let mut lines = 0;
    let mut planted = Vec::new();
    let mut i = 0;
    while text.len() < 1 << 20 {
        for part in [
            ordinary[i % ordinary.len()],
            "    let value = compute(&items[index], options.verbose)?; // keep going",
        ] {
            text.push_str(part);
            text.push('\n');
            lines += part.matches('\n').count() + 1;
        }
        if i % 97 == 0 {
            let secret = &secrets[(i / 97) % secrets.len()].1;
            text.push_str(secret);
            text.push('\n');
            let n = secret.matches('\n').count() + 1;
            planted.push(lines + 1..lines + 1 + n);
            lines += n;
        }
        i += 1;
    }
    // The rule set is read and compiled at its first use in a process (run this test
    // alone to see that cost; another test may have paid it).
    let t = Instant::now();
    let rules = rule_count();
    println!(
        "rule set ready in {:.1} ms ({rules} rules)",
        t.elapsed().as_secs_f64() * 1e3
    );
    let t = Instant::now();
    let found = scan(&text);
    let took = t.elapsed();
    println!(
        "scanned {} bytes ({lines} lines) in {:.1} ms: {} findings, {} secrets planted",
        text.len(),
        took.as_secs_f64() * 1e3,
        found.len(),
        planted.len()
    );
    for f in &found {
        assert!(
            planted.iter().any(|p| p.contains(&f.line)),
            "{f:?}: not a planted secret"
        );
    }
    for p in &planted {
        let shown: Vec<&str> = text.lines().skip(p.start - 2).take(p.len() + 2).collect();
        assert!(
            found.iter().any(|f| p.contains(&f.line)),
            "lines {p:?} missed: {shown:#?}"
        );
    }
}
