//! The Prometheus text exposition format, version 0.0.4, as `/metrics` serves it: per metric
//! family one `# HELP` and one `# TYPE` line, then its samples `name{label="value",...} value`.
//!
//! Only what the exporter writes is here (gauges and counters, no histograms, no timestamps):
//! the format's escaping rules are the part that must be right, since label values come from
//! the dumps (host names, run ids a launcher chose) and one stray quote or newline would make
//! Prometheus reject the whole scrape.

use std::fmt::Write as _;

/// The `Content-Type` of the format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// How Prometheus treats a family's samples.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Gauge,
    Counter,
}

/// One metric family: its name, help text, kind and samples (label pairs, value).
#[derive(Debug, Clone)]
pub struct Family {
    pub name: &'static str,
    pub help: &'static str,
    pub kind: Kind,
    pub samples: Vec<(Vec<(&'static str, String)>, f64)>,
}

impl Family {
    pub fn new(name: &'static str, kind: Kind, help: &'static str) -> Self {
        Self {
            name,
            help,
            kind,
            samples: Vec::new(),
        }
    }

    pub fn push(&mut self, labels: Vec<(&'static str, String)>, value: f64) {
        self.samples.push((labels, value));
    }
}

/// A label value as the format wants it: backslash, double quote and newline escaped.
pub fn escape_label_value(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// A HELP text: backslash and newline escaped (quotes are fine there).
fn escape_help(v: &str) -> String {
    v.replace('\\', "\\\\").replace('\n', "\\n")
}

/// A sample value: the format spells the non-finite ones `NaN`, `+Inf`, `-Inf`.
fn value_text(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.into()
    } else {
        // Rust's shortest round-trip form: `3`, `0.25`, `1e21`; all valid Go ParseFloat input.
        format!("{v}")
    }
}

/// Every family in order; a family without samples still says its HELP and TYPE, so a
/// dashboard sees the metric exists before the first failure or stall gives it a sample.
pub fn render(families: &[Family]) -> String {
    let mut out = String::new();
    for f in families {
        let kind = match f.kind {
            Kind::Gauge => "gauge",
            Kind::Counter => "counter",
        };
        let _ = writeln!(out, "# HELP {} {}", f.name, escape_help(f.help));
        let _ = writeln!(out, "# TYPE {} {kind}", f.name);
        for (labels, value) in &f.samples {
            out.push_str(f.name);
            if !labels.is_empty() {
                out.push('{');
                for (i, (k, v)) in labels.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    let _ = write!(out, "{k}=\"{}\"", escape_label_value(v));
                }
                out.push('}');
            }
            let _ = writeln!(out, " {}", value_text(*value));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_escape_backslash_quote_and_newline() {
        assert_eq!(escape_label_value("plain-host_1.x"), "plain-host_1.x");
        assert_eq!(escape_label_value(r#"a"b"#), r#"a\"b"#);
        assert_eq!(escape_label_value(r"C:\dir"), r"C:\\dir");
        assert_eq!(escape_label_value("two\nlines"), r"two\nlines");
        // Other characters, tabs and UTF-8 included, are valid as they are.
        assert_eq!(escape_label_value("tab\there é"), "tab\there é");
    }

    #[test]
    fn a_family_renders_help_type_and_samples() {
        let mut f = Family::new("ncclshim_x_total", Kind::Counter, "Things.\nMore \\ text");
        f.push(vec![("job", "j\"1".into()), ("rank", "0".into())], 3.0);
        f.push(vec![], 0.5);
        let empty = Family::new("ncclshim_y", Kind::Gauge, "Nothing yet.");
        assert_eq!(
            render(&[f, empty]),
            "# HELP ncclshim_x_total Things.\\nMore \\\\ text\n\
             # TYPE ncclshim_x_total counter\n\
             ncclshim_x_total{job=\"j\\\"1\",rank=\"0\"} 3\n\
             ncclshim_x_total 0.5\n\
             # HELP ncclshim_y Nothing yet.\n\
             # TYPE ncclshim_y gauge\n"
        );
    }

    #[test]
    fn non_finite_values_are_spelled_as_the_format_wants() {
        assert_eq!(value_text(f64::NAN), "NaN");
        assert_eq!(value_text(f64::INFINITY), "+Inf");
        assert_eq!(value_text(f64::NEG_INFINITY), "-Inf");
        assert_eq!(value_text(1e21), "1000000000000000000000");
    }
}
