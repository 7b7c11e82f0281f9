//! Whether a bash command can end with a status that is not its commands' own: a goal
//! check's command ([`hides_failure`], run with errexit and pipefail) and a shell
//! command an agent ran ([`masks_status`], run without them), read by one parser.
//!
//! Whether a check command can turn a failure into success.
//!
//! Checks run as `bash -p -o errexit -o pipefail -O inherit_errexit -c COMMAND`
//! (SPEC §12.2): a failing command in a pipeline or a sequence ends the check with a
//! non-zero status. What is left are the constructs where bash itself lets a failure
//! pass — errexit is ignored in `if`/`while`/`until` conditions, in every part of an
//! `&&`/`||` list but the last, in `!` pipelines and in whatever runs inside them —
//! and the constructs that replace, skip or rewrite the status. The command is parsed
//! with brush's bash parser (`brush-parser`) and every such construct is refused with
//! its position:
//!
//! - `||` whose right side can succeed (only `exit`, `exit $?`, `exit N` with N not
//!   0 mod 256, or `{ ...; exit N; }` are accepted there);
//! - an `&&` list that is not the last command of the check (or of a subshell) and has
//!   no `|| exit` after it: bash ignores errexit on its left side, so a failure there
//!   lets the commands after it run;
//! - `!`, `if`, `case`, `while`, `until`, `for`, `select`, background jobs (`&`,
//!   `coproc`), function definitions, `trap`, `source`/`.`, `shopt`, `alias`, `enable`,
//!   `hash`, `mapfile`/`readarray`, `exec` with a command anywhere but at the very end, `set` turning errexit or pipefail off (or
//!   switching on `noexec` or `onecmd`), `exit 0` (or any status not proven non-zero), and `true`
//!   or `:` as the last command;
//! - command substitutions (`$(…)`, backquotes) except as the only one in an
//!   assignment (`v=$(cmd)`, whose status bash checks), and process substitutions;
//! - commands whose name is not written out (`$X args`);
//! - strings run by a nested shell (`sh -c`, `bash -c`, ..., `eval`): they are parsed
//!   and held to the same rules; a nested shell runs without errexit and pipefail
//!   (unless given `-e` / `-o pipefail`), so its script may not use `;` or `|`
//!   either. A shell that reads its script from standard input is refused.
//!
//! Honest forms pass: redirections, `|` pipelines, `&&` chains at the end, variable
//! assignments, `cd dir && …`, `;` sequences (errexit ends the check at the first
//! failure), subshells, `sh script.sh`.

use brush_parser::ast::{
    self, AndOr, Command, CommandPrefixOrSuffixItem, CompoundCommand, CompoundListItem,
    ExtendedTestExpr, IoFileRedirectTarget, IoRedirect, Pipeline, SeparatorOperator, SimpleCommand,
    SourceLocation,
};
use brush_parser::word::WordPiece;
use brush_parser::{Parser, ParserOptions, SourceSpan};

