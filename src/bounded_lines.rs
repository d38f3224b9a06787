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
    out.clear();
    let mut total = 0;
    loop {
        let chunk = r.fill_buf().await?;
        if chunk.is_empty() {
            return Ok(total);
        }
        let (take, done) = match chunk.iter().position(|b| *b == b'\n') {
            Some(i) => (i + 1, true),
            None => (chunk.len(), false),
        };
        let room = max.saturating_sub(out.len());
        out.extend_from_slice(&chunk[..take.min(room)]);
        r.consume(take);
        total += take;
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
}
