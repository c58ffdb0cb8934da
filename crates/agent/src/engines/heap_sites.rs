//! heap=sites: allocations sampled by the JVM (JVMTI SampledObjectAlloc), scaled up to
//! estimates of everything allocated, and followed to their death (tags and ObjectFree) so
//! that the live figures of each site are right; and HPROF's SITES dump.

use crate::sync::lock;
use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Mutex;

use openprof_format::hprof_text::SiteEntry;
use openprof_format::java_names::class_name_from_signature;

use openprof_format::options::Options;

use crate::context::{Context, Report};
use crate::engine::{need, Dump, Engine, Need};
use crate::error::{AgentResult, JvmtiContext};
use crate::guard::{callback, guarded, Admit};
use crate::jvmti::{
    jclass, jint, jmethodID, jobject, jthread, jvmtiEnv, jvmtiEvent, jvmtiEventCallbacks, JNIEnv,
    Jvmti, JVMTI_EVENT_SAMPLED_OBJECT_ALLOC,
};
use crate::methods::Location;
use crate::output::hprof_date;
use jvmti_bindings::sys::jvmti::JVMTI_EVENT_OBJECT_FREE;

/// One sampled allocation as the allocating thread saw it, waiting for the agent's thread.
struct SampledAllocation {
    pub tag: i64,
    pub class_signature: String,
    pub size: u64,
    pub thread: Option<u32>,
    pub frames: Vec<(jmethodID, Location)>,
}

// SAFETY: jmethodIDs are process-wide identifiers, valid on any thread.
unsafe impl Send for SampledAllocation {}

/// How many objects and bytes one sample of an object of `size` bytes stands for.
///
/// The JVM samples an allocation when it crosses a point drawn from an exponential
/// distribution with mean `interval` bytes, so an object of `size` bytes is sampled with
/// probability 1 - exp(-size/interval); each sample is weighted by the inverse of that (an
/// unbiased estimate, the same scaling JFR and tcmalloc use).
pub fn sample_weight(size: u64, interval: u64) -> f64 {
    if interval == 0 || size == 0 {
        return 1.0;
    }
    let probability = -(-(size as f64) / interval as f64).exp_m1();
    if probability > 0.0 {
        1.0 / probability
    } else {
        1.0
    }
}

#[derive(Clone, Debug, Default)]
struct AllocationSite {
    trace: u32,
    class_name: String,
    live_objects: f64,
    live_bytes: f64,
    allocated_objects: f64,
    allocated_bytes: f64,
    /// What it allocated since the last profile window (continuous mode).
    window_objects: f64,
    window_bytes: f64,
}

/// A sampled object not yet freed: its site and the objects and bytes it stands for.
struct LiveSample {
    site: usize,
    objects: f64,
    bytes: f64,
}

#[derive(Default)]
struct Sites {
    index_of: HashMap<(u32, String), usize>,
    sites: Vec<AllocationSite>,
    /// Sampled objects not yet freed, by tag.
    live: HashMap<i64, LiveSample>,
    /// Frees that arrived before their allocation was taken in (retried next time).
    early_frees: Vec<i64>,
    samples: u64,
}

/// The allocation sampler of one run.
pub struct HeapSites {
    jvmti: Jvmti,
    /// `alloc_interval=` (a profiling session may change it).
    interval: AtomicU64,
    next_tag: AtomicI64,
    /// The first tag of this profiling session: frees of objects sampled before are not its.
    first_tag: AtomicI64,
    /// Filled by application threads; only ever held briefly, never across a JVMTI call.
    pending: Mutex<Vec<SampledAllocation>>,
    /// Filled by ObjectFree, which may run inside JVMTI calls of any thread: nothing else is
    /// locked while this is held.
    freed: Mutex<Vec<i64>>,
    sites: Mutex<Sites>,
}

