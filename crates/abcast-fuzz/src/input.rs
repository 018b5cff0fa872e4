//! Reading a fuzz input as a script: numbers and byte strings taken off the front, every
//! read answering `None` once the bytes run out (the script ends there).

/// A fuzz input being read from the front.
#[derive(Clone, Copy, Debug)]
pub struct Input<'a> {
    data: &'a [u8],
}

impl<'a> Input<'a> {
    pub fn new(data: &'a [u8]) -> Input<'a> {
        Input { data }
    }
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }
    pub fn len(&self) -> usize {
        self.data.len()
    }
    pub fn u8(&mut self) -> Option<u8> {
        let (&b, rest) = self.data.split_first()?;
        self.data = rest;
        Some(b)
    }
    pub fn u16(&mut self) -> Option<u16> {
        self.array().map(u16::from_le_bytes)
    }
    pub fn u32(&mut self) -> Option<u32> {
        self.array().map(u32::from_le_bytes)
    }
    pub fn u64(&mut self) -> Option<u64> {
        self.array().map(u64::from_le_bytes)
    }
    fn array<const N: usize>(&mut self) -> Option<[u8; N]> {
        let (head, rest) = self.data.split_first_chunk::<N>()?;
        self.data = rest;
        Some(*head)
    }
    /// Up to `n` bytes (fewer at the end of the input).
    pub fn take(&mut self, n: usize) -> &'a [u8] {
        let (head, rest) = self.data.split_at(n.min(self.data.len()));
        self.data = rest;
        head
    }
    /// A byte string prefixed by its length as a `u16` (cut at the end of the input).
    pub fn string16(&mut self) -> Option<&'a [u8]> {
        let n = usize::from(self.u16()?);
        Some(self.take(n))
    }
    /// Everything left.
    pub fn rest(&mut self) -> &'a [u8] {
        std::mem::take(&mut self.data)
    }
}

/// Appends a `u16`-prefixed byte string, as [`Input::string16`] reads it (for seeds).
pub fn put_string16(out: &mut Vec<u8>, s: &[u8]) {
    let n = s.len().min(usize::from(u16::MAX));
    out.extend_from_slice(&(n as u16).to_le_bytes());
    out.extend_from_slice(&s[..n]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_stop_at_the_end_of_the_input() {
        let mut i = Input::new(&[1, 2, 0, 3, 4, 5]);
        assert_eq!(i.u8(), Some(1));
        assert_eq!(i.u16(), Some(2));
        assert_eq!(i.string16(), None, "two bytes of length are not there");
        assert_eq!(i.rest(), &[3, 4, 5]);
        assert!(i.is_empty());
        assert_eq!(i.u8(), None);
        let mut out = Vec::new();
        put_string16(&mut out, b"abc");
        assert_eq!(Input::new(&out).string16(), Some(&b"abc"[..]));
    }
}
