//! A thin layer over the JNI function table: typed calls, field reads and array reads for the
//! code that runs Java on the JVM's behalf (method parameter tracing's modifiers), with any Java
//! exception cleared and reported as `Err` instead of left pending; and the raw helpers every
//! part of the agent needs (the thread's JNIEnv, attaching the agent's thread, local frames).

use std::ffi::{c_void, CStr, CString};
use std::ptr;
use std::sync::atomic::{AtomicPtr, Ordering};

use jvmti_bindings::sys::jni::{
    jarray, jbyte, jsize, jstring, JNINativeMethod, JavaVMAttachArgs, JNI_VERSION_1_6,
};

use crate::jvmti::{jclass, jfieldID, jmethodID, jobject, jvalue, JNIEnv, JavaVM};

/// A Java exception was thrown (and has been cleared), or a lookup found nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Thrown;

pub type JniResult<T> = Result<T, Thrown>;

/// The longest string value recorded whole (UTF-16 units).
pub const MAX_STRING_CHARS: i32 = 1024;

/// The calling thread's JNI environment: valid only on the thread it was handed to.
#[derive(Clone, Copy)]
pub struct Jni(pub *mut JNIEnv);

/// A value as JNI passes it, with its JVM type (a descriptor's first character: `Z`, `B`, `C`,
/// `S`, `I`, `J`, `F`, `D`, or `L` for any reference).
#[derive(Clone, Copy)]
pub struct Typed {
    pub kind: u8,
    pub value: jvalue,
}

impl Typed {
    pub fn object(object: jobject) -> Typed {
        Typed {
            kind: b'L',
            value: jvalue { l: object },
        }
    }

    pub fn is_reference(&self) -> bool {
        self.kind == b'L'
    }

    /// The reference, null for a primitive.
    pub fn reference(&self) -> jobject {
        if self.is_reference() {
            // SAFETY: a reference kind always holds the `l` member.
            unsafe { self.value.l }
        } else {
            ptr::null_mut()
        }
    }
}

/// A primitive read out of a `Typed`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Primitive {
    Boolean(bool),
    Byte(i8),
    Char(u16),
    Short(i16),
    Int(i32),
    Long(i64),
    Float(f32),
    Double(f64),
}

impl Typed {
    /// The primitive held, `None` for a reference.
    pub fn primitive(&self) -> Option<Primitive> {
        let value = self.value;
        // SAFETY: each arm reads the member of the union that `kind` says was written (every
        // constructor of Typed writes the member matching its kind).
        unsafe {
            Some(match self.kind {
                b'Z' => Primitive::Boolean(value.z != 0),
                b'B' => Primitive::Byte(value.b),
                b'C' => Primitive::Char(value.c),
                b'S' => Primitive::Short(value.s),
                b'I' => Primitive::Int(value.i),
                b'J' => Primitive::Long(value.j),
                b'F' => Primitive::Float(value.f),
                b'D' => Primitive::Double(value.d),
                _ => return None,
            })
        }
    }
}

/// The JNI kind of a type descriptor: its first character, with arrays as references.
pub fn kind_of(descriptor: &str) -> u8 {
    match descriptor.as_bytes().first() {
        Some(b'[') | Some(b'L') | None => b'L',
        Some(&kind) => kind,
    }
}

macro_rules! jni {
    ($env:expr, $name:ident ( $($arg:expr),* )) => {{
        let env = $env.0;
        // SAFETY: `env` is the calling thread's JNIEnv (the Jni handle is only built from the
        // environment JNI handed to this thread) and each caller passes arguments of the types
        // the JNI specification gives for $name.
        unsafe { ((**env).$name)(env $(, $arg)*) }
    }};
}

impl Jni {
    /// Clears a pending exception, telling whether there was one.
    pub fn clear_exception(self) -> bool {
        if jni!(self, ExceptionCheck()) != 0 {
            jni!(self, ExceptionClear());
            true
        } else {
            false
        }
    }

    fn checked<T>(self, value: T) -> JniResult<T> {
        if self.clear_exception() {
            Err(Thrown)
        } else {
            Ok(value)
        }
    }

    fn non_null<T>(self, value: *mut T) -> JniResult<*mut T> {
        let value = self.checked(value)?;
        if value.is_null() {
            Err(Thrown)
        } else {
            Ok(value)
        }
    }

