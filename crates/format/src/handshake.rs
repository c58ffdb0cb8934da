//! The wire's authentication (docs/protocol.md, docs/security.md): a challenge–response in both
//! directions keyed by the role's credential, so that the credential itself never travels, an
//! agent talks only to a collector that proves it knows the agent credential, and an agent's id
//! stays bound to the key pair of the agent that first used it.
//!
//! Sans-IO: [`ClientHandshake`] and [`ServerHandshake`] take frames and say what to send; the
//! agent (blocking, with read timeouts), the control and replay clients (blocking) and the
//! collector (async) each drive them with their own I/O.
//!
//! Exchange, with `K` the role's credential (agent or control token):
//! 1. client → Hello (JSON, with a fresh 32-byte nonce and, for agents, an Ed25519 public key);
//! 2. collector → Challenge `{nonce, proof}`: its own nonce and `HMAC-SHA256(K, "collector" ‖ T)`
//!    where `T = SHA-256(hello payload ‖ collector nonce)`;
//! 3. client checks the proof (a peer that can't is refused, and learns nothing of `K`), then
//!    → Proof `{proof, signature}`: `HMAC-SHA256(K, "client" ‖ T)` and, for agents, the
//!    Ed25519 signature of `"agent identity" ‖ T`;
//! 4. collector checks both (the public key must be the one the agent id was first seen with)
//!    → Welcome, or Refused.
//!
//! Both sides then hold a session key `HMAC-SHA256(K, "session" ‖ T)` with which the collector
//! signs every command it sends to an agent ([`CommandSigner`]), so that commands can't be
//! injected into an authenticated connection by someone who does not know `K`.

use ring::{digest, hmac, rand, signature};
use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::wire::{self, FrameKind, Hello, Refusal, Role, Welcome, WireFrame};

/// Bytes of each side's nonce.
pub const NONCE_LEN: usize = 32;
/// Bytes of the MAC appended to each command record.
pub const COMMAND_MAC_LEN: usize = 32;

/// Why a handshake did not complete.
#[derive(Debug, Error)]
pub enum HandshakeError {
    /// The collector refused, saying why; `retry` is false where retrying can't help.
    #[error("refused by the collector: {}", .0.reason)]
    Refused(Refusal),
    /// The peer answered the hello without proving it knows the credential.
    #[error("the peer could not prove it knows the {0} credential: it is not our collector (or its credential differs); nothing secret was sent to it")]
    PeerUnproven(&'static str),
    #[error("{0}")]
    Wire(#[from] wire::WireError),
    #[error("unexpected {0:?} frame during the handshake")]
    Unexpected(FrameKind),
    #[error("{0}")]
    Crypto(String),
}

impl HandshakeError {
    /// Whether connecting again could succeed without someone changing a configuration.
    pub fn retryable(&self) -> bool {
        match self {
            HandshakeError::Refused(refusal) => refusal.retry,
            HandshakeError::PeerUnproven(_) => false,
            HandshakeError::Wire(_) | HandshakeError::Unexpected(_) => true,
            HandshakeError::Crypto(_) => false,
        }
    }
}

/// The collector's challenge: its nonce and its proof of the credential.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Challenge {
    #[serde(with = "hex_bytes")]
    pub nonce: Vec<u8>,
    #[serde(with = "hex_bytes")]
    pub proof: Vec<u8>,
}

/// The client's answer: its proof of the credential and, for agents, its identity signature.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Proof {
    #[serde(with = "hex_bytes")]
    pub proof: Vec<u8>,
    #[serde(default, with = "hex_bytes")]
    pub signature: Vec<u8>,
}

mod hex_bytes {
    pub fn serialize<S: serde::Serializer>(bytes: &[u8], out: S) -> Result<S::Ok, S::Error> {
        out.serialize_str(&hex::encode(bytes))
    }
    pub fn deserialize<'de, D: serde::Deserializer<'de>>(input: D) -> Result<Vec<u8>, D::Error> {
        let text: String = serde::Deserialize::deserialize(input)?;
        hex::decode(text).map_err(serde::de::Error::custom)
    }
}

