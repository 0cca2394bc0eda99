//! Encryption at rest: XChaCha20-Poly1305 in the STREAM construction (RustCrypto's
//! `aead-stream`), so a blob is sealed and opened chunk by chunk as it streams.
//!
//! A sealed blob is `MAGIC`, a random 19-byte nonce prefix, then chunks of `CHUNK` plaintext
//! bytes plus a 16-byte tag each; the last chunk is always shorter than a full one (it may be
//! empty) and sealed as the last, so a blob cut at a chunk boundary fails to open. Every
//! chunk's associated data is the blob's key (tenant, kind, id): a blob copied under another
//! key, even another tenant's, fails to open too.

use crate::error::StoreError;
use aead_stream::{DecryptorBE32, EncryptorBE32};
use chacha20poly1305::XChaCha20Poly1305;
use chacha20poly1305::aead::KeyInit;
use std::fmt;
use std::path::Path;

/// Plaintext bytes per sealed chunk.
pub const CHUNK: usize = 64 * 1024;
/// Bytes a chunk's tag adds.
pub const TAG: usize = 16;
/// What a sealed blob starts with (format version 1).
pub const MAGIC: &[u8; 4] = b"SPS1";
/// The STREAM nonce prefix: XChaCha20's 24 bytes less BE32's 4-byte counter and 1-byte flag.
const NONCE_PREFIX: usize = 19;
/// Bytes before the first chunk.
pub const HEADER: usize = MAGIC.len() + NONCE_PREFIX;

/// The store's key; it seals and opens blobs.
#[derive(Clone)]
pub struct Sealer {
    aead: XChaCha20Poly1305,
}

impl fmt::Debug for Sealer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Sealer(..)")
    }
}

impl Sealer {
    /// From 32 key bytes.
    pub fn new(key: &[u8]) -> Result<Sealer, StoreError> {
        let aead = XChaCha20Poly1305::new_from_slice(key)
            .map_err(|_| StoreError::Config(format!("the key is {} bytes, not 32", key.len())))?;
        Ok(Sealer { aead })
    }

    /// From a key file (a Secret's mount): 32 raw bytes, or 64 hex digits (blanks around them
    /// ignored). Read once at start-up.
    pub fn from_file(path: &Path) -> Result<Sealer, StoreError> {
        let raw = std::fs::read(path)
            .map_err(|e| StoreError::Config(format!("--session-store-key-file {}: {e}", path.display())))?;
        let key = parse_key(&raw)
            .map_err(|why| StoreError::Config(format!("--session-store-key-file {}: {why}", path.display())))?;
        Sealer::new(&key)
    }

    /// A new blob's header and its chunk sealer.
    pub(crate) fn seal(&self, aad: &str) -> Result<(Vec<u8>, Sealing), StoreError> {
        let mut prefix = [0u8; NONCE_PREFIX];
        getrandom::fill(&mut prefix).map_err(|e| StoreError::Config(format!("no randomness for a nonce: {e}")))?;
        let enc = EncryptorBE32::from_aead(self.aead.clone(), (&prefix).into());
        let mut header = Vec::with_capacity(HEADER);
        header.extend_from_slice(MAGIC);
        header.extend_from_slice(&prefix);
        Ok((
            header,
            Sealing {
                enc: Some(enc),
                aad: aad.to_owned(),
            },
        ))
    }

    /// The chunk opener for a blob whose first `HEADER` bytes are `header`.
    pub(crate) fn open(&self, aad: &str, header: &[u8]) -> Result<Opening, StoreError> {
        if header.len() != HEADER || !header.starts_with(MAGIC) {
            return Err(StoreError::sealed(aad, "not a sealed blob (no header)"));
        }
        let prefix: [u8; NONCE_PREFIX] = header[MAGIC.len()..]
            .try_into()
            .map_err(|_| StoreError::sealed(aad, "not a sealed blob (short header)"))?;
        let dec = DecryptorBE32::from_aead(self.aead.clone(), (&prefix).into());
        Ok(Opening {
            dec: Some(dec),
            aad: aad.to_owned(),
        })
    }
}

fn parse_key(raw: &[u8]) -> Result<Vec<u8>, String> {
    if raw.len() == 32 {
        return Ok(raw.to_vec());
    }
    let text = std::str::from_utf8(raw).map_err(|_| "neither 32 raw bytes nor 64 hex digits".to_owned())?;
    let hex = text.trim();
    if hex.len() != 64 {
        return Err(format!("{} bytes: neither 32 raw bytes nor 64 hex digits", raw.len()));
    }
    (0..32)
        .map(|i| {
            hex.get(2 * i..2 * i + 2)
                .and_then(|d| u8::from_str_radix(d, 16).ok())
                .ok_or_else(|| "not hex".to_owned())
        })
        .collect()
}

