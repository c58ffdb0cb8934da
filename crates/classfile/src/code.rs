//! One method's Code attribute rewritten: the hook calls inserted, every offset moved with the
//! code (branches, switches, exception table, StackMapTable, LineNumberTable,
//! LocalVariable(Type)Table).

use std::collections::HashMap;

use crate::pool::PoolAdditions;
use crate::reader::{read_attributes, Bytes, ClassFile, Method};
use crate::{ClassFileError, HookKind, MethodPlan};

/// The hook class's methods, (name, descriptor), as instrumented code calls them. The hook's
/// class file (in the agent) declares exactly these, in this order.
pub const HOOK_METHODS: &[(&str, &str)] = &[
    ("begin", "(ILjava/lang/Object;)V"),
    ("arg", "(IZ)V"),
    ("arg", "(IB)V"),
    ("arg", "(IC)V"),
    ("arg", "(IS)V"),
    ("arg", "(II)V"),
    ("arg", "(IJ)V"),
    ("arg", "(IF)V"),
    ("arg", "(ID)V"),
    ("arg", "(ILjava/lang/Object;)V"),
    ("enter", "()V"),
    ("exit", "(I)V"),
    ("exitThrown", "(I)V"),
];

/// The call hook class's methods, (name, descriptor), as instrumented code calls them (call
/// tracing: `enter(site)` or `enterThis(site, this)` at entry, `exit(site)` before each
/// return, `exitThrown(site)` when a throwable leaves the method, in a constructor
/// `initialized(site)` just after its `super(...)` or `this(...)` call returned; around a call
/// the plan names, `called(n)` and `returned(n)`, and `caught(site)` at the start of the
/// method's own handlers; `outgoing(receiver, n)` after `called(n)` for a call the plan marks
/// as leaving the JVM, and `incoming(argument 1, site)` at the entry of a method the plan marks
/// as receiving a call from another).
pub const CALL_HOOK_METHODS: &[(&str, &str)] = &[
    ("enter", "(I)V"),
    ("enterThis", "(ILjava/lang/Object;)V"),
    ("exit", "(I)V"),
    ("exitThrown", "(I)V"),
    ("initialized", "(I)V"),
    ("called", "(I)V"),
    ("returned", "(I)V"),
    ("caught", "(I)V"),
    ("outgoing", "(Ljava/lang/Object;I)V"),
    ("incoming", "(Ljava/lang/Object;I)V"),
];

/// The descriptor of the hook's `arg` for a parameter of the given field descriptor.
fn hook_arg_descriptor(field_descriptor: &str) -> &'static str {
    match field_descriptor.as_bytes().first() {
        Some(b'Z') => "(IZ)V",
        Some(b'B') => "(IB)V",
        Some(b'C') => "(IC)V",
        Some(b'S') => "(IS)V",
        Some(b'I') => "(II)V",
        Some(b'J') => "(IJ)V",
        Some(b'F') => "(IF)V",
        Some(b'D') => "(ID)V",
        _ => "(ILjava/lang/Object;)V",
    }
}

/// Pool indexes of what the inserted code refers to.
pub(crate) struct HookRefs {
    kind: HookKind,
    begin: u16,
    /// `arg` by descriptor.
    args: Vec<(&'static str, u16)>,
    enter: u16,
    enter_this: u16,
    initialized: u16,
    called: u16,
    returned: u16,
    caught: u16,
    outgoing: u16,
    incoming: u16,
    exit: u16,
    exit_thrown: u16,
    throwable: u16,
    stack_map_table: u16,
    /// The delay class's `spin()`, with [`HookKind::Delay`].
    spin: u16,
    /// Coverage: the class's slot, the counters' field and the hook's `count`.
    coverage: Option<(i32, u16, u16)>,
}

impl HookRefs {
    pub fn add(
        pool: &mut PoolAdditions,
        hook_class: &str,
        kind: HookKind,
        coverage: Option<i32>,
    ) -> Result<HookRefs, ClassFileError> {
        let class = pool.class(hook_class)?;
        let coverage = match coverage {
            Some(slot) => {
                let (name, descriptor) = crate::hook_class::COVERAGE_FIELD;
                let field = pool.field_ref(class, name, descriptor)?;
                let (count, count_descriptor) = crate::hook_class::COVERAGE_COUNT;
                let increment = pool.method_ref(class, count, count_descriptor)?;
                Some((slot, field, increment))
            }
            None => None,
        };
        let mut refs = HookRefs {
            coverage,
            kind,
            begin: 0,
            args: Vec::new(),
            enter: 0,
            enter_this: 0,
            initialized: 0,
            called: 0,
            returned: 0,
            caught: 0,
            outgoing: 0,
            incoming: 0,
            exit: 0,
            exit_thrown: 0,
            throwable: pool.class("java/lang/Throwable")?,
            stack_map_table: pool.utf8("StackMapTable")?,
            spin: 0,
        };
        if let HookKind::Delay { .. } = kind {
            let (name, descriptor) = crate::hook_class::DELAY_SPIN;
            refs.spin = pool.method_ref(class, name, descriptor)?;
        }
        let methods = match kind {
            HookKind::Parameters => HOOK_METHODS,
            HookKind::Counters | HookKind::Delay { .. } => &[],
            HookKind::Calls { .. } => CALL_HOOK_METHODS,
        };
        for &(name, descriptor) in methods {
            let index = pool.method_ref(class, name, descriptor)?;
            match name {
                "begin" => refs.begin = index,
                "arg" => refs.args.push((descriptor, index)),
                "enter" => refs.enter = index,
                "enterThis" => refs.enter_this = index,
                "initialized" => refs.initialized = index,
                "called" => refs.called = index,
                "returned" => refs.returned = index,
                "caught" => refs.caught = index,
                "outgoing" => refs.outgoing = index,
                "incoming" => refs.incoming = index,
                "exit" => refs.exit = index,
                _ => refs.exit_thrown = index,
            }
        }
        Ok(refs)
    }

