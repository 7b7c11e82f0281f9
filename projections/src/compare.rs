//! Comparing two runs: risk, files, failures, decision paths, and (deep) their steps
//! aligned against each other.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;
use tacho_schema::ToolStatus;

use crate::graph::{ExecutionGraph, StepNode};
use crate::risk::{RiskAssessment, RiskLevel};

/// One side's headline numbers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Side {
    pub session: String,
    pub score: u32,
    pub level: RiskLevel,
    pub files: u64,
    pub failures: u64,
    pub steps: u64,
    pub tool_calls: u64,
    pub tokens_in: u64,
    pub tokens_out: u64,
    pub duration_ms: Option<u64>,
    /// Routes taken, `from → to`, in order.
    pub routes: Vec<String>,
    /// The tool chain, consecutive repeats folded: `read×3 → write → bash`.
    pub tool_chain: String,
}

/// The comparison of run A with run B.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Comparison {
    pub a: Side,
    pub b: Side,
    pub files_only_in_a: Vec<String>,
    pub files_only_in_b: Vec<String>,
    pub files_in_both: Vec<String>,
    /// Event counts by kind: kind → (A, B).
    pub events_by_kind: BTreeMap<String, (u64, u64)>,
    /// With `--deep`: the steps of A and B aligned.
    pub alignment: Option<Vec<StepPair>>,
}

/// How two aligned steps relate.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum StepPair {
    /// Same tools on the same targets with the same outcomes.
    Same { a: u64, b: u64 },
    /// Aligned, but different: what differed.
    Differs {
        a: u64,
        b: u64,
        differences: Vec<String>,
    },
    /// A step of A that B has no counterpart for.
    OnlyInA { a: u64, tools: String },
    /// A step of B that A has no counterpart for.
    OnlyInB { b: u64, tools: String },
}

impl StepPair {
    pub fn is_divergence(&self) -> bool {
        !matches!(self, StepPair::Same { .. })
    }
}

fn failures(s: &StepNode) -> usize {
    s.tools
        .iter()
        .filter(|t| t.status.is_some_and(|st| st != ToolStatus::Ok))
        .count()
}

/// Folds consecutive repeats: `read, read, write` → `read×2 → write`.
fn chain<'a>(tools: impl Iterator<Item = &'a str>) -> String {
    let mut parts: Vec<(String, usize)> = Vec::new();
    for t in tools {
        match parts.last_mut() {
            Some((last, n)) if last == t => *n += 1,
            _ => parts.push((t.to_string(), 1)),
        }
    }
    parts
        .iter()
        .map(|(t, n)| {
            if *n > 1 {
                format!("{t}×{n}")
            } else {
                t.clone()
            }
        })
        .collect::<Vec<_>>()
        .join(" → ")
}

fn side(g: &ExecutionGraph, r: &RiskAssessment) -> Side {
    Side {
        session: g.session.clone(),
        score: r.score,
        level: r.level,
        files: r.files_changed,
        failures: r.tool_failures,
        steps: g.steps.len() as u64,
        tool_calls: g.tools().count() as u64,
        tokens_in: g.tokens.input,
        tokens_out: g.tokens.output,
        duration_ms: g.duration_ms(),
        routes: g
            .routes
            .iter()
            .map(|r| crate::graph::route_text(r.from.as_deref(), &r.to))
            .collect(),
        tool_chain: chain(g.tools().map(|(_, t)| t.tool.as_str())),
    }
}

/// Compares two runs. `by_kind_a` and `by_kind_b` are event counts by kind name;
/// `deep` adds the step alignment.
pub fn compare(
    a: (&ExecutionGraph, &RiskAssessment, &BTreeMap<String, u64>),
    b: (&ExecutionGraph, &RiskAssessment, &BTreeMap<String, u64>),
    deep: bool,
) -> Comparison {
    let fa: BTreeSet<&String> = a.0.files.keys().collect();
    let fb: BTreeSet<&String> = b.0.files.keys().collect();
    let mut events_by_kind: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for (k, n) in a.2 {
        events_by_kind.entry(k.clone()).or_default().0 = *n;
    }
    for (k, n) in b.2 {
        events_by_kind.entry(k.clone()).or_default().1 = *n;
    }
    Comparison {
        a: side(a.0, a.1),
        b: side(b.0, b.1),
        files_only_in_a: fa.difference(&fb).map(|s| s.to_string()).collect(),
        files_only_in_b: fb.difference(&fa).map(|s| s.to_string()).collect(),
        files_in_both: fa.intersection(&fb).map(|s| s.to_string()).collect(),
        events_by_kind,
        alignment: deep.then(|| align(&a.0.steps, &b.0.steps)),
    }
}

