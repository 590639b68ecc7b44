//! actors (to be filled in).
