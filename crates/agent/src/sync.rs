//! Locking that survives a panic: the agent catches panics at the JVM's boundary and carries on,
//! so a mutex poisoned by one must still give its data to the next user.

use std::sync::{Mutex, MutexGuard};

/// Locks `mutex`, taking the data even if a thread panicked while holding it.
pub fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
