//! How the process model's fields that point into the schema are written to a summary and read
//! back (`crate::summary`): a call id as the dump's own 16-bit id (stable across versions, the
//! format's discipline), a known call's name not at all (read back borrowed from the schema, as
//! [`super::ProcessModel::from_dump`] makes it), a communicator state as its name mapped back to
//! the one static string each state has.
//!
//! Summaries are written in a format without field names (postcard, version 2): every field is
//! written, none skipped, or the reader would take the next field's bytes for it. The readers
//! below also read summaries of version 1 (JSON, where a field could be left out): a
//! human-readable deserializer is that JSON.

use ncclshim_format::CallId;
use std::borrow::Cow;

/// A call id as its number in the dump format.
pub mod call_id {
    use ncclshim_format::CallId;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<S: Serializer>(c: &CallId, s: S) -> Result<S::Ok, S::Error> {
        (*c as u16).serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<CallId, D::Error> {
        let v = u16::deserialize(d)?;
        CallId::from_u16(v)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown call id {v:#06x}")))
    }
}

/// An optional call id; an id this reader does not know reads as `None` (a newer writer), as
/// an unknown id in a dump does.
pub mod optional_call_id {
    use ncclshim_format::CallId;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<S: Serializer>(c: &Option<CallId>, s: S) -> Result<S::Ok, S::Error> {
        c.map(|c| c as u16).serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<CallId>, D::Error> {
        Ok(Option::<u16>::deserialize(d)?.and_then(CallId::from_u16))
    }
}

/// A call's name is written only when the schema has none for it (an unknown id): the model
/// borrows every known call's name from the schema and owns only the others. Written as an
/// option (`None`: borrowed, given back by [`restore_name`]); a version-1 summary left it out.
pub mod call_name {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::borrow::Cow;

    // serde hands `with` the field itself: whether it is borrowed is the question.
    #[allow(clippy::ptr_arg)]
    pub fn serialize<S: Serializer>(name: &Cow<'static, str>, s: S) -> Result<S::Ok, S::Error> {
        match name {
            Cow::Borrowed(_) => s.serialize_none(),
            Cow::Owned(n) => s.serialize_some(n),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Cow<'static, str>, D::Error> {
        Ok(Option::<String>::deserialize(d)?.map_or(Cow::Borrowed(""), Cow::Owned))
    }
}

/// Gives every known call its name back, borrowed from the schema (a summary does not carry it).
pub fn restore_name(call: Option<CallId>, name: &mut Cow<'static, str>) {
    if let Some(c) = call {
        *name = Cow::Borrowed(c.name());
    }
}

/// A name the model borrows from a fixed set. An alias, not `&'static str` written out: serde's
/// derive would take that as a string to borrow from the input and tie every reader to 'static.
pub type StaticName = &'static str;

/// A communicator state by name, read back as the static string the dump reader gives it.
pub mod comm_state {
    use serde::{Deserialize, Deserializer, Serializer};

    const STATES: [&str; 5] = ["pending", "live", "destroyed", "aborted", "unknown"];

    pub fn serialize<S: Serializer>(state: &&'static str, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(state)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<&'static str, D::Error> {
        let v = String::deserialize(d)?;
        Ok(STATES
            .iter()
            .find(|s| **s == v)
            .copied()
            .unwrap_or("unknown"))
    }
}

/// `Option<Option<T>>`, "not recorded" (`None`) apart from "recorded as absent" (`Some(None)`).
/// Written as the two options; a version-1 summary (JSON) left the field out for `None` and
/// wrote `null` for `Some(None)`, which plain serde would read back alike.
pub mod maybe_absent {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<S, T>(v: &Option<Option<T>>, s: S) -> Result<S::Ok, S::Error>
    where
        S: Serializer,
        T: Serialize,
    {
        v.serialize(s)
    }

    pub fn deserialize<'de, D, T>(d: D) -> Result<Option<Option<T>>, D::Error>
    where
        D: Deserializer<'de>,
        T: Deserialize<'de>,
    {
        if d.is_human_readable() {
            // Version 1: present, so recorded; `null` is "recorded as absent".
            Option::<T>::deserialize(d).map(Some)
        } else {
            Option::<Option<T>>::deserialize(d)
        }
    }
}
