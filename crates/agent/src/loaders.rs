//! Class loader indexes: 0 for the bootstrap loader, then 1, 2, ... in the order
//! loaders are first seen, with the loader's class name. Kept as JVMTI tags on the loader
//! objects in an environment of their own, so that the trace's classDefs and parameter tracing
//! number a loader alike, and a loader is found again without comparing references.

use std::sync::{Mutex, OnceLock};

use openprof_format::java_names::class_name_from_signature;

use crate::jni::Jni;
use crate::jvmti::{jclass, jvmtiCapabilities, JavaVM, Jvmti};

pub struct LoaderIndex {
    jvmti: Jvmti,
    /// Index - 1 → the loader's class name.
    names: Mutex<Vec<String>>,
}

// SAFETY: the JVMTI environment may be used from any thread; the names are behind a lock.
unsafe impl Send for LoaderIndex {}
// SAFETY: as above.
unsafe impl Sync for LoaderIndex {}

/// A class's loader as the agent reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Loader {
    pub index: u32,
    /// The loader's class name; `bootstrap` for index 0.
    pub name: String,
}

static LOADERS: OnceLock<LoaderIndex> = OnceLock::new();

/// Makes the index's environment (at start-up); without it, every class reports index 0.
pub fn start(vm: *mut JavaVM) {
    let Some(jvmti) = Jvmti::from_vm(vm) else {
        return;
    };
    let mut capabilities = jvmtiCapabilities::default();
    capabilities.set_can_tag_objects(true);
    if jvmti.add_capabilities(&capabilities).is_ok() {
        let _ = LOADERS.set(LoaderIndex {
            jvmti,
            names: Mutex::new(Vec::new()),
        });
    }
}

/// The loader of `class` (on a thread attached to the JVM).
pub fn loader_of(class: jclass) -> Loader {
    let bootstrap = || Loader {
        index: 0,
        name: "bootstrap".into(),
    };
    let (Some(loaders), Some(jni)) = (LOADERS.get(), crate::jni::thread_jni()) else {
        return bootstrap();
    };
    let loader = match loaders.jvmti.class_loader(class) {
        Ok(loader) if !loader.is_null() => loader,
        _ => return bootstrap(),
    };
    let mut names = loaders
        .names
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let found = match loaders.jvmti.tag(loader) {
        Ok(tag) if tag > 0 => {
            let index = tag as u32;
            Loader {
                index,
                name: names.get(index as usize - 1).cloned().unwrap_or_default(),
            }
        }
        _ => {
            let loader_class = Jni(jni).object_class(loader);
            let name = loaders
                .jvmti
                .class_signature(loader_class)
                .map(|signature| class_name_from_signature(&signature))
                .unwrap_or_default();
            crate::jni::delete_local_ref(jni, loader_class);
            names.push(name.clone());
            let index = names.len() as u32;
            let _ = loaders.jvmti.set_tag(loader, i64::from(index));
            Loader { index, name }
        }
    };
    drop(names);
    crate::jni::delete_local_ref(jni, loader);
    found
}
