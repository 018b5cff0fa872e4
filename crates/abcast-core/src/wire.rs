//! Field codecs shared by every protocol's messages: ballots, batches (lengths and payload
//! as shared slices, no copy), decrees, u64 lists and booleans. Every read is checked and
//! names its field; nothing here panics on bad input.

use crate::codec::{Decoder, Encoder};
use crate::error::DecodeError;
use crate::types::{Ballot, Batch, BatchKey, Decree, Instance, META_MAX_BYTES, NodeId};

/// Bytes of a ballot on the wire: round, node and incarnation, a `u32` each.
pub const BALLOT_BYTES: usize = 12;

pub fn put_ballot(e: &mut Encoder, b: Ballot) {
    e.put_u32(b.round);
    e.put_u32(b.node.0);
    e.put_u32(b.incarnation);
}
pub fn get_ballot(d: &mut Decoder) -> Result<Ballot, DecodeError> {
    Ok(Ballot {
        round: d.u32("ballot.round")?,
        node: NodeId(d.u32("ballot.node")?),
        incarnation: d.u32("ballot.incarnation")?,
    })
}
pub fn put_batch(e: &mut Encoder, b: &Batch) {
    e.put_u32(b.origin().0);
    e.put_u64(b.first_seq());
    e.put_u32(b.len() as u32);
    e.put_u32(b.payload_bytes() as u32);
    e.put_slice(b.lens_raw());
    e.put_bytes(b.data_raw());
}
pub fn get_batch(d: &mut Decoder) -> Result<Batch, DecodeError> {
    let origin = NodeId(d.u32("batch.origin")?);
    let first_seq = d.u64("batch.first_seq")?;
    let count = d.u32("batch.count")? as usize;
    let data_len = d.u32("batch.data_len")? as usize;
    if count == 0 {
        return Err(DecodeError::Invalid {
            what: "batch.count",
            detail: "zero".into(),
        });
    }
    if count.saturating_mul(4).saturating_add(data_len) > d.remaining() {
        return Err(DecodeError::Truncated { what: "batch body" });
    }
    let lens = d.bytes(count * 4, "batch.lens")?;
    let data = d.bytes(data_len, "batch.data")?;
    Batch::from_parts(origin, first_seq, lens, data)
}
/// Decree tags on the wire: 0 no-op, 1 batch key (wire decrees only), 2 batch, and a
/// [`Decree::Meta`] in the shortest of three forms: 3 weight alone (no data), 4 data alone
/// (weight 1), 5 both. (3 and 4 are the Multi-Ring skip and control decrees' encodings of
/// old, unchanged.)
pub fn put_decree(e: &mut Encoder, d: &Decree) {
    match d {
        Decree::Noop => e.put_u8(0),
        Decree::Values(b) => {
            e.put_u8(2);
            put_batch(e, b);
        }
        Decree::Meta { weight, data } if data.is_empty() => {
            e.put_u8(3);
            e.put_u32(*weight);
        }
        Decree::Meta { weight: 1, data } => {
            e.put_u8(4);
            e.put_u16(data.len() as u16);
            e.put_slice(data);
        }
        Decree::Meta { weight, data } => {
            e.put_u8(5);
            e.put_u32(*weight);
            e.put_u16(data.len() as u16);
            e.put_slice(data);
        }
    }
}
pub fn get_decree_tagged(t: u8, d: &mut Decoder) -> Result<Decree, DecodeError> {
    match t {
        0 => Ok(Decree::Noop),
        2 => Ok(Decree::Values(get_batch(d)?)),
        3 => Ok(Decree::Meta {
            weight: d.u32("meta.weight")?,
            data: bytes::Bytes::new(),
        }),
        4 => Ok(Decree::Meta {
            weight: 1,
            data: get_meta_data(d, 1)?,
        }),
        5 => {
            let weight = d.u32("meta.weight")?;
            let data = get_meta_data(d, 1)?;
            if weight == 1 {
                // Tag 4's form: one encoding per decree (the checker re-encodes).
                return Err(DecodeError::Invalid {
                    what: "meta.weight",
                    detail: "1 in the long form".into(),
                });
            }
            Ok(Decree::Meta { weight, data })
        }
        t => Err(DecodeError::Invalid {
            what: "decree.tag",
            detail: format!("{t} (expected 0, 2, 3, 4 or 5)"),
        }),
    }
}
/// A meta decree's data: at least `min` bytes (its form has data), at most META_MAX_BYTES.
fn get_meta_data(d: &mut Decoder, min: usize) -> Result<bytes::Bytes, DecodeError> {
    let len = d.u16("meta.len")? as usize;
    if len > META_MAX_BYTES || len < min {
        return Err(DecodeError::Invalid {
            what: "meta.len",
            detail: format!("{len} bytes (between {min} and {META_MAX_BYTES})"),
        });
    }
    d.bytes(len, "meta.data")
}
pub fn get_decree(d: &mut Decoder) -> Result<Decree, DecodeError> {
    let t = d.u8("decree.tag")?;
    get_decree_tagged(t, d)
}
pub fn put_u64s(e: &mut Encoder, v: &[u64]) {
    e.put_u32(v.len() as u32);
    for x in v {
        e.put_u64(*x);
    }
}
/// A length-prefixed list of at most `max` u64s (an epoch: one incarnation per member).
pub fn get_u64s(d: &mut Decoder, what: &'static str, max: usize) -> Result<Vec<u64>, DecodeError> {
    let n = d.count(what, max, 8)?;
    (0..n).map(|_| d.u64(what)).collect()
}
pub fn get_bool(d: &mut Decoder, what: &'static str) -> Result<bool, DecodeError> {
    match d.u8(what)? {
        0 => Ok(false),
        1 => Ok(true),
        v => Err(DecodeError::Invalid {
            what,
            detail: format!("{v} is not a boolean"),
        }),
    }
}

