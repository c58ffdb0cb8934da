//! Fuzzes the parser of method parameter tracing specifications (they arrive over the network
//! with mpt-add): any text gives specifications or an error naming a line and column, never a
//! panic; what parses prints as text that parses to the same specifications.
#![no_main]

use libfuzzer_sys::fuzz_target;
use openprof_format::mpt::parse_specs;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(specs) = parse_specs(text) else { return };
    let printed: Vec<String> = specs.iter().map(ToString::to_string).collect();
    let again = parse_specs(&printed.join("\n")).expect("printed specifications parse");
    assert_eq!(again, specs);
});