fn random_bytes<const N: usize>() -> Result<[u8; N], HandshakeError> {
    let mut bytes = [0u8; N];
    rand::SecureRandom::fill(&rand::SystemRandom::new(), &mut bytes)
        .map_err(|_| HandshakeError::Crypto("the system's random source failed".into()))?;
    Ok(bytes)
}

/// A fresh nonce, hex-encoded as a hello carries it.
pub fn fresh_nonce() -> Result<String, HandshakeError> {
    Ok(hex::encode(random_bytes::<NONCE_LEN>()?))
}

/// `T`: what both proofs and the session key are computed over.
fn transcript(hello_payload: &[u8], server_nonce: &[u8]) -> digest::Digest {
    let mut context = digest::Context::new(&digest::SHA256);
    context.update(b"openprof handshake v2\0");
    context.update(&(hello_payload.len() as u64).to_be_bytes());
    context.update(hello_payload);
    context.update(server_nonce);
    context.finish()
}

fn mac(credential: &[u8], label: &[u8], transcript: &digest::Digest) -> hmac::Tag {
    let key = hmac::Key::new(hmac::HMAC_SHA256, credential);
    let mut context = hmac::Context::with_key(&key);
    context.update(label);
    context.update(transcript.as_ref());
    context.sign()
}

fn verify(credential: &[u8], label: &[u8], transcript: &digest::Digest, tag: &[u8]) -> bool {
    let key = hmac::Key::new(hmac::HMAC_SHA256, credential);
    let mut message = label.to_vec();
    message.extend_from_slice(transcript.as_ref());
    // ring compares in constant time.
    hmac::verify(&key, &message, tag).is_ok()
}

const COLLECTOR_LABEL: &[u8] = b"collector";
const CLIENT_LABEL: &[u8] = b"client";
const SESSION_LABEL: &[u8] = b"session";
const IDENTITY_LABEL: &[u8] = b"agent identity";

fn role_name(role: Role) -> &'static str {
    match role {
        Role::Agent => "agent",
        Role::Control => "control",
    }
}

/// An agent's identity: an Ed25519 key pair made at start-up, whose public half the collector
/// binds to the agent id the first time it sees it.
pub struct Identity {
    pair: signature::Ed25519KeyPair,
}

impl Identity {
    pub fn generate() -> Result<Identity, HandshakeError> {
        let random = rand::SystemRandom::new();
        let document = signature::Ed25519KeyPair::generate_pkcs8(&random)
            .map_err(|_| HandshakeError::Crypto("can't make an Ed25519 key pair".into()))?;
        let pair = signature::Ed25519KeyPair::from_pkcs8(document.as_ref())
            .map_err(|_| HandshakeError::Crypto("can't read the new Ed25519 key pair".into()))?;
        Ok(Identity { pair })
    }

    /// The public key, hex-encoded as a hello carries it.
    pub fn public_hex(&self) -> String {
        use signature::KeyPair;
        hex::encode(self.pair.public_key().as_ref())
    }
}

/// Signs commands (collector) or checks them (agent) with the session key.
#[derive(Clone)]
pub struct CommandSigner {
    key: hmac::Key,
}

impl CommandSigner {
    fn new(credential: &[u8], transcript: &digest::Digest) -> CommandSigner {
        let session = mac(credential, SESSION_LABEL, transcript);
        CommandSigner {
            key: hmac::Key::new(hmac::HMAC_SHA256, session.as_ref()),
        }
    }

    /// A command record with its MAC appended.
    pub fn seal(&self, record: &[u8]) -> Vec<u8> {
        let mut sealed = record.to_vec();
        sealed.extend_from_slice(hmac::sign(&self.key, record).as_ref());
        sealed
    }

    /// The record of a sealed command, if its MAC is right.
    pub fn open<'a>(&self, sealed: &'a [u8]) -> Option<&'a [u8]> {
        let split = sealed.len().checked_sub(COMMAND_MAC_LEN)?;
        let (record, tag) = sealed.split_at(split);
        hmac::verify(&self.key, record, tag).ok()?;
        Some(record)
    }
}

/// The client's side: say hello, check the collector's proof, prove.
pub struct ClientHandshake {
    credential: Vec<u8>,
    role: Role,
    hello_payload: Vec<u8>,
    identity: Option<std::sync::Arc<Identity>>,
    proven: Option<CommandSigner>,
}

