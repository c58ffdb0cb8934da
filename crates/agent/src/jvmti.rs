//! A thin, checked layer over the raw JVMTI function table: every call the agent makes goes
//! through here, copies what the JVM allocated into Rust values and gives the memory back.

use std::ffi::{c_char, c_void, CStr};
use std::fmt;
use std::ptr;

pub use jvmti_bindings::sys::jni::{
    jclass, jfieldID, jint, jmethodID, jobject, jthread, jvalue, JNIEnv, JNINativeMethod, JavaVM,
};
pub use jvmti_bindings::sys::jvmti::jvmtiFrameInfo;
pub use jvmti_bindings::sys::jvmti::JVMTI_EVENT_SAMPLED_OBJECT_ALLOC;
use jvmti_bindings::sys::jvmti::{
    jniNativeInterface, jvmtiError, jvmtiExtensionEvent, jvmtiExtensionEventInfo,
    jvmtiMonitorUsage, jvmtiThreadGroupInfo, jvmtiThreadInfo, JVMTI_DISABLE, JVMTI_ENABLE,
    JVMTI_ERROR_NONE,
};
pub use jvmti_bindings::sys::jvmti::{
    jvmtiCapabilities, jvmtiEnv, jvmtiEvent, jvmtiEventCallbacks, jvmtiLineNumberEntry,
    jvmtiStackInfo,
};
pub use jvmti_bindings::sys::jvmti::{jvmtiHeapCallbacks, jvmtiHeapReferenceInfo};

/// JNI's RegisterNatives, as the function table holds it.
pub type RegisterNativesFn =
    unsafe extern "system" fn(*mut JNIEnv, jclass, *const JNINativeMethod, jint) -> jint;

/// A failed JVMTI call: the function and its error code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JvmtiError {
    pub function: &'static str,
    pub code: i32,
}

impl fmt::Display for JvmtiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "JVMTI {} failed with error {}", self.function, self.code)
    }
}

impl std::error::Error for JvmtiError {}

pub type JvmtiResult<T> = Result<T, JvmtiError>;

/// A call the agent did not make: its own work was nested too deep (`agent_work::agent_work`).
const NESTED_TOO_DEEP: JvmtiError = JvmtiError {
    function: "(not called: the agent's work nested too deep)",
    code: 113, // JVMTI_ERROR_INTERNAL
};

/// The agent's JVMTI environment. JVMTI environments may be used from any thread attached to
/// the VM, so this is a plain copyable handle.
#[derive(Clone, Copy, Debug)]
pub struct Jvmti(*mut jvmtiEnv);

// SAFETY: a jvmtiEnv pointer is valid for the life of the VM and JVMTI functions may be called
// from any attached thread; the handle carries no thread-bound state.
unsafe impl Send for Jvmti {}
// SAFETY: as above; JVMTI functions are thread-safe.
unsafe impl Sync for Jvmti {}

/// Calls a JVMTI function through the table, turning a missing entry or an error into `Err`.
macro_rules! call {
    ($self:expr, $name:ident ( $($arg:expr),* )) => {{
        // SAFETY: the function table of a live jvmtiEnv is valid for the life of the VM.
        let table = unsafe { &*(*$self.0).functions };
        match table.$name {
            // SAFETY: each caller passes arguments that match the JVMTI signature of $name and
            // out-pointers to live locals.
            Some(function) => check(stringify!($name), unsafe { function($self.0, $($arg),*) }),
            None => Err(JvmtiError { function: stringify!($name), code: -1 }),
        }
    }};
}

fn check(function: &'static str, error: jvmtiError) -> JvmtiResult<()> {
    if error == JVMTI_ERROR_NONE {
        Ok(())
    } else {
        Err(JvmtiError {
            function,
            code: error.raw(),
        })
    }
}

impl Jvmti {
    /// The environment a JVMTI event callback was called with.
    pub fn of_callback(env: *mut jvmtiEnv) -> Jvmti {
        Jvmti(env)
    }

