//! Columns of integers that go to a temporary file instead of memory: a list written once and
//! read back in order (the references of a dump before they are resolved, which spill past a
//! memory limit), a column read back a few entries at a time (each object's offset in the
//! dump, only read to name the steps of a path), and columns parked on disk while a step that
//! does not read them runs (the graph's, during the dominator computation under a memory
//! limit).

use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::os::unix::fs::FileExt;
use std::path::Path;

/// Values kept in memory in one chunk before a spilling list writes them out.
const CHUNK: usize = 1 << 20;

/// A list of `u64` appended to, then read once from the start. In memory while it fits its
/// budget; past it, every full chunk is written to an unnamed temporary file.
pub struct SpillList {
    memory: Vec<u64>,
    file: Option<BufWriter<File>>,
    on_disk: u64,
    /// Values it may keep in memory; `usize::MAX` for no limit.
    budget: usize,
    dir: Option<std::path::PathBuf>,
}

impl SpillList {
    pub fn new(budget_bytes: Option<u64>, dir: Option<&Path>) -> SpillList {
        SpillList {
            memory: Vec::new(),
            file: None,
            on_disk: 0,
            budget: budget_bytes.map_or(usize::MAX, |bytes| (bytes / 8) as usize),
            dir: dir.map(Path::to_path_buf),
        }
    }

    pub fn len(&self) -> u64 {
        self.on_disk + self.memory.len() as u64
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether part of the list is on disk.
    pub fn spilled(&self) -> bool {
        self.file.is_some()
    }

    pub fn push(&mut self, value: u64) -> io::Result<()> {
        self.memory.push(value);
        if self.memory.len() >= CHUNK && (self.file.is_some() || self.memory.len() >= self.budget) {
            self.write_out()?;
        }
        Ok(())
    }

    fn write_out(&mut self) -> io::Result<()> {
        if self.file.is_none() {
            let file = match &self.dir {
                Some(dir) => tempfile::tempfile_in(dir)?,
                None => tempfile::tempfile()?,
            };
            self.file = Some(BufWriter::with_capacity(1 << 20, file));
        }
        let writer = self.file.as_mut().expect("just opened");
        for value in &self.memory {
            writer.write_all(&value.to_le_bytes())?;
        }
        self.on_disk += self.memory.len() as u64;
        self.memory.clear();
        Ok(())
    }

    /// Reads the list back in order, consuming it.
    pub fn into_reader(self) -> io::Result<SpillReader> {
        let file = match self.file {
            Some(writer) => {
                let file = writer.into_inner().map_err(|error| error.into_error())?;
                let mut reopened = file;
                io::Seek::rewind(&mut reopened)?;
                Some(BufReader::with_capacity(1 << 20, reopened))
            }
            None => None,
        };
        Ok(SpillReader {
            file,
            on_disk: self.on_disk,
            memory: self.memory.into_iter(),
        })
    }
}

/// A [`SpillList`] read back.
pub struct SpillReader {
    file: Option<BufReader<File>>,
    on_disk: u64,
    memory: std::vec::IntoIter<u64>,
}

impl SpillReader {
    pub fn next_value(&mut self) -> io::Result<Option<u64>> {
        if self.on_disk > 0 {
            let mut bytes = [0u8; 8];
            self.file
                .as_mut()
                .expect("values on disk")
                .read_exact(&mut bytes)?;
            self.on_disk -= 1;
            return Ok(Some(u64::from_le_bytes(bytes)));
        }
        Ok(self.memory.next())
    }
}

/// A column of `u64` written in order into an unnamed temporary file, then read at any index.
pub struct DiskColumn {
    writer: Option<BufWriter<File>>,
    file: Option<File>,
    len: u64,
}

impl DiskColumn {
    pub fn new(dir: Option<&Path>) -> io::Result<DiskColumn> {
        let file = match dir {
            Some(dir) => tempfile::tempfile_in(dir)?,
            None => tempfile::tempfile()?,
        };
        Ok(DiskColumn {
            writer: Some(BufWriter::with_capacity(256 << 10, file)),
            file: None,
            len: 0,
        })
    }

    pub fn push(&mut self, value: u64) -> io::Result<()> {
        let writer = self
            .writer
            .as_mut()
            .ok_or_else(|| io::Error::other("column already finished"))?;
        writer.write_all(&value.to_le_bytes())?;
        self.len += 1;
        Ok(())
    }

    /// Drops the entries from `len` on (a heap dump that a later one replaces).
    pub fn truncate(&mut self, len: u64) -> io::Result<()> {
        if let Some(writer) = self.writer.as_mut() {
            writer.flush()?;
            writer.get_ref().set_len(len * 8)?;
            io::Seek::seek(writer.get_mut(), io::SeekFrom::Start(len * 8))?;
            self.len = len;
        }
        Ok(())
    }

