//! Modifier chains (docs/mpt.md): checked against the traced parameter's declared type when a
//! traced method is first entered (an "MPT Apply Error" when they can't apply), then applied to
//! each call's value through JNI, giving a value that can be recorded or one of the error
//! values docs/mpt.md lists.

use jvmti_bindings::sys::jni::jvalue;
use openprof_format::mpt::{Modifier, TypeName};
use openprof_format::trace::attrs::ValueType;

use crate::jni::{kind_of, Jni, Typed};
use crate::jvmti::{jclass, jfieldID, jmethodID, jobject, Jvmti};

use openprof_classfile::access::{self, STATIC};

/// What a call's value became when the chain could not give one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failure {
    NullValue,
    NullInCall,
    InvalidIndex,
    ExceptionInCall,
    CastFailed,
    Unknown,
}

impl Failure {
    pub fn name(self) -> &'static str {
        match self {
            Failure::NullValue => "NullValue",
            Failure::NullInCall => "NullInCall",
            Failure::InvalidIndex => "InvalidIndex",
            Failure::ExceptionInCall => "ExceptionInCall",
            Failure::CastFailed => "CastFailed",
            Failure::Unknown => "Unknown",
        }
    }
}

/// One checked modifier, with what it needs resolved (classes as global references).
enum Step {
    Length,
    Element {
        index: i32,
        kind: u8,
    },
    ClassOf,
    Instance {
        method: jmethodID,
        returns: u8,
    },
    Static {
        class: jclass,
        method: jmethodID,
        returns: u8,
    },
    Field {
        field: jfieldID,
        kind: u8,
    },
    Cast {
        class: jclass,
    },
    Id,
}

/// A chain that passed its checks.
pub struct Chain {
    steps: Vec<Step>,
}

// SAFETY: the chain holds only global references and method/field ids, which the JVM lets any
// thread use.
unsafe impl Send for Chain {}
// SAFETY: as above; the chain is never changed after it is built.
unsafe impl Sync for Chain {}

/// The JVM classes a value is recorded by, resolved once.
pub struct Known {
    pub string: jclass,
    pub string_builder: jclass,
    pub string_buffer: jclass,
    pub class: jclass,
    pub object_to_string: jmethodID,
    pub class_get_name: jmethodID,
    for_name: jmethodID,
    /// Class.getDeclaredFields(): links a class (JVMTI lists the fields and methods of
    /// prepared classes only) without initialising it.
    declared_fields: jmethodID,
    /// The application's class loader (a global reference), the last place classes are looked
    /// for.
    pub system_loader: jobject,
}

// SAFETY: global references and method ids only, usable from any thread.
unsafe impl Send for Known {}
// SAFETY: as above; never changed after start-up.
unsafe impl Sync for Known {}

impl Known {
    pub fn resolve(jni: Jni) -> Option<Known> {
        let global = |name: &str| -> Option<jclass> {
            let local = jni.find_class(name).ok()?;
            let global = jni.new_global_ref(local);
            jni.delete_local_ref(local);
            Some(global)
        };
        let object = jni.find_class("java/lang/Object").ok()?;
        let object_to_string = jni
            .method_id(object, "toString", "()Ljava/lang/String;")
            .ok()?;
        jni.delete_local_ref(object);
        let class = global("java/lang/Class")?;
        let loader_class = jni.find_class("java/lang/ClassLoader").ok()?;
        let get_system = jni
            .static_method_id(
                loader_class,
                "getSystemClassLoader",
                "()Ljava/lang/ClassLoader;",
            )
            .ok()?;
        let system_loader = jni
            .call_static(loader_class, get_system, b'L', &[])
            .ok()?
            .reference();
        jni.delete_local_ref(loader_class);
        Some(Known {
            system_loader: jni.new_global_ref(system_loader),
            string: global("java/lang/String")?,
            string_builder: global("java/lang/StringBuilder")?,
            string_buffer: global("java/lang/StringBuffer")?,
            object_to_string,
            class_get_name: jni
                .method_id(class, "getName", "()Ljava/lang/String;")
                .ok()?,
            for_name: jni
                .static_method_id(
                    class,
                    "forName",
                    "(Ljava/lang/String;ZLjava/lang/ClassLoader;)Ljava/lang/Class;",
                )
                .ok()?,
            declared_fields: jni
                .method_id(class, "getDeclaredFields", "()[Ljava/lang/reflect/Field;")
                .ok()?,
            class,
        })
    }

