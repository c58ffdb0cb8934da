//! Profiling sessions of an agent already loaded: a further attach whose options carry
//! `action=` starts one (the sampling its options name, into a file of its own), dumps it,
//! stops it (its last dump written, every timer disarmed and event off) or tells its status.
//! `openprof profile` drives them, as asprof drives async-profiler.
//!
//! The engines that take part (CPU and wall-clock samples, locks, allocation sites) are paused
//! and resumed, never torn down; a kind the agent was loaded without is built at the first
//! session that asks for it. Everything else about the agent (depth, threads, the other
//! engines) stays as it was loaded.

use std::time::Instant;

use openprof_format::options::{Action, CpuMode, HeapMode, Options, SESSION_OPTIONS};

use super::{collect, set_callbacks};
use crate::context::{Context, Phase, Report};
use crate::engine::{self, Dump, Engine};
use crate::engines::{cpu_samples, heap_sites, locks, wall_samples};
use crate::error::{AgentError, AgentResult, JvmtiContext};
use crate::jni::{current_jni, with_local_frame};
use crate::jvmti::{JNIEnv, JavaVM};
use crate::output::{hprof_date, Output};
use crate::plan::{EngineKind, Plan};
use crate::signals::{self, SampleKind};
use crate::sync::lock;

/// The session running, or the last one.
struct Session {
    running: bool,
    /// When it started, or when it stopped once it is not running (HPROF's date form).
    since: String,
    started_at: Instant,
    /// What it takes, in words.
    what: Vec<String>,
}

static SESSION: std::sync::Mutex<Option<Session>> = std::sync::Mutex::new(None);

/// The session the agent's own options began with (at VMInit, or at the first attach), if
/// they chose an engine that takes part in sessions.
pub(super) fn first(context: &Context) {
    let what: Vec<String> = engine::all()
        .filter(|engine| engine.in_sessions())
        .filter_map(|engine| engine.describe(context))
        .collect();
    if !what.is_empty() {
        *lock(&SESSION) = Some(Session {
            running: true,
            since: hprof_date(),
            started_at: Instant::now(),
            what,
        });
    }
}

/// Carries out `action=` for an agent already loaded; returns what it did, in words, for
/// `openprof profile` (a `profile: PATH` line names the file when there is one).
pub(super) fn act(
    context: &'static Context,
    vm: *mut JavaVM,
    action: Action,
    options: &Options,
    text: &str,
) -> AgentResult<String> {
    if action == Action::Status {
        return Ok(status(context));
    }
    let report = context
        .report
        .as_ref()
        .filter(|report| lock(report).output.is_text_file())
        .ok_or(
            "this agent writes a trace, HPROF binary or to a collector; profiling sessions \
             write HPROF text to a file, so they need an agent loaded with format=a and file=",
        )?;
    let jni = current_jni(vm);
    if jni.is_null() {
        return Err("the attaching thread has no JNI environment".into());
    }
    let mut said = Ok(String::new());
    with_local_frame(jni, || {
        said = match action {
            Action::Start => start(context, vm, jni, report, options, text),
            Action::Stop => stop(context, jni, report),
            Action::Dump => dump(context, jni, report),
            Action::Status => Ok(status(context)),
        }
    });
    said
}

/// What the session does now, and what the agent has taken.
fn status(context: &Context) -> String {
    let mut lines = vec![format!("openprof agent loaded with {}", context.options)];
    match &*lock(&SESSION) {
        Some(session) if session.running => lines.push(format!(
            "session: running since {} ({} s): {}",
            session.since,
            session.started_at.elapsed().as_secs(),
            session.what.join("; ")
        )),
        Some(session) => lines.push(format!(
            "session: none running; the last one stopped {}",
            session.since
        )),
        None => lines.push("session: none running".into()),
    }
    lines.push(format!(
        "signals received: {} cpu, {} wall",
        signals::signals_received(SampleKind::Cpu),
        signals::signals_received(SampleKind::Wall)
    ));
    lines.push(format!(
        "cpu timers: {}",
        lock(&context.threads).timer_count()
    ));
    if let Some(path) = context
        .report
        .as_ref()
        .and_then(|report| lock(report).output.file_path().map(absolute))
    {
        lines.push(format!("profile: {path}"));
    }
    lines.join("\n")
}

fn profile_path(report: &Report) -> String {
    absolute(report.output.path())
}