    /// The JVMTI environment of a VM, asking for JVMTI 1.2 (every JDK 8 and later has it).
    pub fn from_vm(vm: *mut JavaVM) -> Option<Jvmti> {
        let mut env: *mut c_void = ptr::null_mut();
        // SAFETY: the JVM hands us a valid JavaVM in Agent_OnLoad/OnAttach; GetEnv is the first
        // entry of its invoke interface and writes one pointer.
        let status =
            unsafe { ((**vm).GetEnv)(vm, &mut env, jvmti_bindings::sys::jvmti::JVMTI_VERSION_1_2) };
        (status == 0 && !env.is_null()).then_some(Jvmti(env.cast()))
    }

    /// The capabilities this environment could have now. In the live phase HotSpot offers
    /// fewer than at OnLoad (no method entry/exit or exception events, for instance).
    pub fn potential_capabilities(self) -> JvmtiResult<jvmtiCapabilities> {
        let mut capabilities = jvmtiCapabilities::default();
        call!(self, GetPotentialCapabilities(&mut capabilities))?;
        Ok(capabilities)
    }

    /// The calling thread (a local reference).
    pub fn current_thread(self) -> JvmtiResult<jthread> {
        let mut thread: jthread = ptr::null_mut();
        call!(self, GetCurrentThread(&mut thread))?;
        Ok(thread)
    }

    /// A thread's CPU time in nanoseconds (needs can_get_thread_cpu_time).
    pub fn thread_cpu_time(self, thread: jthread) -> JvmtiResult<u64> {
        let mut nanos: i64 = 0;
        call!(self, GetThreadCpuTime(thread, &mut nanos))?;
        Ok(nanos.max(0) as u64)
    }

    pub fn add_capabilities(self, capabilities: &jvmtiCapabilities) -> JvmtiResult<()> {
        call!(self, AddCapabilities(capabilities))
    }

    /// Sets the callbacks, passing only the first `size` bytes of the table: the JVM may be older
    /// than the table's layout.
    pub fn set_event_callbacks_sized(
        self,
        callbacks: &jvmtiEventCallbacks,
        size: jint,
    ) -> JvmtiResult<()> {
        call!(self, SetEventCallbacks(callbacks, size))
    }

    pub fn set_event(self, event: jvmtiEvent, enabled: bool) -> JvmtiResult<()> {
        let mode = if enabled { JVMTI_ENABLE } else { JVMTI_DISABLE };
        call!(self, SetEventNotificationMode(mode, event, ptr::null_mut()))
    }

    /// Sends the events of code already there (CompiledMethodLoad for every compiled method,
    /// DynamicCodeGenerated for the stubs) as if it were loaded now: for an agent attached late.
    pub fn generate_events(self, event: jvmtiEvent) -> JvmtiResult<()> {
        call!(self, GenerateEvents(event))
    }

    /// The index of the extension event named `id` (e.g.
    /// `com.sun.hotspot.events.VirtualThreadMount`), if this JVM has it.
    pub fn extension_event_index(self, id: &str) -> Option<jint> {
        let mut count: jint = 0;
        let mut events: *mut jvmtiExtensionEventInfo = ptr::null_mut();
        call!(self, GetExtensionEvents(&mut count, &mut events)).ok()?;
        let mut found = None;
        for at in 0..count.max(0) as usize {
            // SAFETY: JVMTI filled `count` entries at `events`.
            let event = unsafe { &*events.add(at) };
            // SAFETY: `id` is a NUL-terminated string JVMTI allocated.
            if !event.id.is_null()
                && unsafe { CStr::from_ptr(event.id) }.to_bytes() == id.as_bytes()
            {
                found = Some(event.extension_event_index);
            }
            for param in 0..event.param_count.max(0) as usize {
                // SAFETY: the entry has `param_count` parameters at `params`.
                self.deallocate(unsafe { (*event.params.add(param)).name });
            }
            self.deallocate(event.params);
            self.deallocate(event.id);
            self.deallocate(event.short_description);
        }
        self.deallocate(events);
        found
    }

    /// Sets (and so turns on) the callback of the extension event `index`, one that takes the
    /// JNI environment and a thread, as HotSpot's virtual thread mount and unmount events do.
    pub fn set_thread_extension_callback(
        self,
        index: jint,
        callback: unsafe extern "C" fn(*mut jvmtiEnv, *mut JNIEnv, jthread),
    ) -> JvmtiResult<()> {
        // SAFETY: JVMTI declares extension callbacks variadic and calls them with the
        // parameters the event lists (here the JNI environment and a thread); on the C calling
        // convention a function that names those parameters receives them the same way.
        let callback: jvmtiExtensionEvent = unsafe {
            std::mem::transmute::<
                unsafe extern "C" fn(*mut jvmtiEnv, *mut JNIEnv, jthread),
                jvmtiExtensionEvent,
            >(callback)
        };
        call!(self, SetExtensionEventCallback(index, Some(callback)))
    }

