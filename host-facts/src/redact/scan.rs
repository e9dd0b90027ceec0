//! The text scanners of [`super`]: each finds one form of secret inside an argument or a value
//! and replaces it with [`REDACTED`], reading what to look for from [`RULES`]. They walk text by
//! characters and slices only, so any input gives an answer without panicking.

use super::rules::{is_name, is_name_char, is_secret_name, Form, REDACTED, RULES};

/// `Name: ` / `Name=` when `text` starts with a secret name: the part to keep.
pub(super) fn leading_key(text: &str) -> Option<&str> {
    let body = text.trim_start();
    let name_len = body.find(|c: char| !is_name_char(c)).unwrap_or(body.len());
    let name = &body[..name_len];
    let rest = &body[name_len..];
    let after_space = rest.trim_start_matches([' ', '\t']);
    let sep = after_space.chars().next()?;
    if !matches!(sep, ':' | '=') || !is_name(name) || !is_secret_name(name) {
        return None;
    }
    let value_start = after_space[1..].len() - after_space[1..].trim_start().len();
    let keep = text.len() - after_space.len() + 1 + value_start;
    Some(&text[..keep])
}

/// Where a URL ends: at whitespace or a quote.
fn is_url_end(c: char) -> bool {
    c.is_whitespace() || matches!(c, '"' | '\'' | '<' | '>')
}

/// The index of the `@` that ends the user info of `url` (the text after `://`), if it has
/// one. A password may hold an `@` (`u:se@cret@host`) and a path may too (`host/pkg@1.0`): the
/// last `@` with no `/` before it wins, else the last one whose text still reads as user info.
fn userinfo_end(url: &str) -> Option<usize> {
    let mut before_any_slash = None;
    let mut any = None;
    for (at, _) in url.match_indices('@') {
        if !is_userinfo(&url[..at]) {
            continue;
        }
        if !url[..at].contains('/') {
            before_any_slash = Some(at);
        }
        any = Some(at);
    }
    before_any_slash.or(any)
}

/// Every `scheme://userinfo@` in `text` with the password (or a lone user name) redacted.
pub(super) fn redact_url_userinfo(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("://") {
        let (head, tail) = rest.split_at(at + 3);
        out.push_str(head);
        let url_end = tail.find(is_url_end).unwrap_or(tail.len());
        let url = &tail[..url_end];
        let consumed = match userinfo_end(url) {
            Some(a) => {
                match url[..a].find(':') {
                    Some(colon) => {
                        out.push_str(&url[..=colon]);
                        out.push_str(REDACTED);
                    }
                    None => out.push_str(REDACTED),
                }
                a
            }
            None => 0,
        };
        rest = &tail[consumed..];
    }
    out.push_str(rest);
    out
}

/// Whether the text between `://` and an `@` is user info rather than a host and a
/// path that happens to hold an `@` (`https://host/a@b`). A password may contain `/`: then a
/// `:` before the first `/` followed by anything but a port number still marks user info.
fn is_userinfo(info: &str) -> bool {
    if info.is_empty() || info.contains(['?', '#']) {
        return false;
    }
    let Some(slash) = info.find('/') else {
        return true;
    };
    match info[..slash].split_once(':') {
        Some((_, after)) => !after.chars().all(|c| c.is_ascii_digit()),
        None => false,
    }
}

/// Every URL whose host and path a [`Form::SecretUrlPath`] rule names, with the path after
/// the rule's prefix redacted (`https://hooks.slack.com/<redacted>`).
pub(super) fn redact_secret_url_paths(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("://") {
        let (head, tail) = rest.split_at(at + 3);
        out.push_str(head);
        let url = &tail[..tail.find(is_url_end).unwrap_or(tail.len())];
        let host_at = userinfo_end(url).map_or(0, |a| a + 1);
        let authority_end = url[host_at..]
            .find(['/', '?', '#'])
            .map_or(url.len(), |e| host_at + e);
        let host = url[host_at..authority_end]
            .split(':')
            .next()
            .unwrap_or_default();
        let path = &url[authority_end..];
        match secret_path_prefix(host, path) {
            Some(prefix) => {
                out.push_str(&url[..authority_end + prefix.len()]);
                out.push_str(REDACTED);
                rest = &tail[url.len()..];
            }
            None => rest = tail,
        }
    }
    out.push_str(rest);
    out
}