    fn arg(&self, field_descriptor: &str) -> u16 {
        let wanted = hook_arg_descriptor(field_descriptor);
        self.args
            .iter()
            .find(|(descriptor, _)| *descriptor == wanted)
            .map(|(_, index)| *index)
            .unwrap_or_default()
    }
}

const INVOKESTATIC: u8 = 0xb8;
const ATHROW: u8 = 0xbf;
const WIDE: u8 = 0xc4;
const TABLESWITCH: u8 = 0xaa;
const LOOKUPSWITCH: u8 = 0xab;

/// What instrumenting a method made.
pub(crate) struct Rewritten {
    /// The new contents of its Code attribute.
    pub code: Vec<u8>,
    /// Where the handlers it adds begin (every offset from there on is the rewriter's: the
    /// handlers that report a throwable and throw it on); 0 when it adds none.
    pub handlers_from: u16,
    /// With coverage, each block's source lines (those of its instructions, ascending; none
    /// where the method has no line numbers), in code order: block `first_block + i` is the
    /// i-th.
    pub block_lines: Vec<Vec<u32>>,
}

/// The method's code rewritten; with coverage its blocks are numbered from `first_block`.
pub(crate) fn instrument_method(
    class: &ClassFile,
    method: &Method,
    plan: &MethodPlan,
    hooks: &HookRefs,
    pool: &mut PoolAdditions,
    first_block: u32,
) -> Result<Rewritten, ClassFileError> {
    let label = format!("{}{}", plan.name, plan.descriptor);
    let fault = |reason: String| ClassFileError::Code {
        method: label.clone(),
        reason,
    };
    let code_attribute = method
        .attributes
        .iter()
        .find(|attribute| class.utf8(attribute.name) == Some("Code"))
        .ok_or_else(|| ClassFileError::NoCode {
            name: plan.name.clone(),
            descriptor: plan.descriptor.clone(),
        })?;
    let bytes = class.bytes;
    let mut reader = Bytes::new(&bytes[..code_attribute.end], code_attribute.start);
    let max_stack = reader.u2()?;
    let max_locals = reader.u2()?;
    let code_length = reader.u4()? as usize;
    let code = reader.take(code_length)?;
    let handler_count = reader.u2()?;
    let mut handlers = Vec::with_capacity(usize::from(handler_count));
    for _ in 0..handler_count {
        handlers.push([reader.u2()?, reader.u2()?, reader.u2()?, reader.u2()?]);
    }
    let attributes = read_attributes(&mut reader)?;

    let is_static = method.access & crate::access::STATIC != 0;
    let is_constructor = plan.name == "<init>";
    // Entry and exit hooks (not with counters only).
    let calls = matches!(hooks.kind, HookKind::Parameters | HookKind::Calls { .. });
    let spin = || {
        let mut code = vec![INVOKESTATIC];
        code.extend(hooks.spin.to_be_bytes());
        code
    };
    let prefix = match hooks.kind {
        HookKind::Counters | HookKind::Delay { blocks: true } => Vec::new(),
        HookKind::Delay { blocks: false } => spin(),
        HookKind::Parameters => entry_code(plan, is_static, hooks, pool).map_err(&fault)?,
        HookKind::Calls { receiver } => {
            let mut code = push_int(plan.site, pool)?;
            // `this` is no value to pass before a constructor has initialized it.
            if receiver && !is_static && !is_constructor {
                code.push(0x2a); // aload_0
                code.push(INVOKESTATIC);
                code.extend(hooks.enter_this.to_be_bytes());
            } else {
                code.push(INVOKESTATIC);
                code.extend(hooks.enter.to_be_bytes());
            }
            // The method's first argument brings a call's context from another JVM.
            if plan.incoming {
                code.push(if is_static { 0x2a } else { 0x2b }); // aload_0 | aload_1
                code.extend(push_int(plan.site, pool)?);
                code.push(INVOKESTATIC);
                code.extend(hooks.incoming.to_be_bytes());
            }
            code
        }
    };
    let exit_code = if calls {
        let mut exit_code = push_int(plan.site, pool)?;
        exit_code.extend([INVOKESTATIC]);
        exit_code.extend(hooks.exit.to_be_bytes());
        exit_code
    } else {
        Vec::new()
    };

    let instructions = decode(code).map_err(&fault)?;
    // Coverage: a counter at the start of each basic block, numbered in code order.
    let mut counters: HashMap<usize, Vec<u8>> = HashMap::new();
    let mut block_lines = Vec::new();
    if let Some((slot, field, increment)) = hooks.coverage {
        let lines = attributes
            .iter()
            .find(|attribute| class.utf8(attribute.name) == Some("LineNumberTable"))
            .map(|attribute| line_starts(&bytes[attribute.start..attribute.end]))
            .transpose()?
            .unwrap_or_default();
        let leaders = block_leaders(code, &instructions, &handlers).map_err(&fault)?;
        // The line of the instruction at an offset: the table's last entry starting at or
        // before it.
        let line_at = |offset: usize| {
            lines
                .iter()
                .take_while(|(start, _)| usize::from(*start) <= offset)
                .last()
                .map(|(_, line)| u32::from(*line))
        };
        for (index, &leader) in leaders.iter().enumerate() {
            let block = first_block + block_lines.len() as u32;
            let end = leaders.get(index + 1).copied().unwrap_or(code_length);
            let mut block_source: Vec<u32> = instructions
                .iter()
                .filter(|(at, _)| (leader..end).contains(at))
                .filter_map(|(at, _)| line_at(*at))
                .collect();
            block_source.sort_unstable();
            block_source.dedup();
            block_lines.push(block_source);
            // CallHook.count(CallHook.blocks[slot], block).
            let mut counter = vec![0xb2];
            counter.extend(field.to_be_bytes());
            counter.extend(push_int(slot, pool)?);
            counter.push(0x32); // aaload
            counter.extend(push_int(block as i32, pool)?);
            counter.push(0xb8); // invokestatic
            counter.extend(increment.to_be_bytes());
            counters.insert(leader, counter);
        }
    }
    // A delay at the start of each basic block.
    if hooks.kind == (HookKind::Delay { blocks: true }) {
        for leader in block_leaders(code, &instructions, &handlers).map_err(&fault)? {
            counters.entry(leader).or_default().extend(spin());
        }
    }
    // In a constructor, where `this` becomes initialized (see `constructor`).
    let this_ready = if is_constructor && calls {
        let stack_map = attributes
            .iter()
            .find(|attribute| class.utf8(attribute.name) == Some("StackMapTable"))
            .map(|attribute| &bytes[attribute.start..attribute.end]);
        Some(
            crate::constructor::this_initialized_at(class, code, &instructions, stack_map)
                .map_err(&fault)?,
        )
    } else {
        None
    };
    // Code inserted before an instruction, by its old offset: `arriving` runs only when control
    // falls through to it from the instruction before (a branch to it goes past), `reaching`
    // however control gets there.
    let mut arriving: HashMap<usize, Vec<u8>> = HashMap::new();
    let mut reaching: HashMap<usize, Vec<u8>> = counters;
    let hook_call = |pool: &mut PoolAdditions, number: i32, hook: u16| {
        let mut code = push_int(number, pool)?;
        code.push(INVOKESTATIC);
        code.extend(hook.to_be_bytes());
        Ok::<_, ClassFileError>(code)
    };
    // A call this method makes that the plan names: `called(n)` before it, `returned(n)` on
    // the way on from it; a handler of the method's own catches what a callee threw:
    // `caught(site)` at its start says so.
    if !plan.call_sites.is_empty() {
        for &(offset, number) in &plan.call_sites {
            let offset = usize::from(offset);
            let Some(&(_, length)) = instructions.iter().find(|(at, _)| *at == offset) else {
                return Err(fault(format!("no instruction at offset {offset}")));
            };
            if !matches!(code[offset], 0xb6..=0xb9) {
                return Err(fault(format!(
                    "the instruction at offset {offset} calls no method"
                )));
            }
            let mut before = hook_call(pool, number, hooks.called)?;
            // The call's receiver (a no-argument method's, on top of the stack) carries the
            // call's context to the other JVM.
            if plan.outgoing.contains(&(offset as u16)) {
                before.push(0x59); // dup
                before.extend(hook_call(pool, number, hooks.outgoing)?);
            }
            reaching.entry(offset).or_default().extend(before);
            if offset + length < code_length {
                let after = hook_call(pool, number, hooks.returned)?;
                arriving.entry(offset + length).or_default().extend(after);
            }
        }
        for [_, _, handler, _] in &handlers {
            let caught = hook_call(pool, plan.site, hooks.caught)?;
            reaching
                .entry(usize::from(*handler))
                .or_default()
                .extend(caught);
        }
    }
    // In a constructor traced by call hooks, `initialized(site)` runs just after the call that
    // initialized `this`: on the way from that call only.
    if let (Some(ready), HookKind::Calls { .. }) = (this_ready, hooks.kind) {
        let initialized = hook_call(pool, plan.site, hooks.initialized)?;
        arriving.entry(ready).or_default().extend(initialized);
    }
    // A return's exit call, which branches to the return pass through too.
    for &(old, _) in &instructions {
        if is_return(code[old]) && !exit_code.is_empty() {
            reaching
                .entry(old)
                .or_default()
                .extend_from_slice(&exit_code);
        }
    }
    // Old offset → new offset of what runs when control reaches it (after the code arriving
    // there by falling through, at the code run however it gets there).
    let mut moved = vec![u32::MAX; code_length + 1];
    // Old offset → new offset of the instruction itself (after what is inserted before it): where
    // a `new` that a stack map's Uninitialized type names now is.
    let mut placed = vec![u32::MAX; code_length + 1];
    let mut at = prefix.len();
    // Where the code after the constructor's `super(...)` or `this(...)` call begins.
    let mut initialized_at = 0;
    for &(old, length) in &instructions {
        if Some(old) == this_ready {
            initialized_at = at;
        }
        at += arriving.get(&old).map_or(0, Vec::len);
        moved[old] = at as u32;
        at += reaching.get(&old).map_or(0, Vec::len);
        placed[old] = at as u32;
        let opcode = code[old];
        at += match opcode {
            TABLESWITCH | LOOKUPSWITCH => length - padding(old) + padding(at),
            _ => length,
        };
    }
    let handler_start = at;
    moved[code_length] = handler_start as u32;
    let map = |old: i64| -> Result<u32, String> {
        usize::try_from(old)
            .ok()
            .and_then(|old| moved.get(old).copied())
            .filter(|&new| new != u32::MAX)
            .ok_or_else(|| format!("offset {old} is not the start of an instruction"))
    };

    let mut out = prefix;
    for &(old, length) in &instructions {
        let opcode = code[old];
        if let Some(inserted) = arriving.get(&old) {
            out.extend_from_slice(inserted);
        }
        if let Some(inserted) = reaching.get(&old) {
            out.extend_from_slice(inserted);
        }
        let here = out.len() as i64;
        let old_i = old as i64;
        let relative = |target: i64| -> Result<i64, String> { Ok(i64::from(map(target)?) - here) };
        match opcode {
            0x99..=0xa8 | 0xc6 | 0xc7 => {
                let offset = i16::from_be_bytes([code[old + 1], code[old + 2]]);
                let new = relative(old_i + i64::from(offset)).map_err(&fault)?;
                let new = i16::try_from(new).map_err(|_| {
                    fault(format!(
                        "a branch at {old} would jump {new} bytes, beyond a 16-bit offset"
                    ))
                })?;
                out.push(opcode);
                out.extend(new.to_be_bytes());
            }
            0xc8 | 0xc9 => {
                let offset = i32::from_be_bytes([
                    code[old + 1],
                    code[old + 2],
                    code[old + 3],
                    code[old + 4],
                ]);
                let new = relative(old_i + i64::from(offset)).map_err(&fault)?;
                out.push(opcode);
                out.extend((new as i32).to_be_bytes());
            }
            TABLESWITCH | LOOKUPSWITCH => {
                let mut operands = Bytes::new(&code[..old + length], old + 1 + padding(old));
                out.push(opcode);
                out.extend(std::iter::repeat_n(0, padding(here as usize)));
                let default = operands.u4()? as i32;
                let target = |offset: i32| -> Result<[u8; 4], ClassFileError> {
                    let new = relative(old_i + i64::from(offset)).map_err(&fault)?;
                    Ok((new as i32).to_be_bytes())
                };
                out.extend(target(default)?);
                if opcode == TABLESWITCH {
                    let low = operands.u4()? as i32;
                    let high = operands.u4()? as i32;
                    out.extend(low.to_be_bytes());
                    out.extend(high.to_be_bytes());
                    for _ in 0..(i64::from(high) - i64::from(low) + 1) {
                        let offset = operands.u4()? as i32;
                        out.extend(target(offset)?);
                    }
                } else {
                    let pairs = operands.u4()?;
                    out.extend(pairs.to_be_bytes());
                    for _ in 0..pairs {
                        out.extend(operands.u4()?.to_be_bytes());
                        let offset = operands.u4()? as i32;
                        out.extend(target(offset)?);
                    }
                }
            }
            _ => out.extend_from_slice(&code[old..old + length]),
        }
    }
    debug_assert_eq!(out.len(), handler_start);
    // Any throwable leaving the original code: exitThrown(site), then throw it on. A
    // constructor has a second copy for the code before `this` is initialized, whose frame
    // types `this` as uninitializedThis.
    let mut handler_code = push_int(plan.site, pool)?;
    handler_code.push(INVOKESTATIC);
    handler_code.extend(hooks.exit_thrown.to_be_bytes());
    handler_code.push(ATHROW);
    if calls {
        out.extend_from_slice(&handler_code);
    }
    let early_handler_start = this_ready.map(|_| {
        let start = out.len();
        out.extend_from_slice(&handler_code);
        start
    });
    if out.len() > 65535 {
        return Err(fault(format!(
            "the instrumented code would be {} bytes, more than a method may hold (65535)",
            out.len()
        )));
    }

    let moved_u16 = |old: u16| -> Result<u16, ClassFileError> {
        let new = map(i64::from(old)).map_err(&fault)?;
        u16::try_from(new).map_err(|_| fault(format!("offset {new} beyond 65535")))
    };
    let placed_u16 = |old: u16| -> Result<u16, ClassFileError> {
        let new = placed
            .get(usize::from(old))
            .copied()
            .filter(|&new| new != u32::MAX)
            .ok_or_else(|| fault(format!("offset {old} is not the start of an instruction")))?;
        u16::try_from(new).map_err(|_| fault(format!("offset {new} beyond 65535")))
    };
    let mut result = Vec::with_capacity(out.len() + 64);
    // Before a return, the stack holds what it held plus the site; at entry, an int and a
    // long or double at most; a block's counter needs three words over what the block starts
    // with.
    let extra = if hooks.coverage.is_none() { 1 } else { 3 };
    result.extend(max_stack.saturating_add(extra).max(3).to_be_bytes());
    result.extend(max_locals.to_be_bytes());
    result.extend((out.len() as u32).to_be_bytes());
    result.extend_from_slice(&out);
    // Ours come last: the method's own handlers see their exceptions first. (start, end,
    // handler, whether `this` is uninitialized there.)
    let original_start = moved_u16(0)?;
    let handler_start = handler_start as u16;
    let mut ours: Vec<(u16, u16, u16, bool)> = Vec::new();
    match (this_ready, early_handler_start) {
        (Some(ready), Some(early)) => {
            // The `super(...)` or `this(...)` call itself (3 bytes) is covered by neither: the
            // verifier lets no handler catch what it throws (see `constructor`).
            let call = moved_u16(ready as u16 - 3)?;
            let ready = u16::try_from(initialized_at)
                .map_err(|_| fault(format!("offset {initialized_at} beyond 65535")))?;
            let early =
                u16::try_from(early).map_err(|_| fault(format!("offset {early} beyond 65535")))?;
            ours.push((ready, handler_start, handler_start, false));
            if original_start < call {
                ours.push((original_start, call, early, true));
            }
        }
        _ if calls => ours.push((original_start, handler_start, handler_start, false)),
        _ => {}
    }
    result.extend((handlers.len() as u16 + ours.len() as u16).to_be_bytes());
    for [start, end, handler, catch_type] in handlers {
        result.extend(moved_u16(start)?.to_be_bytes());
        result.extend(moved_u16(end)?.to_be_bytes());
        result.extend(moved_u16(handler)?.to_be_bytes());
        result.extend(catch_type.to_be_bytes());
    }
    for &(start, end, handler, _) in &ours {
        result.extend(start.to_be_bytes());
        result.extend(end.to_be_bytes());
        result.extend(handler.to_be_bytes());
        result.extend(0_u16.to_be_bytes());
    }
    // Our handlers' frames, in code order.
    let mut handler_frames: Vec<(u16, bool)> = ours
        .iter()
        .map(|&(_, _, handler, uninitialized)| (handler, uninitialized))
        .collect();
    handler_frames.sort();

    let mut kept = Vec::new();
    let mut has_stack_map = false;
    for attribute in &attributes {
        let contents = &bytes[attribute.start..attribute.end];
        let rewritten = match class.utf8(attribute.name) {
            Some("LineNumberTable") => line_numbers(contents, &moved_u16)?,
            Some("LocalVariableTable" | "LocalVariableTypeTable") => {
                local_variables(contents, &moved_u16)?
            }
            Some("StackMapTable") => {
                has_stack_map = true;
                stack_map(
                    contents,
                    &moved_u16,
                    &placed_u16,
                    &handler_frames,
                    hooks.throwable,
                )?
            }
            // Other code attributes (type annotations) hold offsets we don't move: dropped,
            // which the JVM allows (they are not needed to run the code).
            _ => continue,
        };
        kept.push((attribute.name, rewritten));
    }
    // Since Java 6 the verifier needs a frame at every branch target: our handlers are.
    if !has_stack_map && class.major >= 50 && !handler_frames.is_empty() {
        let mut table = (handler_frames.len() as u16).to_be_bytes().to_vec();
        append_handler_frames(&mut table, None, &handler_frames, hooks.throwable)?;
        kept.push((hooks.stack_map_table, table));
    }
    result.extend((kept.len() as u16).to_be_bytes());
    for (name, contents) in kept {
        result.extend(name.to_be_bytes());
        result.extend((contents.len() as u32).to_be_bytes());
        result.extend(contents);
    }
    Ok(Rewritten {
        code: result,
        handlers_from: if calls { handler_start } else { 0 },
        block_lines,
    })
}

/// What a call instruction calls: the method's class (internal name), name and descriptor.
pub(crate) type Callee = (String, String, String);

/// The method calls in a Code attribute's contents: (offset, what it calls).
pub(crate) fn calls_in(
    class: &ClassFile,
    contents: &[u8],
) -> Result<Vec<(u16, Callee)>, ClassFileError> {
    let mut reader = Bytes::new(contents, 0);
    reader.take(4)?; // max_stack, max_locals
    let length = reader.u4()? as usize;
    let code = reader.take(length)?;
    let instructions = decode(code).map_err(ClassFileError::Malformed)?;
    let mut calls = Vec::new();
    for (at, _) in instructions {
        if !matches!(code[at], 0xb6..=0xb9) {
            continue;
        }
        let index = u16::from_be_bytes([code[at + 1], code[at + 2]]);
        let (Some(owner), Some((name, descriptor))) =
            (class.member_class(index), class.member(index))
        else {
            continue;
        };
        let offset = u16::try_from(at)
            .map_err(|_| ClassFileError::Malformed("code beyond 65535 bytes".into()))?;
        calls.push((
            offset,
            (owner.to_string(), name.to_string(), descriptor.to_string()),
        ));
    }
    Ok(calls)
}

/// The LineNumberTable's (start offset, line) pairs, by start offset.
fn line_starts(contents: &[u8]) -> Result<Vec<(u16, u16)>, ClassFileError> {
    let mut reader = Bytes::new(contents, 0);
    let count = reader.u2()?;
    let mut lines = Vec::with_capacity(usize::from(count));
    for _ in 0..count {
        lines.push((reader.u2()?, reader.u2()?));
    }
    lines.sort_unstable();
    Ok(lines)
}

/// Where the method's basic blocks start, in code order: its first instruction, every branch
/// or switch target and exception handler, and every instruction after a branch, switch,
/// return or throw.
fn block_leaders(
    code: &[u8],
    instructions: &[(usize, usize)],
    handlers: &[[u16; 4]],
) -> Result<Vec<usize>, String> {
    let mut leaders = std::collections::BTreeSet::from([0]);
    let target = |at: usize, offset: i64| -> Result<usize, String> {
        usize::try_from(at as i64 + offset)
            .ok()
            .filter(|&target| target < code.len())
            .ok_or_else(|| format!("a branch at {at} leaves the code"))
    };
    for &(at, length) in instructions {
        let opcode = code[at];
        let ends_block = match opcode {
            0x99..=0xa8 | 0xc6 | 0xc7 => {
                let offset = i16::from_be_bytes([code[at + 1], code[at + 2]]);
                leaders.insert(target(at, i64::from(offset))?);
                true
            }
            0xc8 | 0xc9 => {
                let offset =
                    i32::from_be_bytes([code[at + 1], code[at + 2], code[at + 3], code[at + 4]]);
                leaders.insert(target(at, i64::from(offset))?);
                true
            }
            TABLESWITCH | LOOKUPSWITCH => {
                let mut operands = Bytes::new(&code[..at + length], at + 1 + padding(at));
                let word = |operands: &mut Bytes| -> Result<i64, String> {
                    operands
                        .u4()
                        .map(|word| i64::from(word as i32))
                        .map_err(|error| error.to_string())
                };
                leaders.insert(target(at, word(&mut operands)?)?);
                let count = if opcode == TABLESWITCH {
                    let low = word(&mut operands)?;
                    let high = word(&mut operands)?;
                    high - low + 1
                } else {
                    word(&mut operands)?
                };
                for _ in 0..count {
                    if opcode == LOOKUPSWITCH {
                        word(&mut operands)?;
                    }
                    leaders.insert(target(at, word(&mut operands)?)?);
                }
                true
            }
            0xa9 | ATHROW => true,
            _ => is_return(opcode),
        };
        if ends_block && at + length < code.len() {
            leaders.insert(at + length);
        }
    }
    for [_, _, handler, _] in handlers {
        leaders.insert(usize::from(*handler));
    }
    Ok(leaders.into_iter().collect())
}

/// `begin(site, this|null)`, `arg(i, parameter i)` for each planned parameter, `enter()`.
fn entry_code(
    plan: &MethodPlan,
    is_static: bool,
    hooks: &HookRefs,
    pool: &mut PoolAdditions,
) -> Result<Vec<u8>, String> {
    let parameters = parameter_types(&plan.descriptor)
        .ok_or_else(|| format!("bad method descriptor {}", plan.descriptor))?;
    let mut code = push_int(plan.site, pool).map_err(|error| error.to_string())?;
    code.push(if is_static { 0x01 } else { 0x2a }); // aconst_null | aload_0
    code.push(INVOKESTATIC);
    code.extend(hooks.begin.to_be_bytes());
    for &parameter in &plan.parameters {
        let (slot, field_descriptor) = if parameter == 0 {
            if is_static {
                return Err("parameter 0 (this) of a static method".into());
            }
            (0, "Ljava/lang/Object;")
        } else {
            let index = usize::from(parameter) - 1;
            let field_descriptor = parameters.get(index).copied().ok_or_else(|| {
                format!(
                    "parameter {parameter} of a method with {} parameters",
                    parameters.len()
                )
            })?;
            let slot = usize::from(!is_static)
                + parameters[..index]
                    .iter()
                    .map(|descriptor| slot_width(descriptor))
                    .sum::<usize>();
            (slot, field_descriptor)
        };
        code.extend(push_int(i32::from(parameter), pool).map_err(|error| error.to_string())?);
        let load = match field_descriptor.as_bytes()[0] {
            b'Z' | b'B' | b'C' | b'S' | b'I' => 0x15,
            b'J' => 0x16,
            b'F' => 0x17,
            b'D' => 0x18,
            _ => 0x19,
        };
        if slot > 255 {
            code.extend([WIDE, load]);
            code.extend((slot as u16).to_be_bytes());
        } else {
            code.extend([load, slot as u8]);
        }
        code.push(INVOKESTATIC);
        code.extend(hooks.arg(field_descriptor).to_be_bytes());
    }
    code.push(INVOKESTATIC);
    code.extend(hooks.enter.to_be_bytes());
    Ok(code)
}

/// The field descriptors of a method descriptor's parameters.
pub(crate) fn parameter_types(descriptor: &str) -> Option<Vec<&str>> {
    let inner = descriptor.strip_prefix('(')?.split(')').next()?;
    let bytes = inner.as_bytes();
    let mut types = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let start = at;
        while bytes.get(at) == Some(&b'[') {
            at += 1;
        }
        match bytes.get(at)? {
            b'L' => at += inner[at..].find(';')? + 1,
            b'Z' | b'B' | b'C' | b'S' | b'I' | b'J' | b'F' | b'D' => at += 1,
            _ => return None,
        }
        types.push(&inner[start..at]);
    }
    Some(types)
}

