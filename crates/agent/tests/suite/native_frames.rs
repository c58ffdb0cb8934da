//! Native frames and failed walks' marks in cpu=samples, against workloads built for them:
//! NativeSpin spends nearly all its CPU in a C function of ours two native frames under its JNI
//! method; NativeDeflate in zlib under Deflater.deflateBytesBytes; Megamorphic has walks
//! AsyncGetCallTrace cannot finish.

use std::collections::HashMap;
use std::io::BufReader;
use std::time::Duration;

use openprof_format::hprof_binary::read_profile;
use openprof_format::hprof_text::{Frame, FrameLine, TextProfile, Trace};
use openprof_testkit::run_java;

const LIMIT: Duration = Duration::from_secs(120);
/// The JNI method through which Deflater calls zlib.
const DEFLATE_JNI: &str = "java.util.zip.Deflater.deflateBytesBytes";

fn profile_of(options: &str, workload: &str, cpu_seconds: &str, file: &str) -> TextProfile {
    let run = run_java(
        Some(&format!("{options},file={file}")),
        workload,
        &[cpu_seconds],
        LIMIT,
    );
    assert!(run.success(), "{options}: {}", run.stderr());
    run.profile(file)
}

/// (trace, samples) for every row of every CPU SAMPLES table.
fn sampled_traces(profile: &TextProfile) -> Vec<(&Trace, u64)> {
    profile
        .cpu_tables
        .iter()
        .flat_map(|table| &table.rows)
        .map(|row| (&profile.traces[&row.trace], row.count))
        .collect()
}

/// The frames a trace has above its first Java frame, and that Java frame's method.
fn split_at_java(trace: &Trace) -> (&[Frame], Option<String>) {
    let first_java = trace
        .frames
        .iter()
        .position(|frame| frame.is_java())
        .unwrap_or(trace.frames.len());
    (
        &trace.frames[..first_java],
        trace.frames.get(first_java).map(|f| f.qualified_method()),
    )
}

/// zlib is the system's libz, or built into the JDK's libzip.
fn is_zlib(library: &str) -> bool {
    library.starts_with("libz.so") || library.starts_with("libzip.so")
}

/// NativeSpin's C side, built with frame pointers: the JNI method calls spin_inner, which
/// does the work (no JNI header needed: a jlong is a C long on x86-64 Linux).
const NATIVE_SPIN_C: &str = r#"
__attribute__((noinline)) long spin_inner(long rounds) {
    volatile long x = 1;
    for (long i = 0; i < rounds; i++) {
        x = x * 6364136223846793005L + 1442695040888963407L;
    }
    return x;
}

long Java_NativeSpin_spin(void *env, void *class, long rounds) {
    return spin_inner(rounds) + 1;
}
"#;

#[test]
fn a_jni_librarys_frames_are_walked_in_full_under_their_java_caller() {
    let dir = openprof_testkit::kept_temp_dir("openprof-native-spin-");
    let source = dir.join("native_spin.c");
    std::fs::write(&source, NATIVE_SPIN_C).unwrap();
    let library = dir.join("libnativespin.so");
    let status = std::process::Command::new("cc")
        .args(["-shared", "-fPIC", "-O1", "-fno-omit-frame-pointer", "-o"])
        .arg(&library)
        .arg(&source)
        .status()
        .expect("run cc");
    assert!(status.success(), "cc failed");
    let run = run_java(
        Some("cpu=samples,depth=6,interval=2,cutoff=0,file=spin.txt"),
        "NativeSpin",
        &[library.to_str().unwrap(), "2"],
        LIMIT,
    );
    assert!(run.success(), "{}", run.stderr());
    let profile = run.profile("spin.txt");
    let samples = sampled_traces(&profile);
    let total: u64 = samples.iter().map(|(_, count)| count).sum();
    let expected = [
        ("libnativespin.so", "spin_inner"),
        ("libnativespin.so", "Java_NativeSpin_spin"),
        ("", "NativeSpin.spin"),
        ("", "NativeSpin.main"),
    ];
    let exact: u64 = samples
        .iter()
        .filter(|(trace, _)| {
            trace.frames.len() == expected.len()
                && trace
                    .frames
                    .iter()
                    .zip(&expected)
                    .all(|(frame, (library, name))| {
                        if library.is_empty() {
                            frame.is_java() && frame.qualified_method() == *name
                        } else {
                            frame.line == FrameLine::NativeCode
                                && frame.class_name == *library
                                && frame.method_name == *name
                        }
                    })
        })
        .map(|(_, count)| count)
        .sum();
    // The workload is built to spend nearly all its CPU in spin_inner; the library is loaded
    // after the VM started, so its first samples may come before the agent has seen it.
    assert!(total >= 300, "{total} samples");
    assert!(
        exact * 10 >= total * 8,
        "{exact} of {total} samples are spin_inner < Java_NativeSpin_spin < NativeSpin.spin < main: {:?}",
        profile.cpu_tables.last()
    );
}

