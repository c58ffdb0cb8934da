//! HotSpot's dynamic attach mechanism on Linux, as the JDK's own `VirtualMachine.attach` speaks
//! it, without a JDK: find (or wake) the target JVM's attach listener, connect to its UNIX
//! socket, send one command and read the reply.
//!
//! The listener is a socket `.java_pid<pid>` in the JVM's temp directory (always `/tmp` on
//! Linux), where `<pid>` is the JVM's pid as the JVM itself sees it (its pid namespace's). A JVM
//! starts the listener lazily: when it gets SIGQUIT while a file `.attach_pid<pid>` exists in its
//! working directory (or its temp directory), and otherwise prints a thread dump. The request is
//! `1\0<command>\0<arg>\0<arg>\0<arg>\0`; the reply is a status line, then the command's output,
//! and the JVM closes the connection.
//!
//! The request can carry secrets (the agent's options hold the collector's token), so it goes
//! only to the target process itself: the socket must belong to the target's user, and the
//! process listening on it must be the target. A reply is read up to a bound, within a time limit.

use std::ffi::CString;
use std::fs;
use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How long [`load_agent`] waits for a JVM to start its attach listener by default; the JDK's
/// own attach waits 10 s too (`sun.tools.attach.attachTimeout`).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long the JVM may take to run a command (Agent_OnAttach walks every loaded class).
const REPLY_PATIENCE: Duration = Duration::from_secs(120);

/// The longest reply to `load` taken: HotSpot answers a status line and `return code: N`, or
/// the dynamic loader's one-line reason; anything longer is not a JVM's answer.
pub const LOAD_REPLY_MAX: usize = 4 << 10;

/// HotSpot takes exactly three arguments of at most 1024 bytes each
/// (`AttachOperation::arg_length_max`), and command names of at most 16.
const ARG_COUNT: usize = 3;
const ARG_LENGTH_MAX: usize = 1024;
const NAME_LENGTH_MAX: usize = 16;

/// Why an attach failed. Every message names the process.
#[derive(Debug, thiserror::Error)]
pub enum AttachError {
    #[error("no process {pid}")]
    NoSuchProcess { pid: u32 },
    #[error("process {pid} is not a HotSpot JVM that can be attached to: {why}")]
    NotAJvm { pid: u32, why: String },
    #[error("not allowed to attach to process {pid}: {why}")]
    Permission { pid: u32, why: String },
    #[error(
        "JVM {pid} did not start its attach listener within {} s (started with \
         -XX:+DisableAttachMechanism, or too busy to answer?)",
        waited.as_secs_f32()
    )]
    NoListener { pid: u32, waited: Duration },
    #[error("attaching to JVM {pid}: {doing}: {source}")]
    Io {
        pid: u32,
        doing: String,
        source: io::Error,
    },
    #[error("attaching to JVM {pid}: {why}")]
    BadRequest { pid: u32, why: String },
    #[error("JVM {pid} sent a reply the attach protocol does not have: {reply:?}")]
    Protocol { pid: u32, reply: String },
    #[error(
        "JVM {pid} sent a reply longer than {max} bytes; the rest was not read (is that socket \
         the JVM's attach listener?)"
    )]
    ReplyTooLong { pid: u32, max: usize },
    #[error("JVM {pid} did not finish its reply within {} s", waited.as_secs())]
    ReplyTimeout { pid: u32, waited: Duration },
    #[error("JVM {pid} failed the `{command}` command (status {status}): {message}")]
    CommandFailed {
        pid: u32,
        command: String,
        status: i32,
        message: String,
    },
    #[error("the agent refused to start in JVM {pid}: its Agent_OnAttach returned {code}")]
    AgentFailed {
        pid: u32,
        code: i32,
        message: String,
    },
}

/// A process to attach to, as seen from here and as it sees itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// The pid in our pid namespace.
    pub pid: u32,
    /// The pid in the target's own (innermost) pid namespace, which names its socket.
    pub ns_pid: u32,
    /// The target's `/tmp`, reached through `/proc/<pid>/root` so that a JVM in a container or
    /// with a private /tmp is found too.
    pub tmp_dir: PathBuf,
    /// The target's effective uid: its attach socket must belong to it.
    pub uid: u32,
    /// Whether the target has a handler for SIGQUIT (HotSpot does, unless started with -Xrs).
    catches_quit: bool,
}