pub(crate) fn slot_width(field_descriptor: &str) -> usize {
    if field_descriptor == "J" || field_descriptor == "D" {
        2
    } else {
        1
    }
}

fn push_int(value: i32, pool: &mut PoolAdditions) -> Result<Vec<u8>, ClassFileError> {
    Ok(match value {
        -1..=5 => vec![(0x03 + value) as u8],
        -128..=127 => vec![0x10, value as u8],
        -32768..=32767 => {
            let mut code = vec![0x11];
            code.extend((value as i16).to_be_bytes());
            code
        }
        _ => {
            let mut code = vec![0x13];
            code.extend(pool.integer(value)?.to_be_bytes());
            code
        }
    })
}

fn is_return(opcode: u8) -> bool {
    (0xac..=0xb1).contains(&opcode)
}

/// Zero bytes after a switch opcode at `offset`, so that its operands start at a multiple of 4.
fn padding(offset: usize) -> usize {
    (4 - (offset + 1) % 4) % 4
}

/// Each instruction's (offset, length).
fn decode(code: &[u8]) -> Result<Vec<(usize, usize)>, String> {
    let mut instructions = Vec::with_capacity(code.len() / 2);
    let mut at = 0;
    while at < code.len() {
        let length = instruction_length(code, at)
            .ok_or_else(|| format!("unknown or cut instruction at offset {at}"))?;
        if at + length > code.len() {
            return Err(format!("instruction at offset {at} runs past the code"));
        }
        instructions.push((at, length));
        at += length;
    }
    Ok(instructions)
}

