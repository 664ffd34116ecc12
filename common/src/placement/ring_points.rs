//! Ketama point generation: the per-node CRC-32 hash chain and the stable radix sort of points.

use std::io::Write as _;
use std::net::SocketAddr;

/// Slice-by-4 CRC-32/ISO-HDLC tables (reflected polynomial 0xEDB88320), built at compile time.
const CRC_TABLES: [[u32; 256]; 4] = crc_tables();

const fn crc_tables() -> [[u32; 256]; 4] {
    let mut t = [[0u32; 256]; 4];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 { 0xEDB8_8320 ^ (c >> 1) } else { c >> 1 };
            k += 1;
        }
        t[0][i] = c;
        i += 1;
    }
    let mut i = 0;
    while i < 256 {
        let mut s = 1;
        while s < 4 {
            let prev = t[s - 1][i];
            t[s][i] = (prev >> 8) ^ t[0][(prev & 0xFF) as usize];
            s += 1;
        }
        i += 1;
    }
    t
}

/// `crc32(prefix ++ le_bytes(word))` given `prefix_crc = crc32(prefix)`.
#[inline]
fn crc32_append_u32(prefix_crc: u32, word: u32) -> u32 {
    let s = !prefix_crc ^ word;
    !(CRC_TABLES[3][(s & 0xFF) as usize]
        ^ CRC_TABLES[2][((s >> 8) & 0xFF) as usize]
        ^ CRC_TABLES[1][((s >> 16) & 0xFF) as usize]
        ^ CRC_TABLES[0][(s >> 24) as usize])
}

/// The hash-chain base of a node: `ip display ++ 0x00 ++ decimal port` (IPv6 without brackets).
pub fn point_base(addr: &SocketAddr) -> Vec<u8> {
    let mut base = Vec::with_capacity(39 + 1 + 5);
    write!(&mut base, "{}\0{}", addr.ip(), addr.port()).expect("writing to a Vec cannot fail");
    base
}

/// The first `count` point hashes of `addr`'s chain.
pub fn point_hashes(addr: &SocketAddr, count: u32) -> impl Iterator<Item = u32> {
    let prefix = crc32fast::hash(&point_base(addr));
    let mut prev = 0u32;
    (0..count).map(move |_| {
        prev = crc32_append_u32(prefix, prev);
        prev
    })
}

/// Stable LSD radix sort of `items` by their top 32 bits (3 passes of 11, 11, 10 bits).
pub(crate) fn radix_sort_by_high_u32(items: &mut Vec<u64>) {
    const PASSES: [(u32, u32); 3] = [(32, 11), (43, 11), (54, 10)];
    let mut hist = [[0usize; 2048]; 3];
    for &x in items.iter() {
        for (p, (shift, bits)) in PASSES.iter().enumerate() {
            hist[p][((x >> shift) & ((1 << bits) - 1)) as usize] += 1;
        }
    }
    let mut scratch = vec![0u64; items.len()];
    for (p, (shift, bits)) in PASSES.iter().enumerate() {
        let mut offsets = [0usize; 2048];
        let mut sum = 0;
        for (o, h) in offsets.iter_mut().zip(hist[p].iter()) {
            *o = sum;
            sum += h;
        }
        for &x in items.iter() {
            let d = ((x >> shift) & ((1 << bits) - 1)) as usize;
            scratch[offsets[d]] = x;
            offsets[d] += 1;
        }
        std::mem::swap(items, &mut scratch);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn point_chain_vectors() {
        let cases = [
            ("127.0.0.1:7777", [842782624, 66278312, 1921422695, 3166719452, 802613243]),
            ("10.0.0.1:443", [3927464997, 3667281858, 43317179, 1807998681, 216305233]),
            ("[::1]:7777", [546140335, 3560429410, 685628011, 1301783523, 152329392]),
        ];
        for (a, want) in cases {
            let got: Vec<u32> = point_hashes(&addr(a), 5).collect();
            assert_eq!(got, want, "{a}");
        }
        assert_eq!(point_base(&addr("[::1]:7777")), b"::1\x007777".to_vec());
    }

    #[test]
    fn key_crc_vectors() {
        let cases = [
            ("", 0),
            ("a", 3904355907),
            ("b", 1908338681),
            ("doghash", 3235454206),
            ("/some/path", 1189093926),
            ("test0", 4256558196),
            ("hello world", 222957957),
        ];
        for (k, want) in cases {
            assert_eq!(crc32fast::hash(k.as_bytes()), want, "{k}");
        }
    }

    #[test]
    fn radix_sort_is_stable_by_high_word() {
        let mut v: Vec<u64> = vec![(5 << 32) | 1, (3 << 32) | 2, 5 << 32, (u64::from(u32::MAX) << 32) | 7, 3 << 32];
        radix_sort_by_high_u32(&mut v);
        assert_eq!(v, vec![(3 << 32) | 2, 3 << 32, (5 << 32) | 1, 5 << 32, (u64::from(u32::MAX) << 32) | 7]);
    }

    #[test]
    fn chain_step_matches_crc32fast() {
        let base = point_base(&addr("10.1.2.3:8080"));
        let prefix = crc32fast::hash(&base);
        for word in [0u32, 1, 0xDEAD_BEEF, u32::MAX] {
            let mut full = base.clone();
            full.extend_from_slice(&word.to_le_bytes());
            assert_eq!(crc32_append_u32(prefix, word), crc32fast::hash(&full));
        }
    }
}