impl Target {
    /// Looks the process up in /proc.
    pub fn locate(pid: u32) -> Result<Target, AttachError> {
        if pid == 0 || pid > i32::MAX as u32 {
            return Err(AttachError::NoSuchProcess { pid });
        }
        let status = match fs::read_to_string(format!("/proc/{pid}/status")) {
            Ok(status) => status,
            Err(error) if error.kind() == io::ErrorKind::NotFound => {
                return Err(AttachError::NoSuchProcess { pid })
            }
            Err(source) => {
                return Err(AttachError::Io {
                    pid,
                    doing: format!("reading /proc/{pid}/status"),
                    source,
                })
            }
        };
        let ns_pid = innermost_ns_pid(&status).unwrap_or(pid);
        let uid = effective_uid(&status).ok_or_else(|| AttachError::Io {
            pid,
            doing: format!("reading /proc/{pid}/status"),
            source: io::Error::new(io::ErrorKind::InvalidData, "it has no Uid: line"),
        })?;
        let catches_quit = catches_signal(&status, libc::SIGQUIT).unwrap_or(true);
        let through_root = PathBuf::from(format!("/proc/{pid}/root/tmp"));
        let tmp_dir = match fs::metadata(&through_root) {
            Ok(_) => through_root,
            // /proc/<pid>/root needs ptrace-read access; in our own pid namespace the JDK uses
            // our /tmp, and so do we when that is all we may see.
            Err(_) if ns_pid == pid => PathBuf::from("/tmp"),
            Err(error) => {
                return Err(AttachError::Permission {
                    pid,
                    why: format!(
                        "can't reach its /tmp through {}: {error}",
                        through_root.display()
                    ),
                })
            }
        };
        Ok(Target {
            pid,
            ns_pid,
            tmp_dir,
            uid,
            catches_quit,
        })
    }

    /// The attach listener's socket.
    pub fn socket_path(&self) -> PathBuf {
        self.tmp_dir.join(format!(".java_pid{}", self.ns_pid))
    }

    /// Makes sure the listener runs: if its socket is missing, creates the trigger file, sends
    /// SIGQUIT and waits up to `timeout` for the socket to appear.
    pub fn start_listener(&self, timeout: Duration) -> Result<(), AttachError> {
        let socket = self.socket_path();
        if is_socket(&socket) {
            return Ok(());
        }
        // SIGQUIT kills a process that does not handle it: make sure this is a JVM first.
        self.check_is_jvm()?;
        let _trigger = Trigger::create(self)?;
        self.signal(libc::SIGQUIT)?;
        let started = Instant::now();
        let mut resent = false;
        loop {
            std::thread::sleep(Duration::from_millis(50));
            if is_socket(&socket) {
                return Ok(());
            }
            if !self.is_alive() {
                return Err(AttachError::NoSuchProcess { pid: self.pid });
            }
            let waited = started.elapsed();
            if waited > timeout {
                return Err(AttachError::NoListener {
                    pid: self.pid,
                    waited,
                });
            }
            // As the JDK does: a second signal in case the first came while the JVM was still
            // starting and not yet handling signals.
            if !resent && waited > timeout / 2 {
                resent = true;
                self.signal(libc::SIGQUIT)?;
            }
        }
    }

    fn check_is_jvm(&self) -> Result<(), AttachError> {
        let pid = self.pid;
        if !self.catches_quit {
            return Err(AttachError::NotAJvm {
                pid,
                why: "it does not handle SIGQUIT (not a JVM, or a JVM started with -Xrs)".into(),
            });
        }
        // The maps may be unreadable (another user's process); the socket's owner check and
        // the JVM's own checks still stand then.
        if let Ok(maps) = fs::read_to_string(format!("/proc/{pid}/maps")) {
            if !maps_have_libjvm(&maps) {
                return Err(AttachError::NotAJvm {
                    pid,
                    why: "no libjvm.so is mapped in it".into(),
                });
            }
        }
        Ok(())
    }

