//! The rewriter on real class files: java/classfile's Rewritten, compiled by javac, has its
//! methods instrumented and runs on a real JVM (which verifies every class it loads from the
//! class path) against a Java stand-in of the hook that counts what it is told.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use openprof_classfile::{
    call_sites, declared_methods, instrument, instrument_each, ClassFileError, HookKind,
    MethodPlan, Plan,
};
use openprof_testkit::{jdk, kept_temp_dir, workspace_root};

fn compiled() -> PathBuf {
    let output = kept_temp_dir("openprof-classfile-");
    let sources = workspace_root().join("java/classfile");
    let status = Command::new(jdk().javac().expect("javac"))
        .arg("-g")
        .arg("-d")
        .arg(&output)
        .arg(sources.join("Rewritten.java"))
        .arg(sources.join("openprof/MptHook.java"))
        .arg(sources.join("Constructed.java"))
        .arg(sources.join("RunInstrumented.java"))
        .arg(sources.join("openprof/CallHook.java"))
        .arg(sources.join("Covered.java"))
        .arg(sources.join("RunCovered.java"))
        .status()
        .expect("javac");
    assert!(status.success());
    output
}

fn plan(methods: &[(&str, &str, i32, &[u16])]) -> Plan {
    Plan {
        hook_class: "openprof/MptHook".into(),
        hooks: HookKind::Parameters,
        coverage: None,
        methods: methods
            .iter()
            .map(|(name, descriptor, site, parameters)| MethodPlan {
                name: name.to_string(),
                descriptor: descriptor.to_string(),
                site: *site,
                parameters: parameters.to_vec(),
                call_sites: Vec::new(),
                outgoing: Vec::new(),
                incoming: false,
            })
            .collect(),
    }
}

