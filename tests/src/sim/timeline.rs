//! A per-key timeline of one run, drawn as a hand-written SVG from the run's event log.
//!
//! One lane per key (or the `max_keys` busiest keys, kept in first-publish order): each message
//! a consumer took is a bar from its delivery to the consumer to the application's ack (a thin
//! part while it waits in the client's queue, a solid part while the application processes it),
//! coloured by consumer. Messages of one key that overlap in time stack in the lane, so a key
//! held by two applications at once — an order violation — shows as two bars on top of each
//! other. Joins, leaves, crashes, broker restarts and admin operations are vertical markers; a
//! violation is a red marker, and the bars of the positions it names are outlined in red.
//!
//! It reads the log lines the world writes (`t=N publish …`, `send NAME: …`, `app NAME starts
//! …`, `app NAME acks …`, …); a line it does not know is ignored, so a change of wording there
//! loses detail in the picture, never the run.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::sim::check::Violation;
use crate::sim::world::RunResult;

/// How [`timeline_svg`] draws.
#[derive(Clone, Debug)]
pub struct TimelineOptions {
    /// At most this many key lanes (the busiest keys); the picture says how many it left out.
    pub max_keys: usize,
    /// Width of the time axis, px.
    pub width: u32,
}

impl Default for TimelineOptions {
    fn default() -> Self {
        TimelineOptions {
            max_keys: 20,
            width: 1100,
        }
    }
}

/// Escapes `&`, `<`, `>`, `"` and `'` for XML text and attribute values.
pub fn xml_escape(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&apos;"),
            c => o.push(c),
        }
    }
    o
}

/// One message a consumer took: delivered, maybe started, maybe finished.
#[derive(Clone, Debug)]
struct Bar {
    consumer: String,
    /// As printed: `1:3` or `1:3#0`.
    msg: String,
    delivered: u64,
    started: Option<u64>,
    finished: Option<u64>,
    nacked: bool,
    /// Lost with the application (crash, broker restart) before it finished.
    abandoned: bool,
}

/// A vertical marker.
#[derive(Clone, Debug)]
struct Marker {
    at: u64,
    label: String,
    kind: &'static str,
}

#[derive(Debug, Default)]
struct Parsed {
    /// Entry position → key (`-`: keyless).
    key_of: BTreeMap<String, String>,
    /// Key → first publish time, for lane order.
    first_publish: BTreeMap<String, u64>,
    bars: Vec<Bar>,
    markers: Vec<Marker>,
    end: u64,
    consumers: Vec<String>,
}

fn entry_of(msg: &str) -> &str {
    msg.split('#').next().unwrap_or(msg)
}

impl Parsed {
    fn consumer(&mut self, name: &str) {
        if !self.consumers.iter().any(|c| c == name) {
            self.consumers.push(name.to_string());
        }
    }

    /// Open bars of `consumer` end: its application (and client) lost them.
    fn abandon(&mut self, consumer: &str, at: u64) {
        for b in self.bars.iter_mut().rev() {
            if b.consumer == consumer && b.finished.is_none() && !b.abandoned {
                b.abandoned = true;
                b.finished = Some(at);
            }
        }
    }