    fn signal(&self, signal: libc::c_int) -> Result<(), AttachError> {
        // SAFETY: kill only sends a signal; the pid was checked to fit a pid_t.
        if unsafe { libc::kill(self.pid as libc::pid_t, signal) } == 0 {
            return Ok(());
        }
        let error = io::Error::last_os_error();
        Err(match error.raw_os_error() {
            Some(libc::ESRCH) => AttachError::NoSuchProcess { pid: self.pid },
            Some(libc::EPERM) => AttachError::Permission {
                pid: self.pid,
                why: "it belongs to another user".into(),
            },
            _ => AttachError::Io {
                pid: self.pid,
                doing: "sending SIGQUIT".into(),
                source: error,
            },
        })
    }

    fn is_alive(&self) -> bool {
        Path::new(&format!("/proc/{}", self.pid)).exists()
    }

    /// Sends one command and returns the JVM's status and output, refusing a reply longer than
    /// `max_reply` bytes. Starts the listener first if needed.
    pub fn execute(
        &self,
        command: &str,
        args: &[&str],
        timeout: Duration,
        max_reply: usize,
    ) -> Result<(i32, String), AttachError> {
        let request = encode_request(command, args)
            .map_err(|why| AttachError::BadRequest { pid: self.pid, why })?;
        self.start_listener(timeout)?;
        let socket = self.socket_path();
        let permission = |why| AttachError::Permission { pid: self.pid, why };
        check_socket_owner(&socket, self.uid, current_euid()).map_err(permission)?;
        let io_error = |doing: &str| {
            let pid = self.pid;
            let doing = doing.to_string();
            move |source| AttachError::Io { pid, doing, source }
        };
        let mut stream = UnixStream::connect(&socket)
            .map_err(io_error(&format!("connecting to {}", socket.display())))?;
        // The file's owner can be changed by root, and a process of the same user can bind a
        // socket at another process's path: the listener itself must be the target.
        let (peer_pid, peer_uid) =
            peer_credentials(&stream).map_err(io_error("reading the listener's credentials"))?;
        listener_is_target(&socket, peer_pid, peer_uid, self.pid, self.uid).map_err(permission)?;
        stream
            .write_all(&request)
            .map_err(io_error("sending the request"))?;
        let reply = self.read_reply(&mut stream, max_reply)?;
        let reply = String::from_utf8_lossy(&reply).into_owned();
        parse_reply(&reply).ok_or(AttachError::Protocol {
            pid: self.pid,
            reply,
        })
    }

    /// Reads until the JVM closes the connection: at most `max` bytes, within REPLY_PATIENCE
    /// in all (a reply that trickles in does not reset the clock).
    fn read_reply(&self, stream: &mut UnixStream, max: usize) -> Result<Vec<u8>, AttachError> {
        let pid = self.pid;
        let started = Instant::now();
        let mut reply = Vec::new();
        let mut buffer = [0u8; 4096];
        loop {
            let left = REPLY_PATIENCE.saturating_sub(started.elapsed());
            if left.is_zero() {
                return Err(AttachError::ReplyTimeout {
                    pid,
                    waited: REPLY_PATIENCE,
                });
            }
            stream
                .set_read_timeout(Some(left))
                .map_err(|source| AttachError::Io {
                    pid,
                    doing: "setting a read timeout".into(),
                    source,
                })?;
            match stream.read(&mut buffer) {
                Ok(0) => return Ok(reply),
                Ok(count) => {
                    if reply.len() + count > max {
                        return Err(AttachError::ReplyTooLong { pid, max });
                    }
                    reply.extend_from_slice(&buffer[..count]);
                }
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                Err(error)
                    if matches!(
                        error.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    return Err(AttachError::ReplyTimeout {
                        pid,
                        waited: started.elapsed(),
                    })
                }
                Err(source) => {
                    return Err(AttachError::Io {
                        pid,
                        doing: "reading the reply".into(),
                        source,
                    })
                }
            }
        }
    }
}

