//! Semantic check with `haproxy -c` (to be filled in).