impl HeapSites {
    /// Asks the JVM to sample an allocation every `alloc_interval` bytes on average.
    pub fn new(jvmti: Jvmti, options: &Options) -> AgentResult<Self> {
        let interval = options.alloc_interval;
        jvmti
            .set_heap_sampling_interval(interval as jint)
            .doing("can't sample allocations")?;
        Ok(HeapSites {
            jvmti,
            interval: AtomicU64::new(interval),
            next_tag: AtomicI64::new(1),
            first_tag: AtomicI64::new(1),
            pending: Mutex::new(Vec::new()),
            freed: Mutex::new(Vec::new()),
            sites: Mutex::new(Sites::default()),
        })
    }

    /// A sampled allocation, on the allocating thread: its stack and class are noted, then the
    /// object is tagged so that its death is seen. The allocation is queued before the object
    /// is tagged, so a free can never be seen before its allocation.
    fn sampled(
        &self,
        context: &Context,
        thread: jthread,
        object: jobject,
        class: jclass,
        size: i64,
    ) {
        let jvmti = self.jvmti;
        let depth = context.options.depth;
        let frames = if depth == 0 {
            Vec::new()
        } else {
            jvmti
                .stack_trace(thread, depth)
                .unwrap_or_default()
                .into_iter()
                .map(|frame| (frame.method, Location::of_jvmti(frame.location)))
                .collect()
        };
        let Ok(class_signature) = jvmti.class_signature(class) else {
            return;
        };
        let thread_serial = context
            .options
            .thread
            .then(|| context.thread_serial(thread))
            .filter(|serial| *serial != 0);
        let tag = self.next_tag.fetch_add(1, Ordering::Relaxed);
        lock(&self.pending).push(SampledAllocation {
            tag,
            class_signature,
            size: size.max(0) as u64,
            thread: thread_serial,
            frames,
        });
        let _ = jvmti.set_tag(object, tag);
    }

    /// ObjectFree: no JVMTI, no JNI, one short lock.
    fn freed(&self, tag: i64) {
        lock(&self.freed).push(tag);
    }

    /// SITES with a cutoff of its own (the ALLOC SITES command carries one): every allocation
    /// site since the start, live figures after a full GC.
    pub fn dump_sites(&self, context: &Context, dump: &Dump<'_>, cutoff: f64) {
        let verbose = context.options.verbose;
        if verbose {
            eprint!("Dumping allocation sites ...");
        }
        // Live figures need the dead gone and their ObjectFree events posted: HotSpot posts
        // them lazily, and flushes them when the event is (re)enabled.
        let _ = self.jvmti.force_garbage_collection();
        let _ = self.jvmti.set_event(JVMTI_EVENT_OBJECT_FREE, true);
        let mut report = lock(dump.report);
        (dump.collect)(&mut report);
        let (sites, _samples) = self.sites();
        let table = openprof_format::hprof_text::SitesTable::rank(hprof_date(), sites, cutoff);
        let new_traces = report
            .profile
            .unprinted_traces(table.rows.iter().map(|row| row.site.trace));
        if let Err(error) = report.output.sites(&new_traces, &table, cutoff) {
            report.complain(error);
        }
        if verbose {
            eprintln!(" done.");
        }
    }

    /// A continuous profile's window: what each site allocated since the last window, as an
    /// incremental SITES table. No GC is forced (a window every few seconds must not cost a
    /// full collection each): live figures are as of the JVM's last collection.
    fn dump_window_sites(&self, context: &Context, dump: &Dump<'_>) {
        let mut report = lock(dump.report);
        (dump.collect)(&mut report);
        let entries = {
            let mut sites = lock(&self.sites);
            let entries: Vec<SiteEntry> = sites
                .sites
                .iter()
                .filter(|site| site.window_objects > 0.0)
                .map(|site| SiteEntry {
                    trace: site.trace,
                    class_name: site.class_name.clone(),
                    live_bytes: site.live_bytes.round() as u64,
                    live_objects: site.live_objects.round() as u64,
                    allocated_bytes: site.window_bytes.round() as u64,
                    allocated_objects: site.window_objects.round() as u64,
                })
                .collect();
            for site in &mut sites.sites {
                site.window_objects = 0.0;
                site.window_bytes = 0.0;
            }
            entries
        };
        let table = openprof_format::hprof_text::SitesTable::window(hprof_date(), entries);
        let new_traces = report
            .profile
            .unprinted_traces(table.rows.iter().map(|row| row.site.trace));
        if let Err(error) = report.output.sites(&new_traces, &table, 0.0) {
            report.complain(error);
        }
        if context.options.verbose {
            eprintln!("openprof: allocation window of {} sites", table.rows.len());
        }
    }