    /// Frees memory JVMTI allocated for us.
    fn deallocate<T>(self, memory: *mut T) {
        if !memory.is_null() {
            // Failing to free is not worth reporting: there is nothing to do about it.
            let _ = call!(self, Deallocate(memory.cast()));
        }
    }

    /// Copies a JVMTI-allocated C string into a String and frees it.
    fn take_string(self, text: *mut c_char) -> Option<String> {
        if text.is_null() {
            return None;
        }
        // SAFETY: JVMTI returns NUL-terminated modified UTF-8, valid until deallocated below.
        let owned = unsafe { CStr::from_ptr(text) }
            .to_string_lossy()
            .into_owned();
        self.deallocate(text);
        Some(owned)
    }

    /// The JVM's system properties whose names start with `prefix`, as (name without the
    /// prefix, value): the `-D` options of the command line (OnLoad and live phases).
    pub fn system_properties_with_prefix(self, prefix: &str) -> Vec<(String, String)> {
        let mut count: jint = 0;
        let mut names: *mut *mut c_char = ptr::null_mut();
        if call!(self, GetSystemProperties(&mut count, &mut names)).is_err() {
            return Vec::new();
        }
        let mut found = Vec::new();
        for name in self.take_array(names, count) {
            let Some(owned) = self.take_string(name) else {
                continue;
            };
            let Some(rest) = owned.strip_prefix(prefix) else {
                continue;
            };
            let Ok(c_name) = std::ffi::CString::new(owned.as_str()) else {
                continue;
            };
            let mut value: *mut c_char = ptr::null_mut();
            if call!(self, GetSystemProperty(c_name.as_ptr(), &mut value)).is_ok() {
                if let Some(value) = self.take_string(value) {
                    found.push((rest.to_string(), value));
                }
            }
        }
        found
    }

    /// Copies an array JVMTI allocated for us and frees it.
    fn take_array<T: Copy>(self, items: *mut T, count: jint) -> Vec<T> {
        if items.is_null() {
            return Vec::new();
        }
        // SAFETY: JVMTI returned `count` initialised items at `items`, ours until deallocated.
        let copy = unsafe { std::slice::from_raw_parts(items, count.max(0) as usize) }.to_vec();
        self.deallocate(items);
        copy
    }

    /// Asks for the methods of a class, which makes the JVM create their jmethodIDs: this is what
    /// lets AsyncGetCallTrace name the frames of the class. Returns them.
    pub fn preload_method_ids(self, class: jclass) -> JvmtiResult<Vec<jmethodID>> {
        self.class_methods(class)
    }

    /// Every loaded class (local references, valid in the calling JNI frame).
    pub fn loaded_classes(self) -> JvmtiResult<Vec<jclass>> {
        let mut count: jint = 0;
        let mut classes: *mut jclass = ptr::null_mut();
        call!(self, GetLoadedClasses(&mut count, &mut classes))?;
        Ok(self.take_array(classes, count))
    }

    /// (name, signature) of a method.
    pub fn method_name(self, method: jmethodID) -> JvmtiResult<(String, String)> {
        let mut name: *mut c_char = ptr::null_mut();
        let mut signature: *mut c_char = ptr::null_mut();
        call!(
            self,
            GetMethodName(method, &mut name, &mut signature, ptr::null_mut())
        )?;
        Ok((
            self.take_string(name).unwrap_or_default(),
            self.take_string(signature).unwrap_or_default(),
        ))
    }

    pub fn method_declaring_class(self, method: jmethodID) -> JvmtiResult<jclass> {
        let mut class: jclass = ptr::null_mut();
        call!(self, GetMethodDeclaringClass(method, &mut class))?;
        Ok(class)
    }

