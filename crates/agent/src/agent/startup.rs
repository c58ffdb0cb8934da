//! Start-up chores of the coordinator: checking the options, keeping the library loaded once
//! attached, and the report `openprof attach` prints.

use std::ffi::c_void;

use openprof_format::options::Options;

use crate::context::{Context, Phase};
use crate::engine;
use crate::error::AgentResult;
use crate::sync::lock;

/// Parses the options; `help` prints the usage table and ends the process, as HPROF's does,
/// except in a running JVM, which the agent must not end.
pub fn checked_options(options_text: &str, phase: Phase) -> AgentResult<Options> {
    let options = Options::parse(options_text)?;
    if options.help {
        if phase == Phase::Live {
            return Err(
                "help would end the JVM after printing the options; `openprof attach --help` \
                 and `java -agentpath:libopenprof_agent.so=help -version` list them"
                    .into(),
            );
        }
        print!("{}", Options::help_text());
        std::process::exit(0);
    }
    options.refuse_unbuilt()?;
    Ok(options)
}

/// Keeps this library loaded for the rest of the process. HotSpot unloads an agent whose
/// Agent_OnAttach fails; once a signal handler, JVMTI callbacks or threads point into the
/// library, unloading it would leave them pointing at unmapped code.
pub fn pin_library() -> AgentResult<()> {
    // SAFETY: Dl_info is plain C data; dladdr fills it for an address inside this library.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: dladdr only reads the dynamic loader's tables.
    let found = unsafe { libc::dladdr(pin_library as *const () as *const c_void, &mut info) };
    if found == 0 || info.dli_fname.is_null() {
        return Err("can't find the agent library's own path to keep it loaded".into());
    }
    // SAFETY: RTLD_NOLOAD only looks up the library already loaded; RTLD_NODELETE marks it
    // never to be unloaded. The handle is deliberately never closed.
    let handle = unsafe {
        libc::dlopen(
            info.dli_fname,
            libc::RTLD_NOW | libc::RTLD_NOLOAD | libc::RTLD_NODELETE,
        )
    };
    if handle.is_null() {
        return Err("can't keep the agent library loaded (dlopen RTLD_NODELETE failed)".into());
    }
    Ok(())
}

/// Leaves what the attach did in `/tmp/.openprof_attach<pid>` (the JVM's own /tmp and pid,
/// which `openprof attach` reaches through /proc, as it reaches the attach socket). Created
/// afresh and private to the JVM's user; a file someone else put there is not written through.
pub fn write_attach_report(report: &str) {
    use openprof_format::private_file::{create_private, AtALink};
    use std::io::Write;
    let path = format!(
        "/tmp/{}{}",
        openprof_format::options::ATTACH_REPORT_FILE_PREFIX,
        std::process::id()
    );
    // A stale report of an earlier attach is ours to replace; /tmp's sticky bit keeps anyone
    // else's, and then no report is written (`openprof attach` says so).
    if let Ok(mut file) = create_private(std::path::Path::new(&path), AtALink::Replace) {
        let _ = writeln!(file, "{report}");
    }
}

/// What an attach set up, for `openprof attach` to print; `threads` says what became of the
/// running threads.
pub fn attach_summary(context: &Context, threads: &str) -> String {
    let options = &context.options;
    let mut lines = vec![format!("openprof agent attached with {options}")];
    if let Some(net) = &options.net {
        lines.push(format!(
            "sending to the collector at {}:{}",
            net.host, net.port
        ));
    } else {
        let path = match &context.report {
            Some(report) => lock(report).output.path().to_path_buf(),
            None => options.output_file().into(),
        };
        // The JVM's working directory is not the attaching command's.
        let path = std::path::absolute(&path).unwrap_or(path);
        let when = if options.doe {
            "at exit and on each kill -QUIT"
        } else {
            "on each kill -QUIT"
        };
        lines.push(format!("profile: {} (written {when})", path.display()));
    }
    lines.extend(engine::all().filter_map(|engine| engine.describe(context)));
    lines.push(threads.to_string());
    lines.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn help_is_refused_in_a_running_jvm_rather_than_ending_it() {
        let refusal = checked_options("help", Phase::Live)
            .unwrap_err()
            .to_string();
        assert!(refusal.contains("would end the JVM"), "{refusal}");
        assert!(checked_options("cpu=bogus", Phase::Live)
            .unwrap_err()
            .to_string()
            .contains("option cpu"));
    }
}