    /// Loads a class by field descriptor through the first of `loaders` that finds it, without
    /// initialising it.
    fn load(&self, jni: Jni, descriptor: &str, loaders: &[jobject]) -> Result<jclass, String> {
        for &loader in loaders {
            if let Ok(class) = self.load_with(jni, descriptor, loader) {
                return Ok(class);
            }
        }
        Err(format!(
            "class {} can't be loaded (looked for through the value's class loader, the traced \
             class's and the application's; a class is found by its full name, package.Class)",
            source(descriptor)
        ))
    }

    fn load_with(&self, jni: Jni, descriptor: &str, loader: jobject) -> Result<jclass, String> {
        let name = match descriptor.strip_prefix('L') {
            Some(rest) => rest.trim_end_matches(';').replace('/', "."),
            None => descriptor.replace('/', "."),
        };
        let text = jni
            .new_string(&name)
            .map_err(|_| format!("can't name {name}"))?;
        let args = [jvalue { l: text }, jvalue { z: 0 }, jvalue { l: loader }];
        let loaded = jni.call_static(self.class, self.for_name, b'L', &args);
        jni.delete_local_ref(text);
        match loaded {
            Ok(class) if !class.reference().is_null() => {
                let class = class.reference();
                // forName(name, false, loader) loads without linking; the checks that follow
                // need the class prepared.
                if let Ok(fields) = jni.call(class, self.declared_fields, b'L', &[]) {
                    jni.delete_local_ref(fields.reference());
                }
                Ok(class)
            }
            _ => Err(format!("class {name} not found")),
        }
    }
}

/// A type as the chain knows it while checking: a field descriptor, and the class for
/// references.
struct Static {
    descriptor: String,
    class: jclass,
}

/// Java source form of a descriptor, for messages.
fn source(descriptor: &str) -> String {
    openprof_format::java_names::class_name_from_signature(descriptor)
}