    /// Opens a frame for local references (freed by `pop_local_frame`); false when the JVM
    /// could not make room.
    pub fn push_local_frame(self, capacity: i32) -> bool {
        let pushed = jni!(self, PushLocalFrame(capacity)) == 0;
        if !pushed {
            self.clear_exception();
        }
        pushed
    }

    pub fn pop_local_frame(self) {
        jni!(self, PopLocalFrame(ptr::null_mut()));
    }

    /// Defines a class from its bytes in `loader` (null: the bootstrap loader).
    pub fn define_class(self, name: &str, loader: jobject, bytes: &[u8]) -> JniResult<jclass> {
        let name = CString::new(name).map_err(|_| Thrown)?;
        self.non_null(jni!(
            self,
            DefineClass(
                name.as_ptr(),
                loader,
                bytes.as_ptr().cast::<jbyte>(),
                bytes.len() as jsize
            )
        ))
    }

    /// A class by JNI name (`java/lang/String`) from the bootstrap or system loader.
    pub fn find_class(self, name: &str) -> JniResult<jclass> {
        let name = CString::new(name).map_err(|_| Thrown)?;
        crate::agent_work::agent_work(|| self.non_null(jni!(self, FindClass(name.as_ptr()))))
            .unwrap_or(Err(Thrown))
    }

    /// Binds native methods: (name, descriptor, function).
    pub fn register_natives(
        self,
        class: jclass,
        methods: &[(&CStr, &CStr, *mut c_void)],
    ) -> JniResult<()> {
        let table: Vec<JNINativeMethod> = methods
            .iter()
            .map(|(name, signature, function)| JNINativeMethod {
                name: name.as_ptr(),
                signature: signature.as_ptr(),
                fnPtr: *function,
            })
            .collect();
        let status = jni!(
            self,
            RegisterNatives(class, table.as_ptr(), table.len() as i32)
        );
        self.checked(())?;
        if status == 0 {
            Ok(())
        } else {
            Err(Thrown)
        }
    }

    /// Makes every module the VM has defined read `module` (which code in a named module needs
    /// before it may call into `module`'s classes), through `jvmti`; returns global references
    /// to those it could.
    pub fn make_modules_read(self, jvmti: crate::jvmti::Jvmti, module: jobject) -> Vec<usize> {
        let mut reading = Vec::new();
        for named in jvmti.all_modules().unwrap_or_default() {
            if jvmti.add_module_reads(named, module).is_ok() {
                reading.push(self.new_global_ref(named) as usize);
            }
            self.delete_local_ref(named);
        }
        reading
    }

    pub fn module_of(self, class: jclass) -> JniResult<jobject> {
        self.non_null(jni!(self, GetModule(class)))
    }

    pub fn object_class(self, object: jobject) -> jclass {
        jni!(self, GetObjectClass(object))
    }

    /// The superclass, null for Object, interfaces and primitives.
    pub fn superclass(self, class: jclass) -> jclass {
        jni!(self, GetSuperclass(class))
    }

    pub fn is_instance_of(self, object: jobject, class: jclass) -> bool {
        jni!(self, IsInstanceOf(object, class)) != 0
    }

    pub fn is_assignable_from(self, sub: jclass, sup: jclass) -> bool {
        jni!(self, IsAssignableFrom(sub, sup)) != 0
    }

    pub fn is_same_object(self, a: jobject, b: jobject) -> bool {
        jni!(self, IsSameObject(a, b)) != 0
    }

    pub fn new_global_ref(self, object: jobject) -> jobject {
        if object.is_null() {
            return object;
        }
        jni!(self, NewGlobalRef(object))
    }

    pub fn delete_local_ref(self, object: jobject) {
        if !object.is_null() {
            jni!(self, DeleteLocalRef(object));
        }
    }

    pub fn delete_global_ref(self, object: jobject) {
        if !object.is_null() {
            jni!(self, DeleteGlobalRef(object));
        }
    }

    pub fn method_id(self, class: jclass, name: &str, descriptor: &str) -> JniResult<jmethodID> {
        let (name, descriptor) = c_strings(name, descriptor)?;
        self.non_null(jni!(
            self,
            GetMethodID(class, name.as_ptr(), descriptor.as_ptr())
        ))
    }