/// The shells whose `-c` script is read and held to the rules.
const SHELLS: &[&str] = &["sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "yash"];

/// How deep nested scripts (`sh -c "eval '…'"`) are followed before refusing.
const MAX_DEPTH: usize = 8;

/// Where the commands being read run.
#[derive(Clone)]
struct Ctx {
    /// errexit holds: a failing command ends the shell.
    errexit: bool,
    /// pipefail holds: a failing command fails its pipeline.
    pipefail: bool,
    /// " (in the script of `sh -c` at column 5)", or "" at the top level.
    within: String,
    depth: usize,
}

type Found = Result<(), String>;

fn options() -> ParserOptions {
    // bash's defaults for `bash -c`: no extglob, not POSIX mode.
    ParserOptions {
        enable_extended_globbing: false,
        ..ParserOptions::default()
    }
}

/// Why `command` can turn a failure into success, naming the construct and its
/// position; `None` when it cannot.
pub fn hides_failure(command: &str) -> Option<String> {
    let ctx = Ctx {
        errexit: true,
        pipefail: true,
        within: String::new(),
        depth: 0,
    };
    script(command, true, &ctx).err()
}

/// Why `command`, run as an agent's shell runs it (bash without errexit or pipefail),
/// can end with a status that is not its commands' own — a failure turned into
/// success (`|| true`, `; echo done`, `| tee log`) or lost; `None` when its status is
/// theirs. A run that can mask its status never counts as verification.
pub fn masks_status(command: &str) -> Option<String> {
    let ctx = Ctx {
        errexit: false,
        pipefail: false,
        within: String::new(),
        depth: 0,
    };
    script(command, true, &ctx).err()
}

fn parse(text: &str) -> Result<ast::Program, String> {
    Parser::new(text.as_bytes(), &options())
        .parse_program()
        .map_err(|e| e.to_string())
}

/// Reads a script: `tail` says whether its status is the status something checks.
fn script(text: &str, tail: bool, ctx: &Ctx) -> Found {
    let program = parse(text).map_err(|e| {
        format!(
            "the command{} does not parse as bash ({e}), so what it does cannot be checked",
            ctx.within
        )
    })?;
    let items: Vec<&CompoundListItem> = program
        .complete_commands
        .iter()
        .flat_map(|c| c.0.iter())
        .collect();
    list(&items, tail, ctx)
}

/// "at column 7" (or "at line 2, column 3") of a location, with the nesting.
fn at(loc: Option<SourceSpan>, ctx: &Ctx) -> String {
    let place = match loc {
        Some(s) if s.start.line > 1 => {
            format!(" at line {}, column {}", s.start.line, s.start.column)
        }
        Some(s) => format!(" at column {}", s.start.column),
        None => String::new(),
    };
    format!("{place}{}", ctx.within)
}

fn list(items: &[&CompoundListItem], tail: bool, ctx: &Ctx) -> Found {
    let n = items.len();
    for (i, item) in items.iter().enumerate() {
        let last = i + 1 == n;
        if i > 0 && !ctx.errexit {
            return Err(format!(
                "`;` before the command{}: this shell runs without errexit, so a failure before its last command is lost (a sequence: `;` or a line break)",
                at(item.0.location(), ctx)
            ));
        }
        if let SeparatorOperator::Async = item.1 {
            return Err(format!(
                "`&` after the command{}: a background job's failure never reaches the check's exit status",
                at(item.0.location(), ctx)
            ));
        }
        if last
            && n > 1
            && let Some((name, loc)) = lone_command_name(&item.0)
            && (name == "true" || name == ":")
        {
            return Err(format!(
                "`{name}` as the last command{}: it makes the check end in success; remove it",
                at(loc, ctx)
            ));
        }
        and_or(&item.0, tail && last, ctx)?;
    }
    Ok(())
}

/// The name (after runners such as `command`) of an and-or list that is one simple
/// command, with its location.
fn lone_command_name(l: &ast::AndOrList) -> Option<(String, Option<SourceSpan>)> {
    if !l.additional.is_empty() || l.first.seq.len() != 1 {
        return None;
    }
    let Some(Command::Simple(s)) = l.first.seq.first() else {
        return None;
    };
    let words = words_of(s);
    let argv = strip_runners(&words);
    let (name, loc) = argv.first()?;
    Some((basename(name.as_deref()?).to_owned(), loc.clone()))
}

fn and_or(l: &ast::AndOrList, tail: bool, ctx: &Ctx) -> Found {
    let mut parts: Vec<(Option<bool>, &Pipeline)> = vec![(None, &l.first)];
    for a in &l.additional {
        match a {
            AndOr::And(p) => parts.push((Some(true), p)),
            AndOr::Or(p) => parts.push((Some(false), p)),
        }
    }
    let n = parts.len();
    for (k, (op, p)) in parts.iter().enumerate() {
        if *op == Some(false) {
            if failing_exit(p, true, ctx)? {
                continue;
            }
            return Err(format!(
                "`||` before the command{}: when what is before it fails, `{}` runs instead and can succeed, which turns the failure into success (only `|| exit 1` is accepted there)",
                at(p.location(), ctx),
                p.to_string().trim()
            ));
        }
        let last = k + 1 == n;
        // A failure here is not caught by errexit when an `&&` follows; it must reach
        // an `|| exit`, or be the list's status at the end of the check.
        if !last
            && !tail
            && parts.get(k + 1).is_some_and(|(o, _)| *o == Some(true))
            && !parts.iter().skip(k + 1).any(|(o, _)| *o == Some(false))
        {
            return Err(format!(
                "`&&` after the command{}: when it fails, bash's errexit does not stop the check there (it is ignored left of `&&`) and the commands after this list run, so the failure is lost; make the `&&` chain the last command, or end it with `|| exit 1`",
                at(p.location(), ctx)
            ));
        }
        // errexit is ignored in every part but the last.
        let inner = Ctx {
            errexit: ctx.errexit && last,
            ..ctx.clone()
        };
        // Nothing runs after the last part of a list at the end: only there may
        // `exec` replace the shell.
        pipeline(p, tail || !last, tail && last, &inner)?;
    }
    Ok(())
}

fn pipeline(p: &Pipeline, tail: bool, ends: bool, ctx: &Ctx) -> Found {
    if p.bang {
        return Err(format!(
            "`!` before the command{}: it inverts the status, so the check passes when the command fails (and bash's errexit ignores a `!` pipeline)",
            at(p.location(), ctx)
        ));
    }
    if p.seq.len() > 1 && !ctx.pipefail {
        return Err(format!(
            "`|`{}: this shell runs without pipefail, so only the last command of the pipeline decides its status",
            at(p.location(), ctx)
        ));
    }
    // Each part of a longer pipeline runs in a process of its own: its status is
    // what pipefail sees.
    let tail = tail || p.seq.len() > 1;
    let ends = ends || p.seq.len() > 1;
    for c in &p.seq {
        command(c, tail, ends, ctx)?;
    }
    Ok(())
}

fn command(c: &Command, tail: bool, ends: bool, ctx: &Ctx) -> Found {
    match c {
        Command::Simple(s) => simple(s, tail, ends, ctx),
        Command::Function(f) => Err(format!(
            "the function definition `{}`{}: a function can stand in for the program a check names, and runs where errexit may not hold",
            f.fname,
            at(f.location(), ctx)
        )),
        Command::ExtendedTest(t, redirects) => {
            test_expr(&t.expr, ctx)?;
            redirect_list(redirects.as_ref(), ctx)
        }
        Command::Compound(cc, redirects) => {
            redirect_list(redirects.as_ref(), ctx)?;
            compound(cc, tail, ctx)
        }
    }
}

fn compound(cc: &CompoundCommand, tail: bool, ctx: &Ctx) -> Found {
    let refuse = |what: &str, why: &str| Err(format!("`{what}`{}: {why}", at(cc.location(), ctx)));
    const COND: &str = "a conditional around the check: a failure in its condition only picks a branch (errexit is ignored there), and a branch may not run the check at all";
    const LOOP: &str = "a loop around the check: a failure in its condition ends the loop, not the check, and its body may run zero times";
    match cc {
        CompoundCommand::Subshell(s) => {
            let items: Vec<&CompoundListItem> = s.list.0.iter().collect();
            // A subshell's status is its process's: always seen by the parent.
            list(&items, true, ctx)
        }
        CompoundCommand::BraceGroup(b) => {
            let items: Vec<&CompoundListItem> = b.list.0.iter().collect();
            // bash does not exit for a brace group whose failure came from a place
            // where errexit was ignored: its status counts only where the group's does.
            list(&items, tail, ctx)
        }
        CompoundCommand::Arithmetic(a) => substitution_text(&a.expr.value, a.location(), ctx),
        CompoundCommand::IfClause(_) => refuse("if", COND),
        CompoundCommand::CaseClause(_) => refuse("case", COND),
        CompoundCommand::WhileClause(_) => refuse("while", LOOP),
        CompoundCommand::UntilClause(_) => refuse("until", LOOP),
        CompoundCommand::ForClause(_) | CompoundCommand::ArithmeticForClause(_) => refuse(
            "for",
            "a loop around the check: its body may run zero times (an empty list, a pattern that matches nothing); chain the commands with `&&` instead",
        ),
        CompoundCommand::Coprocess(_) => refuse(
            "coproc",
            "a background job: its failure never reaches the check's exit status",
        ),
    }
}

/// Arithmetic text may hold `$(…)` too.
fn substitution_text(text: &str, loc: Option<SourceSpan>, ctx: &Ctx) -> Found {
    if text.contains("$(") || text.contains('`') {
        return Err(format!(
            "a command substitution inside arithmetic{}: its status is lost",
            at(loc, ctx)
        ));
    }
    Ok(())
}

fn test_expr(e: &ExtendedTestExpr, ctx: &Ctx) -> Found {
    match e {
        ExtendedTestExpr::And(a, b) | ExtendedTestExpr::Or(a, b) => {
            test_expr(a, ctx)?;
            test_expr(b, ctx)
        }
        ExtendedTestExpr::Not(a) | ExtendedTestExpr::Parenthesized(a) => test_expr(a, ctx),
        ExtendedTestExpr::UnaryTest(_, w) => no_substitution(w, ctx),
        ExtendedTestExpr::BinaryTest(_, a, b) => {
            no_substitution(a, ctx)?;
            no_substitution(b, ctx)
        }
    }
}

fn redirect_list(r: Option<&ast::RedirectList>, ctx: &Ctx) -> Found {
    for io in r.iter().flat_map(|r| r.0.iter()) {
        redirect(io, ctx)?;
    }
    Ok(())
}

fn redirect(io: &IoRedirect, ctx: &Ctx) -> Found {
    match io {
        IoRedirect::File(_, _, IoFileRedirectTarget::ProcessSubstitution(_, s)) => {
            Err(process_substitution(s.location(), ctx))
        }
        IoRedirect::File(_, _, IoFileRedirectTarget::Filename(w))
        | IoRedirect::File(_, _, IoFileRedirectTarget::Duplicate(w))
        | IoRedirect::HereString(_, w)
        | IoRedirect::OutputAndError(w, _) => no_substitution(w, ctx),
        IoRedirect::File(_, _, IoFileRedirectTarget::Fd(_)) => Ok(()),
        IoRedirect::HereDocument(_, h) => {
            if h.requires_expansion {
                substitution_text(&h.doc.value, h.location(), ctx)
            } else {
                Ok(())
            }
        }
    }
}

fn process_substitution(loc: Option<SourceSpan>, ctx: &Ctx) -> String {
    format!(
        "a process substitution (`<(…)`, `>(…)`){}: its status never reaches the check's",
        at(loc, ctx)
    )
}

/// The command substitutions of a word (`$(…)` and backquotes, also inside `"…"` and
/// `${…}`): their bodies.
fn substitutions(w: &ast::Word) -> Result<Vec<String>, String> {
    let pieces = brush_parser::word::parse(&w.value, &options()).map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    fn walk(
        pieces: &[brush_parser::word::WordPieceWithSource],
        source: &str,
        out: &mut Vec<String>,
    ) {
        for p in pieces {
            match &p.piece {
                WordPiece::CommandSubstitution(s) | WordPiece::BackquotedCommandSubstitution(s) => {
                    out.push(s.clone());
                }
                WordPiece::DoubleQuotedSequence(inner)
                | WordPiece::GettextDoubleQuotedSequence(inner) => walk(inner, source, out),
                WordPiece::ParameterExpansion(_) | WordPiece::ArithmeticExpression(_) => {
                    // `${x:-$(cmd)}`, `$(( $(cmd) ))`: not taken apart here; refused whole.
                    let text = source.get(p.start_index..p.end_index).unwrap_or(source);
                    if text.contains("$(") || text.contains('`') {
                        out.push(String::new());
                    }
                }
                _ => {}
            }
        }
    }
    walk(&pieces, &w.value, &mut out);
    Ok(out)
}

fn no_substitution(w: &ast::Word, ctx: &Ctx) -> Found {
    match substitutions(w) {
        Ok(s) if s.is_empty() => Ok(()),
        Ok(_) => Err(lost_substitution(w.location(), ctx)),
        Err(e) => Err(format!(
            "the word `{w}`{} does not parse ({e})",
            at(w.location(), ctx)
        )),
    }
}

fn lost_substitution(loc: Option<SourceSpan>, ctx: &Ctx) -> String {
    format!(
        "a command substitution (`$(…)` or backquotes) in the word{}: its status is lost; assign it first (`v=$(cmd) && test \"$v\" = …`), where bash checks it",
        at(loc, ctx)
    )
}

/// A word's text when it is written out: quotes and escapes removed, no expansion,
/// no glob or brace pattern.
fn literal(w: &ast::Word) -> Option<String> {
    let pieces = brush_parser::word::parse(&w.value, &options()).ok()?;
    fn join(pieces: &[brush_parser::word::WordPieceWithSource], quoted: bool) -> Option<String> {
        let mut s = String::new();
        for p in pieces {
            match &p.piece {
                WordPiece::Text(t) => {
                    if !quoted && t.contains(['*', '?', '[', '{', '~']) {
                        return None;
                    }
                    s.push_str(t);
                }
                WordPiece::SingleQuotedText(t) => s.push_str(t),
                WordPiece::EscapeSequence(e) => s.push_str(e.get(1..).unwrap_or_default()),
                WordPiece::DoubleQuotedSequence(inner) => s.push_str(&join(inner, true)?),
                _ => return None,
            }
        }
        Some(s)
    }
    join(&pieces, false)
}

fn basename(w: &str) -> &str {
    w.rsplit('/').next().unwrap_or(w)
}

/// The words of a simple command (name and arguments) as written, literal or not,
/// with their locations.
type WordAt = (Option<String>, Option<SourceSpan>);
type Words = Vec<WordAt>;

fn words_of(s: &SimpleCommand) -> Words {
    let mut out = Vec::new();
    if let Some(w) = &s.word_or_name {
        out.push((literal(w), w.location()));
    }
    for item in s.suffix.iter().flat_map(|x| x.0.iter()) {
        if let CommandPrefixOrSuffixItem::Word(w) = item {
            out.push((literal(w), w.location()));
        }
    }
    out
}

/// The words after the options (`-x`, with the option words of `with_arg` taking the
/// next word too) at the start of `r`.
fn skip_opts<'a>(r: &'a [WordAt], with_arg: &[&str]) -> &'a [WordAt] {
    let mut i = 0;
    while let Some((Some(o), _)) = r.get(i)
        && o.starts_with('-')
    {
        i += if with_arg.contains(&o.as_str()) { 2 } else { 1 };
        if o == "--" {
            break;
        }
    }
    r.get(i..).unwrap_or_default()
}