/// What the client does next.
pub enum ClientStep {
    /// Send this frame (already encoded) and wait for the next.
    Send(Vec<u8>),
    /// The collector accepted: the session's command key and the welcome.
    Done(CommandSigner, Welcome),
}

impl ClientHandshake {
    /// Starts a handshake: fills the hello's nonce (and identity, for agents) and returns the
    /// encoded Hello frame to send first.
    pub fn start(
        mut hello: Hello,
        credential: &str,
        identity: Option<std::sync::Arc<Identity>>,
    ) -> Result<(ClientHandshake, Vec<u8>), HandshakeError> {
        hello.version = wire::PROTOCOL_VERSION;
        hello.nonce = fresh_nonce()?;
        hello.identity = identity.as_ref().map(|identity| identity.public_hex());
        let hello_payload = wire::to_json(&hello);
        let mut frame = Vec::new();
        wire::encode_frame(FrameKind::Hello, &hello_payload, &mut frame);
        Ok((
            ClientHandshake {
                credential: credential.as_bytes().to_vec(),
                role: hello.role,
                hello_payload,
                identity,
                proven: None,
            },
            frame,
        ))
    }

    /// Takes the collector's next frame.
    pub fn on_frame(&mut self, frame: WireFrame) -> Result<ClientStep, HandshakeError> {
        match (frame.kind, &self.proven) {
            (FrameKind::Refused, _) => {
                Err(HandshakeError::Refused(Refusal::decode(&frame.payload)))
            }
            (FrameKind::Challenge, None) => {
                let challenge: Challenge = wire::parse_json(frame.kind, &frame.payload)?;
                let transcript = transcript(&self.hello_payload, &challenge.nonce);
                if challenge.nonce.len() != NONCE_LEN
                    || !verify(
                        &self.credential,
                        COLLECTOR_LABEL,
                        &transcript,
                        &challenge.proof,
                    )
                {
                    return Err(HandshakeError::PeerUnproven(role_name(self.role)));
                }
                let signature = match &self.identity {
                    Some(identity) => {
                        let mut message = IDENTITY_LABEL.to_vec();
                        message.extend_from_slice(transcript.as_ref());
                        identity.pair.sign(&message).as_ref().to_vec()
                    }
                    None => Vec::new(),
                };
                let proof = Proof {
                    proof: mac(&self.credential, CLIENT_LABEL, &transcript)
                        .as_ref()
                        .to_vec(),
                    signature,
                };
                self.proven = Some(CommandSigner::new(&self.credential, &transcript));
                let mut out = Vec::new();
                wire::encode_frame(FrameKind::Proof, &wire::to_json(&proof), &mut out);
                Ok(ClientStep::Send(out))
            }
            (FrameKind::Welcome, Some(signer)) => {
                let welcome: Welcome = wire::parse_json(frame.kind, &frame.payload)?;
                Ok(ClientStep::Done(signer.clone(), welcome))
            }
            (other, _) => Err(HandshakeError::Unexpected(other)),
        }
    }
}

/// The collector's side, once it has the hello.
pub struct ServerHandshake {
    hello: Hello,
    hello_payload: Vec<u8>,
    nonce: [u8; NONCE_LEN],
}

impl ServerHandshake {
    /// Reads a hello frame: its shape only. Nothing in it is trusted until [`Self::finish`].
    pub fn start(hello_payload: &[u8]) -> Result<ServerHandshake, String> {
        let hello: Hello =
            wire::parse_json(FrameKind::Hello, hello_payload).map_err(|error| error.to_string())?;
        if hello.version != wire::PROTOCOL_VERSION {
            return Err(format!(
                "protocol version {} is not spoken here (this collector speaks {})",
                hello.version,
                wire::PROTOCOL_VERSION
            ));
        }
        match hex::decode(&hello.nonce) {
            Ok(nonce) if nonce.len() == NONCE_LEN => {}
            _ => {
                return Err(format!(
                    "the hello's nonce must be {NONCE_LEN} bytes in hex"
                ))
            }
        }
        if hello.role == Role::Agent {
            if hello.agent_id.is_none() {
                return Err("an agent's hello must carry its agent_id".into());
            }
            match hello.identity.as_deref().map(hex::decode) {
                Some(Ok(key)) if key.len() == 32 => {}
                _ => return Err("an agent's hello must carry its Ed25519 identity key".into()),
            }
        }
        let nonce = random_bytes::<NONCE_LEN>().map_err(|error| error.to_string())?;
        Ok(ServerHandshake {
            hello,
            hello_payload: hello_payload.to_vec(),
            nonce,
        })
    }

