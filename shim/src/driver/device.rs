//! Which GPU a recorded driver call ran on: ordinal, PCI bus id and UUID of the calling
//! thread's current device. Asked of the real driver through the `cuGetProcAddress` the host
//! itself obtained, and only in a way that cannot initialize CUDA: `cuCtxGetDevice` fails
//! before `cuInit` or without a current context, and then everything stays unknown.

use super::cuda::*;
use super::watch::{self, W};
use ncclshim_dump::schema::ArgView;
use ncclshim_dump::{BlobKind, CallId, Entry, RecordKind, Recorder, RingWriter};
use std::ffi::{c_char, c_int, c_void, CStr};
use std::ptr::null_mut;
use std::sync::atomic::{AtomicPtr, AtomicU64, AtomicU8, AtomicUsize, Ordering};

/// Stored for a field we could not learn.
pub const UNKNOWN: u64 = u64::MAX;

/// Ordinals whose PCI bus id / UUID are cached (the rest are asked each time).
const CACHED: usize = 64;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceIdentity {
    pub ordinal: u64,
    /// `domain << 16 | bus << 8 | device << 3 | function`, from `cuDeviceGetPCIBusId`.
    pub pci_bus_id: u64,
    /// The UUID's bytes 0..8 and 8..16, big-endian (so the hex reads as the UUID does).
    pub uuid_hi: u64,
    pub uuid_lo: u64,
}

impl DeviceIdentity {
    pub const UNKNOWN: Self = Self {
        ordinal: UNKNOWN,
        pci_bus_id: UNKNOWN,
        uuid_hi: UNKNOWN,
        uuid_lo: UNKNOWN,
    };
}

static CTX_GET_DEVICE: AtomicPtr<c_void> = AtomicPtr::new(null_mut());
static GET_PCI_BUS_ID: AtomicPtr<c_void> = AtomicPtr::new(null_mut());
static GET_UUID: AtomicPtr<c_void> = AtomicPtr::new(null_mut());
static GET_NAME: AtomicPtr<c_void> = AtomicPtr::new(null_mut());
static GET_ERROR_STRING: AtomicPtr<c_void> = AtomicPtr::new(null_mut());
/// 0: not looked up yet; 1: looked up (pointers may still be null if the driver lacked them).
static RESOLVED: AtomicU8 = AtomicU8::new(0);

/// Per ordinal: bit 63 = valid. PCI id and UUID are cached once learned (they never change for
/// an ordinal within a process).
static PCI_CACHE: [AtomicU64; CACHED] = [const { AtomicU64::new(0) }; CACHED];
static UUID_CACHE: [[AtomicU64; 2]; CACHED] = [const { [const { AtomicU64::new(0) }; 2] }; CACHED];
static UUID_VALID: [AtomicU8; CACHED] = [const { AtomicU8::new(0) }; CACHED];
const VALID: u64 = 1 << 63;