/// The command that programs which run another command (`exec`, `command`, `env`,
/// `nice`, `nohup`, `timeout`, ...) run: the words from its name on.
fn strip_runners(words: &[WordAt]) -> &[WordAt] {
    let mut w = words;
    loop {
        let Some((Some(name), _)) = w.first() else {
            return w;
        };
        let rest = w.get(1..).unwrap_or_default();
        w = match basename(name) {
            "exec" => skip_opts(rest, &["-a"]),
            "command" | "builtin" => {
                if rest
                    .first()
                    .is_some_and(|x| matches!(x.0.as_deref(), Some("-v" | "-V")))
                {
                    return w;
                }
                skip_opts(rest, &[])
            }
            "env" => {
                let r = skip_opts(rest, &["-u", "-C", "--unset", "--chdir"]);
                let mut i = 0;
                while r
                    .get(i)
                    .is_some_and(|x| x.0.as_deref().is_some_and(|s| s.contains('=')))
                {
                    i += 1;
                }
                r.get(i..).unwrap_or_default()
            }
            "nice" => skip_opts(rest, &["-n", "--adjustment"]),
            "nohup" | "setsid" | "stdbuf" | "time" => skip_opts(rest, &[]),
            "timeout" => {
                let r = skip_opts(rest, &["-s", "-k", "--signal", "--kill-after"]);
                r.get(1..).unwrap_or_default() // the duration
            }
            _ => return w,
        };
    }
}