/// Profiles NativeDeflate with `options` into `file` and checks what every native walk must
/// give: nearly all samples under [`DEFLATE_JNI`], only native frames above it, zlib's code on
/// top. Returns the profile, and the native frames (innermost first) of each sample under it
/// with their counts.
fn deflate_under_jni(options: &str, file: &str) -> (TextProfile, Vec<(Vec<Frame>, u64)>) {
    let profile = profile_of(options, "NativeDeflate", "3", file);
    let samples = sampled_traces(&profile);
    let total: u64 = samples.iter().map(|(_, count)| count).sum();
    let mut under_jni = Vec::new();
    for (trace, count) in &samples {
        let (native, java) = split_at_java(trace);
        if java.as_deref() != Some(DEFLATE_JNI) {
            continue;
        }
        // Every frame above the JNI method is native code, innermost first.
        assert!(
            native
                .iter()
                .all(|frame| frame.line == FrameLine::NativeCode),
            "{trace:?}"
        );
        under_jni.push((native.to_vec(), *count));
    }
    let under: u64 = under_jni.iter().map(|(_, count)| count).sum();
    let zlib_leaf: u64 = under_jni
        .iter()
        .filter(|(native, _)| native.first().is_some_and(|leaf| is_zlib(&leaf.class_name)))
        .map(|(_, count)| count)
        .sum();
    // The workload is built to spend nearly all its CPU compressing.
    assert!(total >= 500, "{options}: {total} samples");
    assert!(
        under * 10 >= total * 7,
        "{options}: {under} of {total} samples under {DEFLATE_JNI}"
    );
    assert!(
        zlib_leaf * 10 >= under * 9,
        "{options}: {zlib_leaf} of the {under} samples under {DEFLATE_JNI} have zlib's code on top"
    );
    (profile, under_jni)
}

#[test]
fn zlib_frames_sit_directly_above_the_jni_method_that_called_them() {
    let (profile, _) = deflate_under_jni(
        "cpu=samples,depth=8,interval=2,cutoff=0,cstack=fp",
        "deflate.txt",
    );
    // The JVM's own code, walked through its frame pointers, is named by its symbols.
    let jvm_functions = sampled_traces(&profile)
        .iter()
        .flat_map(|(trace, _)| &trace.frames)
        .filter(|frame| frame.line == FrameLine::NativeCode && frame.class_name == "libjvm.so")
        .filter(|frame| !frame.method_name.starts_with("libjvm.so+"))
        .count();
    assert!(jvm_functions > 0, "no named libjvm.so frame");
}

/// The C function of libzip.so behind [`DEFLATE_JNI`], which calls zlib's deflate.
const DEFLATE_JNI_FUNCTION: &str = "Java_java_util_zip_Deflater_deflateBytesBytes";

#[test]
fn dwarf_follows_zlib_without_frame_pointers_down_to_the_jni_function() {
    let (profile, under_jni) = deflate_under_jni(
        "cpu=samples,depth=16,interval=2,cutoff=0,cstack=dwarf",
        "deflate-dwarf.txt",
    );
    let under: u64 = under_jni.iter().map(|(_, count)| count).sum();
    // zlib's frames (no frame pointers) followed by their call frame information, then the
    // JNI function that called deflate, right above the Java method.
    let down_to_jni_function: u64 = under_jni
        .iter()
        .filter(|(native, _)| {
            native.split_last().is_some_and(|(outermost, zlib)| {
                outermost.class_name.starts_with("libzip.so")
                    && outermost.method_name == DEFLATE_JNI_FUNCTION
                    && !zlib.is_empty()
                    && zlib.iter().all(|frame| is_zlib(&frame.class_name))
            })
        })
        .map(|(_, count)| count)
        .sum();
    assert!(
        down_to_jni_function * 10 >= under * 8,
        "{down_to_jni_function} of the {under} samples under {DEFLATE_JNI} walk zlib down to \
         {DEFLATE_JNI_FUNCTION}: {:?}",
        profile.cpu_tables.last()
    );
}

#[test]
fn cstack_no_records_java_frames_only() {
    let profile = profile_of(
        "cpu=samples,depth=8,interval=2,cutoff=0,cstack=no",
        "NativeDeflate",
        "2",
        "java-only.txt",
    );
    let samples = sampled_traces(&profile);
    let total: u64 = samples.iter().map(|(_, count)| count).sum();
    assert!(total >= 300, "{total} samples");
    assert!(samples
        .iter()
        .flat_map(|(trace, _)| &trace.frames)
        .all(|frame| frame.line != FrameLine::NativeCode));
    // The JNI method itself is the top frame instead.
    let on_top: u64 = samples
        .iter()
        .filter(|(trace, _)| {
            trace
                .frames
                .first()
                .map(|f| f.qualified_method())
                .as_deref()
                == Some(DEFLATE_JNI)
        })
        .map(|(_, count)| count)
        .sum();
    assert!(
        on_top * 10 >= total * 7,
        "{on_top} of {total} on {DEFLATE_JNI}"
    );
}

