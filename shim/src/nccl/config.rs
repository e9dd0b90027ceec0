//! Reading an `ncclConfig_t` the way NCCL does: `size` first, then only fields that lie inside
//! `size` bytes (never past them: an older application's struct is shorter), fields newer than
//! the struct's `version` left out (NCCL resets those to defaults), unset fields
//! (`NCCL_CONFIG_UNDEF_INT` / NULL) left out. The result is one JSON object for a
//! `CommConfig` blob. Runs at communicator creation only, never on the collective path.

use serde_json::{json, Map, Value};
use std::ffi::{c_char, c_void};

/// `NCCL_CONFIG_UNDEF_INT`.
const UNDEF_INT: i32 = i32::MIN;
const MAGIC: u32 = 0xcafe_beef;
/// Strings (netName, commName) are copied up to this many bytes.
const MAX_STR: usize = 256;

#[derive(Clone, Copy)]
enum Ty {
    Int,
    Str,
}

/// (offset, name, type, first NCCL version code whose struct has it), from nccl-facts §4.3.
const FIELDS: &[(usize, &str, Ty, u32)] = &[
    (16, "blocking", Ty::Int, 21400),
    (20, "cgaClusterSize", Ty::Int, 21700),
    (24, "minCTAs", Ty::Int, 21700),
    (28, "maxCTAs", Ty::Int, 21700),
    (32, "netName", Ty::Str, 21700),
    (40, "splitShare", Ty::Int, 21800),
    (44, "trafficClass", Ty::Int, 22500),
    (48, "commName", Ty::Str, 22700),
    (56, "collnetEnable", Ty::Int, 22700),
    (60, "CTAPolicy", Ty::Int, 22700),
    (64, "shrinkShare", Ty::Int, 22700),
    (68, "nvlsCTAs", Ty::Int, 22700),
    (72, "nChannelsPerNetPeer", Ty::Int, 22800),
    (76, "nvlinkCentricSched", Ty::Int, 22800),
    (80, "graphUsageMode", Ty::Int, 22900),
    (84, "numRmaCtx", Ty::Int, 22900),
    (88, "maxP2pPeers", Ty::Int, 23000),
    (92, "graphStreamOrdering", Ty::Int, 23005),
    (96, "launchOrderImplicit", Ty::Int, 23200),
    (100, "numRmaSig", Ty::Int, 23200),
    (104, "rmaEagerInit", Ty::Int, 23200),
    (108, "hostCftMode", Ty::Int, 23200),
    (112, "nvlsHostMode", Ty::Int, 23200),
];

/// # Safety
/// `base + off .. + size_of::<T>()` must be readable.
unsafe fn rd<T: Copy>(base: *const u8, off: usize) -> T {
    base.add(off).cast::<T>().read_unaligned()
}

/// Copies a C string of at most `MAX_STR` bytes.
///
/// # Safety
/// `p` must be null or point to a readable NUL-terminated string (NCCL itself reads it).
unsafe fn c_str(p: *const c_char) -> Option<String> {
    if p.is_null() {
        return None;
    }
    let mut len = 0;
    while len < MAX_STR && *p.add(len) != 0 {
        len += 1;
    }
    let bytes = std::slice::from_raw_parts(p.cast::<u8>(), len);
    Some(String::from_utf8_lossy(bytes).into_owned())
}

/// The config as JSON, or `Value::Null` for a NULL pointer.
///
/// # Safety
/// `cfg` must be null or point to at least `cfg->size` readable bytes (what NCCL assumes too).
pub unsafe fn read_config(cfg: *const c_void) -> Value {
    if cfg.is_null() {
        return Value::Null;
    }
    let base = cfg.cast::<u8>();
    let size: usize = rd(base, 0);
    let mut m = Map::new();
    m.insert("size".into(), json!(size));
    if size < 16 {
        m.insert("valid".into(), json!(false));
        return Value::Object(m);
    }
    let magic: u32 = rd(base, 8);
    let version: u32 = rd(base, 12);
    m.insert("magic".into(), json!(format!("{magic:#x}")));
    m.insert("version".into(), json!(version));
    m.insert("valid".into(), json!(magic == MAGIC));
    if magic != MAGIC {
        // NCCL rejects it ("not initialized via NCCL_CONFIG_INITIALIZER"); the rest is garbage.
        return Value::Object(m);
    }
    for &(off, name, ty, since) in FIELDS {
        let width = match ty {
            Ty::Int => 4,
            Ty::Str => 8,
        };
        if off + width > size || since > version {
            continue;
        }
        let v = match ty {
            Ty::Int => {
                let v: i32 = rd(base, off);
                (v != UNDEF_INT).then(|| json!(v))
            }
            Ty::Str => c_str(rd::<*const c_char>(base, off)).map(Value::String),
        };
        if let Some(v) = v {
            m.insert(name.into(), v);
        }
    }
    Value::Object(m)
}

