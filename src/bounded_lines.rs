//! Reading newline-delimited input without trusting the peer to keep lines short.

use tokio::io::{AsyncBufRead, AsyncBufReadExt};

/// Reads one line (through its `\n`) into `out`, keeping at most `max` bytes of it; the rest
/// of an overlong line is consumed and dropped. Returns the line's full length in bytes
/// (0 at end of input), so `len > max` tells the caller the line was cut.
pub async fn read_line_bounded<R: AsyncBufRead + Unpin>(
    r: &mut R,
    max: usize,
    out: &mut Vec<u8>,
) -> std::io::Result<usize> {
    read_line(r, max, out, Overlong::Cut).await
}

/// Like `read_line_bounded`, but a line longer than `max` is not kept at all: `out` is
/// emptied and its memory released as soon as the line passes `max`, so a peer sending an
/// endless line costs at most `max` bytes, and only until it passes `max`. For requests,
/// where a cut line is useless. Returns the line's full length (0 at end of input);
/// `len > out.len()` tells the caller the line was dropped.
pub async fn read_line_or_drop<R: AsyncBufRead + Unpin>(
    r: &mut R,
    max: usize,
    out: &mut Vec<u8>,
) -> std::io::Result<usize> {
    read_line(r, max, out, Overlong::Drop).await
}

/// What becomes of a line longer than the limit.
#[derive(Clone, Copy, PartialEq)]
enum Overlong {
    /// Keep its first `max` bytes.
    Cut,
    /// Keep nothing, and free the buffer.
    Drop,
}

async fn read_line<R: AsyncBufRead + Unpin>(
    r: &mut R,
    max: usize,
    out: &mut Vec<u8>,
    overlong: Overlong,
) -> std::io::Result<usize> {
    out.clear();
    let mut total: usize = 0;
    loop {
        let chunk = r.fill_buf().await?;
        if chunk.is_empty() {
            return Ok(total);
        }
        let (take, done) = match chunk.iter().position(|b| *b == b'\n') {
            Some(i) => (i + 1, true),
            None => (chunk.len(), false),
        };
        match overlong {
            Overlong::Cut => {
                let room = max.saturating_sub(out.len());
                out.extend_from_slice(&chunk[..take.min(room)]);
            }
            Overlong::Drop if total.saturating_add(take) <= max => {
                out.extend_from_slice(&chunk[..take]);
            }
            Overlong::Drop => {
                if out.capacity() > 0 {
                    *out = Vec::new();
                }
            }
        }
        r.consume(take);
        total = total.saturating_add(take);
        if done {
            return Ok(total);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn long_lines_are_cut_and_the_next_line_is_intact() {
        let input = format!("{}\nshort\nlast", "x".repeat(100));
        let mut r = tokio::io::BufReader::with_capacity(7, input.as_bytes());
        let mut buf = Vec::new();
        assert_eq!(read_line_bounded(&mut r, 10, &mut buf).await.unwrap(), 101);
        assert_eq!(buf, b"xxxxxxxxxx");
        assert_eq!(read_line_bounded(&mut r, 10, &mut buf).await.unwrap(), 6);
        assert_eq!(buf, b"short\n");
        assert_eq!(read_line_bounded(&mut r, 10, &mut buf).await.unwrap(), 4);
        assert_eq!(buf, b"last");
        assert_eq!(read_line_bounded(&mut r, 10, &mut buf).await.unwrap(), 0);
    }

    #[tokio::test]
    async fn overlong_lines_are_dropped_with_their_memory() {
        let input = format!("{}\nshort\nlast", "x".repeat(100));
        let mut r = tokio::io::BufReader::with_capacity(7, input.as_bytes());
        let mut buf = Vec::new();
        assert_eq!(read_line_or_drop(&mut r, 10, &mut buf).await.unwrap(), 101);
        assert_eq!((buf.len(), buf.capacity()), (0, 0));
        assert_eq!(read_line_or_drop(&mut r, 10, &mut buf).await.unwrap(), 6);
        assert_eq!(buf, b"short\n");
        assert_eq!(read_line_or_drop(&mut r, 6, &mut buf).await.unwrap(), 4);
        assert_eq!(buf, b"last");
        assert_eq!(read_line_or_drop(&mut r, 10, &mut buf).await.unwrap(), 0);
    }
}