fn instruction_length(code: &[u8], at: usize) -> Option<usize> {
    let word = |offset: usize| -> Option<i64> {
        let bytes = code.get(offset..offset + 4)?;
        Some(i64::from(i32::from_be_bytes(bytes.try_into().ok()?)))
    };
    Some(match code[at] {
        0x00..=0x0f | 0x1a..=0x35 | 0x3b..=0x83 | 0x85..=0x98 | 0xac..=0xb1 => 1,
        0xbe | 0xbf | 0xc2 | 0xc3 => 1,
        0x10 | 0x12 | 0x15..=0x19 | 0x36..=0x3a | 0xa9 | 0xbc => 2,
        0x11 | 0x13 | 0x14 | 0x84 | 0x99..=0xa8 | 0xb2..=0xb8 | 0xbb | 0xbd | 0xc0 | 0xc1 => 3,
        0xc6 | 0xc7 => 3,
        0xc5 => 4,
        0xb9 | 0xba | 0xc8 | 0xc9 => 5,
        WIDE => match code.get(at + 1)? {
            0x84 => 6,
            0x15..=0x19 | 0x36..=0x3a | 0xa9 => 4,
            _ => return None,
        },
        TABLESWITCH => {
            let operands = at + 1 + padding(at);
            let low = word(operands + 4)?;
            let high = word(operands + 8)?;
            if high < low {
                return None;
            }
            1 + padding(at) + 12 + 4 * usize::try_from(high - low + 1).ok()?
        }
        LOOKUPSWITCH => {
            let operands = at + 1 + padding(at);
            let pairs = usize::try_from(word(operands + 4)?).ok()?;
            1 + padding(at) + 8 + 8 * pairs
        }
        _ => return None,
    })
}