    /// Ends writing; the column is read from then on.
    pub fn finish(&mut self) -> io::Result<()> {
        if let Some(writer) = self.writer.take() {
            self.file = Some(writer.into_inner().map_err(|error| error.into_error())?);
        }
        Ok(())
    }

    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn get(&self, index: u64) -> io::Result<u64> {
        let file = self
            .file
            .as_ref()
            .ok_or_else(|| io::Error::other("column still being written"))?;
        let mut bytes = [0u8; 8];
        file.read_exact_at(&mut bytes, index * 8)?;
        Ok(u64::from_le_bytes(bytes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_past_its_budget_reads_back_the_same() {
        for budget in [None, Some(8 * CHUNK as u64)] {
            let mut list = SpillList::new(budget, None);
            let count = 3 * CHUNK as u64 + 17;
            for value in 0..count {
                list.push(value * 3).unwrap();
            }
            assert_eq!(list.spilled(), budget.is_some());
            assert_eq!(list.len(), count);
            let mut reader = list.into_reader().unwrap();
            for value in 0..count {
                assert_eq!(reader.next_value().unwrap(), Some(value * 3));
            }
            assert_eq!(reader.next_value().unwrap(), None);
        }
    }

    #[test]
    fn a_disk_column_reads_any_index_and_truncates() {
        let mut column = DiskColumn::new(None).unwrap();
        for value in 0..1000u64 {
            column.push(value * 7).unwrap();
        }
        column.truncate(500).unwrap();
        column.push(1).unwrap();
        column.finish().unwrap();
        assert_eq!(column.len(), 501);
        assert_eq!(column.get(499).unwrap(), 499 * 7);
        assert_eq!(column.get(500).unwrap(), 1);
        assert!(column.get(501).is_err());
    }
}

/// Columns moved out of memory into an unnamed temporary file while a step that does not read
/// them runs, and read back after it.
pub struct Parked {
    file: File,
}

/// A column's values as little-endian bytes, written and read back.
pub trait Word: Copy + Default {
    const BYTES: usize;
    fn put(self, out: &mut impl Write) -> io::Result<()>;
    fn get(bytes: &[u8]) -> Self;
}

impl Word for u32 {
    const BYTES: usize = 4;
    fn put(self, out: &mut impl Write) -> io::Result<()> {
        out.write_all(&self.to_le_bytes())
    }
    fn get(bytes: &[u8]) -> Self {
        u32::from_le_bytes(bytes.try_into().expect("4 bytes"))
    }
}

impl Word for u64 {
    const BYTES: usize = 8;
    fn put(self, out: &mut impl Write) -> io::Result<()> {
        out.write_all(&self.to_le_bytes())
    }
    fn get(bytes: &[u8]) -> Self {
        u64::from_le_bytes(bytes.try_into().expect("8 bytes"))
    }
}

/// Writes columns one after the other (each preceded by its length) and frees them.
pub struct ParkWriter {
    out: BufWriter<File>,
}

impl ParkWriter {
    pub fn new(dir: Option<&Path>) -> io::Result<ParkWriter> {
        let file = match dir {
            Some(dir) => tempfile::tempfile_in(dir)?,
            None => tempfile::tempfile()?,
        };
        Ok(ParkWriter {
            out: BufWriter::with_capacity(1 << 20, file),
        })
    }

    pub fn column<T: Word>(&mut self, column: &mut Vec<T>) -> io::Result<()> {
        (column.len() as u64).put(&mut self.out)?;
        for &value in column.iter() {
            value.put(&mut self.out)?;
        }
        *column = Vec::new();
        Ok(())
    }

    pub fn finish(self) -> io::Result<Parked> {
        let mut file = self.out.into_inner().map_err(|error| error.into_error())?;
        io::Seek::rewind(&mut file)?;
        Ok(Parked { file })
    }
}

impl Parked {
    /// Reads the columns back, in the order they were written.
    pub fn reader(self) -> ParkReader {
        ParkReader {
            input: BufReader::with_capacity(1 << 20, self.file),
        }
    }
}

pub struct ParkReader {
    input: BufReader<File>,
}

impl ParkReader {
    pub fn column<T: Word>(&mut self) -> io::Result<Vec<T>> {
        let mut length = [0u8; 8];
        self.input.read_exact(&mut length)?;
        let length = u64::from_le_bytes(length) as usize;
        let mut column = Vec::with_capacity(length);
        let mut bytes = vec![0u8; T::BYTES * 8192];
        let mut left = length;
        while left > 0 {
            let count = left.min(8192);
            let chunk = &mut bytes[..count * T::BYTES];
            self.input.read_exact(chunk)?;
            column.extend(chunk.chunks_exact(T::BYTES).map(T::get));
            left -= count;
        }
        Ok(column)
    }
}

#[cfg(test)]
mod park_tests {
    use super::*;

    #[test]
    fn parked_columns_come_back_whole() {
        let mut a: Vec<u32> = (0..100_000).collect();
        let mut b: Vec<u64> = (0..70_000).map(|v| v * 1_000_000_007).collect();
        let (a0, b0) = (a.clone(), b.clone());
        let mut writer = ParkWriter::new(None).unwrap();
        writer.column(&mut a).unwrap();
        writer.column(&mut b).unwrap();
        assert!(a.is_empty() && b.is_empty());
        let mut reader = writer.finish().unwrap().reader();
        assert_eq!(reader.column::<u32>().unwrap(), a0);
        assert_eq!(reader.column::<u64>().unwrap(), b0);
    }
}
