//! libncclshim.so (placeholder).
