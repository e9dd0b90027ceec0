//! Host facts (placeholder until the host-facts work lands).