    fn line(&mut self, l: &str) {
        let Some(rest) = l.strip_prefix("t=") else {
            return;
        };
        let Some((t, ev)) = rest.split_once(' ') else {
            return;
        };
        let Ok(t) = t.parse::<u64>() else { return };
        self.end = self.end.max(t);
        let words: Vec<&str> = ev.split_whitespace().collect();
        match words.as_slice() {
            ["publish", pos, key, ..] => {
                let k = key.strip_prefix("key=").unwrap_or("-").to_string();
                self.first_publish.entry(k.clone()).or_insert(t);
                self.key_of.insert((*pos).to_string(), k);
            }
            ["send", name, entries @ ..] => {
                let name = name.trim_end_matches(':');
                self.consumer(name);
                for e in entries {
                    let pos = e.split('(').next().unwrap_or(e);
                    self.bars.push(Bar {
                        consumer: name.to_string(),
                        msg: pos.to_string(),
                        delivered: t,
                        started: None,
                        finished: None,
                        nacked: false,
                        abandoned: false,
                    });
                }
            }
            ["app", name, "starts", msg, ..] => {
                let entry = entry_of(msg).to_string();
                // The latest unstarted delivery of this entry to this consumer; a batch entry
                // is delivered once and started per message.
                let found = self.bars.iter().rposition(|b| {
                    b.consumer == *name && entry_of(&b.msg) == entry && b.finished.is_none()
                });
                match found {
                    Some(i) if self.bars[i].started.is_none() => {
                        self.bars[i].msg = (*msg).to_string();
                        self.bars[i].started = Some(t);
                    }
                    Some(i) => {
                        let delivered = self.bars[i].delivered;
                        self.bars.push(Bar {
                            consumer: (*name).to_string(),
                            msg: (*msg).to_string(),
                            delivered,
                            started: Some(t),
                            finished: None,
                            nacked: false,
                            abandoned: false,
                        });
                    }
                    None => self.bars.push(Bar {
                        consumer: (*name).to_string(),
                        msg: (*msg).to_string(),
                        delivered: t,
                        started: Some(t),
                        finished: None,
                        nacked: false,
                        abandoned: false,
                    }),
                }
            }
            ["app", name, verb @ ("acks" | "nacks"), msg, ..] => {
                let msg = msg.trim_end_matches(':');
                if let Some(b) = self.bars.iter_mut().rev().find(|b| {
                    b.consumer == *name
                        && b.msg == msg
                        && b.started.is_some()
                        && b.finished.is_none()
                }) {
                    b.finished = Some(t);
                    b.nacked = *verb == "nacks";
                }
            }
            ["join", name, ..] => {
                self.consumer(name);
                if t > 0 {
                    self.markers.push(Marker {
                        at: t,
                        label: format!("join {name}"),
                        kind: "join",
                    });
                }
            }
            ["leave", name, ..] => self.markers.push(Marker {
                at: t,
                label: format!("leave {name}"),
                kind: "leave",
            }),
            ["crash", name] => {
                self.abandon(name, t);
                self.markers.push(Marker {
                    at: t,
                    label: format!("crash {name}"),
                    kind: "crash",
                });
            }
            ["broker", "restart"] => {
                let names = self.consumers.clone();
                for n in names {
                    self.abandon(&n, t);
                }
                self.markers.push(Marker {
                    at: t,
                    label: "broker restart".into(),
                    kind: "restart",
                });
            }
            ["admin", op, arg @ ..] => self.markers.push(Marker {
                at: t,
                label: format!("{op} {}", arg.join(" ")).trim_end().to_string(),
                kind: "admin",
            }),
            ["expire", ..] => self.markers.push(Marker {
                at: t,
                label: "expire".into(),
                kind: "admin",
            }),
            ["backlog-quota", ..] => self.markers.push(Marker {
                at: t,
                label: "evict".into(),
                kind: "admin",
            }),
            _ => {}
        }
    }
}

const PALETTE: &[&str] = &[
    "#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22",
    "#7f7f7f", "#aec7e8", "#ffbb78", "#98df8a",
];

/// A round step for about `n` ticks over `span`.
fn tick_step(span: u64, n: u64) -> u64 {
    let raw = (span / n.max(1)).max(1);
    let mut p = 1u64;
    while p.saturating_mul(10) <= raw {
        p *= 10;
    }
    for m in [1, 2, 5, 10] {
        if p.saturating_mul(m) >= raw {
            return p.saturating_mul(m);
        }
    }
    p.saturating_mul(10)
}

