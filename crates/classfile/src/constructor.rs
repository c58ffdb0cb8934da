//! Where a constructor's `this` is initialized: just after its `super(...)` or `this(...)`
//! call. Before that point the verifier types `this` as uninitializedThis, and an exception
//! handler covering that code must have a frame that says so (and may only throw); after it,
//! `this` is an object like any other. The rewriter covers the two parts with two handlers.
//! The call itself is covered by neither: HotSpot checks a handler over it against the frame
//! after the call (`this` initialized) with the flag of an uninitialized `this` still set, which
//! no stack map frame can accept, so a throwable the superclass's constructor throws leaves the
//! constructor without its `exitThrown` (the agent closes such a call at the thread's next
//! exit; docs/trace-format.md).
//!
//! Found by following the operand stack word by word from the method's start, in code order,
//! taking the stack a StackMapTable frame states at each offset that has one (the code after an
//! unconditional jump is reached only through a branch, and a branch target has a frame).

use std::collections::HashMap;

use crate::code::{parameter_types, slot_width};
use crate::reader::{Bytes, ClassFile};
use crate::ClassFileError;

/// A word of the operand stack: `this` before it is initialized, or anything else.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Word {
    This,
    Other,
}

/// The offset of the instruction after the call that initializes `this`.
pub(crate) fn this_initialized_at(
    class: &ClassFile,
    code: &[u8],
    instructions: &[(usize, usize)],
    stack_map: Option<&[u8]>,
) -> Result<usize, String> {
    let frames = match stack_map {
        Some(contents) => frame_stacks(contents).map_err(|error| error.to_string())?,
        None => HashMap::new(),
    };
    let mut stack: Option<Vec<Word>> = Some(Vec::new());
    for &(at, length) in instructions {
        if let Some(stated) = frames.get(&at) {
            stack = Some(stated.clone());
        }
        let Some(words) = stack.as_mut() else {
            return Err(format!(
                "offset {at} follows an unconditional jump but has no stack map frame"
            ));
        };
        let opcode = code[at];
        let u2 = || u16::from_be_bytes([code[at + 1], code[at + 2]]);
        let effect = |pops: usize, pushes: usize| Effect::Plain(pops, pushes);
        let step = match opcode {
            0x00 | 0x84 => effect(0, 0),
            0x01..=0x08 | 0x0b..=0x0d | 0x10..=0x13 => effect(0, 1),
            0x09 | 0x0a | 0x0e | 0x0f | 0x14 => effect(0, 2),
            0x15 | 0x17 | 0x1a..=0x1d | 0x22..=0x25 => effect(0, 1),
            0x16 | 0x18 | 0x1e..=0x21 | 0x26..=0x29 => effect(0, 2),
            0x19 => Effect::Load(code[at + 1] == 0),
            0x2a => Effect::Load(true),
            0x2b..=0x2d => Effect::Load(false),
            0x2e | 0x30 | 0x32..=0x35 => effect(2, 1),
            0x2f | 0x31 => effect(2, 2),
            0x36 | 0x38 | 0x3b..=0x3e | 0x43..=0x46 => effect(1, 0),
            0x37 | 0x39 | 0x3f..=0x42 | 0x47..=0x4a => effect(2, 0),
            0x3a if code[at + 1] == 0 => return Err(stores_this(at)),
            0x4b => return Err(stores_this(at)),
            0x3a | 0x4c..=0x4e => effect(1, 0),
            0x4f | 0x51 | 0x53..=0x56 => effect(3, 0),
            0x50 | 0x52 => effect(4, 0),
            0x57 => effect(1, 0),
            0x58 => effect(2, 0),
            0x59..=0x5f => Effect::Shuffle(opcode),
            // Arithmetic: int and float take two words to one, long and double four to two.
            0x60..=0x73 => match (opcode - 0x60) % 4 {
                0 | 2 => effect(2, 1),
                _ => effect(4, 2),
            },
            0x74 | 0x76 => effect(1, 1),
            0x75 | 0x77 => effect(2, 2),
            0x78 | 0x7a | 0x7c => effect(2, 1),
            0x79 | 0x7b | 0x7d => effect(3, 2),
            0x7e | 0x80 | 0x82 => effect(2, 1),
            0x7f | 0x81 | 0x83 => effect(4, 2),
            0x85 | 0x87 | 0x8c | 0x8d => effect(1, 2),
            0x86 | 0x8b | 0x91..=0x93 => effect(1, 1),
            0x88 | 0x89 | 0x8e | 0x90 => effect(2, 1),
            0x8a | 0x8f => effect(2, 2),
            0x94 | 0x97 | 0x98 => effect(4, 1),
            0x95 | 0x96 => effect(2, 1),
            0x99..=0x9e | 0xc6 | 0xc7 => effect(1, 0),
            0x9f..=0xa6 => effect(2, 0),
            0xa7 | 0xc8 => Effect::Jump(0),
            0xa8 | 0xa9 | 0xc9 => {
                return Err(format!("a subroutine (jsr/ret) at offset {at}"));
            }
            0xaa | 0xab => Effect::Jump(1),
            0xac | 0xae | 0xb0 => Effect::Jump(1),
            0xad | 0xaf => Effect::Jump(2),
            0xb1 => Effect::Jump(0),
            0xb2..=0xb5 => {
                let (_, descriptor) = class
                    .member(u2())
                    .ok_or_else(|| bad_reference(at, "a field"))?;
                let words = field_words(descriptor);
                match opcode {
                    0xb2 => effect(0, words),
                    0xb3 => effect(words, 0),
                    0xb4 => effect(1, words),
                    _ => effect(1 + words, 0),
                }
            }
            0xb6..=0xba => {
                let (name, descriptor) = class
                    .member(u2())
                    .ok_or_else(|| bad_reference(at, "a method"))?;
                let (arguments, returns) = method_words(descriptor)
                    .ok_or_else(|| format!("a bad method descriptor at offset {at}"))?;
                match opcode {
                    0xb7 if name == "<init>" => Effect::Init(arguments),
                    0xb8 | 0xba => effect(arguments, returns),
                    _ => effect(arguments + 1, returns),
                }
            }
            0xbb => effect(0, 1),
            0xbc | 0xbd | 0xbe | 0xc0 | 0xc1 => effect(1, 1),
            0xbf => Effect::Jump(1),
            0xc2 | 0xc3 => effect(1, 0),
            0xc5 => effect(usize::from(code[at + 3]), 1),
            0xc4 => match code[at + 1] {
                0x84 => effect(0, 0),
                0x15 | 0x17 => effect(0, 1),
                0x16 | 0x18 => effect(0, 2),
                0x19 => Effect::Load(u2_at(code, at + 2) == 0),
                0x3a if u2_at(code, at + 2) == 0 => return Err(stores_this(at)),
                0x36 | 0x38 | 0x3a => effect(1, 0),
                0x37 | 0x39 => effect(2, 0),
                _ => return Err(format!("a wide instruction at offset {at} that can't be")),
            },
            _ => return Err(format!("an unknown instruction at offset {at}")),
        };
        let underflow = || format!("the operand stack runs out at offset {at}");
        match step {
            Effect::Plain(pops, pushes) => {
                let left = words.len().checked_sub(pops).ok_or_else(underflow)?;
                words.truncate(left);
                words.extend(std::iter::repeat_n(Word::Other, pushes));
            }
            Effect::Load(this) => words.push(if this { Word::This } else { Word::Other }),
            Effect::Shuffle(opcode) => shuffle(words, opcode).ok_or_else(underflow)?,
            Effect::Jump(pops) => {
                words.len().checked_sub(pops).ok_or_else(underflow)?;
                stack = None;
            }
            Effect::Init(arguments) => {
                let left = words
                    .len()
                    .checked_sub(arguments + 1)
                    .ok_or_else(underflow)?;
                if words[left] == Word::This {
                    return Ok(at + length);
                }
                words.truncate(left);
            }
        }
    }
    Err("no call of super(...) or this(...) initializes this".into())
}

