//! Nothing but tests: `tests/vectors.rs` computes idem's key vectors in a build with serde_json's
//! optional features on and checks them against `tests/vectors/keys.json`.

#![forbid(unsafe_code)]
