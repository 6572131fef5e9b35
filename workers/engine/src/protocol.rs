//! The wire protocol: prost types generated from engine.proto, plus the
//! varint length-delimited framing both directions use on stdio.

use std::io::{self, Read, Write};

use prost::Message;

#[allow(clippy::all)]
pub mod pb {
    include!(concat!(env!("OUT_DIR"), "/switchyard.engine.v1.rs"));
}

pub use pb::*;

/// Frames larger than this are refused rather than allocated: a corrupt length
/// prefix must not make the engine try to allocate terabytes.
pub const MAX_FRAME_BYTES: u64 = 1 << 30;

/// Reads one varint length prefix. `Ok(None)` means clean EOF before any byte.
fn read_varint<R: Read>(r: &mut R) -> io::Result<Option<u64>> {
    let mut value: u64 = 0;
    let mut shift = 0u32;
    let mut byte = [0u8; 1];
    loop {
        match r.read(&mut byte) {
            Ok(0) => {
                if shift == 0 {
                    return Ok(None);
                }
                return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "EOF inside a length prefix"));
            }
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
        if shift >= 64 {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "length prefix overflows u64"));
        }
        value |= u64::from(byte[0] & 0x7f) << shift;
        if byte[0] & 0x80 == 0 {
            return Ok(Some(value));
        }
        shift += 7;
    }
}

/// Reads one frame's payload. `Ok(None)` on clean EOF between frames.
pub fn read_frame<R: Read>(r: &mut R) -> io::Result<Option<Vec<u8>>> {
    let Some(len) = read_varint(r)? else { return Ok(None) };
    if len > MAX_FRAME_BYTES {
        return Err(io::Error::new(io::ErrorKind::InvalidData, format!("frame of {len} bytes exceeds the limit")));
    }
    let mut buf = vec![0u8; len as usize];
    r.read_exact(&mut buf)?;
    Ok(Some(buf))
}

/// Reads and decodes one length-delimited message.
pub fn read_message<M: Message + Default, R: Read>(r: &mut R) -> io::Result<Option<M>> {
    match read_frame(r)? {
        None => Ok(None),
        Some(buf) => M::decode(buf.as_slice())
            .map(Some)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e)),
    }
}

/// Writes one length-delimited message and flushes, so the agent sees each
/// event as soon as it exists (tokens are streamed).
pub fn write_message<M: Message, W: Write>(w: &mut W, msg: &M) -> io::Result<()> {
    let buf = msg.encode_length_delimited_to_vec();
    w.write_all(&buf)?;
    w.flush()
}

impl Event {
    pub fn new(request_id: impl Into<String>, kind: event::Kind) -> Self {
        Event { request_id: request_id.into(), kind: Some(kind) }
    }

    pub fn error(request_id: impl Into<String>, code: ErrorCode, message: impl Into<String>) -> Self {
        Event::new(request_id, event::Kind::Error(Error { code: code as i32, message: message.into() }))
    }
}

impl Tensor {
    pub fn from_f32(shape: &[usize], data: &[f32]) -> Self {
        let mut bytes = Vec::with_capacity(data.len() * 4);
        for v in data {
            bytes.extend_from_slice(&v.to_le_bytes());
        }
        Tensor { dtype: DType::DtypeF32 as i32, shape: shape.iter().map(|&d| d as u64).collect(), data: bytes }
    }

    pub fn from_f32_as(shape: &[usize], data: &[f32], dtype: DType) -> Self {
        match dtype {
            DType::DtypeF16 => {
                let mut bytes = Vec::with_capacity(data.len() * 2);
                for v in data {
                    bytes.extend_from_slice(&half::f16::from_f32(*v).to_le_bytes());
                }
                Tensor { dtype: DType::DtypeF16 as i32, shape: shape.iter().map(|&d| d as u64).collect(), data: bytes }
            }
            _ => Self::from_f32(shape, data),
        }
    }

    /// Decodes the payload to f32, checking that the byte count matches the shape.
    pub fn to_f32(&self) -> Result<Vec<f32>, String> {
        let elems: u64 = self.shape.iter().product();
        let dtype = DType::try_from(self.dtype).unwrap_or(DType::DtypeUnspecified);
        let width = match dtype {
            DType::DtypeF16 => 2,
            _ => 4,
        };
        if self.data.len() as u64 != elems * width {
            return Err(format!(
                "tensor shape {:?} needs {} bytes of {:?}, got {}",
                self.shape,
                elems * width,
                dtype,
                self.data.len()
            ));
        }
        Ok(match dtype {
            DType::DtypeF16 => self
                .data
                .chunks_exact(2)
                .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32())
                .collect(),
            _ => self.data.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn framing_round_trip() {
        let reqs = vec![
            Request {
                request_id: "a".into(),
                kind: Some(request::Kind::Stats(StatsRequest {})),
            },
            Request {
                request_id: "b".repeat(300),
                kind: Some(request::Kind::Embed(Embed { model: "m".into(), inputs: vec!["x".repeat(1000)], ..Default::default() })),
            },
        ];
        let mut buf = Vec::new();
        for r in &reqs {
            write_message(&mut buf, r).unwrap();
        }
        let mut cur = io::Cursor::new(buf);
        for r in &reqs {
            let got: Request = read_message(&mut cur).unwrap().unwrap();
            assert_eq!(&got, r);
        }
        assert!(read_message::<Request, _>(&mut cur).unwrap().is_none());
    }

    #[test]
    fn truncated_frame_is_an_error() {
        let r = Request { request_id: "abc".into(), kind: Some(request::Kind::Shutdown(Shutdown {})) };
        let mut buf = r.encode_length_delimited_to_vec();
        buf.pop();
        let mut cur = io::Cursor::new(buf);
        assert!(read_message::<Request, _>(&mut cur).is_err());
    }

    #[test]
    fn tensor_f16_round_trip() {
        let t = Tensor::from_f32_as(&[3], &[1.0, -2.5, 0.125], DType::DtypeF16);
        assert_eq!(t.data.len(), 6);
        assert_eq!(t.to_f32().unwrap(), vec![1.0, -2.5, 0.125]);
    }
}
