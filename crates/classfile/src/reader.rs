//! Reads a class file far enough to rewrite methods: where the constant pool ends, the
//! pool's UTF-8 entries, and each method's attributes; writes it back with new code.

use crate::pool::PoolAdditions;
use crate::ClassFileError;

/// A cursor over big-endian class-file bytes; running off the end is an error naming the byte.
#[derive(Clone, Copy)]
pub(crate) struct Bytes<'a> {
    pub data: &'a [u8],
    pub at: usize,
}

impl<'a> Bytes<'a> {
    pub fn new(data: &'a [u8], at: usize) -> Bytes<'a> {
        Bytes { data, at }
    }

    pub fn take(&mut self, count: usize) -> Result<&'a [u8], ClassFileError> {
        let end = self
            .at
            .checked_add(count)
            .filter(|&end| end <= self.data.len())
            .ok_or(ClassFileError::Truncated(self.data.len()))?;
        let slice = &self.data[self.at..end];
        self.at = end;
        Ok(slice)
    }

    pub fn u1(&mut self) -> Result<u8, ClassFileError> {
        Ok(self.take(1)?[0])
    }

    pub fn u2(&mut self) -> Result<u16, ClassFileError> {
        let bytes = self.take(2)?;
        Ok(u16::from_be_bytes([bytes[0], bytes[1]]))
    }

    pub fn u4(&mut self) -> Result<u32, ClassFileError> {
        let bytes = self.take(4)?;
        Ok(u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]))
    }
}

/// An attribute: its name's pool index and where its contents lie.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Attribute {
    pub name: u16,
    pub start: usize,
    pub end: usize,
}

pub(crate) struct Method {
    /// Its position in the methods table.
    pub index: usize,
    pub access: u16,
    pub name: u16,
    pub descriptor: u16,
    pub start: usize,
    pub end: usize,
    pub attributes: Vec<Attribute>,
}

pub(crate) struct ClassFile<'a> {
    pub bytes: &'a [u8],
    pub major: u16,
    /// constant_pool_count: the first index free for additions.
    pub pool_count: u16,
    pool_end: usize,
    /// Pool index → the UTF-8 text of CONSTANT_Utf8 entries.
    utf8: Vec<Option<&'a str>>,
    /// Pool index → (tag, where the entry's contents start), 0 tags for unused slots.
    entries: Vec<(u8, usize)>,
    methods_start: usize,
    methods_end: usize,
    pub methods: Vec<Method>,
}

const CONSTANT_UTF8: u8 = 1;

impl<'a> ClassFile<'a> {
    pub fn parse(bytes: &'a [u8]) -> Result<ClassFile<'a>, ClassFileError> {
        let mut reader = Bytes::new(bytes, 0);
        let magic = reader.u4()?;
        if magic != 0xCAFE_BABE {
            return Err(ClassFileError::BadMagic(magic));
        }
        let _minor = reader.u2()?;
        let major = reader.u2()?;
        let pool_count = reader.u2()?;
        let mut utf8 = vec![None; usize::from(pool_count)];
        let mut entries = vec![(0, 0); usize::from(pool_count)];
        let mut index = 1;
        while index < usize::from(pool_count) {
            let tag = reader.u1()?;
            entries[index] = (tag, reader.at);
            let size = match tag {
                CONSTANT_UTF8 => {
                    let length = usize::from(reader.u2()?);
                    let text = reader.take(length)?;
                    utf8[index] = std::str::from_utf8(text).ok();
                    0
                }
                3 | 4 => 4,                // Integer, Float
                5 | 6 => 8,                // Long, Double
                7 | 8 | 16 | 19 | 20 => 2, // Class, String, MethodType, Module, Package
                9..=12 | 17 | 18 => 4, // Field/Method/InterfaceMethod refs, NameAndType, (Invoke)Dynamic
                15 => 3,               // MethodHandle
                _ => return Err(ClassFileError::BadConstant { index, tag }),
            };
            reader.take(size)?;
            // Long and Double take two pool slots.
            index += if tag == 5 || tag == 6 { 2 } else { 1 };
        }
        let pool_end = reader.at;
        reader.take(6)?; // access flags, this class, super class
        let interfaces = usize::from(reader.u2()?);
        reader.take(interfaces * 2)?;
        let fields = reader.u2()?;
        for _ in 0..fields {
            reader.take(6)?;
            skip_attributes(&mut reader)?;
        }
        let methods_start = reader.at;
        let method_count = reader.u2()?;
        let mut methods = Vec::with_capacity(usize::from(method_count));
        for index in 0..usize::from(method_count) {
            let start = reader.at;
            let access = reader.u2()?;
            let name = reader.u2()?;
            let descriptor = reader.u2()?;
            let attributes = read_attributes(&mut reader)?;
            methods.push(Method {
                index,
                access,
                name,
                descriptor,
                start,
                end: reader.at,
                attributes,
            });
        }
        let methods_end = reader.at;
        skip_attributes(&mut reader)?;
        Ok(ClassFile {
            bytes,
            major,
            pool_count,
            pool_end,
            utf8,
            entries,
            methods_start,
            methods_end,
            methods,
        })
    }

    /// The text of a CONSTANT_Utf8 entry.
    pub fn utf8(&self, index: u16) -> Option<&'a str> {
        self.utf8.get(usize::from(index)).copied().flatten()
    }