    /// Moves queued allocations and frees into the site table (on the agent's thread or at a
    /// dump), numbering stacks through the report's profile so sites and CPU samples share
    /// TRACEs.
    fn collect_into(&self, report: &mut Report) {
        let jvmti = self.jvmti;
        let profile = &mut report.profile;
        let allocations = std::mem::take(&mut *lock(&self.pending));
        let freed = std::mem::take(&mut *lock(&self.freed));
        let mut sites = lock(&self.sites);
        for allocation in allocations {
            let trace = profile.intern(jvmti, allocation.thread, allocation.frames.into_iter());
            let class_name = class_name_from_signature(&allocation.class_signature);
            let key = (trace, class_name);
            let index = match sites.index_of.get(&key) {
                Some(index) => *index,
                None => {
                    let index = sites.sites.len();
                    sites.sites.push(AllocationSite {
                        trace,
                        class_name: key.1.clone(),
                        ..AllocationSite::default()
                    });
                    sites.index_of.insert(key, index);
                    index
                }
            };
            let objects = sample_weight(allocation.size, self.interval.load(Ordering::Relaxed));
            let bytes = objects * allocation.size as f64;
            let site = &mut sites.sites[index];
            site.allocated_objects += objects;
            site.allocated_bytes += bytes;
            site.window_objects += objects;
            site.window_bytes += bytes;
            site.live_objects += objects;
            site.live_bytes += bytes;
            sites.samples += 1;
            sites.live.insert(
                allocation.tag,
                LiveSample {
                    site: index,
                    objects,
                    bytes,
                },
            );
        }
        let mut frees = std::mem::take(&mut sites.early_frees);
        frees.extend(freed);
        for tag in frees {
            match sites.live.remove(&tag) {
                Some(sample) => {
                    let site = &mut sites.sites[sample.site];
                    site.live_objects = (site.live_objects - sample.objects).max(0.0);
                    site.live_bytes = (site.live_bytes - sample.bytes).max(0.0);
                }
                None if (self.first_tag.load(Ordering::Relaxed)
                    ..self.next_tag.load(Ordering::Relaxed))
                    .contains(&tag) =>
                {
                    sites.early_frees.push(tag)
                }
                None => {}
            }
        }
    }

    /// Every site since the start (HPROF's SITES are cumulative), figures rounded.
    fn sites(&self) -> (Vec<SiteEntry>, u64) {
        let sites = lock(&self.sites);
        let entries = sites
            .sites
            .iter()
            .map(|site| SiteEntry {
                trace: site.trace,
                class_name: site.class_name.clone(),
                live_bytes: site.live_bytes.round() as u64,
                live_objects: site.live_objects.round() as u64,
                allocated_bytes: site.allocated_bytes.round() as u64,
                allocated_objects: site.allocated_objects.round() as u64,
            })
            .collect();
        (entries, sites.samples)
    }
}

impl Engine for HeapSites {
    fn needs(_options: &Options) -> Vec<Need> {
        vec![
            need!(can_tag_objects, set_can_tag_objects, "heap=sites"),
            need!(
                can_generate_sampled_object_alloc_events,
                set_can_generate_sampled_object_alloc_events,
                "heap=sites"
            ),
            need!(
                can_generate_object_free_events,
                set_can_generate_object_free_events,
                "heap=sites"
            ),
        ]
    }

