//! How the rules read NCCL's error texts: through the message knowledge
//! (`knowledge/messages.toml`), by catalog case, entry or role; one substring test is left for
//! the rule that tells two wordings of one message apart by version.

use crate::model::CallEvent;

/// Whether NCCL's message knowledge (`knowledge/messages.toml`) classifies a message of the
/// call's error text as an entry of failure-catalog case `case`: the rules recognise NCCL's
/// texts through that one table, never through word lists of their own.
pub fn text_is_case(c: &CallEvent, case: &str) -> bool {
    text_classified_as(c, |m| m.entry.catalog.iter().any(|x| x == case))
}

/// Whether a message of the call's error text is classified as one of the message-knowledge
/// entries `ids` (`knowledge/messages.toml`): for a rule that relies on particular messages of a
/// case, named by their entries, never by words of its own.
pub fn text_is_entry(c: &CallEvent, ids: &[&str]) -> bool {
    text_classified_as(c, |m| ids.contains(&m.entry.id.as_str()))
}

/// Whether a message of the call's error text is classified with role `role` (an echo of a
/// failure elsewhere, teardown noise...).
pub fn text_has_role(c: &CallEvent, role: crate::knowledge::messages::Role) -> bool {
    text_classified_as(c, |m| m.entry.role == role)
}

/// Whether any message of the call's error text classifies as an entry `wanted` accepts.
fn text_classified_as(
    c: &CallEvent,
    wanted: impl Fn(&crate::knowledge::messages::Match) -> bool,
) -> bool {
    c.error_text.as_deref().is_some_and(|t| {
        crate::knowledge::messages::classify_all(t)
            .iter()
            .any(wanted)
    })
}

/// Case-insensitive substring test on NCCL's error text: left for C01 alone, which tells the two
/// wordings of one message apart by the version that prints each (`network::net_ib::expected_text`,
/// from the version facts); both wordings are one entry of the message knowledge.
pub fn text_has(c: &CallEvent, needles: &[&str]) -> bool {
    c.error_text.as_deref().is_some_and(|t| {
        let t = t.to_ascii_lowercase();
        needles.iter().any(|n| t.contains(&n.to_ascii_lowercase()))
    })
}