/// Loads an agent library (by absolute path) into JVM `pid` with `options`; returns the JVM's
/// output. Fails with [`AttachError::AgentFailed`] when Agent_OnAttach returns non-zero.
pub fn load_agent(
    pid: u32,
    library: &Path,
    options: &str,
    timeout: Duration,
) -> Result<String, AttachError> {
    Target::locate(pid)?.load_agent(library, options, timeout)
}

impl Target {
    /// [`load_agent`] for a located target.
    pub fn load_agent(
        &self,
        library: &Path,
        options: &str,
        timeout: Duration,
    ) -> Result<String, AttachError> {
        let pid = self.pid;
        let library = library.to_str().ok_or_else(|| AttachError::BadRequest {
            pid,
            why: format!("the library path {} is not UTF-8", library.display()),
        })?;
        // "true": the path is absolute, not a name to look up in the JVM's library path.
        if !Path::new(library).is_absolute() {
            return Err(AttachError::BadRequest {
                pid,
                why: format!("the library path {library} is not absolute"),
            });
        }
        let (status, output) =
            self.execute("load", &[library, "true", options], timeout, LOAD_REPLY_MAX)?;
        load_outcome(pid, status, output)
    }
}

/// Reads `load`'s reply: HotSpot (JDK 9 and later) answers status 0 and `return code: N`, N
/// being Agent_OnAttach's result; a library it could not load gives a non-zero status and the
/// loader's message. A reply without a return code loaded nothing: JDK 25 answers a `load`
/// that comes before the JVM runs with status 0 and only "Dynamic agent loading is only
/// permitted in the live phase".
fn load_outcome(pid: u32, status: i32, output: String) -> Result<String, AttachError> {
    if status != 0 {
        return Err(AttachError::CommandFailed {
            pid,
            command: "load".into(),
            status,
            message: output.trim().to_string(),
        });
    }
    match return_code(&output) {
        Some(0) => Ok(output),
        None => Err(AttachError::CommandFailed {
            pid,
            command: "load".into(),
            status,
            message: format!(
                "{} (no return code: the agent was not loaded; is the JVM still starting? \
                 attach once it runs)",
                output.trim()
            ),
        }),
        Some(code) => Err(AttachError::AgentFailed {
            pid,
            code,
            message: output.trim().to_string(),
        }),
    }
}

/// The attach request: protocol version 1, the command, exactly three arguments (missing ones
/// empty), each NUL-terminated.
pub fn encode_request(command: &str, args: &[&str]) -> Result<Vec<u8>, String> {
    if command.is_empty() || command.len() > NAME_LENGTH_MAX {
        return Err(format!(
            "the command name {command:?} must have 1 to {NAME_LENGTH_MAX} bytes"
        ));
    }
    if args.len() > ARG_COUNT {
        return Err(format!(
            "the attach protocol takes at most {ARG_COUNT} arguments"
        ));
    }
    let mut request = b"1\0".to_vec();
    for part in std::iter::once(&command).chain(args) {
        if part.len() > ARG_LENGTH_MAX {
            return Err(format!(
                "an argument of {} bytes is longer than the {ARG_LENGTH_MAX} HotSpot accepts",
                part.len()
            ));
        }
        // A NUL inside would end the string early and shift every later argument.
        let part = CString::new(*part).map_err(|_| format!("{part:?} contains a NUL byte"))?;
        request.extend_from_slice(part.as_bytes_with_nul());
    }
    // Each missing argument is an empty string: its NUL alone.
    request.resize(request.len() + ARG_COUNT - args.len(), 0);
    Ok(request)
}

/// The reply's status (its first line) and the rest, or `None` if it has no status line.
pub fn parse_reply(reply: &str) -> Option<(i32, String)> {
    let (status, rest) = reply.split_once('\n').unwrap_or((reply, ""));
    let status = status.trim().parse().ok()?;
    Some((status, rest.to_string()))
}