/// The path prefix of the rule naming this host (or a domain above it) and path.
fn secret_path_prefix(host: &str, path: &str) -> Option<&'static str> {
    let host = host.to_ascii_lowercase();
    RULES.iter().find_map(|r| match r.form {
        Form::SecretUrlPath {
            host: h,
            path_prefix,
        } if (host == h || host.strip_suffix(h).is_some_and(|sub| sub.ends_with('.')))
            && path.len() > path_prefix.len()
            && path.starts_with(path_prefix) =>
        {
            Some(path_prefix)
        }
        _ => None,
    })
}

/// Every bare token a [`Form::TokenPrefix`] rule announces, not inside a longer word, replaced
/// whole.
pub(super) fn redact_tokens(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut prev: Option<char> = None;
    let mut i = 0;
    while let Some(c) = text[i..].chars().next() {
        let word_start =
            prev.is_none_or(|p| !(p.is_ascii_alphanumeric() || matches!(p, '_' | '-')));
        if let Some(len) = word_start.then(|| token_len(&text[i..])).flatten() {
            out.push_str(REDACTED);
            prev = text[i..i + len].chars().last();
            i += len;
            continue;
        }
        out.push(c);
        prev = Some(c);
        i += c.len_utf8();
    }
    out
}

/// The length of the token `s` starts with, when a rule announces one that long.
fn token_len(s: &str) -> Option<usize> {
    RULES.iter().find_map(|r| match r.form {
        Form::TokenPrefix {
            prefix,
            min_body,
            body,
        } => {
            let after = s.strip_prefix(prefix)?;
            let n = after.find(|c| !body.admits(c)).unwrap_or(after.len());
            (n >= min_body).then_some(prefix.len() + n)
        }
        _ => None,
    })
}

/// `user:password@host` without a scheme in every word of `text` (words end at whitespace and
/// quotes; URLs are [`redact_url_userinfo`]'s), with the password redacted.
pub(super) fn redact_schemeless_userinfo(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut start = 0;
    for (i, c) in text.char_indices() {
        if c.is_whitespace() || matches!(c, '"' | '\'') {
            out.push_str(&redact_word_userinfo(&text[start..i]));
            out.push(c);
            start = i + c.len_utf8();
        }
    }
    out.push_str(&redact_word_userinfo(&text[start..]));
    out
}

/// In one word: `user:password@host` at its start or after `=`, `,` or `;`.
fn redact_word_userinfo(word: &str) -> String {
    if word.contains("://") || !word.contains('@') {
        return word.to_owned();
    }
    let mut out = String::with_capacity(word.len());
    let mut copied = 0;
    let mut start = 0;
    loop {
        if let Some((pw_start, pw_end)) = schemeless_password(&word[start..]) {
            out.push_str(&word[copied..start + pw_start]);
            out.push_str(REDACTED);
            copied = start + pw_end;
            start = copied;
        }
        match word[start..].find(['=', ',', ';']) {
            Some(k) => start += k + 1,
            None => break,
        }
    }
    out.push_str(&word[copied..]);
    out
}

/// Where the password of `user:password@host[:port]` at the start of `s` lies (its start and
/// the index of the `@` after it). The password runs to the last `@` (it may hold one); the
/// host must end the text or be followed by a port, `/`, `,` or `;`: `image:tag@sha256:ab12`
/// is not user info.
fn schemeless_password(s: &str) -> Option<(usize, usize)> {
    let user_len = s.find(|c: char| !is_name_char(c)).unwrap_or(s.len());
    if user_len == 0 || !s[user_len..].starts_with(':') {
        return None;
    }
    let pw_start = user_len + 1;
    let at = s.rfind('@').filter(|&a| a > pw_start)?;
    let host = &s[at + 1..];
    let host_len = host
        .find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '-')))
        .unwrap_or(host.len());
    let after = &host[host_len..];
    let ends_here = |t: &str| t.is_empty() || t.starts_with(['/', ',', ';']);
    let ends_well = match after.strip_prefix(':') {
        Some(port) => {
            let digits = port
                .find(|c: char| !c.is_ascii_digit())
                .unwrap_or(port.len());
            digits > 0 && ends_here(&port[digits..])
        }
        None => ends_here(after),
    };
    (host_len > 0 && ends_well).then_some((pw_start, at))
}

