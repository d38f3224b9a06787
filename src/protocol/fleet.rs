//! Fleet mode's wire types: `fleet.status` and the `fleet` part of `host.health`
//! (proto-docs/fleet.md).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// One daemon of the fleet as the database knows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct FleetMember {
    /// `m-` and 12 hex digits, new at each start.
    pub id: String,
    pub host: String,
    pub version: String,
    /// Where it listens (socket, TCP address).
    pub listeners: Vec<String>,
    /// Where other members reach it (`fleet.internal_url`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub internal_url: Option<String>,
    /// When it registered, ms since the epoch (the database's clock).
    pub started_ms: u64,
    /// Its last heartbeat, ms since the epoch (the database's clock).
    pub heartbeat_ms: u64,
    /// How old its heartbeat is now, by the database's clock.
    pub heartbeat_age_ms: u64,
    /// `live`, or `lost` once its heartbeat is older than `fleet.lost_after_ms`.
    pub state: FleetMemberState,
    /// Its MCP servers and their states, as of its last heartbeat.
    pub servers: Vec<FleetServer>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum FleetMemberState {
    Live,
    Lost,
}

/// One MCP server of a member.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct FleetServer {
    pub name: String,
    pub state: String,
}

/// `fleet.status`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct FleetStatusResult {
    /// This daemon's member id.
    pub member: String,
    /// The database's state as this member sees it.
    pub database: FleetHealth,
    /// Every registered member, oldest first (empty while the database is unreachable).
    pub members: Vec<FleetMember>,
}

/// The fleet store's health, part of `host.health` in fleet mode.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct FleetHealth {
    /// This daemon's member id.
    pub member: String,
    /// Whether the last exchange with the database worked; `false` makes the daemon
    /// `degraded` (it keeps serving local work and queues what must be written).
    pub reachable: bool,
    /// The last failure, while unreachable (never a password).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Writes waiting for the database (approval entries and endings, audit records).
    pub queued: usize,
    /// Writes dropped because the queue was full since start.
    pub dropped: u64,
    /// The schema version in use.
    pub schema_version: i32,
}

/// `fleet.token_create`: a bearer token for a user of the fleet.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct FleetTokenCreateParams {
    /// The user the token stands for (letters, digits, `.`, `_`, `-`, `@`; 1–64).
    pub user: String,
    /// The roles the token carries (names like a user's), e.g. `approver` for
    /// `fleet.approver_role`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub roles: Vec<String>,
}

/// `fleet.token_create`: the token, shown this once (the database keeps its SHA-256 only).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct FleetTokenCreated {
    /// `tok-` and 12 hex digits: what `fleet.token_revoke` names.
    pub id: String,
    pub user: String,
    /// Its roles, sorted.
    #[serde(default)]
    pub roles: Vec<String>,
    /// The bearer token itself.
    pub token: String,
}

/// `fleet.token_revoke`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct FleetTokenRevokeParams {
    /// The token's id (`fleet.token_list`).
    pub id: String,
}

/// `fleet.token_revoke`: whether this call revoked it (false: revoked already).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct FleetTokenRevokeResult {
    pub id: String,
    pub revoked: bool,
}

/// One user token as `fleet.token_list` shows it (never the token).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct FleetToken {
    pub id: String,
    pub user: String,
    /// When it was made, ms since the epoch, and on which member.
    pub created_ms: u64,
    pub created_on: String,
    /// When it was revoked, if it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revoked_ms: Option<u64>,
    /// The roles it carries.
    #[serde(default)]
    pub roles: Vec<String>,
}

/// `fleet.token_list`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct FleetTokenListResult {
    pub tokens: Vec<FleetToken>,
}