/// The `return code: N` line of a `load` reply.
pub fn return_code(output: &str) -> Option<i32> {
    output
        .lines()
        .find_map(|line| line.trim().strip_prefix("return code:"))
        .and_then(|code| code.trim().parse().ok())
}

/// The last field of /proc/PID/status's `NSpid:` line: the pid in the process's own namespace
/// (kernels before 4.1 have no such line).
pub fn innermost_ns_pid(status: &str) -> Option<u32> {
    status
        .lines()
        .find_map(|line| line.strip_prefix("NSpid:"))
        .and_then(|pids| pids.split_whitespace().last())
        .and_then(|pid| pid.parse().ok())
}

/// The effective uid of /proc/PID/status's `Uid:` line (real, effective, saved, filesystem).
pub fn effective_uid(status: &str) -> Option<u32> {
    status
        .lines()
        .find_map(|line| line.strip_prefix("Uid:"))
        .and_then(|uids| uids.split_whitespace().nth(1))
        .and_then(|uid| uid.parse().ok())
}

/// Whether /proc/PID/status's `SigCgt:` mask (caught signals, bit N-1 for signal N) has `signal`.
pub fn catches_signal(status: &str, signal: libc::c_int) -> Option<bool> {
    let mask = status
        .lines()
        .find_map(|line| line.strip_prefix("SigCgt:"))
        .and_then(|mask| u64::from_str_radix(mask.trim(), 16).ok())?;
    Some(signal > 0 && signal <= 64 && mask & (1u64 << (signal - 1)) != 0)
}

/// Whether /proc/PID/maps shows HotSpot's library.
pub fn maps_have_libjvm(maps: &str) -> bool {
    maps.lines()
        .any(|line| line.ends_with("/libjvm.so") || line.contains("/libjvm.so "))
}

fn is_socket(path: &Path) -> bool {
    fs::symlink_metadata(path).is_ok_and(|meta| meta.file_type().is_socket())
}

fn current_euid() -> u32 {
    // SAFETY: geteuid has no arguments and cannot fail.
    unsafe { libc::geteuid() }
}

/// The check before connecting: the socket belongs to the target's user and only its owner
/// may use it, so that no other user can stand in for the JVM; and, as the JDK checks, it is
/// ours unless we are root.
pub fn check_socket_owner(socket: &Path, target_uid: u32, euid: u32) -> Result<(), String> {
    let meta = fs::symlink_metadata(socket)
        .map_err(|error| format!("can't stat {}: {error}", socket.display()))?;
    if !meta.file_type().is_socket() {
        return Err(format!("{} is not a socket", socket.display()));
    }
    socket_owner_ok(
        meta.uid(),
        meta.mode(),
        target_uid,
        euid,
        &socket.display().to_string(),
    )
}

fn socket_owner_ok(
    uid: u32,
    mode: u32,
    target_uid: u32,
    euid: u32,
    name: &str,
) -> Result<(), String> {
    if uid != target_uid {
        return Err(format!(
            "{name} belongs to uid {uid}, but the process runs as uid {target_uid}: someone \
             else's socket; refusing to send it the options"
        ));
    }
    if uid != euid && euid != 0 {
        return Err(format!(
            "{name} belongs to uid {uid}, not to us (uid {euid}); attach as the JVM's user"
        ));
    }
    if mode & 0o077 != 0 {
        return Err(format!(
            "{name} may be used by other users (mode {:o}); refusing it",
            mode & 0o777
        ));
    }
    Ok(())
}

/// The pid (in our namespace) and uid of the process that listens on the connected socket.
fn peer_credentials(stream: &UnixStream) -> io::Result<(u32, u32)> {
    let mut credentials = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut length = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: the socket is open for the call; `credentials` is a ucred and `length` its size,
    // which is what SO_PEERCRED fills in.
    let status = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut credentials as *mut libc::ucred).cast(),
            &mut length,
        )
    };
    if status != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((credentials.pid as u32, credentials.uid))
}

