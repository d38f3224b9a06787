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
    let read = read_line(r, max, out, Overlong::Cut, &mut |_| true).await?;
    Ok(match read {
        LineRead::Read(len) => len,
        LineRead::Refused => 0,
    })
}

/// Like `read_line_bounded`, but a line longer than `max` is not kept at all: `out` is
/// emptied and its memory released as soon as the line passes `max`, so a peer sending an
/// endless line costs at most `max` bytes, and only until it passes `max`. For requests,
/// where a cut line is useless. Before `out` grows, `room` is asked whether it may hold
/// that many bytes (its new capacity); when it says no, reading stops at once with
/// [`LineRead::Refused`], the rest of the line still unread (see [`skip_line`]).
pub async fn read_line_or_drop<R: AsyncBufRead + Unpin>(
    r: &mut R,
    max: usize,
    out: &mut Vec<u8>,
    mut room: impl FnMut(usize) -> bool + Send,
) -> std::io::Result<LineRead> {
    read_line(r, max, out, Overlong::Drop, &mut room).await
}

/// Consumes the rest of a line through its `\n`, keeping none of it. Returns the bytes
/// consumed (0 at end of input).
pub async fn skip_line<R: AsyncBufRead + Unpin>(r: &mut R) -> std::io::Result<usize> {
    let skipped = read_line(r, 0, &mut Vec::new(), Overlong::Drop, &mut |_| true).await?;
    Ok(match skipped {
        LineRead::Read(len) => len,
        LineRead::Refused => 0,
    })
}

/// How reading a line ended.
#[derive(Debug, PartialEq)]
pub enum LineRead {
    /// The line was read through its `\n` (or to the end of input): its full length in
    /// bytes, 0 at end of input. `len > out.len()` tells the caller it was dropped.
    Read(usize),
    /// `room` refused the memory the line needed; the rest of it is unread.
    Refused,
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
    room: &mut (impl FnMut(usize) -> bool + Send),
) -> std::io::Result<LineRead> {
    out.clear();
    let mut total: usize = 0;
    loop {
        let chunk = r.fill_buf().await?;
        if chunk.is_empty() {
            return Ok(LineRead::Read(total));
        }
        let (take, done) = match chunk.iter().position(|b| *b == b'\n') {
            Some(i) => (i + 1, true),
            None => (chunk.len(), false),
        };
        let keep = match overlong {
            Overlong::Cut => take.min(max.saturating_sub(out.len())),
            Overlong::Drop if total.saturating_add(take) <= max => take,
            Overlong::Drop => {
                if out.capacity() > 0 {
                    *out = Vec::new();
                }
                0
            }
        };
        let wanted = out.len() + keep;
        if wanted > out.capacity() {
            // Grow as a Vec would (doubling), but no further than the limit, and only with
            // `room`'s leave, so what `room` was told is what the buffer holds.
            let capacity = wanted
                .max(out.capacity().saturating_mul(2))
                .min(max.max(wanted));
            if !room(capacity) {
                return Ok(LineRead::Refused);
            }
            out.reserve_exact(capacity - out.len());
        }
        out.extend_from_slice(&chunk[..keep]);
        r.consume(take);
        total = total.saturating_add(take);
        if done {
            return Ok(LineRead::Read(total));
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
        let read = read_line_or_drop(&mut r, 10, &mut buf, |_| true)
            .await
            .unwrap();
        assert_eq!(read, LineRead::Read(101));
        assert_eq!((buf.len(), buf.capacity()), (0, 0));
        let read = read_line_or_drop(&mut r, 10, &mut buf, |_| true)
            .await
            .unwrap();
        assert_eq!(read, LineRead::Read(6));
        assert_eq!(buf, b"short\n");
        let read = read_line_or_drop(&mut r, 6, &mut buf, |_| true)
            .await
            .unwrap();
        assert_eq!(read, LineRead::Read(4));
        assert_eq!(buf, b"last");
        let read = read_line_or_drop(&mut r, 10, &mut buf, |_| true)
            .await
            .unwrap();
        assert_eq!(read, LineRead::Read(0));
    }

    #[tokio::test]
    async fn a_line_refused_room_stops_at_once_and_its_rest_can_be_skipped() {
        let input = format!("{}\nnext\n", "x".repeat(100));
        let mut r = tokio::io::BufReader::with_capacity(16, input.as_bytes());
        let mut buf = Vec::new();
        let mut asked = Vec::new();
        let room = |capacity| {
            asked.push(capacity);
            capacity <= 32
        };
        let read = read_line_or_drop(&mut r, 1000, &mut buf, room)
            .await
            .unwrap();
        assert_eq!(read, LineRead::Refused);
        assert_eq!(
            asked,
            [16, 32, 64],
            "the buffer grows by doubling, each step asked"
        );
        assert!(buf.capacity() <= 32);
        assert_eq!(skip_line(&mut r).await.unwrap(), 100 - 32 + 1);
        let read = read_line_or_drop(&mut r, 1000, &mut buf, |_| true)
            .await
            .unwrap();
        assert_eq!((read, &buf[..]), (LineRead::Read(5), &b"next\n"[..]));
    }
}