fn run(classes: &Path) -> (bool, String, String) {
    let output = Command::new(jdk().java().expect("java"))
        .args(["-Xshare:off", "-cp"])
        .arg(classes)
        .arg("Rewritten")
        .output()
        .expect("java");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn instrumented_methods_run_as_before_and_call_the_hook_at_every_entry_and_exit() {
    let classes = compiled();
    let class_path = classes.join("Rewritten.class");
    let original = std::fs::read(&class_path).unwrap();
    let plan = plan(&[
        ("loop", "(I)I", 1, &[1]),
        ("mix", "(JDILjava/lang/String;)D", 2, &[1, 2, 3, 4]),
        ("small", "(ZCBSF)F", 3, &[1, 2, 3, 4, 5]),
        ("kind", "(I)Ljava/lang/String;", 4, &[0, 1]),
        ("fails", "(I)I", 5, &[1]),
        ("guarded", "(I)I", 300, &[1]),
        ("locked", "(I)I", 7, &[0, 1]),
        ("early", "(I)V", 8, &[]),
        ("fresh", "(Z)Ljava/lang/String;", 9, &[1]),
        ("fib", "(I)I", 100_000, &[1]),
    ]);
    let rewritten = instrument(&original, &plan).expect("instrumented");
    std::fs::write(&class_path, rewritten).unwrap();
    let (ok, stdout, stderr) = run(&classes);
    assert!(ok, "{stdout}\n{stderr}");
    assert!(stdout.contains("results ok"), "{stdout}");

    let counts: BTreeMap<String, u32> = stdout
        .lines()
        .filter_map(|line| line.rsplit_once(" = "))
        .map(|(what, count)| (what.to_string(), count.parse().unwrap()))
        .collect();
    // fib(10) makes 177 calls; fails is called 4 times by main and once by each guarded().
    let mut expected: BTreeMap<String, u32> = [
        ("begin 1 static", 3),
        ("exit 1", 3),
        ("begin 2 static", 1),
        ("arg 1 long 2", 1),
        ("arg 2 double 1.5", 1),
        ("arg 3 int 2", 1),
        ("arg 4 object abc", 1),
        ("exit 2", 1),
        ("begin 3 static", 1),
        ("arg 1 boolean true", 2), // small's z, and fresh(true)
        ("arg 2 char a", 1),
        ("arg 3 byte 2", 1),
        ("arg 4 short 3", 1),
        ("arg 5 float 0.5", 1),
        ("exit 3", 1),
        ("begin 4 Rewritten", 5),
        ("arg 0 object R7", 7), // kind 5 times, locked twice
        ("exit 4", 5),
        ("begin 5 static", 6),
        ("thrown 5", 5),
        ("exit 5", 1),
        ("begin 300 static", 2),
        ("exit 300", 2),
        ("begin 7 Rewritten", 2),
        ("exit 7", 2),
        ("begin 8 static", 2),
        ("exit 8", 2),
        ("begin 9 static", 2),
        ("arg 1 boolean false", 1),
        ("exit 9", 2),
        ("begin 100000 static", 177),
        ("exit 100000", 177),
        ("enter", 3 + 1 + 1 + 5 + 6 + 2 + 2 + 2 + 2 + 177),
    ]
    .iter()
    .map(|(what, count)| (what.to_string(), *count))
    .collect();
    // int first parameters: loop(10) x3; kind(0, 2, 5, 1000, 9); fails(1..4), and fails(1),
    // fails(0) from guarded(1), guarded(0); locked(-1, 1); then fib(10)'s own calls: fib(n)
    // is called fib(11 - n) times for n >= 1, fib(0) fib(10) = 55 - 21 = 34 times.
    let fibonacci = |k: u32| (0..k).fold((0_u32, 1_u32), |(a, b), _| (b, a + b)).0;
    let mut ints: BTreeMap<i32, u32> = BTreeMap::new();
    for n in [10, 10, 10, 0, 2, 5, 1000, 9, 1, 2, 3, 4, 1, 0, 1, 0, -1, 1] {
        *ints.entry(n).or_default() += 1;
    }
    for n in 0..=10_u32 {
        let calls = if n == 0 {
            fibonacci(9)
        } else {
            fibonacci(11 - n)
        };
        *ints.entry(n as i32).or_default() += calls;
    }
    for (n, count) in ints {
        expected.insert(format!("arg 1 int {n}"), count);
    }
    assert_eq!(
        counts.values().sum::<u32>(),
        expected.values().sum::<u32>(),
        "{stdout}"
    );
    for (what, count) in &expected {
        assert_eq!(counts.get(what), Some(count), "{what}\n{stdout}");
    }
    assert!(stdout.contains("depth 0"), "{stdout}");
}

#[test]
fn methods_not_planned_are_left_alone_and_faults_are_named() {
    let classes = compiled();
    let original = std::fs::read(classes.join("Rewritten.class")).unwrap();
    let missing = instrument(&original, &plan(&[("nothing", "()V", 1, &[])])).unwrap_err();
    assert_eq!(
        missing,
        ClassFileError::NoSuchMethod {
            name: "nothing".into(),
            descriptor: "()V".into()
        }
    );
    assert!(matches!(
        instrument(&original[..original.len() / 2], &plan(&[])),
        Err(ClassFileError::Truncated(_))
    ));
    assert!(matches!(
        instrument(b"not a class file", &plan(&[])),
        Err(ClassFileError::BadMagic(_))
    ));
    let this_of_static = instrument(&original, &plan(&[("loop", "(I)I", 1, &[0])])).unwrap_err();
    assert!(
        this_of_static
            .to_string()
            .contains("parameter 0 (this) of a static method"),
        "{this_of_static}"
    );
    // An empty plan changes nothing but the pool: the class still runs.
    let same = instrument(&original, &plan(&[])).unwrap();
    std::fs::write(classes.join("Rewritten.class"), same).unwrap();
    let (ok, stdout, stderr) = run(&classes);
    assert!(ok && stdout.contains("results ok"), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("depth 0\n\n") || stdout.trim_end().ends_with("depth 0"),
        "{stdout}"
    );
}

/// Every method with code of these classes planned for the call hooks, the sites of class
/// `k` numbered from 1000 × (k + 1) in the order it declares its methods, and each call they
/// make into `java/` a call site, numbered from 100,000: the plan's site for each (class,
/// name, descriptor), and the number of call sites.
fn instrument_calls(classes: &Path, names: &[&str]) -> (BTreeMap<String, i32>, i32) {
    let mut sites = BTreeMap::new();
    let mut next_call_site = 100_000;
    for (k, name) in names.iter().enumerate() {
        let path = classes.join(format!("{name}.class"));
        let original = std::fs::read(&path).unwrap();
        let calls = call_sites(&original).unwrap();
        let methods: Vec<MethodPlan> = declared_methods(&original)
            .unwrap()
            .into_iter()
            .enumerate()
            .filter(|(_, method)| method.has_code)
            .map(|(index, method)| {
                let site = 1000 * (k as i32 + 1) + index as i32;
                sites.insert(format!("{name}.{}{}", method.name, method.descriptor), site);
                let call_sites = calls
                    .iter()
                    .filter(|call| {
                        call.caller == (method.name.clone(), method.descriptor.clone())
                            && call.class.starts_with("java/")
                    })
                    .map(|call| {
                        next_call_site += 1;
                        (call.offset, next_call_site)
                    })
                    .collect();
                MethodPlan {
                    name: method.name,
                    descriptor: method.descriptor,
                    site,
                    parameters: Vec::new(),
                    call_sites,
                    outgoing: Vec::new(),
                    incoming: false,
                }
            })
            .collect();
        let plan = Plan {
            hook_class: "openprof/CallHook".into(),
            hooks: HookKind::Calls { receiver: true },
            methods,
            coverage: None,
        };
        let rewritten =
            instrument(&original, &plan).unwrap_or_else(|error| panic!("{name}: {error}"));
        std::fs::write(&path, rewritten).unwrap();
    }
    (sites, next_call_site - 100_000)
}

#[test]
fn call_hooks_pair_every_entry_with_an_exit_constructors_included_under_the_strictest_verifier() {
    let classes = compiled();
    let (sites, call_sites) = instrument_calls(
        &classes,
        &[
            "Rewritten",
            "Constructed",
            "Constructed$Child",
            "Constructed$Base",
            "Constructed$Sub",
        ],
    );
    let output = Command::new(jdk().java().expect("java"))
        .args(["-Xverify:all", "-Xshare:off", "-cp"])
        .arg(&classes)
        .arg("RunInstrumented")
        .output()
        .expect("java");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("results ok"), "{stdout}");
    assert!(stdout.contains("made 11"), "{stdout}");
    // The call hook's report comes last: every call open was closed but the one Sub's
    // constructor left through its super(...) call (no handler may cover that call).
    let report = &stdout[stdout.rfind("depth ").unwrap()..];
    assert!(report.starts_with("depth 1\n"), "{report}");
    let counts: BTreeMap<String, u32> = report
        .lines()
        .filter_map(|line| line.rsplit_once(" = "))
        .map(|(what, count)| (what.to_string(), count.parse().unwrap()))
        .collect();
    let count = |what: &str, method: &str| -> u32 {
        let site = sites[method];
        counts.get(&format!("{what} {site}")).copied().unwrap_or(0)
    };
    for method in sites
        .keys()
        .filter(|method| !method.starts_with("Constructed$Sub."))
    {
        assert_eq!(
            count("enter", method),
            count("exit", method) + count("thrown", method),
            "{method}\n{report}"
        );
    }
    // The constructors' known calls (Constructed.main), and Rewritten's.
    let expected = [
        ("enter", "Constructed.<init>(I)V", 11),
        ("enter", "Constructed.<init>()V", 1),
        ("enter", "Constructed.<init>(Ljava/lang/String;)V", 2),
        ("enter", "Constructed.<init>([I)V", 1),
        ("enter", "Constructed.<init>(Z)V", 2),
        ("thrown", "Constructed.<init>(Z)V", 1),
        ("enter", "Constructed.<init>(J)V", 1),
        ("thrown", "Constructed.<init>(J)V", 1),
        ("enter", "Constructed.<init>(LConstructed;)V", 1),
        ("enter", "Constructed.check(Z)I", 2),
        ("thrown", "Constructed.check(Z)I", 1),
        ("enter", "Constructed$Child.<init>(Ljava/lang/String;)V", 2),
        ("enter", "Constructed$Child.<init>()V", 1),
        ("enter", "Constructed$Base.<init>(I)V", 2),
        ("thrown", "Constructed$Base.<init>(I)V", 1),
        ("enter", "Constructed$Sub.<init>(I)V", 2),
        ("exit", "Constructed$Sub.<init>(I)V", 1),
        ("thrown", "Constructed$Sub.<init>(I)V", 0),
        ("enter", "Rewritten.fib(I)I", 177),
        ("enter", "Rewritten.fails(I)I", 6),
        ("thrown", "Rewritten.fails(I)I", 5),
        ("enter", "Rewritten.kind(I)Ljava/lang/String;", 5),
    ];
    for (what, method, calls) in expected {
        assert_eq!(count(what, method), calls, "{what} {method}\n{report}");
    }
    // Every constructor's super(...) or this(...) call that returned says so.
    for (method, calls) in [
        ("Constructed.<init>(I)V", 11),
        ("Constructed.<init>(Z)V", 1),
        ("Constructed.<init>(J)V", 1),
        ("Constructed$Sub.<init>(I)V", 1),
        ("Constructed$Base.<init>(I)V", 2),
    ] {
        assert_eq!(count("initialized", method), calls, "{method}\n{report}");
    }
    // Every call into java/ said it was made and came back (none of them throws).
    assert!(call_sites > 20, "{call_sites} call sites");
    for number in 100_001..=100_000 + call_sites {
        let called = counts.get(&format!("called {number}")).copied();
        assert_eq!(
            called,
            counts.get(&format!("returned {number}")).copied(),
            "{number}"
        );
    }
    assert!(
        counts
            .keys()
            .filter(|key| key.starts_with("called "))
            .count()
            > 10
    );
    // Constructed.main (which calls into java/) caught three throwables: each handler says so.
    let main = sites["Constructed.main([Ljava/lang/String;)V"];
    assert_eq!(counts.get(&format!("caught {main}")), Some(&3), "{report}");
    // Instance methods other than constructors pass their receiver.
    let kind = sites["Rewritten.kind(I)Ljava/lang/String;"];
    assert_eq!(
        counts.get(&format!("this {kind} Rewritten")),
        Some(&5),
        "{report}"
    );
}

