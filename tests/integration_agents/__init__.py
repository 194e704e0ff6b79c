"""Agents built with real frameworks (LangGraph, the OpenAI Agents SDK, PydanticAI, an MCP
client and server), run as processes that the integration tests kill and restart."""
