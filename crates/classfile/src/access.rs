//! The access flags of classes, fields and methods, as class files and JVMTI's
//! GetClassModifiers, GetMethodModifiers and GetFieldModifiers give them.

pub const PUBLIC: u16 = 0x0001;
pub const STATIC: u16 = 0x0008;
pub const FINAL: u16 = 0x0010;
/// On a class: the modern meaning of invokespecial (always set by compilers since Java 1.1).
pub const SUPER: u16 = 0x0020;
pub const BRIDGE: u16 = 0x0040;
pub const NATIVE: u16 = 0x0100;
pub const INTERFACE: u16 = 0x0200;
pub const ABSTRACT: u16 = 0x0400;

/// Whether JVMTI's `modifiers` carry `flag`.
pub fn has(modifiers: u32, flag: u16) -> bool {
    modifiers & u32::from(flag) != 0
}
