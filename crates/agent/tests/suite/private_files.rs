//! The agent's output files hold what the application did (and heap dumps hold its data): they
//! are created private to the JVM's user whatever its umask, and never written through a link
//! found at their path. Each case runs a real JVM, under umask 000.

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use openprof_testkit::{java_command, wait_with_limit};

const LIMIT: Duration = Duration::from_secs(60);

/// A JVM running CpuSplit with the agent, under umask 000; `prepare` gets its directory first.
fn run_permissive(options: &str, prepare: impl FnOnce(&Path)) -> (Output, PathBuf) {
    let (java, dir) = java_command(Some(options), "CpuSplit", &["0.1"]);
    prepare(&dir);
    let mut command = Command::new("sh");
    command
        .arg("-c")
        .arg("umask 000 && exec \"$0\" \"$@\"")
        .arg(java.get_program())
        .args(java.get_args())
        .current_dir(&dir)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let output = wait_with_limit(command.spawn().expect("start sh"), LIMIT);
    (output, dir)
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn mode(path: &Path) -> u32 {
    fs::symlink_metadata(path)
        .unwrap_or_else(|error| panic!("{}: {error}", path.display()))
        .mode()
        & 0o7777
}

#[test]
fn profiles_dumps_and_traces_are_private_whatever_the_umask() {
    for (options, file) in [
        ("cpu=samples,file=text.txt", "text.txt"),
        ("heap=dump,format=b,file=dump.hprof", "dump.hprof"),
        ("heap=all,file=heap.txt", "heap.txt"),
        (
            "format=x,cpu=times,filter=+CpuSplit,file=trace.xml",
            "trace.xml",
        ),
    ] {
        let (output, dir) = run_permissive(options, |_| {});
        assert!(output.status.success(), "{options}: {}", stderr(&output));
        assert_eq!(mode(&dir.join(file)), 0o600, "{options}");
    }
    // force=n and the file already there: HPROF's <name>.<pid> file is private too.
    let (output, dir) = run_permissive("cpu=samples,file=text.txt,force=n", |dir| {
        fs::write(dir.join("text.txt"), "earlier\n").unwrap();
    });
    assert!(output.status.success(), "{}", stderr(&output));
    let names: Vec<String> = fs::read_dir(&dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name != "text.txt")
        .collect();
    assert_eq!(names.len(), 1, "{names:?}");
    assert_eq!(mode(&dir.join(&names[0])), 0o600, "{}", names[0]);
    assert_eq!(
        fs::read_to_string(dir.join("text.txt")).unwrap(),
        "earlier\n"
    );
}

/// A file someone else cares about, in a directory of its own.
fn victim() -> PathBuf {
    let dir = openprof_testkit::kept_temp_dir("openprof-victim-");
    let victim = dir.join("victim");
    fs::write(&victim, "victim\n").unwrap();
    fs::set_permissions(&victim, fs::Permissions::from_mode(0o644)).unwrap();
    victim
}

#[test]
fn a_link_at_the_output_path_is_refused_or_replaced_never_written_through() {
    for (options, file) in [
        ("cpu=samples,file=out.txt", "out.txt"),
        (
            "format=x,cpu=times,filter=+CpuSplit,file=out.xml",
            "out.xml",
        ),
    ] {
        // force=n: the link is not followed, and not taken for a file that exists either.
        let victim = victim();
        let absent = victim.with_file_name("absent");
        for target in [&victim, &absent] {
            let (output, dir) = run_permissive(&format!("{options},force=n"), |dir| {
                std::os::unix::fs::symlink(target, dir.join(file)).unwrap();
            });
            let said = stderr(&output);
            assert!(!output.status.success(), "{options}: the JVM started");
            assert!(
                said.contains(&format!("openprof ERROR: file={file}"))
                    && said.contains("symbolic link"),
                "{options}: {said}"
            );
            assert_eq!(
                fs::read_to_string(&victim).unwrap(),
                "victim\n",
                "{options}"
            );
            assert!(!absent.exists(), "{options}: the link's target was created");
            let left: Vec<_> = fs::read_dir(&dir).unwrap().collect();
            assert_eq!(left.len(), 1, "{options}: only the link is left");
        }
        // force=y: the link itself is replaced by a fresh private file.
        let (output, dir) = run_permissive(&format!("{options},force=y"), |dir| {
            std::os::unix::fs::symlink(&victim, dir.join(file)).unwrap();
        });
        assert!(output.status.success(), "{options}: {}", stderr(&output));
        assert_eq!(
            fs::read_to_string(&victim).unwrap(),
            "victim\n",
            "{options}"
        );
        assert_eq!(mode(&victim), 0o644, "{options}");
        let written = dir.join(file);
        assert!(
            fs::symlink_metadata(&written)
                .unwrap()
                .file_type()
                .is_file(),
            "{options}: still a link"
        );
        assert_eq!(mode(&written), 0o600, "{options}");
        assert!(fs::metadata(&written).unwrap().len() > 100, "{options}");
    }
}
