//! What every engine of a run shares: the JVM and its JVMTI environment, the options, the
//! numbered Java threads, HPROF's report being written (text or binary output, with its table
//! of stack traces), and the connection to the collector.

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, OnceLock};

use openprof_format::options::Options;

use crate::jvmti::{jthread, JavaVM, Jvmti};
use crate::net::NetSink;
use crate::output::Output;
use crate::profile::CpuProfile;
use crate::sync::lock;
use crate::threads::Threads;

/// The agent's own thread's name (also its kernel name, which the sampling of the JVM's own
/// threads leaves out).
pub const AGENT_THREAD_NAME: &str = "openprof";

/// HPROF's report: the profile (stack traces, counts) and the output it is written to.
pub struct Report {
    pub profile: CpuProfile,
    pub output: Output,
}

impl Report {
    /// Says that the output could not be written (the profile goes on).
    pub fn complain(&self, error: std::io::Error) {
        eprintln!(
            "openprof: can't write {}: {error}",
            self.output.path().display()
        );
    }
}

/// When the agent starts: with the JVM (Agent_OnLoad, before VMInit) or in a JVM that is
/// already running (Agent_OnAttach, in JVMTI's live phase).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    OnLoad,
    Live,
}

pub struct Context {
    pub phase: Phase,
    pub jvmti: Jvmti,
    pub vm: *mut JavaVM,
    pub options: Options,
    pub threads: Mutex<Threads>,
    /// HPROF text or binary output; `None` when tracing (format=x).
    pub report: Option<Mutex<Report>>,
    /// net=: the connection to the collector.
    pub net: Option<Arc<NetSink>>,
    /// The agent thread's CPU time so far (its cost, which the CPU SAMPLER record reports).
    pub agent_thread_cpu_nanos: AtomicU64,
}

// SAFETY: the JavaVM pointer is valid for the life of the process and its invoke interface is
// thread-safe; the JVMTI environment may be used from any thread; everything else is behind
// mutexes and atomics.
unsafe impl Send for Context {}
// SAFETY: as above.
unsafe impl Sync for Context {}

static CONTEXT: OnceLock<Context> = OnceLock::new();

/// The run's context, once the agent has started.
pub fn get() -> Option<&'static Context> {
    CONTEXT.get()
}

/// Makes `context` the run's; false if there already is one.
pub fn install(context: Context) -> bool {
    CONTEXT.set(context).is_ok()
}

/// A thread as `Context::register_thread` found it.
pub struct Registered {
    pub serial: u32,
    /// Seen for the first time: the engines hear of it.
    pub new: bool,
    pub name: String,
    pub group: String,
}

impl Context {
    /// Numbers a thread seen for the first time (its serial number is kept in its JVMTI thread
    /// word); `kernel_id` is its kernel thread, when known.
    pub fn register_thread(&self, thread: jthread, kernel_id: Option<i32>) -> Registered {
        let (name, group) = self.jvmti.thread_names(thread).unwrap_or_default();
        // Checked and numbered under one lock: at attach, the attaching thread and the thread's
        // own ThreadStart may both see it first.
        let mut threads = lock(&self.threads);
        let known = self.jvmti.thread_word(thread).unwrap_or(0) as u32;
        if known != 0 {
            if let Some(kernel_id) = kernel_id {
                threads.set_kernel_id(known, kernel_id);
            }
            return Registered {
                serial: known,
                new: false,
                name,
                group,
            };
        }
        let serial = threads.start(name.clone(), group.clone(), kernel_id);
        let _ = self.jvmti.set_thread_word(thread, serial as usize);
        Registered {
            serial,
            new: true,
            name,
            group,
        }
    }

    /// The serial number of a thread the agent has numbered (0: not numbered).
    pub fn thread_serial(&self, thread: jthread) -> u32 {
        self.jvmti.thread_word(thread).unwrap_or(0) as u32
    }
}
