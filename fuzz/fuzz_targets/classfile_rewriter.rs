//! Fuzzes the class rewriter of method parameter tracing: any bytes, with a plan naming each
//! method the bytes declare, give a class file or an error, never a panic (it runs inside the
//! profiled JVM, in the ClassFileLoadHook). What it gives back is read again without a fault.
#![no_main]

use libfuzzer_sys::fuzz_target;
use openprof_classfile::{instrument, MethodPlan, Plan};

fuzz_target!(|data: &[u8]| {
    // The first byte picks the parameters traced and the site, the rest is the class file.
    let Some((&choice, class)) = data.split_first() else {
        return;
    };
    let plan = |methods: Vec<MethodPlan>| Plan {
        hook_class: "openprof/MptHook".into(),
        methods,
    };
    // Methods named as the starting inputs (classes compiled by javac, fuzz/seeds/) declare
    // them; a fuzzed file rarely has them, so the error paths are covered too.
    let names = [
        ("loop", "(I)I"),
        ("kind", "(I)Ljava/lang/String;"),
        ("main", "([Ljava/lang/String;)V"),
    ];
    for (name, descriptor) in names {
        let methods = vec![MethodPlan {
            name: name.into(),
            descriptor: descriptor.into(),
            site: i32::from(choice) * 300,
            parameters: (0..u16::from(choice % 3)).collect(),
        }];
        if let Ok(rewritten) = instrument(class, &plan(methods)) {
            // The rewritten class parses again (instrumenting nothing in it).
            instrument(&rewritten, &plan(Vec::new()))
                .expect("the rewriter's own output reads back");
        }
    }
});
