//! Finds the JDK to run: `$JAVA_HOME` first, then `java` on `PATH` (following links to its home).

use std::env;
use std::path::{Path, PathBuf};

/// A JDK (or JRE) installation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Jdk {
    pub home: PathBuf,
}

/// Why no JDK could be found, or a tool is missing from it.
#[derive(Debug, thiserror::Error)]
pub enum JdkError {
    #[error("JAVA_HOME is set to {0}, but {0}/bin/java does not exist; point JAVA_HOME at a JDK 11 or later")]
    BadJavaHome(PathBuf),
    #[error("no JDK found: JAVA_HOME is not set and there is no `java` on PATH; install a JDK 11 or later")]
    NotFound,
    #[error("the JDK at {home} has no {tool}; install a full JDK (not only a JRE)")]
    MissingTool { home: PathBuf, tool: String },
}

impl Jdk {
    /// The JDK named by `JAVA_HOME`, else the one whose `java` is first on `PATH`.
    pub fn find() -> Result<Jdk, JdkError> {
        if let Some(home) = env::var_os("JAVA_HOME").filter(|home| !home.is_empty()) {
            let home = PathBuf::from(home);
            if !home.join("bin/java").is_file() {
                return Err(JdkError::BadJavaHome(home));
            }
            return Ok(Jdk { home });
        }
        let java = find_on_path("java").ok_or(JdkError::NotFound)?;
        let java = java.canonicalize().unwrap_or(java);
        // <home>/bin/java: the home is two levels up.
        let home = java
            .parent()
            .and_then(Path::parent)
            .ok_or(JdkError::NotFound)?
            .to_path_buf();
        Ok(Jdk { home })
    }

    /// A tool of this JDK, such as `java`, `javac` or `jcmd`.
    pub fn tool(&self, name: &str) -> Result<PathBuf, JdkError> {
        let path = self.home.join("bin").join(name);
        if path.is_file() {
            Ok(path)
        } else {
            Err(JdkError::MissingTool {
                home: self.home.clone(),
                tool: name.to_string(),
            })
        }
    }

    pub fn java(&self) -> Result<PathBuf, JdkError> {
        self.tool("java")
    }

    pub fn javac(&self) -> Result<PathBuf, JdkError> {
        self.tool("javac")
    }
}

/// The first executable file called `name` in the directories of `PATH`.
pub fn find_on_path(name: &str) -> Option<PathBuf> {
    let path = env::var_os("PATH")?;
    env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_a_jdk_with_java_and_javac() {
        let jdk = Jdk::find().expect("a JDK is a prerequisite of the tests");
        assert!(jdk.java().unwrap().is_file());
        assert!(jdk.javac().unwrap().is_file());
        let missing = jdk.tool("no-such-tool").unwrap_err();
        assert!(missing.to_string().contains("no-such-tool"));
    }
}