/// The listener must be the target process, running as the target's user.
fn listener_is_target(
    socket: &Path,
    peer_pid: u32,
    peer_uid: u32,
    pid: u32,
    uid: u32,
) -> Result<(), String> {
    if peer_pid != pid {
        return Err(format!(
            "{} is served by process {peer_pid}, not by process {pid}; refusing to send it the \
             options",
            socket.display()
        ));
    }
    if peer_uid != uid {
        return Err(format!(
            "{} is served as uid {peer_uid}, but the process runs as uid {uid}; refusing to send \
             it the options",
            socket.display()
        ));
    }
    Ok(())
}

/// The `.attach_pid<pid>` file that asks the JVM to start its listener; removed when dropped.
struct Trigger {
    /// `None` when the file was there already (someone else's attach): it is left alone.
    path: Option<PathBuf>,
}

impl Trigger {
    fn create(target: &Target) -> Result<Trigger, AttachError> {
        let name = format!(".attach_pid{}", target.ns_pid);
        // The JVM looks in its working directory first, then in its temp directory.
        let candidates = [
            PathBuf::from(format!("/proc/{}/cwd", target.pid)).join(&name),
            target.tmp_dir.join(&name),
        ];
        let mut last_error = None;
        for path in candidates {
            match fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&path)
            {
                Ok(_) => return Ok(Trigger { path: Some(path) }),
                Err(error) if error.kind() == io::ErrorKind::AlreadyExists => {
                    return Ok(Trigger { path: None })
                }
                Err(error) => last_error = Some((path, error)),
            }
        }
        let (path, source) = last_error.expect("two candidates were tried");
        Err(AttachError::Io {
            pid: target.pid,
            doing: format!("creating the trigger file {}", path.display()),
            source,
        })
    }
}

