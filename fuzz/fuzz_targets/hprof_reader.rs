//! Fuzzes the HPROF binary reader: any bytes give items or an error with an offset inside the
//! input, never a panic, a hang or an allocation larger than the input can justify.
#![no_main]

use libfuzzer_sys::fuzz_target;
use openprof_format::hprof_binary::{HprofError, HprofReader};

fuzz_target!(|data: &[u8]| {
    let Ok(reader) = HprofReader::new(data) else {
        return;
    };
    for item in reader {
        if let Err(error) = item {
            if let HprofError::Malformed { offset, .. } = error {
                assert!(offset <= data.len() as u64);
            }
            break;
        }
    }
});
