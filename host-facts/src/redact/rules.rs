//! The redaction table ([`RULES`]) and the name tests it is read with: the knowledge under both
//! the whole-argument redaction (`redact.rs`) and the text scanners (`scan.rs`), so neither
//! reaches up into the other.

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
    /// An option, spelled exactly, whose value (the next argument or `=value`; with `attached`,
    /// also glued to the flag: `-pVALUE`) is secret when `value` says so.
    Option {
        flag: &'static str,
        attached: bool,
        value: SecretValue,
    },
    /// `scheme://user:password@host` (the password) and `scheme://token@host` (the user part).
    UrlUserinfo,
    /// `user:password@host` without a scheme, as a whole value or after `=`, `,` or `;`: the
    /// password.
    SchemelessUserinfo,
    /// A URL on this host (or a subdomain of it) whose path after `path_prefix` is the secret.
    SecretUrlPath {
        host: &'static str,
        path_prefix: &'static str,
    },
    /// A bare token this prefix announces, followed by at least `min_body` characters of
    /// `body`, anywhere in a text (not inside a longer word): the whole token.
    TokenPrefix {
        prefix: &'static str,
        min_body: usize,
        body: TokenChars,
    },
    /// `Name: value` or `Name=value` at the start of an argument, an option's `=value` or a
    /// variable's value, the name secret: the rest of the text (`-H "Authorization: Bearer X"`,
    /// `--header=X-Api-Key:X`, `WANDB_API_KEY=X`).
    LeadingKey,
    /// `key=value`, `"key": "value"`, `'key': value`, `key: value` inside a text, the key
    /// secret: the value up to its closing quote or the next separator.
    EmbeddedKey,
    /// This HTTP authentication scheme followed by a credential, anywhere (`Bearer X`).
    AuthScheme(&'static str),
}

/// Which values of a secret option are secrets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SecretValue {
    /// Every value.
    Any,
    /// Every value but a port number (1 to 65535).
    AnyButPort,
    /// Only a `user:password` value (with a `:`, not a URL: a URL's user info has its own rule).
    Credential,
}

/// The characters a token's body is made of (its end is the first other character).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenChars {
    /// Letters and digits.
    Alnum,
    /// Letters, digits and `_`.
    AlnumUnderscore,
    /// Letters, digits, `_` and `-`.
    AlnumDashUnderscore,
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

const fn option(flag: &'static str, attached: bool, value: SecretValue) -> Form {
    Form::Option {
        flag,
        attached,
        value,
    }
}

const fn token(prefix: &'static str, min_body: usize, body: TokenChars) -> Form {
    Form::TokenPrefix {
        prefix,
        min_body,
        body,
    }
}