    pub fn static_method_id(
        self,
        class: jclass,
        name: &str,
        descriptor: &str,
    ) -> JniResult<jmethodID> {
        let (name, descriptor) = c_strings(name, descriptor)?;
        self.non_null(jni!(
            self,
            GetStaticMethodID(class, name.as_ptr(), descriptor.as_ptr())
        ))
    }

    pub fn field_id(self, class: jclass, name: &str, descriptor: &str) -> JniResult<jfieldID> {
        let (name, descriptor) = c_strings(name, descriptor)?;
        self.non_null(jni!(
            self,
            GetFieldID(class, name.as_ptr(), descriptor.as_ptr())
        ))
    }

    /// Calls an instance method (virtually) returning a value of kind `returns`.
    pub fn call(
        self,
        object: jobject,
        method: jmethodID,
        returns: u8,
        args: &[jvalue],
    ) -> JniResult<Typed> {
        crate::agent_work::agent_work(|| self.call_unguarded(object, method, returns, args))
            .unwrap_or(Err(Thrown))
    }

    fn call_unguarded(
        self,
        object: jobject,
        method: jmethodID,
        returns: u8,
        args: &[jvalue],
    ) -> JniResult<Typed> {
        let args = args.as_ptr();
        let value = match returns {
            b'Z' => jvalue {
                z: jni!(self, CallBooleanMethodA(object, method, args)),
            },
            b'B' => jvalue {
                b: jni!(self, CallByteMethodA(object, method, args)),
            },
            b'C' => jvalue {
                c: jni!(self, CallCharMethodA(object, method, args)),
            },
            b'S' => jvalue {
                s: jni!(self, CallShortMethodA(object, method, args)),
            },
            b'I' => jvalue {
                i: jni!(self, CallIntMethodA(object, method, args)),
            },
            b'J' => jvalue {
                j: jni!(self, CallLongMethodA(object, method, args)),
            },
            b'F' => jvalue {
                f: jni!(self, CallFloatMethodA(object, method, args)),
            },
            b'D' => jvalue {
                d: jni!(self, CallDoubleMethodA(object, method, args)),
            },
            b'V' => {
                jni!(self, CallVoidMethodA(object, method, args));
                jvalue { j: 0 }
            }
            _ => jvalue {
                l: jni!(self, CallObjectMethodA(object, method, args)),
            },
        };
        self.checked(Typed {
            kind: returns,
            value,
        })
    }

    /// Calls a static method returning a value of kind `returns`.
    pub fn call_static(
        self,
        class: jclass,
        method: jmethodID,
        returns: u8,
        args: &[jvalue],
    ) -> JniResult<Typed> {
        crate::agent_work::agent_work(|| self.call_static_unguarded(class, method, returns, args))
            .unwrap_or(Err(Thrown))
    }

    fn call_static_unguarded(
        self,
        class: jclass,
        method: jmethodID,
        returns: u8,
        args: &[jvalue],
    ) -> JniResult<Typed> {
        let args = args.as_ptr();
        let value = match returns {
            b'Z' => jvalue {
                z: jni!(self, CallStaticBooleanMethodA(class, method, args)),
            },
            b'B' => jvalue {
                b: jni!(self, CallStaticByteMethodA(class, method, args)),
            },
            b'C' => jvalue {
                c: jni!(self, CallStaticCharMethodA(class, method, args)),
            },
            b'S' => jvalue {
                s: jni!(self, CallStaticShortMethodA(class, method, args)),
            },
            b'I' => jvalue {
                i: jni!(self, CallStaticIntMethodA(class, method, args)),
            },
            b'J' => jvalue {
                j: jni!(self, CallStaticLongMethodA(class, method, args)),
            },
            b'F' => jvalue {
                f: jni!(self, CallStaticFloatMethodA(class, method, args)),
            },
            b'D' => jvalue {
                d: jni!(self, CallStaticDoubleMethodA(class, method, args)),
            },
            b'V' => {
                jni!(self, CallStaticVoidMethodA(class, method, args));
                jvalue { j: 0 }
            }
            _ => jvalue {
                l: jni!(self, CallStaticObjectMethodA(class, method, args)),
            },
        };
        self.checked(Typed {
            kind: returns,
            value,
        })
    }