/// Where a range starting at `old` starts now: what started the method still does, so that
/// the entry code counts to the first line and parameters are in scope from the first byte.
fn from_entry(
    old: u16,
    moved: &impl Fn(u16) -> Result<u16, ClassFileError>,
) -> Result<u16, ClassFileError> {
    if old == 0 {
        Ok(0)
    } else {
        moved(old)
    }
}

fn line_numbers(
    contents: &[u8],
    moved: &impl Fn(u16) -> Result<u16, ClassFileError>,
) -> Result<Vec<u8>, ClassFileError> {
    let mut reader = Bytes::new(contents, 0);
    let count = reader.u2()?;
    let mut out = count.to_be_bytes().to_vec();
    for _ in 0..count {
        out.extend(from_entry(reader.u2()?, moved)?.to_be_bytes());
        out.extend(reader.u2()?.to_be_bytes());
    }
    Ok(out)
}

fn local_variables(
    contents: &[u8],
    moved: &impl Fn(u16) -> Result<u16, ClassFileError>,
) -> Result<Vec<u8>, ClassFileError> {
    let mut reader = Bytes::new(contents, 0);
    let count = reader.u2()?;
    let mut out = count.to_be_bytes().to_vec();
    for _ in 0..count {
        let start = reader.u2()?;
        let length = reader.u2()?;
        let new_start = from_entry(start, moved)?;
        let new_end = moved(start.saturating_add(length))?;
        out.extend(new_start.to_be_bytes());
        out.extend(new_end.saturating_sub(new_start).to_be_bytes());
        out.extend(reader.take(6)?); // name, descriptor or signature, slot
    }
    Ok(out)
}