/// The SVG timeline of `r`, which must carry its whole event log (`RunOptions::keep_log`).
/// `title` heads the picture (the repro command is a good one).
pub fn timeline_svg(r: &RunResult, title: &str, opts: &TimelineOptions) -> Result<String, String> {
    let log = r.log.as_ref().ok_or_else(|| {
        "the run kept no event log (RunOptions::keep_log), so there is nothing to draw".to_string()
    })?;
    let mut p = Parsed::default();
    for l in log {
        p.line(l);
    }
    Ok(render(&p, title, &r.violations, opts))
}

fn render(p: &Parsed, title: &str, violations: &[Violation], opts: &TimelineOptions) -> String {
    // Lanes: keys by first publish; the busiest `max_keys` of them.
    let mut per_key: BTreeMap<&str, Vec<&Bar>> = BTreeMap::new();
    for b in &p.bars {
        let k = p
            .key_of
            .get(entry_of(&b.msg))
            .map(String::as_str)
            .unwrap_or("-");
        per_key.entry(k).or_default().push(b);
    }
    let mut keys: Vec<&str> = p.first_publish.keys().map(String::as_str).collect();
    for k in per_key.keys() {
        if !keys.contains(k) {
            keys.push(k);
        }
    }
    let total_keys = keys.len();
    let bad_keys: Vec<&str> = violations.iter().filter_map(|v| v.key.as_deref()).collect();
    if keys.len() > opts.max_keys {
        let mut by_load: Vec<&str> = keys.clone();
        // Keys of a violation first, then by number of bars.
        by_load.sort_by_key(|k| {
            (
                !bad_keys.contains(k),
                std::cmp::Reverse(per_key.get(k).map_or(0, Vec::len)),
            )
        });
        by_load.truncate(opts.max_keys);
        keys.retain(|k| by_load.contains(k));
    }
    keys.sort_by_key(|k| (p.first_publish.get(*k).copied().unwrap_or(u64::MAX), *k));

    // A little room after the last event, so what starts there is visible.
    let end = p.end.max(1) + (p.end / 25).max(2);
    let (left, top, right) = (110u32, 110u32, 30u32);
    let width = opts.width.max(200);
    let scale = f64::from(width) / end as f64;
    let x = |t: u64| f64::from(left) + t as f64 * scale;
    let bar_h = 14u32;
    let gap = 8u32;

    // Stack overlapping bars of a lane into rows (greedy interval partitioning).
    struct Lane<'a> {
        key: &'a str,
        rows: Vec<Vec<&'a Bar>>,
    }
    let mut lanes: Vec<Lane<'_>> = Vec::new();
    for k in &keys {
        let mut bars: Vec<&Bar> = per_key.get(k).cloned().unwrap_or_default();
        // Rows are allocated by the time an application holds a message (start to finish):
        // two bars stack only when two applications hold messages of the key at once. The
        // thin waiting part is drawn underneath.
        let held = |b: &Bar| b.started.unwrap_or(b.delivered);
        bars.sort_by_key(|b| (held(b), b.delivered));
        let mut rows: Vec<(u64, Vec<&Bar>)> = Vec::new();
        for b in bars {
            // A message still held at the end occupies its row to the end of the picture; a
            // delivery never started is a tick at its delivery.
            let end_b = match (b.started, b.finished) {
                (None, _) => b.delivered,
                (Some(st), f) => f.unwrap_or(u64::MAX).max(st),
            };
            // Bars touch when one ends at the instant the next starts: no overlap.
            match rows.iter_mut().find(|(free, _)| *free <= held(b)) {
                Some((free, row)) => {
                    *free = end_b;
                    row.push(b);
                }
                None => rows.push((end_b, vec![b])),
            }
        }
        lanes.push(Lane {
            key: k,
            rows: if rows.is_empty() {
                vec![Vec::new()]
            } else {
                rows.into_iter().map(|(_, r)| r).collect()
            },
        });
    }
    let lanes_h: u32 = lanes
        .iter()
        .map(|l| l.rows.len() as u32 * (bar_h + 2) + gap)
        .sum();
    let axis_y = top + lanes_h + 6;
    let legend_y = axis_y + 40;
    let height = legend_y + 20 * (p.consumers.len() as u32).div_ceil(6).max(1) + 4;
    let total_w = left + width + right;

    let colour = |c: &str| -> &str {
        let i = p.consumers.iter().position(|n| n == c).unwrap_or(0);
        PALETTE[i % PALETTE.len()]
    };
    let bad_positions: Vec<&str> = violations
        .iter()
        .flat_map(|v| v.positions.iter().map(String::as_str))
        .collect();

    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<?xml version="1.0" encoding="UTF-8"?>