/// Looks the three functions up through a real `cuGetProcAddress` the host obtained. Looking
/// a name up does not initialize the driver.
fn resolve() {
    if RESOLVED.load(Ordering::Acquire) == 1 {
        return;
    }
    let v2 = (0..watch::SLOTS)
        .map(|s| watch::real(W::GpaV2, s))
        .find(|p| !p.is_null());
    let v1 = (0..watch::SLOTS)
        .map(|s| watch::real(W::GpaV1, s))
        .find(|p| !p.is_null());
    let lookup = |name: &CStr, version: c_int| -> *mut c_void {
        let mut pfn: *mut c_void = null_mut();
        let rc = if let Some(p) = v2 {
            let mut status: c_int = 0;
            // SAFETY: p is the driver's cuGetProcAddress_v2 (stored only from a successful
            // lookup of that ABI); all pointers are valid locals.
            unsafe {
                std::mem::transmute::<*mut c_void, GetProcAddressV2>(p)(
                    name.as_ptr(),
                    &mut pfn,
                    version,
                    0,
                    &mut status,
                )
            }
        } else if let Some(p) = v1 {
            // SAFETY: as above, v1 ABI.
            unsafe {
                std::mem::transmute::<*mut c_void, GetProcAddressV1>(p)(
                    name.as_ptr(),
                    &mut pfn,
                    version,
                    0,
                )
            }
        } else {
            return null_mut();
        };
        if rc == CUDA_SUCCESS {
            pfn
        } else {
            null_mut()
        }
    };
    if v2.is_none() && v1.is_none() {
        return; // try again at the next call: a cuGetProcAddress may be captured later
    }
    CTX_GET_DEVICE.store(lookup(c"cuCtxGetDevice", 2000), Ordering::Relaxed);
    GET_PCI_BUS_ID.store(lookup(c"cuDeviceGetPCIBusId", 4010), Ordering::Relaxed);
    // 11040 selects the MIG-aware UUID entry point; older drivers only have 9020.
    let mut uuid = lookup(c"cuDeviceGetUuid", 11040);
    if uuid.is_null() {
        uuid = lookup(c"cuDeviceGetUuid", 9020);
    }
    GET_UUID.store(uuid, Ordering::Relaxed);
    GET_NAME.store(lookup(c"cuDeviceGetName", 2000), Ordering::Relaxed);
    GET_ERROR_STRING.store(lookup(c"cuGetErrorString", 6000), Ordering::Relaxed);
    RESOLVED.store(1, Ordering::Release);
}

/// The calling thread's current device, or unknown fields. Never initializes CUDA.
pub fn current() -> DeviceIdentity {
    resolve();
    let mut id = DeviceIdentity::UNKNOWN;
    let ctx = CTX_GET_DEVICE.load(Ordering::Relaxed);
    if ctx.is_null() {
        return id;
    }
    let mut dev: CuDevice = -1;
    // SAFETY: the driver's cuCtxGetDevice with a valid out pointer.
    let rc = unsafe { std::mem::transmute::<*mut c_void, CtxGetDeviceFn>(ctx)(&mut dev) };
    if rc != CUDA_SUCCESS || dev < 0 {
        return id;
    }
    id.ordinal = dev as u64;
    let slot = usize::try_from(dev).ok().filter(|&d| d < CACHED);
    id.pci_bus_id = match slot.map(|d| PCI_CACHE[d].load(Ordering::Relaxed)) {
        Some(v) if v & VALID != 0 => v & !VALID,
        _ => {
            let v = query_pci(dev);
            if let (Some(d), true) = (slot, v != UNKNOWN) {
                PCI_CACHE[d].store(v | VALID, Ordering::Relaxed);
            }
            v
        }
    };
    let cached = slot.filter(|&d| UUID_VALID[d].load(Ordering::Acquire) == 1);
    (id.uuid_hi, id.uuid_lo) = match cached {
        Some(d) => (
            UUID_CACHE[d][0].load(Ordering::Relaxed),
            UUID_CACHE[d][1].load(Ordering::Relaxed),
        ),
        None => {
            let (hi, lo) = query_uuid(dev);
            if let (Some(d), true) = (slot, hi != UNKNOWN || lo != UNKNOWN) {
                UUID_CACHE[d][0].store(hi, Ordering::Relaxed);
                UUID_CACHE[d][1].store(lo, Ordering::Relaxed);
                UUID_VALID[d].store(1, Ordering::Release);
            }
            (hi, lo)
        }
    };
    id
}

fn query_pci(dev: CuDevice) -> u64 {
    let f = GET_PCI_BUS_ID.load(Ordering::Relaxed);
    if f.is_null() {
        return UNKNOWN;
    }
    let mut buf = [0 as c_char; 32];
    // SAFETY: the driver's cuDeviceGetPCIBusId writing at most `len` bytes into buf.
    let rc = unsafe {
        std::mem::transmute::<*mut c_void, DeviceGetPciBusIdFn>(f)(
            buf.as_mut_ptr(),
            buf.len() as c_int - 1,
            dev,
        )
    };
    if rc != CUDA_SUCCESS {
        return UNKNOWN;
    }
    // SAFETY: buf is zero-initialized and one byte longer than the driver may write.
    let s = unsafe { CStr::from_ptr(buf.as_ptr()) }.to_bytes();
    parse_pci_bus_id(s).unwrap_or(UNKNOWN)
}

