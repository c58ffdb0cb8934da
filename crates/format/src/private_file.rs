//! Output files that can hold secrets (profiles, heap dumps, traces, exports): created private
//! to their owner whatever the umask, and never written through a link found at their path.

use std::fs::{self, File, OpenOptions, Permissions};
use std::io;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// The mode of every output file: its owner's alone.
pub const PRIVATE_MODE: u32 = 0o600;

/// What to do with a symbolic link found where the file goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AtALink {
    /// Fail: whoever made the link may have meant it (or meant harm).
    Refuse,
    /// Remove the link itself and create the file in its place.
    Replace,
}

/// Why the file was not created. The messages say what is wrong with the path, and read after
/// its name: "out.txt is a symbolic link; ...".
#[derive(Debug, thiserror::Error)]
pub enum PrivateFileError {
    #[error("is a symbolic link; refusing to write through it")]
    Link,
    #[error(
        "is not a regular file (a directory, a device, a FIFO or a socket); refusing to replace it"
    )]
    NotRegular,
    #[error("could not be removed to be replaced: {0}")]
    Remove(io::Error),
    #[error("could not be created: {0}")]
    Create(io::Error),
}

/// Creates `path` afresh with mode 0600 and opens it for writing. A regular file already there
/// is replaced (removed, then created anew, so that a file someone else holds open or links to
/// is not the one written); a link is refused or replaced, never followed.
pub fn create_private(path: &Path, at_a_link: AtALink) -> Result<File, PrivateFileError> {
    match fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_symlink() && at_a_link == AtALink::Refuse => {
            return Err(PrivateFileError::Link)
        }
        Ok(meta) if meta.file_type().is_symlink() || meta.is_file() => {
            match fs::remove_file(path) {
                Ok(()) => {}
                Err(error) if error.kind() == io::ErrorKind::NotFound => {}
                Err(error) => return Err(PrivateFileError::Remove(error)),
            }
        }
        Ok(_) => return Err(PrivateFileError::NotRegular),
        Err(error) if error.kind() == io::ErrorKind::NotFound => {}
        Err(error) => return Err(PrivateFileError::Create(error)),
    }
    // create_new (O_EXCL) fails on anything that appeared meanwhile, a link included; O_NOFOLLOW
    // says the same to a kernel that would not.
    let file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(PRIVATE_MODE)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(PrivateFileError::Create)?;
    // The umask only takes bits away from the mode given at creation, and one without the
    // owner's bits would take too many: set the mode outright.
    file.set_permissions(Permissions::from_mode(PRIVATE_MODE))
        .map_err(PrivateFileError::Create)?;
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::fs::MetadataExt;

    fn mode(path: &Path) -> u32 {
        fs::symlink_metadata(path).unwrap().mode() & 0o7777
    }

    #[test]
    fn new_and_replaced_files_are_private() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out");
        create_private(&path, AtALink::Refuse)
            .unwrap()
            .write_all(b"one")
            .unwrap();
        assert_eq!(mode(&path), 0o600);
        fs::set_permissions(&path, Permissions::from_mode(0o644)).unwrap();
        create_private(&path, AtALink::Refuse)
            .unwrap()
            .write_all(b"two")
            .unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"two");
        assert_eq!(mode(&path), 0o600);
    }

    #[test]
    fn links_are_refused_or_replaced_never_followed() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        fs::write(&victim, "victim").unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        assert!(matches!(
            create_private(&link, AtALink::Refuse),
            Err(PrivateFileError::Link)
        ));
        create_private(&link, AtALink::Replace)
            .unwrap()
            .write_all(b"new")
            .unwrap();
        assert_eq!(fs::read_to_string(&victim).unwrap(), "victim");
        assert!(fs::symlink_metadata(&link).unwrap().is_file());
        assert_eq!(fs::read(&link).unwrap(), b"new");
    }

    #[test]
    fn directories_and_devices_are_not_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let error = create_private(dir.path(), AtALink::Replace).unwrap_err();
        assert!(matches!(error, PrivateFileError::NotRegular), "{error}");
        let error = create_private(Path::new("/dev/null"), AtALink::Replace).unwrap_err();
        assert!(matches!(error, PrivateFileError::NotRegular), "{error}");
        assert!(Path::new("/dev/null").exists());
        let error = create_private(&dir.path().join("no/such/dir"), AtALink::Refuse).unwrap_err();
        assert!(
            error.to_string().starts_with("could not be created: "),
            "{error}"
        );
    }
}
