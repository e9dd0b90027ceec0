//! One redaction table for everything the recorder copies out of a process that may hold a
//! secret: environment values ([`crate::env`]) and the command line ([`crate::process`]).
//!
//! [`RULES`] is data: each entry says which form of secret it catches and why it is there. The
//! environment and the command line read the same table, so a name that is secret as a variable
//! (`HF_TOKEN`) is secret as an option (`--hf-token X`), as a `KEY=VALUE` argument and as a key
//! in a JSON or dict-like argument (`--config={"hf_token": "X"}`). A redacted value becomes
//! [`REDACTED`] as a whole, never a part of it. Over-redaction costs a report a detail; a leak
//! costs the user a credential, so every doubtful case is redacted.
//!
//! The scanners walk text by characters and slices only: any input (non-UTF-8 arrives already
//! replaced) gives an answer without panicking (`proptest` below).

/// What a redacted value reads as.
pub const REDACTED: &str = "<redacted>";

/// One form of secret.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    /// A name containing this fragment is secret. Names are variable names, option names
    /// (`--hf-token`), keys before `=` and JSON/dict keys, read upper-case with `-` and `.` as `_`.
    NameContains(&'static str),
    /// A name equal to this word or ending with `_` and it (`PASS`: `DB_PASS`, `--pass`, not
    /// `BYPASS`).
    NameEndsWithWord(&'static str),
    /// A fragment removed from a name before the checks above: it makes a name look secret
    /// without being one (`TOKENIZER`); a real marker elsewhere in the name still counts.
    InnocentFragment(&'static str),
    /// A whole name that is not secret although it contains a marker.
    InnocentName(&'static str),
    /// An option, spelled exactly, whose value (the next argument or `=value`) is secret.
    Option(&'static str),
    /// `scheme://user:password@host` (the password) and `scheme://token@host` (the user part).
    UrlUserinfo,
    /// `Name: value` or `Name=value` at the start of an argument or value, the name secret:
    /// the rest of the text (`-H "Authorization: Bearer X"`, `WANDB_API_KEY=X`).
    LeadingKey,
    /// `key=value`, `"key": "value"`, `'key': value`, `key: value` inside a text, the key
    /// secret: the value up to its closing quote or the next separator.
    EmbeddedKey,
    /// This HTTP authentication scheme followed by a credential, anywhere (`Bearer X`).
    AuthScheme(&'static str),
}

/// One entry of the table and why it is there.
#[derive(Debug, Clone, Copy)]
pub struct Rule {
    pub form: Form,
    pub why: &'static str,
}

const fn rule(form: Form, why: &'static str) -> Rule {
    Rule { form, why }
}

/// The redaction table (issue 22 items 8 and 9 list the forms seen leaking).
pub const RULES: &[Rule] = &[
    rule(
        Form::NameContains("TOKEN"),
        "HF_TOKEN, GITHUB_TOKEN, --hf-token: access tokens",
    ),
    rule(
        Form::NameContains("SECRET"),
        "AWS_SECRET_ACCESS_KEY, client secrets",
    ),
    rule(
        Form::NameContains("PASSWORD"),
        "passwords by their plain name",
    ),
    rule(
        Form::NameContains("PASSWD"),
        "the Unix spelling (--passwd, DB_PASSWD)",
    ),
    rule(
        Form::NameContains("KEY"),
        "API keys (WANDB_API_KEY, --api-key); also costs harmless names",
    ),
    rule(
        Form::NameContains("CREDENTIAL"),
        "GOOGLE_APPLICATION_CREDENTIALS and friends",
    ),
    rule(
        Form::NameContains("AUTH"),
        "Authorization headers, auth strings",
    ),
    rule(
        Form::NameContains("COOKIE"),
        "session cookies (Cookie: header)",
    ),
    rule(Form::NameContains("PRIVATE"), "private keys and URLs"),
    rule(
        Form::NameContains("SESSION"),
        "session ids that act as credentials",
    ),
    rule(Form::NameContains("SIGNATURE"), "signed-URL signatures"),
    rule(
        Form::NameContains("CERT"),
        "certificate material and its passphrases",
    ),
    rule(
        Form::NameEndsWithWord("PASS"),
        "DB_PASS, --pass X (issue 22: leaked before)",
    ),
    rule(
        Form::NameEndsWithWord("PWD"),
        "MYSQL_PWD, --pwd X, ODBC Pwd=X (issue 22)",
    ),
    rule(Form::NameEndsWithWord("PW"), "DB_PW, --pw X"),
    rule(
        Form::NameEndsWithWord("DSN"),
        "DATABASE_DSN: a connection string with its password (issue 22)",
    ),
    rule(
        Form::InnocentFragment("TOKENIZER"),
        "--tokenizer gpt2 names a model part, not a token",
    ),
    rule(
        Form::InnocentFragment("MAX_TOKENS"),
        "--max-tokens 512 is a length",
    ),
    rule(
        Form::InnocentFragment("NUM_TOKENS"),
        "--num-tokens is a count",
    ),
    rule(
        Form::InnocentName("NCCL_IB_PKEY"),
        "an InfiniBand partition key index, needed for diagnosis",
    ),
    rule(
        Form::Option("-p"),
        "mysql/psql-style -p PASSWORD (issue 22); costs the port of ssh -p 22",
    ),
    rule(
        Form::UrlUserinfo,
        "https://user:X@host and https://X@host (a token as user name; issue 22)",
    ),
    rule(
        Form::LeadingKey,
        "-H \"Authorization: Bearer X\", API_KEY=X arguments and values",
    ),
    rule(
        Form::EmbeddedKey,
        "--config={\"hf_token\":\"X\"}, ?token=X, Pwd=X; in connection strings",
    ),
    rule(
        Form::AuthScheme("Bearer"),
        "RFC 6750 bearer tokens under any header name",
    ),
    rule(Form::AuthScheme("Basic"), "RFC 7617 base64 user:password"),
];

/// `--hf-token` → `HF_TOKEN`.
fn normalized(name: &str) -> String {
    name.trim_start_matches('-')
        .to_ascii_uppercase()
        .replace(['-', '.'], "_")
}

/// Whether a variable, option or key name looks like it holds a secret.
pub fn is_secret_name(name: &str) -> bool {
    let mut n = normalized(name);
    if n.is_empty() {
        return false;
    }
    for r in RULES {
        match r.form {
            Form::InnocentName(x) if n == x => return false,
            Form::InnocentFragment(x) => n = n.replace(x, "_"),
            _ => {}
        }
    }
    RULES.iter().any(|r| match r.form {
        Form::NameContains(m) => n.contains(m),
        Form::NameEndsWithWord(w) => {
            n == w || (n.ends_with(w) && n[..n.len() - w.len()].ends_with('_'))
        }
        _ => false,
    })
}

/// Whether an option (`--password`, `-p`) takes a secret value.
fn is_secret_option(flag: &str) -> bool {
    RULES
        .iter()
        .any(|r| matches!(r.form, Form::Option(o) if o == flag))
        || (flag.starts_with('-') && is_name(flag) && is_secret_name(flag))
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.')
}

fn is_name(s: &str) -> bool {
    !s.trim_start_matches('-').is_empty() && s.chars().all(is_name_char)
}

/// An environment value: all of it when the name is secret, else its embedded secrets.
pub fn redact_env_value(name: &str, value: &str) -> String {
    if is_secret_name(name) {
        REDACTED.to_owned()
    } else {
        redact_text(value)
    }
}

/// The command line with secrets replaced by [`REDACTED`]:
/// - `--hf-token=X`, `--password X`, `-p X`: a secret option's value (the next argument, unless
///   it is itself a long option `--x`: a flag that only looks secret costs its neighbour, never a
///   secret);
/// - in every argument, argument 0 included, what [`redact_text`] finds.
pub fn redact_args(args: &[String]) -> Vec<String> {
    let mut out = Vec::with_capacity(args.len());
    let mut redact_next = false;
    for (i, arg) in args.iter().enumerate() {
        if std::mem::take(&mut redact_next) && !arg.starts_with("--") {
            out.push(REDACTED.to_owned());
            continue;
        }
        if i > 0 && arg.starts_with('-') {
            match arg.split_once('=') {
                Some((flag, _)) if is_secret_option(flag) => {
                    out.push(format!("{flag}={REDACTED}"));
                    continue;
                }
                None if is_secret_option(arg) => {
                    redact_next = true;
                    out.push(arg.clone());
                    continue;
                }
                _ => {}
            }
        }
        out.push(redact_text(arg));
    }
    out
}

/// Secrets inside one argument or value: URL user info, a leading secret key, embedded secret
/// keys and authentication schemes.
pub fn redact_text(text: &str) -> String {
    let text = redact_url_userinfo(text);
    if let Some(kept) = leading_key(&text) {
        return format!("{kept}{REDACTED}");
    }
    let text = redact_embedded_keys(&text);
    redact_auth_schemes(&text)
}

/// `Name: ` / `Name=` when `text` starts with a secret name: the part to keep.
fn leading_key(text: &str) -> Option<&str> {
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

/// Every `scheme://userinfo@` in `text` with the password (or a lone user name) redacted.
fn redact_url_userinfo(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("://") {
        let (head, tail) = rest.split_at(at + 3);
        out.push_str(head);
        // The URL ends at whitespace or a quote; its user info at the first '@'.
        let url_end = tail
            .find(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | '<' | '>'))
            .unwrap_or(tail.len());
        let url = &tail[..url_end];
        let consumed = match url.find('@').map(|a| (&url[..a], a)) {
            Some((info, a)) if is_userinfo(info) => {
                match info.find(':') {
                    Some(colon) => {
                        out.push_str(&info[..=colon]);
                        out.push_str(REDACTED);
                    }
                    None => out.push_str(REDACTED),
                }
                a
            }
            _ => 0,
        };
        rest = &tail[consumed..];
    }
    out.push_str(rest);
    out
}

/// Whether the text between `://` and the first `@` is user info rather than a host and a
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
fn redact_embedded_keys(text: &str) -> String {
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
fn redact_auth_schemes(text: &str) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Every secret form of issue 22 (and the older ones), as a whole command line:
    /// (argv, what is recorded).
    const ARGV_CASES: &[(&[&str], &[&str])] = &[
        (&["x", "-p", "hunter2"], &["x", "-p", "<redacted>"]),
        (&["x", "-p=hunter2"], &["x", "-p=<redacted>"]),
        (&["x", "--pass", "hunter2"], &["x", "--pass", "<redacted>"]),
        (&["x", "--pwd", "hunter2"], &["x", "--pwd", "<redacted>"]),
        (&["x", "--pw=hunter2"], &["x", "--pw=<redacted>"]),
        (
            &["x", "--password", "hunter2"],
            &["x", "--password", "<redacted>"],
        ),
        (
            &["x", "--db-pass", "hunter2"],
            &["x", "--db-pass", "<redacted>"],
        ),
        (
            &["x", "--dsn", "postgres://u:pw@h/db"],
            &["x", "--dsn", "<redacted>"],
        ),
        (&["x", "--token", "t0k"], &["x", "--token", "<redacted>"]),
        (&["x", "--api-key=k1"], &["x", "--api-key=<redacted>"]),
        (&["x", "--hf-token=hf_abc"], &["x", "--hf-token=<redacted>"]),
        (&["x", "-api-key=k1"], &["x", "-api-key=<redacted>"]),
        (
            &["curl", "-H", "Authorization: Bearer s3cr3t"],
            &["curl", "-H", "Authorization: <redacted>"],
        ),
        (
            &["curl", "-H", "authorization:Basic dXNlcjpwdw=="],
            &["curl", "-H", "authorization:<redacted>"],
        ),
        (
            &["curl", "--header=X-Api-Key: k3y"],
            &["curl", "--header=X-Api-Key: <redacted>"],
        ),
        (
            &["curl", "-H", "X-Custom: Bearer s3cr3t"],
            &["curl", "-H", "X-Custom: Bearer <redacted>"],
        ),
        (
            &["x", "--config={\"hf_token\":\"s3cr3t\",\"lr\":0.1}"],
            &["x", "--config={\"hf_token\":\"<redacted>\",\"lr\":0.1}"],
        ),
        (
            &["x", "--config", "{'api_key': 'k', 'password': 12345}"],
            &[
                "x",
                "--config",
                "{'api_key': '<redacted>', 'password': <redacted>}",
            ],
        ),
        (
            &["x", "--opts", "lr=0.1,hf_token=s3cr3t,bs=8"],
            &["x", "--opts", "lr=0.1,hf_token=<redacted>,bs=8"],
        ),
        (
            &["x", "Server=db;Uid=u;Pwd=s3cr3t;"],
            &["x", "Server=db;Uid=u;Pwd=<redacted>;"],
        ),
        (
            &["x", "https://h.org/f?token=s3cr3t&x=1"],
            &["x", "https://h.org/f?token=<redacted>&x=1"],
        ),
        (
            &["x", "https://s3cr3t@github.com/o/r"],
            &["x", "https://<redacted>@github.com/o/r"],
        ),
        (
            &["x", "--data", "s3://user:pw@bucket/path"],
            &["x", "--data", "s3://user:<redacted>@bucket/path"],
        ),
        (
            &["x", "https://user:pa/ss@host/p"],
            &["x", "https://user:<redacted>@host/p"],
        ),
        (
            &["x", "WANDB_API_KEY=w1"],
            &["x", "WANDB_API_KEY=<redacted>"],
        ),
        (&["https://u:pw@h/x"], &["https://u:<redacted>@h/x"]),
        // Kept: not secrets.
        (
            &["python3", "train.py", "--lr", "0.1", "--epochs=3"],
            &["python3", "train.py", "--lr", "0.1", "--epochs=3"],
        ),
        (
            &["x", "--master=tcp://10.0.0.1:29500"],
            &["x", "--master=tcp://10.0.0.1:29500"],
        ),
        (
            &["x", "https://plain.org/a@b"],
            &["x", "https://plain.org/a@b"],
        ),
        (
            &["x", "https://h:8080/pkg@1.0"],
            &["x", "https://h:8080/pkg@1.0"],
        ),
        (&["x", "NCCL_IB_PKEY=0x8001"], &["x", "NCCL_IB_PKEY=0x8001"]),
        (
            &["x", "--tokenizer", "gpt2", "--max-tokens=5"],
            &["x", "--tokenizer", "gpt2", "--max-tokens=5"],
        ),
        (&["x", "--bypass", "y"], &["x", "--bypass", "y"]),
        // A flag that only looks secret costs its neighbour, never a long option.
        (
            &["x", "--secret-file", "--epochs=3"],
            &["x", "--secret-file", "--epochs=3"],
        ),
        (&["--token-tool", "--token"], &["--token-tool", "--token"]),
    ];

    #[test]
    fn every_argv_form_is_redacted_whole() {
        for (argv, want) in ARGV_CASES {
            let args: Vec<String> = argv.iter().map(|s| s.to_string()).collect();
            assert_eq!(redact_args(&args), *want, "{argv:?}");
        }
    }

    /// (name, value, what is recorded): the same table read for the environment.
    const ENV_CASES: &[(&str, &str, &str)] = &[
        ("NCCL_API_TOKEN", "abc", REDACTED),
        ("SLURM_JOB_KEY", "k", REDACTED),
        ("MASTER_PASSWORD", "p", REDACTED),
        ("TORCH_AUTH_HEADER", "h", REDACTED),
        ("MY_DB_PASS", "p", REDACTED),
        ("MY_DB_PWD", "p", REDACTED),
        ("MY_DB_DSN", "postgres://u:p@h/db", REDACTED),
        (
            "MY_URL",
            "postgres://u:s3cr3t@h/db",
            "postgres://u:<redacted>@h/db",
        ),
        (
            "MY_REPO",
            "https://ghp_x@github.com/o/r",
            "https://<redacted>@github.com/o/r",
        ),
        (
            "MY_HDR",
            "Authorization: Bearer x",
            "Authorization: <redacted>",
        ),
        (
            "MY_CFG",
            "{\"hf_token\": \"x\"}",
            "{\"hf_token\": \"<redacted>\"}",
        ),
        ("NCCL_IB_PKEY", "0x8001", "0x8001"),
        ("NCCL_SOCKET_IFNAME", "eth0", "eth0"),
        ("NCCL_IB_HCA", "=mlx5_0:1,mlx5_1:1", "=mlx5_0:1,mlx5_1:1"),
        (
            "LD_LIBRARY_PATH",
            "/opt/keyutils:/usr/lib",
            "/opt/keyutils:/usr/lib",
        ),
        ("MASTER_ADDR", "10.0.0.1", "10.0.0.1"),
        ("PWD_HINT", "x", "x"),
    ];

    #[test]
    fn every_env_form_is_redacted_whole() {
        for (name, value, want) in ENV_CASES {
            assert_eq!(redact_env_value(name, value), *want, "{name}={value}");
        }
    }

    #[test]
    fn every_rule_says_why() {
        for r in RULES {
            assert!(r.why.len() > 8, "{:?}", r.form);
        }
    }

    proptest::proptest! {
        /// Any text: no panic, and a secret written as `--password=<it>` never survives.
        #[test]
        fn any_text_is_handled(text in "\\PC{0,60}", secret in "[A-Za-z0-9]{6,12}") {
            let _ = redact_text(&text);
            let _ = redact_args(&[text.clone(), text.clone(), "-p".into()]);
            let args = vec![text.clone(), format!("--password={secret}"), format!("{{\"token\": \"{secret}\"}}")];
            let out = redact_args(&args);
            proptest::prop_assert!(!out[1].contains(&secret));
            proptest::prop_assert!(!out[2].contains(&secret));
        }
    }
}
