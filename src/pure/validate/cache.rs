//! Validation cache (to be filled in).