/// A quoted string starting at `s[0]` (`"` or `'`): its length including the quotes
/// (backslash escapes honoured; an unterminated one runs to the end).
fn quoted_len(s: &str) -> usize {
    let mut chars = s.char_indices();
    let Some((_, q)) = chars.next() else {
        return 0;
    };
    let mut escaped = false;
    for (i, c) in chars {
        if escaped {
            escaped = false;
        } else if c == '\\' {
            escaped = true;
        } else if c == q {
            return i + 1;
        }
    }
    s.len()
}

/// Where a bare value ends.
fn is_value_end(c: char) -> bool {
    c.is_whitespace() || matches!(c, ',' | ';' | '&' | '}' | ']' | ')' | '"' | '\'')
}

/// `key=value`, `"key": "value"` and friends inside `text`, with secret keys' values redacted.
pub(super) fn redact_embedded_keys(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < text.len() {
        let rest = &text[i..];
        let first = rest.chars().next().unwrap_or(' ');
        let (key, key_len, quoted) = if matches!(first, '"' | '\'') {
            let n = quoted_len(rest);
            (rest[1..n.max(1)].trim_end_matches(first), n, true)
        } else if is_name_char(first) {
            let n = rest.find(|c: char| !is_name_char(c)).unwrap_or(rest.len());
            (&rest[..n], n, false)
        } else {
            out.push(first);
            i += first.len_utf8();
            continue;
        };
        out.push_str(&rest[..key_len]);
        i += key_len;
        let after = &text[i..];
        let gap = after.len() - after.trim_start_matches([' ', '\t']).len();
        let sep = after[gap..].chars().next();
        // A bare `key:` is a separator only when a space follows (YAML, headers): `host:port`
        // and `/lib/keyutils:/usr/lib` are not key-value pairs.
        let is_pair = match sep {
            Some('=') => true,
            Some(':') => quoted || after[gap + 1..].starts_with([' ', '\t']),
            _ => false,
        };
        if !is_pair || !is_secret_name(key) {
            continue;
        }
        let value_at = gap + 1;
        let value_text = &after[value_at..];
        let lead = value_text.len() - value_text.trim_start_matches([' ', '\t']).len();
        out.push_str(&after[..value_at + lead]);
        i += value_at + lead;
        let value = &text[i..];
        match value.chars().next() {
            Some(q @ ('"' | '\'')) => {
                let n = quoted_len(value);
                out.push(q);
                out.push_str(REDACTED);
                if n >= 2 && value[..n].ends_with(q) {
                    out.push(q);
                }
                i += n;
            }
            Some(c) if !is_value_end(c) && c != '{' && c != '[' => {
                out.push_str(REDACTED);
                i += value.find(is_value_end).unwrap_or(value.len());
            }
            _ => {}
        }
    }
    out
}

/// `Bearer X`, `Basic X` (any case) with the credential redacted.
pub(super) fn redact_auth_schemes(text: &str) -> String {
    let mut out = text.to_owned();
    for r in RULES {
        let Form::AuthScheme(scheme) = r.form else {
            continue;
        };
        let mut from = 0;
        loop {
            let lower = out.to_ascii_lowercase();
            let Some(pos) = lower[from..]
                .find(&scheme.to_ascii_lowercase())
                .map(|p| p + from)
            else {
                break;
            };
            let word_start =
                pos == 0 || !lower[..pos].ends_with(|c: char| c.is_ascii_alphanumeric());
            let after = pos + scheme.len();
            let gap = out[after..].len() - out[after..].trim_start_matches([' ', '\t']).len();
            let cred_at = after + gap;
            let cred_len = out[cred_at..]
                .find(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | ',' | ';'))
                .unwrap_or(out.len() - cred_at);
            if word_start
                && gap > 0
                && cred_len > 0
                && &out[cred_at..cred_at + cred_len] != REDACTED
            {
                out.replace_range(cred_at..cred_at + cred_len, REDACTED);
                from = cred_at + REDACTED.len();
            } else {
                from = after;
            }
        }
    }
    out
}