fn query_uuid(dev: CuDevice) -> (u64, u64) {
    let f = GET_UUID.load(Ordering::Relaxed);
    if f.is_null() {
        return (UNKNOWN, UNKNOWN);
    }
    let mut uuid = CuUuid::default();
    // SAFETY: the driver's cuDeviceGetUuid with a valid out pointer.
    let rc = unsafe { std::mem::transmute::<*mut c_void, DeviceGetUuidFn>(f)(&mut uuid, dev) };
    if rc != CUDA_SUCCESS {
        return (UNKNOWN, UNKNOWN);
    }
    let (hi, lo) = uuid.bytes.split_at(8);
    (
        u64::from_be_bytes(hi.try_into().unwrap_or_default()),
        u64::from_be_bytes(lo.try_into().unwrap_or_default()),
    )
}

/// The driver's own description of a CUresult (`cuGetErrorString`: a static string, and a
/// call that needs no initialized driver).
pub fn error_string(rc: CuResult) -> Option<&'static CStr> {
    resolve();
    let f = GET_ERROR_STRING.load(Ordering::Relaxed);
    if f.is_null() {
        return None;
    }
    let mut p: *const c_char = std::ptr::null();
    // SAFETY: the driver's cuGetErrorString with a valid out pointer.
    let r = unsafe { std::mem::transmute::<*mut c_void, GetErrorStringFn>(f)(rc, &mut p) };
    // SAFETY: on success the driver points at a static NUL-terminated string.
    (r == CUDA_SUCCESS && !p.is_null()).then(|| unsafe { CStr::from_ptr(p) })
}

/// The device's marketing name (`cuDeviceGetName`), if the driver gives one.
fn name(dev: CuDevice) -> Option<String> {
    let f = GET_NAME.load(Ordering::Relaxed);
    if f.is_null() {
        return None;
    }
    let mut buf = [0 as c_char; 128];
    // SAFETY: the driver's cuDeviceGetName writing at most `len` bytes into buf.
    let rc = unsafe {
        std::mem::transmute::<*mut c_void, DeviceGetNameFn>(f)(
            buf.as_mut_ptr(),
            buf.len() as c_int - 1,
            dev,
        )
    };
    if rc != CUDA_SUCCESS {
        return None;
    }
    // SAFETY: zero-initialized, one byte longer than the driver may write.
    let s = unsafe { CStr::from_ptr(buf.as_ptr()) };
    Some(s.to_string_lossy().into_owned()).filter(|s| !s.is_empty())
}

/// Which ordinals already have a GPU snapshot in which dump (a forked child's dump is new).
static NOTED_FOR: AtomicUsize = AtomicUsize::new(0);
static NOTED: AtomicU64 = AtomicU64::new(0);

/// `SnapshotTaken` reason of the GPU identity snapshot the driver hooks write.
pub const SNAPSHOT_REASON_DRIVER_GPU: u64 = 2;