/// The redaction table (issues 22 items 8 and 9, and 36 item 9, list the forms seen leaking).
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
        Form::NameContains("PASSPHRASE"),
        "--passphrase X (gpg, ssh-keygen, key stores; issue 36)",
    ),
    rule(
        Form::NameContains("PASS_PHRASE"),
        "--pass-phrase X, PASS_PHRASE: the same, spelled as two words (issue 36)",
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
        Form::NameContains("CREDS"),
        "--creds user:pass, AWS_CREDS: the short spelling (issue 36)",
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
        Form::NameEndsWithWord("SSHPASS"),
        "SSHPASS: the password sshpass -e reads from the environment (issue 36)",
    ),
    rule(
        Form::NameEndsWithWord("PWD"),
        "MYSQL_PWD, --pwd X, ODBC Pwd=X (issue 22)",
    ),
    rule(Form::NameEndsWithWord("PW"), "DB_PW, --pw X"),
    rule(
        Form::NameEndsWithWord("PAT"),
        "GH_PAT, GITLAB_PAT, --pat X: personal access tokens (issue 36)",
    ),
    rule(
        Form::NameEndsWithWord("SIG"),
        "Azure SAS ...&sig=X (the signature that grants the access; issue 36)",
    ),
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
        option("-p", true, SecretValue::AnyButPort),
        "sshpass -p X, mysql -pX (its only inline form; issues 22 and 36); a port (torchrun or ssh -p 29500) is kept",
    ),
    rule(
        option("-u", true, SecretValue::Credential),
        "curl -u user:pass, -uuser:pass (issue 36); python -u and -u USER are kept",
    ),
    rule(
        option("--user", false, SecretValue::Credential),
        "curl --user user:pass; --user NAME is kept",
    ),
    rule(
        option("-U", true, SecretValue::Credential),
        "curl -U user:pass (proxy credentials)",
    ),
    rule(
        option("--proxy-user", false, SecretValue::Credential),
        "curl --proxy-user user:pass",
    ),
    rule(
        option("--login", false, SecretValue::Credential),
        "--login=admin:pass (issue 36); --login NAME is kept",
    ),
    rule(
        Form::UrlUserinfo,
        "https://user:X@host and https://X@host (a token as user name; issue 22); a password with an @ up to the last one (issue 36)",
    ),
    rule(
        Form::SchemelessUserinfo,
        "MASTER_ADDR=u:pass@host, a rendezvous or proxy address with credentials (issue 36)",
    ),
    rule(
        Form::SecretUrlPath {
            host: "hooks.slack.com",
            path_prefix: "/",
        },
        "Slack incoming webhooks: the path is the credential (issue 36)",
    ),
    rule(
        Form::SecretUrlPath {
            host: "discord.com",
            path_prefix: "/api/webhooks/",
        },
        "Discord webhooks: id and token in the path (issue 36)",
    ),
    rule(
        Form::SecretUrlPath {
            host: "discordapp.com",
            path_prefix: "/api/webhooks/",
        },
        "Discord webhooks on the older domain",
    ),
    rule(
        Form::SecretUrlPath {
            host: "webhook.office.com",
            path_prefix: "/",
        },
        "Microsoft Teams incoming webhooks: the path is the credential",
    ),
    rule(
        token("hf_", 30, TokenChars::Alnum),
        "Hugging Face access tokens (hf_ and 34 letters; issue 36)",
    ),
    rule(
        token("ghp_", 30, TokenChars::Alnum),
        "GitHub personal access tokens (classic; issue 36)",
    ),
    rule(
        token("gho_", 30, TokenChars::Alnum),
        "GitHub OAuth access tokens",
    ),
    rule(
        token("ghu_", 30, TokenChars::Alnum),
        "GitHub user-to-server tokens",
    ),
    rule(
        token("ghs_", 30, TokenChars::Alnum),
        "GitHub server-to-server (Actions) tokens",
    ),
    rule(
        token("ghr_", 30, TokenChars::Alnum),
        "GitHub refresh tokens",
    ),
    rule(
        token("github_pat_", 40, TokenChars::AlnumUnderscore),
        "GitHub fine-grained personal access tokens",
    ),
    rule(
        token("xoxb-", 10, TokenChars::AlnumDashUnderscore),
        "Slack bot tokens (issue 36)",
    ),
    rule(
        token("xoxp-", 10, TokenChars::AlnumDashUnderscore),
        "Slack user tokens (issue 36)",
    ),
    rule(
        token("xoxa-", 10, TokenChars::AlnumDashUnderscore),
        "Slack app tokens",
    ),
    rule(
        token("xoxe-", 10, TokenChars::AlnumDashUnderscore),
        "Slack refresh tokens",
    ),
    rule(
        token("sk-", 32, TokenChars::AlnumDashUnderscore),
        "OpenAI/Anthropic-style secret keys (sk-, sk-proj-, sk-ant-); 32 characters keep sk-learn-like names",
    ),
    rule(
        token("glpat-", 20, TokenChars::AlnumDashUnderscore),
        "GitLab personal access tokens",
    ),
    rule(
        token("npm_", 30, TokenChars::Alnum),
        "npm access tokens",
    ),
    rule(
        token("pypi-", 50, TokenChars::AlnumDashUnderscore),
        "PyPI API tokens (long macaroons)",
    ),
    rule(
        Form::LeadingKey,
        "-H \"Authorization: Bearer X\", --header=X-Api-Key:X, API_KEY=X arguments and values",
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
pub(super) fn normalized(name: &str) -> String {
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

impl SecretValue {
    /// Whether `value`, given to an option of this kind, is a secret.
    pub(super) fn covers(self, value: &str) -> bool {
        match self {
            SecretValue::Any => true,
            SecretValue::AnyButPort => !is_port(value),
            SecretValue::Credential => value.contains(':') && !value.contains("://"),
        }
    }
}

/// `29500`: a TCP/UDP port number.
pub(super) fn is_port(value: &str) -> bool {
    value.len() <= 5
        && value.bytes().all(|b| b.is_ascii_digit())
        && value.parse::<u32>().is_ok_and(|n| (1..=65535).contains(&n))
}

impl TokenChars {
    pub(super) fn admits(self, c: char) -> bool {
        c.is_ascii_alphanumeric()
            || match self {
                TokenChars::Alnum => false,
                TokenChars::AlnumUnderscore => c == '_',
                TokenChars::AlnumDashUnderscore => c == '_' || c == '-',
            }
    }
}

/// Which values an option (`--password`, `-p`, `-u`) takes as secrets; `None`: not a secret
/// option. An option the table does not list is secret by its name, every value.
pub(super) fn secret_option(flag: &str) -> Option<SecretValue> {
    RULES
        .iter()
        .find_map(|r| match r.form {
            Form::Option { flag: f, value, .. } if f == flag => Some(value),
            _ => None,
        })
        .or_else(|| {
            (flag.starts_with('-') && is_name(flag) && is_secret_name(flag))
                .then_some(SecretValue::Any)
        })
}

/// `-pVALUE`, `-uuser:pass`: the flag, when `arg` is an option of the table that takes its
/// value glued on and that value is a secret. `-p=VALUE` is left to the `=` form.
pub(super) fn attached_secret_flag(arg: &str) -> Option<&'static str> {
    RULES.iter().find_map(|r| match r.form {
        Form::Option {
            flag,
            attached: true,
            value,
        } => {
            let rest = arg.strip_prefix(flag)?;
            (!rest.is_empty() && !rest.starts_with('=') && value.covers(rest)).then_some(flag)
        }
        _ => None,
    })
}

pub(super) fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.')
}

pub(super) fn is_name(s: &str) -> bool {
    !s.trim_start_matches('-').is_empty() && s.chars().all(is_name_char)
}