enum Effect {
    /// Pops so many words, pushes so many others.
    Plain(usize, usize),
    /// Pushes a local: `this` (local 0) or another.
    Load(bool),
    /// One of the dup and swap instructions.
    Shuffle(u8),
    /// Pops so many words; what follows is reached only by a branch.
    Jump(usize),
    /// `invokespecial <init>` with so many words of arguments.
    Init(usize),
}

fn u2_at(code: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([code[at], code[at + 1]])
}

fn stores_this(at: usize) -> String {
    format!("the constructor stores into local 0 at offset {at} before this is initialized")
}

fn bad_reference(at: usize, what: &str) -> String {
    format!("the instruction at offset {at} does not refer to {what}")
}

fn field_words(descriptor: &str) -> usize {
    slot_width(descriptor)
}

/// The words a method descriptor's arguments take, and its result's.
fn method_words(descriptor: &str) -> Option<(usize, usize)> {
    let arguments = parameter_types(descriptor)?
        .iter()
        .map(|parameter| slot_width(parameter))
        .sum();
    let returns = match descriptor.rsplit(')').next()? {
        "V" => 0,
        result => slot_width(result),
    };
    Some((arguments, returns))
}

/// dup, dup_x1, dup_x2, dup2, dup2_x1, dup2_x2, swap on words (what the JVM defines them on).
fn shuffle(words: &mut Vec<Word>, opcode: u8) -> Option<()> {
    let top = |count: usize| words.len().checked_sub(count);
    match opcode {
        0x59 => words.push(*words.last()?),
        0x5a => {
            let at = top(2)?;
            words.insert(at, *words.last()?);
        }
        0x5b => {
            let at = top(3)?;
            words.insert(at, *words.last()?);
        }
        0x5c => {
            let at = top(2)?;
            let pair = [words[at], words[at + 1]];
            words.extend(pair);
        }
        0x5d => {
            let at = top(3)?;
            let pair = [words[at + 1], words[at + 2]];
            words.splice(at..at, pair);
        }
        0x5e => {
            let at = top(4)?;
            let pair = [words[at + 2], words[at + 3]];
            words.splice(at..at, pair);
        }
        _ => {
            let at = top(2)?;
            words.swap(at, at + 1);
        }
    }
    Some(())
}

