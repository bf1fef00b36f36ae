//! Helpers shared by the SQLite tests.
#![allow(dead_code)]

pub use idem_test_support::TempDir;