/// The first time a dump sees a device's identity, stores it as a `Gpu` snapshot (the same JSON
/// shape the CLI reads for GPU facts), so cross-rank rules (same GPU twice, containers that
/// each see "device 0") work from driver evidence. Rare path: once per device per dump.
pub fn note_gpu(rec: &Recorder, ring: &RingWriter, id: &DeviceIdentity) {
    let Some(bit) = (id.ordinal < CACHED as u64).then(|| 1u64 << id.ordinal) else {
        return;
    };
    let me = rec as *const Recorder as usize;
    if NOTED_FOR.load(Ordering::Acquire) != me {
        NOTED_FOR.store(me, Ordering::Release);
        NOTED.store(0, Ordering::Release);
    }
    if NOTED.fetch_or(bit, Ordering::AcqRel) & bit != 0 {
        return;
    }
    let mut v = serde_json::json!({ "ordinal": id.ordinal, "source": "driver" });
    if id.pci_bus_id != UNKNOWN {
        v["pci_bus_id"] = format_pci_bus_id(id.pci_bus_id).into();
    }
    if id.uuid_hi != UNKNOWN || id.uuid_lo != UNKNOWN {
        v["uuid"] = format_uuid(id.uuid_hi, id.uuid_lo).into();
    }
    if let Some(n) = name(id.ordinal as CuDevice) {
        v["name"] = n.into();
    }
    let Ok(json) = serde_json::to_vec(&v) else {
        return;
    };
    let mut e = Entry::new(RecordKind::Snapshot, CallId::SnapshotTaken);
    e.blob = rec.append_blob(BlobKind::Gpu, &json);
    e.args = ncclshim_dump::schema::args::SnapshotTaken {
        reason: SNAPSHOT_REASON_DRIVER_GPU,
        blob_kind: BlobKind::Gpu as u64,
    }
    .to_args();
    ring.instant(&e);
}

/// Packed bus id → `"0000:3b:00.0"` (NCCL's spelling).
pub fn format_pci_bus_id(v: u64) -> String {
    format!(
        "{:04x}:{:02x}:{:02x}.{:x}",
        v >> 16,
        (v >> 8) & 0xff,
        (v >> 3) & 0x1f,
        v & 7
    )
}

/// `"GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"`, as nvidia-smi prints it.
pub fn format_uuid(hi: u64, lo: u64) -> String {
    format!(
        "GPU-{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
        hi >> 32,
        (hi >> 16) & 0xffff,
        hi & 0xffff,
        lo >> 48,
        lo & 0xffff_ffff_ffff
    )
}

/// `"0000:65:00.0"` / `"00000000:65:00.0"` → `domain << 16 | bus << 8 | device << 3 | function`.
pub fn parse_pci_bus_id(s: &[u8]) -> Option<u64> {
    let s = std::str::from_utf8(s).ok()?;
    let (domain, rest) = s.split_once(':')?;
    let (bus, rest) = rest.split_once(':')?;
    let (device, function) = rest.split_once('.')?;
    let domain = u64::from_str_radix(domain, 16)
        .ok()
        .filter(|&v| v <= u64::from(u32::MAX))?;
    let bus = u64::from_str_radix(bus, 16).ok().filter(|&v| v <= 0xff)?;
    let device = u64::from_str_radix(device, 16)
        .ok()
        .filter(|&v| v <= 0x1f)?;
    let function = u64::from_str_radix(function, 16)
        .ok()
        .filter(|&v| v <= 0x7)?;
    Some(domain << 16 | bus << 8 | device << 3 | function)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pci_bus_ids_pack() {
        assert_eq!(parse_pci_bus_id(b"0000:65:00.0"), Some(0x65 << 8));
        assert_eq!(
            parse_pci_bus_id(b"00000001:b3:1f.7"),
            Some(1 << 16 | 0xb3 << 8 | 0x1f << 3 | 7)
        );
        assert_eq!(parse_pci_bus_id(b"0000:65:00"), None);
        assert_eq!(parse_pci_bus_id(b"0000:165:00.0"), None);
        assert_eq!(parse_pci_bus_id(b""), None);
        for s in ["0000:3b:00.0", "0001:b3:1f.7"] {
            assert_eq!(
                format_pci_bus_id(parse_pci_bus_id(s.as_bytes()).unwrap()),
                s
            );
        }
    }

    #[test]
    fn uuids_print_like_nvidia_smi() {
        assert_eq!(
            format_uuid(0xa0a1_a2a3_a4a5_a6a7, 0xa8a9_aaab_acad_aeaf),
            "GPU-a0a1a2a3-a4a5-a6a7-a8a9-aaabacadaeaf"
        );
    }
}