    /// A class's JVM signature, such as `Ljava/lang/String;` or `[I`.
    pub fn class_signature(self, class: jclass) -> JvmtiResult<String> {
        let mut signature: *mut c_char = ptr::null_mut();
        call!(
            self,
            GetClassSignature(class, &mut signature, ptr::null_mut())
        )?;
        Ok(self.take_string(signature).unwrap_or_default())
    }

    /// The class's source file, or `None` when it has none.
    pub fn source_file_name(self, class: jclass) -> Option<String> {
        let mut name: *mut c_char = ptr::null_mut();
        call!(self, GetSourceFileName(class, &mut name)).ok()?;
        self.take_string(name)
    }

    /// (first bytecode index, line) pairs, or `None` for native and line-less methods.
    pub fn line_number_table(self, method: jmethodID) -> Option<Vec<(i64, u32)>> {
        let mut count: jint = 0;
        let mut table: *mut jvmtiLineNumberEntry = ptr::null_mut();
        call!(self, GetLineNumberTable(method, &mut count, &mut table)).ok()?;
        let mut lines: Vec<(i64, u32)> = self
            .take_array(table, count)
            .iter()
            .map(|entry| (entry.start_location, entry.line_number.max(0) as u32))
            .collect();
        lines.sort_unstable();
        Some(lines)
    }

    /// (name, thread group name) of a thread.
    pub fn thread_names(self, thread: jthread) -> JvmtiResult<(String, String)> {
        // SAFETY: jvmtiThreadInfo is plain C data; zero is a valid initial value.
        let mut info: jvmtiThreadInfo = unsafe { std::mem::zeroed() };
        call!(self, GetThreadInfo(thread, &mut info))?;
        let name = self.take_string(info.name).unwrap_or_default();
        let mut group_name = String::new();
        if !info.thread_group.is_null() {
            // SAFETY: as above.
            let mut group: jvmtiThreadGroupInfo = unsafe { std::mem::zeroed() };
            if call!(self, GetThreadGroupInfo(info.thread_group, &mut group)).is_ok() {
                group_name = self.take_string(group.name).unwrap_or_default();
            }
        }
        Ok((name, group_name))
    }

    /// Every live thread (local references).
    pub fn all_threads(self) -> JvmtiResult<Vec<jthread>> {
        let mut count: jint = 0;
        let mut threads: *mut jthread = ptr::null_mut();
        call!(self, GetAllThreads(&mut count, &mut threads))?;
        Ok(self.take_array(threads, count))
    }

    /// JVMTI's per-thread word: the agent keeps a thread's serial number there.
    pub fn set_thread_word(self, thread: jthread, word: usize) -> JvmtiResult<()> {
        call!(self, SetThreadLocalStorage(thread, word as *const c_void))
    }

    pub fn thread_word(self, thread: jthread) -> JvmtiResult<usize> {
        let mut word: *mut c_void = ptr::null_mut();
        call!(self, GetThreadLocalStorage(thread, &mut word))?;
        Ok(word as usize)
    }

    /// Runs `visit` over the stacks of all threads (up to `depth` frames each), then frees them.
    pub fn with_all_stack_traces(
        self,
        depth: u32,
        visit: impl FnOnce(&[jvmtiStackInfo]),
    ) -> JvmtiResult<()> {
        let mut infos: *mut jvmtiStackInfo = ptr::null_mut();
        let mut count: jint = 0;
        call!(
            self,
            GetAllStackTraces(depth as jint, &mut infos, &mut count)
        )?;
        // SAFETY: JVMTI returned `count` stack infos at `infos`, in one allocation.
        visit(unsafe { std::slice::from_raw_parts(infos, count.max(0) as usize) });
        self.deallocate(infos);
        Ok(())
    }

    /// The JVMTI tag of an object (0: untagged).
    pub fn tag(self, object: jobject) -> JvmtiResult<i64> {
        let mut tag: i64 = 0;
        call!(self, GetTag(object, &mut tag))?;
        Ok(tag)
    }

    pub fn set_tag(self, object: jobject, tag: i64) -> JvmtiResult<()> {
        call!(self, SetTag(object, tag))
    }

    /// How many frames the thread's stack has.
    pub fn frame_count(self, thread: jthread) -> JvmtiResult<u32> {
        let mut count: jint = 0;
        call!(self, GetFrameCount(thread, &mut count))?;
        Ok(count.max(0) as u32)
    }