/// The StackMapTable with every frame at its moved offset (and `Uninitialized` types naming
/// their `new` where it was `placed`: after a block counter inserted before it, which frames
/// and branches reach), then the frames of our handlers (offset, whether `this` is
/// uninitialized there), which follow all the original code.
fn stack_map(
    contents: &[u8],
    moved: &impl Fn(u16) -> Result<u16, ClassFileError>,
    placed: &impl Fn(u16) -> Result<u16, ClassFileError>,
    handler_frames: &[(u16, bool)],
    throwable: u16,
) -> Result<Vec<u8>, ClassFileError> {
    let mut reader = Bytes::new(contents, 0);
    let count = reader.u2()?;
    let mut out = (count + handler_frames.len() as u16).to_be_bytes().to_vec();
    let mut old_previous: Option<u16> = None;
    let mut new_previous: Option<u16> = None;
    for _ in 0..count {
        let frame_type = reader.u1()?;
        let old_delta = match frame_type {
            0..=63 => u16::from(frame_type),
            64..=127 => u16::from(frame_type - 64),
            247..=255 => reader.u2()?,
            _ => return Err(malformed("a reserved stack map frame type")),
        };
        let old = match old_previous {
            None => Some(old_delta),
            Some(previous) => previous.checked_add(old_delta + 1),
        }
        .ok_or_else(|| malformed("a stack map frame beyond 65535"))?;
        let new = moved(old)?;
        let delta = frame_delta(new_previous, new)?;
        old_previous = Some(old);
        new_previous = Some(new);
        match frame_type {
            0..=63 | 251 => {
                if delta <= 63 {
                    out.push(delta as u8);
                } else {
                    out.push(251);
                    out.extend(delta.to_be_bytes());
                }
            }
            64..=127 | 247 => {
                if delta <= 63 {
                    out.push(64 + delta as u8);
                } else {
                    out.push(247);
                    out.extend(delta.to_be_bytes());
                }
                copy_types(&mut reader, &mut out, 1, placed)?;
            }
            248..=250 => {
                out.push(frame_type);
                out.extend(delta.to_be_bytes());
            }
            252..=254 => {
                out.push(frame_type);
                out.extend(delta.to_be_bytes());
                copy_types(&mut reader, &mut out, u16::from(frame_type - 251), placed)?;
            }
            _ => {
                out.push(255);
                out.extend(delta.to_be_bytes());
                let locals = reader.u2()?;
                out.extend(locals.to_be_bytes());
                copy_types(&mut reader, &mut out, locals, placed)?;
                let stack = reader.u2()?;
                out.extend(stack.to_be_bytes());
                copy_types(&mut reader, &mut out, stack, placed)?;
            }
        }
    }
    append_handler_frames(&mut out, new_previous, handler_frames, throwable)?;
    Ok(out)
}

