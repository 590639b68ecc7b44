//! messages (to be filled in).