    /// Reads an instance field of kind `kind`.
    pub fn field(self, object: jobject, field: jfieldID, kind: u8) -> Typed {
        let value = match kind {
            b'Z' => jvalue {
                z: jni!(self, GetBooleanField(object, field)),
            },
            b'B' => jvalue {
                b: jni!(self, GetByteField(object, field)),
            },
            b'C' => jvalue {
                c: jni!(self, GetCharField(object, field)),
            },
            b'S' => jvalue {
                s: jni!(self, GetShortField(object, field)),
            },
            b'I' => jvalue {
                i: jni!(self, GetIntField(object, field)),
            },
            b'J' => jvalue {
                j: jni!(self, GetLongField(object, field)),
            },
            b'F' => jvalue {
                f: jni!(self, GetFloatField(object, field)),
            },
            b'D' => jvalue {
                d: jni!(self, GetDoubleField(object, field)),
            },
            _ => jvalue {
                l: jni!(self, GetObjectField(object, field)),
            },
        };
        Typed { kind, value }
    }

    /// A new object of `class` made by the constructor `constructor`.
    pub fn new_object(
        self,
        class: jclass,
        constructor: jmethodID,
        args: &[jvalue],
    ) -> JniResult<jobject> {
        crate::agent_work::agent_work(|| {
            self.non_null(jni!(self, NewObjectA(class, constructor, args.as_ptr())))
        })
        .unwrap_or(Err(Thrown))
    }

    /// A new array of `length` nulls of `class`.
    pub fn new_object_array(self, length: i32, class: jclass) -> JniResult<jobject> {
        self.non_null(jni!(self, NewObjectArray(length, class, ptr::null_mut())) as jobject)
    }

    /// A new `long[length]` of zeros.
    pub fn new_long_array(self, length: i32) -> JniResult<jobject> {
        self.non_null(jni!(self, NewLongArray(length)) as jobject)
    }

    pub fn set_object_array_element(
        self,
        array: jobject,
        index: i32,
        value: jobject,
    ) -> JniResult<()> {
        jni!(
            self,
            SetObjectArrayElement(
                array as jvmti_bindings::sys::jni::jobjectArray,
                index,
                value
            )
        );
        self.checked(())
    }

    pub fn static_field_id(
        self,
        class: jclass,
        name: &str,
        descriptor: &str,
    ) -> JniResult<jfieldID> {
        let name = CString::new(name).map_err(|_| Thrown)?;
        let descriptor = CString::new(descriptor).map_err(|_| Thrown)?;
        self.non_null(jni!(
            self,
            GetStaticFieldID(class, name.as_ptr(), descriptor.as_ptr())
        ))
    }

    pub fn set_static_object_field(
        self,
        class: jclass,
        field: jfieldID,
        value: jobject,
    ) -> JniResult<()> {
        jni!(self, SetStaticObjectField(class, field, value));
        self.checked(())
    }

    pub fn set_static_long_field(
        self,
        class: jclass,
        field: jfieldID,
        value: i64,
    ) -> JniResult<()> {
        jni!(self, SetStaticLongField(class, field, value));
        self.checked(())
    }

    /// A static reference field's value (a local reference, or null).
    pub fn static_object_field(self, class: jclass, field: jfieldID) -> jobject {
        jni!(self, GetStaticObjectField(class, field))
    }

    pub fn array_length(self, array: jobject) -> i32 {
        jni!(self, GetArrayLength(array as jarray))
    }

