//! Templating (to be filled in).
