//! The invocation context a call carries from one JVM to another (in an HTTP request's
//! `X-Openprof-Context` header): which agent's methodCall sent it, so that the callee's agent
//! can write an invocationContext naming it and a collector can join the two traces. A value is
//! `openprof-context/1;node=UUID;process=UUID;agent=UUID;thread=N;ticket=N`; anything else is
//! not one (it comes from the network: it is parsed strictly and never trusted beyond that).

use uuid::Uuid;

const VERSION: &str = "openprof-context/1";

/// The longest value read: a real one is about 190 bytes.
pub const MAX_CONTEXT_BYTES: usize = 512;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InvocationContext {
    pub node: Uuid,
    pub process: Uuid,
    pub agent: Uuid,
    /// The calling thread's id in the caller's trace.
    pub thread: u32,
    /// The caller's methodCall's ticket.
    pub ticket: u128,
}

impl InvocationContext {
    /// The header's value.
    pub fn to_header(&self) -> String {
        format!(
            "{VERSION};node={};process={};agent={};thread={};ticket={}",
            self.node, self.process, self.agent, self.thread, self.ticket
        )
    }

    /// A header's value, or why it is not one.
    pub fn parse(value: &str) -> Result<InvocationContext, String> {
        if value.len() > MAX_CONTEXT_BYTES {
            return Err(format!("longer than {MAX_CONTEXT_BYTES} bytes"));
        }
        let mut parts = value.split(';');
        if parts.next() != Some(VERSION) {
            return Err(format!("does not start with {VERSION}"));
        }
        let mut fields = [None; 5];
        const NAMES: [&str; 5] = ["node", "process", "agent", "thread", "ticket"];
        for part in parts {
            let (name, text) = part
                .split_once('=')
                .ok_or_else(|| format!("'{part}' is not name=value"))?;
            let index = NAMES
                .iter()
                .position(|known| *known == name)
                .ok_or_else(|| format!("unknown field '{name}'"))?;
            if fields[index].replace(text).is_some() {
                return Err(format!("'{name}' given twice"));
            }
        }
        let field = |index: usize| fields[index].ok_or_else(|| format!("no '{}'", NAMES[index]));
        let uuid = |index: usize| -> Result<Uuid, String> {
            Uuid::parse_str(field(index)?).map_err(|_| format!("'{}' is not a UUID", NAMES[index]))
        };
        Ok(InvocationContext {
            node: uuid(0)?,
            process: uuid(1)?,
            agent: uuid(2)?,
            thread: field(3)?
                .parse()
                .map_err(|_| "'thread' is not a number".to_string())?,
            ticket: field(4)?
                .parse()
                .map_err(|_| "'ticket' is not a number".to_string())?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_context_reads_back_as_written_and_anything_else_is_refused() {
        let context = InvocationContext {
            node: Uuid::new_v4(),
            process: Uuid::new_v4(),
            agent: Uuid::new_v4(),
            thread: 200001,
            ticket: 42,
        };
        assert_eq!(InvocationContext::parse(&context.to_header()), Ok(context));
        let header = context.to_header();
        for (bad, why) in [
            ("", "does not start"),
            ("openprof-context/2;node=x", "does not start"),
            (
                &header.replace("ticket=42", "ticket=x"),
                "'ticket' is not a number",
            ),
            (
                &header.replace("ticket=42", "ticket=42;ticket=43"),
                "given twice",
            ),
            (&header.replace(";thread=200001", ""), "no 'thread'"),
            (&format!("{header};color=red"), "unknown field"),
            (&"x".repeat(600), "longer than"),
        ] {
            let error = InvocationContext::parse(bad).unwrap_err();
            assert!(error.contains(why), "{bad}: {error}");
        }
    }
}