/// `ends`: nothing runs after this command in its shell and its status is the
/// shell's (where `exec` may replace the shell).
fn simple(s: &SimpleCommand, tail: bool, ends: bool, ctx: &Ctx) -> Found {
    // Substitutions, in every word, assignment and redirection.
    let mut subs: Vec<(String, Option<SourceSpan>)> = Vec::new();
    // Each word with where to point at: an assignment's value has no location of its
    // own, its whole `NAME=value` word does.
    let mut collect = |w: &ast::Word, loc: Option<SourceSpan>| -> Found {
        let loc = w.location().or(loc);
        match substitutions(w) {
            Ok(found) => {
                subs.extend(found.into_iter().map(|b| (b, loc.clone())));
                Ok(())
            }
            Err(e) => Err(format!(
                "the word `{w}`{} does not parse ({e})",
                at(loc, ctx)
            )),
        }
    };
    let items = s
        .prefix
        .iter()
        .flat_map(|p| p.0.iter())
        .chain(s.suffix.iter().flat_map(|p| p.0.iter()));
    let mut redirects = Vec::new();
    for item in items {
        match item {
            CommandPrefixOrSuffixItem::IoRedirect(io) => redirects.push(io),
            CommandPrefixOrSuffixItem::Word(w) => collect(w, None)?,
            CommandPrefixOrSuffixItem::AssignmentWord(a, w) => match &a.value {
                ast::AssignmentValue::Scalar(v) => collect(v, w.location())?,
                ast::AssignmentValue::Array(vs) => {
                    for (k, v) in vs {
                        if let Some(k) = k {
                            collect(k, w.location())?;
                        }
                        collect(v, w.location())?;
                    }
                }
            },
            CommandPrefixOrSuffixItem::ProcessSubstitution(_, sub) => {
                return Err(process_substitution(sub.location(), ctx));
            }
        }
    }
    if let Some(w) = &s.word_or_name {
        collect(w, None)?;
    }
    for io in redirects {
        redirect(io, ctx)?;
    }
    match (subs.as_slice(), &s.word_or_name) {
        ([], _) => {}
        // `v=$(cmd)`: bash checks the status of an assignment's only substitution,
        // and with inherit_errexit its body runs under errexit.
        ([(body, _)], None) if !body.is_empty() => {
            let inner = Ctx {
                within: format!(" (in the command substitution{})", at(s.location(), ctx)),
                depth: ctx.depth + 1,
                ..ctx.clone()
            };
            if inner.depth > MAX_DEPTH {
                return Err(too_deep(ctx));
            }
            script(body, true, &inner)?;
        }
        ([(_, loc), ..], _) => return Err(lost_substitution(loc.clone(), ctx)),
    }
    let words = words_of(s);
    let Some((first, first_loc)) = words.first() else {
        return Ok(()); // assignments or redirections only
    };
    if first.is_none() {
        return Err(format!(
            "a command name that is not written out{}: what it runs cannot be checked",
            at(first_loc.clone(), ctx)
        ));
    }
    let argv = strip_runners(&words);
    let Some((name, loc)) = argv.first() else {
        return Ok(()); // `exec >log`, `env`
    };
    let Some(name) = name.as_deref() else {
        return Err(format!(
            "a command name that is not written out{}: what it runs cannot be checked",
            at(loc.clone(), ctx)
        ));
    };
    let base = basename(name);
    let here = at(loc.clone(), ctx);
    let arg = |i: usize| argv.get(i).map(|x| x.0.as_deref());
    if !ends && basename(first.as_deref().unwrap_or_default()) == "exec" {
        return Err(format!(
            "`exec {name}`{}: it replaces the check's shell, so the commands after it never run",
            at(first_loc.clone(), ctx)
        ));
    }
    match base {
        "trap" => Err(format!(
            "`trap`{here}: a trap can run commands at exit and change the check's exit status"
        )),
        "source" | "." => Err(format!(
            "`{base}`{here}: it runs a file inside the check's shell, where it can switch off errexit or replace commands; run it as a script (`bash {}`)",
            arg(1).flatten().unwrap_or("FILE")
        )),
        "shopt" | "alias" | "enable" | "hash" | "mapfile" | "readarray" => Err(format!(
            "`{base}`{here}: it changes what the check's shell runs or how it handles failure (or runs a command string of its own: `mapfile -C`)"
        )),
        "set" => set_options(argv.get(1..).unwrap_or_default(), &here),
        "exit" | "return" | "logout" => {
            if nonzero_status(arg(1)) && argv.len() <= 2 {
                Ok(())
            } else {
                Err(format!(
                    "`{}`{here}: it ends the check with a status that is not proven non-zero, whatever failed before",
                    argv.iter()
                        .map(|x| x.0.as_deref().unwrap_or("…"))
                        .collect::<Vec<_>>()
                        .join(" ")
                ))
            }
        }
        "eval" => {
            let mut parts = Vec::new();
            for (w, l) in argv.get(1..).unwrap_or_default() {
                match w {
                    Some(w) => parts.push(w.as_str()),
                    None => {
                        return Err(format!(
                            "`eval` of a string built at run time{}: what it runs cannot be checked",
                            at(l.clone(), ctx)
                        ));
                    }
                }
            }
            let inner = Ctx {
                within: format!(" (in the string `eval`{here} runs)"),
                depth: ctx.depth + 1,
                ..ctx.clone()
            };
            if inner.depth > MAX_DEPTH {
                return Err(too_deep(ctx));
            }
            script(&parts.join(" "), tail, &inner)
        }
        _ if SHELLS.contains(&base) => nested_shell(argv, ctx),
        _ => {
            // A shell run by another program (`xargs sh -c …`, `find -exec bash -c …`).
            for (i, (w, _)) in argv.iter().enumerate().skip(1) {
                if w.as_deref().is_some_and(|w| SHELLS.contains(&basename(w)))
                    && argv
                        .get(i + 1)
                        .and_then(|x| x.0.as_deref())
                        .is_some_and(|f| {
                            f.starts_with('-') && !f.starts_with("--") && f.contains('c')
                        })
                {
                    return nested_shell(argv.get(i..).unwrap_or_default(), ctx);
                }
            }
            Ok(())
        }
    }
}