/// A path of the JVM's as `openprof profile` reads it: absolute (the JVM's working directory is
/// not the command's).
fn absolute(path: &std::path::Path) -> String {
    std::path::absolute(path)
        .unwrap_or_else(|_| path.to_path_buf())
        .display()
        .to_string()
}

/// The kinds of engine a session's options ask for.
fn session_kinds(options: &Options) -> AgentResult<Vec<EngineKind>> {
    match options.cpu {
        None | Some(CpuMode::Samples) => {}
        Some(_) => return Err("a profiling session samples: cpu=samples, not cpu=times".into()),
    }
    match options.heap {
        None | Some(HeapMode::Sites) => {}
        Some(_) => {
            return Err(
                "a profiling session records allocation sites (heap=sites), not heap dumps".into(),
            )
        }
    }
    let kinds: Vec<EngineKind> = [
        (EngineKind::CpuSamples, options.cpu.is_some()),
        (EngineKind::WallSamples, options.wall_ms.is_some()),
        (EngineKind::HeapSites, options.heap.is_some()),
        (EngineKind::Locks, options.lock_ns.is_some()),
    ]
    .into_iter()
    .filter_map(|(kind, wanted)| wanted.then_some(kind))
    .collect();
    if kinds.is_empty() {
        return Err(
            "action=start needs something to profile: cpu=samples, wall=, lock= or heap=sites"
                .into(),
        );
    }
    Ok(kinds)
}

/// The engine of this kind, when the run has one.
fn installed(kind: EngineKind) -> Option<&'static dyn Engine> {
    match kind {
        EngineKind::CpuSamples => {
            engine::running::<cpu_samples::CpuSamples>().map(|e| e as &dyn Engine)
        }
        EngineKind::WallSamples => {
            engine::running::<wall_samples::WallSamples>().map(|e| e as &dyn Engine)
        }
        EngineKind::HeapSites => {
            engine::running::<heap_sites::HeapSites>().map(|e| e as &dyn Engine)
        }
        EngineKind::Locks => engine::running::<locks::Locks>().map(|e| e as &dyn Engine),
        _ => None,
    }
}

/// The options a session runs with: the agent's own, with the session's settings.
fn session_options(context: &Context, asked: &Options, text: &str) -> AgentResult<Options> {
    // Anything but the session's settings must be what the agent was loaded with: it keeps
    // those until the JVM exits.
    for name in text
        .split(',')
        .filter_map(|item| item.split_once('=').map(|(name, _)| name))
        .filter(|name| !SESSION_OPTIONS.contains(name))
    {
        let (wanted, loaded) = (asked.setting(name), context.options.setting(name));
        if wanted != loaded {
            return Err(AgentError::Refused(format!(
                "option {name}: this agent was loaded with {name}={}; it keeps that until the \
                 JVM exits (a session sets only {})",
                loaded.as_deref().unwrap_or("(none)"),
                SESSION_OPTIONS[1..].join(", ")
            )));
        }
    }
    let file = asked
        .file
        .clone()
        .ok_or("action=start needs file= (the session's own profile)")?;
    Ok(Options {
        cpu: asked.cpu,
        wall_ms: asked.wall_ms,
        lock_ns: asked.lock_ns,
        monitor: false,
        heap: asked.heap,
        interval_ms: asked.interval_ms,
        alloc_interval: asked.alloc_interval,
        file: Some(file),
        // The session's file is named afresh by whoever starts it: replace one there.
        force: true,
        action: Some(Action::Start),
        ..context.options.clone()
    })
}

fn start(
    context: &'static Context,
    vm: *mut JavaVM,
    jni: *mut JNIEnv,
    report: &std::sync::Mutex<Report>,
    asked: &Options,
    text: &str,
) -> AgentResult<String> {
    if let Some(session) = &*lock(&SESSION) {
        if session.running {
            return Err(AgentError::Refused(format!(
                "a profiling session runs since {} ({}); stop it first",
                session.since,
                session.what.join("; ")
            )));
        }
    }
    let options = session_options(context, asked, text)?;
    let kinds = session_kinds(&options)?;
    add_missing_engines(context, vm, jni, &options, &kinds)?;
    // The session's own file: what is pending goes to the last one first; the new one starts
    // with every thread alive and prints again every TRACE its tables need.
    {
        let mut report = lock(report);
        collect(context, &mut report);
        let _ = report.output.flush();
        report.output = Output::create(&options, None)?;
        lock(&context.threads).restart_records();
        report.profile.start_session();
        collect(context, &mut report);
        let _ = report.output.flush();
    }
    let mut what = Vec::new();
    for kind in &kinds {
        let engine = installed(*kind).ok_or("a session's engine is missing")?;
        if let Some(line) = engine.resume(context, jni, &options)? {
            what.push(line);
        }
    }
    let path = profile_path(&lock(report));
    *lock(&SESSION) = Some(Session {
        running: true,
        since: hprof_date(),
        started_at: Instant::now(),
        what: what.clone(),
    });
    what.insert(0, format!("profiling session started with {options}"));
    what.push(format!(
        "profile: {path} (written at the session's stop and dump)"
    ));
    Ok(what.join("\n"))
}