<svg xmlns="http://www.w3.org/2000/svg" width="{total_w}" height="{height}" viewBox="0 0 {total_w} {height}" font-family="sans-serif" font-size="11">"#
    );
    let _ = writeln!(
        s,
        r##"<rect x="0" y="0" width="{total_w}" height="{height}" fill="#ffffff"/>"##
    );
    let _ = writeln!(
        s,
        r#"<text x="10" y="20" font-size="14" font-weight="bold">{}</text>"#,
        xml_escape(title)
    );
    let shown = if keys.len() < total_keys {
        format!(
            "{} of {total_keys} keys (the busiest, and any key of a violation)",
            keys.len()
        )
    } else {
        format!("{total_keys} key(s)")
    };
    let verdict = if violations.is_empty() {
        "no violation".to_string()
    } else {
        format!("{} violation(s)", violations.len())
    };
    let _ = writeln!(
        s,
        r#"<text x="10" y="38">{}; {} message bars; simulated time 0–{end} ms; {}.</text>"#,
        xml_escape(&shown),
        p.bars.len(),
        xml_escape(&verdict)
    );
    s.push_str(
        r#"<text x="10" y="53">Bars coloured by consumer: thin = delivered, waiting in the client; solid = held by the application until its ack (hatched end: nack; faded: lost in a crash or restart). Stacked: a key held twice at once.</text>
"#,
    );
    s.push_str(
        r##"<defs><pattern id="nack" width="4" height="4" patternUnits="userSpaceOnUse" patternTransform="rotate(45)"><rect width="2" height="4" fill="#000000" fill-opacity="0.45"/></pattern></defs>
"##,
    );

    // Lanes.
    let mut y = top;
    for (li, lane) in lanes.iter().enumerate() {
        let lane_h = lane.rows.len() as u32 * (bar_h + 2);
        let fill = if li % 2 == 0 { "#f4f4f4" } else { "#ffffff" };
        let _ = writeln!(
            s,
            r#"<rect x="{left}" y="{}" width="{width}" height="{}" fill="{fill}"/>"#,
            y - gap / 2,
            lane_h + gap
        );
        let label = if lane.key == "-" {
            "(keyless)".to_string()
        } else {
            format!("key {}", lane.key)
        };
        let bad = bad_keys.contains(&lane.key);
        let _ = writeln!(
            s,
            r##"<text x="{}" y="{}" text-anchor="end" fill="{}"{}>{}</text>"##,
            left - 8,
            y + lane_h / 2 + 4,
            if bad { "#d62728" } else { "#000000" },
            if bad { r#" font-weight="bold""# } else { "" },
            xml_escape(&label)
        );
        // First the thin waiting parts, then the bars over them.
        for (ri, row) in lane.rows.iter().enumerate() {
            let by = y + ri as u32 * (bar_h + 2);
            for b in row {
                let (x0, xs) = (x(b.delivered), x(b.started.unwrap_or(b.delivered)));
                if xs > x0 || b.started.is_none() {
                    let _ = writeln!(
                        s,
                        r#"<rect class="wait" x="{x0:.1}" y="{}" width="{:.1}" height="4" fill="{}" fill-opacity="0.6"/>"#,
                        by + bar_h / 2 - 2,
                        (xs - x0).max(2.0),
                        colour(&b.consumer)
                    );
                }
            }
        }
        for (ri, row) in lane.rows.iter().enumerate() {
            let by = y + ri as u32 * (bar_h + 2);
            for b in row {
                let c = colour(&b.consumer);
                let x0 = x(b.delivered);
                let xs = x(b.started.unwrap_or(b.delivered));
                let fin = b.finished.unwrap_or(end);
                let x1 = x(fin).max(xs + 2.0);
                let opacity = if b.abandoned { "0.35" } else { "1" };
                let mut tip = format!(
                    "{} {} key={}: delivered t={}",
                    b.consumer, b.msg, lane.key, b.delivered
                );
                match b.started {
                    Some(st) => {
                        let _ = write!(tip, ", started t={st}");
                    }
                    None => tip.push_str(", never started"),
                }
                match (b.finished, b.abandoned, b.nacked) {
                    (Some(f), true, _) => {
                        let _ = write!(tip, ", lost at t={f}");
                    }
                    (Some(f), false, true) => {
                        let _ = write!(tip, ", nacked t={f}");
                    }
                    (Some(f), false, false) => {
                        let _ = write!(tip, ", acked t={f}");
                    }
                    (None, ..) => tip.push_str(", still held at the end"),
                }
                let is_bad = bad_positions.contains(&b.msg.as_str())
                    || (bad_positions.contains(&entry_of(&b.msg)) && bad_keys.contains(&lane.key));
                let _ = writeln!(
                    s,
                    r#"<g class="{}" opacity="{opacity}"><title>{}</title>"#,
                    if is_bad { "bar violation" } else { "bar" },
                    xml_escape(&tip)
                );
                if b.started.is_some() {
                    let _ = writeln!(
                        s,
                        r#"<rect x="{xs:.1}" y="{by}" width="{:.1}" height="{bar_h}" fill="{c}"/>"#,
                        x1 - xs
                    );
                    if b.nacked {
                        let _ = writeln!(
                            s,
                            r#"<rect x="{:.1}" y="{by}" width="{:.1}" height="{bar_h}" fill="url(#nack)"/>"#,
                            (x1 - 6.0).max(xs),
                            (x1 - xs).min(6.0)
                        );
                    }
                    if x1 - xs > 8.0 * b.msg.len() as f64 {
                        let _ = writeln!(
                            s,
                            r##"<text x="{:.1}" y="{}" fill="#ffffff" font-size="10">{}</text>"##,
                            xs + 3.0,
                            by + bar_h - 3,
                            xml_escape(&b.msg)
                        );
                    }
                }
                if is_bad {
                    let _ = writeln!(
                        s,
                        r##"<rect x="{:.1}" y="{}" width="{:.1}" height="{}" fill="none" stroke="#d62728" stroke-width="2.5"/>"##,
                        x0 - 1.5,
                        by - 1,
                        x1 - x0 + 3.0,
                        bar_h + 2
                    );
                }
                s.push_str("</g>\n");
            }
        }
        y += lane_h + gap;
    }

    // Time axis.
    let _ = writeln!(
        s,
        r##"<line x1="{left}" y1="{axis_y}" x2="{}" y2="{axis_y}" stroke="#000000"/>"##,
        left + width
    );
    let step = tick_step(end, 10);
    let mut t = 0;
    while t <= end {
        let tx = x(t);
        let _ = writeln!(
            s,
            r##"<line x1="{tx:.1}" y1="{axis_y}" x2="{tx:.1}" y2="{}" stroke="#000000"/><text x="{tx:.1}" y="{}" text-anchor="middle">{t}</text>"##,
            axis_y + 4,
            axis_y + 16
        );
        t += step;
    }
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}" text-anchor="end">simulated ms</text>"#,
        left + width,
        axis_y + 30
    );

    // Markers: a dashed line over every lane, the label above (staggered so neighbours stay
    // legible).
    for (i, m) in p.markers.iter().enumerate() {
        let mx = x(m.at);
        let colour = match m.kind {
            "crash" => "#b00000",
            "restart" => "#6a0dad",
            "admin" => "#e6a100",
            "leave" => "#555555",
            _ => "#2a7a2a",
        };
        let ly = top - 20 + (i % 2) as u32 * 10;
        let _ = writeln!(
            s,
            r#"<g class="marker {}"><title>t={} {}</title><line x1="{mx:.1}" y1="{}" x2="{mx:.1}" y2="{axis_y}" stroke="{colour}" stroke-dasharray="4 3"/><text x="{:.1}" y="{ly}" fill="{colour}" font-size="10">{}</text></g>"#,
            m.kind,
            m.at,
            xml_escape(&m.label),
            ly + 2,
            mx + 2.0,
            xml_escape(&m.label)
        );
    }
    for v in violations {
        let vx = x(v.at.min(end));
        // The label left of the line when the line is in the right half.
        let (lx, anchor) = if vx > f64::from(left + width / 2) {
            (vx - 4.0, "end")
        } else {
            (vx + 4.0, "start")
        };
        let _ = writeln!(
            s,
            r##"<g class="violation"><title>{}</title><line x1="{vx:.1}" y1="{}" x2="{vx:.1}" y2="{axis_y}" stroke="#d62728" stroke-width="2"/><text x="{lx:.1}" y="{}" text-anchor="{anchor}" fill="#d62728" font-weight="bold">{} violation at t={} ms{}</text></g>"##,
            xml_escape(&v.to_string()),
            top - 38,
            top - 40,
            xml_escape(v.kind.as_str()),
            v.at,
            v.key
                .as_deref()
                .map(|k| format!(" (key {})", xml_escape(k)))
                .unwrap_or_default()
        );
    }

    // Legend: consumers.
    let _ = writeln!(
        s,
        r#"<text x="10" y="{}" font-weight="bold">consumers</text>"#,
        legend_y
    );
    for (i, c) in p.consumers.iter().enumerate() {
        let lx = left + (i as u32 % 6) * 150;
        let ly = legend_y + (i as u32 / 6) * 20 - 10;
        let _ = writeln!(
            s,
            r#"<rect x="{lx}" y="{ly}" width="14" height="12" fill="{}"/><text x="{}" y="{}">{}</text>"#,
            colour(c),
            lx + 18,
            ly + 10,
            xml_escape(c)
        );
    }
    s.push_str("</svg>\n");
    s
}