fn too_deep(ctx: &Ctx) -> String {
    format!(
        "scripts nested more than {MAX_DEPTH} deep{}: not followed",
        ctx.within
    )
}

/// `exit` arguments whose status is non-zero for sure: none, `$?` (only right of
/// `||`, checked by the caller) is not here; a literal integer not 0 mod 256.
fn nonzero_status(arg: Option<Option<&str>>) -> bool {
    matches!(arg, Some(Some(n)) if n.parse::<i64>().is_ok_and(|n| n.rem_euclid(256) != 0))
}

/// Whether a pipeline right of `||` is a failing exit: `exit`, `exit $?` (only
/// directly, where `$?` is the failure's status), `exit N` (N not 0 mod 256), or a
/// brace group whose last command is `exit N`.
fn failing_exit(p: &Pipeline, direct: bool, ctx: &Ctx) -> Result<bool, String> {
    if p.bang || p.seq.len() != 1 {
        return Ok(false);
    }
    match p.seq.first() {
        Some(Command::Simple(s)) => {
            let words = words_of(s);
            if s.prefix.is_some() || words.first().is_none_or(|w| w.0.as_deref() != Some("exit")) {
                return Ok(false);
            }
            let args: Vec<Option<&str>> = words.iter().skip(1).map(|w| w.0.as_deref()).collect();
            Ok(match args.as_slice() {
                [] => direct,
                [Some(n)] => nonzero_status(Some(Some(n))),
                _ => false,
            } || (direct
                && matches!(s.suffix.as_ref().map(|x| x.0.as_slice()), Some([CommandPrefixOrSuffixItem::Word(w)]) if w.value == "$?" || w.value == "\"$?\"")))
        }
        Some(Command::Compound(CompoundCommand::BraceGroup(b), _)) => {
            let Some(last) = b.list.0.last() else {
                return Ok(false);
            };
            if !last.0.additional.is_empty() || !failing_exit(&last.0.first, false, ctx)? {
                return Ok(false);
            }
            let items: Vec<&CompoundListItem> = b.list.0.iter().collect();
            list(&items, true, ctx)?;
            Ok(true)
        }
        _ => Ok(false),
    }
}

