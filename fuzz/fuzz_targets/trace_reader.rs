//! Fuzzes the trace reader: any bytes, fed whole and in pieces, must give elements or a clear
//! error, never a panic, a hang or unbounded memory; and what it reads must write and read back
//! unchanged.
#![no_main]

use libfuzzer_sys::fuzz_target;
use openprof_format::trace::reader::{read_all, FragmentDecoder};
use openprof_format::trace::TraceElement;

fuzz_target!(|data: &[u8]| {
    let whole: Vec<Result<TraceElement, _>> = read_all(data).collect();

    // The same bytes in pieces cut where the first byte says: the same elements, the same error.
    let step = usize::from(data.first().copied().unwrap_or(1)).max(1);
    let mut decoder = FragmentDecoder::new();
    let mut pieces = Vec::new();
    for chunk in data.chunks(step) {
        decoder.push(chunk);
        while let Some(item) = decoder.next_element() {
            pieces.push(item);
        }
    }
    decoder.end();
    while let Some(item) = decoder.next_element() {
        pieces.push(item);
    }
    let ok = |items: &[Result<TraceElement, _>]| items.iter().filter(|i| i.is_ok()).count();
    assert_eq!(ok(&whole), ok(&pieces));

    for element in whole.into_iter().flatten() {
        let mut text = String::new();
        element.write(&mut text);
        let again: Vec<_> = read_all(text.as_bytes()).collect();
        assert_eq!(again.len(), 1);
        assert_eq!(again[0].as_ref().ok(), Some(&element));
    }
});
