//! placeholder
#![cfg(feature = "redis")]