/// Checks a chain against the parameter's declared type (`declared`, a field descriptor);
/// classes named by modifiers are loaded through the first of `loaders` that finds them. The
/// error says which modifier can't apply and why.
pub fn compile(
    jni: Jni,
    jvmti: Jvmti,
    known: &Known,
    declared: &str,
    loaders: &[jobject],
    modifiers: &[Modifier],
) -> Result<Chain, String> {
    let mut current = static_type(jni, known, declared, loaders)?;
    let mut steps = Vec::new();
    for modifier in modifiers {
        let reference = kind_of(&current.descriptor) == b'L';
        let needs_reference = || -> Result<(), String> {
            if reference {
                Ok(())
            } else {
                Err(format!(
                    "{modifier}: the value is a {}, not an object",
                    source(&current.descriptor)
                ))
            }
        };
        let (step, next) = match modifier {
            Modifier::Length | Modifier::ArrayElement(_) => {
                let Some(component) = current.descriptor.strip_prefix('[') else {
                    return Err(format!(
                        "{modifier}: needs an array, the value is a {}",
                        source(&current.descriptor)
                    ));
                };
                match modifier {
                    Modifier::ArrayElement(index) => (
                        Step::Element {
                            index: *index,
                            kind: kind_of(component),
                        },
                        component.to_string(),
                    ),
                    _ => (Step::Length, "I".to_string()),
                }
            }
            Modifier::Class => {
                needs_reference()?;
                (Step::ClassOf, "Ljava/lang/Class;".to_string())
            }
            Modifier::Id => {
                needs_reference()?;
                (Step::Id, "J".to_string())
            }
            Modifier::InstanceMethod { name, returns } => {
                needs_reference()?;
                let descriptor = find_method(jvmti, jni, current.class, name, |descriptor| {
                    descriptor.starts_with("()")
                        && returns
                            .as_ref()
                            .is_none_or(|r| r.matches_descriptor(&descriptor[2..]))
                })
                .ok_or_else(|| {
                    format!(
                        "{modifier}: {} has no method {name}() {}",
                        source(&current.descriptor),
                        returns
                            .as_ref()
                            .map(|r| format!("returning {r}"))
                            .unwrap_or_default()
                    )
                })?;
                let method = jni
                    .method_id(current.class, name, &descriptor)
                    .map_err(|_| format!("{modifier}: {name}{descriptor} can't be called"))?;
                let returns = descriptor[2..].to_string();
                (
                    Step::Instance {
                        method,
                        returns: kind_of(&returns),
                    },
                    returns,
                )
            }
            Modifier::StaticMethod {
                class,
                name,
                parameter,
                returns,
            } => {
                let owner = known
                    .load(jni, &class_descriptor(class)?, loaders)
                    .map_err(|problem| format!("{modifier}: {problem}"))?;
                let descriptor = find_static(jvmti, owner, name, |descriptor| {
                    let Some((parameters, result)) =
                        openprof_format::mpt::split_descriptor(descriptor)
                    else {
                        return false;
                    };
                    parameters.len() == 1
                        && parameter.matches_descriptor(parameters[0])
                        && returns
                            .as_ref()
                            .is_none_or(|r| r.matches_descriptor(result))
                })
                .ok_or_else(|| {
                    format!("{modifier}: {class} has no static method {name}({parameter})")
                })?;
                let (parameters, result) = openprof_format::mpt::split_descriptor(&descriptor)
                    .ok_or_else(|| format!("{modifier}: bad descriptor {descriptor}"))?;
                if kind_of(parameters[0]) != kind_of(&current.descriptor) {
                    return Err(format!(
                        "{modifier}: takes a {}, the value is a {}",
                        source(parameters[0]),
                        source(&current.descriptor)
                    ));
                }
                let result = result.to_string();
                let method = jni
                    .static_method_id(owner, name, &descriptor)
                    .map_err(|_| format!("{modifier}: {name}{descriptor} can't be called"))?;
                (
                    Step::Static {
                        class: jni.new_global_ref(owner),
                        method,
                        returns: kind_of(&result),
                    },
                    result,
                )
            }
            Modifier::Field { name, field_type } => {
                needs_reference()?;
                let descriptor = find_field(jvmti, jni, current.class, name, |descriptor| {
                    field_type
                        .as_ref()
                        .is_none_or(|t| t.matches_descriptor(descriptor))
                })
                .ok_or_else(|| {
                    format!(
                        "{modifier}: {} has no field {name}{}",
                        source(&current.descriptor),
                        field_type
                            .as_ref()
                            .map(|t| format!(" of type {t}"))
                            .unwrap_or_default()
                    )
                })?;
                let field = jni
                    .field_id(current.class, name, &descriptor)
                    .map_err(|_| format!("{modifier}: field {name} can't be read"))?;
                (
                    Step::Field {
                        field,
                        kind: kind_of(&descriptor),
                    },
                    descriptor,
                )
            }
            Modifier::Cast(class) => {
                needs_reference()?;
                let descriptor = class_descriptor(class)?;
                let target = known
                    .load(jni, &descriptor, loaders)
                    .map_err(|problem| format!("{modifier}: {problem}"))?;
                (
                    Step::Cast {
                        class: jni.new_global_ref(target),
                    },
                    descriptor,
                )
            }
        };
        steps.push(step);
        current = static_type(jni, known, &next, loaders)
            .map_err(|problem| format!("after {modifier}: {problem}"))?;
    }
    if kind_of(&current.descriptor) == b'L' && !traceable(jni, known, &current) {
        return Err(format!(
            "the value is a {}, which is not traced directly (primitives, String, \
             StringBuilder, StringBuffer and Class are): add modifiers, e.g. \
             instance_method:toString()",
            source(&current.descriptor)
        ));
    }
    Ok(Chain { steps })
}

/// Whether values of this static type may be recorded: one of the directly traced classes or
/// a supertype of one (Object, CharSequence: the value's class decides at run time).
fn traceable(jni: Jni, known: &Known, current: &Static) -> bool {
    !current.descriptor.starts_with('[')
        && [
            known.string,
            known.string_builder,
            known.string_buffer,
            known.class,
        ]
        .iter()
        .any(|&direct| jni.is_assignable_from(direct, current.class))
}