/// A learner's de-duplication memory for a range of instances: `(batch key, instance it
/// was first decided in)` pairs (see `ring::learner::Dedup`), for a learner that skips the
/// range (bug B3).
pub fn put_dedup_entries(e: &mut Encoder, v: &[(BatchKey, Instance)]) {
    e.put_u32(v.len() as u32);
    for (k, i) in v {
        e.put_u32(k.origin.0);
        e.put_u64(k.first_seq);
        e.put_u64(*i);
    }
}

pub fn get_dedup_entries(
    d: &mut Decoder,
    max: usize,
) -> Result<Vec<(BatchKey, Instance)>, DecodeError> {
    let n = d.count("dedup.entries", max, 20)?;
    let mut v = Vec::with_capacity(n);
    for _ in 0..n {
        let origin = NodeId(d.u32("dedup.origin")?);
        let first_seq = d.u64("dedup.first_seq")?;
        let instance = d.u64("dedup.instance")?;
        v.push((BatchKey { origin, first_seq }, instance));
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ballot_round_trips_with_its_incarnation() {
        let b = Ballot::new(7, NodeId(3), 2);
        let mut e = Encoder::new();
        put_ballot(&mut e, b);
        let bytes = e.to_bytes();
        assert_eq!(bytes.len(), BALLOT_BYTES);
        let mut d = Decoder::new(bytes);
        assert_eq!(get_ballot(&mut d), Ok(b));
        assert!(d.finish().is_ok());
    }

    #[test]
    fn a_ballot_cut_before_its_incarnation_is_refused_by_name() {
        let mut e = Encoder::new();
        put_ballot(&mut e, Ballot::new(7, NodeId(3), 2));
        let bytes = e.to_bytes();
        for (cut, field) in [
            (0, "ballot.round"),
            (4, "ballot.node"),
            (8, "ballot.incarnation"),
            (11, "ballot.incarnation"),
        ] {
            let mut d = Decoder::new(bytes.slice(..cut));
            assert_eq!(
                get_ballot(&mut d),
                Err(DecodeError::Truncated { what: field }),
                "cut at {cut}"
            );
        }
    }
}
