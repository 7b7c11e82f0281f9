//! Goal plans: every validation rule with accepted and rejected examples and the exact
//! error text, and the pinned contract digest.

#![allow(clippy::unwrap_used)] // tests fail loudly on purpose

use tacho_goals::{
    Submission, contract_digest, contract_digest_matches, contract_digest_v1,
    contract_digest_version, read_frozen, validate,
};

const HEAD: &str = "0123456789abcdef0123456789abcdef01234567";

/// A valid plan whose check command and assurance details can be swapped in.
fn plan_with(assurance: &str) -> String {
    format!(
        "# Invoices match the legacy system\n\
         Goal kind: migration\n\
         \n\
         ## Acceptance criteria\n\
         - AC1: every invoice total equals the legacy total\n\
         - AC2: the mapping covers every legacy column\n\
         \n\
         ## Verification plan\n\
         Run the parity check against staging.\n\
         \n\
         ## Non-goals\n\
         - UI changes\n\
         \n\
         ## Assumed scope\n\
         src/ and checks/\n\
         \n\
         ## Assurance contract\n\
         ```json\n\
         {assurance}\n\
         ```\n"
    )
}

fn assurance(checks: &str) -> String {
    format!(
        r#"{{"version": 1, "sourcePaths": ["src", "checks", "package.json"], "sources": [{{"role": "legacy", "reference": "legacy/invoice-schema.sql at export-v1"}}], "checks": {checks}}}"#
    )
}

fn check(command: &str) -> String {
    let command = serde_json::to_string(command).unwrap();
    assurance(&format!(
        r#"[{{"id": "invoice-parity", "acceptanceIds": ["AC1", "AC2"], "command": {command}, "purpose": "Assert invoice totals and mappings", "environment": "staging"}}]"#
    ))
}

fn submit(markdown: &str) -> Result<tacho_goals::Plan, String> {
    validate(&Submission {
        markdown,
        objective: "make invoices match the legacy system",
        head: Some(HEAD),
        assure: true,
    })
    .map_err(|e| e.to_string())
}

#[test]
fn change_paths_and_guards_are_part_of_the_contract() {
    let plain = submit(&plan_with(&check("node checks/invoice-parity.cjs"))).unwrap();
    let with = check("node checks/invoice-parity.cjs").replace(
        r#""version": 1,"#,
        r#""version": 1, "changePaths": ["src/invoice"],"#,
    );
    let p = submit(&plan_with(&with)).unwrap();
    assert_eq!(p.assurance.as_ref().unwrap().change_paths, ["src/invoice"]);
    // Covered by the digest; a contract without them keeps the digest it had.
    assert_ne!(contract_digest(&p), contract_digest(&plain));
    let guarded = check("node checks/invoice-parity.cjs").replace(
        r#""environment": "staging""#,
        r#""environment": "staging", "guard": true"#,
    );
    // Guards alone are a refactor's checks.
    let g = submit(&plan_with(&guarded).replace("Goal kind: migration", "Goal kind: refactor"))
        .unwrap();
    assert!(g.assurance.as_ref().unwrap().checks[0].guard);
    assert_ne!(contract_digest(&g), contract_digest(&plain));
    let explicit_false = check("node checks/invoice-parity.cjs").replace(
        r#""environment": "staging""#,
        r#""environment": "staging", "guard": false"#,
    );
    assert_eq!(
        contract_digest(&submit(&plan_with(&explicit_false)).unwrap()),
        contract_digest(&plain)
    );
}

#[test]
fn a_good_plan_is_accepted() {
    let p = submit(&plan_with(&check("node checks/invoice-parity.cjs"))).unwrap();
    assert_eq!(p.title, "Invoices match the legacy system");
    assert_eq!(p.kind, "migration");
    assert_eq!(p.acceptance.len(), 2);
    assert_eq!(p.assurance.unwrap().checks[0].id, "invoice-parity");
    let with = check("node checks/invoice-parity.cjs").replace(
        r#""environment": "staging""#,
        r#""environment": "staging", "variables": ["NODE_ENV", "database_url_file"]"#,
    );
    let p = submit(&plan_with(&with)).unwrap();
    assert_eq!(
        p.assurance.unwrap().checks[0].variables,
        ["NODE_ENV", "database_url_file"]
    );
}