/// `set` may not switch errexit or pipefail off, nor switch on `noexec` (`-n`: commands
/// are read, not run) or `onecmd` (`-t`: the shell exits after the next command).
fn set_options(args: &[WordAt], here: &str) -> Found {
    let refuse = |w: &str| {
        Err(format!(
            "`set {w}`{here}: it switches off how the check's shell catches failure (errexit, pipefail) or stops it running the commands that follow (noexec, onecmd)"
        ))
    };
    let mut i = 0;
    while let Some((w, _)) = args.get(i) {
        let Some(w) = w.as_deref() else {
            return refuse("…");
        };
        if w == "--" || w == "-" {
            break; // positional parameters follow
        }
        let Some(flags) = w.strip_prefix('-').or_else(|| w.strip_prefix('+')) else {
            break;
        };
        let off = w.starts_with('+');
        if (!off && flags.contains(['n', 't'])) || (off && flags.contains('e')) {
            return refuse(w);
        }
        if flags.contains('o') {
            i += 1;
            let name = args.get(i).and_then(|x| x.0.as_deref());
            match name {
                Some(n @ ("noexec" | "onecmd")) if !off => return refuse(&format!("{w} {n}")),
                Some(n @ ("errexit" | "pipefail")) if off => return refuse(&format!("{w} {n}")),
                Some(_) => {}
                None if off => {} // `set +o` lists the options
                None => {}
            }
        }
        i += 1;
    }
    Ok(())
}

