//! The class-file rewriter of method parameter tracing and call tracing: adds calls of a hook
//! class at the entry and at every exit (return or exception) of chosen methods, keeping every
//! offset the class file holds (branches, switches, exception table, stack maps, line and local
//! variable tables) true to the moved code.
//!
//! An instrumented method becomes, for parameter tracing,
//!
//! ```text
//!   begin(site, this | null); arg(i, parameter i)...; enter()
//!   ...the original code, each return preceded by exit(site)...
//!   handler for any throwable over the original code: exitThrown(site); athrow
//! ```
//!
//! and for call tracing the same with `enter(site)` (or `enterThis(site, this)`) at entry. A
//! constructor's code before its `super(...)` or `this(...)` call has a handler of its own,
//! whose frame types `this` as uninitializedThis, as the verifier requires.
//!
//! Only code changes and constants are added at the end of the pool, which is what JVMTI's
//! RetransformClasses allows.

pub mod access;
mod code;
mod constructor;
mod hook_class;
mod pool;
mod reader;

use thiserror::Error;

pub use code::{CALL_HOOK_METHODS, HOOK_METHODS};
pub use hook_class::{
    call_hook_class_file, delay_class_file, hook_class_file, park_hook_class_file, CALL_HOOK_CLASS,
    COVERAGE_BASE_FIELD, COVERAGE_COUNT, COVERAGE_FIELD, COVERAGE_UNSAFE_FIELD, DELAY_CLASS,
    DELAY_CLOCK, DELAY_EVERY_FIELD, DELAY_NANOS_FIELD, DELAY_SPIN, DELAY_SPUN, HOOK_CLASS,
    PARK_HOOK_CLASS, PARK_HOOK_METHOD, PARK_HOOK_NATIVE, UNSAFE_CLASS,
};

/// Which hooks instrumented methods call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HookKind {
    /// Method parameter tracing: `begin`, `arg`..., `enter`; `exit`, `exitThrown`.
    Parameters,
    /// Call tracing: `enter` or, with `receiver`, `enterThis` for instance methods other than
    /// constructors; `exit`, `exitThrown`; `initialized` in constructors.
    Calls { receiver: bool },
    /// No hook calls: only the coverage counters.
    Counters,
    /// A call of the delay class's `spin()` at entry or, with `blocks`, at the start of every
    /// basic block; nothing at the exits.
    Delay { blocks: bool },
}

/// What to instrument in one class.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// The hook class's internal name (`openprof/MptHook`).
    pub hook_class: String,
    pub hooks: HookKind,
    pub methods: Vec<MethodPlan>,
    /// Line coverage: the class's slot in the call hook's counters (`CallHook.blocks[slot]`, a
    /// `long[]` with a counter for each basic block of the planned methods, numbered method
    /// after method in the plan's order, each run counted by `CallHook.count`).
    pub coverage: Option<i32>,
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
    /// Calls to report (call hooks): (the call instruction's offset, the number the hooks
    /// `called` and `returned` get).
    pub call_sites: Vec<(u16, i32)>,
    /// Of those, the calls that leave the JVM (an HTTP request sent): the no-argument method's
    /// receiver is handed to `outgoing` too, to carry the call's context.
    pub outgoing: Vec<u16>,
    /// The method receives calls from another JVM: its first argument is handed to `incoming`
    /// at entry.
    pub incoming: bool,
}

/// A call instruction of a method (invokevirtual, invokespecial, invokestatic,
/// invokeinterface) and what it calls.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallSite {
    /// The calling method's name and descriptor.
    pub caller: (String, String),
    /// The instruction's offset in the caller's code.
    pub offset: u16,
    /// The called method's class (internal name), name and descriptor.
    pub class: String,
    pub name: String,
    pub descriptor: String,
}

/// The calls the class's methods make, in method and code order.
pub fn call_sites(class_file: &[u8]) -> Result<Vec<CallSite>, ClassFileError> {
    let class = reader::ClassFile::parse(class_file)?;
    let mut sites = Vec::new();
    for method in &class.methods {
        let Some(code) = method
            .attributes
            .iter()
            .find(|attribute| class.utf8(attribute.name) == Some("Code"))
        else {
            continue;
        };
        let text = |index: u16| class.utf8(index).unwrap_or_default().to_string();
        let caller = (text(method.name), text(method.descriptor));
        for (offset, target) in code::calls_in(&class, &class.bytes[code.start..code.end])? {
            let (class_name, name, descriptor) = target;
            sites.push(CallSite {
                caller: caller.clone(),
                offset,
                class: class_name,
                name,
                descriptor,
            });
        }
    }
    Ok(sites)
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
    let hooks = code::HookRefs::add(&mut pool, &plan.hook_class, plan.hooks, plan.coverage)?;
    let mut rewritten = Vec::with_capacity(plan.methods.len());
    let mut first_block = 0;
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
        let method_code =
            code::instrument_method(&class, method, method_plan, &hooks, &mut pool, first_block)?;
        first_block += method_code.block_lines.len() as u32;
        rewritten.push((method.index, method_code.code));
    }
    Ok(class.write(&pool, &rewritten))
}