/// Covered's marked lines: line number → how many times it runs (its `// runs N` comment).
fn marked_lines() -> BTreeMap<u32, u64> {
    let source =
        std::fs::read_to_string(workspace_root().join("java/classfile/Covered.java")).unwrap();
    source
        .lines()
        .enumerate()
        .filter_map(|(index, line)| {
            let runs = line.split("// runs ").nth(1)?.trim().parse().ok()?;
            Some((index as u32 + 1, runs))
        })
        .collect()
}

/// Covered's methods counting their blocks (with the call hooks too, or alone), run under
/// -Xverify:all: each marked line's count, the most any block holding code of it counted.
fn covered_line_counts(hooks: HookKind) -> BTreeMap<u32, u64> {
    let classes = compiled();
    let path = classes.join("Covered.class");
    let original = std::fs::read(&path).unwrap();
    let methods: Vec<MethodPlan> = declared_methods(&original)
        .unwrap()
        .into_iter()
        .enumerate()
        .filter(|(_, method)| method.has_code)
        .map(|(index, method)| MethodPlan {
            name: method.name,
            descriptor: method.descriptor,
            site: 500 + index as i32,
            parameters: Vec::new(),
            call_sites: Vec::new(),
            outgoing: Vec::new(),
            incoming: false,
        })
        .collect();
    let plan = Plan {
        hook_class: "openprof/CallHook".into(),
        hooks,
        methods,
        coverage: Some(0),
    };
    let instrumented = instrument_each(&original, &plan).unwrap();
    assert!(
        instrumented.refused.is_empty(),
        "{:?}",
        instrumented.refused
    );
    std::fs::write(&path, instrumented.class_file.unwrap()).unwrap();
    let output = Command::new(jdk().java().expect("java"))
        .args(["-Xverify:all", "-Xshare:off", "-cp"])
        .arg(&classes)
        .arg("RunCovered")
        .output()
        .expect("java");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let counters: Vec<u64> = stdout
        .split("counters ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap()
        .split(',')
        .map(|count| count.parse().unwrap())
        .collect();
    // The class's blocks are numbered without gaps, method after method.
    let mut by_line: BTreeMap<u32, u64> = BTreeMap::new();
    let mut next = 0;
    for (_, first, lines) in &instrumented.blocks {
        assert_eq!(*first, next);
        for (offset, block_lines) in lines.iter().enumerate() {
            let count = counters[(first + offset as u32) as usize];
            for line in block_lines {
                let most = by_line.entry(*line).or_default();
                *most = (*most).max(count);
            }
        }
        next += lines.len() as u32;
    }
    let marked = marked_lines();
    by_line.retain(|line, _| marked.contains_key(line));
    by_line
}

#[test]
fn coverage_counts_each_lines_runs_with_a_counter_per_basic_block() {
    let expected = marked_lines();
    assert_eq!(expected.len(), 14);
    assert_eq!(covered_line_counts(HookKind::Counters), expected);
    assert_eq!(
        covered_line_counts(HookKind::Calls { receiver: false }),
        expected,
        "with the call hooks too"
    );
}
