//! heap=sites: allocations sampled by the JVM (JVMTI SampledObjectAlloc), scaled up to
//! estimates of everything allocated, and followed to their death (tags and ObjectFree) so
//! that the live figures of each site are right.

use crate::sync::lock;
use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Mutex;

use openprof_format::hprof_text::SiteEntry;
use openprof_format::java_names::class_name_from_signature;

use crate::jvmti::{jmethodID, Jvmti};
use crate::methods::Location;
use crate::profile::CpuProfile;

/// One sampled allocation as the allocating thread saw it, waiting for the agent's thread.
pub struct SampledAllocation {
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
struct Site {
    trace: u32,
    class_name: String,
    live_objects: f64,
    live_bytes: f64,
    allocated_objects: f64,
    allocated_bytes: f64,
}

#[derive(Default)]
struct Sites {
    index_of: HashMap<(u32, String), usize>,
    sites: Vec<Site>,
    /// Sampled objects not yet freed: tag → (site, objects, bytes) they stand for.
    live: HashMap<i64, (usize, f64, f64)>,
    /// Frees that arrived before their allocation was taken in (retried next time).
    early_frees: Vec<i64>,
    samples: u64,
}

/// The allocation sampler of one run.
pub struct AllocSampler {
    interval: u64,
    next_tag: AtomicI64,
    /// Filled by application threads; only ever held briefly, never across a JVMTI call.
    pending: Mutex<Vec<SampledAllocation>>,
    /// Filled by ObjectFree, which may run inside JVMTI calls of any thread: nothing else is
    /// locked while this is held.
    freed: Mutex<Vec<i64>>,
    sites: Mutex<Sites>,
}

impl AllocSampler {
    pub fn new(interval: u64) -> Self {
        AllocSampler {
            interval,
            next_tag: AtomicI64::new(1),
            pending: Mutex::new(Vec::new()),
            freed: Mutex::new(Vec::new()),
            sites: Mutex::new(Sites::default()),
        }
    }

    pub fn interval(&self) -> u64 {
        self.interval
    }

    /// A tag for a newly sampled object.
    pub fn next_tag(&self) -> i64 {
        self.next_tag.fetch_add(1, Ordering::Relaxed)
    }

    /// Called on the allocating thread, before the object is tagged (so a free can never be
    /// seen before its allocation was queued).
    pub fn sampled(&self, allocation: SampledAllocation) {
        lock(&self.pending).push(allocation);
    }

    /// ObjectFree: no JVMTI, no JNI, one short lock.
    pub fn freed(&self, tag: i64) {
        lock(&self.freed).push(tag);
    }

    /// Moves queued allocations and frees into the site table (on the agent's thread or at a
    /// dump), numbering stacks through `profile` so sites and CPU samples share TRACEs.
    pub fn collect(&self, jvmti: Jvmti, profile: &mut CpuProfile) {
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
                    sites.sites.push(Site {
                        trace,
                        class_name: key.1.clone(),
                        ..Site::default()
                    });
                    sites.index_of.insert(key, index);
                    index
                }
            };
            let objects = sample_weight(allocation.size, self.interval);
            let bytes = objects * allocation.size as f64;
            let site = &mut sites.sites[index];
            site.allocated_objects += objects;
            site.allocated_bytes += bytes;
            site.live_objects += objects;
            site.live_bytes += bytes;
            sites.samples += 1;
            sites.live.insert(allocation.tag, (index, objects, bytes));
        }
        let mut frees = std::mem::take(&mut sites.early_frees);
        frees.extend(freed);
        for tag in frees {
            match sites.live.remove(&tag) {
                Some((index, objects, bytes)) => {
                    let site = &mut sites.sites[index];
                    site.live_objects = (site.live_objects - objects).max(0.0);
                    site.live_bytes = (site.live_bytes - bytes).max(0.0);
                }
                None if tag < self.next_tag.load(Ordering::Relaxed) => sites.early_frees.push(tag),
                None => {}
            }
        }
    }

    /// Every site since the start (HPROF's SITES are cumulative), figures rounded.
    pub fn sites(&self) -> (Vec<SiteEntry>, u64) {
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