    /// `this` of the method at `depth` of the thread's stack (a local reference).
    pub fn local_instance(self, thread: jthread, depth: u32) -> JvmtiResult<jobject> {
        let mut object: jobject = ptr::null_mut();
        call!(self, GetLocalInstance(thread, depth as jint, &mut object))?;
        Ok(object)
    }

    pub fn method_modifiers(self, method: jmethodID) -> JvmtiResult<u32> {
        let mut modifiers: jint = 0;
        call!(self, GetMethodModifiers(method, &mut modifiers))?;
        Ok(modifiers as u32)
    }

    pub fn class_modifiers(self, class: jclass) -> JvmtiResult<u32> {
        let mut modifiers: jint = 0;
        call!(self, GetClassModifiers(class, &mut modifiers))?;
        Ok(modifiers as u32)
    }

    pub fn object_size(self, object: jobject) -> JvmtiResult<u64> {
        let mut size: i64 = 0;
        call!(self, GetObjectSize(object, &mut size))?;
        Ok(size.max(0) as u64)
    }

    /// The methods of a class.
    pub fn class_methods(self, class: jclass) -> JvmtiResult<Vec<jmethodID>> {
        let mut count: jint = 0;
        let mut methods: *mut jmethodID = ptr::null_mut();
        call!(self, GetClassMethods(class, &mut count, &mut methods))?;
        Ok(self.take_array(methods, count))
    }

    /// Samples about one allocation per `bytes` allocated, for SampledObjectAlloc (0: all).
    pub fn set_heap_sampling_interval(self, bytes: jint) -> JvmtiResult<()> {
        call!(self, SetHeapSamplingInterval(bytes))
    }

    pub fn force_garbage_collection(self) -> JvmtiResult<()> {
        call!(self, ForceGarbageCollection())
    }

    /// Gives the environment back to the VM, and with it every tag it set.
    pub fn dispose(self) -> JvmtiResult<()> {
        call!(self, DisposeEnvironment())
    }

    /// Walks every object reachable from the heap roots (from `initial` alone when it is not
    /// null), calling `callbacks` (at a safepoint, on the calling thread or the VM thread) with
    /// `user_data`.
    pub fn follow_references(
        self,
        initial: jobject,
        callbacks: &jvmtiHeapCallbacks,
        user_data: *const c_void,
    ) -> JvmtiResult<()> {
        call!(
            self,
            FollowReferences(0, ptr::null_mut(), initial, callbacks, user_data)
        )
    }

    /// JVMTI_CLASS_STATUS_* bits of a class.
    pub fn class_status(self, class: jclass) -> JvmtiResult<jint> {
        let mut status: jint = 0;
        call!(self, GetClassStatus(class, &mut status))?;
        Ok(status)
    }

    /// The interfaces a class declares it implements (local references).
    pub fn implemented_interfaces(self, class: jclass) -> JvmtiResult<Vec<jclass>> {
        let mut count: jint = 0;
        let mut interfaces: *mut jclass = ptr::null_mut();
        call!(
            self,
            GetImplementedInterfaces(class, &mut count, &mut interfaces)
        )?;
        Ok(self.take_array(interfaces, count))
    }

    /// A class's own fields, static and instance, in the order JVMTI indexes them.
    pub fn class_fields(self, class: jclass) -> JvmtiResult<Vec<jfieldID>> {
        let mut count: jint = 0;
        let mut fields: *mut jfieldID = ptr::null_mut();
        call!(self, GetClassFields(class, &mut count, &mut fields))?;
        Ok(self.take_array(fields, count))
    }

    /// (name, JVM descriptor) of a field.
    pub fn field_name(self, class: jclass, field: jfieldID) -> JvmtiResult<(String, String)> {
        let mut name: *mut c_char = ptr::null_mut();
        let mut signature: *mut c_char = ptr::null_mut();
        call!(
            self,
            GetFieldName(class, field, &mut name, &mut signature, ptr::null_mut())
        )?;
        Ok((
            self.take_string(name).unwrap_or_default(),
            self.take_string(signature).unwrap_or_default(),
        ))
    }