    fn callbacks(&self, callbacks: &mut jvmtiEventCallbacks) {
        callbacks.SampledObjectAlloc = Some(on_sampled_object_alloc);
        callbacks.ObjectFree = Some(on_object_free);
    }

    fn traces_kept(&self, kept: &mut std::collections::HashSet<u32>) {
        kept.extend(lock(&self.sites).sites.iter().map(|site| site.trace));
    }

    fn events(&self) -> Vec<jvmtiEvent> {
        vec![JVMTI_EVENT_SAMPLED_OBJECT_ALLOC, JVMTI_EVENT_OBJECT_FREE]
    }

    fn collect(&self, _context: &Context, report: &mut Report) {
        self.collect_into(report);
    }

    fn dump(&self, context: &Context, dump: &Dump<'_>) {
        if context.options.continuous_ms.is_some() {
            self.dump_window_sites(context, dump);
        } else {
            self.dump_sites(context, dump, context.options.cutoff);
        }
    }

    fn in_sessions(&self) -> bool {
        true
    }

    fn pause(&self, _context: &Context) {
        // ObjectFree stays on: it costs nothing for untagged objects.
        let _ = self
            .jvmti
            .set_event(JVMTI_EVENT_SAMPLED_OBJECT_ALLOC, false);
    }

    fn resume(
        &self,
        _context: &Context,
        _jni: *mut JNIEnv,
        options: &Options,
    ) -> AgentResult<Option<String>> {
        self.jvmti
            .set_heap_sampling_interval(options.alloc_interval as jint)
            .doing("can't sample allocations")?;
        self.interval
            .store(options.alloc_interval, Ordering::Relaxed);
        // A session's sites are its own: what earlier ones sampled is forgotten.
        lock(&self.pending).clear();
        lock(&self.freed).clear();
        *lock(&self.sites) = Sites::default();
        self.first_tag
            .store(self.next_tag.load(Ordering::Relaxed), Ordering::Relaxed);
        self.jvmti
            .set_event(JVMTI_EVENT_SAMPLED_OBJECT_ALLOC, true)
            .doing("can't turn allocation sampling on")?;
        Ok(Some(format!(
            "allocation sites, one sample every {} bytes on average",
            options.alloc_interval
        )))
    }
}

unsafe extern "system" fn on_sampled_object_alloc(
    _jvmti: *mut jvmtiEnv,
    _jni: *mut JNIEnv,
    thread: jthread,
    object: jobject,
    class: jclass,
    size: i64,
) {
    callback("SampledObjectAlloc", Admit::Profiling, || {
        if let (Some(context), Some(sites)) =
            (crate::context::get(), crate::engine::running::<HeapSites>())
        {
            sites.sampled(context, thread, object, class, size);
        }
    });
}

/// ObjectFree may be posted inside other JVMTI calls: it only queues the tag.
unsafe extern "system" fn on_object_free(_jvmti: *mut jvmtiEnv, tag: i64) {
    guarded("ObjectFree", || {
        if let Some(sites) = crate::engine::running::<HeapSites>() {
            sites.freed(tag);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::sample_weight;

    #[test]
    fn weights_undo_the_sampling_probability() {
        assert_eq!(sample_weight(100, 0), 1.0);
        // Objects much larger than the interval are always sampled.
        assert!((sample_weight(100 << 20, 512 << 10) - 1.0).abs() < 1e-9);
        // Small objects: about interval/size objects per sample.
        let weight = sample_weight(16, 512 << 10);
        assert!((weight / (32768.0 + 0.5) - 1.0).abs() < 1e-3, "{weight}");
        // An object of exactly the interval: 1/(1-1/e).
        assert!((sample_weight(1000, 1000) - 1.0 / (1.0 - (-1.0f64).exp())).abs() < 1e-9);
    }
}
