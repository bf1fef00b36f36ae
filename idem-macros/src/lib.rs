//! Procedural macros for [`idem`](https://docs.rs/idem). Depend on `idem`, not on this crate.
#![forbid(unsafe_code)]