/// `config.blocking`, when set and readable (0 means non-blocking).
///
/// # Safety
/// As for [`read_config`].
pub unsafe fn blocking(cfg: *const c_void) -> Option<i32> {
    if cfg.is_null() {
        return None;
    }
    let base = cfg.cast::<u8>();
    let size: usize = rd(base, 0);
    if size < 20 || rd::<u32>(base, 8) != MAGIC {
        return None;
    }
    let v: i32 = rd(base, 16);
    (v != UNDEF_INT).then_some(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A config laid out as NCCL 2.32's `NCCL_CONFIG_INITIALIZER` leaves it (120 bytes).
    fn config(size: usize, version: u32) -> Vec<u64> {
        let mut buf = vec![0u64; 16];
        let p = buf.as_mut_ptr().cast::<u8>();
        // SAFETY: buf is 128 bytes; each write lies inside it.
        unsafe {
            p.cast::<usize>().write(size);
            p.add(8).cast::<u32>().write(MAGIC);
            p.add(12).cast::<u32>().write(version);
            let mut off = 16;
            while off < 120 {
                p.add(off).cast::<i32>().write(UNDEF_INT);
                off += 4;
            }
            p.add(32).cast::<u64>().write(0);
            p.add(48).cast::<u64>().write(0);
        }
        buf
    }

    fn set_i32(buf: &mut [u64], off: usize, v: i32) {
        // SAFETY: off + 4 <= 128.
        unsafe {
            buf.as_mut_ptr()
                .cast::<u8>()
                .add(off)
                .cast::<i32>()
                .write(v)
        };
    }

    #[test]
    fn reads_set_fields_only() {
        let mut c = config(120, 23200);
        set_i32(&mut c, 16, 0);
        set_i32(&mut c, 88, 8);
        let name = c"IB";
        // SAFETY: offset 32 is the netName pointer slot.
        unsafe {
            c.as_mut_ptr()
                .cast::<u8>()
                .add(32)
                .cast::<*const c_char>()
                .write(name.as_ptr())
        };
        // SAFETY: the buffer is 128 bytes >= size.
        let v = unsafe { read_config(c.as_ptr().cast()) };
        assert_eq!(v["valid"], true);
        assert_eq!(v["blocking"], 0);
        assert_eq!(v["maxP2pPeers"], 8);
        assert_eq!(v["netName"], "IB");
        assert!(
            v.get("minCTAs").is_none(),
            "undefined fields are left out: {v}"
        );
        // SAFETY: as above.
        assert_eq!(unsafe { blocking(c.as_ptr().cast()) }, Some(0));
    }

    #[test]
    fn never_reads_past_size_or_beyond_version() {
        let mut c = config(48, 23200);
        set_i32(&mut c, 44, 3); // trafficClass, inside 48 bytes
        set_i32(&mut c, 56, 1); // collnetEnable, past size: must not appear
                                // SAFETY: buffer is 128 bytes.
        let v = unsafe { read_config(c.as_ptr().cast()) };
        assert_eq!(v["trafficClass"], 3);
        assert!(v.get("collnetEnable").is_none());

        let mut c = config(120, 21800);
        set_i32(&mut c, 44, 3); // trafficClass is 2.25: ignored by a 2.18 struct
                                // SAFETY: as above.
        let v = unsafe { read_config(c.as_ptr().cast()) };
        assert!(v.get("trafficClass").is_none());
    }

    #[test]
    fn bad_magic_is_flagged_not_parsed() {
        let mut c = config(120, 23200);
        // SAFETY: offset 8 is the magic.
        unsafe {
            c.as_mut_ptr()
                .cast::<u8>()
                .add(8)
                .cast::<u32>()
                .write(0x1234)
        };
        // SAFETY: as above.
        let v = unsafe { read_config(c.as_ptr().cast()) };
        assert_eq!(v["valid"], false);
        assert!(v.get("blocking").is_none());
        // SAFETY: null is allowed.
        assert_eq!(unsafe { read_config(std::ptr::null()) }, Value::Null);
    }
}
