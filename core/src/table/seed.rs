//! The per-zone hash seed from the operating system's random source, with
//! no weak fallback: a zone whose keys an attacker could aim collisions at
//! is refused rather than started.

use std::io;

/// How many times an interrupted read (EINTR) is retried before giving up.
const MAX_INTERRUPTS: u32 = 100;

/// Fills a 16-byte seed from `read`, a `getrandom(2)`-like source that
/// returns how many bytes it wrote (possibly fewer than asked) or an error.
/// Interrupted reads are retried; short reads continue where they stopped;
/// any other error, or a source that writes nothing, is returned (the
/// caller refuses to start the zone).
pub fn seed_from(mut read: impl FnMut(&mut [u8]) -> io::Result<usize>) -> io::Result<[u64; 2]> {
    let mut buf = [0u8; 16];
    let mut filled = 0;
    let mut interrupts = 0;
    while filled < buf.len() {
        match read(&mut buf[filled..]) {
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the random source returned no bytes",
                ))
            }
            Ok(n) => filled += n.min(buf.len() - filled),
            Err(e) if e.kind() == io::ErrorKind::Interrupted && interrupts < MAX_INTERRUPTS => {
                interrupts += 1;
            }
            Err(e) => return Err(e),
        }
    }
    let (a, b) = buf.split_at(8);
    let word = |s: &[u8]| u64::from_le_bytes(s.try_into().unwrap_or_default());
    Ok([word(a), word(b)])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os_error(errno: i32) -> io::Error {
        io::Error::from_raw_os_error(errno)
    }

    #[test]
    fn fills_the_seed_in_one_read() {
        let seed = seed_from(|b| {
            b.fill(0xab);
            Ok(b.len())
        })
        .unwrap();
        assert_eq!(seed, [0xabab_abab_abab_abab; 2]);
    }

    #[test]
    fn retries_interrupted_reads_and_continues_short_ones() {
        let mut calls = 0;
        let seed = seed_from(|b| {
            calls += 1;
            match calls {
                1 | 3 => Err(os_error(4)), // EINTR
                _ => {
                    b[..4].fill(calls as u8);
                    Ok(4)
                }
            }
        })
        .unwrap();
        // Four short reads of 4 bytes, two interruptions.
        assert_eq!(calls, 6);
        assert_eq!(seed[0].to_le_bytes(), [2, 2, 2, 2, 4, 4, 4, 4]);
        assert_eq!(seed[1].to_le_bytes(), [5, 5, 5, 5, 6, 6, 6, 6]);
    }

    #[test]
    fn refuses_on_any_other_error() {
        // ENOSYS: a seccomp filter that forbids getrandom.
        let e = seed_from(|_| Err(os_error(38))).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(38));
        let e = seed_from(|_| Ok(0)).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
    }

    #[test]
    fn gives_up_on_endless_interruptions() {
        let mut calls = 0;
        let e = seed_from(|_| {
            calls += 1;
            Err(os_error(4))
        })
        .unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::Interrupted);
        assert_eq!(calls, MAX_INTERRUPTS + 1);
    }
}