impl Drop for Trigger {
    fn drop(&mut self) {
        if let Some(path) = &self.path {
            let _ = fs::remove_file(path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_has_three_nul_terminated_arguments() {
        let request = encode_request("load", &["/a/lib.so", "true", "cpu=samples"]).unwrap();
        assert_eq!(request, b"1\0load\0/a/lib.so\0true\0cpu=samples\0");
        // Empty and missing arguments are empty strings.
        let request = encode_request("load", &["/a/lib.so", "true", ""]).unwrap();
        assert_eq!(request, b"1\0load\0/a/lib.so\0true\0\0");
        assert_eq!(
            encode_request("properties", &[]).unwrap(),
            b"1\0properties\0\0\0\0"
        );
    }

    #[test]
    fn requests_hotspot_would_refuse_are_refused_here() {
        assert!(encode_request("load", &["a\0b"])
            .unwrap_err()
            .contains("NUL"));
        let long = "x".repeat(1025);
        assert!(encode_request("load", &[&long])
            .unwrap_err()
            .contains("1025"));
        assert!(encode_request("load", &["a", "b", "c", "d"]).is_err());
        assert!(encode_request("", &[]).is_err());
        assert!(encode_request("a-command-name-too-long", &[]).is_err());
    }

    #[test]
    fn replies_give_status_and_agent_return_code() {
        let (status, rest) = parse_reply("0\nreturn code: 0\n").unwrap();
        assert_eq!((status, return_code(&rest)), (0, Some(0)));
        let (status, rest) = parse_reply("0\nreturn code: -1\n").unwrap();
        assert_eq!((status, return_code(&rest)), (0, Some(-1)));
        let (status, rest) =
            parse_reply("-1\n/x/lib.so was not loaded.\n/x/lib.so: cannot open\n").unwrap();
        assert_eq!(status, -1);
        assert!(rest.contains("was not loaded"));
        assert_eq!(parse_reply("0").unwrap(), (0, String::new()));
        assert!(parse_reply("").is_none());
        assert!(parse_reply("ATTACH_ERROR\n").is_none());
    }

    #[test]
    fn load_outcomes_map_to_errors() {
        assert!(load_outcome(7, 0, "return code: 0\n".into()).is_ok());
        match load_outcome(7, 0, "return code: -1\n".into()) {
            Err(AttachError::AgentFailed {
                pid: 7, code: -1, ..
            }) => {}
            other => panic!("{other:?}"),
        }
        let early = "0\nDynamic agent loading is only permitted in the live phase\n";
        match load_outcome(7, 0, early.into()) {
            Err(error @ AttachError::CommandFailed { status: 0, .. }) => {
                assert!(error.to_string().contains("live phase"), "{error}");
                assert!(error.to_string().contains("not loaded"), "{error}");
            }
            other => panic!("{other:?}"),
        }
        match load_outcome(7, 100, "x was not loaded.\n".into()) {
            Err(error @ AttachError::CommandFailed { status: 100, .. }) => {
                assert!(error.to_string().contains("JVM 7"), "{error}")
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn status_fields_are_read() {
        let status = "Name:\tjava\nPid:\t4242\nNSpid:\t4242\t17\nUid:\t1000\t1001\t1001\t1001\n\
                      SigCgt:\t0000000181005ccf\n";
        assert_eq!(innermost_ns_pid(status), Some(17));
        assert_eq!(effective_uid(status), Some(1001));
        assert_eq!(effective_uid("Pid:\t99\n"), None);
        assert_eq!(innermost_ns_pid("NSpid:\t99\n"), Some(99));
        assert_eq!(innermost_ns_pid("Pid:\t99\n"), None);
        // 0x...5ccf has bit 2 (SIGQUIT, 3) set; 0x...5cc8 does not.
        assert_eq!(catches_signal(status, libc::SIGQUIT), Some(true));
        assert_eq!(
            catches_signal("SigCgt:\t0000000000005cc8\n", libc::SIGQUIT),
            Some(false)
        );
        assert_eq!(catches_signal("", libc::SIGQUIT), None);
    }

    #[test]
    fn libjvm_is_found_in_maps() {
        let maps = "7f00-7f10 r-xp 00000000 08:01 123 /usr/lib/jvm/java-17/lib/server/libjvm.so\n";
        assert!(maps_have_libjvm(maps));
        assert!(!maps_have_libjvm(
            "7f00-7f10 r-xp 00000000 08:01 1 /usr/bin/sleep\n"
        ));
    }

    #[test]
    fn socket_owner_and_mode_are_checked() {
        assert!(socket_owner_ok(1000, 0o600, 1000, 1000, "s").is_ok());
        assert!(
            socket_owner_ok(1000, 0o600, 1000, 0, "s").is_ok(),
            "root may"
        );
        assert!(socket_owner_ok(1001, 0o600, 1001, 1000, "s")
            .unwrap_err()
            .contains("not to us"));
        // Not the target's, even for root.
        assert!(socket_owner_ok(1001, 0o600, 1000, 0, "s")
            .unwrap_err()
            .contains("belongs to uid 1001, but the process runs as uid 1000"));
        assert!(socket_owner_ok(1000, 0o666, 1000, 1000, "s")
            .unwrap_err()
            .contains("other users"));
    }

    #[test]
    fn the_listener_must_be_the_target() {
        let socket = Path::new("/tmp/.java_pid7");
        assert!(listener_is_target(socket, 7, 1000, 7, 1000).is_ok());
        assert!(listener_is_target(socket, 8, 1000, 7, 1000)
            .unwrap_err()
            .contains("served by process 8, not by process 7"));
        assert!(listener_is_target(socket, 7, 0, 7, 1000)
            .unwrap_err()
            .contains("as uid 0"));
    }

    #[test]
    fn impossible_pids_are_no_such_process() {
        for pid in [0, i32::MAX as u32 + 1, i32::MAX as u32 - 1] {
            match Target::locate(pid) {
                Err(AttachError::NoSuchProcess { pid: reported }) => assert_eq!(reported, pid),
                other => panic!("{pid}: {other:?}"),
            }
        }
    }

    #[test]
    fn our_own_process_is_located_but_is_no_jvm() {
        let target = Target::locate(std::process::id()).unwrap();
        assert_eq!(target.ns_pid, std::process::id());
        assert!(target.tmp_dir.ends_with("tmp"));
        // The test binary maps no libjvm.so; checking must not signal it.
        assert!(matches!(
            target.check_is_jvm(),
            Err(AttachError::NotAJvm { .. })
        ));
    }
}