    pub fn field_modifiers(self, class: jclass, field: jfieldID) -> JvmtiResult<u32> {
        let mut modifiers: jint = 0;
        call!(self, GetFieldModifiers(class, field, &mut modifiers))?;
        Ok(modifiers as u32)
    }

    /// The class's defining loader (a local reference), null for the bootstrap loader.
    pub fn class_loader(self, class: jclass) -> JvmtiResult<jobject> {
        let mut loader: jobject = ptr::null_mut();
        call!(self, GetClassLoader(class, &mut loader))?;
        Ok(loader)
    }

    /// Memory from JVMTI's allocator: what a ClassFileLoadHook hands back must come from it.
    pub fn allocate(self, size: usize) -> JvmtiResult<*mut u8> {
        let mut memory: *mut std::os::raw::c_uchar = ptr::null_mut();
        call!(self, Allocate(size as i64, &mut memory))?;
        Ok(memory)
    }

    /// The work of a ClassFileLoadHook of this environment: the class's name and bytes go to
    /// `transform`, and the class file it returns, if any, goes back to the JVM in memory from
    /// this environment's allocator (as JVMTI requires). Nothing is handed back when the JVM
    /// passed no name or bytes, or the memory can't be had.
    ///
    /// # Safety
    /// The pointers are the hook's arguments as JVMTI passed them, used during the hook only.
    pub unsafe fn replace_class_file(
        self,
        name: *const c_char,
        class_data_len: jint,
        class_data: *const u8,
        new_class_data_len: *mut jint,
        new_class_data: *mut *mut u8,
        transform: impl FnOnce(&str, &[u8]) -> Option<Vec<u8>>,
    ) {
        if name.is_null() || class_data.is_null() {
            return;
        }
        // SAFETY: JVMTI passes the class's NUL-terminated JNI name, valid during the call.
        let name = unsafe { CStr::from_ptr(name) }.to_string_lossy();
        // SAFETY: JVMTI passes `class_data_len` bytes at `class_data`, valid during the call.
        let bytes =
            unsafe { std::slice::from_raw_parts(class_data, class_data_len.max(0) as usize) };
        let Some(rewritten) = transform(&name, bytes) else {
            return;
        };
        let Ok(memory) = self.allocate(rewritten.len()) else {
            return;
        };
        // SAFETY: `memory` holds `rewritten.len()` bytes from JVMTI's allocator; the JVM takes
        // ownership of it through the out-parameters, which JVMTI guarantees are writable.
        unsafe {
            ptr::copy_nonoverlapping(rewritten.as_ptr(), memory, rewritten.len());
            *new_class_data_len = rewritten.len() as jint;
            *new_class_data = memory;
        }
    }

    /// Asks the JVM to pass the classes' bytes through the ClassFileLoadHook again.
    pub fn retransform_classes(self, classes: &[jclass]) -> JvmtiResult<()> {
        call!(
            self,
            RetransformClasses(classes.len() as jint, classes.as_ptr())
        )
    }

    /// Whether RetransformClasses can change the class (not arrays, primitives, hidden classes).
    pub fn is_modifiable_class(self, class: jclass) -> bool {
        let mut modifiable: jvmti_bindings::sys::jni::jboolean = 0;
        call!(self, IsModifiableClass(class, &mut modifiable)).is_ok() && modifiable != 0
    }

    /// Every module the VM has defined (local references).
    pub fn all_modules(self) -> JvmtiResult<Vec<jobject>> {
        let mut count: jint = 0;
        let mut modules: *mut jobject = ptr::null_mut();
        call!(self, GetAllModules(&mut count, &mut modules))?;
        Ok(self.take_array(modules, count))
    }

    /// Lets `to_module`'s code use the public types of `module`'s package `package` (as Java
    /// names it, `jdk.internal.misc`), as if `module` exported it to `to_module`.
    pub fn add_module_exports(
        self,
        module: jobject,
        package: &CStr,
        to_module: jobject,
    ) -> JvmtiResult<()> {
        // The JVM runs Java code of its own for it: the agent's work (see agent_work::agent_work).
        crate::agent_work::agent_work(|| {
            call!(self, AddModuleExports(module, package.as_ptr(), to_module))
        })
        .unwrap_or(Err(NESTED_TOO_DEEP))
    }

