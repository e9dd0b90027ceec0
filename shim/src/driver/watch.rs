//! Which driver functions are watched, under which names and ABI versions, and where the real
//! pointers live. Each watched ABI has `SLOTS` wrapper copies (one per distinct real pointer:
//! several cudarts, flag variants, `dlsym` vs `cuGetProcAddress`), each reading its own atomic
//! slot, so a wrapper never has to search for its target and two libcudas never get mixed up.
//! When every copy is taken by a different pointer the lookup is passed through unwrapped:
//! recording is lost, behaviour is not.

use std::ffi::c_void;
use std::ptr::null_mut;
use std::sync::atomic::{AtomicPtr, Ordering};

/// Wrapper copies per watched ABI.
pub const SLOTS: usize = 8;

/// Requests at or above this version come from a CUDA we do not know; a watched function may
/// have a new ABI there, so such lookups pass through unwrapped.
pub const FIRST_UNKNOWN_VERSION: i32 = 14000;

macro_rules! watched {
    ($( $variant:ident = $gpa:literal, $min:literal, $dlsym:literal; )*) => {
        /// One watched function ABI.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        #[repr(u8)]
        pub enum W { $( $variant, )* }

        impl W {
            pub const ALL: &'static [W] = &[$( W::$variant, )*];

            /// The name a `cuGetProcAddress` caller asks for.
            pub fn gpa_name(self) -> &'static str {
                match self { $( W::$variant => $gpa, )* }
            }

            /// The lowest `cudaVersion` that returns this ABI.
            pub fn min_version(self) -> i32 {
                match self { $( W::$variant => $min, )* }
            }

            /// The symbol libcuda exports for this ABI (what a plain `dlsym` asks for).
            pub fn dlsym_name(self) -> &'static str {
                match self { $( W::$variant => $dlsym, )* }
            }
        }

        /// The watched ABI for a plain `dlsym` of an exported libcuda symbol.
        pub fn by_dlsym_name(name: &[u8]) -> Option<W> {
            $( if name == $dlsym.as_bytes() { return Some(W::$variant); } )*
            None
        }
    };
}

watched! {
    GpaV1 = "cuGetProcAddress", 11030, "cuGetProcAddress";
    GpaV2 = "cuGetProcAddress", 12000, "cuGetProcAddress_v2";
    MemExport = "cuMemExportToShareableHandle", 10020, "cuMemExportToShareableHandle";
    MemImport = "cuMemImportFromShareableHandle", 10020, "cuMemImportFromShareableHandle";
    MemCreate = "cuMemCreate", 10020, "cuMemCreate";
    MemRelease = "cuMemRelease", 10020, "cuMemRelease";
    MemMap = "cuMemMap", 10020, "cuMemMap";
    MemUnmap = "cuMemUnmap", 10020, "cuMemUnmap";
    MemSetAccess = "cuMemSetAccess", 10020, "cuMemSetAccess";
    MemAddressReserve = "cuMemAddressReserve", 10020, "cuMemAddressReserve";
    MemAddressFree = "cuMemAddressFree", 10020, "cuMemAddressFree";
    MemRetain = "cuMemRetainAllocationHandle", 11000, "cuMemRetainAllocationHandle";
    MemGetHandleForRange = "cuMemGetHandleForAddressRange", 11070, "cuMemGetHandleForAddressRange";
    McCreate = "cuMulticastCreate", 12010, "cuMulticastCreate";
    McAddDevice = "cuMulticastAddDevice", 12010, "cuMulticastAddDevice";
    McBindMem = "cuMulticastBindMem", 12010, "cuMulticastBindMem";
    McBindAddr = "cuMulticastBindAddr", 12010, "cuMulticastBindAddr";
    McUnbind = "cuMulticastUnbind", 12010, "cuMulticastUnbind";
    IpcGet = "cuIpcGetMemHandle", 4010, "cuIpcGetMemHandle";
    IpcOpenV1 = "cuIpcOpenMemHandle", 4010, "cuIpcOpenMemHandle";
    IpcOpenV2 = "cuIpcOpenMemHandle", 11000, "cuIpcOpenMemHandle_v2";
    IpcClose = "cuIpcCloseMemHandle", 4010, "cuIpcCloseMemHandle";
}

const N: usize = W::ALL.len();

/// Real pointers, `[abi][copy]`. All-zero is the valid initial state (hooks may run before
/// any constructor).
static REAL: [[AtomicPtr<c_void>; SLOTS]; N] =
    [const { [const { AtomicPtr::new(null_mut()) }; SLOTS] }; N];

