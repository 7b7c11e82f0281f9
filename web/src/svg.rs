//! Pictures drawn on the server as inline SVG: the timeline of a session (steps and
//! their tool calls) and tokens per day. Text in them is escaped here.

use std::fmt::Write;

use tacho_app::types::{ExecutionGraph, GoalEventNode, GoalMark};

/// Text for SVG content and attribute values.
pub fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}

/// Rows drawn at most; the rest is said.
const ROWS_MAX: usize = 400;
const WIDTH: f64 = 960.0;
const LABEL: f64 = 300.0;
const ROW: f64 = 18.0;

fn cut(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        let mut o: String = s.chars().take(n).collect();
        o.push('…');
        o
    }
}

/// The session's goal events, steps and tool calls on one time axis (a Gantt chart):
/// a row of goal events when there are any (see [`goal_mark`]), a row per step (its
/// span), then a row per tool call (call to result), failed calls in red.
pub fn timeline(g: &ExecutionGraph) -> String {
    let Some(start) = g
        .started_unix_ns
        .or(g.steps.first().map(|s| s.started_unix_ns))
    else {
        return String::new();
    };
    let end = g
        .ended_unix_ns
        .or(g.last_event_unix_ns)
        .unwrap_or(start)
        .max(start + 1);
    let span = (end - start) as f64;
    let x = |t: i64| LABEL + ((t - start).max(0) as f64 / span) * (WIDTH - LABEL - 10.0);
    let mut rows: Vec<(String, i64, i64, &'static str, String)> = Vec::new();
    for s in &g.steps {
        let s_end = s.finished_unix_ns.unwrap_or(end);
        rows.push((
            format!(
                "Step {}{}",
                s.number,
                s.title
                    .as_ref()
                    .map(|t| format!(": {t}"))
                    .unwrap_or_default()
            ),
            s.started_unix_ns,
            s_end,
            "step",
            String::new(),
        ));
        for t in &s.tools {
            let t_end = t
                .duration_ms
                .map(|ms| t.started_unix_ns + i64::try_from(ms).unwrap_or(0) * 1_000_000)
                .unwrap_or(t.started_unix_ns);
            let class = match t.status {
                Some(tacho_schema::ToolStatus::Ok) => "ok",
                Some(_) => "fail",
                None => "open",
            };
            rows.push((
                format!(
                    "  {}{}",
                    t.tool,
                    t.target
                        .as_ref()
                        .map(|x| format!(" {x}"))
                        .unwrap_or_default()
                ),
                t.started_unix_ns,
                t_end,
                class,
                t.status
                    .map(|s| s.to_string())
                    .unwrap_or_else(|| "no result".into()),
            ));
        }
    }
    let goals = &g.goals.events;
    // The goal events' rows come first, so that no cut of the rows below drops them.
    let marks = goal_lanes(goals.iter().map(|e| x(e.at_unix_ns)));
    let goal_rows = marks.iter().map(|m| m.1 + 1).max().unwrap_or(0);
    let shown = rows.len().min(ROWS_MAX);
    let height = 30.0 + ROW * (shown + goal_rows) as f64 + 10.0;
    let mut o = String::new();
    let _ = write!(
        o,
        r##"<svg xmlns="http://www.w3.org/2000/svg" class="timeline" role="img" aria-label="timeline of goal events, steps and tool calls" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="system-ui,sans-serif" font-size="11">"##
    );
    // Time axis: five ticks.
    for i in 0..=4 {
        let t = start + (span * f64::from(i) / 4.0) as i64;
        let xi = x(t);
        let label = tick_label(t - start, span as i64);
        let anchor = match i {
            0 => "start",
            4 => "end",
            _ => "middle",
        };
        let _ = write!(
            o,
            r##"<line x1="{xi:.1}" y1="18" x2="{xi:.1}" y2="{height}" stroke="#d0d7de"/><text x="{xi:.1}" y="12" text-anchor="{anchor}" fill="#57606a">{label}</text>"##
        );
    }
    if !goals.is_empty() {
        let y = 24.0;
        let _ = write!(
            o,
            r##"<text x="4" y="{:.1}" fill="#1f2328">Goals</text>"##,
            y + 11.0
        );
        for (e, (cx, lane)) in goals.iter().zip(marks) {
            goal_mark(&mut o, e, cx, y + 7.5 + ROW * lane as f64);
        }
    }
    for (i, (label, a, b, class, status)) in rows.iter().take(shown).enumerate() {
        let y = 24.0 + ROW * (i + goal_rows) as f64;
        let (xa, xb) = (x(*a), x(*b));
        let w = (xb - xa).max(2.0);
        let fill = match *class {
            "step" => "#8250df",
            "ok" => "#2da44e",
            "fail" => "#cf222e",
            _ => "#bf8700",
        };
        let _ = write!(
            o,
            r##"<g class="row {class}"><text x="4" y="{:.1}" fill="#1f2328">{}</text><rect x="{xa:.1}" y="{:.1}" width="{w:.1}" height="{:.1}" rx="2" fill="{fill}"><title>{}</title></rect></g>"##,
            y + 11.0,
            esc(&cut(label, 46)),
            y + 3.0,
            if *class == "step" { 12.0 } else { 9.0 },
            esc(format!("{} {}", label.trim(), status).trim()),
        );
    }
    if rows.len() > shown {
        let _ = write!(
            o,
            r##"<text x="4" y="{:.1}" fill="#57606a">… and {} more rows (below)</text>"##,
            height - 2.0,
            rows.len() - shown
        );
    }
    o.push_str("</svg>");
    o
}

/// A goal mark's width and the gap after it: marks closer than this would cover each
/// other.
const MARK_SPACE: f64 = 12.0;
/// Lanes of goal marks at most; past them a mark is moved right of the lane that
/// ends first.
const GOAL_LANES_MAX: usize = 6;

/// Where each goal mark goes, given its time's position: its `x` and a lane (a row
/// of the goals), so that marks of events at the same moment (a check's receipt and
/// the gate's decision in one second) stand side by side in lanes instead of on top
/// of each other. A mark takes the first lane it fits in after that lane's last mark.
fn goal_lanes(xs: impl Iterator<Item = f64>) -> Vec<(f64, usize)> {
    let mut ends: Vec<f64> = Vec::new();
    xs.map(|x| {
        if let Some(lane) = ends.iter().position(|end| x >= end + MARK_SPACE) {
            ends[lane] = x;
            return (x, lane);
        }
        if ends.len() < GOAL_LANES_MAX {
            ends.push(x);
            return (x, ends.len() - 1);
        }
        let (lane, end) = ends
            .iter()
            .copied()
            .enumerate()
            .min_by(|a, b| a.1.total_cmp(&b.1))
            .unwrap_or((0, x));
        let moved = x.max(end + MARK_SPACE);
        if let Some(e) = ends.get_mut(lane) {
            *e = moved;
        }
        (moved, lane)
    })
    .collect()
}

/// One goal event on the goals' row, centred at (`cx`, `cy`): a circle for the goal's
/// creation and its receipts, a diamond for the gate's decisions, a square for pauses,
/// resumes, blocks and clears; green for what passed or was accepted, red for what
/// failed, was refused or blocked, amber for a pause, grey for a goal cleared. Its title says what it was.
fn goal_mark(o: &mut String, e: &GoalEventNode, cx: f64, cy: f64) {
    let fill = match e.mark {
        GoalMark::Created | GoalMark::Resumed => "#0969da",
        GoalMark::CheckPassed | GoalMark::Accepted => "#2da44e",
        GoalMark::CheckFailed | GoalMark::Refused | GoalMark::Blocked => "#cf222e",
        GoalMark::Paused => "#bf8700",
        GoalMark::Cleared => "#6e7781",
    };
    let shape = match e.mark {
        GoalMark::Created | GoalMark::CheckPassed | GoalMark::CheckFailed => {
            format!(r##"<circle cx="{cx:.1}" cy="{cy:.1}" r="4.5" fill="{fill}"/>"##)
        }
        GoalMark::Accepted | GoalMark::Refused => format!(
            r##"<path d="M{cx:.1} {:.1}L{:.1} {cy:.1}L{cx:.1} {:.1}L{:.1} {cy:.1}Z" fill="{fill}"/>"##,
            cy - 5.5,
            cx + 5.5,
            cy + 5.5,
            cx - 5.5
        ),
        GoalMark::Paused | GoalMark::Resumed | GoalMark::Blocked | GoalMark::Cleared => format!(
            r##"<rect x="{:.1}" y="{:.1}" width="9" height="9" fill="{fill}"/>"##,
            cx - 4.5,
            cy - 4.5
        ),
    };
    let what = match (e.mark, &e.check, &e.command) {
        (GoalMark::CheckPassed | GoalMark::CheckFailed, Some(check), Some(cmd)) => {
            format!("{}: {check} ({cmd})", e.mark.as_str())
        }
        (_, _, _) => e.mark.as_str().to_string(),
    };
    let title = match &e.revises {
        Some(old) => format!("{what} {}, replacing {old} (event #{})", e.goal, e.seq),
        None => format!("{what} {} (event #{})", e.goal, e.seq),
    };
    let class = e.mark.name();
    let _ = write!(
        o,
        r##"<g class="goal-mark {class}" data-x="{cx:.1}" data-y="{cy:.1}">{shape}<title>{}</title></g>"##,
        esc(&title)
    );
}

/// A time axis tick `offset` nanoseconds after the start of a `span` long timeline:
/// milliseconds under a second, tenths of seconds under a minute, minutes and seconds
/// otherwise (a sub-second session's ticks are told apart).
fn tick_label(offset: i64, span: i64) -> String {
    if span < 1_000_000_000 {
        format!("+{} ms", offset / 1_000_000)
    } else if span < 60_000_000_000 {
        format!("+{:.1} s", offset as f64 / 1e9)
    } else {
        let secs = offset / 1_000_000_000;
        format!("+{}:{:02}", secs / 60, secs % 60)
    }
}

/// The room a day's label (`2026-12-07` at 10 px) takes, with a gap.
const DAY_LABEL_SPACE: f64 = 66.0;

/// Tokens (input + output) per day, for the days that have sessions: bars, each
/// labelled with its date when they are wide enough, else every few.
pub fn tokens_per_day(days: &[(String, u64)]) -> String {
    if days.is_empty() {
        return String::new();
    }
    let max = days.iter().map(|d| d.1).max().unwrap_or(1).max(1) as f64;
    let bar = ((WIDTH - 60.0) / days.len() as f64).clamp(4.0, DAY_LABEL_SPACE);
    // Whole dates (a chart can span a new year), never closer than one date's width.
    let every = (DAY_LABEL_SPACE / bar).ceil().max(1.0) as usize;
    let height = 160.0;
    let mut o = String::new();
    let _ = write!(
        o,
        r##"<svg xmlns="http://www.w3.org/2000/svg" class="tokens" role="img" aria-label="tokens per day" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="system-ui,sans-serif" font-size="10">"##
    );
    for (i, (day, n)) in days.iter().enumerate() {
        let h = (*n as f64 / max) * (height - 40.0);
        let xi = 40.0 + bar * i as f64;
        let _ = write!(
            o,
            r##"<rect x="{xi:.1}" y="{:.1}" width="{:.1}" height="{h:.1}" fill="#0969da"><title>{}: {} tokens</title></rect>"##,
            height - 20.0 - h,
            (bar - 2.0).max(1.0),
            esc(day),
            tacho_app::render::thousands(*n)
        );
        if i % every == 0 {
            let _ = write!(
                o,
                r##"<text x="{:.1}" y="{:.1}" text-anchor="middle" fill="#57606a">{}</text>"##,
                xi + bar / 2.0,
                height - 6.0,
                esc(day)
            );
        }
    }
    let _ = write!(
        o,
        r##"<text x="4" y="12" fill="#57606a">{} max</text></svg>"##,
        tacho_app::render::thousands(max as u64)
    );
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_tell_apart_the_moments_of_short_sessions() {
        let ticks = |span: i64| -> Vec<String> {
            (0..=4).map(|i| tick_label(span * i / 4, span)).collect()
        };
        assert_eq!(
            ticks(800_000_000),
            ["+0 ms", "+200 ms", "+400 ms", "+600 ms", "+800 ms"]
        );
        assert_eq!(
            ticks(10_000_000_000),
            ["+0.0 s", "+2.5 s", "+5.0 s", "+7.5 s", "+10.0 s"]
        );
        assert_eq!(
            ticks(240_000_000_000),
            ["+0:00", "+1:00", "+2:00", "+3:00", "+4:00"]
        );
    }

    #[test]
    fn day_labels_carry_the_year() {
        let days: Vec<(String, u64)> = ["2025-11-30", "2026-11-20", "2026-12-02"]
            .iter()
            .map(|d| ((*d).to_owned(), 10))
            .collect();
        let svg = tokens_per_day(&days);
        for d in &days {
            assert!(svg.contains(&format!(">{}</text>", d.0)), "{svg}");
        }
        // Labels never overlap (the index once read "2025-11-3026-12-07"), whatever
        // the number of days.
        for n in [2, 3, 8, 13, 14, 20, 60, 400] {
            let many: Vec<(String, u64)> = (0..n)
                .map(|i| (format!("2026-{:02}-{:02}", 1 + i / 28 % 12, 1 + i % 28), 1))
                .collect();
            let svg = tokens_per_day(&many);
            let xs: Vec<f64> = svg
                .split("<text x=\"")
                .skip(1)
                .filter(|t| t.contains("text-anchor=\"middle\""))
                .filter_map(|t| t.split('"').next()?.parse().ok())
                .collect();
            assert!(xs.len() >= 2.min(n), "{n} days: {xs:?}");
            for w in xs.windows(2) {
                assert!(w[1] - w[0] >= DAY_LABEL_SPACE - 0.1, "{n} days: {xs:?}");
            }
            if n <= 13 {
                assert_eq!(xs.len(), n, "few days are each labelled");
            }
        }
    }

    /// Goal events of the same moment (a receipt, then the gate's decision, in one
    /// second) stand apart: no two marks within a mark's width of each other on one
    /// lane, however many.
    #[test]
    fn goal_marks_of_one_moment_do_not_cover_each_other() {
        for n in [1, 2, 5, 6, 7, 30] {
            let xs: Vec<f64> = (0..n)
                .map(|i| if i % 3 == 2 { 700.0 } else { 500.0 })
                .collect();
            let placed = goal_lanes(xs.iter().copied());
            assert_eq!(placed.len(), n);
            for (i, a) in placed.iter().enumerate() {
                assert!(a.0 >= xs[i], "a mark is never drawn before its time");
                for b in &placed[..i] {
                    assert!(
                        a.1 != b.1 || (a.0 - b.0).abs() >= MARK_SPACE,
                        "{n}: {placed:?}"
                    );
                }
            }
            assert!(placed.iter().all(|p| p.1 < GOAL_LANES_MAX));
        }
        // Apart in time, one lane.
        assert!(
            goal_lanes([300.0, 320.0, 340.0].into_iter())
                .iter()
                .all(|p| p.1 == 0)
        );
    }

    /// Goal events are marked on the timeline: created, each receipt (passed or
    /// failed), the gate's decisions (accepted, refused), pauses, resumes and blocks,
    /// each with its words and at its time.
    #[test]
    fn goal_events_are_marked_on_the_timeline() {
        use tacho_schema::{
            Event, EventBody, GoalAction, GoalCheckRun, GoalCreated, GoalUpdate, SessionStart,
            StepStart,
        };
        let update = |action, accepted| {
            EventBody::GoalUpdate(GoalUpdate {
                goal: "goal_1".into(),
                action,
                accepted,
                ..Default::default()
            })
        };
        let check = |passed| {
            EventBody::GoalCheckRun(GoalCheckRun {
                goal: "goal_1".into(),
                check: "parity<x>".into(),
                command: "sh checks/parity.sh".into(),
                passed,
                ..Default::default()
            })
        };
        let bodies = vec![
            EventBody::SessionStart(SessionStart::default()),
            EventBody::GoalCreated(GoalCreated {
                goal: "goal_1".into(),
                ..Default::default()
            }),
            EventBody::StepStart(StepStart {
                step: 1,
                ..Default::default()
            }),
            check(false),
            update(GoalAction::Complete, false),
            update(GoalAction::Pause, true),
            update(GoalAction::Pause, false),
            update(GoalAction::Block, true),
            check(true),
            update(GoalAction::Complete, true),
        ];
        let mut g = ExecutionGraph::new("s");
        for (i, body) in bodies.into_iter().enumerate() {
            let e = Event {
                session: "s".into(),
                time_unix_ns: i as i64 * 1_000_000_000,
                body,
            };
            g.apply(i as u64, &e);
        }
        let svg = timeline(&g);
        let marks = [
            ("created", "goal created goal_1"),
            (
                "check_failed",
                "check failed: parity&lt;x&gt; (sh checks/parity.sh)",
            ),
            ("refused", "completion refused"),
            ("paused", "goal paused"),
            ("resumed", "goal resumed"),
            ("blocked", "goal blocked"),
            ("check_passed", "check passed: parity&lt;x&gt;"),
            ("accepted", "completion accepted"),
        ];
        let mut last_x = -1.0;
        for (class, words) in marks {
            let at = svg
                .find(&format!(r#"<g class="goal-mark {class}""#))
                .unwrap_or_else(|| panic!("no {class} mark: {svg}"));
            let mark = &svg[at..];
            let mark = &mark[..mark.find("</g>").unwrap()];
            assert!(mark.contains(words), "{class}: {mark}");
            // Marks stand at their events' times, in order.
            let x: f64 = mark
                .split("data-x=\"")
                .nth(1)
                .and_then(|r| r.split('"').next())
                .and_then(|x| x.parse().ok())
                .unwrap();
            assert!(x > last_x, "{class} at {x}, after {last_x}");
            last_x = x;
        }
        assert!(!svg.contains("parity<x>"), "{svg}");
    }

    #[test]
    fn labels_are_escaped() {
        assert_eq!(
            esc("<a href='x'>&\"</a>"),
            "&lt;a href=&#39;x&#39;&gt;&amp;&quot;&lt;/a&gt;"
        );
        let svg = tokens_per_day(&[("2026-11-20<script>".into(), 5)]);
        assert!(!svg.contains("<script>"), "{svg}");
    }
}
