//! The header page, checked and decoded: the file's identity (magic, endianness, version,
//! sizes), its geometry recomputed from the counts and compared with what the header claims,
//! and what the header says about the writer, its clock and its end ([`HeaderInfo`]).

use super::bytes::*;
use super::model::*;
use super::source::*;
use crate::layout::*;
use crate::liveness::writer_may_be_alive;
use std::collections::BTreeMap;
use std::path::Path;

pub(super) struct Geo {
    pub(super) time_base: crate::timebase::TimeBase,
    /// Bytes actually present: every read is clipped to this, so a header that claims a huge
    /// geometry on a small file cannot make the reader allocate more than the file holds.
    pub(super) len: u64,
    pub(super) ring_dir_offset: u64,
    pub(super) rings_offset: u64,
    pub(super) arena_offset: u64,
    pub(super) arena_size: u64,
    pub(super) keep_offset: u64,
    pub(super) keep_slots: u32,
    pub(super) comm_offset: u64,
    /// Entries handed out and present (at most the table's size).
    pub(super) comm_entries: u32,
    /// The keep ring's directory entry, copied from the header.
    pub(super) keep_dir: Vec<u8>,
    /// Format 2: rings and blobs are extents of a growing tail from `arena_offset` to `tail_end`.
    pub(super) grows: bool,
    pub(super) overflow_slots: u32,
    pub(super) tail_end: u64,
}

/// The header checked and decoded, and the file's geometry: a `Dump` with no records, blobs or
/// communicators yet (`decode` and the streaming reader fill those in).
pub(super) fn decode_header<S: Source + ?Sized>(
    src: &S,
    path: &Path,
) -> Result<(Dump, Geo), DumpError> {
    let p = || path.to_path_buf();
    let io_err = |source| DumpError::Io { path: p(), source };
    let len = src.size().map_err(io_err)?;
    if len < HEADER_SIZE as u64 {
        return Err(DumpError::TooShort { path: p(), len });
    }
    let mut h = vec![0u8; HEADER_SIZE];
    src.read_at(0, &mut h).map_err(io_err)?;
    let (major, minor) = check_identity(&h, path)?;
    let geo = checked_geometry(&h, major, minor, path)?;
    let mut warnings = Vec::new();
    let file_size = u64_at(&h, 256);
    if len < file_size {
        warnings.push(Warning {
            offset: len,
            message: format!("file truncated: {len} of {file_size} bytes present"),
        });
    }
    let (header, time_base) = header_info(&h, major, minor, &geo, &mut warnings);
    let x = HEADER_EXT_OFFSET;
    let grows = major >= 2;
    let comm_next = if minor >= 1 || grows {
        u32_at(&h, x + 32)
    } else {
        0
    };
    let tail_reserved = if grows {
        u64_at(&h, HEADER_EXT2_OFFSET + 8)
    } else {
        0
    };
    let g = Geo {
        time_base: time_base.unwrap_or(crate::timebase::TimeBase::Monotonic),
        len,
        ring_dir_offset: geo.ring_dir_offset,
        rings_offset: geo.rings_offset,
        arena_offset: geo.arena_offset,
        arena_size: geo.arena_size,
        keep_offset: geo.keep_offset,
        keep_slots: geo.keep_slots,
        comm_offset: geo.comm_offset,
        comm_entries: geo.comm_entries.min(comm_next),
        keep_dir: h[x + 80..x + 144].to_vec(),
        grows,
        overflow_slots: geo.overflow_slots,
        tail_end: geo
            .arena_offset
            .saturating_add(tail_reserved.min(geo.tail_max)),
    };
    let dump = Dump {
        comms: Vec::new(),
        path: p(),
        header,
        rings: Vec::new(),
        records: Vec::new(),
        blobs: BTreeMap::new(),
        summary: Summary::default(),
        warnings,
    };
    Ok((dump, g))
}

