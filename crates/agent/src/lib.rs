//! openprof's collection agent: the library a JVM loads with `-agentpath:` that turns JVMTI
//! events and CPU samples into HPROF's profiles, traces, and data streamed to a collector.
//!
//! How it fits together (docs/architecture.md has the whole data path):
//! - `agent`: the coordinator. It turns the options into a [`plan::Plan`], builds the engines
//!   the plan names, sets the JVMTI callback table, runs the agent's own thread and the dumps.
//! - `engine::Engine`: what every profiling mode implements; `engines/` has one module per mode
//!   (cpu_samples, cpu_times, heap_sites, heap_dump, trace, monitors, mpt).
//! - `context::Context`: what the engines share (JVMTI, options, threads, HPROF's report, the
//!   collector connection); `guard`: the gate every callback passes.
//! - The low layer: `jvmti`, `jni` (the only users of the function tables), `signals` and `ring`
//!   (the SIGPROF sampler), `output`/`binary_output` (HPROF files), `net` (the wire).
//!
//! The entry points below are the only functions the JVM calls by name; each keeps panics on
//! this side of the boundary and turns problems into a clear message and `JNI_ERR`.

mod agent;
mod agent_work;
mod binary_output;
mod call_hooks;
mod code_map;
mod context;
mod coverage;
mod dwarf_unwind;
mod engine;
mod engines;
mod error;
mod guard;
mod heap_walk;
mod hotspot_dump;
mod jni;
mod jvmti;
mod loaders;
mod methods;
mod native_stack;
mod native_symbols;
mod net;
mod output;
mod plan;
mod profile;
mod ring;
mod sampled;
mod signals;
mod sync;
mod threads;
mod traced_calls;
mod vm_structs;
mod vm_walker;
mod walker_check;

use std::ffi::{c_char, c_void, CStr};
use std::panic::catch_unwind;

use jvmti::{jint, JavaVM};
use jvmti_bindings::sys::jni::JNI_ERR;
use openprof_format::options::OptionError;

/// The option string the JVM passed (after `=` in `-agentpath:lib=options`), or why it is
/// refused (an option that is not UTF-8, named).
///
/// # Safety
/// `options` is null or a NUL-terminated string that lives for the call.
unsafe fn options_text(options: *const c_char) -> Result<String, OptionError> {
    if options.is_null() {
        return Ok(String::new());
    }
    // SAFETY: guaranteed by the caller (the JVM).
    let bytes = unsafe { CStr::from_ptr(options) }.to_bytes();
    openprof_format::options::options_text(bytes).map(str::to_owned)
}

/// Called by the JVM for `-agentpath:libopenprof_agent.so[=options]` before it starts.
///
/// # Safety
/// Called by the JVM with a live JavaVM and its option string.
#[no_mangle]
pub unsafe extern "system" fn Agent_OnLoad(
    vm: *mut JavaVM,
    options: *mut c_char,
    _reserved: *mut c_void,
) -> jint {
    // SAFETY: the JVM passes a valid (or null) option string.
    let text = unsafe { options_text(options) };
    catch_unwind(|| match &text {
        Ok(text) => agent::on_load(vm, text),
        Err(error) => agent::refuse(agent::Phase::OnLoad, &error.to_string()),
    })
    .unwrap_or_else(|_| {
        eprintln!("openprof ERROR: internal error while starting; the JVM will not start");
        JNI_ERR
    })
}

/// Called by the JVM when the agent is loaded into a running JVM (`openprof attach`, or the
/// JDK's `VirtualMachine.loadAgentPath`). A refusal leaves the JVM running.
///
/// # Safety
/// Called by the JVM with a live JavaVM and its option string.
#[no_mangle]
pub unsafe extern "system" fn Agent_OnAttach(
    vm: *mut JavaVM,
    options: *mut c_char,
    _reserved: *mut c_void,
) -> jint {
    // SAFETY: the JVM passes a valid (or null) option string.
    let text = unsafe { options_text(options) };
    catch_unwind(|| match &text {
        Ok(text) => agent::on_attach(vm, text),
        Err(error) => agent::refuse(agent::Phase::Live, &error.to_string()),
    })
    .unwrap_or_else(|_| {
        eprintln!("openprof ERROR: internal error while attaching; the JVM runs on unprofiled");
        JNI_ERR
    })
}

/// Called by the JVM as it unloads the agent; everything was written at VMDeath.
#[no_mangle]
pub extern "system" fn Agent_OnUnload(_vm: *mut JavaVM) {}
