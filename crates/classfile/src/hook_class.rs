//! The class instrumented methods call, `openprof/MptHook`, as class-file bytes: static native
//! methods only (the agent binds them with RegisterNatives), so that the agent needs no
//! compiled Java shipped beside it.

use crate::access::{FINAL, NATIVE, PUBLIC, STATIC, SUPER};
use crate::HOOK_METHODS;

/// The hook class's internal name.
pub const HOOK_CLASS: &str = "openprof/MptHook";

/// The class file: `public final class openprof.MptHook` with a `public static native`
/// method for each of HOOK_METHODS, version 52 (Java 8) so that any JVM we run in takes it.
pub fn hook_class_file() -> Vec<u8> {
    let mut pool: Vec<Vec<u8>> = Vec::new();
    let utf8 = |pool: &mut Vec<Vec<u8>>, text: &str| -> u16 {
        let mut entry = vec![1];
        entry.extend((text.len() as u16).to_be_bytes());
        entry.extend(text.as_bytes());
        if let Some(index) = pool.iter().position(|existing| *existing == entry) {
            return index as u16 + 1;
        }
        pool.push(entry);
        pool.len() as u16
    };
    let class = |pool: &mut Vec<Vec<u8>>, name_index: u16| -> u16 {
        let mut entry = vec![7];
        entry.extend(name_index.to_be_bytes());
        pool.push(entry);
        pool.len() as u16
    };
    let this_name = utf8(&mut pool, HOOK_CLASS);
    let this_class = class(&mut pool, this_name);
    let super_name = utf8(&mut pool, "java/lang/Object");
    let super_class = class(&mut pool, super_name);
    let methods: Vec<(u16, u16)> = HOOK_METHODS
        .iter()
        .map(|(name, descriptor)| (utf8(&mut pool, name), utf8(&mut pool, descriptor)))
        .collect();

    let mut out = Vec::new();
    out.extend(0xCAFE_BABE_u32.to_be_bytes());
    out.extend(0_u16.to_be_bytes());
    out.extend(52_u16.to_be_bytes());
    out.extend((pool.len() as u16 + 1).to_be_bytes());
    for entry in &pool {
        out.extend(entry);
    }
    out.extend((PUBLIC | FINAL | SUPER).to_be_bytes());
    out.extend(this_class.to_be_bytes());
    out.extend(super_class.to_be_bytes());
    out.extend(0_u16.to_be_bytes()); // interfaces
    out.extend(0_u16.to_be_bytes()); // fields
    out.extend((methods.len() as u16).to_be_bytes());
    for (name, descriptor) in methods {
        out.extend((PUBLIC | STATIC | NATIVE).to_be_bytes());
        out.extend(name.to_be_bytes());
        out.extend(descriptor.to_be_bytes());
        out.extend(0_u16.to_be_bytes()); // attributes
    }
    out.extend(0_u16.to_be_bytes()); // class attributes
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hook_class_file_is_well_formed() {
        let bytes = hook_class_file();
        assert_eq!(&bytes[..4], &[0xCA, 0xFE, 0xBA, 0xBE]);
        // Each hook method's name and descriptor is in the constant pool.
        let text = String::from_utf8_lossy(&bytes);
        for (name, descriptor) in HOOK_METHODS {
            assert!(text.contains(name) && text.contains(descriptor));
        }
        // Ends with the method table and no class attributes.
        assert_eq!(&bytes[bytes.len() - 2..], &[0, 0]);
    }
}