/// `sh -c SCRIPT`, `bash -ec SCRIPT`, `sh FILE`, `sh` (standard input).
fn nested_shell(argv: &[WordAt], ctx: &Ctx) -> Found {
    let shell = argv
        .first()
        .and_then(|x| x.0.as_deref())
        .map(basename)
        .unwrap_or("sh");
    let here = at(argv.first().and_then(|x| x.1.clone()), ctx);
    let (mut command_mode, mut errexit, mut pipefail, mut stdin) = (false, false, false, false);
    let mut i = 1;
    while let Some((w, _)) = argv.get(i) {
        let Some(w) = w.as_deref() else {
            break; // an operand: the script (or its file), read below
        };
        if w == "--" || w == "-" {
            i += 1;
            break;
        }
        if let Some(long) = w.strip_prefix("--") {
            i += if matches!(long, "rcfile" | "init-file") {
                2
            } else {
                1
            };
            continue;
        }
        let (on, flags) = match (w.strip_prefix('-'), w.strip_prefix('+')) {
            (Some(f), _) if !f.is_empty() => (true, f),
            (_, Some(f)) if !f.is_empty() => (false, f),
            _ => break,
        };
        command_mode |= on && flags.contains('c');
        stdin |= on && flags.contains('s');
        if flags.contains('e') {
            errexit = on;
        }
        for _ in flags.matches(['o', 'O']) {
            i += 1;
            if argv.get(i).and_then(|x| x.0.as_deref()) == Some("pipefail") {
                pipefail = on;
            }
        }
        i += 1;
    }
    if !command_mode {
        if stdin || argv.get(i).is_none() {
            return Err(format!(
                "`{shell}` reading its commands from standard input{here}: they cannot be checked; give it a script file or `-c`"
            ));
        }
        return Ok(()); // `sh script.sh`: the script is the check
    }
    let Some((script_word, loc)) = argv.get(i) else {
        return Err(format!("`{shell} -c` without a script{here}"));
    };
    let Some(text) = script_word else {
        return Err(format!(
            "the script of `{shell} -c`{} is built at run time: what it runs cannot be checked",
            at(loc.clone(), ctx)
        ));
    };
    let inner = Ctx {
        errexit,
        pipefail,
        within: format!(" (in the script of `{shell} -c`{here})"),
        depth: ctx.depth + 1,
    };
    if inner.depth > MAX_DEPTH {
        return Err(too_deep(ctx));
    }
    script(text, true, &inner)
}