/// Seals one blob's chunks in order.
pub(crate) struct Sealing {
    enc: Option<EncryptorBE32<XChaCha20Poly1305>>,
    aad: String,
}

impl Sealing {
    /// Seals `chunk` in place: a full chunk (`CHUNK` bytes) as one of many, a shorter one as
    /// the last (after which nothing more may be sealed).
    pub(crate) fn chunk(&mut self, chunk: &mut Vec<u8>) -> Result<(), StoreError> {
        let sealed = if chunk.len() == CHUNK {
            self.enc
                .as_mut()
                .map(|e| e.encrypt_next_in_place(self.aad.as_bytes(), chunk))
        } else {
            self.enc
                .take()
                .map(|e| e.encrypt_last_in_place(self.aad.as_bytes(), chunk))
        };
        match sealed {
            Some(Ok(())) => Ok(()),
            Some(Err(_)) => Err(StoreError::sealed(&self.aad, "sealing failed")),
            None => Err(StoreError::sealed(&self.aad, "sealed past the last chunk")),
        }
    }
}

/// Opens one blob's chunks in order.
pub(crate) struct Opening {
    dec: Option<DecryptorBE32<XChaCha20Poly1305>>,
    aad: String,
}

impl Opening {
    /// Opens `chunk` in place: `CHUNK + TAG` bytes as one of many, fewer as the last.
    pub(crate) fn chunk(&mut self, chunk: &mut Vec<u8>) -> Result<(), StoreError> {
        let opened = if chunk.len() == CHUNK + TAG {
            self.dec
                .as_mut()
                .map(|d| d.decrypt_next_in_place(self.aad.as_bytes(), chunk))
        } else {
            self.dec
                .take()
                .map(|d| d.decrypt_last_in_place(self.aad.as_bytes(), chunk))
        };
        match opened {
            Some(Ok(())) => Ok(()),
            Some(Err(_)) => Err(StoreError::sealed(
                &self.aad,
                "authentication failed (a wrong key, or the blob was altered or moved)",
            )),
            None => Err(StoreError::sealed(&self.aad, "data past the last chunk")),
        }
    }

    /// Whether the last chunk was opened: a blob that ends before it was cut short.
    pub(crate) fn finished(&self) -> bool {
        self.dec.is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roundtrip(sealer: &Sealer, opener: &Sealer, plain: &[u8]) -> Result<Vec<u8>, StoreError> {
        let (header, mut s) = sealer.seal("t/paused/a")?;
        let mut sealed = header;
        let mut chunks = plain.chunks(CHUNK).collect::<Vec<_>>();
        if plain.len().is_multiple_of(CHUNK) {
            chunks.push(&[]);
        }
        for c in chunks {
            let mut buf = c.to_vec();
            s.chunk(&mut buf)?;
            sealed.extend_from_slice(&buf);
        }
        let mut o = opener.open("t/paused/a", &sealed[..HEADER])?;
        let mut out = Vec::new();
        for c in sealed[HEADER..].chunks(CHUNK + TAG) {
            let mut buf = c.to_vec();
            o.chunk(&mut buf)?;
            out.extend_from_slice(&buf);
        }
        assert!(o.finished());
        Ok(out)
    }

    #[test]
    fn sealed_chunks_open_with_the_same_key_only() {
        let a = Sealer::new(&[7; 32]).unwrap();
        let b = Sealer::new(&[8; 32]).unwrap();
        for len in [0, 1, CHUNK - 1, CHUNK, CHUNK + 1, 3 * CHUNK] {
            let plain: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
            assert_eq!(roundtrip(&a, &a, &plain).unwrap(), plain, "len {len}");
            assert!(
                matches!(roundtrip(&a, &b, &plain), Err(StoreError::Sealed { .. })),
                "len {len}"
            );
        }
    }

    #[test]
    fn key_files_hold_raw_or_hex_keys() {
        assert_eq!(parse_key(&[1; 32]).unwrap(), vec![1; 32]);
        assert_eq!(
            parse_key(format!("{}\n", "ab".repeat(32)).as_bytes()).unwrap(),
            vec![0xab; 32]
        );
        assert!(parse_key(b"short").is_err());
        assert!(parse_key("zz".repeat(32).as_bytes()).is_err());
    }
}
