"""lamina.integrations.langchain_memory: LangChain's chat history and retriever over lamina.Memory,
used as LangChain uses them (RunnableWithMessageHistory around a fake chat model, a retriever
in a chain), and the docs' example."""

from __future__ import annotations

import asyncio

import pytest
from integkit import memory_fixture, need

need("langchain_core")

from langchain_core.chat_history import BaseChatMessageHistory  # noqa: E402
from langchain_core.documents import Document  # noqa: E402
from langchain_core.language_models.fake_chat_models import FakeListChatModel  # noqa: E402
from langchain_core.messages import AIMessage, ChatMessage, HumanMessage, SystemMessage, ToolMessage  # noqa: E402
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder  # noqa: E402
from langchain_core.runnables.history import RunnableWithMessageHistory  # noqa: E402

import lamina  # noqa: E402
from lamina.integrations.langchain_memory import LaminaChatMessageHistory, LaminaRetriever  # noqa: E402

memory = memory_fixture()


def test_history_round_trip(memory: lamina.Memory) -> None:
    h = LaminaChatMessageHistory(memory, user_id="alice", session_id="s1", human_name="Alice")
    assert isinstance(h, BaseChatMessageHistory) and h.messages == []
    h.add_messages(
        [
            SystemMessage("be brief"),
            HumanMessage("I moved to Lisbon last month"),
            AIMessage("Nice, how is Lisbon?"),
            AIMessage(content="", tool_calls=[{"name": "f", "args": {}, "id": "c1"}]),  # no text: not kept
            ToolMessage("42", tool_call_id="c1"),
            ChatMessage(role="critic", content="ok"),
        ]
    )
    h.add_user_message("I love it")
    got = h.messages
    assert [type(m).__name__ for m in got] == [
        "SystemMessage",
        "HumanMessage",
        "AIMessage",
        "ChatMessage",
        "ChatMessage",
        "HumanMessage",
    ]
    assert [m.content for m in got] == [
        "be brief",
        "I moved to Lisbon last month",
        "Nice, how is Lisbon?",
        "42",
        "ok",
        "I love it",
    ]
    assert [m.role for m in got if isinstance(m, ChatMessage)] == ["tool", "critic"]
    # the turns carry the speaker names, so the user's context names Alice
    assert "Alice: I moved to Lisbon" in memory.context("Where did Alice move?", user_id="alice").render()
    other = LaminaChatMessageHistory(memory, user_id="alice", session_id="s2")
    other.add_user_message("another session")
    assert len(h.messages) == 6 and [m.content for m in other.messages] == ["another session"]
    assert asyncio.run(h.aget_messages()) == got
    h.clear()
    assert h.messages == [] and [m.content for m in other.messages] == ["another session"]
    other.end_session()
    assert other.messages[0].content == "another session"


@pytest.mark.filterwarnings("ignore:RunnableWithMessageHistory is deprecated")
def test_history_in_a_runnable_with_message_history(memory: lamina.Memory) -> None:
    model = FakeListChatModel(responses=["Hello Alice!", "You live in Lisbon."])
    prompt = ChatPromptTemplate.from_messages([MessagesPlaceholder("history"), ("human", "{input}")])
    chain = RunnableWithMessageHistory(
        prompt | model,
        lambda session_id: LaminaChatMessageHistory(memory, user_id="alice", session_id=session_id),
        input_messages_key="input",
        history_messages_key="history",
    )
    cfg = {"configurable": {"session_id": "chat-1"}}
    assert chain.invoke({"input": "Hi, I am Alice and I live in Lisbon"}, config=cfg).content == "Hello Alice!"
    assert chain.invoke({"input": "Where do I live?"}, config=cfg).content == "You live in Lisbon."
    h = LaminaChatMessageHistory(memory, user_id="alice", session_id="chat-1")
    assert [m.content for m in h.messages] == [
        "Hi, I am Alice and I live in Lisbon",
        "Hello Alice!",
        "Where do I live?",
        "You live in Lisbon.",
    ]


def test_retriever_documents_carry_provenance(memory: lamina.Memory) -> None:
    memory.add(
        [
            {"speaker": "Alice", "text": "I adopted a cat named Miso"},
            {"speaker": "Alice", "text": "My sister plays the violin"},
            {"speaker": "Alice", "text": "I work as a nurse"},
        ],
        user_id="alice",
        session_id="s1",
        timestamp="2024-03-01T10:00:00Z",
    )
    r = LaminaRetriever(memory=memory, user_id="alice", k=2)
    docs = r.invoke("what is the name of my cat")
    assert len(docs) == 2 and all(isinstance(d, Document) for d in docs)
    top = docs[0]
    assert "Miso" in top.page_content and top.metadata["text"] == "I adopted a cat named Miso"
    assert top.metadata["user_id"] == "alice" and top.metadata["session_id"] == "s1"
    assert top.metadata["kind"] == "turn" and top.metadata["layer"] == "working"
    assert top.metadata["score"] >= docs[1].metadata["score"] and top.metadata["sources"]
    assert memory.get(top.metadata["id"]).text == top.metadata["text"]
    ctx = LaminaRetriever(memory=memory, user_id="alice", mode="context", budget=64).invoke("cat")
    assert ctx and "Miso" in ctx[0].page_content
    assert asyncio.run(r.ainvoke("violin"))[0].metadata["text"] == "My sister plays the violin"
    assert LaminaRetriever(memory=memory, user_id="nobody").invoke("cat") == []


def test_bad_input_raises(memory: lamina.Memory) -> None:
    with pytest.raises(TypeError, match="lamina.Memory"):
        LaminaChatMessageHistory("x", user_id="a", session_id="s")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="user_id"):
        LaminaChatMessageHistory(memory, user_id=" ", session_id="s")
    with pytest.raises(ValueError, match="differ"):
        LaminaChatMessageHistory(memory, user_id="a", session_id="s", human_name="x", ai_name="x")
    h = LaminaChatMessageHistory(memory, user_id="a", session_id="s")
    with pytest.raises(TypeError, match="BaseMessage"):
        h.add_messages(["hello"])  # type: ignore[list-item]
    with pytest.raises(ValueError):
        LaminaRetriever(memory=memory, user_id="a", k=0)
    with pytest.raises(ValueError):
        LaminaRetriever(memory=memory, user_id="a", mode="grep")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="lamina.Memory"):
        LaminaRetriever(memory="x", user_id="a")  # type: ignore[arg-type]
    assert memory.users() == []