    /// One element of an array whose elements are of kind `kind`; the index must be in range.
    pub fn array_element(self, array: jobject, index: i32, kind: u8) -> JniResult<Typed> {
        let mut value = jvalue { j: 0 };
        let array = array as jarray;
        // Each region read writes exactly one element into the member of `value` named.
        match kind {
            b'Z' => jni!(
                self,
                GetBooleanArrayRegion(array, index, 1, ptr::addr_of_mut!(value.z))
            ),
            b'B' => jni!(
                self,
                GetByteArrayRegion(array, index, 1, ptr::addr_of_mut!(value.b))
            ),
            b'C' => jni!(
                self,
                GetCharArrayRegion(array, index, 1, ptr::addr_of_mut!(value.c))
            ),
            b'S' => jni!(
                self,
                GetShortArrayRegion(array, index, 1, ptr::addr_of_mut!(value.s))
            ),
            b'I' => jni!(
                self,
                GetIntArrayRegion(array, index, 1, ptr::addr_of_mut!(value.i))
            ),
            b'J' => jni!(
                self,
                GetLongArrayRegion(array, index, 1, ptr::addr_of_mut!(value.j))
            ),
            b'F' => jni!(
                self,
                GetFloatArrayRegion(array, index, 1, ptr::addr_of_mut!(value.f))
            ),
            b'D' => jni!(
                self,
                GetDoubleArrayRegion(array, index, 1, ptr::addr_of_mut!(value.d))
            ),
            _ => value.l = jni!(self, GetObjectArrayElement(array, index)),
        }
        self.checked(Typed { kind, value })
    }

    /// A Java string's contents, up to `MAX_STRING_CHARS` UTF-16 units: longer ones are cut
    /// and end with `...(N chars)`, so that a huge value can't flood the output. Read as
    /// UTF-16, so NULs and characters beyond the BMP come through as they are.
    pub fn string(self, string: jobject) -> JniResult<String> {
        let length = jni!(self, GetStringLength(string as jstring));
        self.checked(())?;
        let taken = length.clamp(0, MAX_STRING_CHARS);
        let mut units = vec![0_u16; taken as usize];
        jni!(
            self,
            GetStringRegion(string as jstring, 0, taken, units.as_mut_ptr())
        );
        self.checked(())?;
        let mut text = String::from_utf16_lossy(&units);
        if length > taken {
            text.push_str(&format!("...({length} chars)"));
        }
        Ok(text)
    }

    pub fn new_string(self, text: &str) -> JniResult<jobject> {
        let text = CString::new(text.replace('\0', "")).map_err(|_| Thrown)?;
        self.non_null(jni!(self, NewStringUTF(text.as_ptr())))
    }
}

fn c_strings(name: &str, descriptor: &str) -> JniResult<(CString, CString)> {
    Ok((
        CString::new(name).map_err(|_| Thrown)?,
        CString::new(descriptor).map_err(|_| Thrown)?,
    ))
}

/// The JVM this agent runs in, once the agent has started.
static VM: AtomicPtr<JavaVM> = AtomicPtr::new(ptr::null_mut());

/// Remembers the JVM, so that any thread can find its own JNIEnv.
pub fn set_vm(vm: *mut JavaVM) {
    VM.store(vm, Ordering::Release);
}

/// The JVM, once the agent has started.
pub fn vm() -> Option<*mut JavaVM> {
    let vm = VM.load(Ordering::Acquire);
    (!vm.is_null()).then_some(vm)
}

/// The calling thread's JNIEnv, when the agent runs and the thread is attached.
pub fn thread_jni() -> Option<*mut JNIEnv> {
    vm().map(current_jni).filter(|jni| !jni.is_null())
}

/// The calling thread's JNIEnv, or null when it is not attached to the VM.
pub fn current_jni(vm: *mut JavaVM) -> *mut JNIEnv {
    let mut env: *mut c_void = ptr::null_mut();
    // SAFETY: `vm` is the live JavaVM; GetEnv writes one pointer.
    let status = unsafe { ((**vm).GetEnv)(vm, &mut env, JNI_VERSION_1_6) };
    if status == 0 {
        env.cast()
    } else {
        ptr::null_mut()
    }
}

/// Attaches the calling native thread to the JVM as a daemon named `openprof`.
pub fn attach_current_thread(vm: *mut JavaVM) -> Option<*mut JNIEnv> {
    let mut env: *mut c_void = ptr::null_mut();
    let mut args = JavaVMAttachArgs {
        version: JNI_VERSION_1_6,
        name: c"openprof".as_ptr().cast_mut(),
        group: ptr::null_mut(),
    };
    // SAFETY: `vm` is the live JavaVM; the args struct and name outlive the call.
    let status = unsafe {
        ((**vm).AttachCurrentThreadAsDaemon)(
            vm,
            &mut env,
            (&mut args as *mut JavaVMAttachArgs).cast(),
        )
    };
    (status == 0 && !env.is_null()).then_some(env.cast())
}

