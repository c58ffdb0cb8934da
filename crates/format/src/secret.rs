//! Files named by options and flags (`token=@FILE`, `filter=@FILE`, `mpt=@FILE` of the agent,
//! `--token-file` of the command): one reader for all, bounded, which refuses FIFOs and
//! sockets (opening one could wait forever) and says when others may read a token file.

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

/// The most a token file may hold. A token is one line of a few dozen bytes; the bound keeps
/// a wrong path (a log, `/dev/zero`) from being read into memory.
pub const TOKEN_FILE_MAX_BYTES: usize = 4096;
/// The most a file of filters or of parameter tracing specifications may hold: thousands of
/// lines, far more than anyone writes, and little for the JVM to hold while it starts.
pub const SPEC_FILE_MAX_BYTES: usize = 1 << 20;

/// Why a file named by an option could not be read. Every message names the file.
#[derive(Debug, thiserror::Error)]
pub enum OptionFileError {
    #[error("can't read {}: {source}", path.display())]
    Unreadable {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "{} is a FIFO or a socket, not {what} (reading it could wait forever)",
        path.display()
    )]
    NotAFile { path: PathBuf, what: &'static str },
    #[error("{} is longer than {max} bytes: not {what}", path.display())]
    TooLong {
        path: PathBuf,
        max: usize,
        what: &'static str,
    },
    #[error("{} is not UTF-8 text", path.display())]
    NotText { path: PathBuf },
}

/// A file named by an option, read.
#[derive(Debug)]
pub struct OptionFile {
    pub text: String,
    /// Its permission bits.
    pub mode: u32,
    /// Whether it is a regular file (not a device).
    pub regular: bool,
}

/// Reads `path`, `what` the option calls it ("a token file", ...), refusing more than `max`
/// bytes, FIFOs and sockets, and text that is not UTF-8.
pub fn read_option_file(
    path: &Path,
    max: usize,
    what: &'static str,
) -> Result<OptionFile, OptionFileError> {
    let unreadable = |source| OptionFileError::Unreadable {
        path: path.to_path_buf(),
        source,
    };
    // Opening a FIFO blocks until someone writes to it: the JVM would never start.
    let kind = std::fs::metadata(path).map_err(unreadable)?.file_type();
    if kind.is_fifo() || kind.is_socket() {
        return Err(OptionFileError::NotAFile {
            path: path.to_path_buf(),
            what,
        });
    }
    let file = File::open(path).map_err(unreadable)?;
    let mode = file.metadata().map_err(unreadable)?.mode();
    let mut bytes = Vec::with_capacity(256);
    file.take(max as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(unreadable)?;
    if bytes.len() > max {
        return Err(OptionFileError::TooLong {
            path: path.to_path_buf(),
            max,
            what,
        });
    }
    let text = String::from_utf8(bytes).map_err(|_| OptionFileError::NotText {
        path: path.to_path_buf(),
    })?;
    Ok(OptionFile {
        text,
        mode,
        regular: kind.is_file(),
    })
}

/// Why a token file could not be used. Every message names the file.
#[derive(Debug, thiserror::Error)]
pub enum TokenFileError {
    #[error(transparent)]
    File(#[from] OptionFileError),
    #[error("{} is empty: its first line is the token", path.display())]
    Empty { path: PathBuf },
}

/// A token read from a file.
#[derive(Debug)]
pub struct TokenFile {
    /// The file's first line, without surrounding white space.
    pub token: String,
    /// Set when the file may be read by its group or by anyone: a warning to print.
    pub readable_by_others: Option<String>,
}

/// Reads the token: the first line of `path`, which may hold at most
/// [`TOKEN_FILE_MAX_BYTES`].
pub fn read_token_file(path: &Path) -> Result<TokenFile, TokenFileError> {
    let file = read_option_file(
        path,
        TOKEN_FILE_MAX_BYTES,
        "a token file (its first line is the token)",
    )?;
    let token = file.text.lines().next().unwrap_or("").trim().to_string();
    if token.is_empty() {
        return Err(TokenFileError::Empty {
            path: path.to_path_buf(),
        });
    }
    let readable_by_others = (file.regular && file.mode & 0o044 != 0).then(|| {
        format!(
            "the token file {} may be read by other users (mode {:o}); `chmod 600` it",
            path.display(),
            file.mode & 0o777
        )
    });
    Ok(TokenFile {
        token,
        readable_by_others,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn file_with(contents: &[u8], mode: u32) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, contents).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        (dir, path)
    }

    #[test]
    fn the_first_line_is_the_token() {
        let (_dir, path) = file_with(b"  s3cret \nsecond line\n", 0o600);
        let read = read_token_file(&path).unwrap();
        assert_eq!(read.token, "s3cret");
        assert!(read.readable_by_others.is_none());
    }

    #[test]
    fn a_file_others_may_read_gives_a_warning() {
        for mode in [0o640, 0o604, 0o644] {
            let (_dir, path) = file_with(b"s3cret\n", mode);
            let warning = read_token_file(&path).unwrap().readable_by_others.unwrap();
            assert!(warning.contains(&format!("(mode {mode:o})")), "{warning}");
            assert!(!warning.contains("s3cret"), "{warning}");
        }
    }

    #[test]
    fn bad_token_files_are_named() {
        let exactly = vec![b'k'; TOKEN_FILE_MAX_BYTES];
        let (_dir, path) = file_with(&exactly, 0o600);
        assert_eq!(
            read_token_file(&path).unwrap().token.len(),
            TOKEN_FILE_MAX_BYTES
        );
        let (_dir, path) = file_with(&vec![b'k'; TOKEN_FILE_MAX_BYTES + 1], 0o600);
        let error = read_token_file(&path).unwrap_err().to_string();
        assert!(
            error.contains(&format!("{} is longer than 4096 bytes", path.display())),
            "{error}"
        );
        let error = read_token_file(Path::new("/dev/zero"))
            .unwrap_err()
            .to_string();
        assert!(error.starts_with("/dev/zero is longer than"), "{error}");
        let (_dir, path) = file_with(b"\n\n", 0o600);
        assert!(matches!(
            read_token_file(&path),
            Err(TokenFileError::Empty { .. })
        ));
        let (_dir, path) = file_with(b"\xff\xfe\n", 0o600);
        assert!(matches!(
            read_token_file(&path),
            Err(TokenFileError::File(OptionFileError::NotText { .. }))
        ));
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success());
        assert!(matches!(
            read_token_file(&fifo),
            Err(TokenFileError::File(OptionFileError::NotAFile { .. }))
        ));
        let error = read_token_file(Path::new("/nonexistent/token"))
            .unwrap_err()
            .to_string();
        assert!(
            error.starts_with("can't read /nonexistent/token: "),
            "{error}"
        );
    }
}
