//! A thin layer over the JNI function table for the code that runs Java on the JVM's behalf
//! (method parameter tracing's modifiers): typed calls, field reads and array reads, with any
//! Java exception cleared and reported as `Err` instead of left pending.

use std::ffi::{c_void, CStr, CString};
use std::ptr;

use jvmti_bindings::sys::jni::{jarray, jbyte, jsize, jstring, JNINativeMethod};

use crate::jvmti::{jclass, jfieldID, jmethodID, jobject, jvalue, JNIEnv};

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
        self.non_null(jni!(self, FindClass(name.as_ptr())))
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
