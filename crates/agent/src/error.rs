//! The agent's errors: why it does not start, or why one of its parts does not work, each a
//! sentence the user reads after "openprof ERROR: " or "openprof: ".

use crate::jvmti::JvmtiError;

#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// An option is wrong or not to be had (its own message names it).
    #[error(transparent)]
    Option(#[from] openprof_format::options::OptionError),
    /// A JVMTI call the agent needs failed; `doing` says what for.
    #[error("{doing}: {source}")]
    Jvmti {
        doing: &'static str,
        #[source]
        source: JvmtiError,
    },
    /// Anything else the agent refuses or cannot do, in words.
    #[error("{0}")]
    Refused(String),
}

pub type AgentResult<T> = Result<T, AgentError>;

impl From<String> for AgentError {
    fn from(message: String) -> Self {
        AgentError::Refused(message)
    }
}

impl From<&str> for AgentError {
    fn from(message: &str) -> Self {
        AgentError::Refused(message.to_string())
    }
}

/// Names what a failed JVMTI call was for.
pub trait JvmtiContext<T> {
    fn doing(self, doing: &'static str) -> AgentResult<T>;
}

impl<T> JvmtiContext<T> for Result<T, JvmtiError> {
    fn doing(self, doing: &'static str) -> AgentResult<T> {
        self.map_err(|source| AgentError::Jvmti { doing, source })
    }
}
