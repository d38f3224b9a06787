//! Which call a server's own request or log message belongs to, so it reaches the
//! frontend of that call and no other.
//!
//! Every `tools/call` in flight to a server is entered here, with the questions of its host
//! call, before its request is written. The rule for a message of the server:
//!
//! - Streamable HTTP: a message that came on the response stream of one of our POSTs names
//!   that request exactly (rmcp's `InboundStreamOrigin`); it belongs to that call. One on
//!   a POST's stream that is no call's belongs to no call.
//! - stdio, the standalone stream of Streamable HTTP, and whenever the transport says
//!   nothing: no link between a server's request and the call it serves, so only timing
//!   is left (servers built on the TypeScript SDK send a tool's `elicitation/create` on
//!   the standalone stream unless the tool names its request, as the conformance suite's
//!   `elicitation-sep1034-client-defaults` server does). With
//!   exactly one call in flight the message is that call's; with none it belongs to no call;
//!   with several it is **ambiguous** and goes to none of them, so a frontend never sees
//!   another's question. An ambiguous `elicitation/create` or `sampling/createMessage` is
//!   refused, an ambiguous `roots/list` gets the server's own root, an ambiguous log message
//!   goes only to the daemon's log.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use rmcp::model::RequestId;
use rmcp::service::InboundStreamOrigin;

use crate::inputs::CallInputs;
use crate::lock;

/// The calls in flight to one server.
#[derive(Default)]
pub struct Origins {
    calls: Mutex<Vec<Entry>>,
    next: AtomicU64,
}

struct Entry {
    key: u64,
    /// The request id, once sent through rmcp (HTTP); stdio calls need none.
    request: Option<RequestId>,
    inputs: Arc<CallInputs>,
}

/// Whose a server's message is.
pub enum Owner {
    Call(Arc<CallInputs>),
    /// No call's: outside any call, or on a stream of no call.
    Nobody,
    /// One of several calls in flight, which one unknown (see the module doc).
    Ambiguous(usize),
}

impl Origins {
    /// Enters a call; it leaves when the returned guard is dropped.
    pub fn enter(self: &Arc<Self>, inputs: Arc<CallInputs>) -> InFlight {
        let key = self.next.fetch_add(1, Ordering::Relaxed);
        lock(&self.calls).push(Entry {
            key,
            request: None,
            inputs,
        });
        InFlight {
            origins: self.clone(),
            key,
        }
    }

    /// The owner of a message that came with `origin` (see the module doc).
    pub fn owner(&self, origin: Option<&InboundStreamOrigin>) -> Owner {
        let calls = lock(&self.calls);
        match origin {
            Some(InboundStreamOrigin::OutboundRequest(id)) => calls
                .iter()
                .find(|e| e.request.as_ref() == Some(id))
                .map_or(Owner::Nobody, |e| Owner::Call(e.inputs.clone())),
            Some(InboundStreamOrigin::Unassociated) | None => match calls.as_slice() {
                [] => Owner::Nobody,
                [only] => Owner::Call(only.inputs.clone()),
                many => Owner::Ambiguous(many.len()),
            },
        }
    }
}

/// A call entered in [`Origins`]; leaves on drop.
pub struct InFlight {
    origins: Arc<Origins>,
    key: u64,
}

impl InFlight {
    /// Records the id rmcp gave the call's request (HTTP: the server's messages name it).
    pub fn sent(&self, id: RequestId) {
        if let Some(e) = lock(&self.origins.calls)
            .iter_mut()
            .find(|e| e.key == self.key)
        {
            e.request = Some(id);
        }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        lock(&self.origins.calls).retain(|e| e.key != self.key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inputs(id: &str) -> Arc<CallInputs> {
        Arc::new(CallInputs::unanswered(id))
    }

    #[test]
    fn one_call_owns_by_timing_several_by_their_stream_only() {
        let origins = Arc::new(Origins::default());
        let standalone = InboundStreamOrigin::Unassociated;
        assert!(matches!(origins.owner(None), Owner::Nobody));
        assert!(matches!(origins.owner(Some(&standalone)), Owner::Nobody));
        let a = origins.enter(inputs("a"));
        assert!(matches!(origins.owner(None), Owner::Call(_)));
        assert!(matches!(origins.owner(Some(&standalone)), Owner::Call(_)));
        let b = origins.enter(inputs("b"));
        assert!(matches!(origins.owner(None), Owner::Ambiguous(2)));
        b.sent(RequestId::Number(7));
        let on_b = InboundStreamOrigin::OutboundRequest(RequestId::Number(7));
        assert!(matches!(origins.owner(Some(&on_b)), Owner::Call(_)));
        let elsewhere = InboundStreamOrigin::OutboundRequest(RequestId::Number(8));
        assert!(matches!(origins.owner(Some(&elsewhere)), Owner::Nobody));
        assert!(matches!(
            origins.owner(Some(&standalone)),
            Owner::Ambiguous(2)
        ));
        drop(b);
        assert!(matches!(origins.owner(Some(&on_b)), Owner::Nobody));
        drop(a);
        assert!(matches!(origins.owner(None), Owner::Nobody));
    }
}
