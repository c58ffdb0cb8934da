//! Constants added to the end of a class's pool (existing indexes stay valid).

use std::collections::HashMap;

use crate::reader::ClassFile;
use crate::ClassFileError;

pub(crate) struct PoolAdditions {
    next: u32,
    bytes: Vec<u8>,
    /// Each addition's encoding → its index, so that nothing is added twice.
    added: HashMap<Vec<u8>, u16>,
}

impl PoolAdditions {
    pub fn new(class: &ClassFile) -> PoolAdditions {
        PoolAdditions {
            next: u32::from(class.pool_count),
            bytes: Vec::new(),
            added: HashMap::new(),
        }
    }

    /// constant_pool_count after the additions.
    pub fn count(&self) -> u16 {
        self.next as u16
    }

    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    fn add(&mut self, entry: Vec<u8>) -> Result<u16, ClassFileError> {
        if let Some(&index) = self.added.get(&entry) {
            return Ok(index);
        }
        if self.next >= 0xFFFF {
            return Err(ClassFileError::PoolFull);
        }
        let index = self.next as u16;
        self.next += 1;
        self.bytes.extend_from_slice(&entry);
        self.added.insert(entry, index);
        Ok(index)
    }

    /// Class-file names are ASCII here (ours and the JVM's descriptors), where modified UTF-8
    /// and UTF-8 agree.
    pub fn utf8(&mut self, text: &str) -> Result<u16, ClassFileError> {
        let mut entry = vec![1];
        entry.extend_from_slice(&(text.len() as u16).to_be_bytes());
        entry.extend_from_slice(text.as_bytes());
        self.add(entry)
    }

    pub fn class(&mut self, internal_name: &str) -> Result<u16, ClassFileError> {
        let name = self.utf8(internal_name)?;
        let mut entry = vec![7];
        entry.extend_from_slice(&name.to_be_bytes());
        self.add(entry)
    }

    pub fn method_ref(
        &mut self,
        class: u16,
        name: &str,
        descriptor: &str,
    ) -> Result<u16, ClassFileError> {
        self.member_ref(10, class, name, descriptor)
    }

    pub fn field_ref(
        &mut self,
        class: u16,
        name: &str,
        descriptor: &str,
    ) -> Result<u16, ClassFileError> {
        self.member_ref(9, class, name, descriptor)
    }

    /// A Methodref (tag 10) or Fieldref (tag 9) with its NameAndType.
    fn member_ref(
        &mut self,
        tag: u8,
        class: u16,
        name: &str,
        descriptor: &str,
    ) -> Result<u16, ClassFileError> {
        let name = self.utf8(name)?;
        let descriptor = self.utf8(descriptor)?;
        let mut name_and_type = vec![12];
        name_and_type.extend_from_slice(&name.to_be_bytes());
        name_and_type.extend_from_slice(&descriptor.to_be_bytes());
        let name_and_type = self.add(name_and_type)?;
        let mut entry = vec![tag];
        entry.extend_from_slice(&class.to_be_bytes());
        entry.extend_from_slice(&name_and_type.to_be_bytes());
        self.add(entry)
    }

    pub fn integer(&mut self, value: i32) -> Result<u16, ClassFileError> {
        let mut entry = vec![3];
        entry.extend_from_slice(&value.to_be_bytes());
        self.add(entry)
    }
}
