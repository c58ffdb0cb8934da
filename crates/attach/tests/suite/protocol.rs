//! The attach protocol against real processes: a JVM started without any agent, and a process
//! that is no JVM.

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use openprof_attach::{AttachError, Target, DEFAULT_TIMEOUT, LOAD_REPLY_MAX};
use openprof_testkit::{java_command, wait_until_ready, wait_with_limit};

/// The system properties of a test JVM (a few KiB), with room to spare.
const PROPERTIES_MAX: usize = 64 << 10;

#[test]
fn a_running_jvm_answers_commands_and_the_trigger_file_is_gone() {
    let (mut command, dir) = java_command(None, "AttachTarget", &["0.1"]);
    let mut child = command.stdin(Stdio::piped()).spawn().expect("start java");
    wait_until_ready(&mut child);
    let pid = child.id();

    let target = Target::locate(pid).expect("locate the JVM");
    assert_eq!(target.ns_pid, pid, "same pid namespace");
    // The listener starts on the first attach (SIGQUIT and the trigger file), and is reused.
    for _ in 0..2 {
        let (status, properties) = target
            .execute("properties", &[], DEFAULT_TIMEOUT, PROPERTIES_MAX)
            .expect("properties");
        assert_eq!(status, 0, "{properties}");
        assert!(properties.contains("java.version="), "{properties}");
    }
    assert!(target.socket_path().exists());
    assert!(
        !dir.join(format!(".attach_pid{pid}")).exists(),
        "the trigger file is removed"
    );
    // A command HotSpot does not know is answered with a failure status, not a hang.
    let (status, output) = target
        .execute("nosuchcommand", &[], DEFAULT_TIMEOUT, LOAD_REPLY_MAX)
        .expect("a reply");
    assert_ne!(status, 0, "{output}");
    // A library that is not there: the JVM's loader says so and the JVM runs on.
    match target.load_agent(
        std::path::Path::new("/nonexistent/libnothing.so"),
        "",
        DEFAULT_TIMEOUT,
    ) {
        Err(error @ AttachError::CommandFailed { .. }) => {
            assert!(error.to_string().contains("libnothing.so"), "{error}")
        }
        other => panic!("{other:?}"),
    }

    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"go\n")
        .expect("write go");
    let output = wait_with_limit(child, Duration::from_secs(60));
    assert!(output.status.success(), "{output:?}");
    // SIGQUIT with the trigger file present starts the listener instead of a thread dump.
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(!stdout.contains("Full thread dump"), "{stdout}");
}

#[test]
fn a_process_that_is_no_jvm_is_refused_and_not_signalled() {
    let mut sleeper = Command::new("sleep")
        .arg("60")
        .spawn()
        .expect("start sleep");
    let error = openprof_attach::load_agent(
        sleeper.id(),
        std::path::Path::new("/nonexistent/lib.so"),
        "",
        Duration::from_secs(2),
    )
    .unwrap_err();
    assert!(
        matches!(error, AttachError::NotAJvm { pid, .. } if pid == sleeper.id()),
        "{error:?}"
    );
    assert!(error.to_string().contains("not a HotSpot JVM"), "{error}");
    // SIGQUIT would have ended it.
    assert!(
        sleeper.try_wait().unwrap().is_none(),
        "sleep is still running"
    );
    sleeper.kill().unwrap();
    sleeper.wait().unwrap();
}

#[test]
fn a_process_that_does_not_exist_is_named() {
    // Beyond any pid_max (at most 2^22), so never a live process.
    let pid = i32::MAX as u32 - 7;
    let error = openprof_attach::load_agent(
        pid,
        std::path::Path::new("/x.so"),
        "",
        Duration::from_secs(1),
    )
    .unwrap_err();
    assert_eq!(error.to_string(), format!("no process {pid}"));
}
