"""The chat agent's steps as ``create_agent`` has them, beside it on the same STAND-IN chat model
(tests/chat_stand_in.py: no LLM runs here): its nodes are named ``model`` and ``tools`` in
updates, stream metadata and ``interrupt_before``, and a question takes as many checkpointed
steps as in ``create_agent`` (what a growing thread pays for)."""

from __future__ import annotations

import pytest
from chat_stand_in import Films, ScriptModel, calls
from langgraph.checkpoint.memory import InMemorySaver

from parallelsearch import create_parallel_search_agent


def wiki(query: str) -> list[dict]:
    """Search the encyclopedia."""
    return [{"title": query, "text": f"the wiki on {query}"}]


def both(replies: list, **kw):
    from langchain.agents import create_agent

    ours = create_parallel_search_agent(ScriptModel(replies=replies), [wiki], **kw)
    theirs = create_agent(ScriptModel(replies=replies), [wiki], **kw)
    return ours, theirs


def script(turn: int) -> list:
    return [calls("a", "b", tool="wiki", turn=turn), "done"]


def test_updates_and_stream_metadata_name_the_nodes_as_create_agent_does():
    def seen(mode: str) -> list[list[str]]:
        out = []
        for agent in both(script(0)):
            parts = agent.stream({"messages": [("user", "q?")]}, stream_mode=mode)
            names = (
                [n for p in parts for n in p]
                if mode == "updates"
                else [m["langgraph_node"] for _, m in parts]
            )
            out.append(list(dict.fromkeys(names)))
        return out

    assert seen("updates") == [["model", "tools"]] * 2  # opening and closing an episode are internal
    assert seen("messages") == [["model", "tools"]] * 2


def test_a_question_takes_as_many_checkpoints_as_in_create_agent():
    replies = [reply for turn in range(3) for reply in script(turn)]
    counts = []
    for i, agent in enumerate(both(replies, checkpointer=InMemorySaver())):  # one saver, a thread each
        thread = {"configurable": {"thread_id": f"t{i}"}}
        for n in range(3):
            agent.invoke({"messages": [("user", f"question {n}?")]}, thread)
        counts.append(len(list(agent.get_state_history(thread))))
    assert counts == [15, 15]  # per question: its input, model, tools, model, the end


def test_interrupt_before_takes_create_agents_names_and_the_former_ones():
    for name, paused in [
        ("tools", "tools"),
        ("search", "tools"),
        ("model", "model"),
        ("planner", "model"),
    ]:
        model = ScriptModel(replies=script(0))
        agent = create_parallel_search_agent(
            model, [wiki], interrupt_before=[name], checkpointer=InMemorySaver()
        )
        thread = {"configurable": {"thread_id": name}}
        agent.invoke({"messages": [("user", "q?")]}, thread)
        assert agent.get_state(thread).next == (paused,), name
    after_join = create_parallel_search_agent(
        ScriptModel(replies=script(0)), [wiki], interrupt_after=["join"], checkpointer=InMemorySaver()
    )  # the paper graphs' fan-in: after it is after the tools step
    after_join.invoke({"messages": [("user", "q?")]}, {"configurable": {"thread_id": "j"}})
    assert after_join.get_state({"configurable": {"thread_id": "j"}}).next == ("model",)
    with pytest.raises(ValueError, match="interrupt_after=\\['tools'\\]"):
        create_parallel_search_agent(ScriptModel(replies=["x"]), [wiki], interrupt_before=["join"])
    with pytest.raises(ValueError, match="no 'begin' node"):  # the model step opens the episode
        create_parallel_search_agent(ScriptModel(replies=["x"]), [wiki], interrupt_after=["begin"])


@pytest.mark.parametrize("where", ["interrupt_before", "interrupt_after"])
def test_an_interrupt_at_answer_keeps_the_answer_step(where):
    """The model step closes the episode itself unless a run asks to pause at ``answer``: then the
    answer step stays and the run pauses there (before it: the episode still open until resumed)."""
    agent = create_parallel_search_agent(
        ScriptModel(replies=script(0)), [wiki], checkpointer=InMemorySaver(), **{where: ["answer"]}
    )
    thread = {"configurable": {"thread_id": where}}
    steps = [n for part in agent.stream({"messages": [("user", "q?")]}, thread) for n in part]
    if where == "interrupt_before":
        assert agent.get_state(thread).next == ("answer",), steps
        assert agent.get_state(thread).values["history"][-1]["status"] == "running"
        steps += [n for part in agent.stream(None, thread) for n in part]
    assert "answer" in steps, steps
    values = agent.get_state(thread).values
    assert values["history"][-1]["status"] == "answered" and values["answer"] == "done"


def test_new_input_on_a_paused_episode_opens_a_new_one():
    """A run with input opens an episode even when the last one is still running (here paused
    before its searches): the same question again is a new episode, the paused one abandoned;
    resuming instead goes on with the paused one."""
    model = ScriptModel(replies=[calls("a", turn=0), calls("b", turn=1), "done", "done"])
    agent = create_parallel_search_agent(
        model, Films(), interrupt_before=["tools"], checkpointer=InMemorySaver()
    )
    thread = {"configurable": {"thread_id": "t"}}
    agent.invoke({"question": "q?"}, thread)
    agent.invoke({"question": "q?"}, thread)
    out = agent.invoke(None, thread)  # resume: the searches run, the episode goes on
    history = agent.get_state(thread).values["history"]
    assert [(h["episode"], h["status"]) for h in history] == [(0, "abandoned"), (1, "answered")]
    assert out["answer"] == "done" and out["policy_calls"] == 2 and out["search_rounds"] == 1