/// Our handlers' frames after a frame at `previous` (if any).
fn append_handler_frames(
    out: &mut Vec<u8>,
    mut previous: Option<u16>,
    handler_frames: &[(u16, bool)],
    throwable: u16,
) -> Result<(), ClassFileError> {
    for &(offset, uninitialized_this) in handler_frames {
        out.extend(handler_frame(
            frame_delta(previous, offset)?,
            throwable,
            uninitialized_this,
        ));
        previous = Some(offset);
    }
    Ok(())
}

/// offset_delta of a frame at `offset` after one at `previous`.
fn frame_delta(previous: Option<u16>, offset: u16) -> Result<u16, ClassFileError> {
    match previous {
        None => Ok(offset),
        Some(previous) => offset
            .checked_sub(previous)
            .and_then(|gap| gap.checked_sub(1))
            .ok_or_else(|| malformed("stack map frames out of order")),
    }
}

fn malformed(reason: &str) -> ClassFileError {
    ClassFileError::Malformed(reason.to_string())
}

/// A full frame: no locals (nothing the handler reads) but, in a constructor's code before
/// `this` is initialized, `this` as uninitializedThis (the verifier requires the handler of
/// such code to say so); a Throwable on the stack.
fn handler_frame(delta: u16, throwable: u16, uninitialized_this: bool) -> Vec<u8> {
    let mut frame = vec![255];
    frame.extend(delta.to_be_bytes());
    if uninitialized_this {
        frame.extend(1_u16.to_be_bytes());
        frame.push(6);
    } else {
        frame.extend(0_u16.to_be_bytes());
    }
    frame.extend(1_u16.to_be_bytes());
    frame.push(7);
    frame.extend(throwable.to_be_bytes());
    frame
}