/// A step's signature for alignment: its tool calls as (tool, target).
fn signature(s: &StepNode) -> Vec<(&str, Option<&str>)> {
    s.tools
        .iter()
        .map(|t| (t.tool.as_str(), t.target.as_deref()))
        .collect()
}

/// How alike two steps are: 3 for the same calls on the same targets, 2 for the same
/// tools in the same order, 1 for an overlap of tools, -3 for none.
fn similarity(x: &StepNode, y: &StepNode) -> i64 {
    let (sx, sy) = (signature(x), signature(y));
    if sx == sy {
        return 3;
    }
    let tx: Vec<&str> = sx.iter().map(|c| c.0).collect();
    let ty: Vec<&str> = sy.iter().map(|c| c.0).collect();
    if tx == ty {
        return 2;
    }
    let set_x: BTreeSet<&str> = tx.iter().copied().collect();
    if ty.iter().any(|t| set_x.contains(t)) {
        1
    } else {
        // Steps with nothing in common are not paired: two gaps (-2) cost less.
        -3
    }
}

const GAP: i64 = -1;

/// Aligns the steps of A and B (Needleman–Wunsch over step similarity), so that an
/// extra step on one side shifts nothing on the other, then says how each pair differs.
pub fn align(a: &[StepNode], b: &[StepNode]) -> Vec<StepPair> {
    let (n, m) = (a.len(), b.len());
    let mut score = vec![vec![0i64; m + 1]; n + 1];
    for (i, row) in score.iter_mut().enumerate() {
        row[0] = GAP * i as i64;
    }
    for (j, cell) in score[0].iter_mut().enumerate() {
        *cell = GAP * j as i64;
    }
    for i in 1..=n {
        for j in 1..=m {
            let diag = score[i - 1][j - 1] + similarity(&a[i - 1], &b[j - 1]);
            score[i][j] = diag.max(score[i - 1][j] + GAP).max(score[i][j - 1] + GAP);
        }
    }
    let mut pairs = Vec::new();
    let (mut i, mut j) = (n, m);
    while i > 0 || j > 0 {
        if i > 0 && j > 0 && score[i][j] == score[i - 1][j - 1] + similarity(&a[i - 1], &b[j - 1]) {
            pairs.push(pair(&a[i - 1], &b[j - 1]));
            i -= 1;
            j -= 1;
        } else if i > 0 && score[i][j] == score[i - 1][j] + GAP {
            let s = &a[i - 1];
            pairs.push(StepPair::OnlyInA {
                a: s.number,
                tools: chain(s.tools.iter().map(|t| t.tool.as_str())),
            });
            i -= 1;
        } else {
            let s = &b[j - 1];
            pairs.push(StepPair::OnlyInB {
                b: s.number,
                tools: chain(s.tools.iter().map(|t| t.tool.as_str())),
            });
            j -= 1;
        }
    }
    pairs.reverse();
    pairs
}

fn pair(x: &StepNode, y: &StepNode) -> StepPair {
    let mut d = Vec::new();
    let tools = |s: &StepNode| chain(s.tools.iter().map(|t| t.tool.as_str()));
    if tools(x) != tools(y) {
        d.push(format!(
            "tools: {} vs {}",
            or_none(tools(x)),
            or_none(tools(y))
        ));
    }
    let targets = |s: &StepNode| -> BTreeSet<String> {
        s.tools.iter().filter_map(|t| t.target.clone()).collect()
    };
    let (tx, ty) = (targets(x), targets(y));
    if tx != ty {
        let only_a: Vec<&String> = tx.difference(&ty).collect();
        let only_b: Vec<&String> = ty.difference(&tx).collect();
        d.push(format!(
            "targets: only in A {}, only in B {}",
            list(&only_a),
            list(&only_b)
        ));
    }
    let (fx, fy) = (failures(x), failures(y));
    if fx != fy {
        d.push(format!("failures: {fx} vs {fy}"));
    }
    let outcome = |s: &StepNode| -> Vec<String> {
        s.tools
            .iter()
            .map(|t| t.status.map_or("none".to_string(), |st| st.to_string()))
            .collect()
    };
    if fx == fy && tools(x) == tools(y) && outcome(x) != outcome(y) {
        d.push(format!(
            "outcomes: {} vs {}",
            outcome(x).join(","),
            outcome(y).join(",")
        ));
    }
    let (ix, iy) = (x.tokens.input as i64, y.tokens.input as i64);
    let (ox, oy) = (x.tokens.output as i64, y.tokens.output as i64);
    // Token counts always differ a little between runs; report large differences.
    if (ix - iy).abs() * 4 > ix.max(iy) || (ox - oy).abs() * 4 > ox.max(oy) {
        d.push(format!("tokens: {ix}/{ox} vs {iy}/{oy}"));
    }
    if d.is_empty() {
        StepPair::Same {
            a: x.number,
            b: y.number,
        }
    } else {
        StepPair::Differs {
            a: x.number,
            b: y.number,
            differences: d,
        }
    }
}

