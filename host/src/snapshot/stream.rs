//! etcd's own integrity check of a snapshot stream.
//!
//! etcd ends every Maintenance.Snapshot stream with the sha256 of the
//! bytes before it (32 bytes), which `etcdutl snapshot restore` checks.
//! Checking it while streaming catches a stream etcd corrupted or cut
//! short before the object is called good.

use sha2::{Digest, Sha256};

use super::problem::{Problem, reason};
use super::store::Written;

const HASH_LEN: usize = 32;

/// Hashes the whole stream (the object's sha256) and, 32 bytes behind,
/// the snapshot body that etcd's trailer covers.
#[derive(Default)]
pub struct IntegrityHasher {
    whole: Sha256,
    body: Sha256,
    /// The last (up to) 32 bytes seen: etcd's trailer, if the stream ends here.
    tail: Vec<u8>,
    size: u64,
}

impl IntegrityHasher {
    pub fn update(&mut self, chunk: &[u8]) {
        self.whole.update(chunk);
        self.size += chunk.len() as u64;
        self.tail.extend_from_slice(chunk);
        if self.tail.len() > HASH_LEN {
            let spill = self.tail.len() - HASH_LEN;
            self.body.update(&self.tail[..spill]);
            self.tail.drain(..spill);
        }
    }

    /// The object's size and sha256, once etcd's trailer matches the body.
    pub fn finish(self) -> Result<Written, Problem> {
        let (written, trailer) = self.into_parts();
        trailer.map(|()| written)
    }

    /// The object's size and sha256, and whether etcd's trailer matches.
    pub fn into_parts(self) -> (Written, Result<(), Problem>) {
        let trailer = self.check_trailer();
        let written = Written {
            size: self.size,
            sha256: hex::encode(self.whole.finalize()),
        };
        (written, trailer)
    }

    fn check_trailer(&self) -> Result<(), Problem> {
        if self.tail.len() < HASH_LEN {
            return Err(Problem::retry(
                reason::INTEGRITY_CHECK_FAILED,
                format!(
                    "the snapshot stream ended after {} bytes, too short to hold etcd's sha256 trailer",
                    self.size
                ),
            ));
        }
        let body = self.body.clone().finalize();
        if body.as_slice() != self.tail.as_slice() {
            return Err(Problem::retry(
                reason::INTEGRITY_CHECK_FAILED,
                format!(
                    "the snapshot's trailing sha256 {} does not match its {} bytes (sha256 {})",
                    hex::encode(&self.tail),
                    self.size - HASH_LEN as u64,
                    hex::encode(body)
                ),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A snapshot body with etcd's trailer, as the server sends it.
    fn with_trailer(body: &[u8]) -> Vec<u8> {
        let mut v = body.to_vec();
        v.extend_from_slice(&Sha256::digest(body));
        v
    }

    #[test]
    fn a_stream_with_a_matching_trailer_passes_however_it_is_chunked() {
        let stream = with_trailer(&(0..10_000u32).map(|i| i as u8).collect::<Vec<_>>());
        for size in [1, 7, 31, 32, 33, 4096, stream.len()] {
            let mut h = IntegrityHasher::default();
            stream.chunks(size).for_each(|c| h.update(c));
            let w = h.finish().unwrap();
            assert_eq!(w.size, stream.len() as u64);
            assert_eq!(
                w.sha256,
                hex::encode(Sha256::digest(&stream)),
                "chunks of {size}"
            );
        }
    }

    #[test]
    fn a_flipped_byte_or_a_cut_stream_fails_the_check() {
        let mut stream = with_trailer(b"some bolt pages");
        stream[3] ^= 1;
        let mut h = IntegrityHasher::default();
        h.update(&stream);
        assert_eq!(
            h.finish().unwrap_err().reason,
            reason::INTEGRITY_CHECK_FAILED
        );

        let stream = with_trailer(b"some bolt pages");
        let mut h = IntegrityHasher::default();
        h.update(&stream[..stream.len() - 1]);
        assert_eq!(
            h.finish().unwrap_err().reason,
            reason::INTEGRITY_CHECK_FAILED
        );

        let mut h = IntegrityHasher::default();
        h.update(b"short");
        assert_eq!(
            h.finish().unwrap_err().reason,
            reason::INTEGRITY_CHECK_FAILED
        );
    }
}
