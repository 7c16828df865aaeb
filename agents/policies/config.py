"""Policy configuration: which backend writes the turns, and how to reach it. The app's settings
inherit these fields and ``graphs.factory.make_policy`` alone turns them into a policy
(docs/architecture.md, "Configuration")."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from parallelsearch.agents.policies.spec import DEFAULT_OPENAI_BASE_URL, SPEC_HELP

#: the one declaration of the default policy (offline demos and environment checks)
DEFAULT_POLICY = "oracle"

# the constrained-decoding knobs, declared once for the app's settings and the agent config
Constrained = Annotated[
    bool,
    Field(
        description="generate every turn under the protocol's grammar (vLLM structured outputs: vllm:PATH, "
        "or openai:MODEL@URL against vllm serve), so a model never breaks the format"
    ),
]
ConstrainedThinkChars = Annotated[
    int, Field(ge=1, le=100_000, description="longest <think> a constrained turn may write")
]


class PolicyConfig(BaseModel):
    """The policy spec plus what the OpenAI-compatible backend needs to reach its server."""

    model_config = ConfigDict(extra="forbid")

    policy: str = Field(DEFAULT_POLICY, description=SPEC_HELP)
    answer_policy: str | None = Field(
        None, description="a separate policy spec for the answer turn (default: the policy itself)"
    )
    openai_base_url: str = Field(
        DEFAULT_OPENAI_BASE_URL, description="base URL for 'openai:MODEL' specs that name no URL"
    )
    policy_base_url: str | None = Field(
        None,
        description="the server a 'chat:' policy's model talks to (init_chat_model's base_url, such as "
        "http://HOST:8000/v1 for vllm serve behind chat:openai:MODEL); None = the provider's default "
        "(OPENAI_BASE_URL, else api.openai.com, for openai)",
    )
    openai_api_key: str | None = Field(
        None, repr=False, description="bearer token for the OpenAI-compatible server (also OPENAI_API_KEY)"
    )
    openai_ca_bundle: str | None = Field(
        None,
        description="CA certificates (PEM) an https:// 'openai:' server's certificate is verified against "
        "(default: SSL_CERT_FILE, else certifi's bundle)",
    )
    request_timeout_s: float = Field(120.0, gt=0, description="per-request timeout of remote policies")
    constrained: Constrained = False
    constrained_think_chars: ConstrainedThinkChars = 600
    vllm_engine_args: dict[str, Any] = Field(
        default_factory=dict,
        description="vllm.AsyncEngineArgs for vllm:PATH (dtype, max_model_len, gpu_memory_utilization, ...)",
    )

    def policy_config(self) -> PolicyConfig:
        """Just these fields, as a plain :class:`PolicyConfig` (for models that extend it)."""
        return PolicyConfig.model_validate({name: getattr(self, name) for name in PolicyConfig.model_fields})
