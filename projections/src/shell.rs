//! What a shell command line runs: its simple commands, each as words with the shell's
//! quoting removed. Pipelines, `;`, `&`, `&&`, `||` and line breaks separate commands;
//! the scripts of `sh -c`, `bash -c` and `zsh -c`, the words of `eval` and the bodies
//! of `$(...)` are looked into. Words come from `shlex` (POSIX quoting rules); a line it
//! cannot split (an unclosed quote) falls back to whitespace.
//!
//! One reader for every rule that asks "what does this command run": goal plan rules
//! (weak checks, remote before-states) and the risk heuristic (verification runs).
//! Whether a check command can hide a failure is a question for a real shell parser:
//! `tacho_goals`' plan rules answer it with brush's bash parser.

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
}
