//! Making recorded text safe to print on a terminal.
//!
//! Dumps carry strings the job controlled: environment values (`NCCL_SOCKET_IFNAME`), run ids,
//! thread names, command lines, NCCL's error texts, file names. Printed raw, an ESC or BEL in
//! one of them drives the reader's terminal (set its title, move the cursor, hide lines: OSC
//! and CSI sequences), and a newline or carriage return forges report lines. Every text
//! renderer (the report, `--list-runs`, `doctor`, `run`'s messages) passes each recorded value
//! through [`escape_controls`]; JSON output keeps the exact bytes (serde escapes controls).

use std::borrow::Cow;
use std::fmt::Write as _;

/// Whether `c` must not reach a terminal as itself: C0 controls (newline and tab included: a
/// value is one line), DEL, C1 controls (U+0080..U+009F, which some terminals read as CSI or
/// OSC), and the bidirectional overrides and isolates that reorder what is shown.
fn is_unsafe(c: char) -> bool {
    c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// `s` with every unsafe character written as a visible escape (`\e`, `\a`, `\n`, `\r`, `\t`,
/// `\x7f`, `\u{9b}`); borrowed unchanged when there is none (the common case).
pub fn escape_controls(s: &str) -> Cow<'_, str> {
    if !s.chars().any(is_unsafe) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '\x1b' => out.push_str("\\e"),
            '\x07' => out.push_str("\\a"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if is_unsafe(c) && (c as u32) < 0x80 => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c if is_unsafe(c) => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// The styles of the text report (ANSI SGR sequences, ECMA-48 8.3.117), each closing what it
/// opened: bold and dim end with a full reset, colours with "default foreground". The same bytes
/// the `owo-colors` crate writes for these styles; the library keeps terminal crates out of its
/// dependencies (the CLI's `doctor` uses that crate).
pub trait Styles {
    fn bold(&self) -> String;
    fn dimmed(&self) -> String;
    fn red(&self) -> String;
    fn yellow(&self) -> String;
}

impl Styles for str {
    fn bold(&self) -> String {
        format!("\x1b[1m{self}\x1b[0m")
    }
    fn dimmed(&self) -> String {
        format!("\x1b[2m{self}\x1b[0m")
    }
    fn red(&self) -> String {
        format!("\x1b[31m{self}\x1b[39m")
    }
    fn yellow(&self) -> String {
        format!("\x1b[33m{self}\x1b[39m")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controls_become_visible_escapes_and_plain_text_is_untouched() {
        assert!(matches!(escape_controls("eth0"), Cow::Borrowed("eth0")));
        assert_eq!(escape_controls("héllo wörld"), "héllo wörld");
        assert_eq!(escape_controls("eth\x1b]0;PWNED\x07"), "eth\\e]0;PWNED\\a");
        assert_eq!(
            escape_controls("run\nfirst failure: x\r"),
            "run\\nfirst failure: x\\r"
        );
        assert_eq!(escape_controls("a\x00b\x7f"), "a\\x00b\\x7f");
        assert_eq!(escape_controls("\u{9b}2J"), "\\u{9b}2J");
        assert_eq!(escape_controls("abc\u{202e}fed"), "abc\\u{202e}fed");
    }

    #[test]
    fn styles_wrap_the_text_in_sgr_sequences_that_close_themselves() {
        assert_eq!("x".bold(), "\x1b[1mx\x1b[0m");
        assert_eq!("x".dimmed(), "\x1b[2mx\x1b[0m");
        assert_eq!("x".red().bold(), "\x1b[1m\x1b[31mx\x1b[39m\x1b[0m");
        assert_eq!("x".yellow(), "\x1b[33mx\x1b[39m");
    }
}