fn class_descriptor(class: &TypeName) -> Result<String, String> {
    if class.is_primitive() {
        return Err(format!("{class} is not a class"));
    }
    let mut descriptor = "[".repeat(usize::from(class.dimensions));
    descriptor.push('L');
    descriptor.push_str(&class.name.replace('.', "/"));
    descriptor.push(';');
    Ok(descriptor)
}

fn static_type(
    jni: Jni,
    known: &Known,
    descriptor: &str,
    loaders: &[jobject],
) -> Result<Static, String> {
    let class = if kind_of(descriptor) == b'L' {
        known.load(jni, descriptor, loaders)?
    } else {
        std::ptr::null_mut()
    };
    Ok(Static {
        descriptor: descriptor.to_string(),
        class,
    })
}

/// The descriptor of a method named `name` that `accept`s, looked for in the class, its
/// superclasses and all their interfaces (as virtual calls find it), then in Object (whose
/// methods every value has, an interface-typed one too).
fn find_method(
    jvmti: Jvmti,
    jni: Jni,
    class: jclass,
    name: &str,
    accept: impl Fn(&str) -> bool,
) -> Option<String> {
    let object = jni
        .find_class("java/lang/Object")
        .unwrap_or(std::ptr::null_mut());
    let mut pending = vec![class];
    let mut object_pending = true;
    while let Some(class) = pending.pop() {
        for method in jvmti.class_methods(class).unwrap_or_default() {
            let Ok((method_name, descriptor)) = jvmti.method_name(method) else {
                continue;
            };
            let is_static = access::has(jvmti.method_modifiers(method).unwrap_or(0), STATIC);
            if method_name == name && !is_static && accept(&descriptor) {
                return Some(descriptor);
            }
        }
        pending.extend(jvmti.implemented_interfaces(class).unwrap_or_default());
        let parent = jni.superclass(class);
        if !parent.is_null() {
            // Superclasses before interfaces: a class's own implementation wins.
            pending.push(parent);
        }
        if pending.is_empty() && object_pending && !object.is_null() {
            object_pending = false;
            pending.push(object);
        }
    }
    None
}

/// The descriptor of a static method of `class` itself named `name` that `accept`s.
fn find_static(
    jvmti: Jvmti,
    class: jclass,
    name: &str,
    accept: impl Fn(&str) -> bool,
) -> Option<String> {
    jvmti
        .class_methods(class)
        .unwrap_or_default()
        .into_iter()
        .filter(|&method| access::has(jvmti.method_modifiers(method).unwrap_or(0), STATIC))
        .filter_map(|method| jvmti.method_name(method).ok())
        .find(|(method_name, descriptor)| method_name == name && accept(descriptor))
        .map(|(_, descriptor)| descriptor)
}

/// The descriptor of an instance field named `name` of the class or a superclass.
fn find_field(
    jvmti: Jvmti,
    jni: Jni,
    class: jclass,
    name: &str,
    accept: impl Fn(&str) -> bool,
) -> Option<String> {
    let mut current = class;
    while !current.is_null() {
        for field in jvmti.class_fields(current).unwrap_or_default() {
            let Ok((field_name, descriptor)) = jvmti.field_name(current, field) else {
                continue;
            };
            let is_static = access::has(jvmti.field_modifiers(current, field).unwrap_or(0), STATIC);
            if field_name == name && !is_static && accept(&descriptor) {
                return Some(descriptor);
            }
        }
        current = jni.superclass(current);
    }
    None
}

/// Numbers objects for the `id` modifier: JVMTI tags in the tracing's own environment, so no
/// two live objects share a number and an object keeps its number for life.
pub trait ObjectIds {
    fn id_of(&self, object: jobject) -> i64;
}

