//! From options to the engines of a run, and the JVMTI capabilities they and the agent's core
//! need: decided before anything is set up (a refusal must leave the JVM as it was), and
//! testable without a JVM.

use openprof_format::options::{CpuMode, HeapMode, Options, OutputFormat};

use std::sync::Arc;

use crate::context::Phase;
use crate::engine::{need, Engine, Need};
use crate::engines::{
    cpu_samples, cpu_times, delay, heap_dump, heap_sites, locks, monitors, mpt, trace, wall_samples,
};
use crate::error::AgentResult;
use crate::jvmti::{JavaVM, Jvmti};
use crate::net::NetSink;

/// A profiling mode the options can choose, in the order the engines dump.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EngineKind {
    /// cpu=times with HPROF output (with format=x the trace engine times methods).
    CpuTimes,
    CpuSamples,
    /// wall=.
    WallSamples,
    HeapSites,
    HeapDump,
    /// mpt=, or net= (specifications may arrive from the collector).
    ParameterTracing,
    /// format=x.
    Trace,
    /// monitor=y with format=x.
    Monitors,
    /// lock=, or monitor=y with HPROF text output.
    Locks,
    /// delay=.
    Delay,
}

impl EngineKind {
    /// The capabilities this engine needs for these options.
    pub fn needs(self, options: &Options) -> Vec<Need> {
        match self {
            EngineKind::CpuTimes => cpu_times::CpuTimes::needs(options),
            EngineKind::CpuSamples => cpu_samples::CpuSamples::needs(options),
            EngineKind::WallSamples => wall_samples::WallSamples::needs(options),
            EngineKind::HeapSites => heap_sites::HeapSites::needs(options),
            EngineKind::HeapDump => heap_dump::HeapDump::needs(options),
            EngineKind::ParameterTracing => mpt::Mpt::needs(options),
            EngineKind::Trace => trace::Tracer::needs(options),
            EngineKind::Monitors => monitors::Monitors::needs(options),
            EngineKind::Locks => locks::Locks::needs(options),
            EngineKind::Delay => delay::Delay::needs(options),
        }
    }
}

/// What a run does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    pub engines: Vec<EngineKind>,
    /// format=x: a trace instead of HPROF's report.
    pub tracing: bool,
    /// The class loader index is kept (traces and parameter tracing name loaders).
    pub loader_index: bool,
}

impl Plan {
    pub fn new(options: &Options) -> Plan {
        let tracing = options.format == OutputFormat::Xml;
        let timing = options.cpu == Some(CpuMode::Times);
        let heap = options.heap_profile();
        let parameter_tracing = options.mpt.is_some() || options.net.is_some();
        let chosen = [
            (EngineKind::CpuTimes, timing && !tracing),
            (
                EngineKind::CpuSamples,
                options.cpu == Some(CpuMode::Samples),
            ),
            (EngineKind::WallSamples, options.wall_ms.is_some()),
            // In a trace, sampled allocations are objAlloc elements the trace engine writes.
            (
                EngineKind::HeapSites,
                !tracing && matches!(heap, Some(HeapMode::Sites | HeapMode::All)),
            ),
            (
                EngineKind::HeapDump,
                matches!(heap, Some(HeapMode::Dump | HeapMode::All)),
            ),
            (EngineKind::ParameterTracing, parameter_tracing),
            (EngineKind::Trace, tracing),
            (EngineKind::Monitors, tracing && options.monitor),
            (
                EngineKind::Locks,
                !tracing && options.lock_threshold_ns().is_some(),
            ),
            (EngineKind::Delay, options.delay.is_some()),
        ];
        Plan {
            engines: chosen
                .into_iter()
                .filter_map(|(kind, wanted)| wanted.then_some(kind))
                .collect(),
            tracing,
            loader_index: tracing || parameter_tracing,
        }
    }

    /// Every capability the run needs: the core's, then each engine's.
    pub fn needs(&self, options: &Options) -> Vec<Need> {
        let mut needs = core_needs();
        for kind in &self.engines {
            needs.extend(kind.needs(options));
        }
        needs
    }
}

/// Makes the engine of one kind (nothing of it is reachable from callbacks until all are made).
pub fn build_engine(
    kind: EngineKind,
    vm: *mut JavaVM,
    jvmti: Jvmti,
    options: &Options,
    phase: Phase,
    plan: &Plan,
    net: &Option<Arc<NetSink>>,
) -> AgentResult<Box<dyn Engine>> {
    Ok(match kind {
        EngineKind::CpuTimes => {
            let filters = options.filter_block().unwrap_or_default();
            Box::new(cpu_times::CpuTimes::new(
                vm,
                jvmti,
                filters,
                options.depth,
                options.thread,
            )?)
        }
        EngineKind::CpuSamples => Box::new(cpu_samples::CpuSamples::new(vm, options, phase)?),
        EngineKind::WallSamples => Box::new(wall_samples::WallSamples::new(vm, options)?),
        EngineKind::HeapSites => Box::new(heap_sites::HeapSites::new(jvmti, options)?),
        EngineKind::HeapDump => Box::new(heap_dump::HeapDump::default()),
        EngineKind::ParameterTracing => {
            let specs = options.mpt_specs()?;
            Box::new(mpt::Mpt::new(vm, specs, !plan.tracing)?)
        }
        EngineKind::Trace => Box::new(trace::Tracer::start(vm, jvmti, options, net.clone())?),
        EngineKind::Monitors => Box::new(monitors::Monitors),
        EngineKind::Locks => Box::new(locks::Locks::new(jvmti, options)),
        EngineKind::Delay => match &options.delay {
            Some(option) => Box::new(delay::Delay::new(vm, option.clone())?),
            None => return Err("delay= is not given".into()),
        },
    })
}

