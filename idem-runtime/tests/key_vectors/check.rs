//! Checks of the vectors file against this build (shared with `tests/feature-probe`, which runs
//! them with other serde_json features).

use super::cases::{build, enc, hex, json_digest};
use super::file::File;

/// Reads the vectors file at `path`.
pub fn load(path: &str) -> File {
    let text = std::fs::read_to_string(path).expect("tests/vectors/keys.json exists");
    serde_json::from_str(&text).expect("tests/vectors/keys.json parses")
}

/// Every vector of `file` is what this build computes from the typed values.
pub fn file_matches_this_build(file: &File) {
    let built = build();
    assert_eq!(file.encoding_version, built.encoding_version);
    assert_eq!(file.contexts, built.contexts);
    assert!(file.key_vectors.len() >= 20);
    assert_eq!(file.key_vectors.len(), built.key_vectors.len());
    for (f, b) in file.key_vectors.iter().zip(&built.key_vectors) {
        assert_eq!(f, b, "key vector `{}`", f.id);
    }
    assert_eq!(file.value_vectors.len(), built.value_vectors.len());
    for (f, b) in file.value_vectors.iter().zip(&built.value_vectors) {
        assert_eq!(f, b, "value vector `{}`", f.id);
    }
}

/// The JSON form of every vector, as the file spells it (parsed by this build's serde_json),
/// hashes to the vector's key, fingerprint or encoding exactly when `json_equivalent` says so.
pub fn json_forms_hash_as_stated(file: &File) {
    for v in &file.key_vectors {
        let (key, fp) = json_digest(
            (&v.namespace, &v.turn_id, &v.tool, v.version),
            &v.args,
            v.fingerprint_only_args.as_ref(),
            v.caller_key.as_deref(),
        );
        let same = key.to_hex() == v.key && fp.to_hex() == v.fingerprint;
        assert_eq!(same, v.json_equivalent, "key vector `{}`", v.id);
    }
    for v in &file.value_vectors {
        let same = v.json.as_ref().map(|j| hex(&enc(j)) == v.encoding);
        assert_eq!(same, v.json_equivalent, "value vector `{}`", v.id);
    }
}