fn or_none(s: String) -> String {
    if s.is_empty() { "(no tools)".into() } else { s }
}

fn list(v: &[&String]) -> String {
    if v.is_empty() {
        return "-".into();
    }
    let mut s: Vec<&str> = v.iter().take(4).map(|x| x.as_str()).collect();
    if v.len() > 4 {
        s.push("...");
    }
    s.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use tacho_schema::{Event, EventBody, StepFinish, StepStart, ToolCall, ToolResult};

    /// A graph whose steps call the given (tool, target, ok) lists.
    fn run(steps: &[&[(&str, &str, bool)]]) -> ExecutionGraph {
        let mut g = ExecutionGraph::new("s");
        let mut seq = 0;
        let mut push = |g: &mut ExecutionGraph, body: EventBody| {
            g.apply(
                seq,
                &Event {
                    session: "s".into(),
                    time_unix_ns: seq as i64,
                    body,
                },
            );
            seq += 1;
        };
        push(&mut g, EventBody::SessionStart(Default::default()));
        for (n, calls) in steps.iter().enumerate() {
            push(
                &mut g,
                EventBody::StepStart(StepStart {
                    step: n as u64 + 1,
                    ..Default::default()
                }),
            );
            for (i, (tool, target, ok)) in calls.iter().enumerate() {
                let id = format!("{n}-{i}");
                push(
                    &mut g,
                    EventBody::ToolCall(ToolCall {
                        call_id: id.clone(),
                        tool: tool.to_string(),
                        target: Some(target.to_string()),
                        ..Default::default()
                    }),
                );
                push(
                    &mut g,
                    EventBody::ToolResult(ToolResult {
                        call_id: id,
                        status: if *ok {
                            ToolStatus::Ok
                        } else {
                            ToolStatus::Error
                        },
                        ..Default::default()
                    }),
                );
            }
            push(
                &mut g,
                EventBody::StepFinish(StepFinish {
                    step: n as u64 + 1,
                    reason: None,
                }),
            );
        }
        g
    }

    #[test]
    fn an_extra_step_shifts_nothing_and_divergences_are_named() {
        let a = run(&[
            &[("read", "src/api.ts", true), ("grep", "rateLimit", true)],
            &[("write", "src/mw.ts", true)],
            &[("bash", "npm test", true)],
        ]);
        let b = run(&[
            &[("read", "src/api.ts", true), ("grep", "rateLimit", true)],
            &[("read", "docs/limits.md", true)],
            &[("write", "src/limit.ts", true)],
            &[("bash", "npm test", false)],
        ]);
        let p = align(&a.steps, &b.steps);
        assert_eq!(p[0], StepPair::Same { a: 1, b: 1 });
        assert_eq!(
            p[1],
            StepPair::OnlyInB {
                b: 2,
                tools: "read".into()
            }
        );
        match &p[2] {
            StepPair::Differs {
                a: 2,
                b: 3,
                differences,
            } => {
                assert_eq!(
                    differences,
                    &vec!["targets: only in A src/mw.ts, only in B src/limit.ts".to_string()]
                )
            }
            other => panic!("{other:?}"),
        }
        match &p[3] {
            StepPair::Differs {
                a: 3,
                b: 4,
                differences,
            } => {
                assert_eq!(differences, &vec!["failures: 0 vs 1".to_string()])
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(p.iter().position(StepPair::is_divergence), Some(1));
    }

    #[test]
    fn identical_runs_align_step_for_step() {
        let a = run(&[&[("read", "a", true)], &[("edit", "a", true)]]);
        let p = align(&a.steps, &a.steps);
        assert!(p.iter().all(|x| !x.is_divergence()));
        assert_eq!(p.len(), 2);
        assert_eq!(
            chain(["read", "read", "write", "read"].into_iter()),
            "read×2 → write → read"
        );
    }
}