    pub fn hello(&self) -> &Hello {
        &self.hello
    }

    /// The Challenge frame's payload, proving the credential of the hello's role.
    pub fn challenge(&self, credential: &[u8]) -> Vec<u8> {
        let transcript = transcript(&self.hello_payload, &self.nonce);
        wire::to_json(&Challenge {
            nonce: self.nonce.to_vec(),
            proof: mac(credential, COLLECTOR_LABEL, &transcript)
                .as_ref()
                .to_vec(),
        })
    }

    /// Checks the client's Proof payload; on success the session's command key and, for
    /// agents, the identity key the signature was checked with.
    pub fn finish(
        &self,
        credential: &[u8],
        proof_payload: &[u8],
    ) -> Result<(CommandSigner, Option<Vec<u8>>), String> {
        let proof: Proof =
            wire::parse_json(FrameKind::Proof, proof_payload).map_err(|error| error.to_string())?;
        let transcript = transcript(&self.hello_payload, &self.nonce);
        if !verify(credential, CLIENT_LABEL, &transcript, &proof.proof) {
            return Err(format!("wrong {} credential", role_name(self.hello.role)));
        }
        let identity = match self.hello.role {
            Role::Control => None,
            Role::Agent => {
                let key = hex::decode(self.hello.identity.as_deref().unwrap_or(""))
                    .map_err(|_| "the identity key is not hex".to_string())?;
                let mut message = IDENTITY_LABEL.to_vec();
                message.extend_from_slice(transcript.as_ref());
                signature::UnparsedPublicKey::new(&signature::ED25519, &key)
                    .verify(&message, &proof.signature)
                    .map_err(|_| "the identity signature does not match the identity key")?;
                Some(key)
            }
        };
        Ok((CommandSigner::new(credential, &transcript), identity))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use uuid::Uuid;

    fn agent_hello() -> Hello {
        Hello::new(Role::Agent, Some(Uuid::new_v4()))
    }

    fn frame_of(bytes: &[u8]) -> WireFrame {
        let mut buffer = wire::FrameBuffer::default();
        buffer.push(bytes);
        buffer.next_frame().unwrap().unwrap()
    }

    /// Runs a handshake between a client with `client_key` and a server with `server_key`.
    fn run(client_key: &str, server_key: &str) -> Result<(), String> {
        let identity = Arc::new(Identity::generate().unwrap());
        let (mut client, hello) =
            ClientHandshake::start(agent_hello(), client_key, Some(identity)).unwrap();
        let hello = frame_of(&hello);
        assert!(
            !String::from_utf8_lossy(&hello.payload).contains(client_key),
            "the credential must not travel"
        );
        let server = ServerHandshake::start(&hello.payload)?;
        let mut challenge = Vec::new();
        wire::encode_frame(
            FrameKind::Challenge,
            &server.challenge(server_key.as_bytes()),
            &mut challenge,
        );
        let proof = match client.on_frame(frame_of(&challenge)) {
            Ok(ClientStep::Send(bytes)) => frame_of(&bytes),
            Ok(ClientStep::Done(..)) => panic!("done before the welcome"),
            Err(error) => return Err(format!("client: {error}")),
        };
        assert!(!String::from_utf8_lossy(&proof.payload).contains(client_key));
        let (server_signer, _) = server.finish(server_key.as_bytes(), &proof.payload)?;
        let mut welcome = Vec::new();
        wire::encode_frame(
            FrameKind::Welcome,
            &wire::to_json(&Welcome {
                version: wire::PROTOCOL_VERSION,
                resume_after: 0,
            }),
            &mut welcome,
        );
        match client.on_frame(frame_of(&welcome)) {
            Ok(ClientStep::Done(client_signer, _)) => {
                let sealed = server_signer.seal(b"command");
                assert_eq!(client_signer.open(&sealed), Some(&b"command"[..]));
                let mut forged = sealed.clone();
                forged[0] ^= 1;
                assert_eq!(client_signer.open(&forged), None);
                Ok(())
            }
            _ => Err("no welcome".into()),
        }
    }

    #[test]
    fn both_sides_prove_the_same_credential() {
        run("s3cret", "s3cret").unwrap();
    }

    #[test]
    fn a_collector_with_another_credential_is_not_believed() {
        let error = run("s3cret", "other").unwrap_err();
        assert!(error.contains("could not prove"), "{error}");
    }

    #[test]
    fn a_client_that_cannot_prove_is_refused() {
        // A server that does not check its own proof's key: the client's proof is then made
        // with the client's key and must fail the server's check.
        let identity = Arc::new(Identity::generate().unwrap());
        let (_, hello) = ClientHandshake::start(agent_hello(), "guess", Some(identity)).unwrap();
        let hello = frame_of(&hello);
        let server = ServerHandshake::start(&hello.payload).unwrap();
        let forged = wire::to_json(&Proof {
            proof: vec![0; 32],
            signature: vec![0; 64],
        });
        let error = server.finish(b"s3cret", &forged).err().unwrap();
        assert!(error.contains("wrong agent credential"), "{error}");
    }

    #[test]
    fn an_identity_signature_by_another_key_is_refused() {
        // The hello names one key; the proof is signed with another.
        let named = Identity::generate().unwrap();
        let signing = Identity::generate().unwrap();
        let mut hello = agent_hello();
        hello.nonce = fresh_nonce().unwrap();
        hello.identity = Some(named.public_hex());
        let payload = wire::to_json(&hello);
        let server = ServerHandshake::start(&payload).unwrap();
        let challenge: Challenge =
            wire::parse_json(FrameKind::Challenge, &server.challenge(b"k")).unwrap();
        let transcript = transcript(&payload, &challenge.nonce);
        let mut message = IDENTITY_LABEL.to_vec();
        message.extend_from_slice(transcript.as_ref());
        let proof = wire::to_json(&Proof {
            proof: mac(b"k", CLIENT_LABEL, &transcript).as_ref().to_vec(),
            signature: signing.pair.sign(&message).as_ref().to_vec(),
        });
        let error = server.finish(b"k", &proof).err().unwrap();
        assert!(error.contains("identity signature"), "{error}");
    }

    #[test]
    fn a_tampered_hello_is_noticed_by_the_client() {
        let identity = Arc::new(Identity::generate().unwrap());
        let mut hello = agent_hello();
        // The hello claims someone else's public key.
        let other = Identity::generate().unwrap();
        let (mut client, hello_bytes) =
            ClientHandshake::start(hello.clone(), "k", Some(identity)).unwrap();
        let mut payload: Hello =
            wire::parse_json(FrameKind::Hello, &frame_of(&hello_bytes).payload).unwrap();
        payload.identity = Some(other.public_hex());
        hello.nonce = payload.nonce.clone();
        let tampered = wire::to_json(&payload);
        let server = ServerHandshake::start(&tampered).unwrap();
        let mut challenge = Vec::new();
        wire::encode_frame(
            FrameKind::Challenge,
            &server.challenge(b"k"),
            &mut challenge,
        );
        // The client's transcript holds its own hello, so it does not believe the challenge
        // made over the tampered one.
        assert!(matches!(
            client.on_frame(frame_of(&challenge)),
            Err(HandshakeError::PeerUnproven(_))
        ));
    }

    #[test]
    fn hellos_without_nonce_or_identity_are_refused() {
        let mut hello = agent_hello();
        hello.nonce = "00".into();
        assert!(ServerHandshake::start(&wire::to_json(&hello))
            .err()
            .unwrap()
            .contains("nonce"));
        hello.nonce = fresh_nonce().unwrap();
        assert!(ServerHandshake::start(&wire::to_json(&hello))
            .err()
            .unwrap()
            .contains("identity"));
    }
}