    /// Lets `module` read `to_module` (needed before its code may call into it).
    pub fn add_module_reads(self, module: jobject, to_module: jobject) -> JvmtiResult<()> {
        // As above.
        crate::agent_work::agent_work(|| call!(self, AddModuleReads(module, to_module)))
            .unwrap_or(Err(NESTED_TOO_DEEP))
    }

    /// The thread that holds an object's monitor now (a local reference), if one does (needs
    /// can_get_monitor_info).
    pub fn monitor_owner(self, object: jobject) -> JvmtiResult<Option<jthread>> {
        let mut usage = jvmtiMonitorUsage {
            owner: ptr::null_mut(),
            entry_count: 0,
            waiter_count: 0,
            waiters: ptr::null_mut(),
            notify_waiter_count: 0,
            notify_waiters: ptr::null_mut(),
        };
        call!(self, GetObjectMonitorUsage(object, &mut usage))?;
        self.deallocate(usage.waiters);
        self.deallocate(usage.notify_waiters);
        Ok((!usage.owner.is_null()).then_some(usage.owner))
    }

    /// The monitors `thread` owns now (local references). For another thread, a handshake
    /// with it alone: no safepoint.
    pub fn owned_monitors(self, thread: jthread) -> JvmtiResult<Vec<jobject>> {
        let mut count: jint = 0;
        let mut monitors: *mut jobject = ptr::null_mut();
        call!(self, GetOwnedMonitorInfo(thread, &mut count, &mut monitors))?;
        Ok(self.take_array(monitors, count))
    }

    /// A thread's JVMTI state bits (`JVMTI_THREAD_STATE_*`).
    pub fn thread_state(self, thread: jthread) -> JvmtiResult<jint> {
        let mut state: jint = 0;
        call!(self, GetThreadState(thread, &mut state))?;
        Ok(state)
    }

    /// An object's identity hash code.
    pub fn object_hash_code(self, object: jobject) -> JvmtiResult<i32> {
        let mut hash: jint = 0;
        call!(self, GetObjectHashCode(object, &mut hash))?;
        Ok(hash)
    }

    /// Runs `body` with JNI's RegisterNatives replaced by `stand_in` for every thread, then puts
    /// the JVM's own back; `original` is given the JVM's before the stand-in is in place (the
    /// stand-in passes the calls it does not want on to it). HotSpot swaps the function table
    /// at a safepoint, so no thread sees half a table.
    pub fn with_register_natives(
        self,
        stand_in: RegisterNativesFn,
        original: impl FnOnce(RegisterNativesFn),
        body: impl FnOnce(),
    ) -> JvmtiResult<()> {
        let mut table: *mut jniNativeInterface = ptr::null_mut();
        call!(self, GetJNIFunctionTable(&mut table))?;
        if table.is_null() {
            return Err(JvmtiError {
                function: "GetJNIFunctionTable",
                code: -1,
            });
        }
        // Only RegisterNatives is read and written: the JVM's table may be shorter than the
        // bindings' (newer JDKs add functions at its end), so it is never copied whole.
        // SAFETY: JVMTI handed us a copy of the table, ours until deallocated below;
        // RegisterNatives is in the table of every JNI version.
        let jvm_own = unsafe { (*table).RegisterNatives };
        original(jvm_own);
        // SAFETY: as above.
        unsafe { (*table).RegisterNatives = stand_in };
        let changed = call!(self, SetJNIFunctionTable(table));
        if changed.is_ok() {
            body();
            // SAFETY: as above.
            unsafe { (*table).RegisterNatives = jvm_own };
            let _ = call!(self, SetJNIFunctionTable(table));
        }
        self.deallocate(table);
        changed
    }

    /// Up to `max` frames of a thread's stack, innermost first.
    pub fn stack_trace(self, thread: jthread, max: u32) -> JvmtiResult<Vec<jvmtiFrameInfo>> {
        let mut frames = vec![
            jvmtiFrameInfo {
                method: ptr::null_mut(),
                location: 0,
            };
            max as usize
        ];
        let mut count: jint = 0;
        call!(
            self,
            GetStackTrace(thread, 0, max as jint, frames.as_mut_ptr(), &mut count)
        )?;
        frames.truncate(count.max(0) as usize);
        Ok(frames)
    }
}