/// Whether the page is a dump header this reader can read: magic (a zeroed magic is a header
/// still being written), endianness, format version, header and slot sizes. The version on
/// success.
fn check_identity(h: &[u8], path: &Path) -> Result<(u16, u16), DumpError> {
    let p = || path.to_path_buf();
    let magic: [u8; 8] = h[0..8].try_into().expect("8 bytes");
    let major = u16_at(h, 8);
    let minor = u16_at(h, 10);
    if magic != MAGIC {
        // A writer fills the header and stores the magic last.
        if magic == [0; 8]
            && ((OLDEST_MAJOR..=FORMAT_MAJOR).contains(&major) || h[..16].iter().all(|&b| b == 0))
        {
            return Err(DumpError::Incomplete { path: p(), major });
        }
        return Err(DumpError::NotADump {
            path: p(),
            found: magic,
        });
    }
    let endian = u32_at(h, 12);
    if endian != ENDIAN_MARKER {
        if endian.swap_bytes() == ENDIAN_MARKER {
            return Err(DumpError::WrongEndian {
                path: p(),
                marker: endian,
            });
        }
        return bad(path, 12, format!("endian marker {endian:#x}"));
    }
    if !(OLDEST_MAJOR..=FORMAT_MAJOR).contains(&major) {
        return Err(DumpError::UnsupportedVersion {
            path: p(),
            major,
            minor,
        });
    }
    let (header_size, slot_size) = (u32_at(h, 16), u32_at(h, 20));
    if header_size as usize != HEADER_SIZE || slot_size as usize != SLOT_SIZE {
        return bad(
            path,
            16,
            format!("header size {header_size} / slot size {slot_size}"),
        );
    }
    Ok((major, minor))
}

/// The file's geometry, recomputed from the header's counts (never taken on trust) and held to
/// the offsets and size the header claims.
fn checked_geometry(h: &[u8], major: u16, minor: u16, path: &Path) -> Result<Geometry, DumpError> {
    let ring_count = u32_at(h, 216);
    let slots_per_ring = u32_at(h, 220);
    let claimed = (
        u64_at(h, 224),
        u64_at(h, 232),
        u64_at(h, 240),
        u64_at(h, 248),
    );
    let file_size = u64_at(h, 256);
    let x = HEADER_EXT_OFFSET;
    let grows = major >= 2;
    // Minor 0 files have zeros in the extension (it was reserved space).
    let (keep_slots, comm_entries) = if minor >= 1 || grows {
        (u32_at(h, x), u32_at(h, x + 4))
    } else {
        (0, 0)
    };
    let (keep_offset, comm_offset) = (u64_at(h, x + 8), u64_at(h, x + 16));
    let x2 = HEADER_EXT2_OFFSET;
    let (overflow_slots, tail_max) = (u32_at(h, x2), u64_at(h, x2 + 16));
    // The geometry is recomputed from the counts, never taken on trust.
    let geo = if grows {
        Geometry::grown(
            ring_count,
            slots_per_ring,
            claimed.3,
            keep_slots,
            comm_entries,
            overflow_slots,
        )
        .filter(|g| g.tail_max == tail_max && overflow_slots.is_power_of_two())
    } else {
        Geometry::with_extras(
            ring_count,
            slots_per_ring,
            claimed.3,
            keep_slots,
            comm_entries,
        )
    }
    .filter(|g| {
        (g.ring_dir_offset, g.rings_offset, g.arena_offset, g.arena_size, g.file_size)
            == (claimed.0, claimed.1, claimed.2, claimed.3, file_size)
            && (minor == 0 || (g.keep_offset, g.comm_offset) == (keep_offset, comm_offset))
            && (keep_slots == 0 || keep_slots.is_power_of_two())
    })
        .ok_or_else(|| DumpError::BadHeader {
            path: path.to_path_buf(),
            offset: 216,
            what: format!(
                "inconsistent geometry: {ring_count} rings x {slots_per_ring} slots, offsets {claimed:?}, size {file_size}"
            ),
        })?;
    Ok(geo)
}