/// Detaches the calling thread, which `attach_current_thread` attached.
pub fn detach_current_thread(vm: *mut JavaVM) {
    // SAFETY: the calling thread attached itself and holds no JNI references across this.
    unsafe { ((**vm).DetachCurrentThread)(vm) };
}

/// Frees a local reference of the calling thread (null references and environments are let be).
pub fn delete_local_ref(jni: *mut JNIEnv, object: *mut c_void) {
    if !jni.is_null() && !object.is_null() {
        // SAFETY: `object` is a local reference of this thread's current JNI frame.
        unsafe { ((**jni).DeleteLocalRef)(jni, object) };
    }
}

/// Runs `body` inside a JNI local frame, so the local references JVMTI hands the agent's thread
/// are freed each round (a native thread has no Java frame to free them).
pub fn with_local_frame(jni: *mut JNIEnv, body: impl FnOnce()) {
    // SAFETY: `jni` is the calling thread's own JNIEnv.
    let pushed = unsafe { ((**jni).PushLocalFrame)(jni, 64) } == 0;
    body();
    if pushed {
        // SAFETY: pops the frame pushed above; no reference in it is used afterwards.
        unsafe { ((**jni).PopLocalFrame)(jni, ptr::null_mut()) };
    }
}

/// The heap's (total, used) bytes, from java.lang.Runtime on this thread.
pub fn heap_figures(jni: *mut JNIEnv) -> Option<(u64, u64)> {
    crate::agent_work::agent_work(|| heap_figures_unguarded(jni)).flatten()
}

fn heap_figures_unguarded(jni: *mut JNIEnv) -> Option<(u64, u64)> {
    // SAFETY: `jni` is this thread's JNIEnv; every reference and id is checked before use and
    // any Java exception is cleared.
    unsafe {
        let functions = &**jni;
        let class = (functions.FindClass)(jni, c"java/lang/Runtime".as_ptr());
        if class.is_null() {
            (functions.ExceptionClear)(jni);
            return None;
        }
        let get = (functions.GetStaticMethodID)(
            jni,
            class,
            c"getRuntime".as_ptr(),
            c"()Ljava/lang/Runtime;".as_ptr(),
        );
        let total = (functions.GetMethodID)(jni, class, c"totalMemory".as_ptr(), c"()J".as_ptr());
        let free = (functions.GetMethodID)(jni, class, c"freeMemory".as_ptr(), c"()J".as_ptr());
        if get.is_null() || total.is_null() || free.is_null() {
            (functions.ExceptionClear)(jni);
            return None;
        }
        let runtime = (functions.CallStaticObjectMethodA)(jni, class, get, ptr::null());
        if runtime.is_null() {
            (functions.ExceptionClear)(jni);
            return None;
        }
        let total = (functions.CallLongMethodA)(jni, runtime, total, ptr::null());
        let free = (functions.CallLongMethodA)(jni, runtime, free, ptr::null());
        if (functions.ExceptionCheck)(jni) != 0 {
            (functions.ExceptionClear)(jni);
            return None;
        }
        delete_local_ref(jni, runtime);
        delete_local_ref(jni, class);
        Some((total.max(0) as u64, (total - free).max(0) as u64))
    }
}

/// Calls `System.exit(status)` on the calling thread (which the JVM ends there).
pub fn call_system_exit(jni: *mut JNIEnv, status: i32) {
    crate::agent_work::agent_work(|| call_system_exit_unguarded(jni, status));
}

fn call_system_exit_unguarded(jni: *mut JNIEnv, status: i32) {
    // SAFETY: `jni` belongs to the calling, attached thread; the class and method ids are
    // checked before the call.
    unsafe {
        let functions = &**jni;
        let system = (functions.FindClass)(jni, c"java/lang/System".as_ptr());
        if system.is_null() {
            (functions.ExceptionClear)(jni);
            return;
        }
        let exit = (functions.GetStaticMethodID)(jni, system, c"exit".as_ptr(), c"(I)V".as_ptr());
        if exit.is_null() {
            (functions.ExceptionClear)(jni);
            return;
        }
        let arguments = [jvalue { i: status }];
        (functions.CallStaticVoidMethodA)(jni, system, exit, arguments.as_ptr());
    }
}