/// Each StackMapTable frame's offset and the operand stack it states, in words.
fn frame_stacks(contents: &[u8]) -> Result<HashMap<usize, Vec<Word>>, ClassFileError> {
    let mut reader = Bytes::new(contents, 0);
    let count = reader.u2()?;
    let mut stacks = HashMap::new();
    let mut previous: Option<usize> = None;
    for _ in 0..count {
        let frame_type = reader.u1()?;
        let delta = match frame_type {
            0..=63 => usize::from(frame_type),
            64..=127 => usize::from(frame_type - 64),
            247..=255 => usize::from(reader.u2()?),
            _ => {
                return Err(ClassFileError::Malformed(
                    "a reserved stack map frame type".into(),
                ))
            }
        };
        let offset = previous.map_or(delta, |previous| previous + delta + 1);
        previous = Some(offset);
        let mut stack = Vec::new();
        match frame_type {
            64..=127 | 247 => push_types(&mut reader, &mut stack, 1)?,
            252..=254 => skip_types(&mut reader, u16::from(frame_type - 251))?,
            255 => {
                let locals = reader.u2()?;
                skip_types(&mut reader, locals)?;
                let items = reader.u2()?;
                push_types(&mut reader, &mut stack, items)?;
            }
            _ => {}
        }
        stacks.insert(offset, stack);
    }
    Ok(stacks)
}

fn push_types(reader: &mut Bytes, stack: &mut Vec<Word>, count: u16) -> Result<(), ClassFileError> {
    for _ in 0..count {
        match reader.u1()? {
            3 | 4 => stack.extend([Word::Other, Word::Other]),
            6 => stack.push(Word::This),
            7 | 8 => {
                reader.u2()?;
                stack.push(Word::Other);
            }
            _ => stack.push(Word::Other),
        }
    }
    Ok(())
}

fn skip_types(reader: &mut Bytes, count: u16) -> Result<(), ClassFileError> {
    for _ in 0..count {
        if matches!(reader.u1()?, 7 | 8) {
            reader.u2()?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dups_and_swap_move_words_as_the_jvm_does() {
        use Word::{Other as O, This as T};
        let mut words = vec![O, T];
        shuffle(&mut words, 0x5a).unwrap(); // dup_x1
        assert_eq!(words, [T, O, T]);
        let mut words = vec![T, O, O];
        shuffle(&mut words, 0x5d).unwrap(); // dup2_x1
        assert_eq!(words, [O, O, T, O, O]);
        let mut words = vec![T, O];
        shuffle(&mut words, 0x5f).unwrap(); // swap
        assert_eq!(words, [O, T]);
        let mut words = vec![O];
        assert!(shuffle(&mut words, 0x5c).is_none()); // dup2 of one word
    }

    #[test]
    fn descriptors_count_words() {
        assert_eq!(method_words("(IJLjava/lang/String;D)V"), Some((6, 0)));
        assert_eq!(method_words("()J"), Some((0, 2)));
        assert_eq!(method_words("([[IZ)Ljava/lang/Object;"), Some((2, 1)));
    }
}