#[test]
fn schema_rules() {
    let table: &[(&str, String, &str)] = &[
        (
            "version",
            plan_with(&assurance("[]").replace("\"version\": 1", "\"version\": 2")),
            "plan: assurance: version 2 is not supported (use 1)",
        ),
        (
            "no source paths",
            plan_with(&check("make test").replace(r#"["src", "checks", "package.json"]"#, "[]")),
            "plan: assurance: sourcePaths must list 1 to 20 paths, not 0",
        ),
        (
            "too many source paths",
            plan_with(
                &check("make test").replace(
                    r#"["src", "checks", "package.json"]"#,
                    &serde_json::to_string(&(0..21).map(|i| format!("p{i}")).collect::<Vec<_>>())
                        .unwrap(),
                ),
            ),
            "plan: assurance: sourcePaths must list 1 to 20 paths, not 21",
        ),
        (
            "dot-dot source path",
            plan_with(
                &check("make test").replace(r#""checks", "package"#, r#""../other", "package"#),
            ),
            "plan: assurance: sourcePaths entry \"../other\" must be relative to the workspace, without `..` or `.git`",
        ),
        (
            ".git source path",
            plan_with(
                &check("make test").replace(r#""checks", "package"#, r#"".git/hooks", "package"#),
            ),
            "plan: assurance: sourcePaths entry \".git/hooks\" must be relative to the workspace, without `..` or `.git`",
        ),
        (
            "duplicate source path",
            plan_with(&check("make test").replace(r#""checks", "package"#, r#""src", "package"#)),
            "plan: assurance: sourcePaths lists \"src\" twice",
        ),
        (
            "no checks",
            plan_with(&assurance("[]")),
            "plan: assurance: checks must list 1 to 12 checks, not 0",
        ),
        (
            "bad check id",
            plan_with(&check("make test").replace("invoice-parity", "Invoice_Parity")),
            "plan: assurance: check id \"Invoice_Parity\" must be lower-case words joined by `-`, like `invoice-parity`",
        ),
        (
            "too many acceptance ids",
            plan_with(&check("make test").replace(
                r#"["AC1", "AC2"]"#,
                r#"["AC1", "AC2", "AC1", "AC2", "AC1", "AC2"]"#,
            )),
            "plan: assurance: check invoice-parity must cover 1 to 5 acceptance ids, not 6",
        ),
        (
            "unknown acceptance id",
            plan_with(&check("make test").replace(r#"["AC1", "AC2"]"#, r#"["AC1", "AC2", "AC9"]"#)),
            "plan: assurance: check invoice-parity covers AC9, which the acceptance criteria do not define",
        ),
        (
            "uncovered acceptance id",
            plan_with(&check("make test").replace(r#"["AC1", "AC2"]"#, r#"["AC1"]"#)),
            "plan: assurance: acceptance criterion AC2 is covered by no check",
        ),
        (
            "duplicate check id",
            plan_with(&assurance(
                r#"[{"id": "a", "acceptanceIds": ["AC1", "AC2"], "command": "make a", "purpose": "p", "environment": "e"}, {"id": "a", "acceptanceIds": ["AC1"], "command": "make b", "purpose": "p", "environment": "e"}]"#,
            )),
            "plan: assurance: check id a appears twice",
        ),
        (
            "multi-line field",
            plan_with(
                &check("make test").replace("Assert invoice totals and mappings", "two\\nlines"),
            ),
            "plan: assurance: check invoice-parity purpose must be a single line",
        ),
        (
            "no environment",
            plan_with(&check("make test").replace(r#", "environment": "staging""#, "")),
            "plan: assurance: check invoice-parity needs an environment: where it runs and against what (BRIEF §3), like \"Staging migration target, schema ERP\"",
        ),
        (
            "blank environment",
            plan_with(
                &check("make test").replace(r#""environment": "staging""#, r#""environment": " ""#),
            ),
            "plan: assurance: check invoice-parity needs an environment: where it runs and against what (BRIEF §3), like \"Staging migration target, schema ERP\"",
        ),
        (
            "variable name",
            plan_with(&check("make test").replace(
                r#""environment": "staging""#,
                r#""environment": "staging", "variables": ["NODE ENV"]"#,
            )),
            "plan: assurance: check invoice-parity: variable \"NODE ENV\" is not a variable name (letters, digits and `_`, not starting with a digit)",
        ),
        (
            "variable that changes how programs run",
            plan_with(&check("make test").replace(
                r#""environment": "staging""#,
                r#""environment": "staging", "variables": ["LD_PRELOAD"]"#,
            )),
            "plan: assurance: check invoice-parity: variable LD_PRELOAD changes how the shell or the loader runs programs; a check cannot take it",
        ),
        (
            "variable that holds a credential",
            plan_with(&check("make test").replace(
                r#""environment": "staging""#,
                r#""environment": "staging", "variables": ["GITHUB_TOKEN"]"#,
            )),
            "plan: assurance: check invoice-parity: variable GITHUB_TOKEN looks like a credential, and the values of a check's variables are written into the log; let the check read it from a file instead",
        ),
        (
            "unknown field",
            plan_with(&check("make test").replace("\"environment\"", "\"env\"")),
            "plan line 19: assurance JSON, column 300: unknown field `env`, expected one of `id`, `acceptanceIds`, `command`, `purpose`, `environment`, `variables`, `guard`",
        ),
        (
            "changePaths leaving the workspace",
            plan_with(&check("make test").replace(
                r#""version": 1,"#,
                r#""version": 1, "changePaths": ["src/../.."],"#,
            )),
            "plan: assurance: changePaths entry \"src/../..\" must be relative to the workspace, without `..` or `.git`",
        ),
        (
            "changePaths under no source path",
            plan_with(&check("make test").replace(
                r#""version": 1,"#,
                r#""version": 1, "changePaths": ["lib"],"#,
            )),
            "plan: assurance: changePaths entry \"lib\" lies under no source path: the checks' clean room holds only the source paths, so a change there could not be taken away",
        ),
        (
            "changePaths twice",
            plan_with(&check("make test").replace(
                r#""version": 1,"#,
                r#""version": 1, "changePaths": ["src/a", "src/a"],"#,
            )),
            "plan: assurance: changePaths lists \"src/a\" twice",
        ),
        (
            "changePaths the whole workspace",
            plan_with(&check("make test").replace(
                r#""sourcePaths": ["src","#,
                r#""changePaths": ["."], "sourcePaths": [".", "src","#,
            )),
            "plan: assurance: changePaths entry \".\" is the whole workspace: name the implementation the goal changes, not the tests that check it",
        ),
        (
            "a criterion covered only by guards",
            plan_with(&check("make test").replace(
                r#""environment": "staging""#,
                r#""environment": "staging", "guard": true"#,
            )),
            "plan: assurance: acceptance criterion AC1 is covered only by guards: a migration needs a check for it that fails without the change and passes with it (leave \"guard\" off one)",
        ),
        (
            "missing acceptance section",
            plan_with(&check("make test")).replace("## Acceptance criteria", "## Criteria"),
            "plan: the plan needs a `## Acceptance criteria` section",
        ),
        (
            "duplicate acceptance id",
            plan_with(&check("make test")).replace("- AC2:", "- AC1:"),
            "plan line 6: acceptance id AC1 appears twice",
        ),
        (
            "no contract on an assured goal",
            plan_with(&check("make test"))
                .split("## Assurance contract")
                .next()
                .unwrap()
                .to_owned(),
            "plan: an assured goal needs an `## Assurance contract` section with the assurance JSON",
        ),
    ];
    for (name, markdown, want) in table {
        assert_eq!(submit(markdown).unwrap_err(), *want, "{name}");
    }
}

#[test]
fn the_size_limit_never_truncates() {
    let mut md = plan_with(&check("make test"));
    md.push_str(&"x".repeat(9000 - md.len()));
    assert_eq!(
        submit(&md).unwrap_err(),
        "plan: the rendered plan is 9000 bytes, 808 over the limit of 8192: remove at least 808 bytes and resubmit the whole plan (plans are never truncated)"
    );
    let mut ok = plan_with(&check("make test"));
    ok.push_str(&"x".repeat(8192 - ok.len()));
    assert!(submit(&ok).is_ok());
}

#[test]
fn baseline_is_the_head_at_submission() {
    let md = plan_with(&check("git diff --exit-code {BASELINE} -- src/legacy"));
    let p = submit(&md).unwrap();
    assert!(
        p.markdown
            .contains(&format!("git diff --exit-code {HEAD} -- src/legacy"))
    );
    assert_eq!(p.baseline.as_deref(), Some(HEAD));
    let err = validate(&Submission {
        markdown: &md,
        objective: "x",
        head: None,
        assure: true,
    })
    .unwrap_err()
    .to_string();
    assert_eq!(
        err,
        "plan: the plan uses {BASELINE}, but the workspace has no HEAD commit to stand for it; commit first"
    );
}

#[test]
fn remote_tracking_before_states_are_rejected_unless_the_objective_names_the_remote() {
    let rejected = [
        "git diff --exit-code origin/main -- src",
        "git merge-base --is-ancestor upstream/main HEAD",
        "git diff @{u} --exit-code",
        "git log refs/remotes/origin/main..HEAD --oneline && make test",
        "sh -c 'git diff --exit-code origin/main'",
        "bash -c \"git diff --exit-code @{upstream}\"",
        "eval git diff --exit-code origin/release",
        "test $(git rev-list --count origin/main..HEAD) -gt 0 && make test",
    ];
    for cmd in rejected {
        let err = submit(&plan_with(&check(cmd))).unwrap_err();
        assert!(
            err.contains("compares against the remote-tracking state"),
            "{cmd}: {err}"
        );
    }
    let err = submit(&plan_with(&check(
        "git diff --exit-code origin/main -- src",
    )))
    .unwrap_err();
    assert_eq!(
        err,
        "plan: assurance: check invoice-parity compares against the remote-tracking state `origin/main`, which moves; use {BASELINE} (the HEAD commit at submission), or name the remote in the objective"
    );
    let ok = validate(&Submission {
        markdown: &plan_with(&check("git diff --exit-code upstream/main -- src")),
        objective: "rebase the fork onto upstream",
        head: Some(HEAD),
        assure: true,
    });
    assert!(ok.is_ok(), "{ok:?}");
}

#[test]
fn weak_checks_are_rejected() {
    let observe = "it only observes (echo, ls, cat, grep, ...) and cannot fail on wrong behaviour";
    let exists = "it only checks that files exist";
    let gitlog = "a path-filtered `git log` only shows that some commit touched the path";
    let table = [
        ("echo done", observe),
        ("ls src && cat src/a.rs | grep invoice", observe),
        ("test -f checks/invoice-parity.cjs", exists),
        ("[ -s out/report.json ]", exists),
        ("for f in a b c; do test -f $f; done", exists),
        ("git log --oneline -- src/invoices", gitlog),
    ];
    for (cmd, why) in table {
        assert_eq!(
            submit(&plan_with(&check(cmd))).unwrap_err(),
            format!("plan: assurance: check invoice-parity is too weak to prove anything: {why}"),
            "{cmd}"
        );
    }
    for real in [
        "git merge-base --is-ancestor {BASELINE} HEAD",
        "git diff --exit-code {BASELINE} -- src/legacy",
        "node checks/invoice-parity.cjs",
        "cargo test -p invoices",
        "test -f out.json && node checks/verify.cjs out.json",
    ] {
        assert!(submit(&plan_with(&check(real))).is_ok(), "{real}");
    }
}

#[test]
fn secrets_are_rejected_naming_the_line() {
    // Tokens of real shapes, put together here (gitleaks' rules let through the
    // alphabet tokens of examples: `ghp_abcdefghijklmnopqrstuvwxyz0123456789`).
    let random = "aB3dE5gH7jK9mN1pQ3sT5vX7zA9cE1gI2kL4";
    let table = [
        (format!("Token: ghp_{random}"), "a GitHub token"),
        ("key AKIAQ2RV7WXMZK3PLN5D".to_owned(), "an AWS access key"),
        (
            "db: postgres://admin:hunter22@db.internal/app".to_owned(),
            "a password in a URL",
        ),
        (
            "-----BEGIN OPENSSH PRIVATE KEY-----".to_owned(),
            "a private key",
        ),
        (
            format!("export API_KEY=sk-ant-api03-{}AA", &random.repeat(3)[..93]),
            "an Anthropic API key",
        ),
        (
            "password=correct-horse-battery".to_owned(),
            "a secret assigned in the text",
        ),
    ];
    for (line, what) in &table {
        let md =
            plan_with(&check("make test")).replace("Run the parity check against staging.", line);
        assert_eq!(
            submit(&md).unwrap_err(),
            format!(
                "plan line 9: looks like it contains a credential ({what}); remove it and refer to it by name instead"
            ),
            "{line}"
        );
    }
    // Names of secrets, placeholders and variables are fine.
    let md = plan_with(&check("make test")).replace(
        "Run the parity check against staging.",
        "password=$DB_PASSWORD; token=<from the vault>; https://example.com/a:b",
    );
    assert!(submit(&md).is_ok());
}

#[test]
fn the_contract_digest_is_pinned_and_ignores_title_and_checklist() {
    let md = plan_with(&check("node checks/invoice-parity.cjs"));
    let p = submit(&md).unwrap();
    // Version 1 (goals frozen before RFC 8785): pinned, and still checkable.
    let v1 = "2fcf884ed4d1e82fde2222c340c43f553408d2b9b1e14a1cff4c66df68142634";
    assert_eq!(contract_digest_v1(&p), v1);
    assert_eq!(contract_digest_version(v1), Some(1));
    assert_eq!(contract_digest_matches(&p, v1), Some(true));
    // Version 2, what new goals get: RFC 8785 canonical JSON.
    let v2 = contract_digest(&p);
    assert_eq!(
        v2,
        "v2:be948c0a4d76c54cd1e59863b66dfceca88724887e5f6a2e562d38e08b0accae"
    );
    assert_eq!(contract_digest_version(&v2), Some(2));
    assert_eq!(contract_digest_matches(&p, &v2), Some(true));
    assert_eq!(
        contract_digest_matches(&p, &format!("v9:{}", &v2[3..])),
        None
    );
    let mut wrong = v1.to_string();
    wrong.replace_range(..1, "3");
    assert_eq!(contract_digest_matches(&p, &wrong), Some(false));
    let retitled = submit(
        &md.replace("# Invoices match the legacy system", "# Invoice parity")
            .replace("- UI changes", "- UI changes\n- [x] wrote the check"),
    )
    .unwrap();
    assert_eq!(contract_digest(&retitled), contract_digest(&p));
    let changed =
        submit(&md.replace("every invoice total equals", "most invoice totals equal")).unwrap();
    assert_ne!(contract_digest(&changed), contract_digest(&p));
    let other_cmd = submit(&plan_with(&check(
        "node checks/invoice-parity.cjs --strict",
    )))
    .unwrap();
    assert_ne!(contract_digest(&other_cmd), contract_digest(&p));
}

/// Every wrapper that can turn a failing check into a passing one is refused at
/// freeze, naming the construct and where it is (SPEC §12.1); honest forms pass.
#[test]
fn wrappers_that_hide_failure_are_refused_with_their_position() {
    let c = "sh checks/parity.sh";
    let table: Vec<(String, &str)> = vec![
        // The wrappers of issue 28.
        (
            format!("{c} || echo failed"),
            "`||` before the command at column 24: when what is before it fails, `echo failed` runs instead",
        ),
        (
            format!("{c} || /bin/true"),
            "`||` before the command at column 24",
        ),
        (
            format!("{c} || true"),
            "`||` before the command at column 24",
        ),
        (format!("{c} || :"), "`||` before the command at column 24"),
        (
            format!("({c} || true)"),
            "`||` before the command at column 25",
        ),
        (
            format!("{c} & wait"),
            "`&` after the command at column 1: a background job's failure",
        ),
        (format!("{c} &"), "`&` after the command at column 1"),
        (
            format!("! {c}"),
            "`!` before the command at column 3: it inverts the status",
        ),
        (
            format!("if {c}; then :; fi"),
            "`if` at column 1: a conditional around the check",
        ),
        (
            format!("{c}; exit 0"),
            "`exit 0` at column 22: it ends the check with a status that is not proven non-zero",
        ),
        (
            format!("{c}; true"),
            "`true` as the last command at column 22",
        ),
        (format!("{c}; :"), "`:` as the last command at column 22"),
        // Conditionals, loops and lists where bash ignores errexit.
        (
            format!("while ! {c}; do sleep 1; done"),
            "`while` at column 1: a loop around the check",
        ),
        (
            format!("until {c}; do sleep 1; done"),
            "`until` at column 1",
        ),
        (
            format!("for i in 1; do {c}; done"),
            "`for` at column 1: a loop around the check",
        ),
        (
            format!("case x in x) {c};; esac"),
            "`case` at column 1: a conditional",
        ),
        (
            format!("{c} && echo ok; echo done"),
            "`&&` after the command at column 1: when it fails, bash's errexit does not stop the check",
        ),
        (
            format!("{{ {c} && echo ok; }}; echo done"),
            "`&&` after the command at column 3",
        ),
        (
            format!("{c} || exit 0"),
            "`||` before the command at column 24",
        ),
        (
            format!("{c} || exit 256"),
            "`||` before the command at column 24",
        ),
        (
            format!("{c} || {{ echo failed; exit $?; }}"),
            "`||` before the command at column 24",
        ),
        (
            format!("{c} || {{ echo failed; }}"),
            "`||` before the command at column 24",
        ),
        // Shell state that hides failure.
        (
            format!("set +e; {c}; true"),
            "`set +e` at column 1: it switches off how the check's shell catches failure",
        ),
        (
            format!("set +o pipefail; {c} | tail -20"),
            "`set +o pipefail` at column 1",
        ),
        (format!("set -n; {c}"), "`set -n` at column 1"),
        (format!("set -t; true; {c}"), "`set -t` at column 1"),
        (
            format!("set -o onecmd; true; {c}"),
            "`set -o onecmd` at column 1",
        ),
        (
            format!("mapfile -C 'exit 0' -c 1 < README.md; {c}"),
            "`mapfile` at column 1",
        ),
        (
            format!("trap 'exit 0' EXIT; {c}"),
            "`trap` at column 1: a trap can run commands at exit",
        ),
        (
            format!("f() {{ {c} || true; }}; f"),
            "the function definition `f` at column 1",
        ),
        (
            format!("sh() {{ :; }}; {c}"),
            "the function definition `sh` at column 1",
        ),
        (
            format!(". ./env.sh; {c}"),
            "`.` at column 1: it runs a file inside the check's shell",
        ),
        (
            format!("shopt -s expand_aliases; alias sh=true; {c}"),
            "`shopt` at column 1",
        ),
        (
            format!("exec true; {c}"),
            "`exec true` at column 1: it replaces the check's shell, so the commands after it never run",
        ),
        (format!("exit 0; {c}"), "`exit 0` at column 1"),
        (format!("exec true && {c}"), "`exec true` at column 1"),
        (format!("(exec true; {c})"), "`exec true` at column 2"),
        (
            format!("{c}; exec true"),
            "`true` as the last command at column 27",
        ),
        // Strings run by a nested shell are read with the same rules.
        (
            format!("sh -c '{c} || true'"),
            "`||` before the command at column 24 (in the script of `sh -c` at column 1)",
        ),
        (
            format!("bash -c \"{c} | tail -20\""),
            "`|` at column 1 (in the script of `bash -c` at column 1): this shell runs without pipefail",
        ),
        (
            format!("bash -c '{c}; echo done'"),
            "`;` before the command at column 22 (in the script of `bash -c` at column 1): this shell runs without errexit",
        ),
        (
            format!("eval '{c} || true'"),
            "`||` before the command at column 24 (in the string `eval` at column 1 runs)",
        ),
        (
            format!("nice -n 5 sh -c '! {c}'"),
            "`!` before the command at column 3 (in the script of `sh -c` at column 11)",
        ),
        (
            format!("timeout 60 bash -c 'if {c}; then :; fi'"),
            "`if` at column 1 (in the script of `bash -c` at column 12)",
        ),
        (
            format!("echo '{c}' | sh"),
            "`sh` reading its commands from standard input at column 30",
        ),
        (
            "sh -c \"$SCRIPT\"".to_string(),
            "the script of `sh -c` at column 7 is built at run time",
        ),
        (
            "eval \"$CHECK\"".to_string(),
            "`eval` of a string built at run time at column 6",
        ),
        (
            format!("$RUNNER {c}"),
            "a command name that is not written out at column 1",
        ),
        // Substitutions whose status is lost.
        (
            format!("echo \"$({c})\""),
            "a command substitution (`$(…)` or backquotes) in the word at column 6: its status is lost",
        ),
        (
            format!("test -z \"`{c}`\""),
            "a command substitution (`$(…)` or backquotes) in the word at column 9",
        ),
        (
            format!("v=$({c}; true); test -n v"),
            "`true` as the last command at column 22 (in the command substitution at column 1)",
        ),
        (
            format!("v=$({c}; true) && test -n v"),
            "`;` before the command at column 22 (in the command substitution at column 1): this shell runs without errexit",
        ),
        (
            format!("export V=$({c})"),
            "a command substitution (`$(…)` or backquotes) in the word at column 8",
        ),
        (format!("{c} > >(tee out.log)"), "a process substitution"),
        (
            format!("diff <({c}) expected.txt"),
            "a process substitution",
        ),
        (
            format!("coproc {c}"),
            "`coproc` at column 1: a background job",
        ),
        // Not bash at all.
        (format!("{c} ||"), "does not parse as bash"),
    ];
    let head = "plan: assurance: check invoice-parity can hide a failure: ";
    let mut wrong = Vec::new();
    for (cmd, want) in &table {
        match submit(&plan_with(&check(cmd))) {
            Err(got) if got.starts_with(head) && got.contains(want) => {}
            got => wrong.push(format!("{cmd}\n  got:  {got:?}\n  want: {head}…{want}…")),
        }
    }
    for honest in [
        "sh checks/parity.sh",
        "sh checks/parity.sh 2>&1 | tail -20",
        "sh checks/parity.sh |& tee out.log",
        "sh checks/parity.sh > out.log 2>&1",
        "sh checks/parity.sh; echo done",
        "cd checks && sh parity.sh",
        "(cd checks && sh parity.sh) && echo ok",
        "RUST_LOG=debug cargo test -p invoices -- --test-threads 1",
        "cargo build && cargo test",
        "sh checks/parity.sh || exit 1",
        "sh checks/parity.sh || exit",
        "sh checks/parity.sh || exit $?",
        "sh checks/parity.sh || { echo failed >&2; exit 3; }",
        "sh checks/a.sh && sh checks/b.sh || exit 1; sh checks/c.sh",
        "set -euo pipefail; sh checks/parity.sh",
        "v=$(git rev-parse HEAD) && test \"$v\" != x && sh checks/parity.sh",
        "bash -eo pipefail -c 'sh checks/parity.sh | tail -5; echo done'",
        "sh -c 'cd checks && sh parity.sh'",
        "bash checks/parity.sh --strict",
        "timeout 600 cargo test --workspace",
        "[[ -n \"$HOME\" ]] && sh checks/parity.sh",
        "git diff --exit-code {BASELINE} -- src/legacy",
        // Everyday checks.
        "cargo test --workspace -- --nocapture",
        "npm test -- --reporter=dot",
        "pytest -q tests/test_invoice.py::test_total -k 'total and not slow'",
        "go test ./... -run 'TestParity$'",
        "make -C build check",
        "tacho verify-commits --baseline {BASELINE} --allow src --forbid 'legacy/**'",
        "git merge-base --is-ancestor {BASELINE} HEAD && git diff --exit-code {BASELINE} -- src/legacy",
        "python3 -c 'import sys; sys.exit(0 if open(\"x\").read() == \"42\" else 1)'",
        "cargo test 2>&1 | tee test.log | tail -50",
        "RUSTFLAGS=\"-D warnings\" cargo build && cargo test",
        "cd app && npm ci && npm test",
        "./checks/parity.sh",
        "npx vitest run --reporter=junit --outputFile=out.xml",
        "node -e \"process.exit(require('./out.json').ok ? 0 : 1)\"",
        "cargo test -p invoices 2>&1 | grep -q 'test result: ok'",
        "exec cargo test",
    ] {
        if let Err(e) = submit(&plan_with(&check(honest))) {
            wrong.push(format!("{honest}\n  refused: {e}"));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// A plan frozen before the check-command rules still reads for its digest check.
#[test]
fn a_frozen_plan_reads_without_the_command_rules() {
    let markdown = plan_with(&check("node checks/invoice-parity.cjs || true"));
    let sub = Submission {
        markdown: &markdown,
        objective: "",
        head: Some(HEAD),
        assure: true,
    };
    assert!(validate(&sub).is_err());
    let plan = read_frozen(&sub).unwrap();
    assert_eq!(
        contract_digest_matches(&plan, &contract_digest(&plan)),
        Some(true)
    );
    // Every other rule still holds.
    let markdown = markdown.replace("- AC2: the mapping covers every legacy column\n", "");
    let sub = Submission {
        markdown: &markdown,
        ..sub
    };
    assert!(
        read_frozen(&sub)
            .unwrap_err()
            .to_string()
            .contains("covers AC2")
    );
}
