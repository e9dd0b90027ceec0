//! Opening the dump directory safely, and creating dump files relative to it.
//!
//! The default directory `$TMPDIR/ncclshim-<uid>` sits in a world-writable place: any local user
//! could have created it first (owning it, or leaving it 0777) or planted a symbolic link with
//! its name, and then every job under the shim (root's included) would write where that user
//! chose, or let that user move dumps away and plant fake ones. So, as ssh-agent and systemd do
//! for runtime directories, the default directory is created with mode 0700, opened with
//! `O_NOFOLLOW | O_DIRECTORY`, and refused unless it is owned by the effective user and not
//! writable by group or others.
//!
//! A directory the user named (`NCCLSHIM_DIR`) is the user's choice: it may be a symbolic link
//! (`/scratch -> /lustre/...`), be owned by a service account, and be group-writable (a shared
//! job directory is the documented way to collect a job). It is refused only when every user
//! may write it *without* the sticky bit: there anyone could rename or delete the dumps. A file
//! where the directory (or a directory on its path) should be is refused with a sentence that
//! says so, not with `mkdir`'s "File exists".
//!
//! Either way, files are created with `openat` relative to the opened directory (a directory
//! swapped after the check is not followed), `O_CREAT | O_EXCL | O_NOFOLLOW` (a planted file,
//! FIFO or symbolic link with the dump's name is never opened), mode 0600.

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// How much to trust the dump directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DirPolicy {
    /// The default per-user directory in a shared temporary directory: must be a real
    /// directory, owned by the effective user, not writable by group or others.
    Private,
    /// A directory the user chose: followed if a link; refused only when world-writable
    /// without the sticky bit.
    Chosen,
}

/// Why the directory could not be used.
#[derive(Debug)]
pub enum DirError {
    /// A system call failed (`step`, errno).
    Os(&'static str, i32),
    /// The directory exists but is not safe to write into (the sentence says why).
    Refused(String),
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// Creates (if needed) and opens `dir` under `policy`, returning a directory descriptor to
/// create files in.
pub fn open_dump_dir(dir: &Path, policy: DirPolicy) -> Result<OwnedFd, DirError> {
    let c = CString::new(dir.as_os_str().as_bytes())
        .map_err(|_| DirError::Os("mkdir", libc::EINVAL))?;
    match policy {
        DirPolicy::Private => {
            if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
                // The parent is the temporary directory itself (or a TMPDIR not made yet).
                if let Err(e) = std::fs::create_dir_all(parent) {
                    return Err(DirError::Os("mkdir", e.raw_os_error().unwrap_or(libc::EIO)));
                }
            }
            // SAFETY: c is a valid NUL-terminated path.
            if unsafe { libc::mkdir(c.as_ptr(), 0o700) } != 0 && errno() != libc::EEXIST {
                return Err(DirError::Os("mkdir", errno()));
            }
        }
        DirPolicy::Chosen => {
            if let Err(e) = std::fs::create_dir_all(dir) {
                let errno = e.raw_os_error().unwrap_or(libc::EIO);
                return Err(match file_in_the_way(dir, errno) {
                    Some(why) => DirError::Refused(why),
                    None => DirError::Os("mkdir", errno),
                });
            }
        }
    }
    let nofollow = match policy {
        DirPolicy::Private => libc::O_NOFOLLOW,
        DirPolicy::Chosen => 0,
    };
    // SAFETY: c is a valid NUL-terminated path; the flags open a directory read-only.
    let fd = unsafe {
        libc::open(
            c.as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC | nofollow,
        )
    };
    if fd < 0 {
        let e = errno();
        if policy == DirPolicy::Private && (e == libc::ELOOP || e == libc::ENOTDIR) {
            return Err(DirError::Refused(format!(
                "it is a symbolic link or not a directory; the default dump directory must be a real directory owned by uid {} with no group/other write (remove it, or set NCCLSHIM_DIR)",
                euid()
            )));
        }
        return Err(DirError::Os("open", e));
    }
    // SAFETY: fd was just opened and is owned by nothing else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: an all-zero `stat` is a valid value to be overwritten.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fd is open and st is a valid out-pointer.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
        return Err(DirError::Os("fstat", errno()));
    }
    refusal(policy, st.st_uid, st.st_mode, euid()).map_or(Ok(fd), |why| Err(DirError::Refused(why)))
}