fn copy_types(
    reader: &mut Bytes,
    out: &mut Vec<u8>,
    count: u16,
    placed: &impl Fn(u16) -> Result<u16, ClassFileError>,
) -> Result<(), ClassFileError> {
    for _ in 0..count {
        let tag = reader.u1()?;
        out.push(tag);
        match tag {
            7 => out.extend(reader.u2()?.to_be_bytes()),
            8 => out.extend(placed(reader.u2()?)?.to_be_bytes()),
            0..=6 => {}
            _ => return Err(malformed("an unknown verification type")),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameters_and_their_slots_come_from_the_descriptor() {
        let types = parameter_types("(J[[Ljava/lang/String;DZ[I)V").unwrap();
        assert_eq!(types, ["J", "[[Ljava/lang/String;", "D", "Z", "[I"]);
        assert_eq!(
            types.iter().map(|t| slot_width(t)).collect::<Vec<_>>(),
            [2, 1, 2, 1, 1]
        );
        assert_eq!(parameter_types("()V").unwrap(), Vec::<&str>::new());
        assert!(parameter_types("(Q)V").is_none());
        assert!(parameter_types("(Ljava/lang/String").is_none());
    }

    #[test]
    fn switches_are_measured_with_their_padding() {
        // tableswitch at offset 1: two bytes of padding, default, low 0, high 1, two targets.
        let mut code = vec![0x00, TABLESWITCH, 0, 0];
        for word in [20_i32, 0, 1, 20, 20] {
            code.extend(word.to_be_bytes());
        }
        assert_eq!(instruction_length(&code, 1), Some(1 + 2 + 12 + 8));
        // lookupswitch at offset 0: three bytes of padding, default, one pair.
        let mut code = vec![LOOKUPSWITCH, 0, 0, 0];
        for word in [9_i32, 1, 5, 9] {
            code.extend(word.to_be_bytes());
        }
        assert_eq!(instruction_length(&code, 0), Some(1 + 3 + 8 + 8));
        assert_eq!(instruction_length(&[WIDE, 0x84, 0, 1, 0, 1], 0), Some(6));
        assert_eq!(instruction_length(&[WIDE, 0x15, 1, 0], 0), Some(4));
        assert_eq!(instruction_length(&[0xca], 0), None);
        assert!(decode(&[0x11, 0]).is_err());
    }

    #[test]
    fn ints_are_pushed_with_the_shortest_instruction() {
        let class = [
            0xCA, 0xFE, 0xBA, 0xBE, 0, 0, 0, 52, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        ];
        let class = ClassFile::parse(&class).unwrap();
        let mut pool = PoolAdditions::new(&class);
        assert_eq!(push_int(5, &mut pool).unwrap(), [0x08]);
        assert_eq!(push_int(-1, &mut pool).unwrap(), [0x02]);
        assert_eq!(push_int(100, &mut pool).unwrap(), [0x10, 100]);
        assert_eq!(push_int(300, &mut pool).unwrap(), [0x11, 1, 44]);
        assert_eq!(push_int(100_000, &mut pool).unwrap(), [0x13, 0, 1]);
        assert_eq!(pool.count(), 2);
    }
}
