//! An open pool's session owner, sealed under the session's access token in its store record
//! (docs/sessions.md, "Surviving the pod"). On an open executor a session's owner is its
//! caller's `authorization` (E2B's API key), which an E2B data-plane call does not carry: the
//! executor that resumes a drain-paused sandbox from such a call opens the owner with the
//! token the call presents. The record holds only the sealed bytes; the token never leaves
//! the session's holder and its clients, and the owner's SHA-256 beside it is still checked.

use chacha20poly1305::XChaCha20Poly1305;
use chacha20poly1305::aead::{Aead, KeyInit};
use sha2::{Digest, Sha256};

/// The key for `token`'s seal: one token seals one owner, so a fixed nonce is never reused
/// under a key with another message.
fn cipher(token: &[u8]) -> XChaCha20Poly1305 {
    let key = Sha256::new()
        .chain_update(b"sandpool-owner-seal\0")
        .chain_update(token)
        .finalize();
    XChaCha20Poly1305::new(&key)
}

/// `owner` sealed under `token`, hex.
pub(super) fn seal(token: &[u8], owner: &[u8]) -> Option<String> {
    let sealed = cipher(token).encrypt(&Default::default(), owner).ok()?;
    Some(sealed.iter().map(|b| format!("{b:02x}")).collect())
}

/// The owner `sealed` holds, if `token` sealed it (else None: another token, or altered).
pub(super) fn open(token: &[u8], sealed: &str) -> Option<Vec<u8>> {
    if !sealed.len().is_multiple_of(2) || sealed.len() > 8192 {
        return None;
    }
    let bytes: Option<Vec<u8>> = (0..sealed.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(sealed.get(i..i + 2)?, 16).ok())
        .collect();
    cipher(token).decrypt(&Default::default(), bytes?.as_slice()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_its_token_opens_it() {
        let s = seal(b"token-a", b"bearer-key").expect("sealed");
        assert!(!s.contains("bearer"), "{s}");
        assert_eq!(open(b"token-a", &s).as_deref(), Some(b"bearer-key".as_slice()));
        assert_eq!(open(b"token-b", &s), None);
        let mut altered = s.clone().into_bytes();
        altered[0] = if altered[0] == b'0' { b'1' } else { b'0' };
        assert_eq!(open(b"token-a", &String::from_utf8(altered).expect("hex")), None);
        assert_eq!(open(b"token-a", "zz"), None);
        assert_eq!(open(b"token-a", "abc"), None);
    }
}
