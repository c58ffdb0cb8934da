//! Commands to live agents from the UI: sent through the collector as a control client (over
//! TLS, trusting the collector's own certificate, when it has TLS), with the control
//! credential, exactly as `openprof control` sends them (the same parsing and checks: an MPT
//! specification's fault is named by line and column before anything is sent), each recorded
//! in the action log with who asked. The live view's dumps go the same way, at most one per
//! agent every [`LIVE_DUMP_EVERY`].

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use openprof_collector::client;
use openprof_format::wire::{Command, ControlRequest};
use uuid::Uuid;

use crate::audit::Action;
use crate::auth::Caller;
use crate::Web;

/// How often the live view may have an agent dump what it sampled.
pub const LIVE_DUMP_EVERY: Duration = Duration::from_millis(1500);

/// What a command came to.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Outcome {
    pub ok: bool,
    pub message: String,
}

/// Parses a command as `openprof control` does: a name and at most one argument.
pub fn parse(name: &str, argument: Option<&str>) -> Result<Command, String> {
    client::parse_command(name, argument, 0, 0.0001)
}

/// Sends a command to one agent through the collector (blocking: call it off the runtime's
/// worker threads) and returns the agent's reply.
pub fn send(web: &Web, agent: Uuid, command: Command) -> Outcome {
    let Some(endpoint) = &web.config.collector else {
        return Outcome {
            ok: false,
            message: "no collector runs with this UI (openprof ui reads a store only): commands \
                      need openprof serve --http"
                .into(),
        };
    };
    let request = ControlRequest {
        agent: Some(agent),
        command,
    };
    match client::send_control(endpoint, &web.config.credential, &request) {
        Ok(response) => {
            if let Some(error) = response.error {
                return Outcome {
                    ok: false,
                    message: error,
                };
            }
            match response.replies.first() {
                Some(reply) => Outcome {
                    ok: reply.ok,
                    message: reply.message.clone(),
                },
                None => Outcome {
                    ok: false,
                    message: format!("agent {agent} did not answer"),
                },
            }
        }
        Err(error) => Outcome {
            ok: false,
            message: error,
        },
    }
}

/// Sends a command asked for in the UI and records it in the action log.
pub fn act(web: &Web, caller: &Caller, agent: Uuid, name: &str, argument: Option<&str>) -> Outcome {
    let described = match argument {
        Some(argument) => format!("{name} {argument}"),
        None => name.to_string(),
    };
    let outcome = match parse(name, argument) {
        Ok(command) => send(web, agent, command),
        Err(problem) => Outcome {
            ok: false,
            message: problem,
        },
    };
    web.audit.record(Action {
        time: chrono::Utc::now().to_rfc3339(),
        who: caller.describe(),
        action: described,
        agent: agent.to_string(),
        ok: outcome.ok,
        outcome: outcome.message.clone(),
    });
    outcome
}

/// When each agent was last asked for a live dump.
#[derive(Default)]
pub struct LiveDumps {
    last: Mutex<HashMap<Uuid, Instant>>,
}

impl LiveDumps {
    /// Asks the agent for a dump unless one was asked for within [`LIVE_DUMP_EVERY`]; whether
    /// one was asked for now.
    pub fn refresh(&self, web: &Web, agent: Uuid) -> Option<Outcome> {
        {
            let mut last = crate::api::lock(&self.last);
            let now = Instant::now();
            if last
                .get(&agent)
                .is_some_and(|asked| now.duration_since(*asked) < LIVE_DUMP_EVERY)
            {
                return None;
            }
            last.insert(agent, now);
        }
        Some(send(web, agent, Command::DumpProfile))
    }
}
