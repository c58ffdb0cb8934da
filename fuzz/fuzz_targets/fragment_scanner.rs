//! Fuzzes the collector's fragment scanner, which checks what agents send before it is stored:
//! any bytes must give a summary or an error, never a panic, a stack overflow or a hang; and
//! each element found, scanned on its own, is found again with the same trace, collationValue
//! and typed hierarchy element (the store keeps and exports elements by these byte ranges).
#![no_main]

use libfuzzer_sys::fuzz_target;
use openprof_collector::scan::scan_fragment;

fuzz_target!(|data: &[u8]| {
    let Ok(summary) = scan_fragment(data) else {
        return;
    };
    assert!(!summary.elements.is_empty());
    let mut end = 0;
    for element in &summary.elements {
        let range = element.range.clone();
        assert!(end <= range.start && range.start < range.end && range.end <= data.len());
        end = range.end;
        let bytes = &data[range.clone()];
        assert_eq!(bytes.first(), Some(&b'<'));
        assert_eq!(bytes.last(), Some(&b'>'));
        let alone = scan_fragment(bytes).expect("an element accepted in a fragment is accepted alone");
        assert_eq!(alone.elements.len(), 1);
        let again = &alone.elements[0];
        assert_eq!(again.range, 0..bytes.len());
        assert_eq!(again.trace, element.trace);
        assert_eq!(again.collation, element.collation);
        assert_eq!(again.hierarchy, element.hierarchy);
    }
});
