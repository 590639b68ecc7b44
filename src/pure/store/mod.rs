//! Resource stores (to be filled in).
