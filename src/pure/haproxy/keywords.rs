//! Keyword tables of HAProxy 2.6 (to be filled in).