/// Builds the engines of the kinds this run does not have yet: their capabilities (which a
/// running JVM may refuse), the callbacks and events, their start.
fn add_missing_engines(
    context: &'static Context,
    vm: *mut JavaVM,
    jni: *mut JNIEnv,
    options: &Options,
    kinds: &[EngineKind],
) -> AgentResult<()> {
    let missing: Vec<EngineKind> = kinds
        .iter()
        .copied()
        .filter(|kind| installed(*kind).is_none())
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    let jvmti = context.jvmti;
    let needs: Vec<_> = missing
        .iter()
        .flat_map(|kind| kind.needs(options))
        .collect();
    let potential = jvmti
        .potential_capabilities()
        .doing("can't ask the JVM what it can do")?;
    engine::refuse_missing(&needs, &potential)?;
    let mut capabilities = crate::jvmti::jvmtiCapabilities::default();
    for need in &needs {
        (need.set)(&mut capabilities);
    }
    jvmti
        .add_capabilities(&capabilities)
        .doing("the JVM refused the capabilities the session needs")?;
    let plan = Plan::new(options);
    let engines = missing
        .iter()
        .map(|kind| crate::plan::build_engine(*kind, vm, jvmti, options, Phase::Live, &plan, &None))
        .collect::<AgentResult<Vec<_>>>()?;
    let count = engine::all().count();
    engine::add(engines)?;
    set_callbacks(jvmti)?;
    for added in engine::all().skip(count) {
        for event in added.events() {
            jvmti
                .set_event(event, true)
                .doing("can't enable an event")?;
        }
        added.start(context, jni);
    }
    Ok(())
}

/// Writes the session engines' dumps (what they recorded since the last dump): at a
/// session's dump and stop.
fn dump_session(context: &Context, jni: *mut JNIEnv, report: &std::sync::Mutex<Report>) {
    let collect = |report: &mut Report| collect(context, report);
    let dump = Dump {
        jni,
        report,
        collect: &collect,
    };
    for engine in engine::all().filter(|engine| engine.in_sessions()) {
        engine.dump(context, &dump);
    }
    let _ = lock(report).output.flush();
}

fn running_session() -> AgentResult<()> {
    match &*lock(&SESSION) {
        Some(session) if session.running => Ok(()),
        Some(session) => Err(AgentError::Refused(format!(
            "no profiling session runs (the last one stopped {}); start one first",
            session.since
        ))),
        None => Err("no profiling session runs; start one first".into()),
    }
}

fn stop(
    context: &Context,
    jni: *mut JNIEnv,
    report: &std::sync::Mutex<Report>,
) -> AgentResult<String> {
    running_session()?;
    for engine in engine::all().filter(|engine| engine.in_sessions()) {
        engine.pause(context);
    }
    dump_session(context, jni, report);
    let (path, seconds) = {
        let mut report = lock(report);
        let path = profile_path(&report);
        // Until the next session nothing is recorded, and nothing is written to its file.
        report.output = Output::discarding();
        let mut session = lock(&SESSION);
        let seconds = session
            .as_ref()
            .map_or(0, |s| s.started_at.elapsed().as_secs());
        if let Some(session) = session.as_mut() {
            session.running = false;
            session.since = hprof_date();
        }
        (path, seconds)
    };
    Ok(format!(
        "profiling session stopped after {seconds} s; sampling is off\nprofile: {path}"
    ))
}

fn dump(
    context: &Context,
    jni: *mut JNIEnv,
    report: &std::sync::Mutex<Report>,
) -> AgentResult<String> {
    running_session()?;
    dump_session(context, jni, report);
    Ok(format!(
        "profiling session dumped; sampling goes on\nprofile: {}",
        profile_path(&lock(report))
    ))
}
