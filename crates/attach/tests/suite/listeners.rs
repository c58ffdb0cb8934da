//! The attach client against listeners that are not the target JVM's own: a socket of another
//! user, a socket served by another process, a listener that never stops replying. Each
//! listener is a real process (FakeAttachListener, a JVM that binds the socket itself); the
//! client must refuse before it sends the options, which can carry the collector's token.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread::JoinHandle;
use std::time::Duration;

use openprof_attach::AttachError;
use openprof_testkit::{java_command, wait_until_ready_keeping_output};

const OPTIONS: &str = "cpu=samples,net=127.0.0.1:9,token=do-not-leak-7c1e";
const LIMIT: Duration = Duration::from_secs(60);

/// A FakeAttachListener that has bound its socket.
struct FakeListener {
    child: Child,
    socket: PathBuf,
    stdout: JoinHandle<String>,
}

impl FakeListener {
    /// `at`: "own" for the socket of its own pid, else the socket's path.
    fn start(at: &str, mode: &str) -> FakeListener {
        let (mut command, _dir) = java_command(None, "FakeAttachListener", &[at, mode]);
        let mut child = command.stdin(Stdio::piped()).spawn().expect("start java");
        let stdout = wait_until_ready_keeping_output(&mut child);
        let socket = if at == "own" {
            PathBuf::from(format!("/tmp/.java_pid{}", child.id()))
        } else {
            PathBuf::from(at)
        };
        // Owner-only, as HotSpot makes its socket: only the owner is left to be wrong.
        std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o600))
            .expect("chmod the socket");
        FakeListener {
            child,
            socket,
            stdout,
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Ends it and returns what it reported.
    fn finish(mut self) -> String {
        drop(self.child.stdin.take());
        let status = openprof_testkit::wait_with_limit(self.child, LIMIT).status;
        assert!(status.success(), "the fake listener failed");
        let _ = std::fs::remove_file(&self.socket);
        self.stdout.join().expect("stdout reader")
    }
}

fn attach(pid: u32) -> Result<String, AttachError> {
    openprof_attach::load_agent(
        pid,
        Path::new("/nonexistent/libopenprof_agent.so"),
        OPTIONS,
        Duration::from_secs(5),
    )
}

#[test]
fn a_socket_owned_by_another_user_is_refused_and_gets_no_options() {
    let fake = FakeListener::start("own", "silent");
    // The tests run as root, whom the owner check used to let through.
    std::os::unix::fs::chown(&fake.socket, Some(65534), Some(65534)).expect("chown the socket");
    let error = attach(fake.pid()).unwrap_err();
    let message = error.to_string();
    let pid = fake.pid();
    let reported = fake.finish();
    assert!(
        matches!(error, AttachError::Permission { .. }),
        "{error:?}; the listener saw:\n{reported}"
    );
    assert!(message.contains(&format!("process {pid}")), "{message}");
    assert!(message.contains("uid 65534"), "{message}");
    assert!(!reported.contains("received"), "{reported}");
    assert!(reported.contains("connections 0"), "{reported}");
}

#[test]
fn a_socket_served_by_another_process_is_refused_and_gets_no_options() {
    // The target is no JVM; a socket already at its attach path spares it the SIGQUIT.
    let mut target = Command::new("sleep")
        .arg("60")
        .spawn()
        .expect("start sleep");
    let fake = FakeListener::start(&format!("/tmp/.java_pid{}", target.id()), "silent");
    let result = attach(target.id());
    let fake_pid = fake.pid();
    let reported = fake.finish();
    let _ = target.kill();
    let _ = target.wait();
    let error = result.unwrap_err();
    let message = error.to_string();
    assert!(
        matches!(error, AttachError::Permission { .. }),
        "{error:?}; the listener saw:\n{reported}"
    );
    assert!(
        message.contains(&format!("process {fake_pid}")),
        "{message}"
    );
    assert!(!reported.contains("do-not-leak"), "{reported}");
}

#[test]
fn a_reply_that_does_not_end_is_cut_off() {
    let fake = FakeListener::start("own", "flood");
    let started = std::time::Instant::now();
    let result = attach(fake.pid());
    let took = started.elapsed();
    let reported = fake.finish();
    let error = match result {
        Ok(output) => panic!("a reply of {} bytes was read whole", output.len()),
        Err(error) => error,
    };
    let message = error.to_string();
    assert!(message.contains("longer than"), "{message}");
    assert!(took < Duration::from_secs(10), "took {took:?}");
    let sent: u64 = reported
        .lines()
        .find_map(|line| line.strip_prefix("sent "))
        .unwrap_or_else(|| panic!("{reported}"))
        .parse()
        .unwrap();
    // The client stopped reading: the listener could not send all it had.
    assert!(sent < 64 << 20, "the whole flood was read ({sent} bytes)");
}