/// What the header says about the writer, its clock, its signals and its end, and the time base
/// its record times are in (`None`: unknown, with a warning).
fn header_info(
    h: &[u8],
    major: u16,
    minor: u16,
    geo: &Geometry,
    warnings: &mut Vec<Warning>,
) -> (HeaderInfo, Option<crate::timebase::TimeBase>) {
    let ring_count = u32_at(h, 216);
    let slots_per_ring = u32_at(h, 220);
    let file_size = u64_at(h, 256);
    let x = HEADER_EXT_OFFSET;
    let x2 = HEADER_EXT2_OFFSET;
    let grows = major >= 2;
    let flags_v = u32_at(h, 264);
    let counters: [u64; HEADER_COUNTERS] = std::array::from_fn(|i| u64_at(h, 288 + 8 * i));
    let exit_ns = u64_at(h, 352);
    let boot_id = fixed_str(&h[64..104]);
    let pid = u32_at(h, 48);
    let pid_start_ticks = u64_at(h, 56);
    let clean_exit = flags_v & flags::CLEAN_EXIT != 0;
    let pid_namespace = if grows { u64_at(h, x2 + 24) } else { 0 };
    let writer_alive =
        !clean_exit && writer_may_be_alive(&boot_id, pid_namespace, pid, pid_start_ticks);
    let writer_kind_raw = u32_at(h, 28);
    let clock_kind = u32_at(h, 360);
    let tsc_hz = u64_at(h, 368);
    let anchors: Vec<(u64, u64)> = (0..crate::timebase::ANCHORS)
        .map(|i| 376 + 24 * i)
        .filter(|&o| u64_at(h, o) != 0)
        .map(|o| (u64_at(h, o + 8), u64_at(h, o + 16)))
        .collect();
    let time_base = crate::timebase::TimeBase::new(clock_kind, tsc_hz, &anchors);
    if time_base.is_none() {
        warnings.push(Warning {
            offset: 360,
            message: format!(
                "record times are in an unknown time base (kind {clock_kind}, rate {tsc_hz}); shown raw"
            ),
        });
    }
    let tb = time_base
        .clone()
        .unwrap_or(crate::timebase::TimeBase::Monotonic);
    let last_alive = u64_at(h, x + 24);
    let sig = x + 40;
    let signo = u32_at(h, sig);
    let signal = ((minor >= 1 || grows) && signo != 0 && signo < 65).then(|| SignalInfo {
        signo,
        code: i32_at(h, sig + 4),
        tid: u32_at(h, sig + 8),
        sender_pid: u32_at(h, sig + 12),
        addr: u64_at(h, sig + 16),
        t_ns: tb.to_monotonic_ns(u64_at(h, sig + 24)),
        count: u32_at(h, sig + 32),
        handler_returns: if grows { u32_at(h, x2 + 140) } else { 0 },
    });
    let ext1 = minor >= 1 || grows;
    let comm_next = if ext1 { u32_at(h, x + 32) } else { 0 };
    let header = HeaderInfo {
        last_alive_ns: (ext1 && last_alive != 0).then(|| tb.to_monotonic_ns(last_alive)),
        rings_materialized: if grows {
            u32_at(h, x2 + 4).min(ring_count)
        } else {
            u32_at(h, 268).min(ring_count)
        },
        ring_alloc_failed: if grows { u32_at(h, x2 + 32) } else { 0 },
        run: if grows {
            RunInfo {
                source: fixed_str(&h[x2 + 40..x2 + 64]),
                id: fixed_str(&h[x2 + 64..x2 + 128]),
                launcher_rank: i32_at(h, x2 + 128),
            }
        } else {
            RunInfo::default()
        },
        signal,
        exit: if grows {
            ExitVia::from_u32(u32_at(h, x2 + 132)).map(|via| ExitInfo {
                via,
                status: i32_at(h, x2 + 136),
                t_ns: u64_at(h, x2 + 144),
            })
        } else {
            None
        },
        comms_not_kept: comm_next.saturating_sub(geo.comm_entries),
        major,
        minor,
        writer_kind: WriterKind::from_u32(writer_kind_raw),
        writer_kind_raw,
        writer_version: fixed_str(&h[32..48]),
        pid,
        ppid: u32_at(h, 52),
        pid_start_ticks,
        pid_namespace,
        boot_id,
        hostname: fixed_str(&h[104..168]),
        clocksource: fixed_str(&h[168..184]),
        clock: ClockPair {
            monotonic_ns: u64_at(h, 184),
            realtime_ns: u64_at(h, 192),
            boottime_ns: u64_at(h, 200),
            uncertainty_ns: u64_at(h, 208),
        },
        ring_count,
        slots_per_ring,
        file_size,
        arena_size: geo.arena_size,
        flags: flags_v,
        clean_exit,
        disabled: flags_v & flags::DISABLED != 0,
        nccl_static: flags_v & flags::NCCL_STATIC != 0,
        rings_claimed: u32_at(h, 268).min(ring_count),
        arena_used: u64_at(h, 272).min(geo.arena_size),
        dropped_blobs: u64_at(h, 280),
        counters,
        exit_monotonic_ns: (clean_exit && exit_ns != 0).then_some(exit_ns),
        clock_kind: match clock_kind {
            0 => "monotonic".into(),
            1 => "tsc".into(),
            k => format!("unknown({k})"),
        },
        tsc_hz: (clock_kind == 1 && tsc_hz != 0).then_some(tsc_hz),
        clock_anchors: anchors.len(),
        writer_alive,
    };
    (header, time_base)
}

pub(super) fn bad<T>(path: &Path, offset: u64, what: String) -> Result<T, DumpError> {
    Err(DumpError::BadHeader {
        path: path.to_path_buf(),
        offset,
        what,
    })
}