/// A small well-formedness check of an SVG (or any XML) document: every tag closes in order,
/// attributes are quoted, `&` starts a known entity. Returns where it first goes wrong.
pub fn check_well_formed(doc: &str) -> Result<(), String> {
    let mut stack: Vec<String> = Vec::new();
    let b = doc.as_bytes();
    let mut i = 0;
    let mut roots = 0;
    while i < b.len() {
        match b[i] {
            b'<' => {
                let close = doc[i..]
                    .find('>')
                    .map(|j| i + j)
                    .ok_or_else(|| format!("byte {i}: `<` without `>`"))?;
                let tag = &doc[i + 1..close];
                if tag.starts_with('?') || tag.starts_with('!') {
                    // Declaration or comment.
                } else if let Some(name) = tag.strip_prefix('/') {
                    let open = stack
                        .pop()
                        .ok_or_else(|| format!("byte {i}: `</{name}>` closes nothing"))?;
                    if open != name.trim() {
                        return Err(format!("byte {i}: `</{name}>` closes `<{open}>`"));
                    }
                } else {
                    let self_closing = tag.ends_with('/');
                    let body = tag.trim_end_matches('/');
                    let name = body.split_whitespace().next().unwrap_or("");
                    if name.is_empty() {
                        return Err(format!("byte {i}: a tag without a name"));
                    }
                    check_attributes(&body[name.len()..]).map_err(|e| format!("byte {i}: {e}"))?;
                    if stack.is_empty() {
                        roots += 1;
                    }
                    if !self_closing {
                        stack.push(name.to_string());
                    }
                }
                i = close + 1;
            }
            b'&' => {
                let end = doc[i..]
                    .find(';')
                    .map(|j| i + j)
                    .ok_or_else(|| format!("byte {i}: `&` without `;`"))?;
                let ent = &doc[i + 1..end];
                let known =
                    matches!(ent, "amp" | "lt" | "gt" | "quot" | "apos") || ent.starts_with('#');
                if !known {
                    return Err(format!("byte {i}: unknown entity `&{ent};`"));
                }
                i = end + 1;
            }
            b'>' => return Err(format!("byte {i}: a stray `>`")),
            _ => i += 1,
        }
    }
    if let Some(open) = stack.pop() {
        return Err(format!("`<{open}>` is never closed"));
    }
    if roots != 1 {
        return Err(format!("{roots} root elements, not one"));
    }
    Ok(())
}