    /// The two indexes a pool entry of `tag` starts with (a member reference's class and
    /// name-and-type, a name-and-type's name and descriptor).
    fn index_pair(&self, index: u16, tags: &[u8]) -> Option<(u16, u16)> {
        let &(tag, at) = self.entries.get(usize::from(index))?;
        if !tags.contains(&tag) {
            return None;
        }
        let bytes = self.bytes.get(at..at + 4)?;
        Some((
            u16::from_be_bytes([bytes[0], bytes[1]]),
            u16::from_be_bytes([bytes[2], bytes[3]]),
        ))
    }

    /// The class (internal name) of a field or method reference (tags 9, 10, 11).
    pub fn member_class(&self, index: u16) -> Option<&'a str> {
        let (class, _) = self.index_pair(index, &[9, 10, 11])?;
        let &(tag, at) = self.entries.get(usize::from(class))?;
        if tag != 7 {
            return None;
        }
        let name = self.bytes.get(at..at + 2)?;
        self.utf8(u16::from_be_bytes([name[0], name[1]]))
    }

    /// The name and descriptor of a field or method reference (tags 9, 10, 11) or of an
    /// invokedynamic's call site (tag 18).
    pub fn member(&self, index: u16) -> Option<(&'a str, &'a str)> {
        let (_, name_and_type) = self.index_pair(index, &[9, 10, 11, 18])?;
        let (name, descriptor) = self.index_pair(name_and_type, &[12])?;
        Some((self.utf8(name)?, self.utf8(descriptor)?))
    }

    /// The class file again, with the pool's additions and the given methods' Code attributes
    /// (their contents) replaced.
    pub fn write(&self, pool: &PoolAdditions, codes: &[(usize, Vec<u8>)]) -> Vec<u8> {
        let bytes = self.bytes;
        let mut out = Vec::with_capacity(bytes.len() + pool.bytes().len() + 256);
        out.extend_from_slice(&bytes[..8]);
        out.extend_from_slice(&pool.count().to_be_bytes());
        out.extend_from_slice(&bytes[10..self.pool_end]);
        out.extend_from_slice(pool.bytes());
        out.extend_from_slice(&bytes[self.pool_end..self.methods_start + 2]);
        for method in &self.methods {
            let Some((_, code)) = codes.iter().find(|(index, _)| *index == method.index) else {
                out.extend_from_slice(&bytes[method.start..method.end]);
                continue;
            };
            out.extend_from_slice(&bytes[method.start..method.start + 6]);
            out.extend_from_slice(&(method.attributes.len() as u16).to_be_bytes());
            for attribute in &method.attributes {
                out.extend_from_slice(&attribute.name.to_be_bytes());
                if self.utf8(attribute.name) == Some("Code") {
                    out.extend_from_slice(&(code.len() as u32).to_be_bytes());
                    out.extend_from_slice(code);
                } else {
                    let contents = &bytes[attribute.start..attribute.end];
                    out.extend_from_slice(&(contents.len() as u32).to_be_bytes());
                    out.extend_from_slice(contents);
                }
            }
        }
        out.extend_from_slice(&bytes[self.methods_end..]);
        out
    }
}

pub(crate) fn read_attributes(reader: &mut Bytes) -> Result<Vec<Attribute>, ClassFileError> {
    let count = reader.u2()?;
    let mut attributes = Vec::with_capacity(usize::from(count));
    for _ in 0..count {
        let name = reader.u2()?;
        let length = reader.u4()? as usize;
        let start = reader.at;
        reader.take(length)?;
        attributes.push(Attribute {
            name,
            start,
            end: reader.at,
        });
    }
    Ok(attributes)
}

fn skip_attributes(reader: &mut Bytes) -> Result<(), ClassFileError> {
    read_attributes(reader).map(|_| ())
}