impl Chain {
    /// Applies the chain to one call's value.
    pub fn apply(&self, jni: Jni, ids: &dyn ObjectIds, value: Typed) -> Result<Typed, Failure> {
        let mut value = value;
        for step in &self.steps {
            let object = value.reference();
            value = match step {
                Step::Length => {
                    if object.is_null() {
                        return Err(Failure::NullValue);
                    }
                    Typed {
                        kind: b'I',
                        value: jvalue {
                            i: jni.array_length(object),
                        },
                    }
                }
                Step::Element { index, kind } => {
                    if object.is_null() {
                        return Err(Failure::NullValue);
                    }
                    let length = jni.array_length(object);
                    let at = if *index < 0 { length + *index } else { *index };
                    if at < 0 || at >= length {
                        return Err(Failure::InvalidIndex);
                    }
                    jni.array_element(object, at, *kind)
                        .map_err(|_| Failure::InvalidIndex)?
                }
                Step::ClassOf => {
                    if object.is_null() {
                        return Err(Failure::NullValue);
                    }
                    Typed::object(jni.object_class(object))
                }
                Step::Instance { method, returns } => {
                    if object.is_null() {
                        return Err(Failure::NullInCall);
                    }
                    jni.call(object, *method, *returns, &[])
                        .map_err(|_| Failure::ExceptionInCall)?
                }
                Step::Static {
                    class,
                    method,
                    returns,
                } => jni
                    .call_static(*class, *method, *returns, &[value.value])
                    .map_err(|_| Failure::ExceptionInCall)?,
                Step::Field { field, kind } => {
                    if object.is_null() {
                        return Err(Failure::NullValue);
                    }
                    jni.field(object, *field, *kind)
                }
                Step::Cast { class } => {
                    if !object.is_null() && !jni.is_instance_of(object, *class) {
                        return Err(Failure::CastFailed);
                    }
                    value
                }
                Step::Id => {
                    if object.is_null() {
                        return Err(Failure::NullValue);
                    }
                    Typed {
                        kind: b'J',
                        value: jvalue {
                            j: ids.id_of(object),
                        },
                    }
                }
            };
        }
        Ok(value)
    }
}

/// How a value is recorded: its trace type and text. Classes are named with their loader's
/// index and class name (`loader_of`: `loader N: ClassName`).
pub fn render(
    jni: Jni,
    known: &Known,
    value: Typed,
    loader_of: &dyn Fn(jclass) -> String,
) -> (ValueType, String) {
    use crate::jni::Primitive;
    match value.primitive() {
        Some(Primitive::Boolean(v)) => (ValueType::Boolean, v.to_string()),
        Some(Primitive::Byte(v)) => (ValueType::Byte, v.to_string()),
        Some(Primitive::Char(v)) => (
            ValueType::Char,
            char::from_u32(u32::from(v))
                .unwrap_or(char::REPLACEMENT_CHARACTER)
                .to_string(),
        ),
        Some(Primitive::Short(v)) => (ValueType::Short, v.to_string()),
        Some(Primitive::Int(v)) => (ValueType::Int, v.to_string()),
        Some(Primitive::Long(v)) => (ValueType::Long, v.to_string()),
        Some(Primitive::Float(v)) => (ValueType::Float, v.to_string()),
        Some(Primitive::Double(v)) => (ValueType::Double, v.to_string()),
        None => {
            let object = value.reference();
            let failed = |failure: Failure| (ValueType::Error, failure.name().to_string());
            if object.is_null() {
                return failed(Failure::NullValue);
            }
            if jni.is_instance_of(object, known.string) {
                return match jni.string(object) {
                    Ok(contents) => (ValueType::String, contents),
                    Err(_) => failed(Failure::Unknown),
                };
            }
            if jni.is_instance_of(object, known.string_builder)
                || jni.is_instance_of(object, known.string_buffer)
            {
                return match jni.call(object, known.object_to_string, b'L', &[]) {
                    Ok(string) => {
                        let contents = jni.string(string.reference());
                        jni.delete_local_ref(string.reference());
                        contents
                            .map(|contents| (ValueType::String, contents))
                            .unwrap_or_else(|_| failed(Failure::Unknown))
                    }
                    Err(_) => failed(Failure::ExceptionInCall),
                };
            }
            if jni.is_instance_of(object, known.class) {
                return match jni.call(object, known.class_get_name, b'L', &[]) {
                    Ok(name) => {
                        let named = jni.string(name.reference());
                        jni.delete_local_ref(name.reference());
                        match named {
                            Ok(name) => {
                                (ValueType::Class, format!("{name} ({})", loader_of(object)))
                            }
                            Err(_) => failed(Failure::Unknown),
                        }
                    }
                    Err(_) => failed(Failure::ExceptionInCall),
                };
            }
            failed(Failure::Unknown)
        }
    }
}