fn check_attributes(mut a: &str) -> Result<(), String> {
    loop {
        a = a.trim_start();
        if a.is_empty() {
            return Ok(());
        }
        let eq = a
            .find('=')
            .ok_or_else(|| format!("attribute `{a}` has no value"))?;
        let name = a[..eq].trim();
        if name.is_empty() || name.contains(char::is_whitespace) {
            return Err(format!("bad attribute name `{name}`"));
        }
        let rest = &a[eq + 1..];
        let q = rest
            .chars()
            .next()
            .filter(|c| *c == '"' || *c == '\'')
            .ok_or_else(|| format!("attribute `{name}` is not quoted"))?;
        let end = rest[1..]
            .find(q)
            .ok_or_else(|| format!("attribute `{name}` is not closed"))?;
        let value = &rest[1..1 + end];
        if value.contains('<') {
            return Err(format!("attribute `{name}` holds a `<`"));
        }
        a = &rest[end + 2..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markup() {
        assert_eq!(xml_escape(r#"a<b>&"c'"#), "a&lt;b&gt;&amp;&quot;c&apos;");
    }

    #[test]
    fn the_checker_finds_broken_documents() {
        assert!(
            check_well_formed(r#"<svg a="1"><g><rect/></g><text>x &amp; y</text></svg>"#).is_ok()
        );
        assert!(check_well_formed("<svg><g></svg>").is_err());
        assert!(check_well_formed("<svg>a & b</svg>").is_err());
        assert!(check_well_formed("<svg a=1></svg>").is_err());
        assert!(check_well_formed("<svg></svg><svg></svg>").is_err());
        assert!(check_well_formed("<svg>").is_err());
    }

    #[test]
    fn ticks_are_round() {
        assert_eq!(tick_step(520, 10), 100);
        assert_eq!(tick_step(10_000, 10), 1000);
        assert_eq!(tick_step(3, 10), 1);
    }

    #[test]
    fn a_log_becomes_bars_and_markers() {
        let mut p = Parsed::default();
        for l in [
            "t=0 join c1 queue=20 proc=1-10 nack=0 manual=true",
            "t=1 publish 1:0 key=K",
            "t=2 send c1: 1:0(K)",
            "t=4 app c1 starts 1:0 key=K redelivery=0",
            "t=10 join c2 queue=20 proc=1-10 nack=0 manual=false",
            "t=20 admin skip 1",
            "t=500 app c1 acks 1:0",
        ] {
            p.line(l);
        }
        assert_eq!(p.bars.len(), 1);
        let b = &p.bars[0];
        assert_eq!(
            (b.delivered, b.started, b.finished),
            (2, Some(4), Some(500))
        );
        assert_eq!(p.markers.len(), 2);
        assert_eq!(p.consumers, vec!["c1".to_string(), "c2".to_string()]);
        let svg = render(&p, "t & <title>", &[], &TimelineOptions::default());
        check_well_formed(&svg).unwrap();
        assert!(svg.contains("t &amp; &lt;title&gt;"));
    }
}