/// javac compiling 300 generated classes: the walks that still fail there (deoptimisation, a
/// few frames in runtime code the walker does not know, some 0.3 %) are the marks to check.
#[test]
fn failed_walks_are_kept_as_marked_samples_and_still_counted() {
    let profile = crate::cpu_samples::javac_profile(300, "cpu=samples,depth=8,interval=1,cutoff=0");
    let failed: u64 = profile.samplers.iter().map(|s| s.failed_total()).sum();
    let mut marked_by_reason: HashMap<String, u64> = HashMap::new();
    for (trace, count) in sampled_traces(&profile) {
        let marks: Vec<_> = trace
            .frames
            .iter()
            .filter(|frame| frame.line == FrameLine::FailedWalk)
            .collect();
        if let Some(mark) = marks.first() {
            // One mark, last: the native frames (if any) above it, no Java frame.
            assert_eq!(marks.len(), 1, "{trace:?}");
            assert_eq!(trace.frames.last(), Some(*mark), "{trace:?}");
            assert!(trace.frames.iter().all(|f| !f.is_java()), "{trace:?}");
            *marked_by_reason
                .entry(mark.method_name.clone())
                .or_default() += count;
        }
    }
    let marked: u64 = marked_by_reason.values().sum();
    assert!(failed > 0, "the workload had no failed walk to mark");
    assert_eq!(
        marked, failed,
        "{marked_by_reason:?} against {:?}",
        profile.samplers
    );
    // Marks and the CPU SAMPLER record's reasons agree one by one.
    let mut failed_by_reason: HashMap<String, u64> = HashMap::new();
    for sampler in &profile.samplers {
        for (reason, count) in &sampler.failed {
            *failed_by_reason.entry(reason.clone()).or_default() += count;
        }
    }
    let mark_of = |reason: &str| match reason {
        "ticks_no_Java_frame" => "[no Java frame]",
        "ticks_no_class_load" => "[no class load]",
        "ticks_GC_active" => "[GC active]",
        "ticks_unknown_not_Java" => "[unknown native]",
        "ticks_not_walkable_not_Java" => "[not walkable native]",
        "ticks_unknown_Java" => "[unknown Java]",
        "ticks_not_walkable_Java" => "[not walkable Java]",
        "ticks_unknown_state" => "[unknown state]",
        "ticks_thread_exit" => "[thread exit]",
        "ticks_deopt" => "[deopt]",
        "ticks_safepoint" => "[safepoint]",
        _ => "[unknown failure]",
    };
    for (reason, count) in failed_by_reason {
        assert_eq!(
            marked_by_reason.get(mark_of(&reason)),
            Some(&count),
            "{reason}: {marked_by_reason:?}"
        );
    }
}

#[test]
fn binary_output_carries_native_frames_for_any_hprof_reader() {
    let run = run_java(
        Some("cpu=samples,depth=8,interval=2,cutoff=0,format=b,file=deflate.hprof"),
        "NativeDeflate",
        &["2"],
        LIMIT,
    );
    assert!(run.success(), "{}", run.stderr());
    let bytes = std::fs::read(run.dir.join("deflate.hprof")).unwrap();
    // Ours reads them back as native code under the JNI method.
    let profile = read_profile(BufReader::new(bytes.as_slice()), &mut |_| {}).expect("reads");
    let under_jni: u64 = sampled_traces(&profile)
        .iter()
        .filter(|(trace, _)| {
            let (native, java) = split_at_java(trace);
            java.as_deref() == Some(DEFLATE_JNI)
                && native.first().is_some_and(|leaf| is_zlib(&leaf.class_name))
        })
        .map(|(_, count)| count)
        .sum();
    assert!(
        under_jni >= 100,
        "{under_jni} samples of zlib under the JNI method"
    );
    // A reader we did not write sees valid STACK FRAMEs: native methods of a class named after
    // the library.
    let hprof = jvm_hprof::parse_hprof(&bytes).expect("jvm-hprof reads the header");
    let mut utf8: HashMap<u64, String> = HashMap::new();
    let mut class_name_ids: HashMap<u32, u64> = HashMap::new();
    let mut frames = Vec::new();
    for record in hprof.records_iter() {
        let record = record.expect("jvm-hprof reads every record");
        if let Some(text) = record.as_utf_8() {
            let text = text.unwrap();
            utf8.insert(
                text.name_id().id(),
                String::from_utf8_lossy(text.text()).into_owned(),
            );
        }
        if let Some(load) = record.as_load_class() {
            let load = load.unwrap();
            class_name_ids.insert(load.class_serial().num(), load.class_name_id().id());
        }
        if let Some(frame) = record.as_stack_frame() {
            frames.push(frame.expect("jvm-hprof reads every STACK FRAME"));
        }
    }
    let zlib_frames = frames
        .iter()
        .filter(|frame| {
            let class = class_name_ids
                .get(&frame.class_serial().num())
                .and_then(|id| utf8.get(id));
            class.is_some_and(|class| is_zlib(class))
                && matches!(frame.line_num(), jvm_hprof::LineNum::NativeMethod)
                && utf8.contains_key(&frame.method_name_id().id())
        })
        .count();
    assert!(
        zlib_frames > 0,
        "no zlib frame among {} frames",
        frames.len()
    );
}
