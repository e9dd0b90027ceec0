//! How far the reading of a job's dumps has got, for a front end to show (the `ncclshim` CLI
//! draws a progress bar from it). The library only ticks it: it knows nothing of terminals, so
//! it carries no progress-bar dependency.

/// Told how many files will be read, then once per file read (from the reading threads, hence
/// `Sync`).
pub trait Progress: Sync {
    /// How many files will be read.
    fn set_length(&self, files: u64);
    /// `files` more have been read.
    fn inc(&self, files: u64);
}
