"""The session gateway: the agent a user serves, trained as it is. Each episode gets an
OpenAI-compatible ``/v1/chat/completions`` session that speaks token ids to OpenRLHF's engine
(docs/training.md, "Training the chat agent: gateway mode")."""

from parallelsearch.rl.gateway.errors import GatewayError
from parallelsearch.rl.gateway.session import GatewayCounters, GatewaySession, SessionLimits
from parallelsearch.rl.gateway.template import ChatTemplate
from parallelsearch.rl.gateway.transport import InProcessTransport, current_session, gateway_chat_model

__all__ = [
    "ChatTemplate",
    "GatewayCounters",
    "GatewayError",
    "GatewaySession",
    "InProcessTransport",
    "SessionLimits",
    "current_session",
    "gateway_chat_model",
]
