//! supervision (to be filled in).
