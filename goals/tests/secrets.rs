//! The one secret detector: every shape it knows, and text it must leave alone.

use tacho_goals::secrets::{SecretKind, scan};

#[test]
fn each_known_shape_is_found_with_its_place_and_never_its_text() {
    let jwt = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dBjftJeZ4CVPmB92K27uhbUJU1p1r4wW";
    let table = [
        ("key AKIAIOSFODNN7EXAMPLE here", SecretKind::AwsAccessKey, 5),
        (
            "ghp_abcdefghijklmnopqrstuvwxyz0123456789",
            SecretKind::GithubToken,
            1,
        ),
        (
            "x=github_pat_11ABCDEFG0123456789_abcdefghij",
            SecretKind::GithubToken,
            3,
        ),
        ("glpat-abcdefghij0123456789", SecretKind::GitlabToken, 1),
        (
            "SLACK xoxb-1234567890-abcdefghij",
            SecretKind::SlackToken,
            7,
        ),
        (
            "https://hooks.slack.com/services/T00000000/B00000000/XXXXXXXXXXXXXXXXXXXXXXXX",
            SecretKind::SlackWebhook,
            9,
        ),
        ("sk_live_4eC39HqLyjWDarjtT1zdp7dc", SecretKind::StripeKey, 1),
        ("-----BEGIN RSA PRIVATE KEY-----", SecretKind::PrivateKey, 1),
        (
            &format!("Authorization: Bearer {jwt}")[..],
            SecretKind::Jwt,
            23,
        ),
        (
            "postgres://admin:hunter22@db.internal/app",
            SecretKind::UrlPassword,
            12,
        ),
        (
            "DB_PASSWORD=correct-horse-battery",
            SecretKind::AssignedSecret,
            4,
        ),
    ];
    for (line, kind, column) in table {
        let text = format!("first line\n{line}\n");
        let found = scan(&text);
        assert_eq!(found.len(), 1, "{line}");
        assert_eq!(
            (found[0].kind, found[0].line, found[0].column),
            (kind, 2, column),
            "{line}"
        );
        assert!(found[0].hint.contains("characters"), "{line}");
        let secret_tail = &line[line.len() - 8..];
        assert!(
            !found[0].hint.contains(secret_tail),
            "{line}: {}",
            found[0].hint
        );
    }
}

#[test]
fn ordinary_text_is_not_a_secret() {
    for line in [
        "password=$DB_PASSWORD; token=<from the vault>",
        "https://example.com/a:b and git@github.com:org/repo.git",
        "-----BEGIN CERTIFICATE-----",
        "-----BEGIN PUBLIC KEY-----",
        "commit 3f2a9c1d0e8b7a6f5e4d3c2b1a0f9e8d7c6b5a4f",
        "the task: rename ghp_ to the token prefix",
        "MASKIAFOODNN7EXAMPLE12",
        "sk_test_4eC39HqLyjWDarjtT1zdp7dc",
        "eyJhbGciOi is the start of a header",
        "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
        "password=short",
    ] {
        assert_eq!(scan(line), vec![], "{line}");
    }
}