#[cfg(test)]
mod tests {
    use super::hides_failure;

    #[test]
    fn positions_are_named() {
        let why = hides_failure("sh checks/parity.sh || echo failed").unwrap_or_default();
        assert!(
            why.starts_with("`||` before the command at column 24"),
            "{why}"
        );
        // A line break separates commands as `;` does (plans hold single-line
        // commands, but a script given to `eval` or `sh -c` may not).
        let why = hides_failure("sh checks/parity.sh\ntrue").unwrap_or_default();
        assert!(
            why.starts_with("`true` as the last command at line 2, column 1"),
            "{why}"
        );
        let why = hides_failure("bash -c 'make\nmake test'").unwrap_or_default();
        assert!(why.starts_with("`;` before the command at line 2, column 1 (in the script of `bash -c` at column 1)"), "{why}");
        assert_eq!(hides_failure("make &&\nmake test"), None);
    }

    /// An agent's shell runs without errexit and pipefail: what the status of a test
    /// run there is, and what hides it (issue 42: `pytest || true` counted as a
    /// passing verification).
    #[test]
    fn an_agent_shell_run_masks_its_status_or_not() {
        for honest in [
            "pytest -q",
            "cd web && npm test",
            "python3 -m pytest tests/ -x",
            "CI=1 cargo test --workspace",
            "cd a && cd b && go test ./...",
        ] {
            assert_eq!(super::masks_status(honest), None, "{honest}");
        }
        for masked in [
            "pytest || true",
            "pytest; echo done",
            "pytest | tee log.txt",
            "! pytest",
            "pytest & wait",
            "pytest\ntrue",
            "npm test && echo ok; exit 0",
            "sh -c 'pytest; true'",
        ] {
            assert!(super::masks_status(masked).is_some(), "{masked}");
        }
    }
}
