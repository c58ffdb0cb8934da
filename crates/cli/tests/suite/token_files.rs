//! Token files of `openprof serve` (`--token-file`) and `control` (`--control-token-file`): a file too long for a token (or
//! one that never ends) is refused naming it, and a file other users may read is warned about.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use crate::helpers::{finish, openprof_command};

/// `openprof ARGS` without the token variables it would read if set, so that the test's own
/// environment cannot stand in for the files under test; a minute is plenty without a JVM.
fn openprof(args: &[&str]) -> Output {
    let mut command = openprof_command(args);
    command
        .env_remove("OPENPROF_TOKEN")
        .env_remove("OPENPROF_CONTROL_TOKEN");
    finish(command, Duration::from_secs(60))
}

fn token_file(dir: &Path, contents: &[u8], mode: u32) -> PathBuf {
    let file = dir.join("token");
    std::fs::write(&file, contents).unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(mode)).unwrap();
    file
}

/// `openprof control` to a port nobody listens on: the token is read before connecting.
fn control_with(file: &Path) -> (Output, String) {
    let output = openprof(&[
        "control",
        "--collector",
        "127.0.0.1:9",
        "--control-token-file",
        file.to_str().unwrap(),
        "gc",
    ]);
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    (output, stderr)
}

#[test]
fn a_token_file_too_long_or_endless_is_refused_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let long = token_file(dir.path(), &vec![b'k'; 1 << 20], 0o600);
    let (output, stderr) = control_with(&long);
    assert!(!output.status.success());
    assert!(
        stderr.contains(&format!(
            "--control-token-file: {} is longer than 4096 bytes",
            long.display()
        )),
        "{stderr}"
    );
    let store = dir.path().join("store");
    let output = openprof(&[
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--store",
        store.to_str().unwrap(),
        "--token-file",
        "/dev/zero",
    ]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(
        stderr.contains("--token-file: /dev/zero is longer than 4096 bytes"),
        "{stderr}"
    );
}

#[test]
fn a_token_file_others_may_read_is_used_with_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    let file = token_file(dir.path(), b"s3cret-token\n", 0o640);
    let (output, stderr) = control_with(&file);
    // Read and used: the failure is the connection's.
    assert!(!output.status.success());
    assert!(stderr.contains("127.0.0.1:9"), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "openprof WARNING: the token file {} may be read by other users (mode 640)",
            file.display()
        )),
        "{stderr}"
    );
    assert!(!stderr.contains("s3cret-token"), "{stderr}");
    // Owner-only: nothing to say.
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let (_, stderr) = control_with(&file);
    assert!(!stderr.contains("WARNING"), "{stderr}");
}