/// When creating a chosen directory failed because a file stands where a directory must be (the
/// path itself: `EEXIST`; a directory on the way: `ENOTDIR`), the sentence saying so: "File
/// exists" does not tell the user that `NCCLSHIM_DIR` names a file (issue 36).
fn file_in_the_way(dir: &Path, errno: i32) -> Option<String> {
    if errno != libc::EEXIST && errno != libc::ENOTDIR {
        return None;
    }
    let file = dir
        .ancestors()
        .find(|p| !p.as_os_str().is_empty() && std::fs::metadata(p).is_ok_and(|m| !m.is_dir()))?;
    Some(if file == dir {
        "NCCLSHIM_DIR names a file, not a directory".to_owned()
    } else {
        format!(
            "{} on the way to it is a file, not a directory",
            file.display()
        )
    })
}

fn euid() -> u32 {
    // SAFETY: geteuid cannot fail and has no preconditions.
    unsafe { libc::geteuid() }
}

/// Why a directory with this owner and mode is refused under `policy` (None: accepted).
fn refusal(policy: DirPolicy, owner: u32, mode: u32, euid: u32) -> Option<String> {
    match policy {
        DirPolicy::Private if owner != euid => Some(format!(
            "it is owned by uid {owner}, not by this user (uid {euid}): another user made it first (remove it, or set NCCLSHIM_DIR)"
        )),
        DirPolicy::Private if mode & 0o022 != 0 => Some(format!(
            "its mode {:04o} lets group or others write into it; the default dump directory must not (chmod 700 it, or set NCCLSHIM_DIR)",
            mode & 0o7777
        )),
        DirPolicy::Chosen if mode & 0o002 != 0 && mode & libc::S_ISVTX == 0 => Some(format!(
            "its mode {:04o} lets every user rename or delete the dumps in it (world-writable without the sticky bit; chmod o-w or +t it)",
            mode & 0o7777
        )),
        _ => None,
    }
}

/// Creates `name` in the directory `dir` (`O_EXCL | O_NOFOLLOW`, mode 0600): a raw descriptor
/// the caller owns, or the errno.
pub fn create_in(dir: &OwnedFd, name: &str) -> Result<i32, i32> {
    let c = CString::new(name).map_err(|_| libc::EINVAL)?;
    // SAFETY: dir is an open directory descriptor and c a valid NUL-terminated name.
    let fd = unsafe {
        libc::openat(
            dir.as_raw_fd(),
            c.as_ptr(),
            libc::O_RDWR | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            0o600 as libc::c_uint,
        )
    };
    if fd < 0 {
        return Err(errno());
    }
    // The umask cannot widen 0600, but an inherited default ACL could: make it exact.
    // SAFETY: fd is valid.
    unsafe { libc::fchmod(fd, 0o600) };
    Ok(fd)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_each_policy_refuses() {
        use DirPolicy::*;
        assert_eq!(refusal(Private, 1000, 0o40700, 1000), None);
        assert_eq!(refusal(Private, 1000, 0o40755, 1000), None);
        assert!(refusal(Private, 0, 0o40700, 1000)
            .unwrap()
            .contains("owned by uid 0"));
        assert!(refusal(Private, 1000, 0o40770, 1000)
            .unwrap()
            .contains("0770"));
        assert!(refusal(Private, 1000, 0o41777, 1000).is_some());
        assert_eq!(
            refusal(Chosen, 0, 0o40775, 1000),
            None,
            "a shared job directory"
        );
        assert_eq!(refusal(Chosen, 0, 0o41777, 1000), None, "sticky, like /tmp");
        assert!(refusal(Chosen, 0, 0o40777, 1000)
            .unwrap()
            .contains("sticky"));
    }
}