/// What every run needs: names and lines of the methods in stack traces, and exact frames.
fn core_needs() -> Vec<Need> {
    vec![
        need!(
            can_get_line_numbers,
            set_can_get_line_numbers,
            "line numbers in traces"
        ),
        need!(
            can_get_source_file_name,
            set_can_get_source_file_name,
            "source file names in traces"
        ),
        // HotSpot keeps debug information at every instruction, not only at safepoints, once an
        // agent can receive CompiledMethodLoad events: without it sampled frames in compiled
        // code would be attributed to the nearest safepoint.
        need!(
            can_generate_compiled_method_load_events,
            set_can_generate_compiled_method_load_events,
            "exact frames in compiled code"
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::refuse_missing;
    use crate::jvmti::jvmtiCapabilities;

    fn plan(text: &str) -> Plan {
        Plan::new(&Options::parse(text).unwrap())
    }

    #[test]
    fn options_choose_the_engines() {
        use EngineKind::*;
        assert_eq!(plan("cpu=samples").engines, vec![CpuSamples]);
        assert_eq!(
            plan("cpu=samples,wall=10").engines,
            vec![CpuSamples, WallSamples]
        );
        assert_eq!(plan("wall=5ms").engines, vec![WallSamples]);
        // A delay alone profiles nothing: another profiler may measure the run.
        assert_eq!(plan("delay=a.B.c:1us").engines, vec![Delay]);
        assert_eq!(
            plan("cpu=samples,delay=a.B.c:1us").engines,
            vec![CpuSamples, Delay]
        );
        assert_eq!(plan("cpu=times").engines, vec![CpuTimes]);
        assert_eq!(plan("heap=all").engines, vec![HeapSites, HeapDump]);
        assert_eq!(
            plan("heap=dump,cpu=samples").engines,
            vec![CpuSamples, HeapDump]
        );
        // With format=x the trace times methods; the monitors engine only traces.
        assert_eq!(
            plan("format=x,cpu=times,monitor=y").engines,
            vec![Trace, Monitors]
        );
        assert_eq!(
            plan("cpu=samples,monitor=y").engines,
            vec![CpuSamples, Locks]
        );
        assert_eq!(plan("lock=10us").engines, vec![Locks]);
        assert_eq!(
            plan("net=localhost:9,cpu=samples").engines,
            vec![CpuSamples, ParameterTracing]
        );
        assert!(plan("format=x").loader_index && !plan("cpu=samples").loader_index);
    }

    #[test]
    fn no_two_engines_of_a_plan_handle_the_same_callback() {
        // MethodEntry/MethodExit belong to cpu=times with HPROF output and to the trace: a
        // plan never has both.
        for text in [
            "cpu=times",
            "format=x,cpu=times",
            "cpu=times,heap=all,net=localhost:9",
        ] {
            let engines = plan(text).engines;
            assert!(
                !(engines.contains(&EngineKind::CpuTimes) && engines.contains(&EngineKind::Trace)),
                "{text}: {engines:?}"
            );
        }
    }

    #[test]
    fn missing_capabilities_are_named_with_the_option_that_needs_them() {
        let options = Options::parse("format=x,heap=sites").unwrap();
        let needs = Plan::new(&options).needs(&options);
        // What HotSpot offers in the live phase: no exception events.
        let mut live = jvmtiCapabilities::default();
        for need in &needs {
            (need.set)(&mut live);
        }
        live.set_can_generate_exception_events(false);
        let refusal = refuse_missing(&needs, &live).unwrap_err().to_string();
        assert!(
            refusal.starts_with(
                "format=x (exception elements) needs JVMTI's can_generate_exception_events, \
                 which this JVM grants only"
            ),
            "{refusal}"
        );
        assert!(!refusal.contains("heap=sites"), "{refusal}");
        live.set_can_generate_exception_events(true);
        assert!(refuse_missing(&needs, &live).is_ok());
    }

    #[test]
    fn cpu_times_asks_the_main_environment_for_nothing() {
        // Its hooks have an environment of their own (retransformation, granted when attached
        // too); JVMTI's method events are asked for only where retransformation is not to be had.
        let options = Options::parse("cpu=times").unwrap();
        let needs = Plan::new(&options).needs(&options);
        assert!(needs.iter().all(|need| need.needed_for != "cpu=times"));
    }
}
