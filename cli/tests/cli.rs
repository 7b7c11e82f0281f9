//! CLI golden tests (filled in below).
