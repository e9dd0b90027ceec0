//! `ncclResult_t` as a type. Writers store the integer NCCL returned (a record's `rc`, or the
//! `async_error` argument of `ncclCommGetAsyncError`); readers, the model and the rules turn it
//! into an [`NcclResult`] and compare variants, never integers. A value this crate does not
//! know (a newer NCCL's code) stays [`NcclResult::Unknown`] with its number, so nothing is lost.
//! The names, texts and meanings a report prints live in the CLI's knowledge file
//! `diagnose/knowledge/nccl-results.toml`; a test there checks that both agree.

/// One `ncclResult_t` value (NVIDIA/nccl `src/nccl.h.in`, enum ncclResult_t).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NcclResult {
    Success,
    UnhandledCudaError,
    SystemError,
    InternalError,
    InvalidArgument,
    InvalidUsage,
    /// A peer or the network failed (since 2.13).
    RemoteError,
    /// A non-blocking operation is still running: not an error (since 2.14).
    InProgress,
    /// An operation did not complete in time (since 2.30).
    Timeout,
    /// A value this crate does not know (a newer NCCL, or a corrupt record).
    Unknown(i32),
}

impl NcclResult {
    /// Every known value, in number order (for tests and for tools that list the schema).
    pub const KNOWN: &'static [NcclResult] = &[
        Self::Success,
        Self::UnhandledCudaError,
        Self::SystemError,
        Self::InternalError,
        Self::InvalidArgument,
        Self::InvalidUsage,
        Self::RemoteError,
        Self::InProgress,
        Self::Timeout,
    ];

    #[inline]
    pub const fn from_i32(v: i32) -> Self {
        match v {
            0 => Self::Success,
            1 => Self::UnhandledCudaError,
            2 => Self::SystemError,
            3 => Self::InternalError,
            4 => Self::InvalidArgument,
            5 => Self::InvalidUsage,
            6 => Self::RemoteError,
            7 => Self::InProgress,
            8 => Self::Timeout,
            n => Self::Unknown(n),
        }
    }

    /// A result stored in a 64-bit argument word (`ncclCommGetAsyncError`'s `async_error`):
    /// the C int, sign-extended by the writer, is its low 32 bits.
    #[inline]
    pub const fn from_arg(v: u64) -> Self {
        Self::from_i32(v as i32)
    }

    #[inline]
    pub const fn as_i32(self) -> i32 {
        match self {
            Self::Success => 0,
            Self::UnhandledCudaError => 1,
            Self::SystemError => 2,
            Self::InternalError => 3,
            Self::InvalidArgument => 4,
            Self::InvalidUsage => 5,
            Self::RemoteError => 6,
            Self::InProgress => 7,
            Self::Timeout => 8,
            Self::Unknown(n) => n,
        }
    }

    /// The C enumerator's name (`ncclRemoteError`), or None for an unknown value.
    pub const fn c_name(self) -> Option<&'static str> {
        Some(match self {
            Self::Success => "ncclSuccess",
            Self::UnhandledCudaError => "ncclUnhandledCudaError",
            Self::SystemError => "ncclSystemError",
            Self::InternalError => "ncclInternalError",
            Self::InvalidArgument => "ncclInvalidArgument",
            Self::InvalidUsage => "ncclInvalidUsage",
            Self::RemoteError => "ncclRemoteError",
            Self::InProgress => "ncclInProgress",
            Self::Timeout => "ncclTimeout",
            Self::Unknown(_) => return None,
        })
    }

    /// An error: neither success nor a non-blocking operation still in progress.
    #[inline]
    pub const fn is_error(self) -> bool {
        !matches!(self, Self::Success | Self::InProgress)
    }
}

impl From<i32> for NcclResult {
    #[inline]
    fn from(v: i32) -> Self {
        Self::from_i32(v)
    }
}

impl From<NcclResult> for i32 {
    #[inline]
    fn from(r: NcclResult) -> Self {
        r.as_i32()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_value_round_trips_and_unknown_keeps_its_number() {
        for (i, r) in NcclResult::KNOWN.iter().enumerate() {
            assert_eq!(r.as_i32(), i as i32);
            assert_eq!(NcclResult::from_i32(i as i32), *r);
            assert!(r.c_name().is_some());
        }
        for n in [-1, 9, 1000, i32::MIN] {
            assert_eq!(NcclResult::from_i32(n), NcclResult::Unknown(n));
            assert_eq!(NcclResult::from_i32(n).as_i32(), n);
        }
        // A sign-extended -1 in an argument word reads back as -1, not as a huge value.
        assert_eq!(NcclResult::from_arg(u64::MAX), NcclResult::Unknown(-1));
        assert!(!NcclResult::InProgress.is_error() && NcclResult::RemoteError.is_error());
    }
}