/// What [`instrument_each`] made of a class.
#[derive(Debug)]
pub struct Instrumented {
    /// The rewritten class file; None when no method could be instrumented.
    pub class_file: Option<Vec<u8>>,
    /// For each method instrumented, (its site, the offset where the rewriter's handlers begin
    /// in its new code: a throwable caught from there on is only being reported and thrown on;
    /// 0 with counters only).
    pub handlers: Vec<(i32, u16)>,
    /// With coverage, for each method instrumented: (its site, its first block's number, each
    /// of its blocks' source lines, in order); the blocks of the class are numbered without
    /// gaps.
    pub blocks: Vec<(i32, u32, Vec<Vec<u32>>)>,
    /// The methods left as they were, with the reason.
    pub refused: Vec<(MethodPlan, ClassFileError)>,
}

/// The class file with as many of the plan's methods instrumented as can be: a method that
/// can't be (too large once instrumented, a constructor whose `super(...)` call can't be found)
/// is left as it was and named with the reason.
pub fn instrument_each(class_file: &[u8], plan: &Plan) -> Result<Instrumented, ClassFileError> {
    let class = reader::ClassFile::parse(class_file)?;
    let mut pool = pool::PoolAdditions::new(&class);
    let hooks = code::HookRefs::add(&mut pool, &plan.hook_class, plan.hooks, plan.coverage)?;
    let mut rewritten = Vec::with_capacity(plan.methods.len());
    let mut handlers = Vec::with_capacity(plan.methods.len());
    let mut blocks = Vec::new();
    let mut first_block = 0;
    let mut refused = Vec::new();
    for method_plan in &plan.methods {
        let found = class.methods.iter().find(|method| {
            class.utf8(method.name) == Some(method_plan.name.as_str())
                && class.utf8(method.descriptor) == Some(method_plan.descriptor.as_str())
        });
        let Some(method) = found else {
            refused.push((
                method_plan.clone(),
                ClassFileError::NoSuchMethod {
                    name: method_plan.name.clone(),
                    descriptor: method_plan.descriptor.clone(),
                },
            ));
            continue;
        };
        match code::instrument_method(&class, method, method_plan, &hooks, &mut pool, first_block) {
            Ok(method_code) => {
                rewritten.push((method.index, method_code.code));
                handlers.push((method_plan.site, method_code.handlers_from));
                if plan.coverage.is_some() {
                    let count = method_code.block_lines.len() as u32;
                    blocks.push((method_plan.site, first_block, method_code.block_lines));
                    first_block += count;
                }
            }
            Err(ClassFileError::PoolFull) => return Err(ClassFileError::PoolFull),
            Err(error) => refused.push((method_plan.clone(), error)),
        }
    }
    let class_file = (!rewritten.is_empty()).then(|| class.write(&pool, &rewritten));
    Ok(Instrumented {
        class_file,
        handlers,
        blocks,
        refused,
    })
}

/// A method a class file declares.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeclaredMethod {
    pub name: String,
    pub descriptor: String,
    pub access: u16,
    /// Whether it has a Code attribute (not abstract or native).
    pub has_code: bool,
}

/// The methods a class file declares, in its order.
pub fn declared_methods(class_file: &[u8]) -> Result<Vec<DeclaredMethod>, ClassFileError> {
    let class = reader::ClassFile::parse(class_file)?;
    class
        .methods
        .iter()
        .map(|method| {
            let text = |index: u16| {
                class.utf8(index).map(str::to_string).ok_or_else(|| {
                    ClassFileError::Malformed(format!("pool entry {index} is no name"))
                })
            };
            Ok(DeclaredMethod {
                name: text(method.name)?,
                descriptor: text(method.descriptor)?,
                access: method.access,
                has_code: method
                    .attributes
                    .iter()
                    .any(|attribute| class.utf8(attribute.name) == Some("Code")),
            })
        })
        .collect()
}
