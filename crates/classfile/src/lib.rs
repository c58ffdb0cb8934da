//! The class-file rewriter of method parameter tracing: adds calls of a hook class at the entry
//! and at every exit (return or exception) of chosen methods, keeping every offset the class
//! file holds (branches, switches, exception table, stack maps, line and local variable
//! tables) true to the moved code.
//!
//! An instrumented method becomes
//!
//! ```text
//!   begin(site, this | null); arg(i, parameter i)...; enter()
//!   ...the original code, each return preceded by exit(site)...
//!   handler for any throwable over the original code: exitThrown(site); athrow
//! ```
//!
//! Only code changes and constants are added at the end of the pool, which is what JVMTI's
//! RetransformClasses allows.

pub mod access;
mod code;
mod hook_class;
mod pool;
mod reader;

use thiserror::Error;

pub use code::HOOK_METHODS;
pub use hook_class::{
    hook_class_file, park_hook_class_file, HOOK_CLASS, PARK_HOOK_CLASS, PARK_HOOK_METHOD,
    PARK_HOOK_NATIVE,
};

/// What to instrument in one class.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// The hook class's internal name (`openprof/MptHook`).
    pub hook_class: String,
    pub methods: Vec<MethodPlan>,
}

/// One method to instrument.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MethodPlan {
    pub name: String,
    pub descriptor: String,
    /// The number the hook calls carry for this method.
    pub site: i32,
    /// The parameters passed to the hook's `arg`: 0 is `this`, 1..n the declared ones.
    pub parameters: Vec<u16>,
}

#[derive(Error, Debug, PartialEq, Eq)]
pub enum ClassFileError {
    #[error("the class file is cut short at byte {0}")]
    Truncated(usize),
    #[error("not a class file (magic {0:#010x})")]
    BadMagic(u32),
    #[error("constant pool entry {index} has an unknown tag {tag}")]
    BadConstant { index: usize, tag: u8 },
    #[error("method {name}{descriptor} is not in the class")]
    NoSuchMethod { name: String, descriptor: String },
    #[error("method {name}{descriptor} has no code (abstract or native)")]
    NoCode { name: String, descriptor: String },
    #[error("{method}: {reason}")]
    Code { method: String, reason: String },
    #[error("malformed class file: {0}")]
    Malformed(String),
    #[error("the constant pool would exceed 65535 entries")]
    PoolFull,
}

/// The class file with the plan's methods instrumented.
pub fn instrument(class_file: &[u8], plan: &Plan) -> Result<Vec<u8>, ClassFileError> {
    let class = reader::ClassFile::parse(class_file)?;
    let mut pool = pool::PoolAdditions::new(&class);
    let hooks = code::HookRefs::add(&mut pool, &plan.hook_class)?;
    let mut rewritten = Vec::with_capacity(plan.methods.len());
    for method_plan in &plan.methods {
        let method = class
            .methods
            .iter()
            .find(|method| {
                class.utf8(method.name) == Some(method_plan.name.as_str())
                    && class.utf8(method.descriptor) == Some(method_plan.descriptor.as_str())
            })
            .ok_or_else(|| ClassFileError::NoSuchMethod {
                name: method_plan.name.clone(),
                descriptor: method_plan.descriptor.clone(),
            })?;
        let code = code::instrument_method(&class, method, method_plan, &hooks, &mut pool)?;
        rewritten.push((method.index, code));
    }
    Ok(class.write(&pool, &rewritten))
}
