"""Graph configuration with the paper's defaults."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class GraphConfig(BaseModel):
    """Knobs of every graph builder (arguments with defaults, validated)."""

    model_config = ConfigDict(extra="forbid")

    top_k: int = Field(3, ge=1, le=100, description="passages per sub-query")
    max_turns: int = Field(4, ge=0, le=64, description="policy turns before the final answer-only turn")
    max_subqueries: int = Field(
        8, ge=1, le=256, description="more sub-queries in one search is an invalid action"
    )
    max_concurrency: int | None = Field(None, ge=1, description="searcher nodes running at once (None = all)")
    search_timeout_s: float = Field(10.0, gt=0, description="per-attempt searcher timeout")
    search_retries: int = Field(1, ge=0, le=5, description="extra attempts after a failed search")
    max_observation_words: int | None = Field(None, ge=1, description="cap on one <information> block")
    prompt_template: str = Field("paper", description="'paper', 'official', 'search_r1' or a format string")
    max_new_tokens: int = Field(500, ge=1, description="per-turn token cap")
    temperature: float = Field(0.0, ge=0)
    top_p: float = Field(1.0, gt=0, le=1)
    split_subqueries: bool = Field(
        True, description="split '##' into parallel sub-queries (False = Search-R1)"
    )

    def recursion_limit(self) -> int:
        """Supersteps an episode can take: planner + search + join per turn, invalid turns, answer."""
        return 3 * (self.max_turns + 1) + 10
