//! What a shell command line runs: its simple commands, each as words with the shell's
//! quoting removed. Pipelines, `;`, `&`, `&&`, `||` and line breaks separate commands;
//! the scripts of `sh -c`, `bash -c` and `zsh -c`, the words of `eval` and the bodies
//! of `$(...)` are looked into. Words come from `shlex` (POSIX quoting rules); a line it
//! cannot split (an unclosed quote) falls back to whitespace.
//!
//! One reader for every rule that asks "what does this command run": goal plan rules
//! (weak checks, remote before-states) and the risk heuristic (verification runs).

/// The simple commands `line` runs, in order, each as its words.
pub fn commands(line: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut text = line.to_owned();
    // $(...) bodies are commands of their own.
    while let Some(i) = text.find("$(") {
        let rest = text.get(i + 2..).unwrap_or_default().to_owned();
        let end = rest.find(')').unwrap_or(rest.len());
        out.extend(commands(rest.get(..end).unwrap_or_default()));
        text = format!(
            "{} {}",
            text.get(..i).unwrap_or_default(),
            rest.get(end + 1..).unwrap_or_default()
        );
    }
    let words =
        shlex::split(&text).unwrap_or_else(|| text.split_whitespace().map(str::to_owned).collect());
    let mut simple: Vec<Vec<String>> = Vec::new();
    let mut cur: Vec<String> = Vec::new();
    for w in words {
        // The script of `sh -c` is one word: kept whole, read below.
        if cur.len() == 2 && is_shell(&cur[0]) && cur[1] == "-c" {
            cur.push(w);
            continue;
        }
        // Operators written against a word (`make;`, `a&&b`) separate as well.
        let mut parts = w.split(['|', ';', '&', '\n']).peekable();
        while let Some(p) = parts.next() {
            if !p.is_empty() {
                cur.push(p.to_owned());
            }
            if parts.peek().is_some() && !cur.is_empty() {
                simple.push(std::mem::take(&mut cur));
            }
        }
    }
    if !cur.is_empty() {
        simple.push(cur);
    }
    for words in simple {
        match words.first().map(String::as_str) {
            Some(sh) if is_shell(sh) && words.get(1).is_some_and(|w| w == "-c") => {
                out.extend(commands(words.get(2).map_or("", String::as_str)));
            }
            Some("eval") => out.extend(commands(&words.get(1..).unwrap_or_default().join(" "))),
            _ => out.push(words),
        }
    }
    out
}

/// How a command line hides the failure of what it runs, if it does: `… || true`,
/// `… || :`, `… || exit 0`, or a last command `exit 0` / `true` / `:` after `;` or a
/// line break (also inside `sh -c` scripts).
pub fn hides_failure(line: &str) -> Option<String> {
    // A line break separates commands as `;` does (shlex reads it as a blank).
    let line = &line.replace('\n', " ;\n");
    let words =
        shlex::split(line).unwrap_or_else(|| line.split_whitespace().map(str::to_owned).collect());
    // Words and operators apart, operators written against words included.
    let mut tokens: Vec<String> = Vec::new();
    for w in &words {
        // A word with blanks in it was quoted: its operators are text.
        if w.chars().any(char::is_whitespace) {
            tokens.push(w.clone());
            continue;
        }
        let mut cur = String::new();
        let mut op = String::new();
        for ch in w.chars() {
            if matches!(ch, '|' | '&' | ';' | '\n') {
                if !cur.is_empty() {
                    tokens.push(std::mem::take(&mut cur));
                }
                op.push(ch);
            } else {
                if !op.is_empty() {
                    tokens.push(std::mem::take(&mut op));
                }
                cur.push(ch);
            }
        }
        tokens.extend([cur, op].into_iter().filter(|t| !t.is_empty()));
    }
    let masks = |i: usize| match tokens.get(i).map(String::as_str) {
        Some("true") | Some(":") => true,
        Some("exit") => tokens.get(i + 1).is_some_and(|c| c == "0"),
        _ => false,
    };
    for (i, t) in tokens.iter().enumerate() {
        if t == "||" && masks(i + 1) {
            let what = match tokens.get(i + 1).map(String::as_str) {
                Some("exit") => "exit 0",
                Some(w) => w,
                None => "",
            };
            return Some(format!(
                "`|| {what}` hides the failure of what runs before it"
            ));
        }
        if is_shell(t)
            && tokens.get(i + 1).is_some_and(|f| f == "-c")
            && let Some(why) = tokens.get(i + 2).and_then(|script| hides_failure(script))
        {
            return Some(why);
        }
    }
    // The last simple command, after the last `;` or line break.
    let last_sep = tokens
        .iter()
        .rposition(|t| t == ";" || t == "\n" || t == ";;");
    if let Some(at) = last_sep
        && at > 0
        && masks(at + 1)
        && tokens.len() <= at + 3
    {
        let tail = tokens.get(at + 1..).unwrap_or_default().join(" ");
        return Some(format!(
            "it ends with `{tail}` after `;`, which hides every failure before it"
        ));
    }
    None
}

fn is_shell(w: &str) -> bool {
    matches!(
        w.rsplit('/').next().unwrap_or(w),
        "sh" | "bash" | "zsh" | "dash"
    )
}

#[cfg(test)]
mod tests {
    use super::commands;

    fn check(line: &str, want: &[&[&str]]) {
        let got = commands(line);
        let want: Vec<Vec<String>> = want
            .iter()
            .map(|c| c.iter().map(|w| w.to_string()).collect())
            .collect();
        assert_eq!(got, want, "{line}");
    }

    #[test]
    fn operators_quotes_and_nested_scripts() {
        check("cargo test", &[&["cargo", "test"]]);
        check("cd app && npm test", &[&["cd", "app"], &["npm", "test"]]);
        check("make;ls|wc -l", &[&["make"], &["ls"], &["wc", "-l"]]);
        check("grep 'a b' \"c d\" e", &[&["grep", "a b", "c d", "e"]]);
        check(
            "sh -c 'cargo test; echo done'",
            &[&["cargo", "test"], &["echo", "done"]],
        );
        check(
            "bash -c \"git diff origin/main\"",
            &[&["git", "diff", "origin/main"]],
        );
        check("eval git log --oneline", &[&["git", "log", "--oneline"]]);
        check(
            "test \"$(git rev-parse HEAD)\" = x",
            &[&["git", "rev-parse", "HEAD"], &["test", " ", "=", "x"]],
        );
        // An unclosed quote: words by whitespace, nothing lost.
        check("echo 'oops", &[&["echo", "'oops"]]);
    }

    #[test]
    fn commands_that_hide_failure() {
        use super::hides_failure;
        for line in [
            "cargo test || true",
            "cargo test||:",
            "npm test || exit 0",
            "pytest; exit 0",
            "make check;true",
            "sh -c 'cargo test || true'",
            "cargo test\nexit 0",
        ] {
            assert!(hides_failure(line).is_some(), "{line}");
        }
        for line in [
            "cargo test",
            "cargo test && echo ok",
            "test -f x || exit 1",
            "cargo build; cargo test",
            "echo 'a || true'",
            "exit 0",
        ] {
            assert_eq!(hides_failure(line), None, "{line}");
        }
    }
}