/// The watched ABI a `cuGetProcAddress(name, version)` request returns, if any. Functions whose
/// ABI changed with a version (`cuGetProcAddress` itself at 12000, `cuIpcOpenMemHandle` at
/// 11000) map to the ABI that version selects; requests below the first version (the driver
/// answers "not found") or from an unknown future CUDA map to none.
pub fn by_gpa_name(name: &[u8], version: i32) -> Option<W> {
    if !(0..FIRST_UNKNOWN_VERSION).contains(&version) || name.len() < 6 || !name.starts_with(b"cu")
    {
        return None;
    }
    let w = match name {
        b"cuGetProcAddress" if version >= W::GpaV2.min_version() => W::GpaV2,
        b"cuGetProcAddress" => W::GpaV1,
        b"cuIpcOpenMemHandle" if version >= W::IpcOpenV2.min_version() => W::IpcOpenV2,
        b"cuIpcOpenMemHandle" => W::IpcOpenV1,
        _ => {
            // Names in the table above are matched there; the rest have a single ABI.
            let w = *W::ALL.iter().find(|w| {
                !matches!(w, W::GpaV1 | W::GpaV2 | W::IpcOpenV1 | W::IpcOpenV2)
                    && w.gpa_name().as_bytes() == name
            })?;
            w
        }
    };
    (version >= w.min_version()).then_some(w)
}

/// The real function behind wrapper copy `slot` of `w` (set before the wrapper was handed out).
#[inline]
pub fn real(w: W, slot: usize) -> *mut c_void {
    REAL[w as usize][slot].load(Ordering::Acquire)
}

/// Stores `real` for `w` and returns the wrapper copy that will call it, reusing the copy that
/// already holds the same pointer. `None` (pass through) when all copies hold other pointers or
/// when `real` is one of our own wrappers (a second lookup through a wrapped pointer must not
/// make a wrapper call itself).
pub fn claim(w: W, real: *mut c_void, wrapper: fn(W, usize) -> *mut c_void) -> Option<*mut c_void> {
    if real.is_null() || (0..SLOTS).any(|s| wrapper(w, s) == real) {
        return None;
    }
    for (s, cell) in REAL[w as usize].iter().enumerate() {
        match cell.compare_exchange(null_mut(), real, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return Some(wrapper(w, s)),
            Err(cur) if cur == real => return Some(wrapper(w, s)),
            Err(_) => continue,
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpa_names_select_the_abi_by_version() {
        assert_eq!(by_gpa_name(b"cuGetProcAddress", 11030), Some(W::GpaV1));
        assert_eq!(by_gpa_name(b"cuGetProcAddress", 12000), Some(W::GpaV2));
        assert_eq!(by_gpa_name(b"cuGetProcAddress", 13000), Some(W::GpaV2));
        assert_eq!(by_gpa_name(b"cuGetProcAddress", 11020), None);
        assert_eq!(by_gpa_name(b"cuIpcOpenMemHandle", 4010), Some(W::IpcOpenV1));
        assert_eq!(
            by_gpa_name(b"cuIpcOpenMemHandle", 10020),
            Some(W::IpcOpenV1)
        );
        assert_eq!(
            by_gpa_name(b"cuIpcOpenMemHandle", 11000),
            Some(W::IpcOpenV2)
        );
        assert_eq!(
            by_gpa_name(b"cuMemImportFromShareableHandle", 12080),
            Some(W::MemImport)
        );
        assert_eq!(by_gpa_name(b"cuMemImportFromShareableHandle", 10010), None);
        assert_eq!(by_gpa_name(b"cuMulticastCreate", 12000), None);
        assert_eq!(by_gpa_name(b"cuMulticastCreate", 12010), Some(W::McCreate));
        assert_eq!(by_gpa_name(b"cuMemCreate", FIRST_UNKNOWN_VERSION), None);
        assert_eq!(by_gpa_name(b"cuMemAlloc", 12000), None);
        assert_eq!(by_gpa_name(b"", 0), None);
        // The exported `_v2` symbol names are not cuGetProcAddress names.
        assert_eq!(by_gpa_name(b"cuIpcOpenMemHandle_v2", 12000), None);
        assert_eq!(by_gpa_name(b"cuGetProcAddress_v2", 12000), None);
    }

    #[test]
    fn dlsym_names_are_the_exported_symbols() {
        assert_eq!(by_dlsym_name(b"cuGetProcAddress_v2"), Some(W::GpaV2));
        assert_eq!(by_dlsym_name(b"cuGetProcAddress"), Some(W::GpaV1));
        assert_eq!(by_dlsym_name(b"cuIpcOpenMemHandle"), Some(W::IpcOpenV1));
        assert_eq!(by_dlsym_name(b"cuIpcOpenMemHandle_v2"), Some(W::IpcOpenV2));
        assert_eq!(by_dlsym_name(b"cuMemRelease"), Some(W::MemRelease));
        assert_eq!(by_dlsym_name(b"cuMemAlloc_v2"), None);
        assert_eq!(by_dlsym_name(b"cuGetExportTable"), None);
        for w in W::ALL {
            assert_eq!(by_dlsym_name(w.dlsym_name().as_bytes()), Some(*w));
        }
    }
}
